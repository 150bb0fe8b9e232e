"""Node headroom: placeholder pods that keep GPU nodes for the warm headroom (``spec.headroom.warmNodes``).

Warm replicas cover a cold start only if the next replica finds a free GPU; when it needs a node
the cluster autoscaler takes minutes to add, the headroom is not warm at all. So llmscale also
keeps room for the headroom on the nodes: a Deployment ``<name>-placeholder`` of pause containers
shaped like one replica — the engine container's resource requests and limits (the GPUs, CPU and
memory), the pod's node selector, tolerations, affinity and topology spread, all from the merged
pod template — at the lowest priority (``settings.placeholder_priority_class``: value -1,
``preemptionPolicy: Never``, so a placeholder never preempts anything). When a real replica needs
the node, the scheduler preempts a placeholder at once (grace period 0) and the replica lands on
its node; the placeholder's Deployment recreates it and it goes Pending, which is what asks the
cluster autoscaler for the next node, ahead of need. This is the cluster autoscaler's documented
"overprovisioning" pattern (cluster-autoscaler FAQ, "How can I configure overprovisioning with
Cluster Autoscaler?"), with the count set by the policy.

Their count is the headroom of the decision (``Decision.headroom_replicas``): as many nodes' worth
of room as there are warm replicas above demand. Only in ``Active`` mode (Advisory and Paused write
nothing) and only for pods llmscale creates.

Pods carry llmscale's labels except ``llmscale.dev/pool`` (so neither the Service nor the pool's
pod index counts them) and ``llmscale.dev/placeholder: "true"``.
"""

from __future__ import annotations

import copy
import logging
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import kopf

from llmscale.api import LLMDeploymentSpec
from llmscale.controller.deps import Dependencies
from llmscale.controller.manifests.merge import ENGINE_CONTAINER
from llmscale.controller.manifests.names import (
    INTERACTIVE,
    LABEL_DEPLOYMENT,
    LABEL_INSTANCE,
    LABEL_MANAGED_BY,
    LABEL_NAME,
    MANAGER,
    labels,
    owner_reference,
)
from llmscale.controller.writer import ApplyRefused, apply_manifests

__all__ = [
    "LABEL_PLACEHOLDER",
    "PLACEHOLDER_DEPLOYMENTS_INDEX",
    "PLACEHOLDER_PODS_INDEX",
    "PlaceholderState",
    "index_placeholder_deployments",
    "index_placeholder_pods",
    "placeholder_manifest",
    "placeholder_name",
    "placeholder_state",
    "sync_placeholders",
]

LABEL_PLACEHOLDER = "llmscale.dev/placeholder"
#: Kopf index ids (handlers receive the indexes as keyword arguments of these names).
PLACEHOLDER_DEPLOYMENTS_INDEX = "llmscale_placeholder_deployments"
PLACEHOLDER_PODS_INDEX = "llmscale_placeholder_pods"

# Scheduling fields of the replica's pod that place a placeholder where the replica would go.
_PLACEMENT = ("nodeSelector", "tolerations", "affinity", "topologySpreadConstraints", "schedulerName",
              "runtimeClassName", "imagePullSecrets")
# The pause container's user (registry.k8s.io/pause runs as 65535).
_PAUSE_UID = 65535

_Logger = logging.Logger | logging.LoggerAdapter[Any]


def placeholder_name(name: str) -> str:
    """Return the placeholder Deployment's name, ``<name>-placeholder``."""
    return f"{name}-placeholder"


def placeholder_manifest(
    name: str,
    namespace: str,
    spec: LLMDeploymentSpec,
    replica_template: Mapping[str, Any],
    replicas: int,
    owner: Mapping[str, Any],
    *,
    priority_class: str,
    image: str,
) -> dict[str, Any]:
    """Return Deployment ``<name>-placeholder``: ``replicas`` pause pods shaped like one replica.

    Args:
        name / namespace: the LLMDeployment's.
        spec: its spec (the engine type, for the labels).
        replica_template: the interactive pool's pod template, ``spec.template`` merged in: its
            engine container's ``resources`` and the pod's placement fields are copied.
        replicas: placeholder pods wanted (>= 0).
        owner: the LLMDeployment's owner reference.
        priority_class: the placeholders' PriorityClass.
        image: the pause image.

    Raises:
        ValueError: ``replicas`` is negative.
    """
    if replicas < 0:
        raise ValueError(f"replicas must be >= 0, got {replicas}")
    pod_spec = replica_template.get("spec") or {}
    engine = next(c for c in pod_spec.get("containers") or () if c.get("name") == ENGINE_CONTAINER)
    pod_labels = {
        LABEL_MANAGED_BY: MANAGER,
        LABEL_NAME: spec.engine.type,
        LABEL_INSTANCE: name,
        LABEL_DEPLOYMENT: name,
        LABEL_PLACEHOLDER: "true",
    }
    placeholder_spec: dict[str, Any] = {
        **{k: copy.deepcopy(pod_spec[k]) for k in _PLACEMENT if k in pod_spec},
        "priorityClassName": priority_class,
        # A preempted placeholder must leave its node at once: nothing runs in it.
        "terminationGracePeriodSeconds": 0,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": _PAUSE_UID,
            "runAsGroup": _PAUSE_UID,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [{
            "name": "placeholder",
            "image": image,
            "resources": copy.deepcopy(engine.get("resources") or {}),
            "securityContext": {
                "allowPrivilegeEscalation": False,
                "readOnlyRootFilesystem": True,
                "capabilities": {"drop": ["ALL"]},
            },
        }],
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": placeholder_name(name),
            "namespace": namespace,
            "labels": {**labels(name, spec.engine.type, INTERACTIVE), LABEL_PLACEHOLDER: "true"},
            "ownerReferences": [dict(owner)],
        },
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {LABEL_DEPLOYMENT: name, LABEL_PLACEHOLDER: "true"}},
            # Placeholders are interchangeable: replace them all at once on a template change.
            "strategy": {"type": "Recreate"},
            "template": {"metadata": {"labels": pod_labels}, "spec": placeholder_spec},
        },
    }


