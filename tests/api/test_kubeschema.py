"""The Pod schema embedded at ``spec.template``: what the pinned API server serves, and in a form
a CRD can carry (checked against the API server itself in tests/api/test_crd_apiserver.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from tests.cluster.helpers import LocalCluster

from llmscale import kubeschema
from llmscale.crd import crd, crd_yaml

REPO = Path(__file__).resolve().parents[2]


def test_the_stored_schema_is_of_the_pinned_api_server() -> None:
    build = (REPO / "operator/llmscale/localcluster/build.sh").read_text()
    (pinned,) = re.findall(r"^K8S_VERSION=(v[0-9.]+)", build, re.MULTILINE)
    assert pinned == kubeschema.KUBERNETES_VERSION, "run tools/update-pod-schema.sh after moving the pin"
    assert json.loads((REPO / "operator/llmscale/kubeschema/podspec.json").read_text())["kubernetesVersion"] == pinned


@pytest.mark.slow
def test_the_stored_schema_is_what_the_api_server_serves(cluster: LocalCluster) -> None:
    served = json.loads(cluster.kubectl("get", "--raw", "/openapi/v3/api/v1").stdout)
    stored = json.loads((REPO / "operator/llmscale/kubeschema/podspec.json").read_text())
    assert kubeschema.extract(served) == stored, "run tools/update-pod-schema.sh"


def test_merge_metadata_comes_from_the_schema() -> None:
    containers = kubeschema.field_schema(("spec", "containers"))
    assert containers is not None
    assert (containers["x-kubernetes-patch-merge-key"], containers["x-kubernetes-patch-strategy"]) == ("name", "merge")
    mounts = kubeschema.field_schema(("spec", "containers", "[]", "volumeMounts"))
    assert mounts is not None and mounts["x-kubernetes-patch-merge-key"] == "mountPath"
    volumes = kubeschema.field_schema(("spec", "volumes"))
    assert volumes is not None and volumes["x-kubernetes-patch-strategy"] == "merge,retainKeys"
    assert kubeschema.field_schema(("spec", "tolerations", "[]", "key")) == {"type": "string"}
    assert kubeschema.field_schema(("spec", "noSuchField")) is None
    assert set(kubeschema.field_schema(("metadata",)) or {}) >= {"type", "properties"}


def _walk(node: dict[str, Any], path: str = "template") -> list[tuple[str, dict[str, Any]]]:
    out = [(path, node)]
    for name, sub in node.get("properties", {}).items():
        out.extend(_walk(sub, f"{path}.{name}"))
    if "items" in node:
        out.extend(_walk(node["items"], f"{path}[]"))
    if isinstance(node.get("additionalProperties"), dict):
        out.extend(_walk(node["additionalProperties"], f"{path}.*"))
    return out


def test_the_structural_template_is_what_a_crd_may_carry() -> None:
    schema = kubeschema.pod_template_structural()
    assert set(schema["properties"]) == {"metadata", "spec"}
    assert set(schema["properties"]["metadata"]["properties"]) == {"labels", "annotations"}
    assert "containers" not in schema["properties"]["spec"].get("required", ()), "a template may only add"
    for path, node in _walk(schema):
        assert not {k for k in node if k.startswith("x-kubernetes-patch")}, path
        assert "$ref" not in node and "allOf" not in node and "oneOf" not in node, path
        assert "description" not in node, path
        if node.get("x-kubernetes-list-type") == "map":
            item = node["items"]
            for key in node["x-kubernetes-list-map-keys"]:
                assert key in item.get("required", ()) or "default" in item["properties"][key], (path, key)
    cpu = schema["properties"]["spec"]["properties"]["containers"]["items"]["properties"]["resources"]
    assert cpu["properties"]["requests"]["additionalProperties"]["x-kubernetes-int-or-string"] is True


def test_the_crd_stays_within_the_size_limits() -> None:
    """kubectl's client-side apply keeps the object in an annotation (256 KiB, compact JSON); etcd
    takes 1.5 MiB; Helm keeps the chart, crds/ included, in a Secret of at most 1 MiB (compressed)."""
    assert len(json.dumps(crd(), separators=(",", ":"))) < 256 * 1024
    assert len(crd_yaml().encode()) < 1024 * 1024
