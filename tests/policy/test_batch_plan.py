"""The batch planner on a fake clock: a night in London, deadlines that cannot wait, DST nights,
idle GPUs, interactive first, draining, sizing and its hysteresis.

Every case states the inputs it depends on: the spec (``SPEC`` unless said), the Jobs (sizes in
prompt + output tokens), the interactive pool, the batch pool, one replica's tokens/s (``TOK_S``,
given rather than computed so the arithmetic is visible) and the instant. Outcomes are asserted as
(replicas, actions, reason codes), never message texts.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from llmscale.api import LLMDeploymentSpec
from llmscale.policy import Reason
from llmscale.policy.batch.jobs import BatchJob, JobState
from llmscale.policy.batch.plan import (
    BatchLimit,
    BatchPlan,
    BatchPoolState,
    InteractiveState,
    JobAction,
    RunMode,
    backlog_mix,
    batch_replica_tok_s,
    plan_batch,
)

#: One batch replica's tokens/s in these cases: 10,000 tokens/s = 36 M tokens an hour.
TOK_S = 10_000.0
HOUR = 3600.0


def utc(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def make_spec(**batch: Any) -> LLMDeploymentSpec:
    """Llama-3.1-8B on 1 GPU per replica; interactive 1–8 with 1 warm; batch 22:00–06:00 London, ≤ 4."""
    return LLMDeploymentSpec.model_validate(
        {
            "model": {"name": "chat", "preset": "llama-3.1-8b"},
            "replicas": {"min": 1, "max": 8},
            "headroom": {"replicas": 1},
            "batch": {
                "windows": [{"start": "22:00", "end": "06:00", "timezone": "Europe/London"}],
                "maxReplicas": 4,
                **batch,
            },
        }
    )


SPEC = make_spec()
#: Interactive pool of 3, Ready, SLO met, nothing unschedulable.
QUIET = InteractiveState(desired_replicas=3, ready_replicas=3, latency_within_slo=True)


def bjob(
    name: str,
    *,
    tokens: float,
    deadline: str | None,
    state: JobState = JobState.Waiting,
    done: float = 0.0,
    created: str = "2024-06-03T12:00",
    active: int = 0,
) -> BatchJob:
    """A Job of 1,000 requests carrying ``tokens`` (5/6 prompt, 1/6 output), ``done`` of them done."""
    return BatchJob(
        name=name,
        deployment="chat",
        state=state,
        created_at=utc(created),
        deadline=None if deadline is None else utc(deadline),
        deadline_source="annotation" if deadline is not None else "none",
        active_pods=active,
        requests=1000,
        input_tokens=round(tokens * 5 / 6),
        output_tokens=round(tokens / 6),
        requests_done=done * 1000,
        progress_source="client" if done else "none",
    )


def actions(plan: Any) -> dict[str, JobAction]:
    return {p.job.name: p.action for p in plan.jobs}


# --------------------------------------------------------------------------------------------
# A night: released when the window opens, paused when it closes, finished the next night
# --------------------------------------------------------------------------------------------

# 72 M tokens with a deadline two days out: 0.25 of one replica over an 8 h window.
NIGHT = [
    # (what happens, UTC instant, Job state, share done, batch replicas/ready,
    #  → replicas, action, BatchBacklog reason, DeadlineAtRisk reason)
    (
        "14:00 BST: waits for the window",
        "2024-06-03T13:00",
        JobState.Waiting,
        0.0,
        (0, 0),
        0,
        JobAction.Keep,
        Reason.BacklogWaiting,
        Reason.DeadlinesOnTrack,
    ),
    (
        "21:59 BST: still closed",
        "2024-06-03T20:59",
        JobState.Waiting,
        0.0,
        (0, 0),
        0,
        JobAction.Keep,
        Reason.BacklogWaiting,
        Reason.DeadlinesOnTrack,
    ),
    (
        "22:00 BST: window opens, pool asked for, no Ready replica yet",
        "2024-06-03T21:00",
        JobState.Waiting,
        0.0,
        (0, 0),
        1,
        JobAction.Keep,
        Reason.BacklogWaiting,
        Reason.DeadlinesOnTrack,
    ),
    (
        "22:05 BST: a batch replica is Ready: released",
        "2024-06-03T21:05",
        JobState.Waiting,
        0.0,
        (1, 1),
        1,
        JobAction.Release,
        Reason.BacklogRunning,
        Reason.DeadlinesOnTrack,
    ),
    (
        "03:00 BST: running, half done",
        "2024-06-04T02:00",
        JobState.Running,
        0.5,
        (1, 1),
        1,
        JobAction.Keep,
        Reason.BacklogRunning,
        Reason.DeadlinesOnTrack,
    ),
    (
        "06:00 BST: window closes mid-Job: paused, the pool keeps its replica while it drains",
        "2024-06-04T05:00",
        JobState.Running,
        0.75,
        (1, 1),
        1,
        JobAction.Pause,
        Reason.BacklogWaiting,
        Reason.DeadlinesOnTrack,
    ),
    (
        "06:01 BST: its pod still drains: the pool keeps its replica",
        "2024-06-04T05:01",
        JobState.Draining,
        0.8,
        (1, 1),
        1,
        JobAction.Keep,
        Reason.BacklogWaiting,
        Reason.DeadlinesOnTrack,
    ),
    (
        "06:02 BST: drained: pool 0",
        "2024-06-04T05:02",
        JobState.Waiting,
        0.8,
        (1, 1),
        0,
        JobAction.Keep,
        Reason.BacklogWaiting,
        Reason.DeadlinesOnTrack,
    ),
    (
        "22:00 BST next night: released again",
        "2024-06-04T21:00",
        JobState.Waiting,
        0.8,
        (1, 1),
        1,
        JobAction.Release,
        Reason.BacklogRunning,
        Reason.DeadlinesOnTrack,
    ),
]


@pytest.mark.parametrize(
    ("instant", "state", "done", "pool", "replicas", "action", "backlog", "deadline"),
    [pytest.param(*row[1:], id=row[0]) for row in NIGHT],
)
def test_a_night_in_london(
    instant: str,
    state: JobState,
    done: float,
    pool: tuple[int, int],
    replicas: int,
    action: JobAction,
    backlog: Reason,
    deadline: Reason,
) -> None:
    job = bjob(
        "nightly",
        tokens=72e6,
        deadline="2024-06-05T12:00",
        state=state,
        done=done,
        active=1 if state is JobState.Draining else 0,
    )
    plan = plan_batch(SPEC, [job], QUIET, BatchPoolState(*pool), TOK_S, utc(instant))
    assert (plan.replicas, actions(plan)["nightly"]) == (replicas, action), plan.reasons
    assert (plan.batch_backlog.reason, plan.deadline_at_risk.reason) == (backlog, deadline)


def test_status_while_waiting_names_the_next_window() -> None:
    job = bjob("nightly", tokens=72e6, deadline="2024-06-05T12:00")
    plan = plan_batch(SPEC, [job], QUIET, BatchPoolState(0), TOK_S, utc("2024-06-03T13:00"))
    status = plan.status().to_wire()
    assert status["nextWindowOpen"] == "2024-06-03T21:00:00Z"  # 22:00 BST
    assert status["nextWindowClose"] == "2024-06-04T05:00:00Z"  # 06:00 BST
    assert (status["jobsWaiting"], status["jobsRunning"], status["jobsDone"]) == (1, 0, 0)
    assert status["tokensOutstanding"] == 72_000_000
    [listed] = status["jobs"]
    # 72 M tokens at the bound (4 × 10,000 tokens/s) take 30 min of window after the pool's
    # 3-minute cold start (no replica yet): 22:33 BST.
    assert listed == {
        "name": "nightly",
        "state": "Waiting",
        "deadline": "2024-06-05T12:00:00Z",
        "projectedFinish": "2024-06-03T21:33:00Z",
        "atRisk": False,
        "outstandingTokens": 72_000_000,
    }


# --------------------------------------------------------------------------------------------
# Deadlines that cannot wait
# --------------------------------------------------------------------------------------------


def test_near_deadline_is_released_before_the_window() -> None:
    """14:00 BST, deadline 20:00 BST: no window opens before it, so it runs now, sized to finish by
    then: 72 M tokens ÷ 10,000 tokens/s ÷ 21,600 s = 0.33 → 1 replica."""
    job = bjob("urgent", tokens=72e6, deadline="2024-06-03T19:00")
    plan = plan_batch(SPEC, [job], QUIET, BatchPoolState(1, 1), TOK_S, utc("2024-06-03T13:00"))
    assert (plan.replicas, plan.release, plan.jobs[0].mode) == (1, ("urgent",), RunMode.Deadline)
    assert plan.deadline_at_risk.reason is Reason.DeadlinesOnTrack
    assert plan.jobs[0].projected_finish == pytest.approx(utc("2024-06-03T15:00"))


def test_too_big_for_tonights_window_is_released_now() -> None:
    """2 G tokens due 07:00 BST: tonight's 8 h window at 4 × 10,000 tokens/s holds 1.152 G, so it
    cannot wait; from 14:00 BST, 61,200 s are left: 2 G ÷ 10,000 ÷ 61,200 = 3.27 → 4 replicas."""
    job = bjob("big", tokens=2e9, deadline="2024-06-04T06:00")
    plan = plan_batch(SPEC, [job], QUIET, BatchPoolState(0, 0), TOK_S, utc("2024-06-03T13:00"))
    assert (plan.replicas, plan.jobs[0].mode, plan.jobs[0].action) == (4, RunMode.Deadline, JobAction.Keep)
    assert plan.batch_backlog.reason is Reason.BacklogWaiting  # waits for a Ready replica


def test_deadline_that_cannot_wait_keeps_running_when_the_window_closes() -> None:
    """06:00 BST, 18 M tokens left, deadline 13:00 BST: the next window opens after it."""
    job = bjob("report", tokens=72e6, deadline="2024-06-04T12:00", state=JobState.Running, done=0.75)
    plan = plan_batch(SPEC, [job], QUIET, BatchPoolState(1, 1), TOK_S, utc("2024-06-04T05:00"))
    assert (plan.replicas, actions(plan)["report"], plan.jobs[0].mode) == (
        1,
        JobAction.Keep,
        RunMode.Deadline,
    )


def test_a_deadline_pulls_the_jobs_due_before_it() -> None:
    """EDF: 'early' (due 07:00 BST, 0.5 G) and 'late' (due 08:00 BST, 0.9 G) together need 1.4 G by
    08:00 but tonight holds 1.152 G at the bound: 'late' cannot wait, so both run now."""
    early = bjob("early", tokens=0.5e9, deadline="2024-06-04T06:00")
    late = bjob("late", tokens=0.9e9, deadline="2024-06-04T07:00")
    plan = plan_batch(SPEC, [late, early], QUIET, BatchPoolState(2, 1), TOK_S, utc("2024-06-03T13:00"))
    assert [p.job.name for p in plan.jobs] == ["early", "late"]
    assert [p.mode for p in plan.jobs] == [RunMode.Deadline, RunMode.Deadline]
    assert set(plan.release) == {"early", "late"}


def _overdue_plan() -> BatchPlan:
    job = bjob("overdue", tokens=72e6, deadline="2024-06-03T12:00")
    return plan_batch(SPEC, [job], QUIET, BatchPoolState(1, 1), TOK_S, utc("2024-06-03T13:00"))


def test_a_passed_deadline_runs_at_the_bound() -> None:
    plan = _overdue_plan()
    assert (plan.replicas, plan.release) == (4, ("overdue",))


def test_a_passed_deadline_is_reported() -> None:
    plan = _overdue_plan()
    assert plan.deadline_at_risk.status == "True" and plan.deadline_at_risk.reason is Reason.DeadlinePassed


def test_projected_late_at_the_bound() -> None:
    """4 G tokens due in 10 h: the bound does 1.44 G in that time."""
    job = bjob("huge", tokens=4e9, deadline="2024-06-03T23:00")
    plan = plan_batch(SPEC, [job], QUIET, BatchPoolState(4, 4), TOK_S, utc("2024-06-03T13:00"))
    assert plan.replicas == 4
    assert (plan.deadline_at_risk.status, plan.deadline_at_risk.reason) == (
        "True",
        Reason.DeadlineProjectedLate,
    )
    assert plan.jobs[0].at_risk is True


# --------------------------------------------------------------------------------------------
# Daylight saving time and midnight
# --------------------------------------------------------------------------------------------

# 864 M tokens due at noon UTC: 4 × 10,000 tokens/s do them in 6 h of window; with the 25 %
# margin and the pool's 3-minute cold start they need 7.55 h: an 8 h night holds them, a 7 h one not.
DST = [
    ("ordinary-night-8h-waits", "2024-03-23T21:00", "2024-03-24T12:00", None),
    ("spring-forward-night-7h-cannot-wait", "2024-03-30T21:00", "2024-03-31T12:00", RunMode.Deadline),
]


@pytest.mark.parametrize(("now", "deadline", "mode"), [pytest.param(*r[1:], id=r[0]) for r in DST])
def test_spring_forward_night_is_an_hour_short(now: str, deadline: str, mode: RunMode | None) -> None:
    job = bjob("dst", tokens=0.864e9, deadline=deadline, created=now)
    plan = plan_batch(SPEC, [job], QUIET, BatchPoolState(0), TOK_S, utc(now))
    assert plan.jobs[0].mode is mode


def test_fall_back_night_is_an_hour_long() -> None:
    """960 M tokens (6.67 h at the bound; 8.38 h with the 25 % margin and the 3-minute cold start)
    due at noon UTC: the 9 h fall-back night holds them, an ordinary 8 h night does not."""
    fall = bjob("dst", tokens=0.96e9, deadline="2024-10-27T12:00", created="2024-10-26T20:00")
    ordinary = bjob("dst", tokens=0.96e9, deadline="2024-10-20T12:00", created="2024-10-19T20:00")
    assert (
        plan_batch(SPEC, [fall], QUIET, BatchPoolState(0), TOK_S, utc("2024-10-26T20:00")).jobs[0].mode
        is None
    )
    assert (
        plan_batch(SPEC, [ordinary], QUIET, BatchPoolState(0), TOK_S, utc("2024-10-19T20:00")).jobs[0].mode
        is RunMode.Deadline
    )


def test_across_midnight_the_window_seconds_count_to_its_end() -> None:
    """Friday-only 22:00–06:00 UTC window, at 23:00 Friday: 7 h of window left before a Saturday
    noon deadline; 630 M tokens ÷ 10,000 tokens/s ÷ 25,200 s = 2.5 → 3 replicas. At 01:00 Saturday
    (still Friday's window) 5 h are left: 5 G would need 27.8 → the bound."""
    spec = LLMDeploymentSpec.model_validate(
        {
            "model": {"name": "chat", "preset": "llama-3.1-8b"},
            "batch": {"windows": [{"start": "22:00", "end": "06:00", "days": ["Fri"]}], "maxReplicas": 6},
        }
    )
    job = bjob("weekly", tokens=630e6, deadline="2024-06-08T12:00", state=JobState.Running)
    plan = plan_batch(spec, [job], QUIET, BatchPoolState(0, 0), TOK_S, utc("2024-06-07T23:00"))
    assert (plan.replicas, plan.jobs[0].mode) == (3, RunMode.Window)
    plan = plan_batch(
        spec,
        [replace(job, input_tokens=5_000_000_000)],
        QUIET,
        BatchPoolState(3, 3),
        TOK_S,
        utc("2024-06-08T01:00"),
    )
    assert (plan.replicas, plan.limited_by) == (6, BatchLimit.MaxReplicas)
    assert plan.window_open and plan.next_window_close == utc("2024-06-08T06:00")


# --------------------------------------------------------------------------------------------
# Empty backlog, bounds, sizing
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "jobs",
    [
        pytest.param([], id="no-jobs"),
        pytest.param([bjob("old", tokens=1e6, deadline=None, state=JobState.Done)], id="all-done"),
    ],
)
def test_zero_inside_the_window_without_a_backlog(jobs: list[BatchJob]) -> None:
    plan = plan_batch(SPEC, jobs, QUIET, BatchPoolState(2, 2), TOK_S, utc("2024-06-03T23:00"))
    assert plan.window_open
    assert (plan.replicas, plan.release, plan.pause) == (0, (), ())
    assert (plan.batch_backlog.status, plan.batch_backlog.reason) == ("False", Reason.BacklogEmpty)
    assert plan.deadline_at_risk.reason is Reason.DeadlinesOnTrack


