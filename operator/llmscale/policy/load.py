"""The load signal and the closed-loop capacity correction.

**Load.** The arrival rate times the work of the live mix gives the replicas the SLO needs
(:func:`llmscale.model.capacity.fleet_need`: chunked prefill, per-token ITL p95, the prefill queue,
the minute-to-minute burstiness): what NVIDIA Dynamo's planner reads off offline profiling runs,
here from the roofline model and the live mix, with no profiling run. A backlog already waiting
beyond ``spec.scaling.targets.queueDepthPerReplica`` per ready replica is added as the rate that
drains it within one lead time: replicas asked for now serve one lead time later, so a faster drain
is not possible and a slower one leaves the backlog for the next burst. The backlog is bounded by
what arrives in one lead time, so the ask is bounded too: no cascade while replicas start.

**Correction.** The model is a model. When a p95 breaks while the leading signals are quiet (they ask
for no more than the pool has and nothing is starting), the pool of ``R`` ready replicas missed the
SLO at ``λ`` requests/s, where the model said ``R`` carry ``c·cap(R)`` (``c`` the factor in force):
the pool carries less than ``λ``. :func:`learn` lowers the factor to ``λ / cap(R)``, so that the
model asks for more than ``R`` at that load, bounded below by :data:`CAPACITY_FACTOR_MIN`. The
factor then drifts back towards 1 with a half-life of :data:`CORRECTION_HALF_LIFE_S` (a correction
learnt on one day's peak still holds at the next day's; a model error that persists is learnt
again, at the cost of a minute's p95). It is persisted in ``status.policyState`` and named in the
reasons.

Pure: no clock, no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from llmscale.api import LLMDeploymentSpec, ModelSpec, ResourcesSpec
from llmscale.model import ModelDoesNotFit, ReplicaModel
from llmscale.model.capacity import (
    Burstiness,
    EngineLimits,
    FleetNeed,
    ReplicaPoint,
    WorkloadShape,
    capacity_per_replica,
    engine_limits,
    fleet_need,
)
from llmscale.policy.types import CapacityCorrection

__all__ = [
    "CAPACITY_FACTOR_MIN",
    "CORRECTION_HALF_LIFE_S",
    "Capacity",
    "capacity_context",
    "factor_in_force",
    "learn",
]

#: Lowest capacity correction: 0.5. The roofline's efficiencies are planning values within about a
#: factor of two of measured ones (``llmscale.model.roofline``); a pool that carries less than half
#: of what the model says is not a model error the policy should paper over — the Diagnosis and
#: CapacityModel conditions say so, and the latency guard still adds a replica at a time.
CAPACITY_FACTOR_MIN = 0.5

#: Half-life of a correction, seconds: one day, the period of the load's shape.
CORRECTION_HALF_LIFE_S = 86_400.0

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
        factor: the capacity correction in force, (0, 1].
        itl_s / ttft_s: the SLO's p95 targets, seconds.
        max_replicas: ``spec.replicas.max``: the most any need is reported as.
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

    def pool_capacity_rps(self, replicas: int) -> float:
        """Requests/s ``replicas`` carry within the SLO by the uncorrected model."""
        if replicas <= 0:
            return 0.0
        per, _, _ = _capacity(self, min(replicas, 4096))
        return float(per) * replicas


def _capacity(cap: Capacity, replicas: int) -> tuple[float, ReplicaPoint, str]:
    return capacity_per_replica(
        cap.model, cap.shape, cap.limits, cap.itl_s, cap.ttft_s, replicas=replicas, burstiness=cap.burstiness
    )


def capacity_context(
    spec: LLMDeploymentSpec, shape: WorkloadShape, live: bool, burstiness: Burstiness, factor: float
) -> Capacity | None:
    """The :class:`Capacity` of ``spec``'s replicas, or ``None`` when the model cannot place them
    (the weights do not fit the GPUs): the policy then scales on its leading signals alone."""
    model = _model(spec.model, spec.resources)
    if model is None:
        return None
    return Capacity(
        model,
        engine_limits(spec),
        shape,
        live,
        burstiness,
        factor,
        spec.slo.itl_p95_seconds,
        spec.slo.ttft_p95_seconds,
        spec.replicas.max,
    )


def factor_in_force(correction: CapacityCorrection | None, now: float) -> float:
    """The correction factor at ``now``: ``1 − (1 − f)·2^(−age / half-life)``; 1 without one.

    E.g. 0.8 learnt a day ago → 0.9 now.
    """
    if correction is None:
        return 1.0
    age = max(now - correction.learned_at, 0.0)
    f = min(max(correction.factor, CAPACITY_FACTOR_MIN), 1.0)
    return 1.0 - (1.0 - f) * math.pow(0.5, age / CORRECTION_HALF_LIFE_S)


def learn(cap: Capacity, rate_rps: float, ready: int, breach: str, now: float) -> CapacityCorrection | None:
    """Lower the capacity factor after a p95 broke on ``ready`` replicas at ``rate_rps`` arrivals.

    ``factor = min(factor in force, λ / cap(R))`` where ``cap(R)`` is what ``R`` ready replicas carry
    by the uncorrected model, bounded below by :data:`CAPACITY_FACTOR_MIN`. E.g. 6 replicas that the
    model says carry 36 requests/s broke the ITL p95 at 31.2: factor 0.867, and the load signal
    then asks for 7 at that rate.

    Returns:
        The new correction, or ``None`` when nothing can be learnt (no ready replica, no rate).
    """
    if ready <= 0 or not (math.isfinite(rate_rps) and rate_rps > 0):
        return None
    carried = cap.pool_capacity_rps(ready)
    if carried <= 0:
        return None
    factor = max(CAPACITY_FACTOR_MIN, min(cap.factor, rate_rps / carried))
    return CapacityCorrection(factor, now, breach)
