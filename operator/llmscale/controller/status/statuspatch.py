"""Write status only when something a reader acts on changed: the JSON merge patch between the
object's ``status`` and the one the operator wants, held back while only live values moved. Pure.

What is *material* (written at once): replicas, the decided replica counts, ``observedGeneration``,
each condition's status, reason and message with its numbers masked (``newest sample 12 s old``
and ``newest sample 3 s old`` are the same message), the decision's reasons by their subject and
verdict with numbers masked (:func:`_verdict`: the text before a reason's first ``": "`` and after
its last; the arithmetic between them is volatile),
``status.usageLedger`` (it changes only when a pod goes away), a new scale event, a new
recommended replica count or another size in ``policyState`` (:func:`memory_material`), and a
pool or a headline figure of ``status.pools`` appearing or going away (:func:`figures_appeared`).

What *settles* (written with a material change, or on its own :data:`FIGURES_SETTLE_SECONDS` after
the last status write): a headline figure moving past its deadband (:func:`figures_material`). A
young pool's figures converge over its first minutes — the first minute's tokens are a partial
minute's, its GPU time includes the cold start — and each crossed its deadband at a different
minute, so an object a few minutes old wrote its status about every two minutes (0.83 patches/s
from 100 objects 3–5 minutes old, issue 14); held back, a settling figure costs one write per
:data:`FIGURES_SETTLE_SECONDS` at most, and nothing once it has settled.

What is *volatile* (written only with a material change, or every ``refresh_seconds`` when that is
set): the live signal values, the numbers inside messages and reasons, the decision's time, the
policy memory's repeated recommendations, and the headline figures inside their deadbands. So a
steady hold writes nothing at all.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = [
    "FIGURES_SETTLE_SECONDS",
    "OWNED_STATUS_KEYS",
    "figures_appeared",
    "figures_material",
    "material",
    "memory_material",
    "merge_patch",
    "status_patch",
]

#: Seconds after the last status write before a headline figure's move past its deadband is
#: written on its own (it rides along with any earlier material write). Five minutes: the figures
#: move a whole minute at a time, and a person reading ``kubectl get`` or a GitOps tool's diff acts
#: on conditions and replicas at once, on an hour's SLO share or a day's cost per million tokens
#: within minutes; the live values are on /metrics.
FIGURES_SETTLE_SECONDS = 300.0

#: Top-level ``status`` keys the operator owns; any other key (e.g. Kopf's own) is never touched.
OWNED_STATUS_KEYS: tuple[str, ...] = (
    "observedGeneration",
    "replicas",
    "signals",
    "lastDecision",
    "conditions",
    "pools",
    "usageLedger",
    "batch",
    "policyState",
)

# Status keys judged by rules of their own below, or never material: live signal values change on
# every tick, and the decision time moves with them; the batch backlog's tokens and each Job's
# projected finish move with the Jobs' progress (its counts of Jobs waiting, running and done do
# not wait). ``("lastDecision", "at")`` is a nested path.
_VOLATILE_STATUS_PATHS: tuple[tuple[str, ...], ...] = (
    ("signals",), ("policyState",), ("pools",), ("lastDecision", "at"), ("batch", "jobs"),
    ("batch", "tokensOutstanding"),
)

_NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")

#: Headline figures and how far each must move from the written value to be material:
#: ``("abs", d)`` an absolute step, ``("rel", r)`` a relative one. The SLO share moves by whole
#: minutes (1.7 points on the hour), so any change of its 0.1-point rounding is material; rates,
#: prices and the cold start within 10 % are noise; counters (GPU-hours, minutes judged) and the
#: time stamp never are on their own.
_DEADBANDS: dict[str, tuple[str, float]] = {
    "sloAttainment1hPercent": ("abs", 0.05),
    "goodputTokensPerSecond": ("rel", 0.10),
    "tokensPerSecond": ("rel", 0.10),
    "usdPerMillionTokens": ("rel", 0.10),
    "busyShare": ("abs", 0.10),
    "kvCacheUtilizationMean": ("abs", 0.10),
    "coldStartP90Seconds": ("rel", 0.10),
    "gpus": ("abs", 0.5),
}


def _masked(text: object) -> object:
    return _NUMBER.sub("#", text) if isinstance(text, str) else text


def _verdict(reason: object) -> object:
    """A decision reason as far as it is material: its subject (before the first ``": "``) and its
    verdict (after the last), numbers masked; a reason without one whole, masked (a time such as
    ``22:00`` or a URL has no space after its colon, so it splits nothing). The load
    signal's explanation between them changes wording from tick to tick on a steady load (``arrivals
    0.20 requests/s (finished) needs 1 …: holds 1`` against ``arrivals 0.20 requests/s, the mean of
    the last 3 windows (…) needs 1 …: holds 1``), and made every object write its status every
    other tick (3.5 writes a second from 100 objects)."""
    if not isinstance(reason, str):
        return reason
    masked = _NUMBER.sub("#", reason)
    if ": " not in masked:
        return masked
    return f"{masked.split(': ', 1)[0]}: … : {masked.rsplit(': ', 1)[1]}"


def _stable(status: Mapping[str, Any]) -> dict[str, Any]:
    """``status`` without its volatile paths, numbers masked in messages, reasons by their verdict."""
    out = _without(status, _VOLATILE_STATUS_PATHS)
    conditions = out.get("conditions")
    if isinstance(conditions, list):
        out["conditions"] = [
            {k: (_masked(v) if k == "message" else v) for k, v in c.items()} if isinstance(c, Mapping) else c
            for c in conditions
        ]
    decision = out.get("lastDecision")
    if isinstance(decision, dict) and isinstance(decision.get("reasons"), list):
        decision["reasons"] = [_verdict(r) for r in decision["reasons"]]
    return out


def memory_material(old: object, new: object) -> bool:
    """Whether the policy memory ``new`` must be saved over ``old`` (both ``status.policyState``).

    Material: a scale event ``old`` lacks, a newest recommendation whose replica count differs
    from ``old``'s newest, or another ``replicas`` (the size the memory's scale events end at). Not
    material: more recommendations of the same count, and entries pruned as they age. Safe across a restart because :meth:`ObjectMemory.restored_policy_memory` reads the
    saved memory's newest recommendation as held until the restart: every recommendation made since
    the write had that count (else it would have been written), so the restored stabilisation
    windows see the same counts, held at least as long.
    """
    def parts(memory: object) -> tuple[set[tuple[float, int]], int | None, object]:
        if not isinstance(memory, Mapping):
            return set(), None, None
        events = {(float(e[0]), int(e[1])) for e in memory.get("scaleEvents") or ()
                  if isinstance(e, list | tuple) and len(e) == 2}
        recs = [r for r in memory.get("recommendations") or () if isinstance(r, list | tuple) and len(r) == 2]
        return events, (int(recs[-1][1]) if recs else None), memory.get("replicas")

    old_events, old_newest, old_replicas = parts(old)
    new_events, new_newest, new_replicas = parts(new)
    return (bool(new_events - old_events) or (new_newest is not None and new_newest != old_newest)
            or new_replicas != old_replicas)


def figures_appeared(old: object, new: object) -> bool:
    """Whether a pool, or a deadbanded figure of a pool, of ``status.pools`` is in only one of
    ``old`` and ``new``."""
    old_pools = old if isinstance(old, Mapping) else {}
    new_pools = new if isinstance(new, Mapping) else {}
    if set(old_pools) != set(new_pools):
        return True
    for pool, figures in new_pools.items():
        before = old_pools.get(pool)
        if not isinstance(figures, Mapping) or not isinstance(before, Mapping):
            if figures != before:
                return True
            continue
        if any((before.get(key) is None) != (figures.get(key) is None) for key in _DEADBANDS):
            return True
    return False


def figures_material(old: object, new: object) -> bool:
    """Whether ``status.pools`` ``new`` moved past a deadband from ``old`` (a pool or a figure
    appearing or going away, :func:`figures_appeared`, is material too)."""
    if figures_appeared(old, new):
        return True
    old_pools = old if isinstance(old, Mapping) else {}
    new_pools = new if isinstance(new, Mapping) else {}
    for pool, figures in new_pools.items():
        before = old_pools.get(pool)
        if not isinstance(figures, Mapping) or not isinstance(before, Mapping):
            continue  # equal: figures_appeared compared them
        for key, (kind, step) in _DEADBANDS.items():
            a, b = before.get(key), figures.get(key)
            if a is None or b is None:
                continue
            if kind == "abs" and abs(float(b) - float(a)) >= step:
                return True
            if kind == "rel" and abs(float(b) - float(a)) >= step * max(abs(float(a)), 1e-9):
                return True
    return False


def material(old: Mapping[str, Any], new: Mapping[str, Any], *, figure_moves: bool = True) -> bool:
    """Whether the operator-owned status ``new`` differs from ``old`` in something a reader acts on
    (module docstring); with ``figure_moves=False``, a headline figure moving past its deadband does
    not count (one appearing or going away still does)."""
    if merge_patch(_stable(old), _stable(new)):
        return True
    if "policyState" in new and memory_material(old.get("policyState"), new.get("policyState")):
        return True
    if "pools" not in new:
        return False
    if figure_moves:
        return figures_material(old.get("pools"), new.get("pools"))
    return figures_appeared(old.get("pools"), new.get("pools"))


def merge_patch(old: Any, new: Any) -> Any:
    """Return the JSON merge patch (RFC 7386) that turns ``old`` into ``new``; ``{}`` if equal.

    Dicts are diffed key by key (a key missing from ``new`` becomes ``None``, which deletes it);
    anything else, lists included, is replaced whole.
    """
    if not isinstance(old, Mapping) or not isinstance(new, Mapping):
        return copy.deepcopy(new)
    patch: dict[str, Any] = {}
    for key in old.keys() | new.keys():
        if key not in new:
            patch[key] = None
        elif key not in old:
            patch[key] = copy.deepcopy(new[key])
        elif old[key] != new[key]:
            patch[key] = merge_patch(old[key], new[key])
    return patch


def _without(status: Mapping[str, Any], paths: Iterable[tuple[str, ...]]) -> dict[str, Any]:
    out = copy.deepcopy(dict(status))
    for path in paths:
        node: Any = out
        for key in path[:-1]:
            node = node.get(key) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node.pop(path[-1], None)
    return out


def status_patch(
    previous: Mapping[str, Any] | None,
    desired: Mapping[str, Any],
    *,
    now: float,
    last_written_at: float | None,
    refresh_seconds: float | None,
) -> dict[str, Any] | None:
    """Return the merge patch of ``status`` to write now, or ``None`` when nothing should be written.

    Only :data:`OWNED_STATUS_KEYS` present in ``desired`` are compared; other status keys are left
    alone. A :func:`material` change is written at once, with the volatile parts riding along,
    except a headline figure's move past its deadband, written once :data:`FIGURES_SETTLE_SECONDS`
    have passed since ``last_written_at`` (loop-clock seconds; ``None`` = not written by this
    process: at once); a change of only volatile parts is written when ``refresh_seconds`` is set
    and that long has passed since ``last_written_at``, else never.

    Args:
        previous: the object's current ``status``.
        desired: the operator-owned status it should have (e.g. from :func:`build_status`).
        now: the same clock as ``last_written_at``, in seconds.
        refresh_seconds: ``None`` (the default setting): volatile parts never cause a write.
    """
    old = {k: v for k, v in (previous or {}).items() if k in OWNED_STATUS_KEYS and k in desired}
    new = {k: v for k, v in desired.items() if k in OWNED_STATUS_KEYS}
    patch = merge_patch(old, new)
    if not patch:
        return None
    figure_moves = last_written_at is None or now - last_written_at >= FIGURES_SETTLE_SECONDS
    if material(old, new, figure_moves=figure_moves):
        return patch  # type: ignore[no-any-return]
    if refresh_seconds is not None and (last_written_at is None or now - last_written_at >= refresh_seconds):
        return patch  # type: ignore[no-any-return]
    return None