def test_min_replicas_is_a_floor_only_while_a_job_runs() -> None:
    spec = make_spec(minReplicas=2)
    job = bjob("tiny", tokens=1e3, deadline="2024-06-05T12:00")
    inside = plan_batch(spec, [job], QUIET, BatchPoolState(0), TOK_S, utc("2024-06-03T23:00"))
    assert (inside.replicas, inside.limited_by) == (2, BatchLimit.MinReplicas)
    assert plan_batch(spec, [], QUIET, BatchPoolState(2, 2), TOK_S, utc("2024-06-03T23:00")).replicas == 0


def test_replicas_is_the_bound_when_max_replicas_is_unset() -> None:
    spec = LLMDeploymentSpec.model_validate(
        {
            "model": {"name": "chat", "preset": "llama-3.1-8b"},
            "batch": {"windows": [{"start": "22:00", "end": "06:00"}], "replicas": 2},
        }
    )
    job = bjob("overdue", tokens=1e9, deadline="2024-06-03T12:00")
    plan = plan_batch(spec, [job], QUIET, BatchPoolState(0), TOK_S, utc("2024-06-03T23:00"))
    assert (plan.replicas, plan.limited_by) == (2, BatchLimit.MaxReplicas)


def test_max_zero_turns_the_pool_off() -> None:
    spec = make_spec(maxReplicas=0)
    running = bjob("r", tokens=1e6, deadline="2024-06-03T12:00", state=JobState.Running)
    plan = plan_batch(spec, [running], QUIET, BatchPoolState(0), TOK_S, utc("2024-06-03T23:00"))
    assert (plan.replicas, plan.pause) == (0, ("r",))
    assert plan.deadline_at_risk.reason is Reason.DeadlinePassed


