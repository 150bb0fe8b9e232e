"""Daily wall-clock windows (batch troughs, calendar floors): is one open at an instant? Pure, time passed in.

A :class:`~llmscale.api.TroughWindow` (and a :class:`~llmscale.api.ScheduledMinimum`, which has the
same fields) is a daily window: ``start``/``end`` as ``HH:MM`` in an IANA time zone, on some days of
the week. Each listed day it opens once, for one interval of instants:

- it **opens** at ``start`` on that day's local wall clock and **closes** at the next ``end`` (the
  same day when ``start < end``; the next day, listed or not, when ``end < start`` — the window
  crosses midnight and belongs to the day it starts: a Fri 22:00–06:00 window runs into Saturday
  morning even when Saturday is not listed, and a Monday-only window is not open at 03:00 on Monday);
- **spring forward** (a wall-clock time that does not happen that day): a ``start`` in the skipped
  hour opens at the first instant after the jump; an ``end`` in it closes the window its nominal
  length after it opened. So a window wholly inside the skipped hour (``Europe/London`` 01:10–01:50
  on 2026-03-29) still opens, at 02:00 BST for its 40 minutes, and a daily 22:00–06:00 window lasts
  7 hours that night;
- **fall back** (a wall-clock time that happens twice): ``start`` and ``end`` are their first
  occurrence, so a window opens at most once a day: ``Europe/London`` 01:30–02:30 on 2026-10-25 is
  open from 01:30 BST to 02:30 GMT, two hours in one piece, and 01:10–01:50 only in the first pass.
  A daily 22:00–06:00 window lasts 9 hours that night.

The window is open when ``now`` lies in the interval of today's or yesterday's opening.

Source of the time-zone rules: the IANA tz database as shipped by the pinned ``tzdata`` package.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import UTC, date, datetime, time, timedelta
from typing import Protocol
from zoneinfo import ZoneInfo

from llmscale.api import DAYS_OF_WEEK

__all__ = [
    "DailyWindow",
    "batch_window_open",
    "describe_window",
    "local_time",
    "open_interval",
    "scheduled_minimum",
]


class DailyWindow(Protocol):
    """What a daily window has (``TroughWindow``, ``ScheduledMinimum``)."""

    @property
    def start(self) -> str: ...

    @property
    def end(self) -> str: ...

    @property
    def timezone(self) -> str: ...

    @property
    def days(self) -> Sequence[str]: ...

    def start_time(self) -> time: ...

    def end_time(self) -> time: ...


def local_time(now: float, timezone: str) -> datetime:
    """Return the aware local datetime of ``now`` (seconds since the Unix epoch) in ``timezone``.

    Raises:
        zoneinfo.ZoneInfoNotFoundError: ``timezone`` is not an IANA zone name (the API rejects such
            specs, so this only happens for hand-built windows).
    """
    return datetime.fromtimestamp(now, tz=UTC).astimezone(ZoneInfo(timezone))


def _instant(day: date, wall: time, tz: ZoneInfo) -> tuple[float, bool]:
    """``(instant, exists)`` of the wall-clock ``wall`` on ``day`` in ``tz``: its first occurrence,
    or, when it does not happen that day (spring forward), the first instant after the jump."""
    local = datetime.combine(day, wall)
    first = local.replace(tzinfo=tz, fold=0).timestamp()
    if datetime.fromtimestamp(first, tz).replace(tzinfo=None) == local:
        return first, True  # fold=0 is the first occurrence of a repeated time (PEP 495)
    # In a gap, fold=0 reads the wall time with the offset before the jump and fold=1 with the one
    # after (PEP 495): the jump lies between the two instants.
    other = local.replace(tzinfo=tz, fold=1).timestamp()
    return _offset_change(min(first, other), max(first, other), tz), False


def _offset_change(lo: float, hi: float, tz: ZoneInfo) -> float:
    """The first instant in ``(lo, hi]`` with ``hi``'s UTC offset (a spring-forward jump), to the second."""
    after = datetime.fromtimestamp(hi, tz).utcoffset()
    a, b = math.floor(lo), math.ceil(hi)  # offsets change on whole seconds
    while b - a > 1:
        mid = (a + b) // 2
        if datetime.fromtimestamp(mid, tz).utcoffset() == after:
            b = mid
        else:
            a = mid
    return float(b)


def open_interval(window: DailyWindow, day: date) -> tuple[float, float] | None:
    """The interval ``[opens, closes)`` of instants (seconds since the epoch) of ``window``'s opening
    on ``day`` (the module docstring's rules), or ``None`` when ``day`` is not one of its days.

    Raises:
        zoneinfo.ZoneInfoNotFoundError: an unknown time zone.
    """
    if DAYS_OF_WEEK[day.weekday()] not in window.days:
        return None
    tz = ZoneInfo(window.timezone)
    start, end = window.start_time(), window.end_time()
    end_day = day if start < end else day + timedelta(days=1)
    opens, _ = _instant(day, start, tz)
    closes, exists = _instant(end_day, end, tz)
    if not exists:
        nominal = datetime.combine(end_day, end) - datetime.combine(day, start)
        closes = opens + nominal.total_seconds()
    return opens, max(closes, opens)


def _window_open(window: DailyWindow, now: float) -> bool:
    today = local_time(now, window.timezone).date()
    for day in (today - timedelta(days=1), today):
        interval = open_interval(window, day)
        if interval is not None and interval[0] <= now < interval[1]:
            return True
    return False


def batch_window_open(windows: Sequence[DailyWindow], now: float) -> DailyWindow | None:
    """Return the first of ``windows`` open at ``now`` (seconds since the Unix epoch), or ``None``.

    Args:
        windows: daily windows, in spec order (``spec.batch.windows``, ``spec.replicas.schedule``).
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


class _Floor(DailyWindow, Protocol):
    @property
    def min(self) -> int: ...


def scheduled_minimum(windows: Sequence[_Floor], now: float, lead_s: float) -> tuple[int, _Floor | None]:
    """The calendar floor at ``now``: the largest ``min`` of the windows open at ``now`` or at
    ``now + lead_s``, so that the replicas are asked for one lead time early and Ready when the
    window opens.

    Returns:
        ``(replicas, window)``: ``(0, None)`` when no window is open then.
    """
    best: tuple[int, _Floor | None] = (0, None)
    for window in windows:
        if (_window_open(window, now) or _window_open(window, now + lead_s)) and window.min > best[0]:
            best = (window.min, window)
    return best


def describe_window(window: DailyWindow) -> str:
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
