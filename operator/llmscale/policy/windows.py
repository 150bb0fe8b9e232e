"""Trough windows: is the batch pool's window open at an instant? Pure, time passed in.

A :class:`~llmscale.api.TroughWindow` is a daily wall-clock window (``start``/``end`` as ``HH:MM``
in an IANA time zone, on some days of the week). The rules, all on local *wall-clock* time as
:mod:`zoneinfo` gives it for the instant:

- ``start < end``: open on a listed day from ``start`` (inclusive) to ``end`` (exclusive).
- ``end < start``: the window crosses midnight and belongs to the day it *starts*: open on a listed
  day from ``start`` to midnight, and on the following day (listed or not) from midnight to ``end``.
  A Fri 22:00–06:00 window runs into Saturday morning even when Saturday is not listed, and a
  Monday-only window does not open at 00:00–06:00 on Monday.
- Daylight saving time follows the wall clock: on the spring-forward night the missing local hour
  never happens, so a 22:00–06:00 window in ``Europe/London`` lasts 7 hours, and a window that
  starts inside the gap (01:30 in London) opens when the clocks jump (02:00 BST). On the fall-back
  night the repeated hour happens twice, so the same window lasts 9 hours, and a window lying wholly
  inside the repeated hour (01:10–01:50) is open during both passes.

Source of the time-zone rules: the IANA tz database as shipped by the pinned ``tzdata`` package.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from llmscale.api import DAYS_OF_WEEK, TroughWindow

__all__ = ["batch_window_open", "describe_window", "local_time"]


def local_time(now: float, timezone: str) -> datetime:
    """Return the aware local datetime of ``now`` (seconds since the Unix epoch) in ``timezone``.

    Raises:
        zoneinfo.ZoneInfoNotFoundError: ``timezone`` is not an IANA zone name (the API rejects such
            specs, so this only happens for hand-built windows).
    """
    return datetime.fromtimestamp(now, tz=UTC).astimezone(ZoneInfo(timezone))


def _window_open(window: TroughWindow, now: float) -> bool:
    local = local_time(now, window.timezone)
    wall = local.time()  # naive wall-clock time
    today = DAYS_OF_WEEK[local.weekday()]
    yesterday = DAYS_OF_WEEK[(local - timedelta(days=1)).weekday()]
    start, end = window.start_time(), window.end_time()
    if start < end:
        return today in window.days and start <= wall < end
    # Crosses midnight: the evening part belongs to today, the morning part to yesterday's window.
    return (today in window.days and wall >= start) or (yesterday in window.days and wall < end)


def batch_window_open(windows: Sequence[TroughWindow], now: float) -> TroughWindow | None:
    """Return the first of ``windows`` open at ``now`` (seconds since the Unix epoch), or ``None``.

    Args:
        windows: trough windows, in spec order (``spec.batch.windows``).
        now: the instant to judge, seconds since the Unix epoch.

    Returns:
        The first open window (the one named in the ``BatchWindowOpen`` condition), or ``None`` when
        every window is closed; then the batch pool has 0 replicas.

    Raises:
        zoneinfo.ZoneInfoNotFoundError: a window names an unknown time zone.
    """
    for window in windows:
        if _window_open(window, now):
            return window
    return None


def describe_window(window: TroughWindow) -> str:
    """Return ``window`` as one short phrase, e.g. ``22:00–06:00 Europe/London Mon–Fri``."""
    days = window.days
    if len(days) == 7:
        day_text = "daily"
    else:
        indices = sorted(DAYS_OF_WEEK.index(d) for d in days)
        contiguous = indices == list(range(indices[0], indices[-1] + 1))
        if contiguous and len(indices) > 2:
            day_text = f"{DAYS_OF_WEEK[indices[0]]}–{DAYS_OF_WEEK[indices[-1]]}"
        else:
            day_text = ",".join(DAYS_OF_WEEK[i] for i in indices)
    crossing = " (crosses midnight)" if window.end_time() < window.start_time() else ""
    return f"{window.start}–{window.end} {window.timezone} {day_text}{crossing}"