@pytest.mark.parametrize(
    ("tokens", "current", "replicas"),
    [
        # 8 h window from 22:00 BST = 28,800 s: 1 replica does 288 M tokens.
        pytest.param(720e6, 0, 3, id="2.5-grows-to-3"),
        pytest.param(720e6, 3, 3, id="2.5-stays-3"),
        pytest.param(633.6e6, 3, 3, id="2.2-stays-3-within-tolerance"),  # 2.2 × 1.1 = 2.42 → 3
        pytest.param(518.4e6, 3, 2, id="1.8-shrinks-to-2"),  # 1.8 × 1.1 = 1.98 → 2
        pytest.param(1e3, 4, 1, id="almost-nothing-shrinks-to-1"),
    ],
)
def test_the_pool_is_sized_for_the_backlog_with_hysteresis(tokens: float, current: int, replicas: int) -> None:
    job = bjob("j", tokens=tokens, deadline="2024-06-04T05:00", state=JobState.Running)
    plan = plan_batch(SPEC, [job], QUIET, BatchPoolState(current, current), TOK_S, utc("2024-06-03T21:00"))
    assert plan.replicas == replicas, plan.reasons


def _adhoc_plan() -> BatchPlan:
    job = replace(bjob("adhoc", tokens=1e6, deadline="2024-06-05T12:00"), requests=None)
    return plan_batch(SPEC, [job], QUIET, BatchPoolState(0), TOK_S, utc("2024-06-03T23:00"))


def test_an_unknown_size_runs_at_the_bound() -> None:
    assert _adhoc_plan().replicas == 4


def test_an_unknown_size_is_reported_unknown() -> None:
    plan = _adhoc_plan()
    assert (plan.deadline_at_risk.status, plan.deadline_at_risk.reason) == (
        "Unknown",
        Reason.BatchSizeUnknown,
    )
    assert plan.status().jobs_unknown_size == 1


def test_unknown_size_with_no_window_before_its_deadline_runs_now() -> None:
    job = replace(bjob("adhoc", tokens=1e6, deadline="2024-06-03T20:00"), requests=None)
    plan = plan_batch(SPEC, [job], QUIET, BatchPoolState(1, 1), TOK_S, utc("2024-06-03T13:00"))
    assert (plan.jobs[0].mode, plan.release) == (RunMode.Deadline, ("adhoc",))


# --------------------------------------------------------------------------------------------
# Idle GPUs and interactive first
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("interactive", "gpus_free", "mode"),
    [
        # reserve = min(max(headroom 1, 1), 8 − 3) = 1: 4 GPUs free leave 3 idle replicas.
        pytest.param(QUIET, 4, RunMode.IdleCapacity, id="quiet-interactive-releases-onto-idle-gpus"),
        pytest.param(QUIET, 1, None, id="one-gpu-free-is-the-reserve"),
        pytest.param(QUIET, None, None, id="gpus-free-unknown"),
        pytest.param(replace(QUIET, latency_within_slo=None), 4, None, id="latency-unknown"),
        pytest.param(replace(QUIET, latency_within_slo=False), 4, None, id="slo-breached"),
        pytest.param(replace(QUIET, signals_valid=False), 4, None, id="signals-unusable"),
        pytest.param(replace(QUIET, starting_replicas=1), 4, None, id="interactive-starting"),
        pytest.param(replace(QUIET, ready_replicas=2), 4, None, id="interactive-below-desired"),
    ],
)
def test_release_onto_idle_gpus(
    interactive: InteractiveState, gpus_free: int | None, mode: RunMode | None
) -> None:
    job = bjob("j", tokens=72e6, deadline="2024-06-05T12:00")
    plan = plan_batch(
        SPEC, [job], interactive, BatchPoolState(0, 0, gpus_free), TOK_S, utc("2024-06-03T13:00")
    )
    assert plan.jobs[0].mode is mode
    assert plan.replicas == (1 if mode else 0)


