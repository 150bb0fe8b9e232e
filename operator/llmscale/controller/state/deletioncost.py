"""Which pods a ReplicaSet removes first: ``controller.kubernetes.io/pod-deletion-cost`` from each
pod's load and the worth of its prefix cache, so that a scale-down (or the old ReplicaSet of a
rollout) removes the least-loaded ready pods, among those the one whose cache saves least, and
leaves the busy ones serving. Pure.

The ReplicaSet controller deletes, among pods otherwise alike (all scheduled, running and Ready),
those with the lowest deletion cost first (Kubernetes docs, "ReplicaSet", "Pod deletion cost";
beta and on by default since 1.22). The cost is ``load × 1000 + cache``: ``load`` the pod's
requests in flight (running plus waiting, at most :data:`LOAD_MAX`), ``cache`` its share of the
pool's prefix-cache hits in permille (0–999: prompt tokens served from its cache per second over
the pool's). Load comes first, so no in-flight request is traded for a cache; among pods equally
loaded (typically the idle ones a scale-down takes) the one whose cache serves fewest tokens goes.
A pod whose load is unknown costs :data:`UNKNOWN_COST`, above any real cost: unknown is never
read as idle. docs/operator.md ("Drain") has the rule and an example.

Writes are kept few. Between scale-downs an annotation is rewritten only when the load changed
meaningfully (:func:`meaningful`: to or from idle, or by a factor of 2; the cache share alone never
triggers a write), so a fleet whose load wobbles writes nothing; on a tick that scales the pool
down, every pod whose cost differs at all is rewritten first, so the ReplicaSet acts on the freshest
order. A load that turns unknown never overwrites a measured cost: a pod missing from one snapshot
(a late scrape) keeps its last measured place in the order, and only a pod never measured costs
:data:`UNKNOWN_COST`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from llmscale.signals.snapshot import SignalSnapshot

__all__ = [
    "ANNOTATION",
    "CACHE_SCALE",
    "LOAD_MAX",
    "UNKNOWN_COST",
    "cost_updates",
    "load_of",
    "meaningful",
    "parse_cost",
    "pod_costs",
]

#: The pod annotation the ReplicaSet controller reads (an int32, as a decimal string).
ANNOTATION = "controller.kubernetes.io/pod-deletion-cost"
#: One request in flight outweighs any cache: the cache share is in permille, 0–999.
CACHE_SCALE = 1000
#: Prefix-cache hits above this many tokens per second count as this many (keeps the pool's sum
#: finite whatever a pod reports).
HITS_MAX = 1e12
#: Loads above this many requests in flight tie (a pod that busy is never the one to remove).
LOAD_MAX = 999
#: Cost of a pod whose load is unknown: above any measured cost (``LOAD_MAX × 1000 + 999``), so
#: such a pod goes after every pod known to be idle or loaded.
UNKNOWN_COST = 1_000_000


def parse_cost(value: str | None) -> int | None:
    """Return the cost in an annotation value, ``None`` when absent or not an integer."""
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        return None


def load_of(cost: int) -> int:
    """Return the requests in flight a cost stands for (:data:`UNKNOWN_COST` stays itself)."""
    return cost if cost >= UNKNOWN_COST else cost // CACHE_SCALE


def pod_costs(snapshot: SignalSnapshot, pods: Iterable[str]) -> dict[str, int] | None:
    """Return each pod's deletion cost (module docstring): ``load × 1000 + cache``.

    Args:
        snapshot: the pool's signal snapshot (``snapshot.pods``, one entry per reporting pod).
        pods: names of the pool's live, Ready pods (from the pods index).

    Returns:
        ``{pod: cost}`` for every pod in ``pods``: ``load`` its running + waiting requests,
        rounded, at most :data:`LOAD_MAX`; ``cache`` its share of the prefix-cache hit tokens per
        second of these pods, in permille, at most 999 (0 where its hits are unknown, or none of
        them hit); :data:`UNKNOWN_COST` where its load is unknown. ``None`` when the snapshot
        failed as a whole: then nothing is known and nothing is written.
    """
    if snapshot.error is not None and not snapshot.pods:
        return None
    names = list(pods)
    by_name = {p.pod: p for p in snapshot.pods}
    known = {n: s for n in names if (s := by_name.get(n)) is not None and not s.stalled
             and s.running_requests is not None}
    # Bounded so that any finite rate sums to a finite total (1e12 tokens/s is beyond any engine).
    hits = {n: min(HITS_MAX, max(0.0, s.prefix_cache_hits_rate or 0.0)) for n, s in known.items()}
    total = sum(hits.values())
    out: dict[str, int] = {}
    for name in names:
        signals = known.get(name)
        if signals is None or signals.running_requests is None:
            out[name] = UNKNOWN_COST
            continue
        load = min(LOAD_MAX, max(0, round(signals.running_requests + (signals.queue_depth or 0.0))))
        cache = min(CACHE_SCALE - 1, int(CACHE_SCALE * hits[name] / total)) if total > 0 else 0
        out[name] = load * CACHE_SCALE + cache
    return out


def meaningful(old: int | None, new: int) -> bool:
    """Whether a cost changed enough to be written between scale-downs: never written (``old`` is
    ``None``), or its load (:func:`load_of`) went to or from idle (0), to or from unknown, or
    changed by a factor of 2 or more. A change of the cache share alone is not meaningful."""
    if old is None:
        return True
    old_load, new_load = load_of(old), load_of(new)
    if old_load == new_load:
        return False
    if 0 in (old_load, new_load) or UNKNOWN_COST in (old_load, new_load):
        return True
    return max(old_load, new_load) >= 2 * min(old_load, new_load)


def cost_updates(current: Mapping[str, int | None], costs: Mapping[str, int], *, exact: bool) -> dict[str, int]:
    """Return ``{pod: cost}`` of the annotations to write.

    Args:
        current: each pod's cost as annotated now (``None``: no or unreadable annotation).
        costs: each pod's cost now (:func:`pod_costs`).
        exact: rewrite every cost that differs (a tick that scales the pool down), rather than
            only the :func:`meaningful` changes.

    The last measured cost stands while a pod's load is unknown: ``cost`` :data:`UNKNOWN_COST`
    over a measured ``old`` writes nothing (a late scrape must not reorder the pods the moment a
    scale-down picks its victims).
    """
    out: dict[str, int] = {}
    for pod, cost in costs.items():
        old = current.get(pod)
        if cost == UNKNOWN_COST and old is not None and old != UNKNOWN_COST:
            continue
        if (exact and old != cost) or (old != cost and meaningful(old, cost)):
            out[pod] = cost
    return out
