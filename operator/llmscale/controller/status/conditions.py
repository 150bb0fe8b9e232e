"""``status.conditions``: the ``Ready`` condition of the interactive pool, and merging a tick's
conditions into the object's with ``lastTransitionTime`` kept while a status holds. Pure.

``ScalingActive`` (whether llmscale writes the replicas it decides: ``spec.mode``, and whether
the workload of ``spec.scaleTargetRef`` can be read and written) is the shell's
(:mod:`llmscale.controller.status.mode`). The other conditions are the policy's: ``MetricsAvailable``,
``AbleToScale``, ``ScalingLimited``, ``BatchWindowOpen``, ``PolicyStateReadable``,
``CapacityModel``, ``Diagnosis`` from the :class:`~llmscale.policy.types.Decision`,
``RateWindowFits`` and ``EnginesStalled`` from the snapshot (:mod:`llmscale.policy.signal_health`),
``BatchBacklog`` and ``DeadlineAtRisk`` the batch planner's (:mod:`llmscale.policy.batch.plan`);
docs/policy.md lists their reasons. ``ChildrenApplied`` (:mod:`llmscale.controller.applyfailure`)
and ``SoleAutoscaler`` (:mod:`llmscale.controller.autoscalers`) and ``PodsHealthy``
(:mod:`llmscale.controller.failedpods`), ``RolloutProgressing`` (:mod:`llmscale.controller.rollout`),
``SLOTargetsOnBuckets`` (:mod:`llmscale.controller.slobuckets`) and ``EngineCalibrated``
(:mod:`llmscale.controller.livefit`) are the shell's; docs/operator.md lists theirs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from llmscale.api import Condition
from llmscale.controller.state.timestamps import rfc3339
from llmscale.policy.types import ConditionResult, PoolState

__all__ = ["BATCH_BACKLOG", "CONDITION_TYPES", "DEADLINE_AT_RISK", "READY_REASONS", "merge_conditions",
           "ready_condition"]

#: The batch planner's conditions (:class:`~llmscale.policy.batch.plan.BatchPlan`).
BATCH_BACKLOG = "BatchBacklog"
DEADLINE_AT_RISK = "DeadlineAtRisk"

#: Conditions the operator maintains on ``status.conditions``, in display order.
CONDITION_TYPES: tuple[str, ...] = (
    "Ready",
    "ScalingActive",
    "MetricsAvailable",
    "RateWindowFits",
    "EnginesStalled",
    "AbleToScale",
    "ScalingLimited",
    "BatchWindowOpen",
    "BatchBacklog",
    "DeadlineAtRisk",
    "PolicyStateReadable",
    "CapacityModel",
    "Diagnosis",
    "ChildrenApplied",
    "SoleAutoscaler",
    "PodsHealthy",
    "RolloutProgressing",
    "SoleJobManager",
    "SLOTargetsOnBuckets",
    "EngineCalibrated",
)

#: Every reason of the ``Ready`` condition: :func:`ready_condition`'s, ``InvalidSpec``
#: (:mod:`llmscale.controller.invalid`) and ``FailedGetScale`` (:mod:`llmscale.controller.targeterror`).
#: docs/troubleshooting.md has a row for each.
READY_REASONS: tuple[str, ...] = (
    "AllReplicasReady", "Serving", "NoReplicaReady", "Unschedulable", "ScaledToZero", "InvalidSpec", "FailedGetScale",
)


def ready_condition(desired: int, state: PoolState) -> ConditionResult:
    """Return the ``Ready`` condition of the interactive pool.

    ``True`` once at least one replica serves (reason ``AllReplicasReady`` or ``Serving`` with the
    count of replicas still in their cold start), ``False`` while none does (``NoReplicaReady``,
    or ``Unschedulable`` when pods wait for GPUs) or when the pool is scaled to zero.
    """
    ready = state.interactive_ready
    if desired == 0:
        return ConditionResult("False", "ScaledToZero", "The interactive pool is scaled to zero")
    if ready >= desired:
        return ConditionResult("True", "AllReplicasReady", f"{ready} of {desired} replicas ready")
    starting = f"{state.interactive_starting} starting"
    if state.interactive_unschedulable:
        starting += f", {state.interactive_unschedulable} unschedulable"
    if state.interactive_failed:
        starting += f", {state.interactive_failed} failed (see PodsHealthy)"
    if ready > 0:
        return ConditionResult("True", "Serving", f"{ready} of {desired} replicas ready; {starting}")
    reason = "Unschedulable" if state.interactive_unschedulable else "NoReplicaReady"
    return ConditionResult("False", reason, f"0 of {desired} replicas ready; {starting}")


def merge_conditions(
    previous: Sequence[Mapping[str, Any]] | None,
    current: Mapping[str, ConditionResult],
    now: float,
    generation: int | None,
) -> list[dict[str, Any]]:
    """Return ``status.conditions`` with ``lastTransitionTime`` kept where the status is unchanged.

    ``lastTransitionTime`` moves only when ``status`` flips (metav1.Condition's rule); a new
    reason or message with the same status keeps the old time. Conditions of other types in
    ``previous`` (e.g. written by another tool) are kept, after ours.

    Args:
        previous: the conditions now on the object.
        current: condition type -> result for the types this write sets.
        now: seconds since the epoch.
        generation: ``metadata.generation`` the conditions were computed for.
    """
    prev_by_type = {c.get("type"): c for c in previous or () if isinstance(c, Mapping)}
    out: list[dict[str, Any]] = []
    ordered = [t for t in CONDITION_TYPES if t in current] + [t for t in current if t not in CONDITION_TYPES]
    for type_ in ordered:
        result = current[type_]
        prev = prev_by_type.get(type_)
        since = prev.get("lastTransitionTime") if prev and prev.get("status") == result.status else None
        cond = Condition(
            type=type_,
            status=result.status,
            reason=result.reason,
            message=result.message,
            last_transition_time=since or rfc3339(now),
            observed_generation=generation,
        )
        out.append(cond.to_wire())
    out.extend(dict(c) for t, c in prev_by_type.items() if t not in current and isinstance(t, str))
    return out
