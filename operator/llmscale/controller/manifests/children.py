"""The child objects of an LLMDeployment, as manifests for server-side apply: the Deployment of
each pool, the Service of each pool and the PodDisruptionBudget. Pure: plain dicts in the wire format; the
writer (:mod:`llmscale.controller.writer`) sends them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from llmscale.api import LLMDeploymentSpec
from llmscale.controller.manifests.merge import merge_template
from llmscale.controller.manifests.names import (
    BATCH,
    INTERACTIVE,
    Pool,
    batch_service_name,
    deployment_name,
    labels,
    owner_reference,
    selector_labels,
)
from llmscale.controller.manifests.podtemplate import pod_template, progress_deadline_seconds

__all__ = [
    "PriorityClasses",
    "batch_service_manifest",
    "child_manifests",
    "deployment_manifest",
    "initial_replicas",
    "pdb_manifest",
    "service_manifest",
]


@dataclass(frozen=True, slots=True)
class PriorityClasses:
    """The ``priorityClassName`` of each pool's pods (``None``: none set, the cluster's default).

    Attributes:
        interactive: the interactive pool's class, e.g. ``llmscale-interactive`` (value 1000 in
            the chart and the kustomize base).
        batch: the batch pool's class, e.g. ``llmscale-batch`` (value 100): below the interactive
            one, so the scheduler preempts batch pods for interactive ones.
    """

    interactive: str | None = None
    batch: str | None = None

    def of(self, pool: Pool) -> str | None:
        """Return the class of ``pool``."""
        return self.interactive if pool == INTERACTIVE else self.batch


def _metadata(name: str, namespace: str, obj_labels: Mapping[str, str], owner: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": namespace,
        "labels": dict(obj_labels),
        "ownerReferences": [dict(owner)],
    }


def initial_replicas(spec: LLMDeploymentSpec) -> int:
    """Return the interactive replicas of a new Deployment, before any signal has been read.

    One replica of demand (nothing is known yet, and zero would leave the first request waiting
    a whole cold start) plus ``headroom.replicas``, at least ``replicas.min``, at most
    ``replicas.max``: 2 with the defaults (min 1, headroom 1, max 8).
    """
    return min(spec.replicas.max, max(spec.replicas.min, 1 + spec.headroom.replicas))


def deployment_manifest(
    name: str,
    namespace: str,
    spec: LLMDeploymentSpec,
    pool: Pool,
    replicas: int,
    owner: Mapping[str, Any],
    priority_classes: PriorityClasses = PriorityClasses(),
    fit_rollout: bool = False,
) -> dict[str, Any]:
    """Return one pool's Deployment for server-side apply.

    ``replicas`` is always included: under server-side apply, leaving out a field this manager
    owned would release it and the API server would reset it to the default of 1. The caller
    passes the replicas the operator last set (or the policy's new value).

    The rollout surges one pod and never removes a ready one first (``maxUnavailable: 0``), so
    a template change keeps serving capacity at the price of one spare GPU per rollout step; with
    ``fit_rollout`` (no GPU free for the surge pod, and the warm headroom covers demand:
    :func:`~llmscale.controller.rollout.rollout_fits`) it replaces one Ready pod at a time instead
    (``maxSurge: 0, maxUnavailable: 1``);
    ``progressDeadlineSeconds`` follows the cold start
    (:func:`~llmscale.controller.manifests.podtemplate.progress_deadline_seconds`), so a slow cold start is
    not reported as a failed rollout. The pods get the pool's class of ``priority_classes``. The
    pod template is the generated one with ``spec.template`` merged over it
    (:func:`~llmscale.controller.manifests.merge.merge_template`).

    Raises:
        UnsupportedSpecError: see :func:`engine_command`.
        TemplateConflict: ``spec.template`` changes a part llmscale owns.
        ValueError: ``replicas`` is negative.
    """
    if replicas < 0:
        raise ValueError(f"replicas must be >= 0, got {replicas}")
    deploy_name = deployment_name(name, pool)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _metadata(deploy_name, namespace, labels(name, spec.engine.type, pool), owner),
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": selector_labels(name, pool)},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": (
                {"maxSurge": 0, "maxUnavailable": 1} if fit_rollout else {"maxSurge": 1, "maxUnavailable": 0})},
            "progressDeadlineSeconds": progress_deadline_seconds(spec),
            "template": merge_template(pod_template(name, spec, pool, priority_classes.of(pool)), spec.template,
                                       spec.resources.gpu_resource_name),
        },
    }


def service_manifest(
    name: str, namespace: str, spec: LLMDeploymentSpec, owner: Mapping[str, Any]
) -> dict[str, Any]:
    """Return Service ``<name>``: port ``spec.engine.port`` to the interactive pool's ``http`` port."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(name, namespace, labels(name, spec.engine.type, INTERACTIVE), owner),
        "spec": {
            "selector": selector_labels(name, INTERACTIVE),
            "ports": [{"name": "http", "port": spec.engine.port, "targetPort": "http", "protocol": "TCP"}],
        },
    }


