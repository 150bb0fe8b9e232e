"""Invariants of the batch planner as Hypothesis properties (strategies in tests/strategies.py).

Never above the spec's bound, zero with no backlog, a Job whose deadline cannot wait is run,
interactive unschedulable pods take GPUs from batch first, only ``spec.suspend`` of Waiting or
Running Jobs changes, the conditions keep to their own reasons, and the plan does not depend on the
order the Jobs were listed in.
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st
from tests.policy.test_reasons import CONDITIONS
from tests.strategies import BatchPlanInputs as Inputs
from tests.strategies import batch_plan_inputs
from tests.strategies import most_batch_replicas as _most

from llmscale.policy import batch_window_open
from llmscale.policy.batch.jobs import BatchJob, JobState
from llmscale.policy.batch.plan import (
    BatchPlan,
    BatchPoolState,
    JobAction,
    RunMode,
    plan_batch,
)

EXAMPLES = settings(max_examples=200, deadline=None)


@EXAMPLES
@given(batch_plan_inputs())
def test_the_batch_plan_keeps_within_its_replica_bounds(args: Inputs) -> None:
    spec = args[0]
    plan = plan_batch(*args)
    assert 0 <= plan.replicas <= _most(spec)


@EXAMPLES
@given(batch_plan_inputs())
def test_the_batch_plan_takes_no_more_than_the_free_gpus(args: Inputs) -> None:
    spec, _, _, pool, _, _ = args
    plan = plan_batch(*args)
    if pool.gpus_free is not None:
        assert plan.replicas <= max(pool.replicas, 0) + pool.gpus_free // spec.resources.gpus_per_replica


@EXAMPLES
@given(batch_plan_inputs())
def test_the_batch_plan_gives_way_while_interactive_pods_wait(args: Inputs) -> None:
    _, _, interactive, pool, _, _ = args
    plan = plan_batch(*args)
    if interactive.unschedulable:
        # Batch gives back first and takes nothing new while interactive pods wait for GPUs.
        assert plan.replicas <= max(0, pool.replicas - interactive.unschedulable)
        assert plan.release == ()


@EXAMPLES
@given(batch_plan_inputs())
def test_zero_with_no_backlog(args: Inputs) -> None:
    spec, jobs, interactive, pool, tok_s, now = args
    done = [replace(j, state=JobState.Done) for j in jobs]
    plan = plan_batch(spec, done, interactive, pool, tok_s, now)
    assert (plan.replicas, plan.release, plan.pause) == (0, (), ())
    assert plan.batch_backlog.status == "False"


@EXAMPLES
@given(batch_plan_inputs())
def test_only_suspend_of_waiting_or_running_jobs_changes(args: Inputs) -> None:
    plan = plan_batch(*args)
    assert {p.job.name for p in plan.jobs} == {j.name for j in args[1]}
    for p in plan.jobs:
        if p.action is JobAction.Release:
            assert p.job.state is JobState.Waiting and p.mode is not None and plan.replicas > 0
            assert args[3].ready >= 1
        if p.action is JobAction.Pause:
            assert p.job.state is JobState.Running
        if p.job.state in (JobState.Done, JobState.Draining):
            assert p.action is JobAction.Keep


@EXAMPLES
@given(batch_plan_inputs(), st.floats(0, 3600))
def test_a_deadline_that_cannot_wait_is_run(args: Inputs, due_in_s: float) -> None:
    """A Job due within the hour while no window is open all that hour cannot wait: with a pool that
    may run (bound > 0, a Ready replica, no interactive pod unschedulable, GPUs free unknown) a
    Waiting one is released and a Running one keeps running."""
    spec, jobs, interactive, pool, tok_s, now = args
    assert spec.batch is not None
    if any(batch_window_open(spec.batch.windows, now + 60 * m) for m in range(61)):
        return
    interactive = replace(interactive, unschedulable=0)
    pool = BatchPoolState(replicas=pool.replicas, ready=max(pool.ready, 1), gpus_free=None)
    for state, action in ((JobState.Waiting, JobAction.Release), (JobState.Running, JobAction.Keep)):
        urgent = BatchJob(
            name="urgent",
            deployment="chat",
            state=state,
            created_at=now - 3600,
            deadline=now + due_in_s,
            deadline_source="annotation",
            requests=10,
            input_tokens=1000,
            output_tokens=100,
        )
        plan = plan_batch(spec, [*jobs, urgent], interactive, pool, tok_s, now)
        [mine] = [p for p in plan.jobs if p.job.name == "urgent"]
        if _most(spec) == 0:
            assert mine.mode is None and plan.replicas == 0
            continue
        assert mine.mode is RunMode.Deadline
        assert mine.action is action, plan.reasons
        assert plan.replicas >= 1


@EXAMPLES
@given(batch_plan_inputs())
def test_interactive_unschedulable_shrinks_batch_before_anything_else(args: Inputs) -> None:
    spec, jobs, interactive, pool, tok_s, now = args
    calm = plan_batch(spec, jobs, replace(interactive, unschedulable=0), pool, tok_s, now)
    pressed = plan_batch(
        spec, jobs, replace(interactive, unschedulable=max(1, interactive.unschedulable)), pool, tok_s, now
    )
    assert pressed.replicas <= calm.replicas
    assert pressed.replicas <= max(0, pool.replicas - 1)


@EXAMPLES
@given(batch_plan_inputs())
def test_conditions_keep_to_their_reasons(args: Inputs) -> None:
    plan = plan_batch(*args)
    assert plan.batch_backlog.reason in CONDITIONS["BatchBacklog"]
    assert plan.deadline_at_risk.reason in CONDITIONS["DeadlineAtRisk"]
    outstanding = [j for j in args[1] if j.state is not JobState.Done]
    assert (plan.batch_backlog.status == "True") == bool(outstanding)
    assert (plan.deadline_at_risk.status == "Unknown") == (plan.deadline_at_risk.reason == "BatchSizeUnknown")
    status = plan.status()
    assert (status.jobs_waiting or 0) + (status.jobs_running or 0) == len(outstanding)
    assert status.jobs_done == len(args[1]) - len(outstanding)


@EXAMPLES
@given(batch_plan_inputs(), st.randoms(use_true_random=False))
def test_order_of_the_jobs_does_not_matter(args: Inputs, rng: object) -> None:
    spec, jobs, interactive, pool, tok_s, now = args
    shuffled = list(jobs)
    rng.shuffle(shuffled)  # type: ignore[attr-defined]
    assert plan_batch(*args) == plan_batch(spec, shuffled, interactive, pool, tok_s, now)


def _apply(
    plan: BatchPlan, jobs: list[BatchJob], pool: BatchPoolState, gpus_per_replica: int
) -> tuple[list[BatchJob], BatchPoolState]:
    """What the cluster looks like once ``plan`` is applied and every pod has started or stopped:
    released Jobs run, paused Jobs' pods are still terminating, the pool has its replicas Ready and
    holds their GPUs."""
    by_name = {p.job.name: p.action for p in plan.jobs}
    after = []
    for job in jobs:
        action = by_name[job.name]
        if action is JobAction.Release:
            job = replace(job, state=JobState.Running, active_pods=1)
        elif action is JobAction.Pause:
            job = replace(job, state=JobState.Draining, active_pods=1)
        after.append(job)
    free = pool.gpus_free
    if free is not None:
        free = max(0, free - (plan.replicas - pool.replicas) * gpus_per_replica)
    return after, BatchPoolState(replicas=plan.replicas, ready=plan.replicas, gpus_free=free)


@EXAMPLES
@given(batch_plan_inputs())
def test_a_plan_applied_does_not_reverse_itself(args: Inputs) -> None:
    """Decide, apply, decide again at the same instant with nothing else changed: the second plan
    pauses nothing the first released or kept, releases nothing the first paused, and keeps the
    pool's size. (Interactive pods unschedulable are left out: batch giving GPUs back lets them be
    scheduled, which changes the input.)"""
    spec, jobs, interactive, pool, tok_s, now = args
    interactive = replace(interactive, unschedulable=0)
    pool = replace(pool, ready=pool.replicas)
    first = plan_batch(spec, jobs, interactive, pool, tok_s, now)
    jobs2, pool2 = _apply(first, jobs, pool, spec.resources.gpus_per_replica)
    second = plan_batch(spec, jobs2, interactive, pool2, tok_s, now)
    assert second.replicas == first.replicas, (first.reasons, second.reasons)
    assert set(second.pause).isdisjoint({p.job.name for p in first.jobs if p.running_after})
    assert set(second.release).isdisjoint(first.pause)
