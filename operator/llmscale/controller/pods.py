"""What the pods of a pool say about it: each pod classified (ready, starting, unschedulable), its
measured cold start, and the pools' :class:`~llmscale.policy.types.PoolState` built from those.
Pure.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any, Literal

from llmscale.controller.timestamps import parse_rfc3339
from llmscale.policy.leadtime import COLD_START_SAMPLES
from llmscale.policy.types import PoolState

__all__ = ["PodPhase", "classify_pod", "cold_start", "pool_state", "recent_cold_starts"]

PodPhase = Literal["ready", "starting", "unschedulable"]


def _condition_status(status: Mapping[str, Any], type_: str) -> Mapping[str, Any] | None:
    for cond in status.get("conditions") or ():
        if cond.get("type") == type_:
            return cond  # type: ignore[no-any-return]
    return None


def classify_pod(metadata: Mapping[str, Any], status: Mapping[str, Any]) -> PodPhase | None:
    """Return what one pod contributes to its pool: ready, starting, unschedulable, or nothing.

    - ``None`` for a terminating pod (``deletionTimestamp`` set) or a finished one (phase
      ``Succeeded``/``Failed``): neither serves nor will serve.
    - ``ready`` when the ``Ready`` condition is ``True``.
    - ``unschedulable`` when ``PodScheduled`` is ``False`` with reason ``Unschedulable`` (e.g. no
      node has a free GPU): the policy stops adding replicas while such pods exist.
    - ``starting`` otherwise: scheduled or about to be, in its cold start.
    """
    if metadata.get("deletionTimestamp") or status.get("phase") in ("Succeeded", "Failed"):
        return None
    ready = _condition_status(status, "Ready")
    if ready is not None and ready.get("status") == "True":
        return "ready"
    scheduled = _condition_status(status, "PodScheduled")
    if scheduled is not None and scheduled.get("status") == "False" and scheduled.get("reason") == "Unschedulable":
        return "unschedulable"
    return "starting"


def cold_start(metadata: Mapping[str, Any], status: Mapping[str, Any]) -> tuple[float, float] | None:
    """Return ``(ready_at, seconds)`` of a Ready pod: when its ``Ready`` condition last became
    ``True`` (seconds since the epoch) and the seconds from its ``creationTimestamp`` to then — its
    cold start (scheduling, image pull, weights read, kernels compiled, CUDA graphs captured).

    ``None`` for a pod that is not Ready, or whose time stamps are missing, unreadable or out of
    order (a clock skew between the API server and the kubelet). A pod that lost and regained
    readiness reads its last transition, an overestimate the lead time's P90 tolerates.
    """
    ready = _condition_status(status, "Ready")
    if ready is None or ready.get("status") != "True":
        return None
    created = parse_rfc3339(metadata.get("creationTimestamp"))
    ready_at = parse_rfc3339(ready.get("lastTransitionTime"))
    if created is None or ready_at is None or ready_at < created:
        return None
    return ready_at, ready_at - created


def recent_cold_starts(starts: Iterable[tuple[float, float] | None]) -> tuple[float, ...]:
    """Return the cold starts (seconds) of the last :data:`COLD_START_SAMPLES` pods to become Ready,
    oldest first, from :func:`cold_start` of each live pod of a pool (``None`` entries skipped)."""
    known = sorted(s for s in starts if s is not None)
    return tuple(seconds for _, seconds in known[-COLD_START_SAMPLES:])


def pool_state(
    interactive_replicas: int | None,
    batch_replicas: int | None,
    interactive_pods: Iterable[PodPhase],
    batch_pods: Iterable[PodPhase],
    interactive_cold_starts_s: Iterable[tuple[float, float] | None] = (),
    batch_cold_starts_s: Iterable[tuple[float, float] | None] = (),
) -> PoolState:
    """Return the policy's view of the pools from Deployment replicas and classified pods.

    Args:
        interactive_replicas: ``spec.replicas`` of Deployment ``<name>``; ``None`` when it does not
            exist (yet), read as 0.
        batch_replicas: the same for ``<name>-batch``.
        interactive_pods / batch_pods: :func:`classify_pod` of each live pod of the pool.
        interactive_cold_starts_s / batch_cold_starts_s: :func:`cold_start` of each live pod of
            the pool; the policy's lead time is the P90 of the recent ones
            (:func:`llmscale.policy.leadtime.lead_time`).
    """
    inter, batch = Counter(interactive_pods), Counter(batch_pods)
    return PoolState(
        interactive_replicas=interactive_replicas or 0,
        interactive_ready=inter["ready"],
        interactive_starting=inter["starting"],
        interactive_unschedulable=inter["unschedulable"],
        batch_replicas=batch_replicas or 0,
        batch_ready=batch["ready"],
        interactive_cold_starts_s=recent_cold_starts(interactive_cold_starts_s),
        batch_cold_starts_s=recent_cold_starts(batch_cold_starts_s),
    )
