"""Write status only on change: the JSON merge patch between the object's ``status`` and the one
the operator wants, held back while only live values changed. Pure; the loop clock is passed in.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["OWNED_STATUS_KEYS", "merge_patch", "status_patch"]

#: Top-level ``status`` keys the operator owns; any other key (e.g. Kopf's own) is never touched.
OWNED_STATUS_KEYS: tuple[str, ...] = (
    "observedGeneration",
    "replicas",
    "signals",
    "lastDecision",
    "conditions",
    "batch",
    "policyState",
)

# Status keys whose change alone does not justify a write before the refresh interval: live
# signal values change on every tick, the policy memory grows on every tick, and the decision time
# moves with them; the batch backlog's tokens and each Job's projected finish move with the Jobs'
# progress (its counts of Jobs waiting, running and done do not wait). ``("lastDecision", "at")``
# is a nested path.
_VOLATILE_STATUS_PATHS: tuple[tuple[str, ...], ...] = (
    ("signals",), ("policyState",), ("lastDecision", "at"), ("batch", "jobs"), ("batch", "tokensOutstanding"),
)


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
    refresh_seconds: float,
) -> dict[str, Any] | None:
    """Return the merge patch of ``status`` to write now, or ``None`` when nothing should be written.

    Only :data:`OWNED_STATUS_KEYS` present in ``desired`` are compared; other status keys are left
    alone. A change of replicas, decision or conditions is written at once; a change of only the
    volatile parts (live signals, policy memory, decision time) waits until ``refresh_seconds``
    have passed since ``last_written_at`` (loop-clock seconds; ``None`` = never written).

    Args:
        previous: the object's current ``status``.
        desired: the operator-owned status it should have (e.g. from :func:`build_status`).
        now: the same clock as ``last_written_at``, in seconds.
    """
    old = {k: v for k, v in (previous or {}).items() if k in OWNED_STATUS_KEYS and k in desired}
    new = {k: v for k, v in desired.items() if k in OWNED_STATUS_KEYS}
    patch = merge_patch(old, new)
    if not patch:
        return None
    material = merge_patch(_without(old, _VOLATILE_STATUS_PATHS), _without(new, _VOLATILE_STATUS_PATHS))
    if not material and last_written_at is not None and now - last_written_at < refresh_seconds:
        return None
    return patch  # type: ignore[no-any-return]
