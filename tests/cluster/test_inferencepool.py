"""The InferencePool llmscale renders (llmscale.controller.inferencepool), on a real kube-apiserver
with the Gateway API Inference Extension's own CRD (v1.6.0, tests/cluster/gie-inferencepools-crd.yaml).

The API server accepts it under the CRD's schema and CEL rules and stores every field; the pool
selects exactly the pods the interactive Service selects and targets the engine's port; without the
endpoint picker's port the CRD refuses it (the neighbour: the schema is really checked).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from tests.cluster.helpers import LocalCluster, wait_for

from llmscale.api import LLMDeploymentSpec
from llmscale.controller.children import service_manifest
from llmscale.controller.inferencepool import inference_pool_manifest

pytestmark = pytest.mark.slow

CRD = Path(__file__).with_name("gie-inferencepools-crd.yaml")
NS = "routing"
SPEC = LLMDeploymentSpec.model_validate({"model": {"name": "m", "preset": "llama-3.1-8b"}, "engine": {"port": 8080}})


def test_the_rendered_pool_selects_the_services_pods_and_port() -> None:
    pool = inference_pool_manifest("chat", NS, SPEC)
    service = service_manifest("chat", NS, SPEC, {"apiVersion": "llmscale.dev/v1alpha1", "kind": "LLMDeployment",
                                                  "name": "chat", "uid": "u"})
    assert pool["spec"]["selector"]["matchLabels"] == service["spec"]["selector"]
    assert pool["spec"]["targetPorts"] == [{"number": 8080}]
    assert pool["spec"]["endpointPickerRef"] == {"name": "chat-epp", "port": {"number": 9002}, "failureMode": "FailOpen"}
    assert "ownerReferences" not in pool["metadata"]


def test_the_api_server_accepts_the_rendered_pool(cluster: LocalCluster) -> None:
    cluster.kubectl("apply", "--server-side", f"-f={CRD}")
    wait_for("the InferencePool CRD Established", lambda: cluster.kubectl(
        "wait", "--for=condition=Established", "--timeout=30s", "crd/inferencepools.inference.networking.k8s.io",
        check=False).returncode == 0, 60)
    cluster.create_namespace(NS)
    pool = inference_pool_manifest("chat", NS, SPEC, epp_service="shared-epp")
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
