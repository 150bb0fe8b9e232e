"""Keeping an LLMDeployment's children in place: every child server-side applied on create, on a
spec update and on resume (and by the tick when the interactive Deployment went missing), with the
replicas the operator already set, and the InferencePool where the cluster serves one
(:mod:`llmscale.controller.routing`); the batch Deployment and Service deleted when ``spec.batch``
is removed.
A refused apply is reported (:mod:`llmscale.controller.applyfailure`) and retried.

Nothing is applied or deleted when llmscale must not write to the workload: ``spec.mode``
``Advisory`` or ``Paused``, or a ``spec.scaleTargetRef`` (an existing workload, which llmscale
only scales through ``/scale``, from the tick).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import kopf

from llmscale.controller.applyfailure import record_apply, retry_delay_seconds
from llmscale.controller.deps import Dependencies
from llmscale.controller.events import post_batch_removed
from llmscale.controller.indexes import deployment_replicas
from llmscale.controller.invalid import report_invalid
from llmscale.controller.manifests.children import child_manifests, initial_replicas
from llmscale.controller.manifests.names import BATCH, INTERACTIVE, batch_deployment_name, batch_service_name
from llmscale.controller.memory import ObjectMemory
from llmscale.controller.routing import follow_routing
from llmscale.controller.spec import InvalidSpec, read_spec
from llmscale.controller.status.mode import writes_workload
from llmscale.controller.writer import ApplyRefused, apply_manifests

__all__ = ["ensure_children", "retry_error"]


def retry_error(exc: ApplyRefused) -> kopf.TemporaryError:
    """Return the Kopf error that retries the handler: after 10 s for a failure that may pass by
    itself, 60 s for a refusal (:func:`~llmscale.controller.applyfailure.retry_delay_seconds`).
    Never a permanent error: what the API server refuses today it may accept once a quota, a
    policy or a PriorityClass changes, and the spec may never change."""
    return kopf.TemporaryError(str(exc), delay=retry_delay_seconds(exc.permanent))


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
    """Apply every child of the LLMDeployment ``body`` (none in ``Advisory`` or ``Paused`` mode or
    with ``spec.scaleTargetRef``: see the module docstring).

    The interactive Deployment keeps the replicas in the Deployments index (what the operator last
    set) or, new, starts at :func:`~llmscale.controller.manifests.children.initial_replicas`; the batch
    Deployment keeps its replicas or starts at 0.

    Args:
        deps: the injected dependencies.
        mem: the object's memory (``children_applied_loop_s`` is set on success).
        body / namespace / name / patch / logger: Kopf's handler arguments.
        deployments: the Deployments index (:data:`~llmscale.controller.indexes.DEPLOYMENTS_INDEX`).

    Raises:
        kopf.PermanentError: the spec (or the name) is invalid (reported first: status condition
            and a Warning Event); a change of the object calls the handler again.
        kopf.TemporaryError: an apply failed (reported first: ``ChildrenApplied=False``, an
            ``ApplyFailed`` Warning Event); Kopf retries the handler.
    """
    try:
        spec = read_spec(body)
    except InvalidSpec as exc:
        report_invalid(deps, mem, body, patch, logger, str(exc))
        raise kopf.PermanentError(f"Invalid spec: {exc}") from None
    if spec.scale_target_ref is not None or not writes_workload(spec):
        mem.last_invalid = None
        what = f"it scales {spec.scale_target_ref}" if spec.scale_target_ref is not None else f"spec.mode is {spec.mode}"
        logger.info(f"Applied no children of LLMDeployment {namespace}/{name}: {what}")
        return
    current = deployment_replicas(deployments, (namespace, name, INTERACTIVE))
    current_batch = deployment_replicas(deployments, (namespace, name, BATCH))
    interactive = current if current is not None else initial_replicas(spec)
    manifests = child_manifests(body, spec, interactive, current_batch if current_batch is not None else 0,
                                deps.priority_classes, fit_rollout=mem.rollout_fit)
    mem.last_invalid = None
    mem.children_applying = True
    try:
        await apply_manifests(deps.writer, manifests, deps.metrics)
    except ApplyRefused as exc:
        record_apply(deps, mem, body, patch, logger, str(exc))
        raise retry_error(exc) from exc
    finally:
        mem.children_applying = False
    # The InferencePool after the children, never holding them up: a refusal shows in
    # ChildrenApplied beside theirs and the tick tries it again (controller.routing).
    await follow_routing(deps, mem, body, spec, namespace=namespace, name=name, logger=logger)
    record_apply(deps, mem, body, patch, logger, None)
    mem.children_applied_loop_s = asyncio.get_running_loop().time()
    mem.applied_interactive = interactive
    mem.applied_batch = current_batch if current_batch is not None else 0
    kinds = ", ".join(
        f"{m['kind']} {m['metadata']['name']}" + (f" ({m['spec']['replicas']} replicas)" if m["kind"] == "Deployment" else "")
        for m in manifests
    )
    logger.info(f"Applied children of LLMDeployment {namespace}/{name}: {kinds}")
    batch_name = batch_deployment_name(name)
    if spec.batch is None and current_batch is not None:
        # The Service first: no request is routed to a pool on its way out.
        if await deps.writer.delete("v1", "Service", namespace, batch_service_name(name)):
            logger.info(f"Deleted Service {namespace}/{batch_service_name(name)}: spec.batch was removed")
        if await deps.writer.delete("apps/v1", "Deployment", namespace, batch_name):
            logger.info(f"Deleted Deployment {namespace}/{batch_name}: spec.batch was removed")
            post_batch_removed(body, batch_name)
