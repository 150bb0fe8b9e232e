"""Kopf indexes of the Deployments and pods llmscale manages, and of the batch Jobs labelled for an
LLMDeployment, so that a tick reads the pools' state and the batch backlog from memory instead of
the API server.

Kopf keeps each index up to date from its watch stream and passes it to every handler as a
keyword argument named after the index id (:data:`DEPLOYMENTS_INDEX`, :data:`PODS_INDEX`,
:data:`JOBS_INDEX`). Keys are ``(namespace, LLMDeployment name, pool)``, or ``(namespace,
LLMDeployment name)`` for Jobs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

import kopf

from llmscale.controller.deletioncost import ANNOTATION as DELETION_COST
from llmscale.controller.deletioncost import parse_cost
from llmscale.controller.names import BATCH, INTERACTIVE, LABEL_DEPLOYMENT, LABEL_POOL, Pool, deployment_name
from llmscale.controller.pods import PodPhase, classify_pod
from llmscale.policy.batch_jobs import LABEL_DEPLOYMENT as JOB_LABEL

__all__ = [
    "DEPLOYMENTS_INDEX",
    "HPAS_INDEX",
    "JOBS_INDEX",
    "PODS_INDEX",
    "POD_COSTS_INDEX",
    "SCALED_OBJECTS_INDEX",
    "DeploymentKey",
    "IndexedPod",
    "PoolKey",
    "deployment_jobs",
    "deployment_replicas",
    "index_deployments",
    "index_hpas",
    "index_jobs",
    "index_pod_costs",
    "index_pods",
    "index_scaled_objects",
    "other_autoscalers",
    "pod_costs",
    "pod_names",
    "pod_phases",
]

#: Kopf index ids; handlers receive the indexes as keyword arguments of these names.
DEPLOYMENTS_INDEX = "llmscale_deployments"
PODS_INDEX = "llmscale_pods"
POD_COSTS_INDEX = "llmscale_pod_costs"
HPAS_INDEX = "llmscale_hpas"
SCALED_OBJECTS_INDEX = "llmscale_scaled_objects"
JOBS_INDEX = "llmscale_jobs"

#: ``(namespace, LLMDeployment name, pool)``.
PoolKey = tuple[str, str, Pool]
#: ``(namespace, Deployment name)``.
DeploymentKey = tuple[str, str]


class IndexedPod(NamedTuple):
    """What the pods index keeps of one live pod: its name (the signals reader reads the series of
    these pods only) and its phase (the pool state)."""

    name: str
    phase: PodPhase


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
    *, namespace: str | None, name: str, labels: Mapping[str, str], meta: kopf.Meta, status: kopf.Status, **_: Any
) -> dict[PoolKey, IndexedPod]:
    """Kopf index function: ``{(namespace, owner, pool): (name, phase)}`` of one pod (see
    :func:`~llmscale.controller.pods.classify_pod`); nothing for a terminating or finished pod."""
    key = _pool_of(namespace, labels)
    if key is None:
        return {}
    phase = classify_pod(meta, status)
    return {} if phase is None else {key: IndexedPod(name, phase)}


def index_pod_costs(
    *, namespace: str | None, name: str, labels: Mapping[str, str], meta: kopf.Meta, status: kopf.Status,
    annotations: Mapping[str, str], **_: Any,
) -> dict[PoolKey, tuple[str, int | None]]:
    """Kopf index function: ``{(namespace, owner, pool): (pod name, deletion cost)}`` of one Ready
    pod, the cost as annotated now (``None`` when not annotated; see
    :mod:`llmscale.controller.deletioncost`). Pods that are not Ready are removed first by a
    ReplicaSet whatever their cost, so they need none."""
    key = _pool_of(namespace, labels)
    if key is None or classify_pod(meta, status) != "ready":
        return {}
    return {key: (name, parse_cost(annotations.get(DELETION_COST)))}


def index_jobs(
    *, namespace: str | None, name: str, uid: str | None, labels: Mapping[str, str], meta: kopf.Meta,
    annotations: Mapping[str, str], spec: kopf.Spec, status: kopf.Status, **_: Any,
) -> dict[DeploymentKey, dict[str, Any]]:
    """Kopf index function of batch Jobs: ``{(namespace, LLMDeployment name): job}`` for a Job
    labelled ``llmscale.dev/deployment`` (docs/batch.md, the Job contract).

    The value keeps what :func:`~llmscale.policy.batch_jobs.parse_job` reads (name, creation time,
    labels, annotations, ``spec.suspend``/``completionMode``/``completions``, ``status.active``/
    ``terminating``/``succeeded``/``conditions``) and what an Event on the Job needs (uid); not the pod template,
    which can be large and is never read.
    """
    owner = labels.get(JOB_LABEL)
    if not owner or not namespace:
        return {}
    return {(namespace, owner): {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid,
            "creationTimestamp": meta.get("creationTimestamp"),
            "labels": dict(labels),
            "annotations": dict(annotations),
        },
        "spec": {k: spec.get(k) for k in ("suspend", "completionMode", "completions", "parallelism") if k in spec},
        "status": {k: status.get(k) for k in ("active", "terminating", "succeeded", "failed", "conditions")
                   if k in status},
    }}


def deployment_jobs(index: Any, key: DeploymentKey) -> list[dict[str, Any]]:
    """Return the batch Jobs labelled for the LLMDeployment ``key`` from the Jobs index, sorted by
    name (an empty list when there are none)."""
    store = index.get(key) if index is not None else None
    return sorted((dict(job) for job in store or ()), key=lambda j: str(j["metadata"]["name"]))


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
    return [pod.phase for pod in store] if store else []


def pod_costs(index: Any, key: PoolKey) -> dict[str, int | None]:
    """Return ``{pod name: deletion cost as annotated}`` of the pool's Ready pods from the
    pod-costs index."""
    store = index.get(key) if index is not None else None
    return dict(store) if store else {}


def _deployment_target(namespace: str | None, ref: Any) -> DeploymentKey | None:
    """The Deployment a ``scaleTargetRef`` names, or ``None`` for any other kind of target."""
    if not namespace or not isinstance(ref, Mapping) or not ref.get("name"):
        return None
    kind = ref.get("kind") or "Deployment"
    group = str(ref.get("apiVersion") or "apps/v1").split("/")[0]
    if kind != "Deployment" or group != "apps":
        return None
    return (namespace, str(ref["name"]))


def index_hpas(*, namespace: str | None, name: str, spec: kopf.Spec, **_: Any) -> dict[DeploymentKey, str]:
    """Kopf index function of HorizontalPodAutoscalers (``autoscaling/v2``):
    ``{(namespace, target Deployment): "HorizontalPodAutoscaler <namespace>/<name>"}``."""
    target = _deployment_target(namespace, spec.get("scaleTargetRef"))
    return {} if target is None else {target: f"HorizontalPodAutoscaler {namespace}/{name}"}


def index_scaled_objects(*, namespace: str | None, name: str, spec: kopf.Spec, **_: Any) -> dict[DeploymentKey, str]:
    """Kopf index function of KEDA ScaledObjects (``keda.sh/v1alpha1``; ``scaleTargetRef`` defaults
    to an ``apps/v1`` Deployment): ``{(namespace, target Deployment): "ScaledObject <ns>/<name>"}``."""
    target = _deployment_target(namespace, spec.get("scaleTargetRef"))
    return {} if target is None else {target: f"ScaledObject {namespace}/{name}"}


def other_autoscalers(indexes: tuple[Any, ...], key: DeploymentKey) -> tuple[str, ...]:
    """Return the other autoscalers targeting the Deployment ``key`` in any of ``indexes`` (the
    HPA and ScaledObject indexes), sorted (empty: none)."""
    found: set[str] = set()
    for index in indexes:
        store = index.get(key) if index is not None else None
        found.update(store or ())
    return tuple(sorted(found))


def pod_names(index: Any, key: PoolKey) -> frozenset[str]:
    """Return the name of every live pod of the pool from the pods index (the live index: called
    at read time, it sees the pods of that moment)."""
    store = index.get(key) if index is not None else None
    return frozenset(pod.name for pod in store) if store else frozenset()
