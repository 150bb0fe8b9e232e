"""The measurements of ``llmscale calibrate``, one variable at a time.

1. **Prefill**: lone requests (nothing else running) of growing prompt length, one output token
   asked beyond the first; the median TTFT of each length is one prefill step (or a few chunk steps).
2. **Decode, the knee**: ``N`` closed-loop clients each keep one request of a fixed short prompt and
   output in flight, for ``N`` = 1, 2, 4, …; the median inter-token gap at each ``N`` is a decode
   step at that running batch (read from the engine's ``/metrics`` while it runs). ITL against the
   batch is the knee curve. Then the context alone: a fixed number of clients with longer prompts
   (the KV-cache reads grow, the batch does not).
3. **Fixed rates**: open-loop Poisson arrivals at a few fixed request rates, lengths drawn from a
   trace (its tail included, prompts clipped to the context limit); TTFT and ITL at p50/p95/p99.

Each point discards its first ``warmup_s`` (requests sent then are not counted) and waits for its
requests to finish. ``progress`` is called with a line after each point.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from llmscale.calibrate.client import EngineClient, Stream

__all__ = ["DecodePoint", "LatencyStats", "PrefillPoint", "RatePoint", "measure_decode", "measure_prefill", "measure_rate"]

#: How often the running batch is read from ``/metrics`` during a point, seconds.
SAMPLE_INTERVAL_S = 0.25


@dataclass(frozen=True, slots=True)
class LatencyStats:
    """Quantiles of one latency, seconds, and the samples behind them."""

    samples: int
    p50_s: float
    p95_s: float
    p99_s: float

    @classmethod
    def of(cls, values: Sequence[float] | NDArray[np.float64]) -> LatencyStats:
        """The quantiles of ``values`` (NaN when empty)."""
        a = np.asarray(values, dtype=np.float64)
        if a.size == 0:
            return cls(0, math.nan, math.nan, math.nan)
        p50, p95, p99 = np.quantile(a, [0.5, 0.95, 0.99])
        return cls(int(a.size), float(p50), float(p95), float(p99))


@dataclass(frozen=True, slots=True)
class PrefillPoint:
    """Lone requests of one prompt length."""

    prompt_tokens: int
    ttft: LatencyStats


@dataclass(frozen=True, slots=True)
class DecodePoint:
    """Closed-loop clients at one concurrency.

    Attributes:
        concurrency: clients, each with one request in flight.
        running: mean running requests the engine reported (``concurrency`` when unreadable).
        context_tokens: mean context of a decoding sequence, ``prompt + output/2``, tokens.
        itl: inter-token gaps.
        tokens_per_s: output tokens per second over the measured window.
    """

    concurrency: int
    running: float
    context_tokens: float
    itl: LatencyStats
    tokens_per_s: float


@dataclass(frozen=True, slots=True)
class RatePoint:
    """Open-loop Poisson arrivals at one rate.

    Attributes:
        rate_rps: arrivals asked per second.
        requests: requests counted (sent after the warm-up).
        errors: of those, the ones that failed.
        running: mean running requests the engine reported.
        ttft / itl: the latencies of the counted requests.
        warmup_s: seconds from the point's start before requests counted.
        arrivals: every request sent, warm-up included: ``(seconds after the point's start, prompt
            tokens, output tokens)``, so that a model can be run on the very requests the engine got.
    """

    rate_rps: float
    requests: int
    errors: int
    running: float
    ttft: LatencyStats
    itl: LatencyStats
    warmup_s: float = 0.0
    arrivals: tuple[tuple[float, int, int], ...] = ()


class _Sampler:
    """Reads the running batch every :data:`SAMPLE_INTERVAL_S` while a point runs."""

    def __init__(self, client: EngineClient) -> None:
        self.client = client
        self.values: list[float] = []
        self.task: asyncio.Task[None] | None = None

    async def _loop(self) -> None:
        while True:
            value = await self.client.running()
            if value is not None:
                self.values.append(value)
            await asyncio.sleep(SAMPLE_INTERVAL_S)

    def start(self) -> None:
        self.task = asyncio.create_task(self._loop())

    async def stop(self) -> float | None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
        return float(np.mean(self.values)) if self.values else None


async def measure_prefill(
    client: EngineClient,
    lengths: Sequence[int],
    repeats: int,
    progress: Callable[[str], None] = lambda _: None,
) -> list[PrefillPoint]:
    """TTFT of lone requests at each prompt length, ``repeats`` times each."""
    points = []
    for n in lengths:
        ttfts = []
        for _ in range(repeats):
            s = await client.complete(n, 2)
            if s.ok and s.ttft_s is not None:
                ttfts.append(s.ttft_s)
        point = PrefillPoint(n, LatencyStats.of(ttfts))
        points.append(point)
        progress(f"prefill {n:>6,} tokens: TTFT p50 {point.ttft.p50_s * 1e3:8.2f} ms ({point.ttft.samples} requests)")
    return points


async def measure_decode(
    client: EngineClient,
    concurrency: int,
    prompt_tokens: int,
    output_tokens: int,
    seconds: float,
    warmup_s: float,
    progress: Callable[[str], None] = lambda _: None,
) -> DecodePoint:
    """``concurrency`` closed-loop clients for ``warmup_s + seconds``; the gaps of the tokens that
    arrived in the last ``seconds`` count, and the clients are cancelled at the end (requests that
    outlast the window give what they streamed within it)."""
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    begin, end = t0 + warmup_s, t0 + warmup_s + seconds
    gaps: list[float] = []
    sampler = _Sampler(client)

    def on_gap(now: float, gap: float) -> None:
        if begin <= now <= end:
            gaps.append(gap)

    async def worker() -> None:
        while loop.time() < end:
            await client.complete(prompt_tokens, output_tokens, on_gap)

    async def start_sampling() -> None:
        await asyncio.sleep(warmup_s)
        sampler.start()

    starter = asyncio.create_task(start_sampling())
    workers = [asyncio.create_task(worker()) for _ in range(concurrency)]
    await asyncio.sleep(max(end - loop.time(), 0.0))
    for task in workers:
        task.cancel()
    await asyncio.gather(*workers, return_exceptions=True)
    await starter
    running = await sampler.stop()
    point = DecodePoint(
        concurrency=concurrency,
        running=running if running is not None else float(concurrency),
        context_tokens=prompt_tokens + output_tokens / 2.0,
        itl=LatencyStats.of(gaps),
        tokens_per_s=len(gaps) / seconds,
    )
    progress(
        f"decode {concurrency:>4} clients, context {point.context_tokens:7,.0f}: running {point.running:6.1f}, ITL p50 {point.itl.p50_s * 1e3:7.2f} ms "
        f"p95 {point.itl.p95_s * 1e3:7.2f} ms, {point.tokens_per_s:8,.0f} tok/s"
    )
    return point


async def measure_rate(
    client: EngineClient,
    rate_rps: float,
    lengths: Sequence[tuple[int, int]],
    seconds: float,
    warmup_s: float,
    rng: np.random.Generator,
    progress: Callable[[str], None] = lambda _: None,
    drain_s: float = 120.0,
) -> RatePoint:
    """Poisson arrivals at ``rate_rps`` for ``warmup_s + seconds``, each request's ``(prompt,
    output)`` drawn from ``lengths``; waits up to ``drain_s`` for the last requests."""
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    begin, end = t0 + warmup_s, t0 + warmup_s + seconds
    tasks: list[asyncio.Task[Stream]] = []
    sent: list[tuple[float, int, int]] = []
    sampler = _Sampler(client)
    sampling = False
    at = t0
    while True:
        at += float(rng.exponential(1.0 / rate_rps))
        if at >= end:
            break
        delay = at - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        if not sampling and loop.time() >= begin:
            sampler.start()
            sampling = True
        p, g = lengths[int(rng.integers(len(lengths)))]
        sent.append((loop.time() - t0, p, g))
        tasks.append(asyncio.create_task(client.complete(p, g)))
    if in_flight := sum(1 for t in tasks if not t.done()):
        progress(f"rate {rate_rps:7.2f} req/s: arrivals done, waiting up to {drain_s:.0f} s for {in_flight} "
                 "requests in flight")
    done, pending = await asyncio.wait(tasks, timeout=drain_s) if tasks else (set(), set())
    for task in pending:
        task.cancel()
    running = await sampler.stop()
    counted = [t.result() for t in tasks if t in done and t.result().sent_at >= begin]
    failed = sum(1 for s in counted if not s.ok) + sum(1 for t in pending)
    ok = [s for s in counted if s.ok]
    point = RatePoint(
        rate_rps=rate_rps,
        requests=len(counted) + len(pending),
        errors=failed,
        running=running if running is not None else math.nan,
        ttft=LatencyStats.of([s.ttft_s for s in ok if s.ttft_s is not None]),
        itl=LatencyStats.of([g for s in ok for g in s.gaps_s]),
        warmup_s=warmup_s,
        arrivals=tuple(sent),
    )
    progress(
        f"rate {rate_rps:7.2f} req/s: {point.requests} requests ({point.errors} failed), running {point.running:5.1f}, "
        f"TTFT p95 {point.ttft.p95_s * 1e3:8.1f} ms, ITL p95 {point.itl.p95_s * 1e3:7.2f} ms"
    )
    return point
