"""What the pods of a pool say about it: each pod classified (ready, starting, unschedulable,
failed), its measured cold start, and the pools' :class:`~llmscale.policy.types.PoolState` built
from those. Pure.

A *failed* pod is live and will not serve by waiting: a container in a back-off or a configuration
error (:data:`FAILED_WAITING_REASONS`), or restarted :data:`FAILED_RESTARTS` times without becoming
Ready (a crash loop between two back-offs). A pod not Ready long past the pool's own cold starts is
failed too, judged at tick time (:mod:`llmscale.controller.failedpods`). Failed pods are not
capacity on its way: the policy asks for their replacements.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any, Literal

from llmscale.controller.state.timestamps import parse_rfc3339
from llmscale.policy.leadtime import COLD_START_SAMPLES
from llmscale.policy.types import PoolState

__all__ = [
    "FAILED_RESTARTS",
    "FAILED_WAITING_REASONS",
    "PodPhase",
    "classify_pod",
    "cold_start",
    "pod_failure",
    "pool_state",
    "recent_cold_starts",
]

PodPhase = Literal["ready", "starting", "unschedulable", "failed"]

#: Waiting reasons of a container (``state.waiting.reason``) that waiting will not cure: the
#: kubelet's back-offs after a crash or a failed image pull, and errors in the pod's own
#: configuration (a missing Secret or ConfigMap key, a bad image name). ``ErrImagePull`` (the first
#: failed pull, which a registry's blip also gives) and ``ContainerCreating`` are not in it.
#: Source: kubelet ``pkg/kubelet/images/types.go`` and ``pkg/kubelet/container/sync_result.go``.
FAILED_WAITING_REASONS = frozenset({
    "CrashLoopBackOff",
    "ImagePullBackOff",
    "ErrImageNeverPull",
    "InvalidImageName",
    "CreateContainerConfigError",
    "CreateContainerError",
    "RunContainerError",
})

#: Restarts of one container, without the pod becoming Ready, that make it failed even while the
#: container runs between two back-offs (``state.running``, no waiting reason): an engine that
#: crashes in its cold start three times (a broken GPU, weights that do not fit) will not serve.
#: One or two restarts are tolerated: a first start can lose a race with a model cache's mount.
FAILED_RESTARTS = 3


def _condition_status(status: Mapping[str, Any], type_: str) -> Mapping[str, Any] | None:
    for cond in status.get("conditions") or ():
        if cond.get("type") == type_:
            return cond  # type: ignore[no-any-return]
    return None


def _containers(status: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The statuses of the pod's init and app containers, in that order."""
    out: list[Mapping[str, Any]] = []
    for key in ("initContainerStatuses", "containerStatuses"):
        out.extend(c for c in status.get(key) or () if isinstance(c, Mapping))
    return out


def _last_termination(container: Mapping[str, Any]) -> str:
    """``last terminated Error (exit code 1)`` from ``lastState.terminated``, or ``""``."""
    terminated = (container.get("lastState") or {}).get("terminated") or {}
    if not terminated:
        return ""
    reason = terminated.get("reason") or "without a reason"
    code = terminated.get("exitCode")
    return f", last terminated {reason}" + (f" (exit code {code})" if code is not None else "")


def pod_failure(metadata: Mapping[str, Any], status: Mapping[str, Any]) -> str | None:
    """Return why a live pod that is not Ready will never serve by waiting, or ``None``.

    E.g. ``container engine CrashLoopBackOff after 37 restarts, last terminated Error (exit code 1)``.
    Failed: a container (init or app) waiting with one of :data:`FAILED_WAITING_REASONS`, or
    restarted :data:`FAILED_RESTARTS` times or more. A Ready pod, a terminating or a finished one
    is never failed here (a Ready pod serves whatever its restarts).
    """
    if metadata.get("deletionTimestamp") or status.get("phase") in ("Succeeded", "Failed"):
        return None
    ready = _condition_status(status, "Ready")
    if ready is not None and ready.get("status") == "True":
        return None
    for container in _containers(status):
        name = container.get("name") or "?"
        waiting = ((container.get("state") or {}).get("waiting") or {}).get("reason")
        try:
            restarts = int(container.get("restartCount") or 0)
        except (TypeError, ValueError):
            restarts = 0
        after = f" after {restarts} restarts" if restarts else ""
        if waiting in FAILED_WAITING_REASONS:
            return f"container {name} {waiting}{after}{_last_termination(container)}"
        if restarts >= FAILED_RESTARTS:
            return f"container {name} restarted {restarts} times without becoming Ready{_last_termination(container)}"
    return None


def classify_pod(metadata: Mapping[str, Any], status: Mapping[str, Any]) -> PodPhase | None:
    """Return what one pod contributes to its pool: ready, starting, unschedulable, failed, or nothing.

    - ``None`` for a terminating pod (``deletionTimestamp`` set) or a finished one (phase
      ``Succeeded``/``Failed``): neither serves nor will serve.
    - ``ready`` when the ``Ready`` condition is ``True``.
    - ``failed`` when :func:`pod_failure` says it will not serve by waiting (crash loop, image
      pull back-off, configuration error): not capacity on its way.
    - ``unschedulable`` when ``PodScheduled`` is ``False`` with reason ``Unschedulable`` (e.g. no
      node has a free GPU): the policy stops adding replicas while such pods exist.
    - ``starting`` otherwise: scheduled or about to be, in its cold start.
    """
    if metadata.get("deletionTimestamp") or status.get("phase") in ("Succeeded", "Failed"):
        return None
    ready = _condition_status(status, "Ready")
    if ready is not None and ready.get("status") == "True":
        return "ready"
    if pod_failure(metadata, status) is not None:
        return "failed"
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

    Pods beyond ``spec.replicas`` are a rollout's surge (``maxSurge``): the Deployment controller's
    replacements, not capacity llmscale asked for. They are counted in ``interactive_surge`` and
    taken out of the pods that are not Ready — failed first, then unschedulable, then starting
    (a surge pod is the newest, so it is the one not Ready yet) — so that a rollout's surge pod
    neither holds the latency guard nor, stuck without a GPU, makes the InsufficientCapacity clamp
    refuse a scale-up.

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
    replicas = interactive_replicas or 0
    surge = max(0, sum(inter.values()) - replicas)
    left = surge
    not_asked: dict[str, int] = {}
    for phase in ("failed", "unschedulable", "starting"):
        not_asked[phase] = min(left, inter[phase])
        left -= not_asked[phase]
    return PoolState(
        interactive_replicas=replicas,
        interactive_ready=inter["ready"],
        interactive_starting=inter["starting"] - not_asked["starting"],
        interactive_unschedulable=inter["unschedulable"] - not_asked["unschedulable"],
        interactive_failed=inter["failed"] - not_asked["failed"],
        interactive_surge=surge,
        batch_replicas=batch_replicas or 0,
        batch_ready=batch["ready"],
        interactive_cold_starts_s=recent_cold_starts(interactive_cold_starts_s),
        batch_cold_starts_s=recent_cold_starts(batch_cold_starts_s),
    )
