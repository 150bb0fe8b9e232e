"""The forecast one lead time ahead and the calendar floors, with a fake clock across midnight and DST."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from llmscale.api import LLMDeploymentSpec, ModelSpec, ReplicasSpec, ScheduledMinimum
from llmscale.policy import (
    PolicyMemory,
    PoolState,
    RateSeries,
    Reason,
    SeasonalHistory,
    decide,
    scheduled_minimum,
)
from llmscale.policy.forecast import forecast_rate, seasonal_growth
from llmscale.signals.snapshot import SignalSnapshot, WorkloadMix


def utc(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def series(start: float, rates: list[float]) -> RateSeries:
    """One value a minute from ``start``."""
    return RateSeries(start, 60.0, tuple(rates))


def ramp_yesterday(now: float, offset: float = 86_400.0) -> RateSeries:
    """10 requests/s for the 10 minutes before "the same time" ``offset`` ago, 12.5 for the 30 after."""
    t = now - offset
    return series(t - 600 + 30, [10.0] * 10 + [12.5] * 30)


def test_seasonal_growth_by_hand() -> None:
    now = utc("2024-06-04T07:55")
    # Mean over [t − 5 min, t] is 10, over [t + 300 s − 5 min, t + 300 s] is 12.5: growth 1.25.
    assert seasonal_growth(ramp_yesterday(now), 86_400.0, now, 300.0) == pytest.approx(1.25)
    # λ = 20 now: forecast 25 requests/s one lead time ahead.
    fc = forecast_rate(20.0, [], SeasonalHistory(day=ramp_yesterday(now)), now, 300.0, 0.0)
    assert fc.rate_rps == pytest.approx(25.0)
    assert fc.line == "forecast 25.00 requests/s in 300 s (× 1.25 as a period ago over the same 300 s)"


def test_the_forecast_never_lowers_the_rate() -> None:
    now = utc("2024-06-04T18:00")
    falling = series(now - 86_400 - 600 + 30, [12.5] * 10 + [10.0] * 30)
    assert forecast_rate(20.0, [], SeasonalHistory(day=falling), now, 300.0, 0.0).rate_rps == 20.0


def test_the_forecast_needs_history() -> None:
    now = utc("2024-06-04T18:00")
    assert forecast_rate(20.0, [], None, now, 300.0, 0.0).line.endswith("(no seasonal history)")
    # A series that does not reach the stretch a lead time ahead says nothing.
    short = series(now - 86_400 - 600 + 30, [10.0] * 10)
    assert seasonal_growth(short, 86_400.0, now, 300.0) is None
    # Under a request a minute yesterday: no growth to read.
    idle = series(now - 86_400 - 600 + 30, [0.001] * 10 + [5.0] * 30)
    assert seasonal_growth(idle, 86_400.0, now, 300.0) is None


def test_the_forecast_takes_the_larger_growth_of_a_day_or_a_week_ago() -> None:
    # Monday 07:55: yesterday (Sunday) was flat, a week ago (Monday) ramped: the week wins.
    now = utc("2024-06-03T07:55")
    flat = series(now - 86_400 - 600 + 30, [10.0] * 40)
    fc = forecast_rate(20.0, [], SeasonalHistory(day=flat, week=ramp_yesterday(now, 604_800.0)), now, 300.0, 0.0)
    assert fc.seasonal_growth == pytest.approx(1.25) and fc.rate_rps == pytest.approx(25.0)


def test_the_forecast_crosses_midnight() -> None:
    # 23:58 with a 5-minute lead time: the stretch ahead ends at 00:03; epoch seconds do not care.
    now = utc("2024-06-04T23:58")
    assert seasonal_growth(ramp_yesterday(now), 86_400.0, now, 300.0) == pytest.approx(1.25)


def test_the_same_wall_clock_time_yesterday_across_dst() -> None:
    # 2024-10-27 08:00 GMT in London: the same wall-clock time yesterday (08:00 BST) was 25 hours
    # ago; the shell says so and the ramp of yesterday morning lines up with this morning's.
    now = utc("2024-10-27T07:55")
    day = SeasonalHistory(day=ramp_yesterday(now, 90_000.0), day_offset_s=90_000.0)
    assert forecast_rate(20.0, [], day, now, 300.0, 0.0).rate_rps == pytest.approx(25.0)
    # Read 24 hours back instead, the series is an hour off: no ramp in it.
    wrong = SeasonalHistory(day=ramp_yesterday(now, 90_000.0))
    assert forecast_rate(20.0, [], wrong, now, 300.0, 0.0).rate_rps == 20.0


def test_the_trend_when_asked_for() -> None:
    now = utc("2024-06-04T12:00")
    # Finished rate rising 1 request/s per minute over the last 5 minutes: slope 1/60; over a 300 s
    # lead time +5 requests/s.
    history = [
        SignalSnapshot(now - 300 + 15 * i, workload=WorkloadMix(request_rate=10.0 + (15 * i) / 60.0)) for i in range(21)
    ]
    fc = forecast_rate(15.0, history, None, now, 300.0, 1.0)
    assert fc.trend_rps == pytest.approx(5.0, rel=0.05)
    assert fc.rate_rps == pytest.approx(20.0, rel=0.02)
    assert forecast_rate(15.0, history, None, now, 300.0, 0.0).rate_rps == 15.0  # growthFactor 0: off


MORNING = ScheduledMinimum(start="07:30", end="10:00", timezone="Europe/London", days=["Mon", "Tue", "Wed", "Thu", "Fri"], min=6)
LATE = ScheduledMinimum(start="23:00", end="01:00", timezone="Europe/London", min=4)


@pytest.mark.parametrize(
    ("at_utc", "expect"),
    [
        # Monday 2024-06-03, BST (UTC+1). 07:30 BST is 06:30 UTC; a 300 s lead time asks at 06:25.
        pytest.param("2024-06-03T06:24", 0, id="before-the-lead-time"),
        pytest.param("2024-06-03T06:25", 6, id="one-lead-time-early"),
        pytest.param("2024-06-03T08:59", 6, id="inside"),
        pytest.param("2024-06-03T09:00", 0, id="closed-at-10-bst"),
        pytest.param("2024-06-01T06:40", 0, id="saturday-not-listed"),
        # 23:00–01:00 daily crosses midnight: 22:00 UTC (23:00 BST), asked at 21:55 UTC.
        pytest.param("2024-06-03T21:55", 4, id="late-window-early"),
        pytest.param("2024-06-03T23:30", 4, id="after-midnight-local"),
        pytest.param("2024-06-04T00:00", 0, id="closed-at-01-bst"),
        # Spring forward, Sunday 2024-03-31: the clocks go 01:00 GMT → 02:00 BST. The late window
        # of Saturday ends at 01:00, which happens (as GMT): it closes at 01:00 UTC.
        pytest.param("2024-03-31T00:59", 4, id="spring-late-window-open"),
        pytest.param("2024-03-31T01:00", 0, id="spring-late-window-closed"),
        # Fall back, Sunday 2024-10-27: 01:00 happens twice; the window ends at the first (00:00 UTC).
        pytest.param("2024-10-26T23:59", 4, id="fall-late-window-open"),
        pytest.param("2024-10-27T00:00", 0, id="fall-late-window-closes-at-the-first-01"),
        # Monday after the change, GMT: 07:30 GMT is 07:30 UTC, asked at 07:25.
        pytest.param("2024-10-28T07:24", 0, id="gmt-before"),
        pytest.param("2024-10-28T07:25", 6, id="gmt-one-lead-time-early"),
    ],
)
def test_calendar_floor_with_a_fake_clock(at_utc: str, expect: int) -> None:
    floor, window = scheduled_minimum([MORNING, LATE], utc(at_utc), 300.0)
    assert floor == expect
    assert (window is None) == (expect == 0)


def test_calendar_floor_in_decide() -> None:
    spec = LLMDeploymentSpec(
        model=ModelSpec(name="chat", preset="llama-3.1-8b"),
        replicas=ReplicasSpec(min=1, max=16, schedule=[MORNING]),
    )
    now = utc("2024-06-03T06:28")  # 07:28 BST: the 180 s default lead time reaches 07:30
    idle = SignalSnapshot(now, queue_depth=0.0, kv_cache_utilization=0.0, preemption_rate=0.0, replicas_reporting=2)
    d = decide(spec, [idle], PoolState(interactive_replicas=2, interactive_ready=2), PolicyMemory(since=now - 3600), now)
    assert (d.interactive_replicas, d.scaling_limited.reason) == (6, Reason.ScheduledMinimum)
    assert d.scaling_limited.message.startswith("below the calendar floor 6 of spec.replicas.schedule window 07:30–10:00")
    # The floor holds even while the signals are stale.
    stale = SignalSnapshot(now - 600, queue_depth=0.0, kv_cache_utilization=0.0, preemption_rate=0.0)
    held = decide(spec, [stale], PoolState(interactive_replicas=2, interactive_ready=2), PolicyMemory(), now)
    assert (held.valid, held.interactive_replicas) == (False, 6)
