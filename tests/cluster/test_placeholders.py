"""Node headroom on the local control plane: a placeholder yields its node to a real replica.

The real kube-scheduler (with preemption) and a KWOK node of its own — 8 GPUs, tainted so that
only this test's pods land there, 2 of them taken by a filler pod — run an LLMDeployment of 2 GPUs
a replica with ``spec.headroom.warmNodes``. The operator runs with the chart's settings and the
chart's PriorityClass; Prometheus is unreachable, so the policy holds and only ``spec.replicas``
moves replicas: 2 replicas (1 of demand, 1 of headroom) and 1 placeholder fill the node. Raising
``spec.replicas.min`` to 3 makes a third replica that has no room but the placeholder's: the
scheduler preempts the placeholder, the replica lands on the node it held, and the placeholder,
recreated, goes Pending — what would make a cluster autoscaler add the next node.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes.client
import pytest
from tests.cluster.helpers import (
    LocalCluster,
    OperatorProcess,
    container_env,
    render_chart,
    start_operator,
    wait_for,
)

pytestmark = pytest.mark.slow

GROUP, VERSION, PLURAL = "llmscale.dev", "v1alpha1", "llmdeployments"
NS = "warm-nodes"
NODE = "gpu-warm-0"
TAINT = {"key": "llmscale.dev/test", "value": "warm-nodes", "effect": "NoSchedule"}
PLACEMENT = {"nodeSelector": {"llmscale.dev/test-node": "warm"},
             "tolerations": [{"key": "llmscale.dev/test", "operator": "Equal", "value": "warm-nodes",
                              "effect": "NoSchedule"}]}


@pytest.fixture(scope="module")
def operator(cluster: LocalCluster, helm: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    with cluster.gpu_nodes(NS, (NODE,), 8, "warm", TAINT):
        docs = render_chart(helm, "llmscale-system", "watch.allNamespaces=false", f"watch.namespaces={{{NS}}}")
        # The chart's PriorityClasses, which the operator sets on the pods (a pod naming a class that
        # does not exist is refused), and the peering object it joins.
        cluster.apply([d for d in docs if d["kind"] in {"PriorityClass", "KopfPeering"}], field_manager="helm")
        env = container_env(docs)
        op = start_operator(env, cluster.kubeconfig, tmp_path_factory.mktemp("warm") / "operator.log")
        try:
            yield op
        finally:
            op.stop()


def llmdeployment(least: int) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "LLMDeployment",
        "metadata": {"name": "chat", "namespace": NS},
        "spec": {
            "model": {"name": "chat", "preset": "llama-3.1-8b"},
            "engine": {"type": "mock", "image": "llmscale:dev"},
            "resources": {"gpusPerReplica": 2, "gpuType": "l40s"},
            "replicas": {"min": least, "max": 4},
            "scaling": {"tickSeconds": 1},
            "headroom": {"replicas": 1, "coldStartSeconds": 1, "warmNodes": True},
            "template": {"spec": PLACEMENT},
        },
    }


def pods(cluster: LocalCluster, selector: str) -> list[Any]:
    items = kubernetes.client.CoreV1Api(cluster.api).list_namespaced_pod(NS, label_selector=selector).items
    return [p for p in items if p.metadata.deletion_timestamp is None]


REPLICAS = "llmscale.dev/deployment=chat,llmscale.dev/pool=interactive"
PLACEHOLDERS = "llmscale.dev/deployment=chat,llmscale.dev/placeholder=true"


def unschedulable(pod: Any) -> bool:
    return any(c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable"
               for c in pod.status.conditions or ())


@pytest.mark.usefixtures("operator")
def test_a_placeholder_yields_its_node_to_a_real_replica(cluster: LocalCluster) -> None:
    core = kubernetes.client.CoreV1Api(cluster.api)
    core.create_namespaced_pod(NS, {
        "metadata": {"name": "filler"},
        "spec": {**PLACEMENT, "containers": [{"name": "c", "image": "busybox",
                                              "resources": {"limits": {"nvidia.com/gpu": "2"}}}]},
    })
    cluster.apply([llmdeployment(1)], "argocd-controller")
    # 2 replicas (1 of demand + 1 of headroom) and 1 placeholder: 2 + 4 + 2 = 8 GPUs, the node is full.
    held = wait_for("a placeholder running on the node", lambda: (
        p[0] if len(p := pods(cluster, PLACEHOLDERS)) == 1 and p[0].spec.node_name == NODE else None), 60)
    wait_for("2 replicas on the node", lambda: len([p for p in pods(cluster, REPLICAS) if p.spec.node_name == NODE]) == 2)
    spec = held.spec
    assert spec.priority_class_name == "llmscale-placeholder" and spec.priority == -1
    assert spec.preemption_policy == "Never"
    assert spec.node_selector == PLACEMENT["nodeSelector"]
    assert spec.containers[0].resources.requests["nvidia.com/gpu"] == "2"
    objects = kubernetes.client.CustomObjectsApi(cluster.api)
    wait_for("status: headroom 1, 1 placeholder holding a node", lambda: objects.get_namespaced_custom_object(
        GROUP, VERSION, NS, PLURAL, "chat")["status"]["replicas"].items()
        >= {"headroom": 1, "placeholders": 1, "placeholdersRunning": 1}.items())
    before = {p.metadata.name for p in pods(cluster, REPLICAS)}

    cluster.apply([llmdeployment(3)], "argocd-controller")
    new = wait_for("the third replica scheduled", lambda: (
        n[0] if len(n := [p for p in pods(cluster, REPLICAS) if p.metadata.name not in before and p.spec.node_name])
        == 1 else None), 60)
    assert new.spec.node_name == NODE, "the replica landed on the node the placeholder held"
    wait_for(f"placeholder {held.metadata.name} preempted and gone", lambda: held.metadata.name not in {
        p.metadata.name for p in pods(cluster, PLACEHOLDERS)})
    pending = wait_for("a placeholder Pending, unschedulable", lambda: [
        p for p in pods(cluster, PLACEHOLDERS) if not p.spec.node_name and unschedulable(p)])
    assert pending
    preempted = [e for e in core.list_namespaced_event(NS, field_selector=f"involvedObject.name={held.metadata.name}").items
                 if e.reason == "Preempted"]
    assert preempted, "the scheduler recorded the preemption on the placeholder"
    wait_for("status: placeholders asked for, none holding a node", lambda: (
        (r := objects.get_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "chat")["status"]["replicas"])
        ["placeholders"] >= 1 and r["placeholdersRunning"] == 0 and r["desired"] == 3))
    assert core.read_namespaced_pod("filler", NS).spec.node_name == NODE, "nothing else was preempted"
