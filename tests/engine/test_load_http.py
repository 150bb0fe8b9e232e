"""End to end through HTTP: the cold start, steady decode load against the performance model, and
preemptions once the KV cache is full. Short runs; the exact fidelity is in test_scheduler.py."""

from __future__ import annotations

import asyncio
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import numpy
import openai
import pytest

from llmscale.localcluster.ports import free_port
from llmscale.model import GPU_PRESETS, MODEL_PRESETS, ReplicaModel

MODEL = "llama-3.1-8b"
RM = ReplicaModel(arch=MODEL_PRESETS[MODEL], gpu=GPU_PRESETS["h100-sxm"])


def test_cold_start_refuses_connections_until_weights_are_loaded(tmp_path: Path) -> None:
    import subprocess
    import sys

    port = free_port()
    log = tmp_path / "engine.log"
    cold_s, scale = 30.0, 10.0  # 30 engine seconds at 10× = 3 s of wall time
    with log.open("wb") as f:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "llmscale.cli",
                "engine",
                "--model",
                MODEL,
                "--gpu",
                "h100-sxm",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--max-model-len",
                "4096",
                "--cold-start-seconds",
                str(cold_s),
                "--time-scale",
                str(scale),
            ],
            stdout=f,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 30
        while "Loading weights" not in log.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.02)
        loading_at = time.monotonic()
        url = f"http://127.0.0.1:{port}/health"
        refused = 0
        while True:
            try:
                with urllib.request.urlopen(url, timeout=2) as r:
                    assert r.status == 200
                    break
            except urllib.error.URLError as exc:
                assert isinstance(exc.reason, ConnectionRefusedError), exc
                refused += 1
            assert time.monotonic() - loading_at < 15, log.read_text()
            time.sleep(0.05)
        ready_after = time.monotonic() - loading_at
        assert refused > 10  # it really was probed while loading
        assert cold_s / scale - 0.1 <= ready_after <= cold_s / scale + 3.0
    finally:
        proc.terminate()
        proc.wait(timeout=10)


async def _stream_one(client: openai.AsyncOpenAI, prompt: int, out: int, times: list[float]) -> None:
    """Send one streaming request; append the wall time of every output token to ``times``."""
    stream = await client.completions.create(
        model=MODEL, prompt=[7] * prompt, max_tokens=out, stream=True, extra_body={"ignore_eos": True}
    )
    async for chunk in stream:
        if chunk.choices and chunk.choices[0].text:
            now = time.monotonic()
            times.extend([now] * len(chunk.choices[0].text.split()))  # merged chunks: same time


def _raise_failed(tasks: list[asyncio.Task[None]]) -> None:
    """Raise the error of a stream that failed: a poll waiting for its tokens would wait for ever."""
    for task in tasks:
        if task.done() and task.exception() is not None:
            raise AssertionError("a stream failed") from task.exception()


def _itl_histogram(engine: Any) -> tuple[float, float]:
    """(sum, count) of the ITL histogram from one scrape (two scrapes could straddle a step)."""
    got = {
        s.name: s.value for s in engine.samples() if s.name.startswith("vllm:inter_token_latency_seconds_")
    }
    return got["vllm:inter_token_latency_seconds_sum"], got["vllm:inter_token_latency_seconds_count"]


def _engine_progress(engine: Any) -> tuple[float, float, float, float]:
    """(requests running, generation tokens, ITL sum, ITL count) from one scrape of the engine."""
    got: dict[str, float] = {}
    for s in engine.samples():
        got[s.name] = got.get(s.name, 0.0) + s.value
    return (got.get("vllm:num_requests_running", 0.0), got.get("vllm:generation_tokens_total", 0.0),
            got.get("vllm:inter_token_latency_seconds_sum", 0.0), got.get("vllm:inter_token_latency_seconds_count", 0.0))


