"""Kopf indexes of the Deployments and pods llmscale manages, and of the batch Jobs labelled for an
LLMDeployment, so that a tick reads the pools' state and the batch backlog from memory instead of
the API server.

Kopf keeps each index up to date from its watch stream and passes it to every handler as a
keyword argument named after the index id (:data:`DEPLOYMENTS_INDEX`, :data:`PODS_INDEX`,
:data:`JOBS_INDEX`). Keys are ``(namespace, LLMDeployment name, pool)``, or ``(namespace,
LLMDeployment name)`` for Jobs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

import kopf

from llmscale.controller.manifests.names import (
    BATCH,
    INTERACTIVE,
    LABEL_DEPLOYMENT,
    LABEL_POOL,
    Pool,
    deployment_name,
)
from llmscale.controller.state.coldstart import parse_time, pod_start_seconds
from llmscale.controller.state.deletioncost import ANNOTATION as DELETION_COST
from llmscale.controller.state.deletioncost import parse_cost
from llmscale.controller.state.pods import PodPhase, classify_pod, pod_failure
from llmscale.policy.batch.jobs import LABEL_DEPLOYMENT as JOB_LABEL

__all__ = [
    "DEPLOYMENTS_INDEX",
    "HPAS_INDEX",
    "JOBS_INDEX",
    "PODS_INDEX",
    "POD_COSTS_INDEX",
    "ROLLOUTS_INDEX",
    "SCALED_OBJECTS_INDEX",
    "DeploymentKey",
    "IndexedPod",
    "PoolKey",
    "deployment_jobs",
    "deployment_replicas",
    "extended_requests",
    "index_deployments",
    "index_hpas",
    "index_jobs",
    "index_pod_costs",
    "index_pods",
    "index_rollouts",
    "index_scaled_objects",
    "indexed_pods",
    "other_autoscalers",
    "pod_cold_starts",
    "pod_costs",
    "pod_names",
    "pod_phases",
    "progressing_of",
    "rollout_progress",
]

#: Kopf index ids; handlers receive the indexes as keyword arguments of these names.
DEPLOYMENTS_INDEX = "llmscale_deployments"
PODS_INDEX = "llmscale_pods"
POD_COSTS_INDEX = "llmscale_pod_costs"
HPAS_INDEX = "llmscale_hpas"
SCALED_OBJECTS_INDEX = "llmscale_scaled_objects"
JOBS_INDEX = "llmscale_jobs"
ROLLOUTS_INDEX = "llmscale_rollouts"

#: ``(namespace, LLMDeployment name, pool)``.
PoolKey = tuple[str, str, Pool]
#: ``(namespace, Deployment name)``.
DeploymentKey = tuple[str, str]


class IndexedPod(NamedTuple):
    """What the pods index keeps of one live pod: its name (the signals reader reads the series of
    these pods only), its phase (the pool state), its creation and Ready times (the measured cold
    start, :mod:`llmscale.controller.state.coldstart`; seconds since the epoch, ``None`` when unknown),
    its extended-resource requests (GPU-hours, :mod:`llmscale.controller.state.gpuledger`), when it was
    scheduled (the startup budget counts from then, :mod:`llmscale.controller.failedpods`) and, for a
    failed pod, why (:func:`~llmscale.controller.state.pods.pod_failure`); ``guarded``: the cold-start
    annotations it still carries (:mod:`llmscale.controller.disruption`)."""

    name: str
    phase: PodPhase
    created_s: float | None = None
    ready_s: float | None = None
    requests: tuple[tuple[str, float], ...] = ()
    scheduled_s: float | None = None
    failure: str | None = None
    guarded: tuple[str, ...] = ()


#: The annotations a pod carries through its cold start (``llmscale.controller.disruption``, which
#: imports this module; written out here to keep the import one way).
_COLD_START_ANNOTATIONS = {"karpenter.sh/do-not-disrupt": "true", "cluster-autoscaler.kubernetes.io/safe-to-evict": "false"}

#: Resources every pod requests that are never accelerators.
_PLAIN_RESOURCES = frozenset({"cpu", "memory", "ephemeral-storage", "pods"})


def _quantity(value: object) -> float | None:
    """A count of an extended resource (``"4"``, ``4``); ``None`` for anything else (extended
    resources are whole numbers, so no suffixes)."""
    try:
        number = float(str(value))
    except ValueError:
        return None
    return number if number >= 0 else None


def _container_extended(container: Any) -> dict[str, float]:
    """The extended resources one container requests (``limits`` where no request is given)."""
    resources = container.get("resources") or {} if isinstance(container, Mapping) else {}
    wanted = dict(resources.get("limits") or {})
    wanted.update(resources.get("requests") or {})
    out: dict[str, float] = {}
    for name, value in wanted.items():
        count = _quantity(value)
        if name not in _PLAIN_RESOURCES and count is not None:
            out[name] = count
    return out


def extended_requests(spec: Mapping[str, Any]) -> tuple[tuple[str, float], ...]:
    """Return ``((resource, count), ...)`` of the extended resources (``nvidia.com/gpu`` ...) a pod
    holds on its node, by the scheduler's rule for a pod's effective request, sorted by name.

    Per resource: the larger of (a) the sum over the app containers and the sidecars (init
    containers with ``restartPolicy: Always``) and (b) for each other init container, its own
    request plus the sidecars started before it; plus ``spec.overhead``. Each container's figure is
    its ``requests``, or its ``limits`` where no request is given (the API server copies limits of
    extended resources into requests). Source: Kubernetes docs, "Init Containers — Resource
    sharing within containers" and "Sidecar Containers — Resource sharing" (KEP-753).
    """
    resources: set[str] = set()
    sidecars: dict[str, float] = {}
    init_peak: dict[str, float] = {}
    for container in spec.get("initContainers") or ():
        wanted = _container_extended(container)
        resources |= wanted.keys()
        if isinstance(container, Mapping) and container.get("restartPolicy") == "Always":
            for name, count in wanted.items():
                sidecars[name] = sidecars.get(name, 0.0) + count
        else:
            for name in wanted.keys() | sidecars.keys():
                init_peak[name] = max(init_peak.get(name, 0.0), wanted.get(name, 0.0) + sidecars.get(name, 0.0))
    app: dict[str, float] = dict(sidecars)
    for container in spec.get("containers") or ():
        for name, count in _container_extended(container).items():
            resources.add(name)
            app[name] = app.get(name, 0.0) + count
    overhead = _container_extended({"resources": {"requests": spec.get("overhead") or {}}})
    totals = {name: max(app.get(name, 0.0), init_peak.get(name, 0.0)) + overhead.get(name, 0.0)
              for name in resources | overhead.keys()}
    return tuple(sorted(totals.items()))


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


def progressing_of(status: Mapping[str, Any] | None) -> tuple[str, str, str] | None:
    """Return ``(status, reason, message)`` of a Deployment's ``Progressing`` condition, or ``None``."""
    for cond in (status or {}).get("conditions") or ():
        if isinstance(cond, Mapping) and cond.get("type") == "Progressing":
            return str(cond.get("status") or ""), str(cond.get("reason") or ""), str(cond.get("message") or "")
    return None


