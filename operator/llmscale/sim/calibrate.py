"""Capacity of one replica at the SLO, measured by the simulator itself.

The oracle, static-peak and the targets of the hpa and kpa baselines all need "how much load does
one replica carry within the SLO". The roofline model alone cannot say: TTFT at p95 depends on
queueing, chunked-prefill stalls and the trace's burstiness. So the answer is *measured*: a small
fixed fleet (``replicas``, least-outstanding routing, as in the real runs) replays the trace
time-rescaled to a flat rate, and a bisection finds the highest per-replica rate at which at least
``minute_target`` of the measured minutes meet the SLO (the minute's ``histogram_quantile(0.95)`` of
TTFT and of per-token ITL within the targets, :func:`llmscale.sim.report.minute_scores`). At that
rate it also records the mean in-flight, running and waiting requests and the mean KV-cache use per
replica — the natural per-pod targets of concurrency-, running- and KV-based autoscalers.

What one replica carries depends on how many share the load: a small fleet multiplexes less, and
one long prompt holds up a larger share of it (long-context traffic at the overnight trough is the
case in point). :func:`calibrate_sizes` measures the capacity at several fleet sizes
(:data:`CURVE_SIZES`), and :func:`fleet_capacity_rps` turns that curve into what ``n`` replicas
carry, which sizes the oracle and static-peak.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from llmscale.api import SloSpec
from llmscale.sim.fleet import FleetConfig, Observation, ScaleDecision, SimulationAbandoned, simulate
from llmscale.sim.latency import BIN_S, LatencyRecorder, histogram_quantile
from llmscale.sim.replica import EngineConfig, StepCostModel
from llmscale.sim.report import minute_scores
from llmscale.sim.trace import Trace, synthesize

__all__ = ["CURVE_SIZES", "MIN_REQUESTS_PER_MINUTE", "Capacity", "calibrate", "calibrate_sizes", "fleet_capacity_rps"]

#: Fleet sizes the capacity curve is measured at (:func:`calibrate_sizes`).
CURVE_SIZES: tuple[int, ...] = (1, 2, 4, 8)

#: The smallest per-replica capacity calibration accepts, requests a minute.
MIN_REQUESTS_PER_MINUTE = 1.0


@dataclass(frozen=True)
class Capacity:
    """What one replica sustains within the SLO.

    Attributes:
        rate_rps: interactive requests/s per replica.
        concurrency: mean in-flight requests per replica at that rate (waiting + running).
        running: mean running requests per replica at that rate (``vllm:num_requests_running``).
        waiting: mean waiting requests per replica at that rate.
        minutes_meeting: fraction of calibration minutes that met the SLO at that rate.
        replicas: size of the calibration fleet.
        kv_cache_utilization: mean ``vllm:kv_cache_usage_perc`` per replica at that rate, 0–1.
    """

    rate_rps: float
    concurrency: float
    running: float
    waiting: float
    minutes_meeting: float
    replicas: int
    kv_cache_utilization: float = 0.0


def _flat(seconds_of_day: NDArray[np.float64]) -> NDArray[np.float64]:
    return np.ones_like(np.asarray(seconds_of_day, dtype=np.float64))


class _Sampler:
    """A fixed-size 'autoscaler' that records the pods' gauges after the warm-up."""

    name = "calibration"
    tick_s = 15.0

    def __init__(self, replicas: int, from_s: float) -> None:
        self.replicas = replicas
        self.from_s = from_s
        self.running: list[float] = []
        self.waiting: list[float] = []
        self.kv: list[float] = []
        self.integral: list[tuple[float, float]] = []

    def decide(self, obs: Observation) -> ScaleDecision:
        if obs.now >= self.from_s and obs.pods:
            self.running.append(sum(p.running for p in obs.pods) / len(obs.pods))
            self.waiting.append(sum(p.waiting for p in obs.pods) / len(obs.pods))
            self.kv.append(sum(p.kv_cache_utilization for p in obs.pods) / len(obs.pods))
            self.integral.append((obs.now, obs.inflight_integral))
        return ScaleDecision(self.replicas)


