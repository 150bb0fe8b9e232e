"""What the operator does when the workload of ``spec.scaleTargetRef`` cannot be read: no decision
(nothing is known of the pools), ``ScalingActive=False`` with the reason (``FailedGetScale``) and
``Ready=False`` in status (written on change only), one Warning Event per distinct message, a log
line. The next tick tries again.
"""

from __future__ import annotations

import logging
from typing import Any

import kopf

from llmscale.controller.deps import Dependencies
from llmscale.controller.events import post_target_error
from llmscale.controller.memory import ObjectMemory
from llmscale.controller.slimbodies import status_of
from llmscale.controller.status.conditions import merge_conditions
from llmscale.policy.types import ConditionResult

__all__ = ["report_target_error"]


def report_target_error(
    deps: Dependencies,
    mem: ObjectMemory,
    body: kopf.Body,
    patch: kopf.Patch,
    logger: logging.Logger | logging.LoggerAdapter[Any],
    reason: str,
    message: str,
) -> None:
    """Report that the scale target of ``body`` could not be read (see the module docstring).

    Must run inside the event loop: the status write is throttled on the loop's clock.
    """
    meta = body.get("metadata", {})
    previous = status_of(body) or {}
    now = deps.clock()
    conditions = merge_conditions(
        previous.get("conditions"),
        {
            "Ready": ConditionResult("False", reason, message),
            "ScalingActive": ConditionResult("False", reason, message),
        },
        now,
        meta.get("generation"),
    )
    desired = {"observedGeneration": meta.get("generation"), "conditions": conditions}
    mem.write_status(patch.status, previous, desired, refresh_seconds=deps.settings.status_refresh_seconds)
    if mem.last_target_error != message:
        mem.last_target_error = message
        post_target_error(body, reason, message)
        logger.warning(f"Failed to read the scale target of LLMDeployment {meta.get('namespace')}/"
                       f"{meta.get('name')}: {message}")
