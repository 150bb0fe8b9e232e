"""What the operator does when the API server refuses one of its writes of children (a server-side
apply of the Service, the PodDisruptionBudget or a Deployment): a ``ChildrenApplied=False``
condition with reason ``ApplyFailed`` and the API server's answer, one ``ApplyFailed`` Warning
Event per distinct answer, a log line — and a retry, whatever the status code: a 4xx is often
fixed outside the spec (a quota raised, a PriorityClass or an admission policy installed, RBAC
granted), and a retry costs one request. The condition turns ``True`` again once an apply passes.
"""

from __future__ import annotations

import logging
from typing import Any

import kopf

from llmscale.controller.deps import Dependencies
from llmscale.controller.events import post_apply_failed
from llmscale.controller.memory import ObjectMemory
from llmscale.controller.slimbodies import status_of
from llmscale.controller.status.conditions import merge_conditions
from llmscale.policy.types import ConditionResult

__all__ = [
    "CHILDREN_APPLIED",
    "applied_condition",
    "children_error",
    "note_apply",
    "note_routing",
    "record_apply",
    "retry_delay_seconds",
]

#: The condition type.
CHILDREN_APPLIED = "ChildrenApplied"

#: Seconds before Kopf retries create/update/resume after a failed apply: 10 s for a failure that
#: may pass by itself (5xx, 409 conflict, 429 throttling: long enough for an API server restart),
#: 60 s for a refusal (4xx) that waits for someone to change the spec, a quota or a policy.
_RETRY_TRANSIENT_S = 10.0
_RETRY_REFUSED_S = 60.0


def retry_delay_seconds(permanent: bool) -> float:
    """Return the seconds to wait before applying again after a failure (see the constants)."""
    return _RETRY_REFUSED_S if permanent else _RETRY_TRANSIENT_S


def applied_condition(error: str | None) -> ConditionResult:
    """Return the ``ChildrenApplied`` condition for the last apply's error (``None``: it passed)."""
    if error is None:
        return ConditionResult("True", "Applied", "Every child was applied")
    return ConditionResult("False", "ApplyFailed", error)


def children_error(mem: ObjectMemory) -> str | None:
    """The refusal ``ChildrenApplied`` shows: the children's (``mem.apply_error``) and the
    InferencePool's (``mem.routing_error``), joined; ``None`` when neither failed."""
    errors = [e for e in (mem.apply_error, mem.routing_error) if e is not None]
    return "; ".join(errors) or None


def _report(
    body: kopf.Body, logger: logging.Logger | logging.LoggerAdapter[Any], what: str, before: str | None,
    error: str | None,
) -> str | None:
    """Log and post an ``ApplyFailed`` Warning Event once per distinct ``error`` (``before``: the
    last one on record), log the recovery; return ``error``, the new record."""
    if error is not None and before != error:
        logger.error(f"Failed to apply {what}: {error}")
        post_apply_failed(body, f"Failed to apply {what}: {error}")
    elif error is None and before is not None:
        logger.info(f"Applied {what} after a failure")
    return error


def _name(body: kopf.Body) -> str:
    meta = body.get("metadata", {})
    return f"LLMDeployment {meta.get('namespace')}/{meta.get('name')}"


def note_routing(
    mem: ObjectMemory, body: kopf.Body, logger: logging.Logger | logging.LoggerAdapter[Any], error: str | None
) -> None:
    """As :func:`note_apply`, for the InferencePool (:mod:`llmscale.controller.routing`), in
    ``mem.routing_error``: kept apart so that a scale that passes does not clear it, nor it the
    children's."""
    mem.routing_error = _report(body, logger, f"the InferencePool of {_name(body)}", mem.routing_error, error)


def note_apply(
    mem: ObjectMemory, body: kopf.Body, logger: logging.Logger | logging.LoggerAdapter[Any], error: str | None
) -> None:
    """Remember the outcome of applying children (``error``: the refusal's message, ``None`` for a
    success) in ``mem.apply_error``; post an ``ApplyFailed`` Warning Event and log once per
    distinct message, and log the recovery. The tick writes the condition with its status."""
    mem.apply_error = _report(body, logger, f"children of {_name(body)}", mem.apply_error, error)


def record_apply(
    deps: Dependencies,
    mem: ObjectMemory,
    body: kopf.Body,
    patch: kopf.Patch,
    logger: logging.Logger | logging.LoggerAdapter[Any],
    error: str | None,
) -> None:
    """:func:`note_apply`, then write the ``ChildrenApplied`` condition (the create/update/resume
    handlers, which write no other status): a failure, or the recovery from one; a success with no
    failure on record is left to the next tick's status write. Must run inside the event loop."""
    note_apply(mem, body, logger, error)
    error = children_error(mem)
    meta = body.get("metadata", {})
    previous = status_of(body) or {}
    recorded = [c for c in previous.get("conditions") or () if isinstance(c, dict) and c.get("type") == CHILDREN_APPLIED]
    if error is None and all(c.get("status") == "True" for c in recorded):
        return
    conditions = merge_conditions(previous.get("conditions"), {CHILDREN_APPLIED: applied_condition(error)},
                                  deps.clock(), meta.get("generation"))
    mem.write_status(patch.status, previous, {"conditions": conditions},
                     refresh_seconds=deps.settings.status_refresh_seconds)
