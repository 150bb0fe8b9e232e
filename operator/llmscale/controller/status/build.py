"""The operator-owned ``status`` of an LLMDeployment, in wire format: after a tick (replicas,
signals, last decision, conditions, policy memory), or for a spec the operator cannot use. Pure;
:mod:`llmscale.controller.status.statuspatch` decides whether it is written.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from llmscale.api import BatchStatus, DecisionStatus, LLMDeploymentStatus, ReplicaStatus, SignalStatus
from llmscale.controller.state.timestamps import rfc3339
from llmscale.controller.status.conditions import merge_conditions, ready_condition
from llmscale.policy.signal_health import engines_stalled_condition, rate_window_condition
from llmscale.policy.types import ConditionResult, Decision, PolicyMemory, PoolState
from llmscale.signals.snapshot import SignalSnapshot

__all__ = ["build_status", "invalid_status"]


def _signals(snapshot: SignalSnapshot | None) -> SignalStatus:
    if snapshot is None:
        return SignalStatus()
    return SignalStatus(
        observed_at=rfc3339(snapshot.observed_at),
        queue_depth=snapshot.queue_depth,
        running_requests=snapshot.running_requests,
        kv_cache_utilization=snapshot.kv_cache_utilization,
        preemption_rate=snapshot.preemption_rate,
        ttft_p95_seconds=snapshot.ttft_p95_s,
        itl_p95_seconds=snapshot.itl_p95_s,
    )


def build_status(
    *,
    decision: Decision,
    snapshot: SignalSnapshot | None,
    state: PoolState,
    applied_interactive: int,
    applied_batch: int,
    generation: int | None,
    previous: Mapping[str, Any] | None,
    now: float,
    memory: PolicyMemory | None = None,
    extra_conditions: Mapping[str, ConditionResult] | None = None,
    current_interactive: int | None = None,
    scaling_active: ConditionResult | None = None,
    placeholders: int | None = None,
    placeholders_running: int | None = None,
    pools: Mapping[str, Any] | None = None,
    usage_ledger: Mapping[str, Any] | None = None,
    batch: BatchStatus | None = None,
) -> dict[str, Any]:
    """Return the operator-owned part of ``status`` after a tick, in wire format.

    Args:
        decision: the policy's decision.
        snapshot: the newest signal snapshot (``None`` if none was read).
        state: the pools as observed before the decision was applied.
        applied_interactive / applied_batch: the replicas now set on the Deployments (equal to the
            decision unless applying it failed).
        generation: ``metadata.generation`` acted on.
        previous: the current ``status`` of the object (for ``lastTransitionTime``).
        now: seconds since the epoch.
        memory: the policy memory to save in ``status.policyState``; ``decision.memory`` when
            ``None`` (the operator passes the memory that matches what it applied).
        extra_conditions: conditions beyond the policy's, by type: the batch planner's
            (``BatchBacklog``, ``DeadlineAtRisk``) and the shell's own (``ChildrenApplied``,
            ``SoleAutoscaler``).
        current_interactive: the replicas the workload has now (``replicas.current``; the
            ``Ready`` condition is judged against it); ``applied_interactive`` when ``None``.
        scaling_active: the ``ScalingActive`` condition (:mod:`llmscale.controller.status.mode`); left out
            when ``None``.
        placeholders / placeholders_running: placeholder pods asked for and bound to a node
            (``spec.headroom.warmNodes``); left out when ``None``.
        pools: ``status.pools`` in wire format (:mod:`llmscale.controller.report`), or ``None``.
        usage_ledger: ``status.usageLedger`` in wire format, or ``None``.
        batch: ``status.batch`` (``None`` without ``spec.batch``: then a ``batch`` in ``previous``
            is removed).
    """
    status = LLMDeploymentStatus(
        observed_generation=generation,
        replicas=ReplicaStatus(
            desired=applied_interactive,
            ready=state.interactive_ready,
            headroom=decision.headroom_replicas,
            batch=applied_batch,
            batch_ready=state.batch_ready,
            lead_time_seconds=decision.lead_time_s,
            current=current_interactive if current_interactive is not None else applied_interactive,
            placeholders=placeholders,
            placeholders_running=placeholders_running,
        ),
        signals=_signals(snapshot),
        last_decision=DecisionStatus(
            at=rfc3339(now),
            interactive_replicas=decision.interactive_replicas,
            batch_replicas=decision.batch_replicas,
            reasons=list(decision.reasons),
        ),
        conditions=[],
        batch=batch,
        policy_state=(memory if memory is not None else decision.memory).to_dict(),
    ).to_wire()
    if batch is None and "batch" in (previous or {}):
        status["batch"] = None  # spec.batch removed: the merge patch deletes the backlog
    status["conditions"] = merge_conditions(
        (previous or {}).get("conditions"),
        {
            "Ready": ready_condition(current_interactive if current_interactive is not None else applied_interactive,
                                    state),
            **({"ScalingActive": scaling_active} if scaling_active is not None else {}),
            "MetricsAvailable": decision.metrics_available,
            "RateWindowFits": rate_window_condition(snapshot),
            "EnginesStalled": engines_stalled_condition(snapshot),
            "AbleToScale": decision.able_to_scale,
            "ScalingLimited": decision.scaling_limited,
            "BatchWindowOpen": decision.batch_window_open,
            "PolicyStateReadable": decision.policy_state_readable,
            "CapacityModel": decision.capacity_model,
            "Diagnosis": decision.diagnosis,
            **(extra_conditions or {}),
        },
        now,
        generation,
    )
    if pools:
        status["pools"] = dict(pools)
    if usage_ledger:
        status["usageLedger"] = dict(usage_ledger)
    return status


def invalid_status(
    message: str, generation: int | None, previous: Mapping[str, Any] | None, now: float
) -> dict[str, Any]:
    """Return the status of an object whose spec the operator cannot use: ``Ready=False``,
    reason ``InvalidSpec`` with the validation message; everything else is left as it was."""
    conditions = merge_conditions(
        (previous or {}).get("conditions"),
        {"Ready": ConditionResult("False", "InvalidSpec", message)},
        now,
        generation,
    )
    return {"observedGeneration": generation, "conditions": conditions}
