"""Kopf indexes of the Deployments and pods llmscale manages, so that a tick reads the pools'
state from memory instead of the API server.

Kopf keeps each index up to date from its watch stream and passes it to every handler as a
keyword argument named after the index id (:data:`DEPLOYMENTS_INDEX`, :data:`PODS_INDEX`). Keys
are ``(namespace, LLMDeployment name, pool)``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import kopf

from llmscale.controller.names import BATCH, INTERACTIVE, LABEL_DEPLOYMENT, LABEL_POOL, Pool, deployment_name
from llmscale.controller.pods import PodPhase, classify_pod

__all__ = [
    "DEPLOYMENTS_INDEX",
    "PODS_INDEX",
    "PoolKey",
    "deployment_replicas",
    "index_deployments",
    "index_pods",
    "pod_phases",
]

#: Kopf index ids; handlers receive the indexes as keyword arguments of these names.
DEPLOYMENTS_INDEX = "llmscale_deployments"
PODS_INDEX = "llmscale_pods"

#: ``(namespace, LLMDeployment name, pool)``.
PoolKey = tuple[str, str, Pool]


def _pool_of(namespace: str | None, labels: Mapping[str, str]) -> PoolKey | None:
    owner, pool = labels.get(LABEL_DEPLOYMENT), labels.get(LABEL_POOL)
    if not owner or not namespace:
        return None
    if pool == INTERACTIVE:
        return (namespace, owner, INTERACTIVE)
    if pool == BATCH:
        return (namespace, owner, BATCH)
    return None


def index_deployments(
    *, namespace: str | None, name: str, labels: Mapping[str, str], spec: kopf.Spec, **_: Any
) -> dict[PoolKey, int]:
    """Kopf index function: ``{(namespace, owner, pool): spec.replicas}`` of one pool's Deployment.

    Only the Deployment named after its pool (``<owner>`` or ``<owner>-batch``) counts; an omitted
    ``spec.replicas`` reads as 1, the API server's default.
    """
    key = _pool_of(namespace, labels)
    if key is None or name != deployment_name(key[1], key[2]):
        return {}
    replicas = spec.get("replicas")
    return {key: int(replicas) if replicas is not None else 1}


def index_pods(
    *, namespace: str | None, labels: Mapping[str, str], meta: kopf.Meta, status: kopf.Status, **_: Any
) -> dict[PoolKey, PodPhase]:
    """Kopf index function: ``{(namespace, owner, pool): phase}`` of one pod (see
    :func:`~llmscale.controller.pods.classify_pod`); nothing for a terminating or finished pod."""
    key = _pool_of(namespace, labels)
    if key is None:
        return {}
    phase = classify_pod(meta, status)
    return {} if phase is None else {key: phase}


def deployment_replicas(index: Any, key: PoolKey) -> int | None:
    """Return ``spec.replicas`` of the pool's Deployment from the Deployments index, or ``None``
    when the Deployment is not (yet) in it."""
    store = index.get(key) if index is not None else None
    if not store:
        return None
    return int(next(iter(store)))


def pod_phases(index: Any, key: PoolKey) -> list[PodPhase]:
    """Return the phase of every live pod of the pool from the pods index."""
    store = index.get(key) if index is not None else None
    return list(store) if store else []
