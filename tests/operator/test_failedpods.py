"""Issue 21, case 1: the startup budget a pod is judged against, and the ``PodsHealthy`` condition
that names each failed pod and its last termination reason."""

from __future__ import annotations

import pytest

from llmscale.controller.failedpods import (
    BUDGET_FLOOR_S,
    judge_pods,
    pods_healthy_condition,
    startup_budget_s,
)
from llmscale.controller.indexes import IndexedPod

T0 = 1_717_416_000.0


def ready(name: str, cold_start_s: float) -> IndexedPod:
    return IndexedPod(name, "ready", created_s=T0 - 10_000, ready_s=T0 - 10_000 + cold_start_s)


def starting(name: str, scheduled_ago_s: float, created_ago_s: float | None = None) -> IndexedPod:
    created = T0 - (created_ago_s if created_ago_s is not None else scheduled_ago_s)
    return IndexedPod(name, "starting", created_s=created, scheduled_s=T0 - scheduled_ago_s)


@pytest.mark.parametrize(
    ("starts", "budget"),
    [
        pytest.param((), None, id="nothing-measured-no-budget"),
        pytest.param((610.0, 700.0, 900.0), 2700.0, id="three-times-the-slowest"),
        pytest.param((30.0,), BUDGET_FLOOR_S, id="floor-for-fast-pools"),
    ],
)
def test_startup_budget(starts: tuple[float, ...], budget: float | None) -> None:
    assert startup_budget_s(starts) == budget


@pytest.mark.parametrize(
    ("pod", "phase"),
    [
        # Cold starts 900 s: the budget is 2,700 s from scheduling.
        pytest.param(starting("p", 2_600), "starting", id="inside-the-budget"),
        pytest.param(starting("p", 2_800), "failed", id="past-the-budget"),
        # 6 h old but scheduled 10 min ago (waited for a node): not charged for the wait.
        pytest.param(starting("p", 600, created_ago_s=21_600), "starting", id="waited-for-a-node"),
        pytest.param(IndexedPod("p", "unschedulable", created_s=T0 - 21_600), "unschedulable",
                     id="unschedulable-is-not-failed-by-time"),
    ],
)
def test_judge_pods_against_the_pools_own_cold_starts(pod: IndexedPod, phase: str) -> None:
    pods = [ready("a", 900.0), ready("b", 700.0), pod]
    judged = {p.name: p for p in judge_pods(pods, T0)}
    assert judged["p"].phase == phase
    if phase == "failed":
        assert judged["p"].failure is not None and "startup budget of 2,700 s" in judged["p"].failure


def test_no_budget_without_a_measured_cold_start() -> None:
    # A first cold start of a new model can take any time: nothing is failed by time alone.
    assert judge_pods([starting("p", 86_400)], T0)[0].phase == "starting"


def test_pods_healthy_names_the_pod_and_its_last_termination() -> None:
    crashed = IndexedPod("chat-7f9-x2", "failed",
                         failure="container engine CrashLoopBackOff after 37 restarts, last terminated Error (exit code 1)")
    cond = pods_healthy_condition([ready("a", 300.0), crashed])
    assert (cond.status, cond.reason) == ("False", "FailedPods")
    assert "chat-7f9-x2" in cond.message and "last terminated Error" in cond.message
    assert pods_healthy_condition([ready("a", 300.0)]).reason == "NoFailedPods"
