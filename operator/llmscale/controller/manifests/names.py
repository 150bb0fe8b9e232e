"""Names, labels and owner references of the objects llmscale creates (DESIGN.md, "Names").

Children of an LLMDeployment ``<name>``: Deployment ``<name>`` (interactive pool), Deployment and
Service ``<name>-batch`` (the batch pool, only when ``spec.batch`` is set), Service ``<name>`` (the
interactive pool) and PodDisruptionBudget ``<name>``; all labelled and owned by the LLMDeployment.
Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from llmscale.api import API_VERSION, KIND
from llmscale.pools import BATCH, INTERACTIVE, POOLS, Pool

__all__ = [
    "ANNOTATION_COLD_START",
    "BATCH",
    "INTERACTIVE",
    "LABEL_DEPLOYMENT",
    "LABEL_INSTANCE",
    "LABEL_MANAGED_BY",
    "LABEL_NAME",
    "LABEL_POOL",
    "MANAGER",
    "POOLS",
    "Pool",
    "batch_deployment_name",
    "batch_service_name",
    "deployment_name",
    "labels",
    "owner_reference",
    "selector_labels",
]

MANAGER = "llmscale"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_NAME = "app.kubernetes.io/name"
LABEL_INSTANCE = "app.kubernetes.io/instance"
LABEL_DEPLOYMENT = "llmscale.dev/deployment"
LABEL_POOL = "llmscale.dev/pool"

#: Read by the local cluster's KWOK stage (llmscale/localcluster/kwok-stages.yaml) to delay Ready.
ANNOTATION_COLD_START = "llmscale.dev/cold-start-seconds"


def batch_deployment_name(name: str) -> str:
    """Return the batch pool's Deployment name, ``<name>-batch`` (DESIGN.md)."""
    return f"{name}-batch"


def batch_service_name(name: str) -> str:
    """Return the batch pool's Service name, ``<name>-batch`` (DESIGN.md), where batch Jobs send
    their requests."""
    return f"{name}-batch"


def deployment_name(name: str, pool: Pool) -> str:
    """Return the Deployment name of one pool: ``<name>`` or ``<name>-batch``."""
    return name if pool == INTERACTIVE else batch_deployment_name(name)


def selector_labels(name: str, pool: Pool) -> dict[str, str]:
    """Return the labels that select one pool's pods.

    Kept to the two labels that never change for the object's life, because a Deployment's
    ``spec.selector`` is immutable (changing the engine type must not break the apply).
    """
    return {LABEL_DEPLOYMENT: name, LABEL_POOL: pool}


def labels(name: str, engine: str, pool: Pool) -> dict[str, str]:
    """Return the five labels every object llmscale creates carries (DESIGN.md).

    Args:
        name: the LLMDeployment's name.
        engine: ``spec.engine.type`` (``vllm``, ``sglang`` or ``mock``).
        pool: ``interactive`` or ``batch``.
    """
    return {
        LABEL_MANAGED_BY: MANAGER,
        LABEL_NAME: engine,
        LABEL_INSTANCE: name,
        **selector_labels(name, pool),
    }


def owner_reference(body: Mapping[str, Any]) -> dict[str, Any]:
    """Return the ``ownerReferences`` entry that makes a child belong to the LLMDeployment.

    ``controller: true`` marks llmscale as the one managing controller; ``blockOwnerDeletion``
    makes foreground deletion of the LLMDeployment wait for its children.

    Raises:
        ValueError: the body has no ``metadata.name`` or ``metadata.uid``.
    """
    meta = body.get("metadata", {})
    name, uid = meta.get("name"), meta.get("uid")
    if not name or not uid:
        raise ValueError("an owner reference needs metadata.name and metadata.uid")
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "name": name,
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }
