"""The calibration client's token timing over real HTTP when tokens reach it bunched.

A stand-in server streams one token every 20 ms from its own thread and event loop. Tokens reach the
client bunched in two ways: the server writes several events at once, or the client's own event
loop is off the CPU while events wait in the socket (what a nice-19 process on a busy machine sees).
Either way the gaps must stay about 20 ms; a gap of zero per waiting event would put the median ITL
near zero and the fit's error in the hundreds (a CI run read 537).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator

import aiohttp
import numpy as np
import pytest
from aiohttp import web
from tests.aioserve import start as start_app
from tests.aioserve import url_of

from llmscale.calibrate.client import PROMPT_ID_HIGH, PROMPT_ID_LOW, EngineClient, EngineUnreachable

pytestmark = pytest.mark.timing

STEP_S = 0.02
TOKENS = 40


def _event(token: str, logprobs: bool = True) -> bytes:
    choice: dict[str, object] = {"index": 0, "text": token}
    choice["logprobs"] = {"tokens": [token]} if logprobs else None
    return b"data: " + json.dumps({"choices": [choice]}).encode() + b"\n\n"


async def _stream(request: web.Request) -> web.StreamResponse:
    """``burst`` events per write, one write every ``burst`` × 20 ms, with or without logprobs (the
    path says which); then a finish chunk and ``[DONE]``."""
    burst = int(request.match_info["burst"])
    logprobs = request.match_info["logprobs"] == "logprobs"
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    loop = asyncio.get_running_loop()
    await resp.write(_event("t", logprobs))  # the first token: TTFT
    t0, sent = loop.time(), 1
    while sent < TOKENS:
        n = min(burst, TOKENS - sent)
        # On a fixed schedule, so that a busy machine bunches the tokens rather than slowing them.
        await asyncio.sleep(max(t0 + (sent + n - 1) * STEP_S - loop.time(), 0.0))
        await resp.write(b"".join(_event("t", logprobs) for _ in range(n)))
        sent += n
    finish = {"choices": [{"index": 0, "text": "", "logprobs": None, "finish_reason": "length"}]}
    await resp.write(b"data: " + json.dumps(finish).encode() + b"\n\ndata: [DONE]\n\n")
    return resp


#: /v1/models answers an engine should not give: each must read as "no model", not a crash.
ODD_MODELS = {
    "strings": {"data": ["a"]},
    "empty-card": {"data": [{}]},
    "not-a-list": {"data": 5},
    "a-list": [{"id": "m"}],
}


async def _odd_models(request: web.Request) -> web.Response:
    return web.json_response(ODD_MODELS[request.match_info["kind"]])


async def _html(request: web.Request) -> web.Response:
    return web.Response(text="<html><body>not metrics</body></html>", content_type="text/html")


@pytest.fixture(scope="module")
def server_url() -> Iterator[str]:
    """The stand-in server on 127.0.0.1, in a thread of its own (so it streams on while the test's
    event loop is blocked)."""
    loop = asyncio.new_event_loop()
    started = threading.Event()
    url: list[str] = []
    runner: list[web.AppRunner] = []

    async def start() -> None:
        app = web.Application()
        app.router.add_post("/{burst}/{logprobs}/v1/completions", _stream)
        app.router.add_get("/odd/{kind}/v1/models", _odd_models)
        app.router.add_get("/odd/{kind}/metrics", _html)
        r = await start_app(app)
        url.append(url_of(r))
        runner.append(r)
        started.set()

    thread = threading.Thread(target=lambda: (loop.run_until_complete(start()), loop.run_forever()), daemon=True)
    thread.start()
    assert started.wait(10), "the stand-in server did not start"
    try:
        yield url[0]
    finally:
        asyncio.run_coroutine_threadsafe(runner[0].cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)


async def _gaps(base_url: str, stall_s: float = 0.0) -> tuple[float, ...]:
    """One streamed completion's token gaps, seconds; with ``stall_s``, the client's event loop is
    blocked for that long, then free for 30 ms, while it reads."""
    loop = asyncio.get_running_loop()
    stalls: list[asyncio.TimerHandle] = []

    def stall() -> None:
        time.sleep(stall_s)
        stalls.append(loop.call_later(0.03, stall))

    async with aiohttp.ClientSession() as session:
        if stall_s:
            stalls.append(loop.call_later(0.03, stall))
        try:
            stream = await EngineClient(base_url, session, "m").complete(4, TOKENS)
        finally:
            for handle in stalls:
                handle.cancel()
    assert stream.ok and stream.ttft_s is not None
    return stream.gaps_s


@pytest.mark.parametrize("mode", ["1/logprobs", "5/logprobs", "5/text"])
async def test_bunched_tokens_share_their_arrivals_gap(server_url: str, mode: str) -> None:
    gaps = np.array(await _gaps(f"{server_url}/{mode}"))
    assert len(gaps) == TOKENS - 1
    # Each token's share of its arrival's gap: about one step. A token timed apart from the others of
    # its write would read a gap near zero: 4 in 5 of them in the 5-event modes. A server thread that
    # runs late writes the events it owes back to back, and those few gaps are near zero rightly (a
    # CI run read one of 67 µs in the 1-event mode).
    assert 0.5 * STEP_S <= float(np.median(gaps)) <= 2 * STEP_S
    assert float(np.mean(gaps < 0.1 * STEP_S)) <= 0.25


async def test_a_client_off_the_cpu_still_reads_one_step_a_token(server_url: str) -> None:
    gaps = np.array(await _gaps(f"{server_url}/1/logprobs", stall_s=0.12))
    assert len(gaps) == TOKENS - 1
    # While the loop is blocked the server streams on; the events waiting in the socket are one read.
    assert 0.5 * STEP_S <= float(np.median(gaps)) <= 2 * STEP_S
    assert float(np.sum(gaps)) == pytest.approx((TOKENS - 1) * STEP_S, rel=0.3)


def test_two_runs_never_send_the_same_prompt() -> None:
    """An engine that served an earlier run would answer a repeated prompt from its prefix cache."""
    first, second = (EngineClient("http://127.0.0.1:1", None, "m") for _ in range(2))  # type: ignore[arg-type]
    a = first.prompt_rng.integers(PROMPT_ID_LOW, PROMPT_ID_HIGH, size=16)
    b = second.prompt_rng.integers(PROMPT_ID_LOW, PROMPT_ID_HIGH, size=16)
    assert not np.array_equal(a, b)


@pytest.mark.parametrize("kind", sorted(ODD_MODELS))
def test_an_odd_model_list_reads_as_no_model(server_url: str, kind: str) -> None:
    async def probe() -> None:
        async with aiohttp.ClientSession() as session:
            await EngineClient(f"{server_url}/odd/{kind}", session).probe()

    with pytest.raises(EngineUnreachable, match="lists no model"):
        asyncio.run(probe())


def test_metrics_that_are_not_prometheus_text_read_as_unknown(server_url: str) -> None:
    async def running() -> float | None:
        async with aiohttp.ClientSession() as session:
            return await EngineClient(f"{server_url}/odd/html", session, "m").running()

    assert asyncio.run(running()) is None
