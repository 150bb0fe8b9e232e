"""Figures of one simulated run: SLO attainment, latency percentiles, goodput per GPU-hour, cost.

Definitions (every key of :func:`summarize` is documented in ``docs/simulate.md``):

- A request is **measured** when it is interactive, not rejected, and arrived in
  ``[start + warmup, end)``; the warm-up is excluded from every figure and reported.
- **TTFT** = first token − arrival; **ITL** of a request = (finish − first token) / (output − 1),
  its mean inter-token latency (TPOT in vLLM's ``benchmark_serving.py``); requests of one output
  token have no ITL and meet the ITL target trivially.
- A request **meets the SLO** when TTFT ≤ ``slo.ttft_p95_seconds`` and ITL ≤
  ``slo.itl_p95_seconds``; **SLO attainment** is the fraction of measured requests that do
  (DistServe's definition: Zhong et al., OSDI 2024, §2). A request that never finished misses.
- A **minute meets the SLO** when the p95 TTFT and p95 ITL of the requests that arrived in it are
  within the targets (minutes without requests meet it).
- **Goodput** = output tokens of the requests that met the SLO (tokens), per GPU-hour billed
  in the measured window; **USD per million tokens** = GPU-hours × price / goodput × 10⁶.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import NDArray

from llmscale.api import SloSpec
from llmscale.sim.fleet import BATCH, INTERACTIVE, ReplicaRecord, SimResult, replicas_over_time

__all__ = ["latencies", "minute_series", "minutes_meeting", "summarize"]


def latencies(result: SimResult) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.bool_]]:
    """Return ``(ttft_s, itl_s, finished)`` per request, shape ``(n,)``; unfinished requests have
    ``inf`` TTFT/ITL, one-token outputs ``nan`` ITL."""
    tab = result.requests
    arrival = np.asarray(tab.arrival)
    first = np.asarray(tab.first_token)
    finish = np.asarray(tab.finish)
    out = np.asarray(tab.output)
    finished = finish >= 0
    ttft = np.where(first >= 0, first - arrival, np.inf)
    with np.errstate(divide="ignore", invalid="ignore"):
        itl = np.where(out > 1, (finish - first) / (out - 1), np.nan)
    itl = np.where(finished | (out <= 1), itl, np.inf)
    return ttft, itl, finished


def _measured(result: SimResult, warmup_s: float) -> NDArray[np.bool_]:
    arrival = np.asarray(result.requests.arrival)
    return (
        ~result.is_batch
        & ~result.rejected
        & (arrival >= result.start_s + warmup_s)
        & (arrival < result.end_s)
    )


def _meets(ttft: NDArray[np.float64], itl: NDArray[np.float64], slo: SloSpec) -> NDArray[np.bool_]:
    return (ttft <= slo.ttft_p95_seconds) & ~(itl > slo.itl_p95_seconds)


def _minute_p95(
    minute: NDArray[np.int64], values: NDArray[np.float64], minutes: int
) -> NDArray[np.float64]:
    """p95 of ``values`` grouped by ``minute`` (nan where a minute has no value); NaNs ignored."""
    out = np.full(minutes, np.nan)
    keep = ~np.isnan(values)
    minute, values = minute[keep], values[keep]
    if not len(values):
        return out
    order = np.lexsort((values, minute))
    minute, values = minute[order], values[order]
    bounds = np.searchsorted(minute, np.arange(minutes + 1))
    for m in range(minutes):
        a, b = bounds[m], bounds[m + 1]
        if b > a:
            seg = values[a:b]
            # linear interpolation between order statistics, as numpy.percentile's default
            pos = 0.95 * (b - a - 1)
            lo = math.floor(pos)
            hi = min(lo + 1, b - a - 1)
            frac = pos - lo
            lo_v, hi_v = seg[lo], seg[hi]
            out[m] = lo_v if frac == 0 or lo_v == hi_v else lo_v + (hi_v - lo_v) * frac
    return out


def minutes_meeting(
    arrival_s: NDArray[np.float64],
    ttft_s: NDArray[np.float64],
    itl_s: NDArray[np.float64],
    start_s: float,
    end_s: float,
    slo: SloSpec,
) -> tuple[NDArray[np.bool_], NDArray[np.float64], NDArray[np.float64]]:
    """Judge every minute of ``[start, end)`` by its arrivals' p95 TTFT and ITL.

    Returns:
        ``(meets, ttft_p95_s, itl_p95_s)``, each shape ``(minutes,)``; a minute without requests
        meets the SLO and has nan percentiles.
    """
    minutes = max(1, math.ceil((end_s - start_s) / 60.0 - 1e-9))
    minute = ((arrival_s - start_s) // 60.0).astype(np.int64).clip(0, minutes - 1)
    t95 = _minute_p95(minute, ttft_s, minutes)
    i95 = _minute_p95(minute, itl_s, minutes)
    meets = ~(t95 > slo.ttft_p95_seconds) & ~(i95 > slo.itl_p95_seconds)
    return meets, t95, i95


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


def _pct(values: NDArray[np.float64], q: float) -> float | None:
    values = values[~np.isnan(values)]
    if not len(values):
        return None
    v = float(np.percentile(values, q))
    return v if math.isfinite(v) else None


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
    ttft, itl, finished = latencies(result)
    meas = _measured(result, warmup_s)
    out = np.asarray(tab.output)
    n_meas = int(meas.sum())
    ok = _meets(ttft, itl, slo) & meas
    goodput = int(out[ok].sum())
    arrival = np.asarray(tab.arrival)
    meets_min, _, _ = minutes_meeting(arrival[meas], ttft[meas], itl[meas], m0, end, slo)
    gpus = result.gpus_per_replica
    inter_s = _gpu_seconds(result.replicas, INTERACTIVE, m0, end)
    batch_s = _gpu_seconds(result.replicas, BATCH, m0, end)
    gpu_hours = (inter_s + batch_s) * gpus / 3600.0
    inter_gpu_hours = inter_s * gpus / 3600.0
    t_m, i_m = ttft[meas], itl[meas]
    batch = result.is_batch & ~result.rejected
    in_window = (arrival >= m0) & (arrival < end)
    all_arrived = (arrival >= start) & (arrival < end)
    scale_events = sum(1 for t, _, _ in result.interactive_changes if m0 <= t < end)
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
        "minutes_meeting_slo_fraction": float(meets_min.mean()),
        "ttft_p50_s": _pct(t_m, 50),
        "ttft_p95_s": _pct(t_m, 95),
        "ttft_p99_s": _pct(t_m, 99),
        "itl_p50_s": _pct(i_m, 50),
        "itl_p95_s": _pct(i_m, 95),
        "itl_p99_s": _pct(i_m, 99),
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
        (nan in minutes without requests); each shape ``(minutes,)``.
    """
    start, end = result.start_s, result.end_s
    minutes = max(1, math.ceil((end - start) / 60.0 - 1e-9))
    grid = start + 60.0 * np.arange(minutes + 1, dtype=np.float64)
    ttft, itl, _ = latencies(result)
    arrival = np.asarray(result.requests.arrival)
    inter = ~result.is_batch & ~result.rejected & (arrival < end)
    _, t95, i95 = minutes_meeting(arrival[inter], ttft[inter], itl[inter], start, end, slo)
    minute = ((arrival[inter] - start) // 60.0).astype(np.int64).clip(0, minutes - 1)
    load = np.bincount(minute, minlength=minutes) / 60.0
    return {
        "t_s": grid[:-1],
        "load_rps": load.astype(np.float64),
        "replicas": replicas_over_time(result.replicas, grid),
        "ttft_p95_s": t95,
        "itl_p95_s": i95,
    }
