"""Trough windows: midnight crossing, days of the week, and DST in Europe/London and New York.

Durations are measured by stepping a fake clock minute by minute through a night and counting the
open minutes, so a wrong offset shows as a wrong count of minutes.
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime

import pytest

from llmscale.api import TroughWindow
from llmscale.policy import batch_window_open, describe_window


def utc(text: str) -> float:
    """Seconds since the epoch of an ISO UTC time, e.g. ``2024-03-31T04:59``."""
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def open_minutes(window: TroughWindow, start: str, hours: int = 24) -> list[float]:
    """Instants (UTC, on the minute) from ``start`` over ``hours`` at which ``window`` is open."""
    t0 = utc(start)
    return [t0 + 60 * m for m in range(hours * 60) if batch_window_open([window], t0 + 60 * m) is window]


def w(start: str, end: str, tz: str = "UTC", days: list[str] | None = None) -> TroughWindow:
    kw = {"days": days} if days is not None else {}
    return TroughWindow(start=start, end=end, timezone=tz, **kw)


@pytest.mark.parametrize(
    ("window", "night_start_utc", "minutes", "first_open_utc", "last_open_utc"),
    [
        pytest.param(
            w("22:00", "06:00", "Europe/London"),
            "2024-03-30T12:00",
            7 * 60,  # 22:00 GMT → 06:00 BST: the clocks skip 01:00–02:00
            "2024-03-30T22:00",
            "2024-03-31T04:59",
            id="london-spring-forward-night-is-7h",
        ),
        pytest.param(
            w("22:00", "06:00", "Europe/London"),
            "2024-10-26T12:00",
            9 * 60,  # 22:00 BST → 06:00 GMT: 01:00–02:00 happens twice
            "2024-10-26T21:00",
            "2024-10-27T05:59",
            id="london-fall-back-night-is-9h",
        ),
        pytest.param(
            w("01:30", "03:00", "Europe/London"),
            "2024-03-30T12:00",
            60,  # opens when the clocks jump to 02:00 BST (01:00 UTC), closes 03:00 BST
            "2024-03-31T01:00",
            "2024-03-31T01:59",
            id="london-start-inside-the-skipped-hour-opens-at-the-jump",
        ),
        pytest.param(
            w("01:10", "01:50", "Europe/London"),
            "2024-10-26T12:00",
            40,  # the first pass through the repeated hour only: a window opens at most once a day
            "2024-10-27T00:10",
            "2024-10-27T00:49",
            id="london-window-inside-the-repeated-hour-opens-once",
        ),
        # Issue 11: wholly inside the skipped hour, it never opened. Now it opens at the first valid
        # instant (02:00 BST, 01:00 UTC) for its 40 minutes.
        pytest.param(
            w("01:10", "01:50", "Europe/London"),
            "2026-03-28T12:00",
            40,
            "2026-03-29T01:00",
            "2026-03-29T01:39",
            id="london-window-inside-the-skipped-hour-opens-at-the-jump-for-its-length",
        ),
        # Issue 11: touching the repeated hour it opened twice (batch 0→4→0→4→0). Now once, from the
        # first 01:30 (BST, 00:30 UTC) to 02:30 GMT (02:30 UTC): two hours in one piece.
        pytest.param(
            w("01:30", "02:30", "Europe/London"),
            "2026-10-24T12:00",
            120,
            "2026-10-25T00:30",
            "2026-10-25T02:29",
            id="london-window-touching-the-repeated-hour-opens-once",
        ),
        pytest.param(
            w("01:00", "04:00", "America/New_York"),
            "2024-03-09T12:00",
            2 * 60,  # 01:00 EST (06:00 UTC) → 04:00 EDT (08:00 UTC)
            "2024-03-10T06:00",
            "2024-03-10T07:59",
            id="new-york-spring-forward-3h-window-is-2h",
        ),
        pytest.param(
            w("23:00", "03:00", "America/New_York"),
            "2024-11-02T12:00",
            5 * 60,  # 23:00 EDT (03:00 UTC) → 03:00 EST (08:00 UTC)
            "2024-11-03T03:00",
            "2024-11-03T07:59",
            id="new-york-fall-back-4h-window-is-5h",
        ),
        pytest.param(
            w("22:00", "06:00", "UTC"),
            "2024-06-03T12:00",
            8 * 60,
            "2024-06-03T22:00",
            "2024-06-04T05:59",
            id="utc-midnight-crossing",
        ),
    ],
)
def test_window_over_a_night(
    window: TroughWindow, night_start_utc: str, minutes: int, first_open_utc: str, last_open_utc: str
) -> None:
    opened = open_minutes(window, night_start_utc)
    assert len(opened) == minutes
    assert opened[0] == utc(first_open_utc)
    assert opened[-1] == utc(last_open_utc)
    # One opening: the open minutes are one run.
    assert all(b - a == 60 for a, b in itertools.pairwise(opened))


@pytest.mark.parametrize(
    ("at_utc", "is_open"),
    [
        # 2024-06-07 is a Friday. The Fri-only 22:00–06:00 window runs into Saturday morning …
        pytest.param("2024-06-07T21:59", False, id="fri-before-start"),
        pytest.param("2024-06-07T22:00", True, id="fri-at-start"),
        pytest.param("2024-06-08T03:00", True, id="sat-morning-belongs-to-friday"),
        pytest.param("2024-06-08T06:00", False, id="sat-at-end"),
        # … but Friday morning belongs to Thursday's window, which is not listed.
        pytest.param("2024-06-07T03:00", False, id="fri-morning-belongs-to-thursday"),
        pytest.param("2024-06-08T23:00", False, id="sat-evening-not-listed"),
    ],
)
def test_midnight_crossing_belongs_to_its_start_day(at_utc: str, is_open: bool) -> None:
    window = w("22:00", "06:00", "UTC", days=["Fri"])
    assert (batch_window_open([window], utc(at_utc)) is window) == is_open


def test_first_open_window_is_named() -> None:
    lunch, night = w("12:00", "13:00"), w("11:00", "14:00")
    assert batch_window_open([lunch, night], utc("2024-06-03T12:30")) is lunch
    assert batch_window_open([lunch, night], utc("2024-06-03T11:30")) is night
    assert batch_window_open([lunch, night], utc("2024-06-03T15:00")) is None


@pytest.mark.parametrize(
    ("window", "text"),
    [
        pytest.param(
            w("22:00", "06:00", "Europe/London"),
            "22:00–06:00 Europe/London daily (crosses midnight)",
            id="daily",
        ),
        pytest.param(
            w("01:00", "05:00", days=["Mon", "Tue", "Wed", "Thu", "Fri"]),
            "01:00–05:00 UTC Mon–Fri",
            id="weekdays",
        ),
        pytest.param(w("01:00", "05:00", days=["Sun", "Sat"]), "01:00–05:00 UTC Sat,Sun", id="weekend"),
    ],
)
def test_describe_window(window: TroughWindow, text: str) -> None:
    assert describe_window(window) == text
