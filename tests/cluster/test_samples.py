"""The samples of manifests/samples on a real kube-apiserver, and the pod ``spec.template`` makes.

- Every sample applies (``kubectl apply --server-side -k manifests/samples``, as the README says)
  and comes back from the API server as the models fill it.
- The chat sample — vLLM with the ``HF_TOKEN`` Secret, its own weights volume, ``/dev/shm`` in
  memory, tolerations, node affinity, topology spread, CPU and memory — run by the operator: the
  pods the Deployment controller makes carry every field of the template next to llmscale's own
  (command, arguments, probes, the GPU), and are scheduled with no storage class (the per-pod
  download is the default; the shared ReadWriteMany cache is an opt-in).
- A template that changes what llmscale owns is refused with ``Ready=False/InvalidSpec`` naming
  the field, and no Deployment is created.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes.client
import pytest
import yaml
from kubernetes.client.exceptions import ApiException
from tests.cluster.helpers import (
    ROOT,
    LocalCluster,
    OperatorProcess,
    container_env,
    render_chart,
    start_operator,
    wait_for,
)

from llmscale.api import LLMDeployment

pytestmark = pytest.mark.slow

GROUP, VERSION, PLURAL = "llmscale.dev", "v1alpha1", "llmdeployments"
SAMPLES = ROOT / "manifests" / "samples"
NS = "template-sample"


def delete_namespace(cluster: LocalCluster, name: str) -> None:
    try:
        kubernetes.client.CoreV1Api(cluster.api).delete_namespace(name)
    except ApiException as exc:
        if exc.status != 404:
            raise


def test_every_sample_reads_back_as_the_models_fill_it(cluster: LocalCluster) -> None:
    cluster.kubectl("apply", "--server-side", "--field-manager=argocd-controller", "-k", str(SAMPLES))
    try:
        objects = kubernetes.client.CustomObjectsApi(cluster.api)
        got = {o["metadata"]["name"]: o for o in objects.list_namespaced_custom_object(
            GROUP, VERSION, "llm-serving", PLURAL)["items"]}
        expected = {}
        for path in sorted(SAMPLES.glob("*.yaml")):
            for doc in yaml.safe_load_all(path.read_text()):
                if doc and doc.get("kind") == "LLMDeployment":
                    expected[doc["metadata"]["name"]] = LLMDeployment.model_validate(doc).spec.to_wire()
        assert set(got) == set(expected)
        for name, spec in expected.items():
            assert got[name]["spec"] == spec, name
        pvc = kubernetes.client.CoreV1Api(cluster.api).read_namespaced_persistent_volume_claim("model-cache", "llm-serving")
        assert pvc.spec.access_modes == ["ReadWriteMany"]
    finally:
        delete_namespace(cluster, "llm-serving")


@pytest.fixture(scope="module")
def operator(cluster: LocalCluster, helm: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    """``llmscale run`` (admin credentials, the chart's settings) watching the sample's namespace."""
    cluster.create_namespace(NS)
    docs = render_chart(helm, "llmscale-system", "watch.allNamespaces=false", f"watch.namespaces={{{NS}}}")
    # The chart's PriorityClasses, which the operator sets on the pods (a pod naming a class that
    # does not exist is refused), and the peering object it joins.
    cluster.apply([d for d in docs if d["kind"] in {"PriorityClass", "KopfPeering"}], field_manager="helm")
    env = container_env(docs)
    op = start_operator(env, cluster.kubeconfig, tmp_path_factory.mktemp("template") / "operator.log")
    try:
        yield op
    finally:
        op.stop()
        delete_namespace(cluster, NS)


def _sample(name: str) -> dict[str, Any]:
    (doc,) = [d for d in yaml.safe_load_all((SAMPLES / name).read_text()) if d]
    doc["metadata"]["namespace"] = NS
    return dict(doc)


def _pods(cluster: LocalCluster) -> list[Any]:
    items = kubernetes.client.CoreV1Api(cluster.api).list_namespaced_pod(
        NS, label_selector="llmscale.dev/deployment=chat,llmscale.dev/pool=interactive").items
    return [p for p in items if p.metadata.deletion_timestamp is None]


def _within(part: Any, whole: Any) -> bool:
    """Every key and item of ``part`` is in ``whole`` with the same value (lists item by item)."""
    if isinstance(part, dict):
        return isinstance(whole, dict) and all(k in whole and _within(v, whole[k]) for k, v in part.items())
    if isinstance(part, list):
        return isinstance(whole, list) and len(part) == len(whole) and all(map(_within, part, whole))
    return bool(part == whole)


@pytest.mark.usefixtures("operator")
def test_the_chat_sample_pod_carries_every_field_of_its_template(cluster: LocalCluster) -> None:
    core = kubernetes.client.CoreV1Api(cluster.api)
    core.create_namespaced_secret(NS, {"metadata": {"name": "hf-token"}, "stringData": {"token": "hf_not_a_real_token"}})
    # No PersistentVolume and no provisioner: the sample must schedule without any storage.
    cluster.apply([_sample("chat.yaml")], "argocd-controller")
    pods = wait_for("2 pods of chat scheduled on a node", lambda: (
        p if len(p := _pods(cluster)) == 2 and all(x.spec.node_name for x in p) else None), 60)
    template = _sample("chat.yaml")["spec"]["template"]
    for pod in pods:
        spec = cluster.api.sanitize_for_serialization(pod)["spec"]
        (engine,) = spec["containers"]
        assert engine["name"] == "engine"
        env = {e["name"]: e for e in engine["env"]}
        assert env["HF_TOKEN"]["valueFrom"] == {"secretKeyRef": {"name": "hf-token", "key": "token"}}
        assert env["HF_HOME"]["value"] == "/models"
        mounts = {m["mountPath"]: m["name"] for m in engine["volumeMounts"]}
        assert mounts["/models"] == "model-cache" and mounts["/dev/shm"] == "shm"
        volumes = {v["name"]: v for v in spec["volumes"]}
        assert volumes["model-cache"]["emptyDir"] == {"sizeLimit": "40Gi"}
        assert not [v for v in spec["volumes"] if "persistentVolumeClaim" in v]
        assert volumes["shm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "8Gi"}
        assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
        assert spec["affinity"] == template["spec"]["affinity"]
        (spread,) = spec["topologySpreadConstraints"]
        assert spread["topologyKey"] == "kubernetes.io/hostname" and spread["maxSkew"] == 1
        assert engine["resources"]["requests"] == {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "1"}
        assert engine["resources"]["limits"] == {"memory": "64Gi", "nvidia.com/gpu": "1"}
        assert pod.metadata.labels["team"] == "assistants"
        # llmscale's own parts are still there, unchanged.
        assert engine["command"] == ["vllm", "serve"]
        assert engine["args"][0] == "meta-llama/Llama-3.1-8B-Instruct"  # vllm serve's positional model
        assert engine["args"][-2:] == ["--enable-chunked-prefill", "--enable-prefix-caching"]
        assert engine["startupProbe"]["httpGet"]["path"] == "/health" and engine["readinessProbe"]
        assert pod.metadata.labels["llmscale.dev/pool"] == "interactive"
    # `llmscale render` printed this Deployment before the operator made it: everything it says is
    # on the cluster's copy (which the API server completes with its defaults).
    from llmscale.commands.render import render
    from llmscale.controller.manifests.children import PriorityClasses

    rendered = render([_sample("chat.yaml")], NS, PriorityClasses("llmscale-interactive", "llmscale-batch"))
    (want,) = [d for d in rendered if d["kind"] == "Deployment"]
    live = cluster.api.sanitize_for_serialization(
        kubernetes.client.AppsV1Api(cluster.api).read_namespaced_deployment("chat", NS))
    assert _within(want["spec"]["template"], live["spec"]["template"])
    assert _within({k: v for k, v in want["metadata"].items() if k != "ownerReferences"}, live["metadata"])


@pytest.mark.usefixtures("operator")
def test_a_template_that_changes_the_engine_is_refused_naming_the_field(cluster: LocalCluster) -> None:
    bad = {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "LLMDeployment",
        "metadata": {"name": "bad-template", "namespace": NS},
        "spec": {
            "model": {"name": "m", "preset": "llama-3.1-8b"},
            "template": {"spec": {"containers": [{"name": "engine", "args": ["--model", "other"]}]}},
        },
    }
    cluster.apply([bad], "argocd-controller")
    objects = kubernetes.client.CustomObjectsApi(cluster.api)

    def ready() -> dict[str, Any] | None:
        st = objects.get_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "bad-template").get("status") or {}
        return next((c for c in st.get("conditions") or () if c["type"] == "Ready"), None)

    cond = wait_for("Ready=False/InvalidSpec", lambda: (c if (c := ready()) and c["reason"] == "InvalidSpec" else None))
    assert cond["status"] == "False"
    assert cond["message"].startswith("spec.template.spec.containers[engine].args:"), cond["message"]
    assert "spec.engine.args" in cond["message"]
    apps = kubernetes.client.AppsV1Api(cluster.api)
    assert "bad-template" not in {d.metadata.name for d in apps.list_namespaced_deployment(NS).items}
