"""Daily windows across every DST change of 2026 in every time zone the CRD accepts.

For each zone whose UTC offset changes in 2026, each change is found (to the second) and windows are
built from the wall-clock times around it: one wholly inside the skipped or repeated stretch, one
starting inside it, one ending inside it. Their openings over the days around the change come from
:func:`~llmscale.policy.open_interval`, and :func:`~llmscale.policy.batch_window_open` is asked at
each opening's first and last minute and the minutes just outside (a minute-by-minute scan of every
zone takes minutes; London's is in ``test_windows.py``). The semantics (``llmscale.policy.windows``)
say that each window

- opens at most once a day (consecutive openings are more than 12 hours apart),
- opens on the day of the change (a window in the skipped hour opens at the first valid instant), and
- stays open for its nominal length, give or take the change (the skipped or repeated stretch).
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from functools import cache
from zoneinfo import ZoneInfo

import pytest

from llmscale.api import TroughWindow, iana_timezones
from llmscale.policy import batch_window_open, open_interval

YEAR_START = datetime(2026, 1, 1, tzinfo=UTC).timestamp()
DAY = 86_400


def _offset(tz: ZoneInfo, t: float) -> float:
    off = datetime.fromtimestamp(t, tz).utcoffset()
    assert off is not None
    return off.total_seconds()


@cache
def changes(zone: str) -> tuple[tuple[int, float, float], ...]:
    """``(instant, offset before, offset after)`` of every offset change of ``zone`` in 2026."""
    tz = ZoneInfo(zone)
    out = []
    for d in range(365):
        a, b = int(YEAR_START + d * DAY), int(YEAR_START + (d + 1) * DAY)
        before, after = _offset(tz, a), _offset(tz, b)
        if before == after:
            continue
        while b - a > 1:
            mid = (a + b) // 2
            if _offset(tz, mid) == before:
                a = mid
            else:
                b = mid
        out.append((b, before, after))
    return tuple(out)


ZONES_WITH_CHANGES = [z for z in iana_timezones() if changes(z)]


def _hhmm(dt: datetime) -> str:
    return f"{dt.hour:02d}:{dt.minute:02d}"


def _windows(instant: int, before: float, after: float, zone: str) -> list[tuple[str, TroughWindow, float]]:
    """Windows around one change: ``(name, window, nominal minutes)``."""
    # The wall clock just before the change reads instant + before; after it, instant + after. The
    # stretch between the two readings is skipped (spring) or repeated (fall).
    wall_a = datetime.fromtimestamp(instant + before, UTC).replace(second=0, microsecond=0)
    wall_b = datetime.fromtimestamp(instant + after, UTC).replace(second=0, microsecond=0)
    lo, hi = min(wall_a, wall_b), max(wall_a, wall_b)
    span = (hi - lo).total_seconds() / 60
    cases = []
    if span >= 20:
        inside = (lo + timedelta(minutes=5), hi - timedelta(minutes=5))
        cases.append(("inside", inside))
    middle = lo + (hi - lo) / 2
    cases.append(("starts-inside", (middle, hi + timedelta(minutes=60))))
    cases.append(("ends-inside", (lo - timedelta(minutes=60), middle)))
    out = []
    for name, (start, end) in cases:
        s, e = _hhmm(start), _hhmm(end)
        if s == e:
            continue
        nominal = ((end - start).total_seconds() // 60) % (24 * 60)
        out.append((name, TroughWindow(start=s, end=e, timezone=zone), nominal))
    return out


def _runs(window: TroughWindow, instant: float) -> list[tuple[float, float]]:
    """The openings ``(opens, minutes)`` of ``window`` on the days around ``instant``, each checked
    against :func:`batch_window_open` at its edges."""
    day = datetime.fromtimestamp(instant, ZoneInfo(window.timezone)).date()
    runs = []
    for k in range(-2, 3):
        interval = open_interval(window, day + timedelta(days=k))
        if interval is None or interval[1] <= interval[0]:
            continue
        opens, closes = interval
        inside = [opens, closes - 1, (opens + closes) / 2]
        for t in inside:
            assert batch_window_open([window], t) is window, (window, t)
        # The minute before it opens and the one after it closes are closed, unless the day before's
        # or after's opening covers them (a window of nearly a day).
        runs.append((opens, (closes - opens) / 60))
    for opens, minutes in runs:
        before, after = opens - 60, opens + minutes * 60
        if not any(o <= before < o + m * 60 for o, m in runs):
            assert batch_window_open([window], before) is None, (window, before)
        if not any(o <= after < o + m * 60 for o, m in runs):
            assert batch_window_open([window], after) is None, (window, after)
    return runs


def test_the_zone_list_has_changes_to_test() -> None:
    # Europe/London, America/New_York, Australia/Lord_Howe (a 30-minute change) and America/Santiago
    # (a change at midnight) are among them.
    for zone in ("Europe/London", "America/New_York", "Australia/Lord_Howe", "America/Santiago"):
        assert zone in ZONES_WITH_CHANGES
    assert len(ZONES_WITH_CHANGES) > 100


@pytest.mark.parametrize("zone", ZONES_WITH_CHANGES)
def test_windows_around_every_dst_change(zone: str) -> None:
    for instant, before, after in changes(zone):
        shift = abs(after - before) / 60
        for name, window, nominal in _windows(instant, before, after, zone):
            runs = _runs(window, instant)
            where = f"{zone} change at {datetime.fromtimestamp(instant, UTC):%Y-%m-%d %H:%M:%S} UTC, {name} {window.start}–{window.end}: {runs}"
            starts = [r[0] for r in runs]
            # At most once a day.
            assert all(b - a > 12 * 3600 for a, b in itertools.pairwise(starts)), where
            # It opens around the change (the day of it), never skipped.
            assert any(abs(r[0] - instant) <= (nominal + 120) * 60 for r in runs), where
            # Each opening lasts its nominal length, give or take the change.
            for _, minutes in runs:
                assert nominal - shift - 1 <= minutes <= nominal + shift + 1, where