class _misses:
    """``simulate``'s ``give_up`` for a probe that must meet the SLO in ``target`` of its minutes:
    True once the minutes after the warm-up whose histograms are final already miss so many that
    the run cannot reach ``target`` (judged as :func:`llmscale.sim.report.minute_scores` judges
    them, less its stalled minutes, which can only add misses). ``bound``: the highest fraction the
    run could still reach when it was given up."""

    def __init__(self, slo: SloSpec, warmup_s: float, target: float) -> None:
        self.slo = slo
        self.first = math.ceil(warmup_s / 60.0 - 1e-9)  # as minute_scores skips the warm-up
        self.target = target
        self.judged = 0  # minutes judged so far, counted from the first after the warm-up
        self.missed = 0
        self.bound = 1.0

    def __call__(self, rec: LatencyRecorder, settled_s: float) -> bool:
        final = int((settled_s - rec.start_s) // 60.0)  # minutes 0 … final − 1 are final
        if final - self.first <= self.judged:
            return False
        lo, hi = self.first + self.judged, final
        ttft = histogram_quantile(0.95, rec.ttft_bounds, rec.minute_counts("ttft")[lo:hi])
        itl = histogram_quantile(0.95, rec.itl_bounds, rec.minute_counts("itl")[lo:hi])
        self.missed += int(np.count_nonzero((ttft > self.slo.ttft_p95_seconds) | (itl > self.slo.itl_p95_seconds)))
        self.judged = final - self.first
        total = math.ceil(rec.bins / round(60.0 / BIN_S)) - self.first
        self.bound = (total - self.missed) / total if total > 0 else 1.0
        return self.bound < self.target


def _run(
    base: Trace,
    cost: StepCostModel,
    engine: EngineConfig,
    slo: SloSpec,
    rate: float,
    replicas: int,
    duration_s: float,
    warmup_s: float,
    seed: int,
    context_limit_tokens: int | None,
    fail_below: float | None = None,
) -> tuple[float, Capacity | None]:
    """One probe: ``(fraction of minutes meeting the SLO, what the fleet held)``. With ``fail_below``
    (a fraction of minutes, 0–1) the probe stops at the first tick where its final minutes already
    put it below that, and answers ``(an upper bound of the fraction, None)``: it fails as the
    whole probe would."""
    # A flat envelope, the base detrended: the probe's load is steady at ``rate`` (a replay would
    # carry the real hour's rise and fall, compressed, into the probe).
    trace = synthesize(base, duration_s=duration_s, peak_rps=rate * replicas, envelope=_flat, seed=seed)
    inter = trace.select(np.flatnonzero(~trace.is_batch).astype(np.int64))
    sampler = _Sampler(replicas, inter.start_s + warmup_s)
    fleet = FleetConfig(initial_replicas=replicas, min_replicas=replicas, max_replicas=replicas, drain_cap_s=600)
    give_up = None if fail_below is None else _misses(slo, warmup_s, fail_below)
    try:
        res = simulate(inter, sampler, cost, engine=engine, fleet=fleet, context_limit_tokens=context_limit_tokens,
                       itl_slo_s=slo.itl_p95_seconds, give_up=give_up)
    except SimulationAbandoned:
        assert give_up is not None
        return give_up.bound, None
    meets, _, _, _ = minute_scores(res, slo, warmup_s)
    frac = float(meets.mean())
    conc = 0.0
    if len(sampler.integral) >= 2:
        (t0, i0), (t1, i1) = sampler.integral[0], sampler.integral[-1]
        conc = (i1 - i0) / (t1 - t0) / replicas if t1 > t0 else 0.0
    cap = Capacity(
        rate_rps=rate,
        concurrency=conc,
        running=float(np.mean(sampler.running)) if sampler.running else 0.0,
        waiting=float(np.mean(sampler.waiting)) if sampler.waiting else 0.0,
        minutes_meeting=frac,
        replicas=replicas,
        kv_cache_utilization=float(np.mean(sampler.kv)) if sampler.kv else 0.0,
    )
    return frac, cap


def calibrate(
    base: Trace,
    cost: StepCostModel,
    slo: SloSpec,
    *,
    engine: EngineConfig | None = None,
    context_limit_tokens: int | None = None,
    replicas: int = 4,
    duration_s: float = 1800.0,
    warmup_s: float = 300.0,
    minute_target: float = 0.99,
    iterations: int = 9,
    seed: int = 0,
    rate_rps: float | None = None,
    give_up_early: bool = True,
) -> Capacity:
    """Find the highest per-replica rate at which ``minute_target`` of minutes meet the SLO.

    Bisection in rate on ``[0, hi]``, where ``hi`` is first doubled from the prefill-bound
    ceiling estimate (one replica cannot prefill faster than its compute allows) until the SLO
    fails; each probe replays ``duration_s`` of ``base`` at a flat rate through ``replicas``
    replicas with a fixed ``seed``, so the result is deterministic.

    Args:
        base: the trace whose request sizes and burstiness the probes use.
        cost: the replica's performance model.
        slo: the targets.
        engine: scheduler limits.
        context_limit_tokens: ``--max-model-len``.
        replicas: size of the calibration fleet (statistical multiplexing grows with it).
        duration_s / warmup_s: length of each probe and its excluded start, seconds.
        minute_target: fraction of minutes that must meet the SLO, 0–1.
        iterations: bisection steps (the rate is found to ``hi / 2**iterations``).
        seed: seed of the probes' traces.
        rate_rps: skip the search: measure one probe at this per-replica rate and return it
            (its ``minutes_meeting`` says how well that rate does).
        give_up_early: stop a probe once its final minutes already miss ``minute_target``
            (the same answer; ``False`` runs every probe to its end, to check that).

    Returns:
        The :class:`Capacity` at the highest passing rate.

    Raises:
        ValueError: not even a tiny rate meets the SLO (the SLO is below one request's own
            service time on this replica), the highest passing rate is under
            :data:`MIN_REQUESTS_PER_MINUTE`, or ``rate_rps`` ≤ 0.
    """
    engine = engine or EngineConfig()
    if rate_rps is not None:
        if rate_rps <= 0:
            raise ValueError("rate_rps must be positive")
        measured = _run(base, cost, engine, slo, rate_rps, replicas, duration_s, warmup_s, seed, context_limit_tokens)[1]
        assert measured is not None  # only a probe with fail_below is given up
        return measured
    mean_prompt = float(np.mean(base.prompt_tokens))
    mean_out = float(np.mean(base.output_tokens))
    # Compute ceiling: every request's prompt and output pass the model once.
    per_req = cost.step_time(0, 0, int(mean_prompt + mean_out)) or 1e-3
    hi = 1.0 / per_req
    lo_cap: Capacity | None = None

    def passes(rate: float) -> Capacity | None:
        """The probe at ``rate`` when it meets ``minute_target``, else None (failed, whole or given up)."""
        frac, cap = _run(base, cost, engine, slo, rate, replicas, duration_s, warmup_s, seed, context_limit_tokens,
                         fail_below=minute_target if give_up_early else None)
        return cap if frac >= minute_target else None

    cap = passes(hi)
    while cap is not None:
        lo_cap = cap
        hi *= 2.0
        cap = passes(hi)
    lo = lo_cap.rate_rps if lo_cap else 0.0
    for _ in range(iterations):
        mid = (lo + hi) / 2.0
        cap = passes(mid)
        if cap is not None:
            lo, lo_cap = mid, cap
        else:
            hi = mid
    if lo_cap is None:
        tiny = hi / 2**iterations
        lo_cap = passes(tiny)
        if lo_cap is None:
            raise ValueError(
                f"Not even {tiny * 60.0:.2g} requests a minute per replica meet the SLO on this replica: "
                "the SLO is too tight for these request sizes"
            )
    if not math.isfinite(lo_cap.rate_rps) or lo_cap.rate_rps <= 0:
        raise ValueError("Calibration found no positive capacity")
    if lo_cap.rate_rps * 60.0 < MIN_REQUESTS_PER_MINUTE:
        # Below one request a minute most minutes hold no sample at all and "meet" the SLO
        # vacuously: that is not a capacity.
        raise ValueError(
            f"Only {lo_cap.rate_rps * 60.0:.2f} requests a minute per replica meet the SLO (p95 TTFT "
            f"{slo.ttft_p95_seconds} s, ITL {slo.itl_p95_seconds} s) on this replica: the SLO is too tight "
            "for these request sizes (a smaller --max-num-batched-tokens shortens prefill stalls; more "
            "GPUs per replica shorten long prefills)"
        )
    return lo_cap


def calibrate_sizes(
    base: Trace,
    cost: StepCostModel,
    slo: SloSpec,
    *,
    sizes: tuple[int, ...] = CURVE_SIZES,
    **kwargs: object,
) -> dict[int, Capacity]:
    """:func:`calibrate` at each fleet size in ``sizes``; a size at which no rate meets the SLO is
    left out (the curve then says such a fleet carries nothing).

    Args:
        base / cost / slo: as :func:`calibrate`.
        sizes: fleet sizes, replicas.
        kwargs: the other arguments of :func:`calibrate` (not ``replicas``).

    Returns:
        ``{replicas: Capacity}`` for the sizes that met the SLO at some rate.

    Raises:
        ValueError: no size meets the SLO at any rate.
    """
    out: dict[int, Capacity] = {}
    errors: list[str] = []
    for n in sizes:
        try:
            out[n] = calibrate(base, cost, slo, replicas=n, **kwargs)  # type: ignore[arg-type]
        except ValueError as exc:
            errors.append(f"{n} replicas: {exc}")
    if not out:
        raise ValueError("; ".join(errors))
    return out


def fleet_capacity_rps(curve: dict[int, Capacity], max_replicas: int) -> NDArray[np.float64]:
    """Requests/s a fleet of ``n`` replicas carries within the SLO, for ``n = 0..max_replicas``.

    Per-replica rates are interpolated linearly between the calibrated sizes, held at the largest
    size's rate above it, and zero below the smallest size that met the SLO; the result is made
    non-decreasing in ``n`` (a replica more never carries less).

    Returns:
        Shape ``(max_replicas + 1,)``, requests/s; entry 0 is 0.

    Raises:
        ValueError: an empty curve.
    """
    if not curve:
        raise ValueError("The capacity curve is empty")
    sizes = np.array(sorted(curve), dtype=np.float64)
    rates = np.array([curve[int(n)].rate_rps for n in sizes], dtype=np.float64)
    n = np.arange(max_replicas + 1, dtype=np.float64)
    per = np.interp(n, sizes, rates)
    per[n < sizes[0]] = 0.0
    total: NDArray[np.float64] = np.maximum.accumulate(n * per)
    return total
