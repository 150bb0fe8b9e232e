"""The measured cold start of a pool: pod creation to Ready, the P90 of its recent starts. Pure.

A pod's cold start is the time from ``metadata.creationTimestamp`` to the ``lastTransitionTime``
of its ``Ready`` condition (status ``True``): scheduling, image pull, weights read, kernels
compiled, CUDA graphs captured — everything between asking for a replica and its serving. The
pool's figure is the 90th percentile of the last :data:`RECENT_STARTS` starts seen, so one slow
node does not set it and one fast restart does not hide a slow image.

This module gives ``status.pools.<pool>.coldStartP90Seconds`` (what people read). The policy's
lead time comes from the same pod time stamps through
:attr:`llmscale.policy.types.PoolState.interactive_cold_starts_s` and
:func:`llmscale.policy.leadtime.lead_time` (shown as ``status.replicas.leadTimeSeconds``); both
take the quantile with :func:`llmscale.policy.leadtime.cold_start_p90`, one definition.

Caveat: ``lastTransitionTime`` moves each time ``Ready`` flips. A pod that became Ready, failed a
probe and came back reads as a longer start; :class:`ColdStarts` keeps the first value it saw of
each pod, so within one operator process a pod counts once, with its first start.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from llmscale.controller.state.timestamps import parse_rfc3339
from llmscale.policy.leadtime import COLD_START_SAMPLES, cold_start_p90

__all__ = ["RECENT_STARTS", "ColdStarts", "parse_time", "pod_start_seconds"]

#: Starts a pool's figure is taken over (the newest by Ready time): the policy's own sample count,
#: so the figure people read and the lead time the policy uses cover the same starts.
RECENT_STARTS = COLD_START_SAMPLES


def parse_time(value: object) -> float | None:
    """Return an RFC 3339 time (``metav1.Time``, e.g. ``2026-01-02T03:04:05Z``) or a ``datetime``
    as seconds since the epoch; ``None`` for anything else."""
    if isinstance(value, datetime):
        return value.timestamp()
    return parse_rfc3339(value)  # the one metav1.Time parser (a time without offset is UTC)


def pod_start_seconds(metadata: Mapping[str, Any], status: Mapping[str, Any]) -> tuple[float | None, float | None]:
    """Return ``(created_s, ready_s)`` of one pod: its creation time and the time its ``Ready``
    condition last turned ``True`` (``None`` while it is not Ready), seconds since the epoch."""
    created = parse_time(metadata.get("creationTimestamp"))
    ready: float | None = None
    for cond in status.get("conditions") or ():
        if isinstance(cond, Mapping) and cond.get("type") == "Ready" and cond.get("status") == "True":
            ready = parse_time(cond.get("lastTransitionTime"))
    return created, ready


@dataclass
class ColdStarts:
    """The recent cold starts of one pool, newest kept (``{pod name: (ready_s, seconds)}``).

    :meth:`observe` folds in the pods of a tick; pods that went away keep counting until newer
    starts push them out. After an operator restart the live pods give the figure again.
    """

    starts: dict[str, tuple[float, float]] = field(default_factory=dict)
    keep: int = RECENT_STARTS

    def observe(self, pods: Iterable[tuple[str, float | None, float | None]]) -> None:
        """Record the start of each Ready pod not yet recorded.

        Args:
            pods: ``(name, created_s, ready_s)`` per pod (:func:`pod_start_seconds`). A pod with
                either time unknown, or Ready before its creation (clock skew), is skipped.
        """
        for name, created, ready in pods:
            if name in self.starts or created is None or ready is None or ready < created:
                continue
            self.starts[name] = (ready, ready - created)
        if len(self.starts) > self.keep:
            newest = sorted(self.starts.items(), key=lambda item: item[1][0])[-self.keep:]
            self.starts = dict(newest)

    def p90_seconds(self) -> float | None:
        """The P90 cold start of the recorded starts, seconds; ``None`` before the first."""
        by_ready = sorted(self.starts.values())
        p90 = cold_start_p90([seconds for _, seconds in by_ready])
        return None if p90 is None else p90[0]

    def __len__(self) -> int:
        return len(self.starts)
