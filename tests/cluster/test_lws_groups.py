"""A replica of several pods on the real LeaderWorkerSet controller (issue 21): the issue's group,
a leader and one worker of 8 GPUs each (``gpusPerReplica: 16``), on a node of 8 GPUs. The leader
lands, the worker stays Unschedulable; the leaders-only ``/scale`` selector saw one starting pod of
8 GPUs. Read whole, the replica is unschedulable and holds 16 GPUs."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import kubernetes.client
import pytest
import yaml
from tests.cluster.helpers import LocalCluster
from tests.waiting import wait_for

from llmscale.api import ScaleTargetRef
from llmscale.controller.scaletarget import KubernetesScaleClient, read_target

NS = "lws-groups"
NODE = "gpu-lws-0"
TAINT = {"key": "llmscale.dev/test", "value": "lws-groups", "effect": "NoSchedule"}
POD_SPEC = {
    "nodeSelector": {"llmscale.dev/test-node": "lws-groups"},
    "tolerations": [{"key": "llmscale.dev/test", "operator": "Equal", "value": "lws-groups", "effect": "NoSchedule"}],
    "containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.11.0",
                    "resources": {"requests": {"nvidia.com/gpu": "8"}, "limits": {"nvidia.com/gpu": "8"}}}],
}
LWS = {
    "apiVersion": "leaderworkerset.x-k8s.io/v1",
    "kind": "LeaderWorkerSet",
    "metadata": {"name": "llama-405b", "namespace": NS},
    "spec": {"replicas": 1, "leaderWorkerTemplate": {"size": 2, "workerTemplate": {"spec": POD_SPEC}}},
}


@pytest.fixture
def placed(lws: LocalCluster) -> Iterator[LocalCluster]:
    with lws.gpu_nodes(NS, (NODE,), 8, "lws-groups", TAINT):
        yield lws


@pytest.mark.slow
def test_a_leader_worker_group_is_read_as_one_replica_with_its_workers_state(placed: LocalCluster) -> None:
    cluster = placed
    cluster.kubectl("apply", "--server-side", "--field-manager=kubectl", "-f", "-", input=yaml.safe_dump(LWS))
    core = kubernetes.client.CoreV1Api(cluster.api)

    def worker_pending() -> bool:
        got = core.list_namespaced_pod(NS, label_selector="leaderworkerset.sigs.k8s.io/name=llama-405b").items
        return len(got) == 2 and any(
            c.type == "PodScheduled" and c.status == "False" for p in got for c in (p.status.conditions or ()))

    wait_for("the leader placed and its worker Unschedulable", worker_pending, 90)
    ref = ScaleTargetRef.model_validate({"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
                                         "name": "llama-405b"})
    client = KubernetesScaleClient(cluster.api)
    reading, pods = asyncio.run(read_target(client, NS, ref))
    assert reading.replicas == 1
    (replica,) = pods.pods
    assert replica.name == "llama-405b-0"  # the leader: the pod whose series the signals read
    assert replica.phase == "unschedulable" and replica.failure and "llama-405b-0-1" in replica.failure
    assert dict(replica.requests)["nvidia.com/gpu"] == 16.0
    # What the leaders-only /scale selector gave before: one pod of 8 GPUs, "starting" or Ready.
    leaders = asyncio.run(client.pods(NS, str(reading.selector)))
    assert [dict(p.requests)["nvidia.com/gpu"] for p in leaders.pods] == [8.0]
    assert leaders.pods[0].phase != "unschedulable"
