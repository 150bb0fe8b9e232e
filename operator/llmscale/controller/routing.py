"""Keeping an LLMDeployment's InferencePool in step with ``spec.routing`` (issue 23): applied with
the other children where the API server serves the kind and ``inferencePool`` is ``Auto``; deleted
when it turns ``Disabled``. Never written over, nor deleted, when llmscale does not own it.

A missing kind is no error (most clusters have no Gateway API Inference Extension): the pool is
simply not routed by prefix, and docs/operator.md ("Routing by prefix") says what to do instead.
"""

from __future__ import annotations

import logging
from typing import Any, Literal

import kopf
import urllib3
from kubernetes.client.exceptions import ApiException

from llmscale.api import LLMDeploymentSpec
from llmscale.controller.inferencepool import inference_pool_manifest, owned_by
from llmscale.controller.metrics import OperatorMetrics
from llmscale.controller.names import owner_reference
from llmscale.controller.writer import ApplyRefused, InferencePools, apply_manifests

__all__ = ["RoutingOutcome", "sync_inference_pool"]

#: What :func:`sync_inference_pool` did: ``applied``, ``deleted``, ``not-served`` (the cluster has
#: no InferencePool kind), ``not-ours`` (one of that name belongs to someone else), ``none``
#: (nothing to do: disabled and none of ours exists, or no client).
RoutingOutcome = Literal["applied", "deleted", "not-served", "not-ours", "none"]


async def sync_inference_pool(
    pools: InferencePools | None,
    metrics: OperatorMetrics,
    body: kopf.Body,
    spec: LLMDeploymentSpec,
    *,
    namespace: str,
    name: str,
    logger: logging.Logger | logging.LoggerAdapter[Any],
) -> RoutingOutcome:
    """Apply or delete InferencePool ``<name>`` as ``spec.routing.inferencePool`` says.

    Args:
        pools: the InferencePool client (``None``: the operator runs without one; nothing done).
        metrics: the operator's metrics (a refused apply counts in ``llmscale_apply_errors_total``).
        body: the LLMDeployment (its uid is the owner reference checked and set).
        spec: its validated spec.
        namespace / name: the LLMDeployment's.
        logger: the object's logger.

    Returns:
        What was done (:data:`RoutingOutcome`).

    Raises:
        ApplyRefused: the API server refused the read, the apply or the delete (reported like any
            child's refusal by the caller, and retried).
    """
    if pools is None:
        return "none"
    what = f"InferencePool {namespace}/{name}"
    try:
        if not await pools.served():
            if spec.routing.inference_pool == "Auto":
                logger.debug(f"Applied no {what}: the API server serves no inferencepools.inference.networking.k8s.io/v1")
            return "not-served"
        existing = await pools.read(namespace, name)
        ours = owned_by(existing, str(body.get("metadata", {}).get("uid", "")))
        if spec.routing.inference_pool == "Disabled":
            if existing is not None and ours and await pools.delete(namespace, name):
                logger.info(f"Deleted {what}: spec.routing.inferencePool is Disabled")
                return "deleted"
            return "none"
        if not ours:
            logger.warning(f"Left {what} alone: it exists and is not owned by this LLMDeployment "
                           f"(set spec.routing.inferencePool: Disabled to silence this)")
            return "not-ours"
    except ApiException as exc:
        metrics.apply_errors.labels("InferencePool").inc()
        raise ApplyRefused(what, exc.status, str(exc.reason)) from exc
    except (OSError, urllib3.exceptions.HTTPError) as exc:
        metrics.apply_errors.labels("InferencePool").inc()
        raise ApplyRefused(what, None, f"no answer: {exc!r}") from exc
    manifest = inference_pool_manifest(name, namespace, spec, owner_reference(body))
    await apply_manifests(pools, [manifest], metrics)
    picker = manifest["spec"]["endpointPickerRef"]
    logger.info(f"Applied {what}: endpoint picker {picker['name']}:{picker['port']['number']}")
    return "applied"
