"""Kubernetes time stamps (``metav1.Time``) from seconds since the epoch. Pure."""

from __future__ import annotations

from datetime import UTC, datetime

__all__ = ["rfc3339"]


def rfc3339(t: float) -> str:
    """Return ``t`` (seconds since the epoch) as RFC 3339 UTC with second precision, the format
    of ``metav1.Time``."""
    return datetime.fromtimestamp(t, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
