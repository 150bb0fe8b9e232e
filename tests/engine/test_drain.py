"""The mock engine drains like a graceful server, and the pod's preStop hook waits for it.

Issue 11, case 5: sent SIGTERM during a 30,000-token stream, the mock engine cut the stream
without ``[DONE]``. Now SIGTERM refuses new requests (503), fails ``/health`` (readiness drops),
keeps ``/metrics``, finishes what it has and exits 0. The preStop program of the pod template
(:data:`llmscale.controller.manifests.podtemplate.DRAIN_SCRIPT`) returns only once the engine's running and
waiting requests are 0. Real processes over real HTTP.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

import pytest
from tests.engine.conftest import Engine

from llmscale.controller.manifests.podtemplate import DRAIN_SCRIPT

MODEL = "llama-3.1-8b"
#: 20 engine seconds a wall second: a 30,000-token stream (about 7 ms a decode step on an H100)
#: lasts about 11 s of wall time.
TIME_SCALE = "20"
LONG_TOKENS = 30_000
NAMES = "vllm:num_requests_running,vllm:num_requests_waiting"


@dataclass
class Stream:
    """A streaming completion read in a thread: every SSE ``data:`` payload, in order."""

    url: str
    max_tokens: int
    payloads: list[str] = field(default_factory=list)
    first_chunk: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None
    thread: threading.Thread | None = None

    def start(self) -> Stream:
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        return self

    def _run(self) -> None:
        body = json.dumps({"model": MODEL, "prompt": "hello", "max_tokens": self.max_tokens, "stream": True,
                           "stream_options": {"include_usage": True}}).encode()
        request = urllib.request.Request(self.url + "/v1/completions", body, {"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=120) as r:
                for raw in r:
                    line = raw.decode().strip()
                    if line.startswith("data: "):
                        self.payloads.append(line.removeprefix("data: "))
                        self.first_chunk.set()
        except BaseException as exc:  # recorded for the assertion
            self.error = exc
        finally:
            self.first_chunk.set()

    def join(self, timeout_s: float) -> None:
        assert self.thread is not None
        self.thread.join(timeout_s)
        assert not self.thread.is_alive(), f"stream still running after {timeout_s} s"

    def completion_tokens(self) -> int | None:
        usage = [json.loads(p)["usage"] for p in self.payloads if p != "[DONE]" and json.loads(p).get("usage")]
        return int(usage[-1]["completion_tokens"]) if usage else None


def status_of(url: str, data: dict[str, Any] | None = None) -> int:
    request = urllib.request.Request(url, json.dumps(data).encode() if data else None,
                                     {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            return int(r.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def running(engine: Engine) -> float:
    return engine.value("vllm:num_requests_running") + engine.value("vllm:num_requests_waiting")


def wait_until(what: str, check: Callable[[], bool], timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


StartEngine = Callable[..., AbstractContextManager[Engine]]


def long_engine(start_engine: StartEngine) -> AbstractContextManager[Engine]:
    return start_engine("--model", MODEL, "--gpu", "h100-sxm", "--time-scale", TIME_SCALE,
                        "--max-model-len", "32768")


def test_sigterm_during_a_30000_token_stream_finishes_it_with_done(start_engine: StartEngine) -> None:
    with long_engine(start_engine) as engine:
        stream = Stream(engine.base_url, LONG_TOKENS).start()
        assert stream.first_chunk.wait(20) and stream.error is None, stream.error
        engine.proc.send_signal(signal.SIGTERM)
        # Draining: no new work, readiness fails, metrics still answer.
        wait_until("/health to fail", lambda: status_of(engine.base_url + "/health") == 503)
        assert status_of(engine.base_url + "/v1/completions", {"model": MODEL, "prompt": "x", "max_tokens": 4}) == 503
        assert status_of(engine.base_url + "/metrics") == 200
        assert running(engine) == 1
        stream.join(90)
        assert stream.error is None, stream.error
        assert stream.payloads[-1] == "[DONE]", stream.payloads[-3:]
        assert stream.completion_tokens() == LONG_TOKENS
        assert engine.proc.wait(timeout=10) == 0, engine.log()
        assert "Drained mock engine" in engine.log()


def test_sigterm_when_idle_exits_at_once(start_engine: StartEngine) -> None:
    with long_engine(start_engine) as engine:
        started = time.monotonic()
        engine.proc.send_signal(signal.SIGTERM)
        assert engine.proc.wait(timeout=10) == 0
        assert time.monotonic() - started < 5


def test_a_second_sigterm_stops_without_waiting(start_engine: StartEngine) -> None:
    with long_engine(start_engine) as engine:
        stream = Stream(engine.base_url, LONG_TOKENS).start()
        assert stream.first_chunk.wait(20)
        engine.proc.send_signal(signal.SIGTERM)
        wait_until("/health to fail", lambda: status_of(engine.base_url + "/health") == 503)
        engine.proc.send_signal(signal.SIGTERM)
        engine.proc.wait(timeout=10)
        stream.join(30)
        assert "[DONE]" not in stream.payloads  # cut: this is what the kubelet's SIGKILL would do too


# ------------------------------------------------------------------------------------------ preStop


def prestop(url: str, delay_s: float = 0.0) -> subprocess.Popen[bytes]:
    """The preStop hook's program as the pod template runs it, pointed at ``url``."""
    return subprocess.Popen([sys.executable, "-c", DRAIN_SCRIPT, url + "/metrics", NAMES, str(delay_s)])


def test_prestop_returns_only_when_no_request_runs(start_engine: StartEngine) -> None:
    with long_engine(start_engine) as engine:
        stream = Stream(engine.base_url, 8_000).start()
        assert stream.first_chunk.wait(20)
        hook = prestop(engine.base_url)
        time.sleep(1.0)
        assert hook.poll() is None, "the preStop hook returned while a request was running"
        stream.join(60)
        assert stream.payloads[-1] == "[DONE]"
        assert hook.wait(timeout=10) == 0


@pytest.mark.parametrize("delay_s", [pytest.param(0.0, id="no delay"), pytest.param(1.0, id="1 s endpoint delay")])
def test_prestop_returns_after_its_delay_when_idle(start_engine: StartEngine, delay_s: float) -> None:
    with long_engine(start_engine) as engine:
        started = time.monotonic()
        assert prestop(engine.base_url, delay_s).wait(timeout=20) == 0
        took = time.monotonic() - started
        assert delay_s <= took < delay_s + 5, took


def test_prestop_returns_when_the_engine_does_not_answer() -> None:
    # A pod deleted during its cold start: nothing listens, nothing can be in flight.
    assert prestop("http://127.0.0.1:9").wait(timeout=20) == 0
