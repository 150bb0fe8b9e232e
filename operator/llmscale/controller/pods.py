"""What the pods of a pool say about it: each pod classified (ready, starting, unschedulable) and
the pools' :class:`~llmscale.policy.types.PoolState` built from those classes. Pure.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any, Literal

from llmscale.policy.types import PoolState

__all__ = ["PodPhase", "classify_pod", "pool_state"]

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


def pool_state(
    interactive_replicas: int | None,
    batch_replicas: int | None,
    interactive_pods: Iterable[PodPhase],
    batch_pods: Iterable[PodPhase],
) -> PoolState:
    """Return the policy's view of the pools from Deployment replicas and classified pods.

    Args:
        interactive_replicas: ``spec.replicas`` of Deployment ``<name>``; ``None`` when it does not
            exist (yet), read as 0.
        batch_replicas: the same for ``<name>-batch``.
        interactive_pods / batch_pods: :func:`classify_pod` of each live pod of the pool.
    """
    inter, batch = Counter(interactive_pods), Counter(batch_pods)
    return PoolState(
        interactive_replicas=interactive_replicas or 0,
        interactive_ready=inter["ready"],
        interactive_starting=inter["starting"],
        interactive_unschedulable=inter["unschedulable"],
        batch_replicas=batch_replicas or 0,
        batch_ready=batch["ready"],
    )
