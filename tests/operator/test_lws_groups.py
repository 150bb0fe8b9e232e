"""A replica of several pods (issue 21): a LeaderWorkerSet group read whole — every pod of it, the
worst phase, GPUs summed — not its leader alone."""

from __future__ import annotations

from typing import Any

import pytest

from llmscale.controller.scaletarget import LWS_GROUP_LABEL, pods_of

T = "2026-12-01T10:00:00Z"
READY = {"phase": "Running", "startTime": T, "conditions": [
    {"type": "PodScheduled", "status": "True", "lastTransitionTime": T},
    {"type": "Ready", "status": "True", "lastTransitionTime": "2026-12-01T10:15:00Z"}]}
STARTING = {"phase": "Running", "startTime": T, "conditions": [
    {"type": "PodScheduled", "status": "True", "lastTransitionTime": T},
    {"type": "Ready", "status": "False", "lastTransitionTime": T}]}
UNSCHEDULABLE = {"phase": "Pending", "conditions": [
    {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "lastTransitionTime": T}]}
CRASHING = {"phase": "Running", "startTime": T, "conditions": [
    {"type": "PodScheduled", "status": "True", "lastTransitionTime": T},
    {"type": "Ready", "status": "False", "lastTransitionTime": T}],
    "containerStatuses": [{"name": "engine", "ready": False, "restartCount": 37,
                           "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                           "lastState": {"terminated": {"reason": "Error", "exitCode": 1}}}]}


def pod(group: int, worker: int, status: dict[str, Any], size: int = 2) -> dict[str, Any]:
    name = f"llama-405b-{group}" + (f"-{worker}" if worker else "")
    return {
        "metadata": {"name": name, "creationTimestamp": T,
                     "labels": {"leaderworkerset.sigs.k8s.io/name": "llama-405b", LWS_GROUP_LABEL: str(group),
                                "leaderworkerset.sigs.k8s.io/worker-index": str(worker)},
                     "annotations": {"leaderworkerset.sigs.k8s.io/size": str(size)}},
        "spec": {"containers": [{"name": "engine", "resources": {"requests": {"nvidia.com/gpu": "8"}}}]},
        "status": status,
    }


@pytest.mark.parametrize(
    ("members", "phase"),
    [
        pytest.param([pod(0, 0, READY), pod(0, 1, READY)], "ready", id="leader-and-worker-ready"),
        pytest.param([pod(0, 0, READY), pod(0, 1, UNSCHEDULABLE)], "unschedulable", id="worker-unschedulable"),
        pytest.param([pod(0, 0, CRASHING), pod(0, 1, READY)], "failed", id="leader-crash-looping-is-failed"),
        pytest.param([pod(0, 0, READY), pod(0, 1, STARTING)], "starting", id="worker-starting"),
        pytest.param([pod(0, 0, READY)], "starting", id="a-worker-missing"),
        pytest.param([pod(0, 1, READY)], "starting", id="the-leader-missing"),
    ],
)
def test_a_group_is_one_replica_with_its_worst_phase(members: list[dict[str, Any]], phase: str) -> None:
    (replica,) = pods_of(members, group_label=LWS_GROUP_LABEL).pods
    assert replica.phase == phase
    if phase == "unschedulable":
        assert replica.failure is not None and "llama-405b-0-1" in replica.failure


def test_groups_are_billed_at_every_pods_gpus() -> None:
    """gpusPerReplica 16: a leader and a worker of 8 GPUs each; the leaders alone billed 8."""
    got = pods_of([pod(0, 0, READY), pod(0, 1, READY), pod(1, 0, READY), pod(1, 1, READY)],
                  group_label=LWS_GROUP_LABEL)
    assert [p.name for p in got.pods] == ["llama-405b-0", "llama-405b-1"]  # the leaders: their series
    assert all(dict(p.requests)["nvidia.com/gpu"] == 16.0 for p in got.pods)
    leaders_only = pods_of([pod(0, 0, READY), pod(1, 0, READY)])
    assert all(dict(p.requests)["nvidia.com/gpu"] == 8.0 for p in leaders_only.pods)
