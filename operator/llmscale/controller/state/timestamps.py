"""Kubernetes time stamps (``metav1.Time``) from and to seconds since the epoch, leniently: the
grammar is :mod:`llmscale.timestamps`'s, the one RFC 3339 parser. Pure."""

from __future__ import annotations

from llmscale import timestamps
from llmscale.timestamps import rfc3339

__all__ = ["parse_rfc3339", "rfc3339"]


def parse_rfc3339(text: object) -> float | None:
    """Return a ``metav1.Time`` (e.g. ``2026-11-30T13:55:02Z``) as seconds since the epoch, or
    ``None`` when it is missing or not a time stamp (never raises: a bad object loses nothing). A
    time without offset is UTC (Kopf's peering ``lastseen``), never the host's zone."""
    if not isinstance(text, str) or not text:
        return None
    try:
        return timestamps.parse_rfc3339(text, naive_is_utc=True)
    except ValueError:
        return None
