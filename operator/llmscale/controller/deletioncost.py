"""Which pods a ReplicaSet removes first: ``controller.kubernetes.io/pod-deletion-cost`` from each
pod's load, so that a scale-down (or the old ReplicaSet of a rollout) removes the least-loaded
ready pods and leaves the busy ones serving. Pure.

The ReplicaSet controller deletes, among pods otherwise alike (all scheduled, running and Ready),
those with the lowest deletion cost first (Kubernetes docs, "ReplicaSet", "Pod deletion cost";
beta and on by default since 1.22). The cost here is the pod's requests in flight, running plus
waiting, from the tick's signal snapshot. An idle pod costs 0 and goes first; a pod whose load is
unknown (no series in Prometheus yet, or a stalled engine) costs :data:`UNKNOWN_COST`, above any
real load: unknown is never read as idle.

Writes are kept few. Between scale-downs an annotation is rewritten only when the load changed
meaningfully (:func:`meaningful`: to or from idle, or by a factor of 2), so a fleet whose load
wobbles by a request or two writes nothing; on a tick that scales the pool down, every pod whose
cost differs at all is rewritten first, so the ReplicaSet acts on the freshest order. A load that
turns unknown never overwrites a measured cost: a pod missing from one snapshot (a late scrape)
keeps its last measured place in the order, and only a pod never measured costs
:data:`UNKNOWN_COST`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from llmscale.signals.snapshot import SignalSnapshot

__all__ = ["ANNOTATION", "UNKNOWN_COST", "cost_updates", "meaningful", "parse_cost", "pod_loads"]

#: The pod annotation the ReplicaSet controller reads (an int32, as a decimal string).
ANNOTATION = "controller.kubernetes.io/pod-deletion-cost"
#: Cost of a pod whose load is unknown: above any engine's in-flight requests (vLLM's
#: ``max_num_seqs`` is at most a few thousand), so such a pod goes after every pod known to be
#: idle or lightly loaded.
UNKNOWN_COST = 1_000_000


def parse_cost(value: str | None) -> int | None:
    """Return the cost in an annotation value, ``None`` when absent or not an integer."""
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        return None


def pod_loads(snapshot: SignalSnapshot, pods: Iterable[str]) -> dict[str, int] | None:
    """Return each pod's cost: its running + waiting requests, rounded (requests).

    Args:
        snapshot: the pool's signal snapshot (``snapshot.pods``, one entry per reporting pod).
        pods: names of the pool's live, Ready pods (from the pods index).

    Returns:
        ``{pod: cost}`` for every pod in ``pods`` (:data:`UNKNOWN_COST` where its load is
        unknown), or ``None`` when the snapshot failed as a whole: then nothing is known and
        nothing is written.
    """
    if snapshot.error is not None and not snapshot.pods:
        return None
    by_name = {p.pod: p for p in snapshot.pods}
    out: dict[str, int] = {}
    for name in pods:
        signals = by_name.get(name)
        if signals is None or signals.stalled or signals.running_requests is None:
            out[name] = UNKNOWN_COST
            continue
        load = signals.running_requests + (signals.queue_depth or 0.0)
        out[name] = max(0, min(UNKNOWN_COST, round(load)))
    return out


def meaningful(old: int | None, new: int) -> bool:
    """Whether a cost changed enough to be written between scale-downs: never written (``old`` is
    ``None``), to or from idle (0), to or from unknown, or by a factor of 2 or more."""
    if old is None or old == new:
        return old is None
    if 0 in (old, new) or UNKNOWN_COST in (old, new):
        return True
    return max(old, new) >= 2 * min(old, new)


def cost_updates(current: Mapping[str, int | None], loads: Mapping[str, int], *, exact: bool) -> dict[str, int]:
    """Return ``{pod: cost}`` of the annotations to write.

    Args:
        current: each pod's cost as annotated now (``None``: no or unreadable annotation).
        loads: each pod's cost now (:func:`pod_loads`).
        exact: rewrite every cost that differs (a tick that scales the pool down), rather than
            only the :func:`meaningful` changes.

    The last measured cost stands while a pod's load is unknown: ``cost`` :data:`UNKNOWN_COST`
    over a measured ``old`` writes nothing (a late scrape must not reorder the pods the moment a
    scale-down picks its victims).
    """
    out: dict[str, int] = {}
    for pod, cost in loads.items():
        old = current.get(pod)
        if cost == UNKNOWN_COST and old is not None and old != UNKNOWN_COST:
            continue
        if (exact and old != cost) or meaningful(old, cost):
            out[pod] = cost
    return out