def test_idle_release_survives_the_pool_taking_the_idle_gpus() -> None:
    """Tick 1: 2 GPUs free, reserve 1: one idle replica, the pool asks for it. Tick 2: the pool's
    replica holds one of them (1 free = the reserve): the Job is released onto it, not dropped."""
    job = bjob("j", tokens=72e6, deadline="2024-06-05T12:00")
    first = plan_batch(SPEC, [job], QUIET, BatchPoolState(0, 0, 2), TOK_S, utc("2024-06-03T13:00"))
    assert (first.replicas, first.release) == (1, ())
    second = plan_batch(SPEC, [job], QUIET, BatchPoolState(1, 1, 1), TOK_S, utc("2024-06-03T13:01"))
    assert (second.replicas, second.release, second.jobs[0].mode) == (1, ("j",), RunMode.IdleCapacity)


def test_idle_release_is_off_when_the_spec_says_so() -> None:
    job = bjob("j", tokens=72e6, deadline="2024-06-05T12:00")
    plan = plan_batch(
        make_spec(releaseOnIdleCapacity=False),
        [job],
        QUIET,
        BatchPoolState(0, 0, 8),
        TOK_S,
        utc("2024-06-03T13:00"),
    )
    assert (plan.jobs[0].mode, plan.replicas) == (None, 0)