def index_rollouts(
    *, namespace: str | None, name: str, labels: Mapping[str, str], status: kopf.Status, **_: Any
) -> dict[PoolKey, tuple[str, str, str]]:
    """Kopf index function: ``{(namespace, owner, pool): Progressing (status, reason, message)}`` of
    a pool's Deployment (:mod:`llmscale.controller.rollout`); nothing before the Deployment
    controller wrote the condition."""
    key = _pool_of(namespace, labels)
    progressing = progressing_of(status)
    if key is None or name != deployment_name(key[1], key[2]) or progressing is None:
        return {}
    return {key: progressing}


def rollout_progress(index: Any, key: PoolKey) -> tuple[str, str, str] | None:
    """Return the pool's Deployment's ``Progressing`` condition from the rollouts index, or ``None``."""
    store = index.get(key) if index is not None else None
    return next(iter(store)) if store else None


def index_pods(
    *, namespace: str | None, name: str, labels: Mapping[str, str], meta: kopf.Meta, status: kopf.Status,
    spec: kopf.Spec | None = None, **_: Any,
) -> dict[PoolKey, IndexedPod]:
    """Kopf index function: ``{(namespace, owner, pool): IndexedPod}`` of one pod (its phase from
    :func:`~llmscale.controller.state.pods.classify_pod`); nothing for a terminating or finished pod."""
    key = _pool_of(namespace, labels)
    if key is None:
        return {}
    pod = indexed_pod(name, meta, status, spec)
    return {} if pod is None else {key: pod}