async def measure_engine_steady_decode(engine: Any, batch: int, prompt: int, out: int) -> dict[str, float]:
    """As :func:`measure_steady_decode`, with the window judged by the engine's own counters: it
    opens once all ``batch`` requests run and have 5 tokens each, and closes 5 tokens before their
    end. For many streams on a busy machine, where the client's parsing trails the engine."""
    client = openai.AsyncOpenAI(base_url=engine.v1, api_key="unused", max_retries=0, timeout=120)
    times: list[list[float]] = [[] for _ in range(batch)]
    tasks = [asyncio.create_task(_stream_one(client, prompt, out, t)) for t in times]
    while True:
        running, tokens, sum0, n0 = await asyncio.to_thread(_engine_progress, engine)
        if running >= batch and tokens >= 5 * batch:
            break
        # A window that never opens fails here, not at the suite's timeout: once a stream has
        # ended, the batch can no longer all run at once (the client sent them too slowly).
        assert not any(t.done() for t in tasks), (
            f"a stream ended before all {batch} ran at once ({running:.0f} running, {tokens:.0f} tokens): "
            "the client sent them slower than the engine answers")
        await asyncio.sleep(0.005)
    open_tokens = tokens
    while True:
        _, tokens, sum1, n1 = await asyncio.to_thread(_engine_progress, engine)
        if tokens >= (out - 5) * batch or all(t.done() for t in tasks):
            break
        await asyncio.sleep(0.005)
    await asyncio.gather(*tasks)
    await client.close()
    assert all(len(t) == out for t in times)
    assert n1 > n0, "no ITL observed inside the steady window"
    mid_index = (open_tokens + tokens) / 2 / batch
    return {
        "engine_itl_s": (sum1 - sum0) / (n1 - n0),
        "predicted_itl_s": RM.decode_step_time(batch, prompt + mid_index),
    }


def _median_slope(arrivals: list[float]) -> float:
    """The median of the slopes between every two of ``arrivals`` against their token index, seconds a
    token (Theil 1950, Sen 1968). A client process descheduled for a while reads the tokens that
    arrived meanwhile at once, late and bunched: (last − first) / count moved a 6 ms ITL by 8 % on
    a busy shared machine, and a least-squares slope read 5.59 ms against the engine's 6.02 when the
    bunch came near the window's end. The median of the pairwise slopes is moved by neither."""
    y = numpy.asarray(arrivals, dtype=numpy.float64)
    i, j = numpy.triu_indices(len(y), k=1)
    return float(numpy.median((y[j] - y[i]) / (j - i)))


async def measure_steady_decode(
    engine: Any, batch: int, prompt: int, out: int, scale: float
) -> dict[str, float]:
    """Hold ``batch`` concurrent streams; measure ITL only while all of them decode.

    Requests reach the engine a few steps apart, and each late prompt's prefill rides in a decode
    step (chunked prefill) and lengthens it, as in vLLM. The steady window therefore opens once every
    stream has 5 tokens and closes when the first stream is 5 tokens from its end; the engine's
    histogram is read at both ends and the difference is the window's.
    """
    client = openai.AsyncOpenAI(base_url=engine.v1, api_key="unused", max_retries=0, timeout=120)
    times: list[list[float]] = [[] for _ in range(batch)]
    tasks = [asyncio.create_task(_stream_one(client, prompt, out, t)) for t in times]
    while min(len(t) for t in times) < 5:
        _raise_failed(tasks)
        await asyncio.sleep(0.002)
    t_open = time.monotonic()
    sum0, n0 = await asyncio.to_thread(_itl_histogram, engine)
    while max(len(t) for t in times) < out - 5:
        _raise_failed(tasks)
        await asyncio.sleep(0.002)
    sum1, n1 = await asyncio.to_thread(_itl_histogram, engine)
    t_close = time.monotonic()
    # A client parsing many streams on a busy machine can trail the engine by the whole steady
    # part: the engine then decoded nothing between the two reads. The window's steps are then
    # unknown to this measurement, not zero; say so instead of dividing by zero.
    assert n1 > n0, (f"the client trailed the engine past the steady window ({batch} streams): "
                     "no ITL observed between the two reads")
    await asyncio.gather(*tasks)
    await client.close()
    assert all(len(t) == out for t in times)
    client_itls = []
    for t in times:
        inside = [x for x in t if t_open <= x <= t_close]
        client_itls.append(_median_slope(inside) * scale)
    mid_index = sum(sum(1 for x in t if x <= (t_open + t_close) / 2) for t in times) / batch
    return {
        "engine_itl_s": (sum1 - sum0) / (n1 - n0),
        "client_itl_s": sum(client_itls) / batch,
        "predicted_itl_s": RM.decode_step_time(batch, prompt + mid_index),
    }


