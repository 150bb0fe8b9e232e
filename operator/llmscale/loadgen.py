"""Open-loop trace replay against an OpenAI-compatible endpoint (the demo's and e2e suite's load).

Requests leave at the trace's arrival times (divided by ``speedup``), whatever the server does —
an open loop, as production traffic is, so a slow server builds a queue instead of slowing the
load. Each request sends exactly the trace's prompt length (the prompt as a list of token ids,
which ``/v1/completions`` accepts) and asks for exactly the trace's output length
(``max_tokens`` with ``ignore_eos``), so the engine sees the trace's request sizes.

Bounded in count and time: it stops after ``max_requests`` or ``deadline_s`` and never keeps more
than ``max_in_flight`` requests open (excess arrivals are counted as ``dropped``, not queued).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import aiohttp
import numpy as np

from llmscale.sim.trace import Trace

__all__ = ["ReplayReport", "RequestResult", "replay"]


@dataclass(frozen=True, slots=True)
class RequestResult:
    """One request's outcome, times in seconds of the client's monotonic clock.

    Attributes:
        sent_at: when the request left, seconds since the replay started.
        prompt_tokens / output_tokens: sizes asked for (tokens).
        status: HTTP status (0 when the connection failed).
        ttft_s: time to the first streamed token (streaming only), seconds.
        e2e_s: time to the last byte, seconds.
        completion_tokens: tokens the server reported generating (``usage``), or 0.
    """

    sent_at: float
    prompt_tokens: int
    output_tokens: int
    status: int
    e2e_s: float
    ttft_s: float | None = None
    completion_tokens: int = 0

    @property
    def ok(self) -> bool:
        """Whether the server answered 200."""
        return self.status == 200


@dataclass
class ReplayReport:
    """What a replay did: results of finished requests and counts of the rest."""

    results: list[RequestResult] = field(default_factory=list)
    sent: int = 0
    dropped: int = 0
    in_flight: int = 0

    @property
    def errors(self) -> int:
        """Requests that finished with a non-200 status or a connection failure."""
        return sum(1 for r in self.results if not r.ok)


async def _one(
    session: aiohttp.ClientSession,
    url: str,
    model: str,
    prompt_tokens: int,
    output_tokens: int,
    stream: bool,
    sent_at: float,
    t0: float,
) -> RequestResult:
    body = {
        "model": model,
        # Token ids: the engine counts exactly this many prompt tokens.
        "prompt": [1] * max(1, prompt_tokens),
        "max_tokens": max(1, output_tokens),
        "ignore_eos": True,
        "stream": stream,
    }
    if stream:
        body["stream_options"] = {"include_usage": True}
    start = time.monotonic()
    ttft: float | None = None
    usage = 0
    try:
        async with session.post(url, json=body) as resp:
            if not stream or resp.status != 200:
                payload = await resp.read()
                if resp.status == 200:
                    usage = int(json.loads(payload).get("usage", {}).get("completion_tokens", 0))
            else:
                async for raw in resp.content:
                    line = raw.strip()
                    if not line.startswith(b"data: ") or line == b"data: [DONE]":
                        continue
                    chunk = json.loads(line[6:])
                    if ttft is None and chunk.get("choices") and chunk["choices"][0].get("text"):
                        ttft = time.monotonic() - start
                    if chunk.get("usage"):
                        usage = int(chunk["usage"].get("completion_tokens", 0))
            status = resp.status
    except (TimeoutError, aiohttp.ClientError):
        status = 0
    return RequestResult(sent_at, prompt_tokens, output_tokens, status, time.monotonic() - start, ttft, usage)


async def replay(
    trace: Trace,
    url: str,
    model: str,
    *,
    speedup: float = 1.0,
    max_requests: int | None = None,
    deadline_s: float = 3600.0,
    max_in_flight: int = 512,
    stream: bool = False,
    on_result: Callable[[RequestResult], None] | None = None,
    session: aiohttp.ClientSession | None = None,
) -> ReplayReport:
    """Replay ``trace`` against ``url`` (a ``/v1/completions`` URL) and return the report.

    Args:
        trace: requests to send; arrival times relative to ``trace.start_s`` set the schedule.
        url: full URL of an OpenAI-compatible completions endpoint.
        model: the ``model`` field to send.
        speedup: trace seconds per wall second (> 0); 60 plays an hour in a minute.
        max_requests: send at most this many requests (``None`` = the whole trace).
        deadline_s: stop sending after this many wall seconds and cancel what is still open.
        max_in_flight: most requests open at once; arrivals beyond it are dropped and counted.
        stream: stream responses (measures TTFT client-side) or not (lighter on the CPU).
        on_result: called with each finished request (e.g. to update a live view).
        session: an aiohttp session to use (one is made and closed otherwise).

    Raises:
        ValueError: ``speedup`` is not positive.
    """
    if speedup <= 0:
        raise ValueError("speedup must be positive")
    offsets = (np.asarray(trace.arrival_s) - trace.start_s) / speedup
    n = len(offsets) if max_requests is None else min(len(offsets), max_requests)
    report = ReplayReport()
    own = session is None
    sess = session or aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None, sock_connect=10))
    tasks: set[asyncio.Task[RequestResult]] = set()
    t0 = time.monotonic()

    def done(task: asyncio.Task[RequestResult]) -> None:
        tasks.discard(task)
        if task.cancelled() or task.exception() is not None:
            return
        result = task.result()
        report.results.append(result)
        if on_result is not None:
            on_result(result)

    try:
        for i in range(n):
            at = float(offsets[i])
            if at > deadline_s:
                break
            delay = at - (time.monotonic() - t0)
            if delay > 0:
                await asyncio.sleep(delay)
            if len(tasks) >= max_in_flight:
                report.dropped += 1
                continue
            task = asyncio.create_task(
                _one(sess, url, model, int(trace.prompt_tokens[i]), int(trace.output_tokens[i]), stream, at, t0)
            )
            task.add_done_callback(done)
            tasks.add(task)
            report.sent += 1
        remaining = deadline_s - (time.monotonic() - t0)
        if tasks and remaining > 0:
            await asyncio.wait(set(tasks), timeout=remaining)
    finally:
        report.in_flight = len(tasks)
        for task in list(tasks):
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        if own:
            await sess.close()
    return report