def test_idle_pool_is_bounded_by_the_idle_gpus() -> None:
    """An overdue-free backlog needing the bound, on idle GPUs only: 3 GPUs free, reserve 1."""
    job = replace(bjob("j", tokens=1e6, deadline="2024-06-05T12:00"), requests=None)  # asks for the bound
    plan = plan_batch(SPEC, [job], QUIET, BatchPoolState(0, 0, 3), TOK_S, utc("2024-06-03T13:00"))
    assert (plan.replicas, plan.limited_by) == (2, BatchLimit.IdleCapacity)


def test_idle_job_keeps_running_while_latency_is_unknown_but_gives_back_when_gpus_run_short() -> None:
    job = bjob("j", tokens=72e6, deadline="2024-06-05T12:00", state=JobState.Running)
    unknown_latency = replace(QUIET, latency_within_slo=None)
    # 1 GPU free is the reserve (idle 0): the pool keeps its 1 replica but may not grow.
    keep = plan_batch(SPEC, [job], unknown_latency, BatchPoolState(1, 1, 1), TOK_S, utc("2024-06-03T13:00"))
    assert (keep.replicas, actions(keep)["j"]) == (1, JobAction.Keep)
    # No GPU free: the reserve for interactive growth is gone, 1 + (0 − 1) = 0: the Job is paused;
    # the pool keeps its replica while the client finishes its requests in flight, then gives it back.
    short = plan_batch(SPEC, [job], QUIET, BatchPoolState(1, 1, 0), TOK_S, utc("2024-06-03T13:00"))
    assert (short.replicas, actions(short)["j"], short.limited_by) == (
        1,
        JobAction.Pause,
        BatchLimit.Draining,
    )
    drained = replace(job, state=JobState.Waiting)
    after = plan_batch(SPEC, [drained], QUIET, BatchPoolState(1, 1, 0), TOK_S, utc("2024-06-03T13:01"))
    assert (after.replicas, actions(after)["j"]) == (0, JobAction.Keep)
    # Interactive grew to 7 of 8: reserve min(1, 8 − 7) = 1, no GPU free: paused the same way.
    busy = replace(QUIET, desired_replicas=7, ready_replicas=7)
    give = plan_batch(SPEC, [job], busy, BatchPoolState(1, 1, 0), TOK_S, utc("2024-06-03T13:00"))
    assert (give.replicas, actions(give)["j"]) == (1, JobAction.Pause)
    # Unschedulable interactive pods do not wait for the drain.
    now = plan_batch(
        SPEC, [job], replace(busy, unschedulable=1), BatchPoolState(1, 1, 0), TOK_S, utc("2024-06-03T13:00")
    )
    assert (now.replicas, actions(now)["j"], now.limited_by) == (
        0,
        JobAction.Pause,
        BatchLimit.InteractiveFirst,
    )


@pytest.mark.parametrize(
    ("unschedulable", "replicas", "action", "backlog"),
    [
        pytest.param(0, 3, JobAction.Keep, Reason.BacklogRunning, id="none-unschedulable"),
        pytest.param(
            2, 1, JobAction.Keep, Reason.BatchYieldedToInteractive, id="two-unschedulable-batch-gives-two"
        ),
        pytest.param(
            3, 0, JobAction.Pause, Reason.BatchYieldedToInteractive, id="three-unschedulable-batch-pauses"
        ),
        pytest.param(9, 0, JobAction.Pause, Reason.BatchYieldedToInteractive, id="more-than-the-pool"),
    ],
)
def test_interactive_unschedulable_batch_shrinks_first(
    unschedulable: int, replicas: int, action: JobAction, backlog: Reason
) -> None:
    """Inside the window, 540 M tokens due in 5 h need 540 M ÷ 10,000 ÷ 18,000 s = 3 replicas;
    with ``u`` interactive pods unschedulable the pool gives ``u`` of them back."""
    job = bjob("j", tokens=540e6, deadline="2024-06-04T04:00", state=JobState.Running)
    interactive = replace(QUIET, unschedulable=unschedulable)
    plan = plan_batch(SPEC, [job], interactive, BatchPoolState(3, 3), TOK_S, utc("2024-06-03T23:00"))
    assert (plan.replicas, actions(plan)["j"], plan.batch_backlog.reason) == (replicas, action, backlog)
    if unschedulable:
        assert plan.limited_by is BatchLimit.InteractiveFirst


