"""Issue 21, case 1: the startup budget a pod is judged against, and the ``PodsHealthy`` condition
that names each failed pod and its last termination reason."""

from __future__ import annotations

import pytest
from kubernetes import client
from tests.cluster.helpers import LocalCluster

from llmscale.controller.failedpods import (
    BUDGET_FLOOR_S,
    judge_failing,
    judge_pods,
    pods_healthy_condition,
    startup_budget_s,
)
from llmscale.controller.indexes import IndexedPod, indexed_pod
from llmscale.controller.state.pods import pool_state
from llmscale.signals.snapshot import PodSignals, SignalSnapshot

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


def test_pods_healthy_names_the_pod_with_its_last_termination() -> None:
    crashed = IndexedPod("chat-7f9-x2", "failed",
                         failure="container engine CrashLoopBackOff after 37 restarts, last terminated Error (exit code 1)")
    cond = pods_healthy_condition([ready("a", 300.0), crashed])
    assert (cond.status, cond.reason) == ("False", "FailedPods")
    assert "chat-7f9-x2" in cond.message and "last terminated Error" in cond.message


def test_pods_healthy_without_a_failed_pod_says_so() -> None:
    assert pods_healthy_condition([ready("a", 300.0)]).reason == "NoFailedPods"


@pytest.mark.slow
def test_a_crash_looping_pod_on_a_real_api_server_is_failed(cluster: LocalCluster) -> None:
    """Issue 21: the pod status the kubelet writes for a crash loop (written here through the status
    subresource of a real API server, on a node nothing runs) reads back as a failed pod naming its
    last termination; the same pod Ready again is Ready."""
    namespace = "llmscale-failed-pods"
    cluster.create_namespace(namespace)
    core = client.CoreV1Api(cluster.api)
    body = {"metadata": {"name": "chat-7f9-x2"},
            "spec": {"nodeName": "no-such-node", "containers": [{"name": "engine", "image": "example.invalid/e"}]}}
    core.create_namespaced_pod(namespace, body)
    status = {"status": {
        "phase": "Running",
        "conditions": [{"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "False"}],
        "containerStatuses": [{
            "name": "engine", "image": "example.invalid/e", "imageID": "", "ready": False, "restartCount": 37,
            "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 5m0s restarting failed container"}},
            "lastState": {"terminated": {"reason": "Error", "exitCode": 1}}}]}}
    core.patch_namespaced_pod_status("chat-7f9-x2", namespace, status)
    live = cluster.api.sanitize_for_serialization(core.read_namespaced_pod("chat-7f9-x2", namespace))
    pod = indexed_pod(live["metadata"]["name"], live["metadata"], live["status"], live["spec"])
    assert pod is not None and pod.phase == "failed"
    assert pod.failure == "container engine CrashLoopBackOff after 37 restarts, last terminated Error (exit code 1)"
    ready = {"status": {"conditions": [{"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "True"}],
                        "containerStatuses": [{**status["status"]["containerStatuses"][0], "ready": True,  # type: ignore[index]
                                               "state": {"running": {}}}]}}
    core.patch_namespaced_pod_status("chat-7f9-x2", namespace, ready)
    live = cluster.api.sanitize_for_serialization(core.read_namespaced_pod("chat-7f9-x2", namespace))
    again = indexed_pod(live["metadata"]["name"], live["metadata"], live["status"], live["spec"])
    assert again is not None and again.phase == "ready"


def _signals(pod: str, served: float, failed: float, failing: bool) -> PodSignals:
    return PodSignals(pod, queue_depth=0.0, running_requests=0.0, kv_cache_utilization=0.0,
                      served_request_rate=served, failed_request_rate=failed, failing=failing)


def _ready_pods_one_failing_every_request() -> tuple[list[IndexedPod], tuple[IndexedPod, ...]]:
    """Issue 21, the crash loop's sibling: 3 Ready pods and a fourth, Ready too, whose engine ends
    every request in error: the pods, and the pods as judged."""
    pods = [ready(f"chat-{k}", 300.0) for k in range(4)]
    snap = SignalSnapshot(T0, queue_depth=6.0, kv_cache_utilization=0.7, preemption_rate=0.0, replicas_reporting=3,
                          pods=(*(_signals(f"chat-{k}", 2.0, 0.0, False) for k in range(3)),
                                _signals("chat-3", 0.0, 2.4, True)),
                          failing_pods=("chat-3",))
    return pods, judge_failing(pods, snap)


def test_a_ready_engine_failing_every_request_is_failed() -> None:
    """It is failed, not idle capacity."""
    _, judged = _ready_pods_one_failing_every_request()
    assert [p.phase for p in judged] == ["ready", "ready", "ready", "failed"]


def test_a_ready_engine_failing_every_request_is_replaced() -> None:
    """The pool reads 3 Ready + 1 failed, so the policy asks for its replacement."""
    _, judged = _ready_pods_one_failing_every_request()
    state = pool_state(4, 0, [p.phase for p in judged], [])
    assert (state.interactive_ready, state.interactive_failed) == (3, 1)


def test_pods_healthy_names_an_engine_failing_every_request_with_its_error_rate() -> None:
    _, judged = _ready_pods_one_failing_every_request()
    c = pods_healthy_condition(judged)
    assert (c.status, c.reason) == ("False", "FailedPods")
    assert "chat-3" in c.message and "2.40 requests/s ended in error" in c.message


def test_a_pod_the_snapshot_does_not_call_failing_stays_as_it_is() -> None:
    # An idle one, one with errors beside answers.
    pods, _ = _ready_pods_one_failing_every_request()
    assert judge_failing(pods, SignalSnapshot(T0, pods=(_signals("chat-3", 0.0, 0.0, False),))) == tuple(pods)
