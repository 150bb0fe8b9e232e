"""Keeping an LLMDeployment's InferencePool in step with ``spec.routing`` (issue 23): applied with
the other children where the API server serves the kind and ``inferencePool`` is ``Auto``; deleted
when it turns ``Disabled``. Never written over, nor deleted, when llmscale does not own it.

Carried out on create, update and resume (:mod:`llmscale.controller.ensure`) and again by the tick
every :data:`RESYNC_S` (a pool deleted by hand comes back; one a predecessor of the same name still
owns is applied once the garbage collector removed it) or as soon as discovery's answer changes (the
extension installed later). A refusal never holds up the other children: it shows in
``ChildrenApplied=False`` and is tried again after the children's retry delay.

A missing kind is no error (most clusters have no Gateway API Inference Extension): the pool is
simply not routed by prefix, and docs/operator.md ("Routing by prefix") says what to do instead.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any, Literal

import kopf
import urllib3
from kubernetes.client.exceptions import ApiException

from llmscale.api import LLMDeploymentSpec
from llmscale.controller.applyfailure import note_routing, retry_delay_seconds
from llmscale.controller.deps import Dependencies
from llmscale.controller.manifests.inferencepool import inference_pool_manifest, owned_by
from llmscale.controller.manifests.names import owner_reference
from llmscale.controller.memory import ObjectMemory
from llmscale.controller.metrics import OperatorMetrics
from llmscale.controller.writer import ApplyRefused, InferencePools, apply_manifests

__all__ = ["RESYNC_S", "RoutingOutcome", "follow_routing", "routing_due", "sync_inference_pool"]

#: What :func:`sync_inference_pool` did: ``applied``, ``unchanged`` (ours, already as wanted: no
#: write), ``deleted``, ``not-served`` (the cluster has no InferencePool kind), ``not-ours`` (one of
#: that name belongs to someone else), ``none`` (nothing to do: disabled and none of ours exists, or
#: no client).
RoutingOutcome = Literal["applied", "unchanged", "deleted", "not-served", "not-ours", "none"]

#: Seconds between two checks of an LLMDeployment's InferencePool by the tick (one read each, a
#: write only when it is missing or differs): as often as discovery is asked again.
RESYNC_S = 300.0
#: Seconds before looking again at a pool of that name someone else owns: a predecessor of the same
#: name (deleted and created again) still owns it until the garbage collector removes it.
NOT_OURS_RECHECK_S = 60.0

_Logger = logging.Logger | logging.LoggerAdapter[Any]


def _contains(have: Any, want: Any) -> bool:
    """Whether ``have`` holds every field of ``want`` with the same value (maps recursively)."""
    if isinstance(want, Mapping):
        return isinstance(have, Mapping) and all(k in have and _contains(have[k], v) for k, v in want.items())
    return bool(have == want)


async def sync_inference_pool(
    pools: InferencePools | None,
    metrics: OperatorMetrics,
    body: kopf.Body,
    spec: LLMDeploymentSpec,
    *,
    namespace: str,
    name: str,
    logger: _Logger,
    quiet: bool = False,
) -> RoutingOutcome:
    """Apply or delete InferencePool ``<name>`` as ``spec.routing.inferencePool`` says.

    Args:
        pools: the InferencePool client (``None``: the operator runs without one; nothing done).
        metrics: the operator's metrics (a refused apply counts in ``llmscale_apply_errors_total``).
        body: the LLMDeployment (its uid is the owner reference checked and set).
        spec: its validated spec.
        namespace / name: the LLMDeployment's.
        logger: the object's logger.
        quiet: do not warn again about a pool someone else owns (warned on the last call).

    Returns:
        What was done (:data:`RoutingOutcome`).

    Raises:
        ApplyRefused: the API server refused the read, the apply or the delete.
    """
    if pools is None:
        return "none"
    what = f"InferencePool {namespace}/{name}"
    manifest = inference_pool_manifest(name, namespace, spec, owner_reference(body))
    try:
        if not await pools.served():
            return "not-served"
        existing = await pools.read(namespace, name)
        ours = owned_by(existing, str(body.get("metadata", {}).get("uid", "")))
        if spec.routing.inference_pool == "Disabled":
            if existing is not None and ours and await pools.delete(namespace, name):
                logger.info(f"Deleted {what}: spec.routing.inferencePool is Disabled")
                return "deleted"
            return "none"
        if not ours:
            if not quiet:
                logger.warning(f"Left {what} alone: it exists and is not owned by this LLMDeployment "
                               f"(set spec.routing.inferencePool: Disabled to silence this)")
            return "not-ours"
        wanted = {"metadata": {"labels": manifest["metadata"]["labels"]}, "spec": manifest["spec"]}
        if existing is not None and _contains(existing, wanted):
            return "unchanged"
    except ApiException as exc:
        metrics.apply_errors.labels("InferencePool").inc()
        raise ApplyRefused(what, exc.status, str(exc.reason)) from exc
    except (OSError, urllib3.exceptions.HTTPError) as exc:
        metrics.apply_errors.labels("InferencePool").inc()
        raise ApplyRefused(what, None, f"no answer: {exc!r}") from exc
    await apply_manifests(pools, [manifest], metrics)
    picker = manifest["spec"]["endpointPickerRef"]
    logger.info(f"Applied {what}: endpoint picker {picker['name']}:{picker['port']['number']}")
    return "applied"


async def follow_routing(
    deps: Dependencies, mem: ObjectMemory, body: kopf.Body, spec: LLMDeploymentSpec, *, namespace: str, name: str,
    logger: _Logger,
) -> None:
    """Carry out ``spec.routing`` now (:func:`sync_inference_pool`) and remember when to look again
    (``mem.routing_served``, ``mem.routing_next_loop_s``); a refusal goes to ``mem.routing_error``
    (:func:`~llmscale.controller.applyfailure.note_routing`: ``ChildrenApplied=False``, one Warning
    Event per answer). Never raises."""
    now = asyncio.get_running_loop().time()
    try:
        outcome = await sync_inference_pool(deps.inference_pools, deps.metrics, body, spec, namespace=namespace,
                                            name=name, logger=logger, quiet=mem.routing_outcome == "not-ours")
    except ApplyRefused as exc:
        note_routing(mem, body, logger, str(exc))
        mem.routing_served = True  # only a served kind is read or written
        mem.routing_next_loop_s = now + retry_delay_seconds(exc.permanent)
        return
    note_routing(mem, body, logger, None)
    mem.routing_outcome = outcome
    mem.routing_served = outcome != "not-served"
    mem.routing_next_loop_s = now + (NOT_OURS_RECHECK_S if outcome == "not-ours" else RESYNC_S)


async def routing_due(deps: Dependencies, mem: ObjectMemory) -> bool:
    """Whether the tick should carry out ``spec.routing`` again: ensure has carried it out once
    (``mem.routing_next_loop_s`` set) and no apply of the children is in flight, and either its time
    has come or discovery's answer changed since (cached: no request)."""
    pools = deps.inference_pools
    if pools is None or mem.children_applying or mem.routing_next_loop_s is None:
        return False
    if asyncio.get_running_loop().time() >= mem.routing_next_loop_s:
        return True
    return mem.routing_served is not None and await pools.served() != mem.routing_served
