"""Kubernetes time stamps (``metav1.Time``) from seconds since the epoch. Pure."""

from __future__ import annotations

from datetime import UTC, datetime

__all__ = ["parse_rfc3339", "rfc3339"]


def rfc3339(t: float) -> str:
    """Return ``t`` (seconds since the epoch) as RFC 3339 UTC with second precision, the format
    of ``metav1.Time``."""
    return datetime.fromtimestamp(t, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_rfc3339(text: object) -> float | None:
    """Return a ``metav1.Time`` (e.g. ``2026-11-30T13:55:02Z``) as seconds since the epoch, or
    ``None`` when it is missing or not a time stamp (never raises: a bad object loses nothing)."""
    if not isinstance(text, str) or not text:
        return None
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()
