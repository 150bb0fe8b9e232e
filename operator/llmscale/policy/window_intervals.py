"""When trough windows open and close: the open intervals of ``spec.batch.windows`` between two
instants. Pure, time passed in.

:func:`llmscale.policy.windows.batch_window_open` answers "open at this instant?"; the batch planner
also needs "when does the open window close?", "when does the next one open?" and "how many open
seconds lie between now and a deadline?". Rather than restate the wall-clock rules (midnight
crossing, days, DST gaps and repeats; see :mod:`llmscale.policy.windows`), this module takes each
day's opening from :func:`llmscale.policy.windows.open_interval`, the very function
``batch_window_open`` judges an instant with, so the two can never disagree: a window opens at most
once a day, one in the skipped hour at the first valid instant for its length.

Source of the time-zone rules: the IANA tz database as shipped by the pinned ``tzdata`` package.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from llmscale.api import TroughWindow
from llmscale.policy.windows import open_interval

__all__ = ["WINDOW_HORIZON_S", "next_change", "open_intervals", "open_seconds", "time_to_open_seconds"]

#: How far ahead the planner looks for windows, seconds: 14 days. Every window opens at least once
#: a week (``days`` has at least one entry), so two weeks always hold a next opening and every
#: completion window the API allows up to 14 days; open time beyond it is not counted (a Job whose
#: deadline is further out is projected against the first 14 days only, which is conservative).
WINDOW_HORIZON_S = 14 * 86_400.0

def _window_intervals(window: TroughWindow, start: float, end: float) -> list[tuple[float, float]]:
    """Each day's opening of ``window`` (:func:`open_interval`) cut to ``[start, end]``, sorted."""
    zone = ZoneInfo(window.timezone)
    # The opening of the day before ``start`` may still be open (a window crossing midnight).
    day = datetime.fromtimestamp(start, tz=UTC).astimezone(zone).date() - timedelta(days=1)
    last = datetime.fromtimestamp(end, tz=UTC).astimezone(zone).date()
    intervals: list[tuple[float, float]] = []
    while day <= last:
        span = open_interval(window, day)
        day += timedelta(days=1)
        if span is None:
            continue
        lo, hi = max(span[0], start), min(span[1], end)
        if lo < hi:
            intervals.append((lo, hi))
    return intervals


def open_intervals(windows: Sequence[TroughWindow], start: float, end: float) -> list[tuple[float, float]]:
    """Return the intervals ``[open, close)`` in which any of ``windows`` is open, within
    ``[start, end]`` (seconds since the Unix epoch), sorted and merged.

    An interval open at ``start`` begins at ``start``; one still open at ``end`` ends at ``end``
    (so a close equal to ``end`` may mean "still open"). ``batch_window_open(windows, t)`` is not
    ``None`` exactly when ``t`` lies in one of them (a property test checks it minute by minute).

    E.g. ``22:00–06:00 Europe/London`` over the spring-forward night of 2024-03-30 gives one interval
    of 7 hours, 22:00 GMT to 05:00 UTC; over the fall-back night of 2024-10-26, 9 hours.

    Raises:
        ValueError: ``end`` before ``start``.
        zoneinfo.ZoneInfoNotFoundError: a window names an unknown time zone.
    """
    if end < start:
        raise ValueError(f"end {end} is before start {start}")
    spans = sorted(span for w in windows for span in _window_intervals(w, start, end))
    merged: list[tuple[float, float]] = []
    for lo, hi in spans:
        if merged and lo <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
        else:
            merged.append((lo, hi))
    return merged


def next_change(windows: Sequence[TroughWindow], now: float) -> tuple[float | None, float | None]:
    """Return ``(opens_at, closes_at)``: when the next window opens (``None`` while one is open) and
    when the open one, or else the next one, closes; seconds since the Unix epoch. ``None`` where
    the instant lies beyond :data:`WINDOW_HORIZON_S` (only a close, for a window open all week)."""
    horizon = now + WINDOW_HORIZON_S
    intervals = open_intervals(windows, now, horizon)
    if not intervals:  # cannot happen with a valid spec: every window opens once a week
        return None, None
    lo, hi = intervals[0]
    opens = None if lo <= now else float(lo)
    closes = None if hi >= horizon else float(hi)
    return opens, closes


def open_seconds(intervals: Sequence[tuple[float, float]], start: float, end: float) -> float:
    """Return the open seconds of ``intervals`` (from :func:`open_intervals`) within
    ``[start, end]``; 0 when ``end <= start``."""
    total = 0.0
    for lo, hi in intervals:
        total += max(0.0, min(hi, end) - max(lo, start))
    return total


def time_to_open_seconds(
    intervals: Sequence[tuple[float, float]], start: float, seconds: float
) -> float | None:
    """Return the instant by which ``seconds`` of open time have passed after ``start``, counting
    only time inside ``intervals``; ``None`` when the intervals hold fewer open seconds than that
    (beyond the horizon they were built for). ``start`` itself when ``seconds <= 0``."""
    if seconds <= 0:
        return start
    left = seconds
    for lo, hi in intervals:
        lo = max(lo, start)
        if hi <= lo:
            continue
        if hi - lo >= left:
            return lo + left
        left -= hi - lo
    return None
