"""Start real ``llmscale engine`` processes on 127.0.0.1 for the HTTP tests.

Each engine runs as a child process (``python -m llmscale.cli engine …``) on a port it picks itself
(``--port 0``); the fixture reads the port from the startup log line, so no port can be raced.
Every process started here is stopped by its PID.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

_LISTENING = re.compile(r"Started vLLM-compatible server for \S+ on http://([\d.]+):(\d+)")


@dataclass
class Engine:
    """A running mock engine: its process, base URL and log file."""

    proc: subprocess.Popen[bytes]
    base_url: str
    log_path: Path

    @property
    def v1(self) -> str:
        return self.base_url + "/v1"

    def get(self, path: str) -> tuple[int, bytes, str]:
        with urllib.request.urlopen(self.base_url + path, timeout=10) as r:
            return r.status, r.read(), r.headers.get("Content-Type", "")

    def samples(self) -> list[Sample]:
        """All samples of ``/metrics``, parsed by prometheus-client's text parser."""
        _, body, _ = self.get("/metrics")
        return [s for fam in text_string_to_metric_families(body.decode()) for s in fam.samples]

    def value(self, name: str, **labels: str) -> float:
        """Sum of the samples called ``name`` whose labels include ``labels``."""
        return sum(
            s.value
            for s in self.samples()
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
        )

    def log(self) -> str:
        return self.log_path.read_text()


def engine_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "llmscale.cli", "engine", "--host", "127.0.0.1", *args]


@contextmanager
def run_engine(log_dir: Path, *args: str, startup_timeout_s: float = 30.0) -> Iterator[Engine]:
    """Start an engine with ``args`` (``--port`` defaults to 0) and wait until it listens."""
    if "--port" not in args:
        args = (*args, "--port", "0")
    log_path = log_dir / f"engine-{time.monotonic_ns()}.log"
    with log_path.open("wb") as log_file:
        # A session of its own: under make test the unit suite runs at nice 19 in one session with the
        # e2e suite's pytest processes, and with autogroup scheduling on (as here) nice ranks only
        # within a session, so the engine, whose latencies the tests time on the wall clock, would
        # get almost no CPU while those are busy. Its own session gets a fair share, like the
        # cluster's components. Stopped by its PID (stop_process) all the same.
        proc = subprocess.Popen(engine_command(*args), stdout=log_file, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        deadline = time.monotonic() + startup_timeout_s
        while True:
            m = _LISTENING.search(log_path.read_text())
            if m:
                break
            if proc.poll() is not None:
                raise AssertionError(f"engine exited with {proc.returncode}:\n{log_path.read_text()}")
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"engine did not start in {startup_timeout_s} s:\n{log_path.read_text()}"
                )
            time.sleep(0.05)
        yield Engine(proc, f"http://{m.group(1)}:{m.group(2)}", log_path)
    finally:
        stop_process(proc)


def stop_process(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM by PID, then SIGKILL if it does not exit within 5 s."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


@pytest.fixture(scope="module")
def engine_8b(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    """Llama-3.1-8B on one H100, five times real time, 8192-token context."""
    with run_engine(
        tmp_path_factory.mktemp("engine"),
        "--model",
        "llama-3.1-8b",
        "--gpu",
        "h100-sxm",
        "--time-scale",
        "5",
        "--max-model-len",
        "8192",
    ) as e:
        yield e


@pytest.fixture
def start_engine(tmp_path: Path) -> Callable[..., AbstractContextManager[Engine]]:
    """``with start_engine("--model", …) as engine:`` starts an engine for one test."""

    def start(*args: str, **kw: float) -> AbstractContextManager[Engine]:
        return run_engine(tmp_path, *args, **kw)

    return start
