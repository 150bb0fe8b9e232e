"""``llmscale.loadgen.replay`` against a real ``llmscale engine`` process on 127.0.0.1.

Each test starts the mock engine as a child process (stopped by its PID) and replays a small,
hand-made trace, so every expectation can be worked out by hand: when requests leave (open loop),
how many tokens come back, what is dropped at the in-flight bound, what the deadline cancels.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import numpy as np
import pytest

from llmscale.loadgen import ReplayReport, RequestResult, replay
from llmscale.localcluster.ports import free_port
from llmscale.sim.trace import Trace

_LISTENING = re.compile(r"Started vLLM-compatible server for \S+ on http://([\d.]+):(\d+)")
MODEL = "llama-3.1-8b"


def _trace(arrivals_s: list[float], prompt: int, output: int, start_s: float = 1000.0) -> Trace:
    n = len(arrivals_s)
    return Trace(
        arrival_s=np.asarray([start_s + a for a in arrivals_s], dtype=np.float64),
        prompt_tokens=np.full(n, prompt, dtype=np.int64),
        output_tokens=np.full(n, output, dtype=np.int64),
        is_batch=np.zeros(n, dtype=np.bool_),
        start_s=start_s,
        duration_s=float(max(arrivals_s) if arrivals_s else 0.0),
        source="hand-made",
    )


@pytest.fixture(scope="module")
def engine_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Base URL of a mock Llama-3.1-8B on one H100 at real-time speed, 4 running requests at most."""
    log_path = tmp_path_factory.mktemp("engine") / "engine.log"
    argv = [
        sys.executable, "-m", "llmscale.cli", "engine", "--host", "127.0.0.1", "--port", "0",
        "--model", MODEL, "--gpu", "h100-sxm", "--max-model-len", "4096", "--max-num-seqs", "4",
    ]
    with log_path.open("wb") as log_file:
        proc = subprocess.Popen(argv, stdout=log_file, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while not (m := _LISTENING.search(log_path.read_text())):
            assert proc.poll() is None, f"engine exited with {proc.returncode}:\n{log_path.read_text()}"
            assert time.monotonic() < deadline, f"engine did not start:\n{log_path.read_text()}"
            time.sleep(0.05)
        yield f"http://{m.group(1)}:{m.group(2)}"
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


ARRIVALS = [0.0, 0.5, 1.0, 1.5, 2.0, 2.5]


async def _replayed(engine_url: str) -> tuple[ReplayReport, list[RequestResult]]:
    # 6 requests over 2.5 trace seconds at speedup 5: they leave 0.1 s apart in wall time.
    seen: list[RequestResult] = []
    report = await replay(
        _trace(ARRIVALS, prompt=64, output=8), f"{engine_url}/v1/completions", MODEL,
        speedup=5.0, deadline_s=30, on_result=seen.append,
    )
    assert report.sent == 6 and report.dropped == 0 and report.in_flight == 0
    assert report.errors == 0, [r.status for r in report.results]
    return report, seen


async def test_requests_leave_on_the_trace_schedule(engine_url: str) -> None:
    report, seen = await _replayed(engine_url)
    assert sorted(r.sent_at for r in report.results) == pytest.approx([a / 5 for a in ARRIVALS])
    assert len(seen) == 6, "on_result is called once per finished request"


async def test_requests_get_their_trace_sizes(engine_url: str) -> None:
    report, _ = await _replayed(engine_url)
    assert all(r.completion_tokens == 8 and r.prompt_tokens == 64 for r in report.results)
    assert all(r.ttft_s is None for r in report.results), "non-streaming requests measure no TTFT"


async def test_streaming_measures_ttft_before_the_last_token(engine_url: str) -> None:
    report = await replay(
        _trace([0.0, 0.1], prompt=512, output=40), f"{engine_url}/v1/completions", MODEL,
        stream=True, deadline_s=30,
    )
    assert report.errors == 0
    for r in report.results:
        assert r.completion_tokens == 40
        assert r.ttft_s is not None and 0 < r.ttft_s < r.e2e_s


async def test_arrivals_beyond_the_in_flight_bound_are_dropped_not_queued(engine_url: str) -> None:
    # 2 in flight at most; each request decodes 400 tokens (seconds at real-time speed), so the
    # 3rd..6th arrivals, 10 ms apart, find the bound reached and are counted as dropped.
    report = await replay(
        _trace([0.0, 0.01, 0.02, 0.03, 0.04, 0.05], prompt=16, output=400),
        f"{engine_url}/v1/completions", MODEL, max_in_flight=2, deadline_s=60,
    )
    assert report.sent == 2 and report.dropped == 4
    assert len(report.results) == 2 and report.errors == 0


async def test_the_deadline_cancels_what_is_still_open(engine_url: str) -> None:
    # A 5,000-token answer takes far longer than the 1 s deadline; the 2nd arrival is past it.
    started = time.monotonic()
    report = await replay(
        _trace([0.0, 5.0], prompt=16, output=3000), f"{engine_url}/v1/completions", MODEL, deadline_s=1.0,
    )
    assert time.monotonic() - started < 5
    assert report.sent == 1 and report.in_flight == 1 and report.results == []


async def test_max_requests_bounds_the_count(engine_url: str) -> None:
    report = await replay(
        _trace([0.0, 0.01, 0.02, 0.03], prompt=16, output=2), f"{engine_url}/v1/completions", MODEL,
        max_requests=2, deadline_s=30,
    )
    assert report.sent == 2 and len(report.results) == 2


async def test_an_unreachable_server_is_an_error_not_a_crash() -> None:
    port = free_port()  # nothing listens here
    report = await replay(_trace([0.0, 0.01], prompt=4, output=2), f"http://127.0.0.1:{port}/v1/completions",
                          MODEL, deadline_s=10)
    assert report.sent == 2 and report.errors == 2
    assert all(r.status == 0 for r in report.results)


async def test_a_wrong_model_name_is_reported_with_the_http_status(engine_url: str) -> None:
    report = await replay(_trace([0.0], prompt=4, output=2), f"{engine_url}/v1/completions", "no-such-model",
                          deadline_s=10)
    assert [r.status for r in report.results] == [404]


async def test_speedup_must_be_positive() -> None:
    with pytest.raises(ValueError, match="speedup"):
        await replay(_trace([0.0], 1, 1), "http://127.0.0.1:9/v1/completions", MODEL, speedup=0)

