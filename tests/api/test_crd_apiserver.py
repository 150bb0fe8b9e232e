"""The generated CRD against a real kube-apiserver: accepted, defaulted and enforced as documented.

Runs on the session's local control plane (``cluster`` in tests/conftest.py: the pinned binaries
built by ``e2e/cluster/build.sh``, started by ``e2e/cluster/cluster.py``), through the official
Kubernetes Python client. Skipped locally where those binaries have not been built (a failure in CI).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException
from tests.cluster.helpers import LocalCluster

from llmscale import api
from llmscale.crd import CRD_NAME, crd

pytestmark = pytest.mark.slow

NAMESPACE = "crd-test"


@pytest.fixture(scope="module")
def kube(cluster: LocalCluster) -> Iterator[client.ApiClient]:
    """The session's local control plane (tests/conftest.py), which installed crds/ server-side:
    check the API server took the CRD as structural and Established, and make a namespace."""
    got = client.ApiextensionsV1Api(cluster.api).read_custom_resource_definition(CRD_NAME)
    conditions = {c.type: c.status for c in (got.status.conditions or [])}
    assert conditions.get("NonStructuralSchema") != "True", conditions
    assert conditions.get("Established") == "True", conditions
    assert got.spec.to_dict()["versions"][0]["name"] == crd()["spec"]["versions"][0]["name"]
    core = client.CoreV1Api(cluster.api)
    try:
        core.create_namespace({"metadata": {"name": NAMESPACE}})
    except ApiException as exc:
        if exc.status != 409:
            raise
    yield cluster.api
    # The cluster is shared with tests/cluster, whose operator watches every namespace: leave no
    # LLMDeployment behind for it to scale (it would take GPUs its own tests need).
    core.delete_namespace(NAMESPACE)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            core.read_namespace(NAMESPACE)
        except ApiException as exc:
            if exc.status == 404:
                return
            raise
        time.sleep(0.5)
    pytest.fail(f"namespace {NAMESPACE} was not deleted within 60 s")


def _object(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": api.API_VERSION, "kind": api.KIND, "metadata": {"name": name}, "spec": spec}


def _create(kube: client.ApiClient, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    objects = client.CustomObjectsApi(kube)
    created: dict[str, Any] = objects.create_namespaced_custom_object(
        api.GROUP, api.VERSION, NAMESPACE, api.PLURAL, _object(name, spec)
    )
    return created


MODEL = {"name": "chat", "preset": "llama-3.1-8b"}


@pytest.mark.parametrize(
    "spec",
    [
        pytest.param({"model": MODEL}, id="minimal"),
        pytest.param(
            {
                "model": MODEL,
                "scaling": {"scaleDown": {"periodSeconds": 30}},
                "batch": {"windows": [{"start": "22:00", "end": "06:00", "timezone": "Europe/London"}]},
            },
            id="partial-scaling-and-batch",
        ),
        pytest.param(
            {
                "model": MODEL,
                "batch": {
                    "windows": [{"start": "22:00", "end": "06:00"}],
                    "replicas": 2,
                    "minReplicas": 3,
                    "maxReplicas": 6,
                    "completionWindowSeconds": 3600,
                    "releaseOnIdleCapacity": False,
                },
            },
            id="batch-bounds-max-over-replicas",
        ),
        pytest.param(
            {
                "model": MODEL,
                "replicas": {"min": 0, "max": 4},
                "scaling": {"wake": {"query": 'sum(gateway_pending{namespace="$namespace"}) or vector(0)'}},
            },
            id="scale-to-zero-with-a-wake-query",
        ),
        pytest.param(
            {
                "model": MODEL,
                "mode": "Advisory",
                "template": {
                    "metadata": {"labels": {"team": "a"}},
                    "spec": {
                        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                        # (no ports: the API server fills a port's protocol, TCP, a list-map key's default)
                        "containers": [{"name": "engine", "resources": {"requests": {"cpu": "4", "memory": "32Gi"}}}],
                    },
                },
            },
            id="template-and-mode",
        ),
    ],
)
def test_api_server_fills_the_same_defaults_as_the_models(
    kube: client.ApiClient, spec: dict[str, Any]
) -> None:
    name = f"ok-{len(json.dumps(spec))}"
    created = _create(kube, name, spec)
    # JSON numbers: the API server returns 2.0 as 2, which compares equal in Python.
    assert created["spec"] == api.LLMDeploymentSpec.model_validate(spec).to_wire()


@pytest.mark.parametrize(
    ("spec", "field", "message"),
    [
        pytest.param(
            {"model": MODEL, "replicas": {"min": 5, "max": 2}},
            "spec.replicas",
            "spec.replicas.min must be less than or equal to spec.replicas.max",
            id="min-gt-max",
        ),
        pytest.param(
            {"model": MODEL, "replicas": {"min": 9}},
            "spec.replicas",
            "spec.replicas.min must be less than or equal to spec.replicas.max",
            id="min-gt-default-max",
        ),
        pytest.param(
            {"model": {"name": "c"}}, "spec.model", "set exactly one of preset and architecture", id="neither"
        ),
        pytest.param(
            {
                "model": {
                    **MODEL,
                    "architecture": {
                        "numHiddenLayers": 1,
                        "numAttentionHeads": 1,
                        "numKeyValueHeads": 1,
                        "headDim": 64,
                        "parameters": 10**6,
                    },
                }
            },
            "spec.model",
            "set exactly one of preset and architecture",
            id="both",
        ),
        pytest.param(
            {"model": MODEL, "batch": {"windows": [{"start": "24:00", "end": "06:00"}]}},
            "spec.batch.windows[0].start",
            "should match",
            id="bad-hhmm",
        ),
        pytest.param(
            {"model": MODEL, "batch": {"windows": [{"start": "06:00", "end": "06:00"}]}},
            "spec.batch.windows[0]",
            "start and end of a trough window must differ",
            id="empty-window",
        ),
        pytest.param(
            {
                "model": MODEL,
                "batch": {"windows": [{"start": "22:00", "end": "06:00", "timezone": "Mars/Olympus"}]},
            },
            "spec.batch.windows[0].timezone",
            'Unsupported value: "Mars/Olympus"',
            id="unknown-timezone",
        ),
        pytest.param(
            {"model": MODEL, "replicas": {"max": 4, "schedule": [{"start": "07:00", "end": "10:00", "min": 6}]}},
            "spec.replicas",
            "spec.replicas.schedule[].min must be less than or equal to spec.replicas.max",
            id="calendar-floor-above-max",
        ),
        pytest.param(
            {"model": MODEL, "replicas": {"schedule": [{"start": "07:00", "end": "07:00", "min": 2}]}},
            "spec.replicas.schedule[0]",
            "start and end of a trough window must differ",
            id="empty-calendar-window",
        ),
        pytest.param(
            {"model": MODEL, "batch": {"windows": [{"start": "22:00", "end": "06:00"}], "minReplicas": 2}},
            "spec.batch",
            "spec.batch.minReplicas must be less than or equal to spec.batch.maxReplicas",
            id="batch-min-gt-default-replicas",
        ),
        pytest.param(
            {
                "model": MODEL,
                "batch": {
                    "windows": [{"start": "22:00", "end": "06:00"}],
                    "replicas": 8,
                    "minReplicas": 3,
                    "maxReplicas": 2,
                },
            },
            "spec.batch",
            "spec.batch.minReplicas must be less than or equal to spec.batch.maxReplicas",
            id="batch-min-gt-max-wins-over-replicas",
        ),
        pytest.param(
            {"model": MODEL, "batch": {"windows": [{"start": "22:00", "end": "06:00"}], "completionWindowSeconds": 30}},
            "spec.batch.completionWindowSeconds",
            "should be greater than or equal to 60",
            id="batch-completion-window-too-short",
        ),
        pytest.param({"model": MODEL, "engine": {"type": "tgi"}}, "spec.engine.type", 'Unsupported value: "tgi"',
                     id="unknown-engine"),
        pytest.param({"model": MODEL, "resources": {"gpusPerReplica": 0}}, "spec.resources.gpusPerReplica",
                     "should be greater than or equal to 1", id="zero-gpus"),
        pytest.param(
            {"model": MODEL, "scaling": {"targets": {"kvCacheUtilization": 1.5}}},
            "spec.scaling.targets.kvCacheUtilization",
            "should be less than or equal to 1",
            id="kv-over-1",
        ),
        pytest.param(
            {"model": MODEL, "replicas": {"min": 0, "max": 4}},
            "spec.replicas.min",
            "spec.replicas.min 0 needs spec.scaling.wake.query",
            id="min-zero-without-a-wake-query",
        ),
        pytest.param(
            {"model": MODEL, "replicas": {"min": 0}, "scaling": {"tickSeconds": 5}},
            "spec.replicas.min",
            "spec.replicas.min 0 needs spec.scaling.wake.query",
            id="min-zero-with-other-scaling-but-no-wake",
        ),
        pytest.param(
            {"model": MODEL, "replicas": {"min": 0}, "scaling": {"wake": {"query": ""}}},
            "spec.scaling.wake.query",
            "should be at least 1 chars long",
            id="empty-wake-query",
        ),
        # spec.template is validated as a Pod template (the schema embedded from the API server).
        pytest.param(
            {"model": MODEL, "template": {"spec": {"containers": [{"name": "engine", "imagePullPolicy": "Sometimes"}]}}},
            "spec.template.spec.containers[0].imagePullPolicy", 'Unsupported value: "Sometimes"',
            id="template-bad-enum",
        ),
        pytest.param(
            {"model": MODEL, "template": {"spec": {"volumes": [{"name": "shm", "emptyDir": {"sizeLimit": []}}]}}},
            "spec.template.spec.volumes[0].emptyDir.sizeLimit", "", id="template-bad-quantity",
        ),
        pytest.param(
            {"model": MODEL, "template": {"spec": {"tolerations": []}},
             "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "vllm"}},
            "spec", "with spec.scaleTargetRef it creates none", id="template-with-scale-target",
        ),
        pytest.param(
            {"model": MODEL, "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "vllm"},
             "batch": {"windows": [{"start": "22:00", "end": "06:00"}]}},
            "spec", "spec.batch.scaleTargetRef is required with spec.scaleTargetRef", id="batch-without-target",
        ),
        pytest.param(
            {"model": MODEL, "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "vllm"},
             "headroom": {"warmNodes": True}},
            "spec", "spec.headroom.warmNodes needs pods llmscale creates", id="warm-nodes-with-scale-target",
        ),
        pytest.param(
            {"model": MODEL, "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "deployment", "name": "vllm"}},
            "spec.scaleTargetRef.kind", "should match", id="scale-target-kind-lowercase",
        ),
        pytest.param({"model": MODEL, "mode": "DryRun"}, "spec.mode", 'Unsupported value: "DryRun"', id="unknown-mode"),
    ],
)
def test_api_server_rejects_invalid_specs(kube: client.ApiClient, spec: dict[str, Any], field: str,
                                          message: str) -> None:
    """The refusal names the field in the Status's structured ``details.causes[].field`` (what
    kubectl prints before each message); the message is ours where the rule is ours (CEL)."""
    with pytest.raises(ApiException) as caught:
        _create(kube, "bad", spec)
    assert caught.value.status == 422
    status = json.loads(caught.value.body)
    assert status["reason"] == "Invalid"
    causes = {(c.get("field"), c.get("message", "")) for c in status["details"]["causes"]}
    assert any(f == field and message in m for f, m in causes), causes


def test_status_is_written_through_the_status_subresource_only(kube: client.ApiClient) -> None:
    objects = client.CustomObjectsApi(kube)
    _create(kube, "status", {"model": MODEL})
    status = {
        "replicas": {"desired": 5, "ready": 4},
        "policyState": {"history": [[0, 3]], "free": {"form": 1}},
    }
    objects.patch_namespaced_custom_object_status(
        api.GROUP, api.VERSION, NAMESPACE, api.PLURAL, "status", {"status": status}
    )
    # A write to the main resource cannot change status (the subresource owns it).
    objects.patch_namespaced_custom_object(
        api.GROUP, api.VERSION, NAMESPACE, api.PLURAL, "status", {"status": {"replicas": {"desired": 99}}}
    )
    got = objects.get_namespaced_custom_object(api.GROUP, api.VERSION, NAMESPACE, api.PLURAL, "status")
    assert got["status"]["replicas"] == {"desired": 5, "ready": 4}
    assert got["status"]["policyState"] == {"history": [[0, 3]], "free": {"form": 1}}  # kept, not pruned
    assert api.LLMDeploymentStatus.model_validate(got["status"]).replicas.desired == 5


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("70b-chat", id="starts with a digit: a DNS-1123 name, not a DNS-1035 Service name"),
        pytest.param("a" * 58, id="58 characters: <name>-batch would pass 63"),
        pytest.param("a" * 64, id="64 characters: past any Service name"),
        pytest.param("chat-", id="ends with a dash"),
    ],
)
def test_api_server_rejects_names_its_children_cannot_take(kube: client.ApiClient, name: str) -> None:
    """Issue 11, case 10: ``metadata.name: 70b-chat`` was accepted, and the Service apply failed
    later, outside the InvalidSpec path. The CRD's CEL rule on ``metadata.name`` refuses it at once
    with the field in the Status's causes."""
    with pytest.raises(ApiException) as caught:
        _create(kube, name, {"model": MODEL})
    assert caught.value.status == 422, caught.value.body
    causes = {(c.get("field"), c.get("message", "")) for c in json.loads(caught.value.body)["details"]["causes"]}
    assert any(f == "metadata.name" and "DNS-1035" in m for f, m in causes), causes


def test_api_server_accepts_the_longest_valid_name(kube: client.ApiClient) -> None:
    name = "a" + "-b" * 28  # 57 characters
    assert len(name) == api.NAME_MAX_LENGTH
    created = _create(kube, name, {"model": MODEL})
    assert created["metadata"]["name"] == name