def indexed_pod(
    name: str, meta: Mapping[str, Any], status: Mapping[str, Any], spec: Mapping[str, Any] | None
) -> IndexedPod | None:
    """Return what llmscale keeps of one pod (wire-format ``metadata``, ``status``, ``spec``), or
    ``None`` for a terminating or finished pod. The pods index and the pods of a
    ``spec.scaleTargetRef`` workload (:func:`llmscale.controller.scaletarget.pods_of`) both use it."""
    phase = classify_pod(meta, status)
    if phase is None:
        return None
    created, ready = pod_start_seconds(meta, status)
    scheduled = next((parse_time(c.get("lastTransitionTime")) for c in status.get("conditions") or ()
                      if isinstance(c, Mapping) and c.get("type") == "PodScheduled" and c.get("status") == "True"),
                     None)
    annotations = meta.get("annotations") or {}
    guarded = tuple(k for k, v in _COLD_START_ANNOTATIONS.items() if annotations.get(k) == v)
    return IndexedPod(name, phase, created, ready, extended_requests(spec or {}), scheduled,
                      pod_failure(meta, status) if phase == "failed" else None, guarded)


def index_pod_costs(
    *, namespace: str | None, name: str, labels: Mapping[str, str], meta: kopf.Meta, status: kopf.Status,
    annotations: Mapping[str, str], **_: Any,
) -> dict[PoolKey, tuple[str, int | None]]:
    """Kopf index function: ``{(namespace, owner, pool): (pod name, deletion cost)}`` of one Ready
    pod, the cost as annotated now (``None`` when not annotated; see
    :mod:`llmscale.controller.state.deletioncost`). Pods that are not Ready are removed first by a
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

    The value keeps what :func:`~llmscale.policy.batch.jobs.parse_job` reads (name, creation time,
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
            # Who writes spec.suspend besides llmscale (another manager, issue 21): managers only,
            # each with the spec.suspend field when it owns it.
            "managedFields": [
                {"manager": e.get("manager"), "operation": e.get("operation"),
                 **({"fieldsV1": {"f:spec": {"f:suspend": {}}}}
                    if "f:suspend" in ((e.get("fieldsV1") or {}).get("f:spec") or {}) else {})}
                for e in meta.get("managedFields") or () if isinstance(e, Mapping)],
        },
        "spec": {k: spec.get(k) for k in ("suspend", "completionMode", "completions", "parallelism", "managedBy")
                 if k in spec},
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


def pod_cold_starts(index: Any, key: PoolKey) -> list[tuple[float, float] | None]:
    """Return ``(ready_at, cold start seconds)`` of every live pod of the pool from the pods index
    (``None`` for a pod not Ready or without readable time stamps)."""
    store = index.get(key) if index is not None else None
    return cold_starts_of(store or ())


def cold_starts_of(pods: Iterable[IndexedPod]) -> list[tuple[float, float] | None]:
    """Return ``(ready_at, cold start seconds)`` of each pod (``None`` for a pod not Ready or
    without readable time stamps), seconds since the epoch and seconds."""
    return [_cold_start(pod) for pod in pods]


def _cold_start(pod: IndexedPod) -> tuple[float, float] | None:
    """``(ready_at, seconds from creation to Ready)`` of an indexed pod (the same figure as
    :func:`~llmscale.controller.state.pods.cold_start`); ``None`` while it is not Ready or when its time
    stamps are missing or out of order (a clock skew between the API server and the kubelet)."""
    if pod.created_s is None or pod.ready_s is None or pod.ready_s < pod.created_s:
        return None
    return pod.ready_s, pod.ready_s - pod.created_s


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


def indexed_pods(index: Any, key: PoolKey) -> list[IndexedPod]:
    """Return every live pod of the pool from the pods index."""
    store = index.get(key) if index is not None else None
    return list(store) if store else []


def pod_names(index: Any, key: PoolKey) -> frozenset[str]:
    """Return the name of every live pod of the pool from the pods index (the live index: called
    at read time, it sees the pods of that moment)."""
    store = index.get(key) if index is not None else None
    return frozenset(pod.name for pod in store) if store else frozenset()
