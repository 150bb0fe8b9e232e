"""Figures of one simulated run: SLO attainment, latency percentiles, goodput per GPU-hour, cost.

One SLO definition everywhere (every key of :func:`summarize` is documented in ``docs/simulate.md``
and ``docs/cli.md``):

- The **latency figures** are what the operator reads from vLLM's histograms: TTFT is
  ``vllm:time_to_first_token_seconds`` (one sample per request, at its first token), ITL is
  ``vllm:inter_token_latency_seconds`` (one sample per output token after the first: the gap since
  that request's previous token), both with vLLM's buckets, over the interactive pool, and a
  percentile is Prometheus's ``histogram_quantile`` over the bucket counts
  (:mod:`llmscale.sim.latency`).
- A **minute meets the SLO** when, over the samples observed in that minute,
  ``histogram_quantile(0.95)`` of TTFT ≤ ``slo.ttft_p95_seconds`` and of ITL ≤
  ``slo.itl_p95_seconds`` — what ``histogram_quantile(0.95, sum by (le) (rate(..._bucket[1m])))``
  answers at the minute's end. A minute without samples meets it, unless a measured request had
  then been waiting for its first token longer than the TTFT target (silence from a stalled pool is
  not success). Minutes are counted from the end of the warm-up to the end of the run.
- A **request meets the SLO** (the per-request view, for goodput) when its TTFT ≤ the TTFT target
  and at most 5 % of its inter-token gaps exceed the ITL target (its own p95 gap, nearest rank, is
  within the target: ``slow ≤ g − ⌈0.95 g⌉`` for ``g`` gaps); one-token outputs have no gap.
  **SLO attainment** is the fraction of measured requests that do (a request that never finished
  misses). A request is **measured** when it is interactive, not rejected, and arrived in
  ``[start + warmup, end)``.
- **Goodput** = output tokens of the measured requests that met the SLO (tokens), per GPU-hour
  billed in the measured window; **USD per million tokens** = GPU-hours × price / goodput × 10⁶.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import NDArray

from llmscale.api import SloSpec
from llmscale.pools import BATCH, INTERACTIVE
from llmscale.sim.fleet import ReplicaRecord, SimResult, replicas_over_time
from llmscale.sim.latency import LatencyRecorder, histogram_quantile

__all__ = ["minute_scores", "minute_series", "request_meets", "summarize", "ttft_s"]


def ttft_s(result: SimResult) -> NDArray[np.float64]:
    """TTFT of every request, seconds, shape ``(n,)``; ``inf`` for a request with no first token."""
    tab = result.requests
    first = np.asarray(tab.first_token)
    return np.where(first >= 0, first - np.asarray(tab.arrival), np.inf)


def request_meets(result: SimResult, slo: SloSpec) -> NDArray[np.bool_]:
    """Whether each request met the SLO (module docstring), shape ``(n,)``; an unfinished request
    does not.

    Raises:
        ValueError: the run counted slow gaps against another ITL target than ``slo``'s.
    """
    if result.itl_slo_s != slo.itl_p95_seconds:
        raise ValueError(
            f"The run counted slow gaps against an ITL target of {result.itl_slo_s} s, not "
            f"{slo.itl_p95_seconds} s: simulate with itl_slo_s=spec.slo.itl_p95_seconds"
        )
    tab = result.requests
    finished = np.asarray(tab.finish) >= 0
    gaps = np.maximum(np.asarray(tab.output, dtype=np.int64) - 1, 0)
    allowed = gaps - (95 * gaps + 99) // 100
    slow = np.asarray(tab.slow_gaps, dtype=np.int64)
    out: NDArray[np.bool_] = finished & (ttft_s(result) <= slo.ttft_p95_seconds) & (slow <= allowed)
    return out


def _measured(result: SimResult, warmup_s: float) -> NDArray[np.bool_]:
    arrival = np.asarray(result.requests.arrival)
    return (
        ~result.is_batch
        & ~result.rejected
        & (arrival >= result.start_s + warmup_s)
        & (arrival < result.end_s)
    )


def _recorder(result: SimResult) -> LatencyRecorder:
    if result.latency is None:
        raise ValueError("The run has no latency histograms")
    return result.latency


def _stalled_minutes(result: SimResult, slo: SloSpec, minutes: int) -> NDArray[np.bool_]:
    """Minutes at whose end an interactive request had waited longer than the TTFT target without a
    first token, shape ``(minutes,)`` (minute ``m`` ends at ``start + 60 (m + 1)``)."""
    tab = result.requests
    arrival = np.asarray(tab.arrival)
    first = np.asarray(tab.first_token)
    keep = ~result.is_batch & ~result.rejected & (arrival < result.end_s)
    a = arrival[keep] + slo.ttft_p95_seconds - result.start_s
    f = np.where(first[keep] >= 0, first[keep], np.inf) - result.start_s
    # stalled at minute ends T with a <= T < f: m from ceil(a / 60) − 1 to ceil(f / 60) − 2
    lo = np.ceil(a / 60.0).astype(np.int64) - 1
    hi = np.where(np.isfinite(f), np.ceil(np.minimum(f, 60.0 * (minutes + 2)) / 60.0) - 2, minutes - 1)
    hi = hi.astype(np.int64)
    lo = np.clip(lo, 0, minutes)
    hi = np.clip(hi, -1, minutes - 1)
    ok = hi >= lo
    diff = np.zeros(minutes + 1, dtype=np.int64)
    np.add.at(diff, lo[ok], 1)
    np.add.at(diff, hi[ok] + 1, -1)
    out: NDArray[np.bool_] = np.cumsum(diff[:-1]) > 0
    return out


def minute_scores(
    result: SimResult, slo: SloSpec, warmup_s: float = 0.0
) -> tuple[NDArray[np.bool_], NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
    """Judge every minute of the run from the end of the warm-up (module docstring).

    Returns:
        ``(meets, ttft_p95_s, itl_p95_s, t_s)``, each shape ``(minutes,)``: whether the minute met
        the SLO, its ``histogram_quantile(0.95)`` of TTFT and of ITL (nan without samples), and the
        minute's start (seconds since the epoch).
    """
    rec = _recorder(result)
    tt = rec.minute_counts("ttft")
    it = rec.minute_counts("itl")
    minutes = tt.shape[0]
    t95 = histogram_quantile(0.95, rec.ttft_bounds, tt)
    i95 = histogram_quantile(0.95, rec.itl_bounds, it)
    stalled = _stalled_minutes(result, slo, minutes) & (tt.sum(axis=1) == 0)
    meets = ~(t95 > slo.ttft_p95_seconds) & ~(i95 > slo.itl_p95_seconds) & ~stalled
    t = result.start_s + 60.0 * np.arange(minutes, dtype=np.float64)
    first = math.ceil(warmup_s / 60.0 - 1e-9)
    return meets[first:], t95[first:], i95[first:], t[first:]


def _gpu_seconds(records: list[ReplicaRecord], pool: str, a: float, b: float) -> float:
    total = 0.0
    for rec in records:
        if rec.pool != pool:
            continue
        lo, hi = max(rec.created_s, a), min(rec.gone_s, b)
        if hi > lo:
            total += hi - lo
    return total


def _peak(records: list[ReplicaRecord], pool: str, a: float, b: float) -> int:
    events: list[tuple[float, int]] = []
    for rec in records:
        if rec.pool != pool:
            continue
        lo, hi = max(rec.created_s, a), min(rec.gone_s, b)
        if hi > lo:
            events.append((lo, 1))
            events.append((hi, -1))
    events.sort(key=lambda e: (e[0], e[1]))
    level = peak = 0
    for _, d in events:
        level += d
        peak = max(peak, level)
    return peak


def _quantiles(rec: LatencyRecorder, kind: str, first_minute: int) -> tuple[float | None, ...]:
    """``histogram_quantile`` at 0.5, 0.95, 0.99 of ``kind`` over the minutes from ``first_minute``."""
    counts = rec.minute_counts(kind)[first_minute:].sum(axis=0)
    bounds = rec.ttft_bounds if kind == "ttft" else rec.itl_bounds
    out: list[float | None] = []
    for q in (0.5, 0.95, 0.99):
        v = float(histogram_quantile(q, bounds, counts))
        out.append(v if math.isfinite(v) else None)
    return tuple(out)


def summarize(result: SimResult, slo: SloSpec, gpu_hour_usd: float, warmup_s: float) -> dict[str, Any]:
    """Return the figures of one run as a JSON-able dict (keys documented in ``docs/simulate.md``).

    Args:
        result: the run.
        slo: the latency targets (``spec.slo``).
        gpu_hour_usd: price of one GPU-hour, USD (``spec.cost.gpu_hour_usd``).
        warmup_s: seconds at the start excluded from every figure.

    Raises:
        ValueError: the warm-up is not shorter than the run.
    """
    start, end = result.start_s, result.end_s
    if warmup_s < 0 or start + warmup_s >= end:
        raise ValueError("The warm-up must be non-negative and shorter than the run")
    m0 = start + warmup_s
    hours = (end - m0) / 3600.0
    tab = result.requests
    finished = np.asarray(tab.finish) >= 0
    meas = _measured(result, warmup_s)
    out = np.asarray(tab.output)
    n_meas = int(meas.sum())
    ok = request_meets(result, slo) & meas
    goodput = int(out[ok].sum())
    arrival = np.asarray(tab.arrival)
    meets_min, _, _, _ = minute_scores(result, slo, warmup_s)
    rec = _recorder(result)
    first_minute = math.ceil(warmup_s / 60.0 - 1e-9)
    t50, t95, t99 = _quantiles(rec, "ttft", first_minute)
    i50, i95, i99 = _quantiles(rec, "itl", first_minute)
    gpus = result.gpus_per_replica
    inter_s = _gpu_seconds(result.replicas, INTERACTIVE, m0, end)
    batch_s = _gpu_seconds(result.replicas, BATCH, m0, end)
    gpu_hours = (inter_s + batch_s) * gpus / 3600.0
    inter_gpu_hours = inter_s * gpus / 3600.0
    batch = result.is_batch & ~result.rejected
    in_window = (arrival >= m0) & (arrival < end)
    all_arrived = (arrival >= start) & (arrival < end)
    scale_events = sum(1 for t, _, _ in result.interactive_changes if m0 <= t < end)
    queries = result.prefix_cache_queries_tokens
    return {
        "policy": result.policy,
        "duration_s": round(end - m0, 3),
        "warmup_s": float(warmup_s),
        "requests": n_meas,
        "completed_requests": int((meas & finished).sum()),
        "unfinished_requests": int((meas & ~finished).sum()),
        "rejected_requests": int((result.rejected & ~result.is_batch & in_window).sum()),
        "slo_ttft_s": slo.ttft_p95_seconds,
        "slo_itl_s": slo.itl_p95_seconds,
        "slo_attainment": float(ok.sum() / n_meas) if n_meas else None,
        "minutes": len(meets_min),
        "minutes_meeting_slo_fraction": float(meets_min.mean()) if len(meets_min) else None,
        "ttft_p50_s": t50,
        "ttft_p95_s": t95,
        "ttft_p99_s": t99,
        "itl_p50_s": i50,
        "itl_p95_s": i95,
        "itl_p99_s": i99,
        "output_tokens": int(out[meas & finished].sum()),
        "goodput_tokens": goodput,
        "goodput_tok_s": goodput / (end - m0),
        "gpu_hours": gpu_hours,
        "interactive_gpu_hours": inter_gpu_hours,
        "batch_gpu_hours": batch_s * gpus / 3600.0,
        "goodput_tokens_per_gpu_hour": goodput / inter_gpu_hours if inter_gpu_hours > 0 else None,
        "usd_per_million_tokens": (
            inter_gpu_hours * gpu_hour_usd / goodput * 1e6 if goodput > 0 else None
        ),
        "mean_replicas": inter_s / (end - m0),
        "peak_replicas": _peak(result.replicas, INTERACTIVE, m0, end),
        "scale_events": scale_events,
        "preemptions": int(np.asarray(tab.preemptions)[meas].sum()),
        "prefix_cache_hit_fraction": result.prefix_cache_hits_tokens / queries if queries else None,
        "batch_requests": int((batch & all_arrived).sum()),
        "batch_completed_requests": int((batch & all_arrived & finished).sum()),
        "batch_output_tokens": int(out[batch & all_arrived & finished].sum()),
        "gpus_per_replica": gpus,
        "hours": hours,
        "wall_s": round(result.wall_s, 3),
    }


def minute_series(result: SimResult, slo: SloSpec) -> dict[str, NDArray[np.float64]]:
    """Per-minute series of a run for plots, over the whole run (warm-up included).

    Returns:
        ``t_s`` (minute starts, seconds since the epoch), ``load_rps`` (interactive arrivals per
        second), ``replicas`` (mean billed interactive replicas), ``ttft_p95_s``, ``itl_p95_s``
        (``histogram_quantile(0.95)`` of the minute; nan without samples), ``meets`` (1.0 when the
        minute met the SLO, else 0.0); each shape ``(minutes,)``.
    """
    meets, t95, i95, t = minute_scores(result, slo, 0.0)
    minutes = len(t)
    grid = result.start_s + 60.0 * np.arange(minutes + 1, dtype=np.float64)
    arrival = np.asarray(result.requests.arrival)
    inter = ~result.is_batch & ~result.rejected & (arrival < result.end_s)
    minute = ((arrival[inter] - result.start_s) // 60.0).astype(np.int64).clip(0, minutes - 1)
    load = np.bincount(minute, minlength=minutes) / 60.0
    return {
        "t_s": t,
        "load_rps": load.astype(np.float64),
        "replicas": replicas_over_time(result.replicas, grid),
        "ttft_p95_s": t95,
        "itl_p95_s": i95,
        "meets": meets.astype(np.float64),
    }