@pytest.mark.timing
@pytest.mark.parametrize(
    ("batch", "scale", "out", "check_client"),
    [
        # The client's window must outlast a lag of the client process: on a busy 2-core machine a
        # client that fell behind and caught up within a 150-token window at full speed (0.9 s)
        # read 5.26 ms against the engine's 6.01 (a fresh-clone run of `make test`). At half speed
        # and 400 tokens the window is about 4.7 s, and the same lag moves its slope about 2 %.
        pytest.param(1, 0.5, 400, True, id="batch-1"),
        pytest.param(8, 0.5, 300, True, id="batch-8"),
        pytest.param(32, 0.25, 150, True, id="batch-32"),
        # 64 streams parsed by the openai client on a shared 2-core machine can lag the engine by
        # more than 5 %; the engine's own figures are checked, the client's are not. At a quarter
        # speed each stream outlives the client's sending of all 64 (at full speed on a loaded CI
        # machine the first streams ended before the last began, and the window never opened).
        pytest.param(64, 0.25, 150, False, id="batch-64"),
    ],
)
async def test_steady_decode_over_http_matches_the_model(
    start_engine: Any, batch: int, scale: float, out: int, check_client: bool
) -> None:
    prompt = 256
    with start_engine(
        "--model", MODEL, "--gpu", "h100-sxm", "--max-model-len", "4096", "--time-scale", str(scale)
    ) as engine:
        if check_client:
            m = await measure_steady_decode(engine, batch, prompt, out, scale)
        else:
            m = await measure_engine_steady_decode(engine, batch, prompt, out)
        assert engine.value("vllm:generation_tokens_total") == batch * out
    # The engine's own histogram (engine seconds) against the model: within 5 %.
    assert m["engine_itl_s"] == pytest.approx(m["predicted_itl_s"], rel=0.05)
    # What the client saw, in wall seconds scaled back to engine seconds: within 5 % too.
    if check_client:
        assert m["client_itl_s"] == pytest.approx(m["engine_itl_s"], rel=0.05)


async def test_preemptions_appear_when_the_kv_cache_is_full(start_engine: Any) -> None:
    # 64 blocks = 1024 tokens of KV; 8 requests of 200 + 200 tokens need 8 × 25 = 200 blocks.
    with start_engine(
        "--model",
        MODEL,
        "--gpu",
        "h100-sxm",
        "--num-gpu-blocks-override",
        "64",
        "--max-model-len",
        "1024",
        "--time-scale",
        "20",
    ) as engine:
        client = openai.AsyncOpenAI(base_url=engine.v1, api_key="unused", max_retries=0, timeout=60)
        results = await asyncio.gather(
            *(client.completions.create(model=MODEL, prompt=[1] * 200, max_tokens=200) for _ in range(8))
        )
        await client.close()
        assert all(r.usage is not None and r.usage.completion_tokens == 200 for r in results)
        assert engine.value("vllm:num_preemptions_total") > 0
        assert engine.value("vllm:request_success_total", finished_reason="length") == 8
        assert engine.value("vllm:kv_cache_usage_perc") == 0


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    import os

    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def test_idle_engine_does_not_spin(engine_8b: Any) -> None:
    time.sleep(0.5)  # let earlier requests of the module drain
    before = _cpu_seconds(engine_8b.proc.pid)
    time.sleep(2.0)
    assert _cpu_seconds(engine_8b.proc.pid) - before < 0.1  # seconds of CPU in 2 s of idling


async def test_client_disconnect_aborts_the_request(start_engine: Any) -> None:
    import aiohttp

    with start_engine(
        "--model", MODEL, "--gpu", "h100-sxm", "--max-model-len", "4096", "--time-scale", "0.5"
    ) as engine:
        async with aiohttp.ClientSession() as session:
            resp = await session.post(
                engine.v1 + "/completions",
                json={"model": MODEL, "prompt": "hi", "max_tokens": 2000, "stream": True},
            )
            got = 0
            async for line in resp.content:
                if line.startswith(b"data: "):
                    got += 1
                if got == 3:
                    break
            resp.close()  # drop the connection mid-stream
        deadline = time.monotonic() + 10
        while engine.value("vllm:request_success_total", finished_reason="abort") < 1:
            assert time.monotonic() < deadline, engine.log()
            await asyncio.sleep(0.05)
        assert engine.value("vllm:num_requests_running") == 0
        assert engine.value("vllm:kv_cache_usage_perc") == 0
        assert engine.value("vllm:generation_tokens_total") < 2000
