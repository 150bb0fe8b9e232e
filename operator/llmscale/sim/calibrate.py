"""Capacity of one replica at the SLO, measured by the simulator itself.

The oracle, static-peak and the targets of the hpa and kpa baselines all need "how much load does
one replica carry within the SLO". The roofline model alone cannot say: TTFT at p95 depends on
queueing, chunked-prefill stalls and the trace's burstiness. So the answer is *measured*: a small
fixed fleet (``replicas``, least-outstanding routing, as in the real runs) replays the trace
time-rescaled to a flat rate, and a bisection finds the highest per-replica rate at which at least
``minute_target`` of the measured minutes meet the SLO (p95 TTFT and p95 ITL within the targets).
At that rate it also records the mean in-flight, running and waiting requests per replica — the
natural per-pod targets of concurrency- and running-based autoscalers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from llmscale.api import SloSpec
from llmscale.sim.fleet import FleetConfig, Observation, ScaleDecision, simulate
from llmscale.sim.replica import EngineConfig, StepCostModel
from llmscale.sim.report import latencies, minutes_meeting
from llmscale.sim.trace import Trace, synthesize

__all__ = ["Capacity", "calibrate"]


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
    """

    rate_rps: float
    concurrency: float
    running: float
    waiting: float
    minutes_meeting: float
    replicas: int


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
        self.integral: list[tuple[float, float]] = []

    def decide(self, obs: Observation) -> ScaleDecision:
        if obs.now >= self.from_s and obs.pods:
            self.running.append(sum(p.running for p in obs.pods) / len(obs.pods))
            self.waiting.append(sum(p.waiting for p in obs.pods) / len(obs.pods))
            self.integral.append((obs.now, obs.inflight_integral))
        return ScaleDecision(self.replicas)


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
) -> tuple[float, Capacity]:
    # A flat envelope, the base detrended: the probe's load is steady at ``rate`` (a replay would
    # carry the real hour's rise and fall, compressed, into the probe).
    trace = synthesize(base, duration_s=duration_s, peak_rps=rate * replicas, envelope=_flat, seed=seed)
    inter = Trace(
        trace.arrival_s[~trace.is_batch],
        trace.prompt_tokens[~trace.is_batch],
        trace.output_tokens[~trace.is_batch],
        trace.is_batch[~trace.is_batch],
        trace.start_s,
        trace.duration_s,
        trace.source,
    )
    sampler = _Sampler(replicas, inter.start_s + warmup_s)
    fleet = FleetConfig(initial_replicas=replicas, min_replicas=replicas, max_replicas=replicas, drain_cap_s=600)
    res = simulate(inter, sampler, cost, engine=engine, fleet=fleet, context_limit_tokens=context_limit_tokens)
    ttft, itl, _ = latencies(res)
    arrival = np.asarray(res.requests.arrival)
    keep = (arrival >= inter.start_s + warmup_s) & ~res.rejected
    meets, _, _ = minutes_meeting(
        arrival[keep], ttft[keep], itl[keep], inter.start_s + warmup_s, inter.end_s, slo
    )
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

    Returns:
        The :class:`Capacity` at the highest passing rate.

    Raises:
        ValueError: not even a tiny rate meets the SLO (the SLO is below one request's own
            service time on this replica), or ``rate_rps`` ≤ 0.
    """
    engine = engine or EngineConfig()
    if rate_rps is not None:
        if rate_rps <= 0:
            raise ValueError("rate_rps must be positive")
        return _run(base, cost, engine, slo, rate_rps, replicas, duration_s, warmup_s, seed, context_limit_tokens)[1]
    mean_prompt = float(np.mean(base.prompt_tokens))
    mean_out = float(np.mean(base.output_tokens))
    # Compute ceiling: every request's prompt and output pass the model once.
    per_req = cost.step_time(0, 0, int(mean_prompt + mean_out)) or 1e-3
    hi = 1.0 / per_req
    lo_cap: Capacity | None = None

    def probe(rate: float) -> tuple[float, Capacity]:
        return _run(base, cost, engine, slo, rate, replicas, duration_s, warmup_s, seed, context_limit_tokens)

    frac, cap = probe(hi)
    while frac >= minute_target:
        lo_cap = cap
        hi *= 2.0
        frac, cap = probe(hi)
    lo = lo_cap.rate_rps if lo_cap else 0.0
    for _ in range(iterations):
        mid = (lo + hi) / 2.0
        frac, cap = probe(mid)
        if frac >= minute_target:
            lo, lo_cap = mid, cap
        else:
            hi = mid
    if lo_cap is None:
        tiny = hi / 2**iterations
        frac, cap = probe(tiny)
        if frac < minute_target:
            raise ValueError("Not even a tiny load meets the SLO on this replica: the SLO is too tight")
        lo_cap = cap
    if not math.isfinite(lo_cap.rate_rps) or lo_cap.rate_rps <= 0:
        raise ValueError("Calibration found no positive capacity")
    return lo_cap
