"""The InferencePool llmscale renders (llmscale.controller.manifests.inferencepool) and the operator applies
(llmscale.controller.routing), on a real kube-apiserver with the Gateway API Inference Extension's
own CRD (v1.6.0, tests/cluster/gie-inferencepools-crd.yaml, installed with the cluster: CRDS).

The API server accepts it under the CRD's schema and CEL rules and stores every field; the pool
selects exactly the pods the interactive Service selects and targets the engine's port; without the
endpoint picker's port the CRD refuses it (the neighbour: the schema is really checked).

The operator (``llmscale run`` with the chart's settings) applies one per LLMDeployment, owned by
it (garbage-collected with it), with ``spec.routing.endpointPicker``; leaves alone one of that name
it does not own; deletes its own when ``spec.routing.inferencePool`` turns ``Disabled``. Discovery
answers "not served" for a group the API server does not serve, which is how every cluster
without the extension looks.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes.client
import pytest
import yaml
from kubernetes.client.exceptions import ApiException
from tests.cluster.helpers import (
    LocalCluster,
    OperatorProcess,
    container_env,
    render_chart,
    start_operator,
    wait_for,
)

from llmscale.api import LLMDeploymentSpec
from llmscale.controller.manifests.children import service_manifest
from llmscale.controller.manifests.inferencepool import (
    INFERENCE_POOL_GROUP,
    INFERENCE_POOL_PLURAL,
    INFERENCE_POOL_VERSION,
    inference_pool_manifest,
)
from llmscale.controller.writer import KubernetesInferencePools

pytestmark = pytest.mark.slow

NS = "routing"
OP_NS = "routing-op"
SPEC = LLMDeploymentSpec.model_validate({"model": {"name": "m", "preset": "llama-3.1-8b"}, "engine": {"port": 8080}})


def test_the_rendered_pool_targets_the_services_pods_on_its_port() -> None:
    pool = inference_pool_manifest("chat", NS, SPEC)
    service = service_manifest("chat", NS, SPEC, {"apiVersion": "llmscale.dev/v1alpha1", "kind": "LLMDeployment",
                                                  "name": "chat", "uid": "u"})
    assert pool["spec"]["selector"]["matchLabels"] == service["spec"]["selector"]
    assert pool["spec"]["targetPorts"] == [{"number": 8080}]
    assert pool["spec"]["endpointPickerRef"] == {"name": "chat-epp", "port": {"number": 9002}, "failureMode": "FailOpen"}
    assert "ownerReferences" not in pool["metadata"]


def test_the_api_server_accepts_the_rendered_pool(cluster: LocalCluster) -> None:
    cluster.create_namespace(NS)
    picked = LLMDeploymentSpec.model_validate(
        {**SPEC.to_wire(), "routing": {"endpointPicker": {"service": "shared-epp"}}})
    pool = inference_pool_manifest("chat", NS, picked)
    cluster.apply([pool], "llmscale-test")
    stored = json.loads(cluster.kubectl("get", "-n", NS, "inferencepool", "chat", "-o", "json").stdout)
    assert stored["spec"]["selector"] == pool["spec"]["selector"]
    assert stored["spec"]["targetPorts"] == [{"number": 8080}]
    assert stored["spec"]["endpointPickerRef"]["name"] == "shared-epp"
    assert stored["spec"]["appProtocol"] == "http"  # the CRD's default: the schema was applied

    broken = inference_pool_manifest("broken", NS, SPEC)
    del broken["spec"]["endpointPickerRef"]["port"]
    refused = cluster.kubectl("apply", "--server-side", "--field-manager=llmscale-test", "-f", "-",
                              input=yaml.safe_dump(broken), check=False)
    assert refused.returncode != 0 and "port is required" in refused.stderr


# --------------------------------------------------------------------------------------------
# The operator applies it
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def operator(cluster: LocalCluster, helm: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    cluster.create_namespace(OP_NS)
    docs = render_chart(helm, "llmscale-system", "watch.allNamespaces=false", f"watch.namespaces={{{OP_NS}}}")
    cluster.apply([d for d in docs if d["kind"] in {"PriorityClass", "KopfPeering"}], field_manager="helm")
    op = start_operator(container_env(docs), cluster.kubeconfig, tmp_path_factory.mktemp("routing") / "operator.log")
    try:
        yield op
    finally:
        op.stop()


def llmdeployment(name: str, routing: dict[str, Any] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "model": {"name": "chat", "preset": "llama-3.1-8b"},
        "engine": {"type": "mock", "image": "llmscale:dev"},
        "replicas": {"min": 1, "max": 2},
        "scaling": {"tickSeconds": 1},
    }
    if routing is not None:
        spec["routing"] = routing
    return {"apiVersion": "llmscale.dev/v1alpha1", "kind": "LLMDeployment",
            "metadata": {"name": name, "namespace": OP_NS}, "spec": spec}


def read_pool(cluster: LocalCluster, name: str) -> dict[str, Any] | None:
    try:
        got: dict[str, Any] = kubernetes.client.CustomObjectsApi(cluster.api).get_namespaced_custom_object(
            INFERENCE_POOL_GROUP, INFERENCE_POOL_VERSION, OP_NS, INFERENCE_POOL_PLURAL, name)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    return got


def uid_of(cluster: LocalCluster, name: str) -> str:
    obj = kubernetes.client.CustomObjectsApi(cluster.api).get_namespaced_custom_object(
        "llmscale.dev", "v1alpha1", OP_NS, "llmdeployments", name)
    return str(obj["metadata"]["uid"])


def test_discovery_tells_a_served_kind_from_one_nobody_serves(cluster: LocalCluster) -> None:
    async def ask(**api: str) -> bool:
        return await KubernetesInferencePools(cluster.api, **api).served()

    assert asyncio.run(ask()) is True
    # A cluster without the extension: the group is not served at all (404 on its discovery).
    assert asyncio.run(ask(group="inference.example.com")) is False
    # The group served, the kind not (an older extension's version of the group).
    assert asyncio.run(ask(plural="inferencemodels")) is False


@pytest.mark.usefixtures("operator")
def test_the_operator_owns_its_pool_for_as_long_as_routing_wants_it(cluster: LocalCluster) -> None:
    cluster.apply([llmdeployment("chat", {"endpointPicker": {"service": "shared-epp", "port": 9102}})],
                  "argocd-controller")
    pool = wait_for("InferencePool chat applied by the operator", lambda: read_pool(cluster, "chat"), 60)
    uid = uid_of(cluster, "chat")
    assert [(r["kind"], r["name"], r["uid"], r.get("controller")) for r in pool["metadata"]["ownerReferences"]] == [
        ("LLMDeployment", "chat", uid, True)]
    service = kubernetes.client.CoreV1Api(cluster.api).read_namespaced_service("chat", OP_NS)
    assert pool["spec"]["selector"]["matchLabels"] == service.spec.selector
    assert pool["spec"]["targetPorts"] == [{"number": 8000}]
    assert pool["spec"]["endpointPickerRef"].items() >= {
        "name": "shared-epp", "port": {"number": 9102}, "failureMode": "FailOpen", "kind": "Service"}.items()
    assert {m["manager"] for m in pool["metadata"]["managedFields"]} == {"llmscale"}

    cluster.apply([llmdeployment("chat", {"inferencePool": "Disabled"})], "argocd-controller")
    wait_for("InferencePool chat deleted once spec.routing.inferencePool is Disabled",
             lambda: read_pool(cluster, "chat") is None, 60)

    cluster.apply([llmdeployment("chat", {"inferencePool": "Auto"})], "argocd-controller")
    wait_for("InferencePool chat applied again", lambda: read_pool(cluster, "chat"), 60)
    kubernetes.client.CustomObjectsApi(cluster.api).delete_namespaced_custom_object(
        "llmscale.dev", "v1alpha1", OP_NS, "llmdeployments", "chat")
    # The garbage collector watches a kind from its next discovery resync (30 s) after the CRD
    # arrived: on a cluster started a minute ago that may still be ahead.
    wait_for("InferencePool chat garbage-collected with its LLMDeployment", lambda: read_pool(cluster, "chat") is None, 150)


@pytest.mark.usefixtures("operator")
def test_a_pool_of_that_name_made_by_someone_else_is_left_alone(cluster: LocalCluster, operator: OperatorProcess) -> None:
    theirs = inference_pool_manifest("theirs", OP_NS, SPEC)
    theirs["spec"]["endpointPickerRef"]["name"] = "their-epp"
    cluster.apply([theirs], "helm")
    cluster.apply([llmdeployment("theirs")], "argocd-controller")
    wait_for("the operator's refusal to take InferencePool theirs over",
             lambda: f"Left InferencePool {OP_NS}/theirs alone" in operator.text(), 60)
    wait_for("Deployment theirs applied all the same", lambda: kubernetes.client.AppsV1Api(cluster.api)
             .read_namespaced_deployment("theirs", OP_NS), 30)
    pool = read_pool(cluster, "theirs")
    assert pool is not None and "ownerReferences" not in pool["metadata"]
    assert pool["spec"]["endpointPickerRef"]["name"] == "their-epp"
    assert {m["manager"] for m in pool["metadata"]["managedFields"]} == {"helm"}

