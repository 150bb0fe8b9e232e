"""What the operator does with a spec it cannot use: ``Ready=False/InvalidSpec`` in status
(written on change only), one ``InvalidSpec`` Warning Event per distinct message, a log line and
a count in ``llmscale_decisions_total{direction="invalid"}``. The object's children are left alone.
"""

from __future__ import annotations

import logging
from typing import Any

import kopf

from llmscale.controller.deps import Dependencies
from llmscale.controller.events import post_invalid
from llmscale.controller.memory import ObjectMemory
from llmscale.controller.slimbodies import status_of
from llmscale.controller.status.build import invalid_status

__all__ = ["report_invalid"]


def report_invalid(
    deps: Dependencies,
    mem: ObjectMemory,
    body: kopf.Body,
    patch: kopf.Patch,
    logger: logging.Logger | logging.LoggerAdapter[Any],
    message: str,
) -> None:
    """Report the spec of ``body`` as unusable, for ``message`` (see the module docstring).

    Must run inside the event loop: the status write is throttled on the loop's clock; the
    condition's ``lastTransitionTime`` comes from ``deps.clock`` (wall clock).
    """
    meta = body.get("metadata", {})
    previous = status_of(body) or {}
    desired = invalid_status(message, meta.get("generation"), previous, deps.clock())
    mem.write_status(patch.status, previous, desired, refresh_seconds=deps.settings.status_refresh_seconds)
    if mem.last_invalid != message:
        mem.last_invalid = message
        post_invalid(body, message)
        logger.warning(f"Rejected LLMDeployment {meta.get('namespace')}/{meta.get('name')}: {message}")
    deps.metrics.decisions.labels("invalid", "InvalidSpec").inc()
