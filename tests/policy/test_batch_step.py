"""The batch step after the scaling decision (llmscale.policy.batch.step): the planner's inputs taken
from the decision and the tick's pool state and signals, the decision's batch size replaced by the
plan's, and the model that cannot fit holding the pool.

Every case states its inputs: the spec, the Jobs, the decision (made by the real ``decide``), the
pool state, the snapshot and the instant. Outcomes are (replicas, actions, reason codes).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from llmscale.api import LLMDeploymentSpec
from llmscale.policy import Decision, PolicyMemory, PoolState, Reason, decide
from llmscale.policy.batch.jobs import BatchJob, JobState
from llmscale.policy.batch.plan import JobAction
from llmscale.policy.batch.step import (
    THROUGHPUT_UNKNOWN,
    BatchStep,
    batch_step,
    interactive_state,
    latency_within_slo,
)
from llmscale.signals.snapshot import SignalSnapshot


def utc(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


#: Monday 2024-06-03 12:00 UTC (outside the 22:00-06:00 UTC trough) and 23:00 (inside).
NOON = utc("2024-06-03T12:00")
NIGHT = utc("2024-06-03T23:00")


def make_spec(**overrides: Any) -> LLMDeploymentSpec:
    """Llama-3.1-8B on one H100 per replica, SLO 2 s / 100 ms, batch 22:00-06:00 UTC, at most 4."""
    doc: dict[str, Any] = {
        "model": {"name": "chat", "preset": "llama-3.1-8b"},
        "replicas": {"min": 1, "max": 8},
        "headroom": {"replicas": 1},
        "batch": {"windows": [{"start": "22:00", "end": "06:00", "timezone": "UTC"}], "replicas": 3, "maxReplicas": 4},
    }
    doc.update(overrides)
    return LLMDeploymentSpec.model_validate(doc)


def snap(now: float, *, ttft: float | None, itl: float | None, age_s: float = 5.0) -> SignalSnapshot:
    return SignalSnapshot(observed_at=now - age_s, queue_depth=0.0, running_requests=2.0, kv_cache_utilization=0.1,
                          preemption_rate=0.0, ttft_p95_s=ttft, itl_p95_s=itl, replicas_reporting=2)


def waiting(name: str, tokens: float, deadline: str) -> BatchJob:
    """A suspended Job of ``tokens`` in requests of 1,000 prompt and 200 output tokens."""
    return BatchJob(name=name, deployment="chat", state=JobState.Waiting, created_at=NOON - 3600,
                    deadline=utc(deadline), deadline_source="annotation", requests=max(1, round(tokens / 1200)),
                    input_tokens=int(tokens * 5 / 6), output_tokens=int(tokens / 6))


@pytest.mark.parametrize(
    ("ttft", "itl", "age_s", "expected"),
    [
        pytest.param(0.5, 0.05, 5.0, True, id="both-within"),
        pytest.param(2.5, 0.05, 5.0, False, id="ttft-breached"),
        pytest.param(0.5, 0.15, 5.0, False, id="itl-breached"),
        pytest.param(None, 0.15, 5.0, False, id="ttft-unknown-itl-breached"),
        pytest.param(None, 0.05, 5.0, None, id="ttft-unknown"),
        pytest.param(None, None, 5.0, None, id="no-request-finished"),
        pytest.param(0.5, 0.05, 600.0, None, id="stale-snapshot"),
    ],
)
def test_latency_within_slo(ttft: float | None, itl: float | None, age_s: float, expected: bool | None) -> None:
    spec = make_spec()  # SLO 2 s TTFT, 100 ms ITL; metricsMaxAgeSeconds 60 by default
    assert latency_within_slo(spec, snap(NOON, ttft=ttft, itl=itl, age_s=age_s), NOON) is expected


def test_no_snapshot_is_unknown_latency() -> None:
    assert latency_within_slo(make_spec(), None, NOON) is None


def test_interactive_state_combines_the_decision_with_the_pod_counts() -> None:
    spec = make_spec()
    state = PoolState(interactive_replicas=4, interactive_ready=2, interactive_starting=1,
                      interactive_unschedulable=1)
    decision = decide(spec, (snap(NOON, ttft=0.5, itl=0.05),), state, PolicyMemory(), NOON)
    got = interactive_state(spec, decision, state, snap(NOON, ttft=0.5, itl=0.05), NOON)
    assert (got.desired_replicas, got.ready_replicas, got.starting_replicas, got.unschedulable) == (
        decision.interactive_replicas, 2, 1, 1)
    assert got.signals_valid is decision.valid and got.latency_within_slo is True


def test_the_plan_replaces_the_fixed_window_size_with_the_backlog() -> None:
    """Inside the window with no Job: decide's fixed schedule says 3, the backlog says 0; with a Job
    waiting, the pool is sized and the Job waits for a Ready batch replica."""
    spec = make_spec()
    state = PoolState(interactive_replicas=2, interactive_ready=2)
    snapshot = snap(NIGHT, ttft=0.5, itl=0.05)
    decision = decide(spec, (snapshot,), state, PolicyMemory(), NIGHT)
    assert decision.batch_replicas == 3  # the schedule of before Jobs
    empty = batch_step(spec, [], decision, state, snapshot, NIGHT)
    assert empty.decision.batch_replicas == 0
    assert (empty.batch_backlog.status, empty.batch_backlog.reason) == ("False", Reason.BacklogEmpty)
    # The fixed-size line of decide is gone; the plan's lines are there, and the window condition
    # keeps its status and reason.
    assert decision.batch_window_open.message not in empty.decision.reasons
    assert any(r.startswith("batch: ") for r in empty.decision.reasons)
    assert empty.decision.batch_window_open.reason == Reason.InsideTroughWindow
    assert "follows the backlog (0 replicas)" in empty.decision.batch_window_open.message
    assert empty.status is not None and empty.status.jobs_waiting == 0

    step = batch_step(spec, [waiting("nightly", 1e9, "2024-06-05T06:00")], decision, state, snapshot, NIGHT)
    assert step.plan is not None and step.decision.batch_replicas >= 1
    assert [p.action for p in step.plan.jobs] == [JobAction.Keep]  # no batch replica Ready yet
    ready = PoolState(interactive_replicas=2, interactive_ready=2, batch_replicas=step.decision.batch_replicas,
                      batch_ready=1)
    again = batch_step(spec, [waiting("nightly", 1e9, "2024-06-05T06:00")], decision, ready, snapshot, NIGHT)
    assert again.plan is not None and again.plan.release == ("nightly",)
    # Everything else of the decision is decide's.
    assert again.decision.interactive_replicas == decision.interactive_replicas
    assert again.decision.memory == decision.memory


def _step_without_spec_batch() -> tuple[Decision, BatchStep]:
    spec = make_spec(batch=None)
    state = PoolState(interactive_replicas=2, interactive_ready=2)
    decision = decide(spec, (snap(NOON, ttft=0.5, itl=0.05),), state, PolicyMemory(), NOON)
    step = batch_step(spec, [waiting("late", 1e9, "2024-06-03T11:00")], decision, state, None, NOON)
    return decision, step


def test_without_spec_batch_the_decision_is_unchanged() -> None:
    decision, step = _step_without_spec_batch()
    assert step.decision == decision


def test_without_spec_batch_jobs_are_left_alone() -> None:
    _, step = _step_without_spec_batch()
    assert step.plan is not None and step.plan.release == () and step.plan.pause == ()
    assert step.batch_backlog.reason == Reason.NoBatchPool and step.status is None


def _step_of_a_model_that_does_not_fit() -> BatchStep:
    """Llama-3.1-70B on one L40S: the weights leave no KV cache, so no batch throughput is known."""
    spec = make_spec(model={"name": "big", "preset": "llama-3.1-70b"}, resources={"gpuType": "l40s", "gpusPerReplica": 1})
    state = PoolState(interactive_replicas=2, interactive_ready=2, batch_replicas=2, batch_ready=2)
    decision = decide(spec, (snap(NIGHT, ttft=0.5, itl=0.05),), state, PolicyMemory(), NIGHT)
    return batch_step(spec, [waiting("nightly", 1e9, "2024-06-05T06:00")], decision, state, None, NIGHT)


def test_a_model_that_does_not_fit_holds_the_batch_pool_without_a_plan() -> None:
    step = _step_of_a_model_that_does_not_fit()
    assert step.plan is None and step.decision.batch_replicas == 2


def test_a_model_that_does_not_fit_leaves_the_batch_conditions_unknown() -> None:
    step = _step_of_a_model_that_does_not_fit()
    assert (step.batch_backlog.status, step.batch_backlog.reason) == ("Unknown", THROUGHPUT_UNKNOWN)
    assert (step.deadline_at_risk.status, step.deadline_at_risk.reason) == ("Unknown", THROUGHPUT_UNKNOWN)


def test_job_lines_in_the_reasons_are_capped() -> None:
    spec = make_spec()
    state = PoolState(interactive_replicas=2, interactive_ready=2)
    decision = decide(spec, (snap(NOON, ttft=0.5, itl=0.05),), state, PolicyMemory(), NOON)
    jobs = [waiting(f"j{i:03d}", 1e6, "2024-06-05T06:00") for i in range(80)]
    step = batch_step(spec, jobs, decision, state, None, NOON)
    job_lines = [r for r in step.decision.reasons if r.startswith("batch: Job ")]
    assert len(job_lines) == 51 and job_lines[-1] == "batch: Job lines for 30 more Jobs left out"