def index_placeholder_deployments(
    *, namespace: str | None, name: str, labels: Mapping[str, str], spec: kopf.Spec, **_: Any
) -> dict[tuple[str, str], int]:
    """Kopf index function: ``{(namespace, owner): spec.replicas}`` of a placeholder Deployment."""
    owner = labels.get(LABEL_DEPLOYMENT)
    if not owner or not namespace or name != placeholder_name(owner):
        return {}
    replicas = spec.get("replicas")
    return {(namespace, owner): int(replicas) if replicas is not None else 1}


def index_placeholder_pods(
    *, namespace: str | None, labels: Mapping[str, str], meta: kopf.Meta, spec: kopf.Spec, **_: Any
) -> dict[tuple[str, str], str]:
    """Kopf index function: ``{(namespace, owner): "running" | "pending"}`` of a placeholder pod
    (``running``: bound to a node, holding room there); nothing for a terminating one."""
    owner = labels.get(LABEL_DEPLOYMENT)
    if not owner or not namespace or meta.get("deletionTimestamp"):
        return {}
    return {(namespace, owner): "running" if spec.get("nodeName") else "pending"}


@dataclass(frozen=True, slots=True)
class PlaceholderState:
    """The placeholders of one LLMDeployment as the indexes see them.

    Attributes:
        replicas: ``spec.replicas`` of ``<name>-placeholder``; ``None`` when it does not exist.
        running: placeholder pods bound to a node.
        pending: placeholder pods waiting for a node.
    """

    replicas: int | None
    running: int
    pending: int


def placeholder_state(deployments: Any, pods: Any, key: tuple[str, str]) -> PlaceholderState:
    """Return the :class:`PlaceholderState` of ``key`` (namespace, LLMDeployment name) from the
    two placeholder indexes (``None`` indexes read as empty)."""
    store = deployments.get(key) if deployments is not None else None
    replicas = int(next(iter(store))) if store else None
    phases = Counter(pods.get(key) or ()) if pods is not None else Counter()
    return PlaceholderState(replicas, phases["running"], phases["pending"])


async def sync_placeholders(
    deps: Dependencies,
    body: kopf.Body,
    spec: LLMDeploymentSpec,
    *,
    namespace: str,
    name: str,
    replica_template: Mapping[str, Any] | None,
    wanted: int,
    state: PlaceholderState,
    logger: _Logger,
) -> int | None:
    """Bring ``<name>-placeholder`` to ``wanted`` pods (apply on change), or delete it when
    ``spec.headroom.warmNodes`` is off; return the replicas it now has (``None``: none exists).

    Never raises for a refused write: it is logged and the next tick tries again.

    Args:
        replica_template: the interactive pool's merged pod template (``None`` with warmNodes off).
        wanted: placeholders wanted (the decision's headroom).
        state: what the indexes see now.
    """
    target = placeholder_name(name)
    if not spec.headroom.warm_nodes or replica_template is None:
        if state.replicas is not None and await deps.writer.delete("apps/v1", "Deployment", namespace, target):
            logger.info(f"Deleted Deployment {namespace}/{target}: spec.headroom.warmNodes is off")
        return None
    if state.replicas == wanted:
        return wanted
    manifest = placeholder_manifest(
        name, namespace, spec, replica_template, wanted, owner_reference(body),
        priority_class=deps.settings.placeholder_priority_class, image=deps.settings.placeholder_image)
    try:
        await apply_manifests(deps.writer, [manifest], deps.metrics)
    except ApplyRefused as exc:
        logger.error(f"Failed to keep {wanted} placeholders of LLMDeployment {namespace}/{name}: {exc}")
        return state.replicas
    logger.info(f"Kept {wanted} placeholder pods for the headroom of LLMDeployment {namespace}/{name} "
                f"(Deployment {target}, was {state.replicas if state.replicas is not None else 'absent'})")
    return wanted
