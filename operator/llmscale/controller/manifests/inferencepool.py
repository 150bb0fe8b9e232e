"""The InferencePool of an LLMDeployment's interactive pool (Gateway API Inference Extension, issue 23).

A Kubernetes Service spreads requests at random (kube-proxy), which scatters each conversation's
prefix over every replica's cache. Where the cluster has the Gateway API Inference Extension
(``inferencepools.inference.networking.k8s.io``, v1), an ``InferencePool`` over the same pods
lets its endpoint picker (EPP) route each request by cached prefix and load. This module renders
it (pure: a plain dict for server-side apply): name ``<name>``, the interactive pool's pod
selector (the Service's), the engine's port, and a reference to the endpoint picker's Service
(``spec.routing.endpointPicker``: :func:`default_picker` on port 9002 by default, the extension's chart's;
``FailOpen`` so that requests still flow when the picker is down). The endpoint picker itself is
deployed with the extension's own chart.

The operator applies it with the other children where the API server serves the kind and
``spec.routing.inferencePool`` is ``Auto`` (:mod:`llmscale.controller.ensure`), and never over an
InferencePool of that name it does not own (:func:`owned_by`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from llmscale.api import LLMDeploymentSpec
from llmscale.controller.manifests.names import INTERACTIVE, labels, selector_labels

__all__ = [
    "INFERENCE_POOL_API",
    "INFERENCE_POOL_GROUP",
    "INFERENCE_POOL_KIND",
    "INFERENCE_POOL_PLURAL",
    "INFERENCE_POOL_VERSION",
    "default_picker",
    "inference_pool_manifest",
    "owned_by",
]

INFERENCE_POOL_GROUP = "inference.networking.k8s.io"
INFERENCE_POOL_VERSION = "v1"
INFERENCE_POOL_API = f"{INFERENCE_POOL_GROUP}/{INFERENCE_POOL_VERSION}"
INFERENCE_POOL_KIND = "InferencePool"
INFERENCE_POOL_PLURAL = "inferencepools"


def inference_pool_manifest(
    name: str, namespace: str, spec: LLMDeploymentSpec, owner: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Return InferencePool ``<name>`` over the interactive pool's pods.

    Args:
        name / namespace: the LLMDeployment's.
        spec: its spec (the engine's port and type, ``spec.routing.endpointPicker``).
        owner: the owner reference (the LLMDeployment), or ``None`` for a manifest to apply by hand.
    """
    picker = spec.routing.endpoint_picker
    metadata: dict[str, Any] = {"name": name, "namespace": namespace,
                                "labels": dict(labels(name, spec.engine.type, INTERACTIVE))}
    if owner is not None:
        metadata["ownerReferences"] = [dict(owner)]
    return {
        "apiVersion": INFERENCE_POOL_API,
        "kind": INFERENCE_POOL_KIND,
        "metadata": metadata,
        "spec": {
            "selector": {"matchLabels": dict(selector_labels(name, INTERACTIVE))},
            "targetPorts": [{"number": spec.engine.port}],
            "endpointPickerRef": {"name": picker.service or default_picker(name), "port": {"number": picker.port},
                                  "failureMode": "FailOpen"},
        },
    }


def default_picker(name: str) -> str:
    """The endpoint picker's Service when ``spec.routing.endpointPicker.service`` is unset:
    ``<name>-epp`` with ``name`` cut to 40 characters, as the extension's ``inferencepool`` chart
    names it for a release ``name`` (``{{ .Release.Name | trunc 40 }}-epp``)."""
    return f"{name[:40]}-epp"


def owned_by(obj: Mapping[str, Any] | None, owner_uid: str) -> bool:
    """Whether ``obj`` (an InferencePool as read, or ``None``: absent) may be applied over: absent,
    or owned by the LLMDeployment with ``owner_uid`` (an owner reference with that uid). One made
    by someone else (the extension's chart names its pool after its release) is left alone."""
    if obj is None:
        return True
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return any(ref.get("uid") == owner_uid for ref in refs)
