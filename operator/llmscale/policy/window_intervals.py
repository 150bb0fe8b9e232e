"""When trough windows open and close: the open intervals of ``spec.batch.windows`` between two
instants. Pure, time passed in.

:func:`llmscale.policy.windows.batch_window_open` answers "open at this instant?"; the batch planner
also needs "when does the open window close?", "when does the next one open?" and "how many open
seconds lie between now and a deadline?". Rather than restate the wall-clock rules (midnight
crossing, days, DST gaps and repeats; see :mod:`llmscale.policy.windows`), this module finds the
instants where the answer of ``batch_window_open`` can change and asks it there, so the two can
never disagree.

Where can it change? ``batch_window_open`` depends on the local wall-clock time and weekday, so only
where the wall clock crosses a window's ``start`` or ``end`` or midnight (each wall time is one
instant, or two inside a DST repeat: both are taken, as ``fold`` 0 and 1), or where it jumps (a DST
change, found by bisection on the UTC offset). Between two such instants the answer is constant.

Source of the time-zone rules: the IANA tz database as shipped by the pinned ``tzdata`` package.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

from llmscale.api import TroughWindow
from llmscale.policy.windows import batch_window_open

__all__ = ["WINDOW_HORIZON_S", "next_change", "open_intervals", "open_seconds", "time_to_open_seconds"]

#: How far ahead the planner looks for windows, seconds: 14 days. Every window opens at least once
#: a week (``days`` has at least one entry), so two weeks always hold a next opening and every
#: completion window the API allows up to 14 days; open time beyond it is not counted (a Job whose
#: deadline is further out is projected against the first 14 days only, which is conservative).
WINDOW_HORIZON_S = 14 * 86_400.0

# Step of the scan for DST changes, seconds: every offset change in tzdata is more than 6 h from
# the next one, so at most one change lies in each step and bisection finds it.
_DST_SCAN_S = 6 * 3600.0


def _offset_s(zone: ZoneInfo, t: float) -> float:
    offset = datetime.fromtimestamp(t, tz=UTC).astimezone(zone).utcoffset()
    return offset.total_seconds() if offset is not None else 0.0


def _dst_changes(zone: ZoneInfo, start: float, end: float) -> list[float]:
    """Instants in ``[start, end]`` (seconds since the epoch) where ``zone``'s UTC offset changes:
    the first second of the new offset, found by bisection to one second."""
    out: list[float] = []
    t = start
    before = _offset_s(zone, t)
    while t < end:
        step_end = min(t + _DST_SCAN_S, end)
        after = _offset_s(zone, step_end)
        if after != before:
            lo, hi = t, step_end  # offset(lo) == before, offset(hi) != before
            while hi - lo > 1.0:
                mid = math.floor((lo + hi) / 2)
                if mid <= lo:
                    break
                if _offset_s(zone, mid) == before:
                    lo = mid
                else:
                    hi = mid
            out.append(hi)
        before, t = after, step_end
    return out


def _wall_instants(zone: ZoneInfo, day: date, wall: time) -> Iterable[float]:
    for fold in (0, 1):
        yield datetime.combine(day, wall, tzinfo=zone).replace(fold=fold).timestamp()


def _candidates(window: TroughWindow, start: float, end: float) -> list[float]:
    """Instants in ``(start, end]`` where ``window`` may open or close, sorted."""
    zone = ZoneInfo(window.timezone)
    first = datetime.fromtimestamp(start, tz=UTC).astimezone(zone).date() - timedelta(days=1)
    last = datetime.fromtimestamp(end, tz=UTC).astimezone(zone).date() + timedelta(days=1)
    walls = (window.start_time(), window.end_time(), time(0, 0))
    found: set[float] = set(_dst_changes(zone, start, end))
    day = first
    while day <= last:
        for wall in walls:
            found.update(_wall_instants(zone, day, wall))
        day += timedelta(days=1)
    return sorted(t for t in found if start < t <= end)


def _window_intervals(window: TroughWindow, start: float, end: float) -> list[tuple[float, float]]:
    intervals: list[tuple[float, float]] = []
    opened = start if batch_window_open([window], start) is not None else None
    for t in _candidates(window, start, end):
        is_open = batch_window_open([window], t) is not None
        if is_open and opened is None:
            opened = t
        elif not is_open and opened is not None:
            intervals.append((opened, t))
            opened = None
    if opened is not None and opened < end:
        intervals.append((opened, end))
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