def test_no_release_while_interactive_pods_are_unschedulable() -> None:
    job = bjob("j", tokens=72e6, deadline="2024-06-05T12:00")
    plan = plan_batch(
        SPEC, [job], replace(QUIET, unschedulable=1), BatchPoolState(2, 2), TOK_S, utc("2024-06-03T23:00")
    )
    assert (plan.release, plan.replicas) == ((), 1)


def test_no_gpu_free_is_waiting_not_yielding() -> None:
    """A deadline that cannot wait, but no GPU free and no interactive pod waiting for one: the
    backlog waits for GPUs; it did not give any back."""
    job = bjob("urgent", tokens=72e6, deadline="2024-06-03T19:00")
    plan = plan_batch(SPEC, [job], QUIET, BatchPoolState(0, 0, 0), TOK_S, utc("2024-06-03T13:00"))
    assert (plan.replicas, plan.limited_by, plan.jobs[0].mode) == (0, BatchLimit.GPUsFree, RunMode.Deadline)
    assert plan.batch_backlog.reason is Reason.BacklogWaiting
    assert "no GPU is free" in plan.jobs[0].message


def test_gpus_free_bound_growth() -> None:
    job = bjob("overdue", tokens=1e9, deadline="2024-06-03T12:00")
    plan = plan_batch(SPEC, [job], QUIET, BatchPoolState(1, 1, 2), TOK_S, utc("2024-06-03T23:00"))
    assert (plan.replicas, plan.limited_by) == (3, BatchLimit.GPUsFree)


def test_draining_job_is_not_released_again_until_its_pods_are_gone() -> None:
    job = bjob("j", tokens=72e6, deadline="2024-06-05T12:00", state=JobState.Draining, active=1)
    plan = plan_batch(SPEC, [job], QUIET, BatchPoolState(1, 1), TOK_S, utc("2024-06-03T23:00"))
    assert (plan.replicas, plan.release, plan.jobs[0].mode) == (1, (), RunMode.Window)


def test_no_batch_pool_leaves_jobs_alone() -> None:
    spec = LLMDeploymentSpec.model_validate({"model": {"name": "chat", "preset": "llama-3.1-8b"}})
    job = bjob("j", tokens=72e6, deadline="2024-06-03T12:00", state=JobState.Running)
    plan = plan_batch(spec, [job], QUIET, BatchPoolState(0), TOK_S, utc("2024-06-03T23:00"))
    assert (plan.replicas, plan.release, plan.pause) == (0, (), ())
    assert plan.batch_backlog.reason is Reason.NoBatchPool


def test_bad_throughput_is_an_error() -> None:
    with pytest.raises(ValueError, match="replica_tok_s"):
        plan_batch(SPEC, [], QUIET, BatchPoolState(0), 0.0, utc("2024-06-03T23:00"))


def test_replica_throughput_follows_the_backlog_mix() -> None:
    """Long prompts and short outputs go faster per token than the reverse (prefill is cheap per
    token); with no sized Job the Azure trace's mix is used."""
    prompts = bjob("p", tokens=6e6, deadline=None)  # 5,000 prompt and 1,000 output tokens a request
    outputs = replace(prompts, input_tokens=1_000_000, output_tokens=5_000_000)
    assert backlog_mix([prompts]) == (5000.0, 1000.0)
    assert backlog_mix([replace(prompts, requests=None)]) is None
    assert batch_replica_tok_s(SPEC, [prompts]) > batch_replica_tok_s(SPEC, [outputs]) > 0
    assert batch_replica_tok_s(SPEC, []) > 0


# --------------------------------------------------------------------------------------------
# A day stepped on a fake clock: the backlog drains overnight
# --------------------------------------------------------------------------------------------


