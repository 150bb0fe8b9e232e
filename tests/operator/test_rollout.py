"""Issue 21, case 1: a rollout's surge pods are not capacity asked for, and a rollout that can
never finish is reported and told apart from a replica llmscale asked for that waits for a GPU.

The given input: two 8-GPU nodes fully held by 8 replicas of 2 GPUs; ``spec.engine.image`` changes;
the surge pod (``maxSurge: 1, maxUnavailable: 0``) is Unschedulable for ever. It used to count as
an unschedulable replica: the InsufficientCapacity clamp refused every scale-up, and when load
doubled and ``max`` was raised the pool stayed at 8.
"""

from __future__ import annotations

from typing import Any

import pytest

from llmscale.api import LLMDeploymentSpec
from llmscale.controller.indexes import IndexedPod, index_rollouts, progressing_of
from llmscale.controller.rollout import rollout_condition, rollout_fits
from llmscale.controller.state.pods import pool_state
from llmscale.policy import PolicyMemory, Reason, decide
from llmscale.signals.snapshot import SignalSnapshot

NOW = 1_717_416_000.0


def spec(hi: int) -> LLMDeploymentSpec:
    return LLMDeploymentSpec.model_validate({
        "model": {"name": "chat", "preset": "llama-3.1-8b"},
        "replicas": {"min": 1, "max": hi},
        "headroom": {"replicas": 0},
        "scaling": {"scaleUp": {"stabilizationWindowSeconds": 0}, "targets": {"kvCacheUtilization": 0.8}},
    })


def pods(*phases: Any) -> list[IndexedPod]:
    return [IndexedPod(f"chat-{i}", phase) for i, phase in enumerate(phases)]


def test_a_stuck_surge_pod_does_not_stop_a_scale_up() -> None:
    live = pods(*["ready"] * 8, "unschedulable")
    state = pool_state(8, None, [p.phase for p in live], [])
    assert (state.interactive_unschedulable, state.interactive_surge) == (0, 1)
    # Load doubles: queue 48 over 8 ready (3 per replica is the target), max raised to 16.
    snap = SignalSnapshot(NOW - 5, queue_depth=48.0, kv_cache_utilization=0.75, preemption_rate=0.0,
                          replicas_reporting=8)
    d = decide(spec(16), [snap], state, PolicyMemory(since=NOW - 3600), NOW)
    assert d.interactive_replicas > 8 and d.clamped_by is not Reason.InsufficientCapacity, d.reasons
    cond = rollout_condition("chat", 8, live, None)
    assert (cond.status, cond.reason) == ("False", "RolloutBlocked")
    assert "1 cannot be placed" in cond.message


def test_a_replica_llmscale_asked_for_that_waits_for_a_gpu_still_stops_adding() -> None:
    # Raised to 9 while the rollout is stuck: one unschedulable pod is the surge, the other is
    # llmscale's and the clamp holds (no pod added to wait for GPUs too).
    live = pods(*["ready"] * 8, "unschedulable", "unschedulable")
    state = pool_state(9, None, [p.phase for p in live], [])
    assert (state.interactive_unschedulable, state.interactive_surge) == (1, 1)
    snap = SignalSnapshot(NOW - 5, queue_depth=60.0, kv_cache_utilization=0.75, preemption_rate=0.0,
                          replicas_reporting=8)
    d = decide(spec(16), [snap], state, PolicyMemory(since=NOW - 3600), NOW)
    assert (d.interactive_replicas, d.clamped_by) == (9, Reason.InsufficientCapacity)


@pytest.mark.parametrize(
    ("replicas", "phases", "progressing", "expected"),
    [
        pytest.param(16, ["ready"] * 16, ("True", "NewReplicaSetAvailable", "done"), ("True", "RolloutComplete"),
                     id="no-rollout"),
        pytest.param(16, ["ready"] * 16 + ["starting"], ("True", "ReplicaSetUpdated", "progressing"),
                     ("True", "RollingOut"), id="surge-starting"),
        pytest.param(4, ["ready"] * 4 + ["failed"], None, ("False", "RolloutBlocked"), id="surge-of-a-broken-image"),
        pytest.param(8, ["ready"] * 8 + ["unschedulable"],
                     ("False", "ProgressDeadlineExceeded", 'ReplicaSet "chat-7d" has timed out progressing.'),
                     ("False", "RolloutStuck"), id="progress-deadline-exceeded"),
        # A replica llmscale asked for waits for a GPU, no rollout: not the rollout's business.
        pytest.param(9, ["ready"] * 8 + ["unschedulable"], None, ("True", "RolloutComplete"), id="asked-for-waits"),
    ],
)
def test_rollout_condition(replicas: int, phases: list[Any], progressing: tuple[str, str, str] | None,
                           expected: tuple[str, str]) -> None:
    cond = rollout_condition("chat", replicas, pods(*phases), progressing)
    assert (cond.status, cond.reason) == expected


def test_the_rollouts_index_reads_the_deployments_progressing_condition() -> None:
    labels = {"llmscale.dev/deployment": "chat", "llmscale.dev/pool": "interactive"}
    status = {"conditions": [
        {"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable"},
        {"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded", "message": "timed out"}]}
    assert progressing_of(status) == ("False", "ProgressDeadlineExceeded", "timed out")
    got = index_rollouts(namespace="serving", name="chat", labels=labels, status=status)  # type: ignore[arg-type]
    assert got == {("serving", "chat", "interactive"): ("False", "ProgressDeadlineExceeded", "timed out")}
    assert index_rollouts(namespace="serving", name="chat", labels=labels, status={}) == {}  # type: ignore[arg-type]


def _pool(ready: int, surge_phase: str | None) -> list[IndexedPod]:
    pods = [IndexedPod(f"chat-{k}", "ready") for k in range(ready)]
    return pods + ([IndexedPod("chat-new", surge_phase)] if surge_phase else [])  # type: ignore[arg-type]


UPDATING = ("True", "ReplicaSetUpdated", "ReplicaSet chat-2 is progressing.")
DONE = ("True", "NewReplicaSetAvailable", "ReplicaSet chat-2 has successfully progressed.")


@pytest.mark.parametrize(
    ("pods", "progressing", "demand", "fitted", "fits"),
    [
        pytest.param(_pool(8, "unschedulable"), UPDATING, 6, False, True, id="no-gpu-headroom-covers-fit"),
        pytest.param(_pool(8, "unschedulable"), UPDATING, 7, False, True, id="exactly-one-spare"),
        pytest.param(_pool(8, "unschedulable"), UPDATING, 8, False, False, id="demand-needs-every-replica"),
        pytest.param(_pool(8, "failed"), UPDATING, 4, False, False, id="a-broken-image-is-not-fitted"),
        pytest.param(_pool(8, "starting"), UPDATING, 4, False, False, id="a-surge-pod-that-fits-is-left"),
        pytest.param(_pool(8, None), UPDATING, 8, True, True, id="kept-until-complete"),
        pytest.param(_pool(8, None), DONE, 6, True, False, id="complete-gives-the-surge-back"),
        pytest.param(_pool(8, None), None, 6, True, True, id="progress-unknown-kept"),
    ],
)
def test_rollout_fits(pods: list[IndexedPod], progressing: tuple[str, str, str] | None, demand: int, fitted: bool,
                      fits: bool) -> None:
    assert rollout_fits(8, pods, progressing, demand, fitted) is fits
    if fitted and fits:
        assert rollout_condition("chat", 8, pods, progressing, fitted=True).reason == "RollingOutInPlace"