def batch_service_manifest(
    name: str, namespace: str, spec: LLMDeploymentSpec, owner: Mapping[str, Any]
) -> dict[str, Any]:
    """Return Service ``<name>-batch``: port ``spec.engine.port`` to the batch pool's ``http`` port.

    Batch Jobs send their requests here (``llmscale batch run --url http://<name>-batch:<port>``),
    so batch work reaches only the batch pool, never the interactive replicas; with no batch
    replica Ready it has no endpoints and the client retries with backoff.
    """
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(batch_service_name(name), namespace, labels(name, spec.engine.type, BATCH), owner),
        "spec": {
            "selector": selector_labels(name, BATCH),
            "ports": [{"name": "http", "port": spec.engine.port, "targetPort": "http", "protocol": "TCP"}],
        },
    }


def pdb_manifest(name: str, namespace: str, spec: LLMDeploymentSpec, owner: Mapping[str, Any]) -> dict[str, Any]:
    """Return PodDisruptionBudget ``<name>`` for the interactive pool: ``maxUnavailable: 1``,
    ``unhealthyPodEvictionPolicy: AlwaysAllow``.

    A node drain then evicts one serving engine at a time, so the warm headroom absorbs it (and
    each evicted pod drains its requests within its grace period). ``maxUnavailable`` (not
    ``minAvailable``) keeps working as the pool scales. ``AlwaysAllow`` lets pods that are not
    Ready (crash-looping, stuck in their cold start) be evicted whatever the budget: they serve
    nothing, and with the default policy (``IfHealthyBudget``) 2 crash-looping replicas of 3 would
    use up the budget and block every node drain (Kubernetes docs, "Unhealthy Pod Eviction
    Policy"; the field is GA since 1.31).
    """
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": _metadata(name, namespace, labels(name, spec.engine.type, INTERACTIVE), owner),
        "spec": {
            "maxUnavailable": 1,
            "unhealthyPodEvictionPolicy": "AlwaysAllow",
            "selector": {"matchLabels": selector_labels(name, INTERACTIVE)},
        },
    }


def child_manifests(
    body: Mapping[str, Any],
    spec: LLMDeploymentSpec,
    interactive_replicas: int,
    batch_replicas: int,
    priority_classes: PriorityClasses = PriorityClasses(),
    fit_rollout: bool = False,
) -> list[dict[str, Any]]:
    """Return every child of the LLMDeployment ``body`` for server-side apply, in apply order.

    The Services and the PodDisruptionBudget come first so that pods are covered by them from the
    moment they exist; the batch Service and Deployment only when ``spec.batch`` is set.

    Raises:
        UnsupportedSpecError: see :func:`engine_command`.
        ValueError: the body lacks name, namespace or uid.
    """
    meta = body.get("metadata", {})
    name, namespace = meta.get("name"), meta.get("namespace")
    if not name or not namespace:
        raise ValueError("an LLMDeployment needs metadata.name and metadata.namespace")
    owner = owner_reference(body)
    children = [
        service_manifest(name, namespace, spec, owner),
        pdb_manifest(name, namespace, spec, owner),
        deployment_manifest(name, namespace, spec, INTERACTIVE, interactive_replicas, owner, priority_classes,
                            fit_rollout),
    ]
    if spec.batch is not None:
        children.insert(2, batch_service_manifest(name, namespace, spec, owner))
        children.append(deployment_manifest(name, namespace, spec, BATCH, batch_replicas, owner, priority_classes))
    return children
