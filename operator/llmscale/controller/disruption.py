"""Cold starts kept from node autoscalers: a pod in its cold start carries
``karpenter.sh/do-not-disrupt: "true"`` and ``cluster-autoscaler.kubernetes.io/safe-to-evict:
"false"`` (set in the pod template), so Karpenter's consolidation and the Cluster Autoscaler's
scale-down do not evict a replica 600 s into a 900 s cold start (the PodDisruptionBudget allows it:
the pod is not Ready, so it is not counted as available). Once the pod is Ready the operator removes
both (a JSON merge patch of those keys), and the node is again free to be consolidated under the
PDB's rule. A value the user sets in ``spec.template.metadata.annotations`` wins: it is on the pod
from the start and never removed. Source: Karpenter docs, "Disruption" (Pod-level controls); Cluster
Autoscaler FAQ, "What types of pods can prevent CA from removing a node?".
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from kubernetes.client.exceptions import ApiException

from llmscale.api import LLMDeploymentSpec
from llmscale.controller.deps import Dependencies
from llmscale.controller.indexes import IndexedPod

__all__ = ["COLD_START_ANNOTATIONS", "DO_NOT_DISRUPT", "SAFE_TO_EVICT", "release_ready_pods", "to_release",
           "user_set"]

DO_NOT_DISRUPT = "karpenter.sh/do-not-disrupt"
SAFE_TO_EVICT = "cluster-autoscaler.kubernetes.io/safe-to-evict"
#: What a pod carries through its cold start (see :func:`llmscale.controller.manifests.podtemplate.pod_template`).
COLD_START_ANNOTATIONS: Mapping[str, str] = {DO_NOT_DISRUPT: "true", SAFE_TO_EVICT: "false"}


def user_set(spec: LLMDeploymentSpec) -> frozenset[str]:
    """The cold-start annotations ``spec.template.metadata.annotations`` sets itself (left as they are)."""
    annotations = ((spec.template or {}).get("metadata") or {}).get("annotations") or {}
    return frozenset(k for k in COLD_START_ANNOTATIONS if k in annotations)


def to_release(pods: Iterable[IndexedPod], kept: frozenset[str]) -> dict[str, tuple[str, ...]]:
    """Return ``{pod: keys to remove}`` for each Ready pod still carrying cold-start annotations
    (``IndexedPod.guarded``) other than the ``kept`` ones."""
    out: dict[str, tuple[str, ...]] = {}
    for pod in pods:
        keys = tuple(k for k in pod.guarded if k not in kept)
        if pod.phase == "ready" and keys:
            out[pod.name] = keys
    return out


async def release_ready_pods(deps: Dependencies, namespace: str, pods: Iterable[IndexedPod], spec: LLMDeploymentSpec,
                             logger: logging.Logger | logging.LoggerAdapter[Any]) -> list[str]:
    """Remove the cold-start annotations from the pool's Ready pods; return the pods written. A
    refusal is logged and counted, never raised: the next tick tries again."""
    written = []
    for pod, keys in to_release(pods, user_set(spec)).items():
        try:
            await deps.writer.remove_pod_annotations(namespace, pod, keys)
        except ApiException as exc:
            deps.metrics.apply_errors.labels("Pod").inc()
            if exc.status != 404:
                logger.warning(f"Failed to remove the cold-start annotations of pod {namespace}/{pod}: "
                               f"{exc.status} {exc.reason}")
            continue
        written.append(pod)
    if written:
        logger.debug(f"Removed the cold-start annotations of Ready pods in {namespace}: {written}")
    return written