def test_a_days_backlog_drains_overnight() -> None:
    """Three Jobs submitted during Monday (24 h completion window), GPUs free unknown (so nothing
    runs on idle GPUs), one tick every 5 minutes from 09:00 BST Monday to 09:00 BST Tuesday. Applied
    as the operator will: a release or pause takes effect by the next tick, pods are Ready by the
    next tick, released Jobs share the pool's 10,000 tokens/s per replica equally.

    Expected: nothing runs before 22:00 BST; the pool is sized from the backlog (not the bound), the
    three finish inside the night's window, the pool is 0 once they are done, every deadline holds.
    """
    spec = make_spec(maxReplicas=6)
    submitted = {  # name: (created, tokens)
        "summaries": ("2024-06-03T09:30", 300e6),
        "embeddings": ("2024-06-03T13:00", 150e6),
        "evals": ("2024-06-03T17:45", 450e6),
    }
    jobs: dict[str, BatchJob] = {}
    pool = BatchPoolState(0, 0)
    step = 300.0
    finished: dict[str, float] = {}
    peak = 0
    t = utc("2024-06-03T08:00")  # 09:00 BST
    end = t + 24 * HOUR
    while t < end:
        for name, (created, tokens) in submitted.items():
            if name not in jobs and utc(created) <= t:
                jobs[name] = bjob(name, tokens=tokens, deadline=None, created=created)
                jobs[name] = replace(
                    jobs[name], deadline=utc(created) + 86_400, deadline_source="completionWindow"
                )
        plan = plan_batch(spec, list(jobs.values()), QUIET, pool, TOK_S, t)
        assert 0 <= plan.replicas <= 6
        peak = max(peak, plan.replicas)
        window = plan.window_open
        if not window:
            assert all(not p.running_after for p in plan.jobs if p.job.state is not JobState.Done), (
                plan.reasons
            )
        # Work done over the next step by the Jobs running during it, at the pool's Ready replicas.
        running = [j for j in jobs.values() if j.state is JobState.Running]
        share = pool.ready * TOK_S * step / len(running) if running else 0.0
        for job in running:
            per_request = (job.input_tokens or 0) / 1000 + (job.output_tokens or 0) / 1000
            done = min(1000.0, job.requests_done + share / per_request)
            jobs[job.name] = replace(job, requests_done=done)
            if done >= 1000:
                jobs[job.name] = replace(job, requests_done=1000.0, state=JobState.Done)
                finished[job.name] = t + step
        # Apply the plan: releases run and pauses stop from the next tick; pods Ready by then.
        for p in plan.jobs:
            current = jobs[p.job.name]
            if current.state is JobState.Done:
                continue
            if p.action is JobAction.Release:
                jobs[p.job.name] = replace(current, state=JobState.Running)
            elif p.action is JobAction.Pause:
                jobs[p.job.name] = replace(current, state=JobState.Waiting)
        pool = BatchPoolState(plan.replicas, plan.replicas)
        if len(finished) == len(submitted):
            assert plan.batch_backlog.reason in (Reason.BacklogEmpty, Reason.BacklogRunning)
        t += step

    assert set(finished) == set(submitted)
    window_open, window_close = utc("2024-06-03T21:00"), utc("2024-06-04T05:00")
    for name, at in finished.items():
        assert window_open < at <= window_close, (name, datetime.fromtimestamp(at, UTC))
        assert at <= jobs[name].deadline  # type: ignore[operator]
    # 900 M tokens in the 8 h window need 900e6 / 10,000 / 28,800 = 3.1 replicas: sized, not the bound 6.
    assert peak == 4
    final = plan_batch(spec, list(jobs.values()), QUIET, pool, TOK_S, end)
    assert final.replicas == 0 and final.batch_backlog.reason is Reason.BacklogEmpty


def test_a_draining_job_never_leaves_more_batch_replicas_when_interactive_pods_wait() -> None:
    """Found by Hypothesis (test_interactive_unschedulable_shrinks_batch_before_anything_else):
    3 batch replicas, bound 2, a running Job the idle-GPU rule pauses. Calm, the Job keeps 1
    replica; with 1 interactive pod unschedulable the Job is paused and the draining hold kept
    min(3, 2) = 2 — more than calm. Interactive first: the pool does not wait for the drain
    (the engines' own preStop drain finishes the in-flight requests)."""
    from llmscale.api import (
        BatchSpec,
        HeadroomSpec,
        LLMDeploymentSpec,
        ModelSpec,
        ReplicasSpec,
        ScalingSpec,
        TroughWindow,
    )

    spec = LLMDeploymentSpec(
        model=ModelSpec(name="chat", preset="llama-3.1-8b"),
        replicas=ReplicasSpec(min=1, max=1),
        scaling=ScalingSpec(tolerance=0.0),
        headroom=HeadroomSpec(replicas=0),
        batch=BatchSpec(windows=[TroughWindow(start="00:00", end="00:01", timezone="UTC", days=["Mon"])], replicas=2),
    )
    now = 1709251200.0  # Fri 2024-03-01 00:00 UTC: no window open
    job = BatchJob(name="job-0", deployment="chat", state=JobState.Running, created_at=now, deadline=None,
                   deadline_source="annotation", active_pods=0, requests=1, input_tokens=0, output_tokens=1)
    calm_state = InteractiveState(desired_replicas=0, ready_replicas=0, starting_replicas=0, unschedulable=0,
                                  signals_valid=False, latency_within_slo=True)
    pool = BatchPoolState(replicas=3, ready=0, gpus_free=0)
    calm = plan_batch(spec, [job], calm_state, pool, 100.0, now)
    pressed = plan_batch(spec, [job], replace(calm_state, unschedulable=1), pool, 100.0, now)
    assert calm.replicas == 1
    assert (pressed.replicas, pressed.limited_by) == (0, BatchLimit.InteractiveFirst)
    assert pressed.replicas <= calm.replicas
