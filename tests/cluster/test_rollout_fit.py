"""A rollout that can never finish, made to fit (issue 21), on the real Deployment controller and
kube-scheduler: two 8-GPU KWOK nodes held by 8 replicas of 2 GPUs. A new image's surge pod is
Unschedulable for ever under ``maxSurge: 1, maxUnavailable: 0``; :func:`rollout_fits` says to fit
it while the warm headroom covers demand (not when demand needs every replica), and the
Deployment llmscale applies with ``maxSurge: 0, maxUnavailable: 1`` then finishes the rollout."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from tests.cluster.helpers import LocalCluster
from tests.waiting import wait_for

from llmscale.api import LLMDeploymentSpec
from llmscale.controller.indexes import IndexedPod, indexed_pod
from llmscale.controller.manifests.children import deployment_manifest
from llmscale.controller.manifests.names import INTERACTIVE
from llmscale.controller.rollout import rollout_condition, rollout_fits

NS = "rollout-fit"
NODES = ("gpu-roll-0", "gpu-roll-1")
TAINT = {"key": "llmscale.dev/test", "value": "rollout-fit", "effect": "NoSchedule"}
PLACEMENT = {"nodeSelector": {"llmscale.dev/test-node": "rollout-fit"},
             "tolerations": [{"key": "llmscale.dev/test", "operator": "Equal", "value": "rollout-fit",
                              "effect": "NoSchedule"}]}


@pytest.fixture
def nodes(cluster: LocalCluster) -> Iterator[LocalCluster]:
    with cluster.gpu_nodes(NS, NODES, 8, "rollout-fit", TAINT):
        yield cluster


def spec(image: str) -> LLMDeploymentSpec:
    return LLMDeploymentSpec.model_validate({
        "model": {"name": "chat", "preset": "llama-3.1-8b"},
        "engine": {"type": "mock", "image": image},
        "resources": {"gpusPerReplica": 2},
        "replicas": {"min": 1, "max": 16},
        "headroom": {"replicas": 1, "coldStartSeconds": 1},
        "template": {"spec": PLACEMENT},
    })


def manifest(image: str, fit: bool) -> dict[str, Any]:
    m = deployment_manifest("chat", NS, spec(image), INTERACTIVE, 8, {}, fit_rollout=fit)
    m["metadata"].pop("ownerReferences", None)  # no LLMDeployment here: the Deployment stands alone
    return m


def pods(cluster: LocalCluster) -> list[IndexedPod]:
    items = json.loads(cluster.kubectl("get", "pods", "-n", NS, "-o", "json").stdout)["items"]
    out = [indexed_pod(p["metadata"]["name"], p["metadata"], p.get("status", {}), p.get("spec")) for p in items]
    return [p for p in out if p is not None]


def progressing(cluster: LocalCluster) -> tuple[str, str, str] | None:
    d = json.loads(cluster.kubectl("get", "deployment", "chat", "-n", NS, "-o", "json").stdout)
    c = next((c for c in d.get("status", {}).get("conditions", []) if c["type"] == "Progressing"), None)
    return (c["status"], c.get("reason", ""), c.get("message", "")) if c else None


def rolled_out(cluster: LocalCluster, image: str) -> bool:
    d = json.loads(cluster.kubectl("get", "deployment", "chat", "-n", NS, "-o", "json").stdout)
    st = d.get("status", {})
    live = json.loads(cluster.kubectl("get", "pods", "-n", NS, "-o", "json").stdout)["items"]
    images = {c["image"] for p in live if not p["metadata"].get("deletionTimestamp") for c in p["spec"]["containers"]}
    return (st.get("updatedReplicas") == 8 and st.get("readyReplicas") == 8 and st.get("replicas") == 8
            and images == {image})


@pytest.mark.slow
def test_a_surge_pod_with_no_gpu_free_is_fitted_when_headroom_covers_demand(nodes: LocalCluster) -> None:
    cluster = nodes
    cluster.apply([manifest("llmscale:dev", fit=False)], field_manager="llmscale")
    try:
        wait_for("8 Ready replicas", lambda: rolled_out(cluster, "llmscale:dev"), 90)
    except BaseException:
        print(cluster.kubectl("get", "pods,deploy,rs", "-n", NS, "-o", "wide", check=False).stdout)
        print(cluster.kubectl("get", "events", "-n", NS, check=False).stdout[-3000:])
        raise

    cluster.apply([manifest("llmscale:dev-2", fit=False)], field_manager="llmscale")

    def blocked() -> list[IndexedPod] | None:
        got = pods(cluster)
        return got if any(p.phase == "unschedulable" for p in got) else None

    live = wait_for("the surge pod Unschedulable", blocked, 60)
    assert len(live) == 9 and sum(p.phase == "ready" for p in live) == 8
    # Reported, and told apart from a replica llmscale asked for.
    assert rollout_condition("chat", 8, live, progressing(cluster)).reason == "RolloutBlocked"
    # Warm capacity covers demand 6 (8 Ready − 1 ≥ 6): fit it. Demand 8 needs every Ready replica: not.
    assert rollout_fits(8, live, progressing(cluster), demand=6, fitted=False)
    assert not rollout_fits(8, live, progressing(cluster), demand=8, fitted=False)

    cluster.apply([manifest("llmscale:dev-2", fit=True)], field_manager="llmscale")
    wait_for("the rollout finished in place", lambda: rolled_out(cluster, "llmscale:dev-2"), 120)
    done = wait_for("Progressing=NewReplicaSetAvailable",
                    lambda: p if (p := progressing(cluster)) and p[1] == "NewReplicaSetAvailable" else None, 60)
    # Completed: the surge comes back (fitted no more) and the condition says so.
    assert not rollout_fits(8, pods(cluster), done, demand=6, fitted=True)
    assert rollout_condition("chat", 8, pods(cluster), done, fitted=True).reason == "RolloutComplete"
