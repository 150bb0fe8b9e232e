"""The batch planner after the scaling decision: one tick's batch step, shared by the operator and
the simulator. Pure: no I/O, no clock.

:func:`~llmscale.policy.decide` sizes the interactive pool; :func:`batch_step` then gathers the
batch planner's inputs from that decision and the same tick's pool state and signals, runs
:func:`~llmscale.policy.batch.plan.plan_batch`, and returns the decision with the batch pool the plan
sized (``Decision.batch_replicas``), its reasons appended, plus the two batch conditions
(``BatchBacklog``, ``DeadlineAtRisk``) and ``status.batch``.

``decide`` still judges the windows (``BatchWindowOpen``) but its batch size is the fixed schedule
of before Jobs (``spec.batch.replicas`` inside a window): the plan replaces it, and the decision's
line and condition message that state that fixed size are replaced by the plan's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from llmscale.api import BatchStatus, LLMDeploymentSpec
from llmscale.model import ModelDoesNotFit
from llmscale.policy.batch.jobs import BatchJob, JobState
from llmscale.policy.batch.plan import (
    STATUS_JOBS,
    BatchPlan,
    BatchPoolState,
    InteractiveState,
    ReplicaRate,
    batch_replica_rate,
    plan_batch,
)
from llmscale.policy.types import ConditionResult, Decision, PoolState
from llmscale.signals.snapshot import SignalSnapshot

__all__ = ["THROUGHPUT_UNKNOWN", "BatchStep", "batch_step", "interactive_state", "latency_within_slo"]

#: Reason of ``BatchBacklog`` and ``DeadlineAtRisk`` (status ``Unknown``) when the performance model
#: gives no throughput for the replica (the model, or one sequence of the backlog's mix, does not
#: fit its GPUs): the batch pool holds its size and no Job is released or paused.
THROUGHPUT_UNKNOWN = "ThroughputUnknown"


def latency_within_slo(spec: LLMDeploymentSpec, snapshot: SignalSnapshot | None, now: float) -> bool | None:
    """Return whether the interactive pool's p95 latency is within ``spec.slo``.

    ``False`` when the TTFT or the ITL p95 of a fresh snapshot (at most
    ``spec.scaling.metricsMaxAgeSeconds`` old) breaches its SLO; ``True`` when both are known and
    within; ``None`` (unknown, which the batch planner reads as not safe) otherwise: no snapshot, a
    stale one, or a p95 that is unknown (no request finished in its window).
    """
    if snapshot is None or snapshot.age(now) > spec.scaling.metrics_max_age_seconds:
        return None
    ttft, itl = snapshot.ttft_p95_s, snapshot.itl_p95_s
    if (ttft is not None and ttft > spec.slo.ttft_p95_seconds) or (itl is not None and itl > spec.slo.itl_p95_seconds):
        return False
    if ttft is None or itl is None:
        return None
    return True


def interactive_state(
    spec: LLMDeploymentSpec, decision: Decision, state: PoolState, snapshot: SignalSnapshot | None, now: float
) -> InteractiveState:
    """Return the interactive pool as the batch planner needs it: the replicas ``decision`` asked
    for, the pool's Ready, starting and unschedulable pods from ``state``, whether the decision had
    usable signals, and :func:`latency_within_slo`."""
    return InteractiveState(
        desired_replicas=decision.interactive_replicas,
        ready_replicas=state.interactive_ready,
        starting_replicas=state.interactive_starting,
        unschedulable=state.interactive_unschedulable,
        signals_valid=decision.valid,
        latency_within_slo=latency_within_slo(spec, snapshot, now),
    )


@dataclass(frozen=True, slots=True)
class BatchStep:
    """One tick's batch step.

    Attributes:
        decision: the scaling decision with ``batch_replicas`` from the plan, the plan's reasons
            appended (the fixed-schedule line of ``decide`` left out) and ``BatchWindowOpen``'s
            message saying the pool follows the backlog.
        plan: the batch plan (``None`` when the performance model gave no throughput: the pool
            then holds and no Job is touched).
        batch_backlog / deadline_at_risk: the two conditions.
        status: ``status.batch`` (``None`` without ``spec.batch``).
    """

    decision: Decision
    plan: BatchPlan | None
    batch_backlog: ConditionResult
    deadline_at_risk: ConditionResult
    status: BatchStatus | None


def _clock(t: float | None) -> str:
    return "beyond 14 days" if t is None else datetime.fromtimestamp(t, tz=UTC).strftime("%a %H:%M UTC")


def _window_message(plan: BatchPlan) -> str:
    if plan.window_open:
        head = f"a trough window is open until {_clock(plan.next_window_close)}"
    else:
        head = f"no trough window open; the next opens {_clock(plan.next_window_open)}"
    return f"{head}: the batch pool follows the backlog ({plan.replicas} replicas)"


def _reasons(decision: Decision, lines: Sequence[str]) -> tuple[str, ...]:
    fixed = decision.batch_window_open.message
    kept = [r for r in decision.reasons if r != fixed]
    jobs = [line for line in lines if line.startswith("Job ")]
    other = [line for line in lines if not line.startswith("Job ")]
    shown = jobs[:STATUS_JOBS]
    if len(jobs) > len(shown):
        shown.append(f"Job lines for {len(jobs) - len(shown)} more Jobs left out")
    return (*kept, *(f"batch: {line}" for line in (*other, *shown)))


def batch_step(
    spec: LLMDeploymentSpec,
    jobs: Sequence[BatchJob],
    decision: Decision,
    state: PoolState,
    snapshot: SignalSnapshot | None,
    now: float,
    gpus_free: int | None = None,
) -> BatchStep:
    """Plan the batch pool and Jobs after ``decision`` (module docstring).

    Args:
        spec: the LLMDeployment spec.
        jobs: the Jobs labelled for this LLMDeployment, parsed
            (:func:`~llmscale.policy.batch.jobs.parse_job`).
        decision: ``decide``'s decision of this tick.
        state: the pools' state ``decide`` was given.
        snapshot: the interactive pool's newest signal snapshot (its p95 latencies).
        now: seconds since the Unix epoch.
        gpus_free: GPUs the batch pool could take now (``None``: unknown; then the pool is not bounded
            by GPUs and nothing is released onto idle GPUs).

    Returns:
        The :class:`BatchStep`.
    """
    outstanding = [j for j in jobs if j.state is not JobState.Done]
    rate = ReplicaRate(1.0)  # not read: with no Job outstanding nothing is sized or projected
    if spec.batch is not None and outstanding:
        try:
            rate = batch_replica_rate(spec, jobs)
        except ModelDoesNotFit as exc:
            message = (f"the performance model gives no batch throughput ({exc}): the batch pool holds "
                       f"{state.batch_replicas} replicas and no Job is released or paused")
            unknown = ConditionResult("Unknown", THROUGHPUT_UNKNOWN, message)
            held = dataclasses.replace(
                decision, batch_replicas=state.batch_replicas, reasons=_reasons(decision, [message]),
                batch_window_open=dataclasses.replace(decision.batch_window_open, message=message),
            )
            return BatchStep(held, None, unknown, unknown, None)
    plan = plan_batch(
        spec,
        jobs,
        interactive_state(spec, decision, state, snapshot, now),
        BatchPoolState(state.batch_replicas, state.batch_ready, gpus_free),
        rate,
        now,
    )
    window = decision.batch_window_open
    if spec.batch is not None:
        window = dataclasses.replace(window, message=_window_message(plan))
    planned = dataclasses.replace(
        decision,
        batch_replicas=plan.replicas,
        reasons=_reasons(decision, plan.reasons) if spec.batch is not None else decision.reasons,
        batch_window_open=window,
    )
    return BatchStep(
        planned,
        plan,
        plan.batch_backlog,
        plan.deadline_at_risk,
        plan.status() if spec.batch is not None else None,
    )
