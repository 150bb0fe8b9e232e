"""The load signal and the closed-loop capacity correction.

**Load.** The arrival rate times the work of the live mix gives the replicas the SLO needs
(:func:`llmscale.model.capacity.fleet_need`: chunked prefill, per-token ITL p95, the prefill queue,
the minute-to-minute burstiness): what NVIDIA Dynamo's planner reads off offline profiling runs,
here from the roofline model and the live mix, with no profiling run. A backlog already waiting
beyond ``spec.scaling.targets.queueDepthPerReplica`` per ready replica is added as the rate that
drains it within one lead time: replicas asked for now serve one lead time later, so a faster drain
is not possible and a slower one leaves the backlog for the next burst. The backlog is bounded by
what arrives in one lead time, so the ask is bounded too: no cascade while replicas start.

**Correction.** The model is a model (its lengths are log-normal fits, its queues textbook
approximations); what it must get right is the SLO's own observable, the minute's p95s. A minute in
which the pool was sized as the model says (the leading signals ask for no more than the pool has,
nothing is starting, no scale-up within the p95's window) is evidence about the model's capacity:
a breach says it carries less than the model thinks, a minute within the SLO that it may carry a
little more. :func:`correct` moves a capacity factor ``c`` by stochastic approximation (Robbins and
Monro, 1951: the recursion that tracks a quantile), ``ln c += η·(τ − 1{breach})`` with
``η`` = :data:`CORRECTION_STEP`, doubled with each consecutive breach (:data:`CORRECTION_STREAK_DOUBLINGS`), and ``τ`` = :data:`CORRECTION_TARGET`: a breach lowers the capacity by
5 %, and each minute within the SLO raises it by 5 % × τ, so ``c`` settles where a share ``τ`` of such
minutes breach — half the attainment goal's 1 %, the other half left for ramps and bursts (where
only these steps are taken). A breach in a window the pool served whole, near its capacity or the
second in a row, also takes the factor at least to where the model asks for one more replica
(:func:`factor_needing`, called by :mod:`llmscale.policy.core`): the breach is a fact about the
pool, not a sample to average. No 2×
wall: :data:`CAPACITY_FACTOR_MIN`–:data:`CAPACITY_FACTOR_MAX` are sanity bounds (issue 27). It is persisted in ``status.policyState`` and named in the
reasons.

Pure: no clock, no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache

from llmscale.api import LLMDeploymentSpec, ModelSpec, ResourcesSpec
from llmscale.model import ModelDoesNotFit, ReplicaModel
from llmscale.model.capacity import (
    MINUTE_ATTAINMENT,
    Burstiness,
    EngineLimits,
    FleetNeed,
    WorkloadShape,
    engine_limits,
    fleet_need,
)
from llmscale.model.fit import EfficiencyFit
from llmscale.policy.signal_health import LATENCY_WINDOW_S
from llmscale.policy.types import CapacityCorrection

__all__ = [
    "CAPACITY_FACTOR_MAX",
    "CAPACITY_FACTOR_MIN",
    "CORRECTION_STEP",
    "CORRECTION_STREAK_DOUBLINGS",
    "CORRECTION_TARGET",
    "LATENCY_WINDOW_S",
    "Capacity",
    "capacity_context",
    "correct",
    "factor_in_force",
    "factor_needing",
    "faster_only",
]


#: Lowest capacity factor: 0.02. Not a wall (issue 27: a floor of 0.5 held a prefill-heavy pool at
#: 9 replicas for hours while the p95s broke): the SLO is the ground truth and the model a prior, so
#: the factor goes as far as the breaches take it; the bound only keeps a broken measurement from
#: driving it to zero.
CAPACITY_FACTOR_MIN = 0.02

#: Highest capacity factor: 50, the same sanity bound the other way.
CAPACITY_FACTOR_MAX = 50.0

#: Most doublings of the step on consecutive breaches: 4, so the fifth breach in a row moves the
#: capacity by ``e^(−0.05 × 16)`` = 0.45 — a model wrong by 3× is corrected within about six minutes,
#: and one breach among good minutes still moves it 5 %.
CORRECTION_STREAK_DOUBLINGS = 4

#: Step of the correction in log-capacity per counted minute: 0.05, so that one breach costs one
#: replica in twenty for about a hundred good minutes (the attainment goal's scale).
CORRECTION_STEP = 0.05

#: Share of counted minutes the correction lets breach: half of ``1 − MINUTE_ATTAINMENT`` (0.5 %).
CORRECTION_TARGET = (1.0 - MINUTE_ATTAINMENT) / 2.0

# Rates beyond this are not a measurement of an LLM pool (a parser let a garbage float through);
# they still give a decision: the most replicas allowed.
_HUGE_RPS = 1e9


@lru_cache(maxsize=64)
def _model(model: ModelSpec, resources: ResourcesSpec) -> ReplicaModel | None:
    try:
        replica = ReplicaModel.from_spec(LLMDeploymentSpec(model=model, resources=resources))
    except (ModelDoesNotFit, ValueError):
        return None
    return replica if replica.fits else None


@dataclass(frozen=True, slots=True)
class Capacity:
    """What the model needs to size the pool, for one tick.

    Attributes:
        model: one replica's roofline model.
        limits: its scheduler limits (``spec.engine.args`` or vLLM's defaults).
        shape: the workload (live, or the Azure trace's lengths).
        live: whether ``shape`` is the live mix.
        burstiness: the minute-to-minute burstiness learnt from the live rates.
        factor: the capacity correction in force, [CAPACITY_FACTOR_MIN, CAPACITY_FACTOR_MAX].
        itl_s / ttft_s: the SLO's p95 targets, seconds.
        max_replicas: ``spec.replicas.max``: the most any need is reported as.
        calibrated_live: whether the live calibration (``PoolState.live_fit``) made ``model`` faster
            than the prior (:func:`faster_only`).
    """

    model: ReplicaModel
    limits: EngineLimits
    shape: WorkloadShape
    live: bool
    burstiness: Burstiness
    factor: float
    itl_s: float
    ttft_s: float
    max_replicas: int
    calibrated_live: bool = False

    def with_factor(self, factor: float) -> Capacity:
        """This capacity with the correction ``factor`` in force instead."""
        return replace(self, factor=factor)

    def need(self, rate_rps: float, hint: int | None = None) -> FleetNeed:
        """Replicas ``rate_rps`` arrivals need at the SLO with the correction in force (at most
        ``max_replicas``; a rate too large to be real reads as needing all of them)."""
        rate = min(max(rate_rps, 0.0), _HUGE_RPS) if math.isfinite(rate_rps) else _HUGE_RPS
        return fleet_need(
            self.model,
            self.shape,
            self.limits,
            self.itl_s,
            self.ttft_s,
            rate,
            burstiness=self.burstiness,
            capacity_factor=self.factor,
            limit=max(self.max_replicas, 1),
            hint=hint,
        )


def capacity_context(
    spec: LLMDeploymentSpec, shape: WorkloadShape, live: bool, burstiness: Burstiness, factor: float,
    live_fit: EfficiencyFit | None = None,
) -> Capacity | None:
    """The :class:`Capacity` of ``spec``'s replicas, or ``None`` when the model cannot place them
    (the weights do not fit the GPUs): the policy then scales on its leading signals alone.
    ``live_fit``: the efficiencies the engines' own histograms gave (:mod:`llmscale.policy.livefit`),
    applied over the prior (``spec.model.calibration`` or the planning defaults) where it says the
    engines are faster (:func:`faster_only`)."""
    model = _model(spec.model, spec.resources)
    if model is None:
        return None
    prior = model
    limits = engine_limits(spec)
    if live_fit is not None:
        model = faster_only(live_fit, model, limits)
    return Capacity(
        model,
        limits,
        shape,
        live,
        burstiness,
        factor,
        spec.slo.itl_p95_seconds,
        spec.slo.ttft_p95_seconds,
        spec.replicas.max,
        model != prior,
    )


def faster_only(fit: EfficiencyFit, model: ReplicaModel, limits: EngineLimits) -> ReplicaModel:
    """``model`` with each side of ``fit`` that makes no step slower: the decode side (bandwidth,
    step and per-sequence overhead) and then the prefill side (compute, and attention where the
    prior has an attention term), each taken whole, and only where the model with it is no slower
    than without at every anchor step (a decode step of 1 and of ``limits.max_num_seqs`` sequences
    at 1,024 tokens of context, a lone budget-sized prefill chunk) and the whole fit is no slower
    than the model at that side's anchors, and faster at one of them by more than the fit's rms
    relative error (within its error, a side is the model measured).

    Sides, not figures: a fit's figures are solved together, so a higher bandwidth beside a larger
    overhead is one slower decode step, and taking only the bandwidth would make a model faster than
    anything measured. One way: the live windows still read some steps slower than they are (the
    full batch extrapolated, bursts, prompts sharing steps; measured in docs/calibrate.md, "In
    production", where both ways cost 1.33-1.41x the limit on robustness cases one way meets at
    1.00x), so a fit that says *slower* is not evidence: the SLO's breaches are, and the capacity
    correction learns from them. A fit that says *faster* is evidence the correction cannot gather
    (a pool sized above its need never breaches)."""
    seqs = float(limits.max_num_seqs)
    chunk = float(limits.max_num_batched_tokens)
    anchors = ((1.0, 1024.0, 0.0, 0.0), (seqs, seqs * 1024.0, 0.0, 0.0), (0.0, 0.0, chunk, chunk * chunk / 2.0))

    def no_slower(candidate: ReplicaModel, than: ReplicaModel,
                  at: tuple[tuple[float, float, float, float], ...] = anchors) -> bool:
        return all(candidate.step_time(d, kv, p, pairs) <= than.step_time(d, kv, p, pairs) * (1.0 + 1e-9)
                   for d, kv, p, pairs in at)

    # No attention term where the prior has none (the fit then has none either).
    fitted_attention = model.attention_efficiency if fit.attention_efficiency is None else fit.attention_efficiency
    attention = fitted_attention if model.attention_efficiency is not None else None
    whole = fit.apply(model).with_changes(attention_efficiency=attention)
    decode_anchors, prefill_anchors = anchors[:2], anchors[2:]
    decode = model.with_changes(bandwidth_efficiency=fit.bandwidth_efficiency, step_overhead_s=fit.step_overhead_s,
                                seq_overhead_s=fit.seq_overhead_s)
    # A side is taken where the whole fit says so too: the sides are solved together, and a faster
    # bandwidth beside a slower compute can be one way of explaining steps that mix decodes and
    # chunks (a 70B engine equal to its model read bandwidth x1.08 beside compute x0.90).
    # And only beyond the fit's own error: a side within it of the model is the model, measured
    # (mooncake-day's prefill read x1.00-1.01 at an rms of 5 % was taken on most ticks).
    margin = fit.rms_relative_error if math.isfinite(fit.rms_relative_error) else math.inf

    def beyond(candidate: ReplicaModel, than: ReplicaModel, at: tuple[tuple[float, float, float, float], ...]) -> bool:
        return any(candidate.step_time(d, kv, p, pairs) < than.step_time(d, kv, p, pairs) * (1.0 - margin)
                   for d, kv, p, pairs in at)

    base = (decode if no_slower(decode, model) and no_slower(whole, model, decode_anchors)
            and beyond(decode, model, decode_anchors) else model)
    prefill = base.with_changes(compute_efficiency=fit.compute_efficiency, attention_efficiency=attention)
    taken = (no_slower(prefill, base) and no_slower(whole, model, prefill_anchors)
             and beyond(prefill, base, prefill_anchors))
    return prefill if taken else base


def factor_in_force(correction: CapacityCorrection | None) -> float:
    """The capacity factor a correction holds, within its bounds; 1 without one."""
    if correction is None or not math.isfinite(correction.factor):
        return 1.0
    return min(max(correction.factor, CAPACITY_FACTOR_MIN), CAPACITY_FACTOR_MAX)


def factor_needing(cap: Capacity, rate_rps: float, replicas: int) -> float:
    """The largest capacity factor, at most ``cap.factor``, at which the model needs at least
    ``replicas`` for ``rate_rps`` requests/s (within 1 %; :data:`CAPACITY_FACTOR_MIN` when even that
    needs fewer). ``cap.factor`` itself when it already does, or when ``replicas`` is beyond
    ``cap.max_replicas`` (the need is reported at most that). Bisection in log-factor: the need
    falls as the factor grows."""
    # The need is reported at most spec.replicas.max: beyond it no factor says more, so none is forced.
    if not 0 < replicas <= cap.max_replicas or cap.need(rate_rps, hint=replicas).replicas >= replicas:
        return cap.factor
    lo = CAPACITY_FACTOR_MIN
    if lo >= cap.factor or cap.with_factor(lo).need(rate_rps, hint=replicas).replicas < replicas:
        return min(lo, cap.factor)
    hi = cap.factor
    while hi / lo > 1.01:
        mid = math.sqrt(lo * hi)
        if cap.with_factor(mid).need(rate_rps, hint=replicas).replicas >= replicas:
            lo = mid
        else:
            hi = mid
    return lo


def correct(
    correction: CapacityCorrection | None, breached: str | None, minute_at: float
) -> CapacityCorrection:
    """Count one minute in which the pool was sized as the model says (module docstring).

    ``ln c += η·(τ − 1{breach})``: e.g. from 1.0, a breach gives ``e^(−0.05 × 0.995)`` = 0.951; a
    minute within the SLO then ``× e^(0.05 × 0.005)``, 1.00025 (so 200 such minutes undo the breach).
    ``η`` doubles with each breach in a row (``streak``), up to 16 × 0.05: four breaches in a row
    from 1.0 give 0.951, 0.905, 0.819, 0.671.

    Args:
        correction: the correction so far, or ``None`` (factor 1).
        breached: what broke this minute in words, or ``None`` when both p95s were within the SLO.
        minute_at: ``observed_at`` of the snapshot whose p95s were judged, seconds since the epoch.

    Returns:
        The new correction (its ``updated_at`` is ``minute_at``; the last breach is kept in words).
    """
    factor = factor_in_force(correction)
    streak = correction.streak if correction is not None and breached is not None else 0
    # Consecutive breaches double the step (at most CORRECTION_STREAK_DOUBLINGS times): a model
    # wrong by far is not learnt at 5 % a minute while every minute breaks.
    eta = CORRECTION_STEP * 2.0 ** min(streak, CORRECTION_STREAK_DOUBLINGS)
    step = eta * (CORRECTION_TARGET - (1.0 if breached is not None else 0.0))
    factor = min(max(factor * math.exp(step), CAPACITY_FACTOR_MIN), CAPACITY_FACTOR_MAX)
    last = breached if breached is not None else (correction.breach if correction is not None else "")
    return CapacityCorrection(factor, minute_at, last, streak + 1 if breached is not None else 0)
