"""The InferencePool of an LLMDeployment's interactive pool (Gateway API Inference Extension, issue 23).

A Kubernetes Service spreads requests at random (kube-proxy), which scatters each conversation's
prefix over every replica's cache. Where the cluster has the Gateway API Inference Extension
(``inferencepools.inference.networking.k8s.io``, v1), an ``InferencePool`` over the same pods
lets its endpoint picker (EPP) route each request by cached prefix and load. This module renders
it (pure: a plain dict for server-side apply): name ``<name>``, the interactive pool's pod
selector (the Service's), the engine's port, and a reference to the endpoint picker's Service
(``<name>-epp`` on port 9002, the extension's default, ``FailOpen`` so that requests still flow
when the picker is down). The endpoint picker itself is deployed with the extension's own chart.

Not yet applied by the operator: docs/operator.md ("Routing by prefix") says how to apply it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from llmscale.api import LLMDeploymentSpec
from llmscale.controller.names import INTERACTIVE, labels, selector_labels

__all__ = ["EPP_PORT", "INFERENCE_POOL_API", "inference_pool_manifest"]

INFERENCE_POOL_API = "inference.networking.k8s.io/v1"
#: The endpoint picker's gRPC (ext-proc) port in the extension's chart.
EPP_PORT = 9002


def inference_pool_manifest(
    name: str, namespace: str, spec: LLMDeploymentSpec, owner: Mapping[str, Any] | None = None, *,
    epp_service: str | None = None, epp_port: int = EPP_PORT,
) -> dict[str, Any]:
    """Return InferencePool ``<name>`` over the interactive pool's pods.

    Args:
        name / namespace: the LLMDeployment's.
        spec: its spec (the engine's port and type).
        owner: the owner reference (the LLMDeployment), or ``None`` for a manifest to apply by hand.
        epp_service: the endpoint picker's Service (default ``<name>-epp``).
        epp_port: its port.
    """
    metadata: dict[str, Any] = {"name": name, "namespace": namespace,
                                "labels": dict(labels(name, spec.engine.type, INTERACTIVE))}
    if owner is not None:
        metadata["ownerReferences"] = [dict(owner)]
    return {
        "apiVersion": INFERENCE_POOL_API,
        "kind": "InferencePool",
        "metadata": metadata,
        "spec": {
            "selector": {"matchLabels": dict(selector_labels(name, INTERACTIVE))},
            "targetPorts": [{"number": spec.engine.port}],
            "endpointPickerRef": {"name": epp_service or f"{name}-epp", "port": {"number": epp_port},
                                  "failureMode": "FailOpen"},
        },
    }
