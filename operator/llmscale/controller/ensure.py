"""Keeping an LLMDeployment's children in place: every child server-side applied on create, on a
spec update and on resume (and by the tick when the interactive Deployment went missing), with the
replicas the operator already set; the batch Deployment deleted when ``spec.batch`` is removed.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import kopf

from llmscale.controller.children import child_manifests, initial_replicas
from llmscale.controller.deps import Dependencies
from llmscale.controller.events import post_batch_removed
from llmscale.controller.indexes import deployment_replicas
from llmscale.controller.invalid import report_invalid
from llmscale.controller.memory import ObjectMemory
from llmscale.controller.names import BATCH, INTERACTIVE, batch_deployment_name
from llmscale.controller.spec import InvalidSpec, read_spec
from llmscale.controller.writer import ApplyRefused, apply_manifests

__all__ = ["ensure_children", "retry_error"]

#: Seconds Kopf waits before retrying a create/update/resume whose apply failed for a reason that
#: may pass (5xx, 409 conflict, 429 throttling): long enough for an API server restart.
_RETRY_DELAY_S = 10


def retry_error(exc: ApplyRefused) -> kopf.PermanentError | kopf.TemporaryError:
    """Return the Kopf error that retries (or, for a permanent refusal, gives up on) the handler."""
    if exc.permanent:
        return kopf.PermanentError(str(exc))
    return kopf.TemporaryError(str(exc), delay=_RETRY_DELAY_S)


async def ensure_children(
    deps: Dependencies,
    mem: ObjectMemory,
    *,
    body: kopf.Body,
    namespace: str,
    name: str,
    patch: kopf.Patch,
    logger: logging.Logger | logging.LoggerAdapter[Any],
    deployments: Any,
) -> None:
    """Apply every child of the LLMDeployment ``body``.

    The interactive Deployment keeps the replicas in the Deployments index (what the operator last
    set) or, new, starts at :func:`~llmscale.controller.children.initial_replicas`; the batch
    Deployment keeps its replicas or starts at 0.

    Args:
        deps: the injected dependencies.
        mem: the object's memory (``children_applied_loop_s`` is set on success).
        body / namespace / name / patch / logger: Kopf's handler arguments.
        deployments: the Deployments index (:data:`~llmscale.controller.indexes.DEPLOYMENTS_INDEX`).

    Raises:
        kopf.PermanentError: the spec is invalid (reported first: status condition and a Warning
            Event), or the API server refused a child for good (a 4xx).
        kopf.TemporaryError: an apply failed for a reason that may pass; Kopf retries the handler.
    """
    try:
        spec = read_spec(body)
    except InvalidSpec as exc:
        report_invalid(deps, mem, body, patch, logger, str(exc))
        raise kopf.PermanentError(f"Invalid spec: {exc}") from None
    current = deployment_replicas(deployments, (namespace, name, INTERACTIVE))
    current_batch = deployment_replicas(deployments, (namespace, name, BATCH))
    interactive = current if current is not None else initial_replicas(spec)
    manifests = child_manifests(body, spec, interactive, current_batch if current_batch is not None else 0)
    mem.last_invalid = None
    try:
        await apply_manifests(deps.writer, manifests, deps.metrics)
    except ApplyRefused as exc:
        raise retry_error(exc) from exc
    mem.children_applied_loop_s = asyncio.get_running_loop().time()
    kinds = ", ".join(
        f"{m['kind']} {m['metadata']['name']}" + (f" ({m['spec']['replicas']} replicas)" if m["kind"] == "Deployment" else "")
        for m in manifests
    )
    logger.info(f"Applied children of LLMDeployment {namespace}/{name}: {kinds}")
    batch_name = batch_deployment_name(name)
    if (
        spec.batch is None
        and current_batch is not None
        and await deps.writer.delete("apps/v1", "Deployment", namespace, batch_name)
    ):
        logger.info(f"Deleted Deployment {namespace}/{batch_name}: spec.batch was removed")
        post_batch_removed(body, batch_name)
