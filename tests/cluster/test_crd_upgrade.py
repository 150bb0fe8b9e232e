"""The documented CRD upgrade path on a real kube-apiserver (docs/deploy.md, "Upgrade").

Helm installs a chart's ``crds/`` once and never upgrades them, so a new llmscale's CRD is applied
by hand before ``helm upgrade``: ``kubectl apply --server-side --force-conflicts -f
charts/llmscale/crds/``. Here the old CRD (llmscale 0.1.0's, as Helm left it: an update by the
``helm`` field manager) holds LLMDeployments written for it; the new CRD is applied the documented
way; the old objects read back complete — the new fields defaulted (``mode: Active``) — and pass
the new models, and objects using the new fields are accepted. The session's CRD is restored after.
"""

from __future__ import annotations

import time
from typing import Any

import kubernetes.client
import pytest
import yaml
from kubernetes.client.exceptions import ApiException
from tests.cluster.helpers import CRDS, ROOT, LocalCluster, wait_for

from llmscale.api import LLMDeploymentSpec

pytestmark = pytest.mark.slow

GROUP, VERSION, PLURAL = "llmscale.dev", "v1alpha1", "llmdeployments"
OLD = ROOT / "tests" / "cluster" / "data" / "llmdeployments-0.1.0.yaml"
NEW = ROOT / "charts" / "llmscale" / "crds" / "llmdeployments.llmscale.dev.yaml"
NS = "crd-upgrade"
OLD_SPEC = {
    "model": {"name": "chat", "preset": "llama-3.1-8b"},
    "replicas": {"min": 2, "max": 6},
    "batch": {"windows": [{"start": "22:00", "end": "06:00", "timezone": "Europe/London"}]},
}


def schema_properties(cluster: LocalCluster) -> set[str]:
    crd = kubernetes.client.ApiextensionsV1Api(cluster.api).read_custom_resource_definition("llmdeployments.llmscale.dev")
    return set(crd.spec.versions[0].schema.open_apiv3_schema.properties["spec"].properties)


def established(cluster: LocalCluster) -> bool:
    crd = kubernetes.client.ApiextensionsV1Api(cluster.api).read_custom_resource_definition("llmdeployments.llmscale.dev")
    return any(c.type == "Established" and c.status == "True" for c in crd.status.conditions or ())


def create(cluster: LocalCluster, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "LLMDeployment", "metadata": {"name": name}, "spec": spec}
    got: dict[str, Any] = kubernetes.client.CustomObjectsApi(cluster.api).create_namespaced_custom_object(
        GROUP, VERSION, NS, PLURAL, body, field_validation="Strict")
    return got


def test_the_documented_crd_upgrade_carries_the_old_objects_over(cluster: LocalCluster) -> None:
    try:
        cluster.kubectl("replace", "--field-manager=helm", "-f", str(OLD))
        wait_for("the old schema served", lambda: "mode" not in schema_properties(cluster) and established(cluster))
        cluster.create_namespace(NS)
        # The schema takes a moment to reach every handler: retry the first write.
        wait_for("an LLMDeployment created under the old CRD", lambda: create(cluster, "old", OLD_SPEC))
        with pytest.raises(ApiException) as refused:
            create(cluster, "too-new", {**OLD_SPEC, "mode": "Advisory"})
        assert refused.value.status in (400, 422) and "mode" in str(refused.value.body)

        # The documented upgrade: the new CRD, server-side, taking the fields Helm set.
        cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(NEW))
        wait_for("the new schema served", lambda: {"mode", "template", "scaleTargetRef"} <= schema_properties(cluster)
                 and established(cluster))
        time.sleep(1)
        objects = kubernetes.client.CustomObjectsApi(cluster.api)
        old = wait_for("the old object read with the new defaults", lambda: (
            o if (o := objects.get_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "old"))["spec"].get("mode")
            else None))
        # The API server defaults absent fields only: a default the old CRD wrote into the object
        # stays as written. 0.1.0 defaulted headroom.replicas to 1 (0 now) and the engine image to
        # vLLM v0.11.0 (v0.32.0 now): both stay on the old object (docs/deploy.md).
        persisted = {**OLD_SPEC, "headroom": {"replicas": 1}, "engine": {"image": "vllm/vllm-openai:v0.11.0"}}
        assert old["spec"] == LLMDeploymentSpec.model_validate(persisted).to_wire()
        assert old["spec"]["mode"] == "Active"
        new = create(cluster, "new", {**OLD_SPEC, "batch": None, "mode": "Paused",
                                      "template": {"spec": {"nodeSelector": {"gpu": "h100"}}}})
        assert new["spec"]["mode"] == "Paused" and new["spec"]["template"]["spec"]["nodeSelector"] == {"gpu": "h100"}
        managers = {m.manager for m in kubernetes.client.ApiextensionsV1Api(cluster.api)
                    .read_custom_resource_definition("llmdeployments.llmscale.dev").metadata.managed_fields}
        assert "kubectl" in managers
    finally:
        cluster.kubectl("apply", "--server-side", "--force-conflicts", *[f"-f={p}" for p in CRDS])
        try:
            kubernetes.client.CoreV1Api(cluster.api).delete_namespace(NS)
        except ApiException as exc:
            if exc.status != 404:
                raise
    assert yaml.safe_load(NEW.read_text())["metadata"]["name"] == "llmdeployments.llmscale.dev"
