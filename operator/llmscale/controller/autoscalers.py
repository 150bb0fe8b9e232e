"""Stepping back for another autoscaler: when a HorizontalPodAutoscaler or a KEDA ScaledObject
targets one of an LLMDeployment's Deployments, two controllers would write its ``spec.replicas``
every few seconds (the HPA through ``/scale``, llmscale by a forced server-side apply) and the
pool would flap. llmscale stops writing that pool's replicas, says so in the ``SoleAutoscaler``
condition and an ``OtherAutoscaler`` Warning Event, and resumes once the other autoscaler is gone
or retargeted. Decide which one should scale the pool and delete the other.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import kopf

from llmscale.controller.events import post_other_autoscaler
from llmscale.controller.manifests.names import POOLS, Pool, deployment_name
from llmscale.controller.memory import ObjectMemory
from llmscale.policy.types import ConditionResult

__all__ = ["SOLE_AUTOSCALER", "note_other_autoscalers", "sole_autoscaler_condition"]

#: The condition type.
SOLE_AUTOSCALER = "SoleAutoscaler"


def _describe(name: str, others: Mapping[Pool, tuple[str, ...]],
              workloads: Mapping[Pool, str | None] | None = None) -> str:
    parts = [f"{', '.join(found)} targets Deployment {(workloads or {}).get(pool) or deployment_name(name, pool)}"
             for pool in POOLS if (found := others.get(pool))]
    return "; ".join(parts)


def sole_autoscaler_condition(name: str, others: Mapping[Pool, tuple[str, ...]],
                              workloads: Mapping[Pool, str | None] | None = None) -> ConditionResult:
    """Return the ``SoleAutoscaler`` condition: ``True`` when no other autoscaler targets the
    Deployments of LLMDeployment ``name``; ``False``, reason ``OtherAutoscaler``, naming each one.
    ``workloads``: each pool's Deployment name where it is not llmscale's own (``spec.scaleTargetRef``)."""
    if not any(others.values()):
        return ConditionResult("True", "NoOtherAutoscaler",
                               "No HorizontalPodAutoscaler or ScaledObject targets the Deployments")
    return ConditionResult("False", "OtherAutoscaler",
                           f"{_describe(name, others, workloads)}: llmscale stopped writing its replicas")


def note_other_autoscalers(
    mem: ObjectMemory,
    body: kopf.Body,
    logger: logging.Logger | logging.LoggerAdapter[Any],
    others: Mapping[Pool, tuple[str, ...]],
    workloads: Mapping[Pool, str | None] | None = None,
) -> None:
    """Log and post an ``OtherAutoscaler`` Warning Event when the set of other autoscalers changes
    to a non-empty one; log when it empties. Remembered in ``mem.other_autoscalers``.
    ``workloads``: as for :func:`sole_autoscaler_condition`."""
    meta = body.get("metadata", {})
    name = str(meta.get("name"))
    found = tuple(sorted(f"{pool}:{o}" for pool in POOLS for o in others.get(pool, ())))
    if found == mem.other_autoscalers:
        return
    what = f"LLMDeployment {meta.get('namespace')}/{name}"
    if found:
        message = f"Stopped scaling {what}: {_describe(name, others, workloads)}"
        logger.warning(message)
        post_other_autoscaler(body, message)
    else:
        logger.info(f"Resumed scaling {what}: no other autoscaler targets its Deployments")
    mem.other_autoscalers = found
