"""When trough windows open and close: intervals agree with ``batch_window_open`` minute by minute,
across midnight and both DST changes, and the open seconds the batch planner counts are right."""

from __future__ import annotations

from datetime import UTC, datetime
from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.strategies import instants, trough_windows

from llmscale.api import TroughWindow
from llmscale.policy import batch_window_open
from llmscale.policy.window_intervals import (
    WINDOW_HORIZON_S,
    next_change,
    open_intervals,
    open_seconds,
    time_to_open_seconds,
)


def utc(text: str) -> float:
    """Seconds since the epoch of an ISO UTC time, e.g. ``2024-03-31T04:59``."""
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def w(start: str, end: str, tz: str = "UTC", days: list[str] | None = None) -> TroughWindow:
    kw = {"days": days} if days is not None else {}
    return TroughWindow(start=start, end=end, timezone=tz, **kw)


@pytest.mark.parametrize(
    ("windows", "start", "expected"),
    [
        pytest.param(
            [w("22:00", "06:00", "Europe/London")],
            "2024-03-30T12:00",
            [("2024-03-30T22:00", "2024-03-31T05:00")],  # 22:00 GMT → 06:00 BST: 7 h
            id="london-spring-forward-night-is-7h",
        ),
        pytest.param(
            [w("22:00", "06:00", "Europe/London")],
            "2024-10-26T12:00",
            [("2024-10-26T21:00", "2024-10-27T06:00")],  # 22:00 BST → 06:00 GMT: 9 h
            id="london-fall-back-night-is-9h",
        ),
        pytest.param(
            [w("01:30", "03:00", "Europe/London")],
            "2024-03-30T12:00",
            [("2024-03-31T01:00", "2024-03-31T02:00")],  # opens at the jump to 02:00 BST
            id="start-inside-the-skipped-hour-opens-at-the-jump",
        ),
        pytest.param(
            [w("01:10", "01:50", "Europe/London")],
            "2024-10-26T12:00",
            [("2024-10-27T00:10", "2024-10-27T00:50")],  # the first pass only: once a day
            id="window-inside-the-repeated-hour-opens-once",
        ),
        pytest.param(
            [w("01:30", "02:30", "Europe/London")],
            "2026-10-24T12:00",
            [("2026-10-25T00:30", "2026-10-25T02:30")],  # 01:30 BST → 02:30 GMT in one piece (issue 11)
            id="window-touching-the-repeated-hour-opens-once",
        ),
        pytest.param(
            [w("01:10", "01:50", "Europe/London")],
            "2026-03-28T12:00",
            [("2026-03-29T01:00", "2026-03-29T01:40")],  # 02:00 BST for its 40 minutes (issue 11)
            id="window-inside-the-skipped-hour-opens-at-the-jump-for-its-length",
        ),
        pytest.param(
            [w("22:00", "06:00", days=["Fri"])],
            "2024-06-07T12:00",  # a Friday
            [("2024-06-07T22:00", "2024-06-08T06:00")],  # runs on into Saturday, not listed
            id="friday-only-window-crosses-midnight-into-saturday",
        ),
        pytest.param(
            [w("22:00", "02:00"), w("01:00", "05:00")],
            "2024-06-07T12:00",
            [("2024-06-07T22:00", "2024-06-08T05:00")],
            id="overlapping-windows-merge",
        ),
        pytest.param(
            [w("00:00", "23:59")],
            "2024-06-07T12:00",
            [("2024-06-07T12:00", "2024-06-07T23:59"), ("2024-06-08T00:00", "2024-06-08T12:00")],
            id="open-at-start-and-at-end-are-cut-there",
        ),
    ],
)
def test_open_intervals(windows: list[TroughWindow], start: str, expected: list[tuple[str, str]]) -> None:
    got = open_intervals(windows, utc(start), utc(start) + 86_400)
    assert got == [(utc(a), utc(b)) for a, b in expected]


@settings(max_examples=60, deadline=None)
@given(st.lists(trough_windows(), min_size=1, max_size=3), instants(), st.integers(0, 59))
def test_intervals_agree_with_batch_window_open_minute_by_minute(
    windows: list[TroughWindow], start: float, offset_s: int
) -> None:
    """Over two days from any instant (not on the minute), ``t`` is in an interval exactly when
    ``batch_window_open`` says a window is open at ``t``; checked on every minute plus ``offset_s``."""
    t0 = float(int(start) // 60 * 60 + offset_s)
    end = t0 + 2 * 86_400
    intervals = open_intervals(windows, t0, end)
    for lo, hi in intervals:
        assert t0 <= lo < hi <= end
    for before, after in pairwise(intervals):
        assert before[1] < after[0]  # merged: no two touch
    for m in range(2 * 24 * 60):
        t = t0 + 60 * m
        inside = any(lo <= t < hi for lo, hi in intervals)
        assert inside == (batch_window_open(windows, t) is not None), datetime.fromtimestamp(t, UTC)


LONDON_NIGHTS = [w("22:00", "06:00", "Europe/London")]


def test_next_change_while_closed_is_the_next_opening_then_closing() -> None:
    assert next_change(LONDON_NIGHTS, utc("2024-03-30T12:00")) == (utc("2024-03-30T22:00"), utc("2024-03-31T05:00"))


def test_next_change_while_open_is_the_closing_only() -> None:
    assert next_change(LONDON_NIGHTS, utc("2024-03-31T03:00")) == (None, utc("2024-03-31T05:00"))


def test_a_window_open_all_week_never_changes_within_the_horizon() -> None:
    always = [w("00:00", "23:59"), w("23:00", "01:00")]
    assert next_change(always, utc("2024-06-07T12:00")) == (None, None)


INTERVALS = [(100.0, 200.0), (300.0, 400.0)]


def test_open_seconds_counts_the_open_time_within_a_stretch() -> None:
    assert open_seconds(INTERVALS, 0.0, 1000.0) == 200.0
    assert open_seconds(INTERVALS, 150.0, 350.0) == 100.0
    assert open_seconds(INTERVALS, 500.0, 400.0) == 0.0


def test_time_to_open_seconds_is_the_wait_for_that_much_open_time() -> None:
    assert time_to_open_seconds(INTERVALS, 0.0, 150.0) == 350.0
    assert time_to_open_seconds(INTERVALS, 150.0, 50.0) == 200.0
    assert time_to_open_seconds(INTERVALS, 0.0, 0.0) == 0.0
    assert time_to_open_seconds(INTERVALS, 0.0, 201.0) is None  # more than the intervals hold


def test_horizon_holds_a_weekly_window_twice() -> None:
    weekly = [w("22:00", "06:00", "Europe/London", days=["Sun"])]
    t = utc("2024-06-03T12:00")  # a Monday: the next opening is six days away
    intervals = open_intervals(weekly, t, t + WINDOW_HORIZON_S)
    assert len(intervals) == 2
    assert open_seconds(intervals, t, t + WINDOW_HORIZON_S) == 2 * 8 * 3600


def test_a_window_opening_exactly_at_the_end_gives_no_empty_interval() -> None:
    """Found by the property above: ``[end, end)`` is not an interval."""
    minute = [w("00:00", "00:01")]
    start = utc("2024-03-01T00:00")
    assert open_intervals(minute, start, start + 2 * 86_400) == [
        (start, start + 60),
        (start + 86_400, start + 86_460),
    ]


def test_end_before_start_is_an_error() -> None:
    with pytest.raises(ValueError, match="before start"):
        open_intervals([w("22:00", "06:00")], 10.0, 5.0)
