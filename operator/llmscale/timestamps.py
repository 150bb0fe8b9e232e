"""The one RFC 3339 time stamp grammar: Kubernetes' ``metav1.Time`` (``creationTimestamp``,
``lastTransitionTime``), Kopf's peering ``lastseen`` and the ``llmscale.dev/deadline`` annotation.

``YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)`` (RFC 3339 §5.6 ``date-time``; ``t``/``z`` and a space
for ``T`` accepted, as §5.6's note allows). The checked text is read by the standard library's
``datetime.fromisoformat``, which also rejects impossible dates. Pure.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

__all__ = ["parse_rfc3339", "rfc3339"]

_DATE_TIME = re.compile(r"(\d{4}-\d{2}-\d{2})[Tt ](\d{2}:\d{2}:\d{2}(?:\.\d+)?)([Zz]|[+-]\d{2}:\d{2})?")
_DATE_ONLY = re.compile(r"\d{4}-\d{2}-\d{2}")
#: 9000-01-01T00:00:00Z: later instants are refused, since later steps format times with datetime,
#: which stops at year 9999 (a deadline near it would overflow when a completion window is added).
_YEAR_9000_S = 221_845_392_000.0


def parse_rfc3339(text: str, *, naive_is_utc: bool = False) -> float:
    """Return the RFC 3339 date-time ``text`` as seconds since the Unix epoch.

    Args:
        text: e.g. ``2025-01-06T06:00:00Z``, ``2025-01-06T07:00:00.25+01:00``; surrounding blanks
            are ignored.
        naive_is_utc: read a date-time without offset as UTC instead of refusing it (Kopf writes
            its peering ``lastseen`` from ``datetime.utcnow()``, without one); never the host's zone.

    Raises:
        ValueError: not a date-time, one without offset (unless ``naive_is_utc``), an impossible
            date, or an instant before 1970 or after the year 9000; the message quotes ``text``.
    """
    s = text.strip()
    match = _DATE_TIME.fullmatch(s)
    if match is None or (match.group(3) is None and not naive_is_utc):
        if match is not None or _DATE_ONLY.fullmatch(s):
            raise ValueError(f"{text!r} has no UTC offset (write Z or ±HH:MM)")
        raise ValueError(f"{text!r} is not YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)")
    date, clock, offset = match.groups()
    offset = "+00:00" if offset is None or offset in "Zz" else offset
    value = datetime.fromisoformat(f"{date}T{clock}{offset}")  # ValueError for e.g. month 13
    seconds = value.timestamp()
    if not 0 <= seconds < _YEAR_9000_S:
        raise ValueError(f"{text!r} is before 1970 or after 9000")
    return seconds


def rfc3339(t: float) -> str:
    """Return ``t`` (seconds since the epoch) as RFC 3339 UTC with second precision, the format
    of ``metav1.Time``."""
    return datetime.fromtimestamp(t, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
