"""The seasonal read against a real Prometheus (Debian's 2.42) on backfilled history a day and a
week old: the range query's PromQL runs, sums the pool's pods (and a counter's label variants),
keeps other deployments apart, lands on the query's grid, and the fleet reader turns it into the
:class:`~llmscale.policy.types.SeasonalHistory` the forecast grows today's rate by.

History is written with explicit timestamps as OpenMetrics, turned into TSDB blocks by
``promtool tsdb create-blocks-from openmetrics`` (``tests/signals/prom.py``) and Prometheus is
started on them (the default 15 d retention keeps a week-old block).
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

import pytest
from tests.signals.prom import POOL_LABELS, Series, backfilled, every, needs_prometheus

from llmscale.controller.signals.fleet import FleetReader
from llmscale.controller.signals.seasonal import (
    SEASONAL_AFTER_S,
    SEASONAL_BEFORE_S,
    SEASONAL_STEP_S,
    SeasonalReader,
)
from llmscale.policy.forecast import seasonal_growth
from llmscale.signals import PoolRequest, PoolTarget, PrometheusSignalReader, ReaderSettings, get_profile
from llmscale.signals.pastrates import PastRatesUnread
from llmscale.signals.queries import past_rate_query

pytestmark = needs_prometheus

VLLM = get_profile("vllm")
CHAT = PoolTarget("ml", "chat", "interactive")
OTHER = PoolTarget("ml", "other", "interactive")
DAY_S = 86_400.0
WEEK_S = 604_800.0
# A 15 s scrape interval, set: the rate window is then max(1m, 4 x 15 s) = 1m, as in production.
SETTINGS = ReaderSettings(scrape_interval="15s")


def piecewise_counter(name: str, labels: dict[str, str], times: list[float], change_s: float,
                      before_rps: float, after_rps: float) -> Series:
    """A counter rising ``before_rps`` a second until ``change_s``, ``after_rps`` after it."""
    t0 = times[0]
    points = []
    for t in times:
        value = before_rps * (min(t, change_s) - t0) + after_rps * max(0.0, t - change_s)
        points.append((t, value))
    return Series(name, dict(labels), points)


def history(now: float) -> list[Series]:
    """Chat's pods a day ago (3 requests/s, then 4 from the same time of day on) and a week ago
    (5 requests/s throughout), and another deployment at 100 requests/s a day ago."""
    series: list[Series] = []
    day = now - DAY_S
    ts = every(day - 900, day + 1200, 15)
    # Pod a: 2 -> 3 requests/s, split over two finished_reason label values (summed by the query).
    for reason, share in (("stop", 0.75), ("length", 0.25)):
        series.append(piecewise_counter("vllm:request_success_total",
                                        {**POOL_LABELS, "pod": "chat-a", "finished_reason": reason},
                                        ts, day, 2.0 * share, 3.0 * share))
    series.append(piecewise_counter("vllm:request_success_total",
                                    {**POOL_LABELS, "pod": "chat-b", "finished_reason": "stop"}, ts, day, 1.0, 1.0))
    series.append(piecewise_counter("vllm:request_success_total",
                                    {**POOL_LABELS, "llmscale_dev_deployment": "other", "pod": "other-a",
                                     "finished_reason": "stop"}, ts, day, 100.0, 100.0))
    week = now - WEEK_S
    tw = every(week - 900, week + 1200, 15)
    series.append(piecewise_counter("vllm:request_success_total",
                                    {**POOL_LABELS, "pod": "chat-old", "finished_reason": "stop"}, tw, week, 5.0, 5.0))
    return series


def test_the_range_query_reads_each_pool_a_day_ago_on_the_grid(tmp_path: Path) -> None:
    now = float(int(time.time() // 60 * 60))
    start, end = now - DAY_S - SEASONAL_BEFORE_S, now - DAY_S + SEASONAL_AFTER_S
    with backfilled(tmp_path, history(now)) as url:
        reader = PrometheusSignalReader(url, settings=SETTINGS)
        try:
            got = reader.read_past_rates_sync(
                [PoolRequest(CHAT, VLLM), PoolRequest(OTHER, VLLM)], start, end, SEASONAL_STEP_S, now=now
            )
        finally:
            reader.close()
    assert set(got) == {CHAT, OTHER}
    chat = got[CHAT]
    assert (chat.start_s, chat.step_s) == (start, SEASONAL_STEP_S)
    assert len(chat.rates_rps) == int((end - start) / SEASONAL_STEP_S) + 1
    day = now - DAY_S
    for i, rate in enumerate(chat.rates_rps):
        t = start + i * SEASONAL_STEP_S
        if t <= day:  # the 1m window ends at or before the change: 1.5 + 0.5 + 1 requests/s
            assert rate == pytest.approx(3.0, rel=1e-6), (t - day, rate)
        elif day + 60 <= t <= day + 1200:  # the window starts after it: 2.25 + 0.75 + 1
            assert rate == pytest.approx(4.0, rel=1e-6), (t - day, rate)
        elif t > day + 1200 + 60:  # no sample in the window: no value, never 0
            assert rate is None, (t - day, rate)
    # Another deployment's pods do not leak into chat's, and come back as their own pool.
    assert max(r for r in got[OTHER].rates_rps if r is not None) == pytest.approx(100.0, rel=1e-6)


def test_the_query_text_is_one_sum_per_pool_over_the_live_request_counter() -> None:
    assert past_rate_query(VLLM, window="1m") == (
        "sum by (namespace, llmscale_dev_deployment, llmscale_dev_pool) "
        '(rate(vllm:request_success_total{llmscale_dev_deployment!="", llmscale_dev_pool!=""}[1m]))'
    )
    sglang = past_rate_query(get_profile("sglang"), window="2m")
    assert sglang is not None and sglang.startswith(
        "sum by (namespace, llmscale_dev_deployment, llmscale_dev_pool) (max without (tp_rank, pp_rank) (rate("
    )


async def test_the_fleet_reader_hands_ticks_the_seasonal_history(tmp_path: Path) -> None:
    now = float(int(time.time() // 60 * 60))
    with backfilled(tmp_path, history(now)) as url:
        source = PrometheusSignalReader(url, settings=SETTINGS)
        fleet = FleetReader(source, period_s=10.0, timeout_s=10.0, clock=lambda: now)
        try:
            loop = asyncio.get_running_loop()
            fleet.register(CHAT, VLLM, pods=frozenset, wake_query=None, keep_s=60.0, loop_now=loop.time())
            fleet.start_seasonal_read()
            fleet.start_seasonal_read()  # one read in flight: not a second
            for _ in range(200):
                if fleet.seasonal_reads:
                    break
                await asyncio.sleep(0.05)
            seasonal = fleet.seasonal(CHAT)
        finally:
            await fleet.stop()
            source.close()
    assert fleet.seasonal_reads == 1
    assert seasonal is not None and seasonal.day is not None and seasonal.week is not None
    assert (seasonal.day_offset_s, seasonal.week_offset_s) == (DAY_S, WEEK_S)
    # The forecast's own reading of it: the six points of the 5 min before "the same time" yesterday
    # read 3 requests/s; of the 5 min after, the first (its 1m window ends at the change) 3, the
    # other five 4.
    growth = seasonal_growth(seasonal.day, seasonal.day_offset_s, now, 300.0)
    assert growth == pytest.approx((3.0 + 5 * 4.0) / 6 / 3.0, rel=1e-6)
    # A week ago: flat, growth 1.
    assert seasonal_growth(seasonal.week, seasonal.week_offset_s, now, 300.0) == pytest.approx(1.0, rel=1e-6)
    assert fleet.seasonal(OTHER) is None, "a pool not registered has no history"


async def test_prometheus_down_gives_no_history_with_one_warning(
    refused_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    source = PrometheusSignalReader(refused_url, settings=SETTINGS)
    with pytest.raises(PastRatesUnread, match="did not answer"):
        source.read_past_rates_sync([PoolRequest(CHAT, VLLM)], 0.0, 600.0, 60.0, now=1_717_416_000.0)
    seasonal = SeasonalReader(source, timeout_s=5.0)
    requests = [(PoolRequest(CHAT, VLLM), None)]
    try:
        with caplog.at_level(logging.WARNING, logger="llmscale.controller.signals.seasonal"):
            await seasonal.read(requests, 1_717_416_000.0, 0.0)
            await seasonal.read(requests, 1_717_416_060.0, 60.0)
    finally:
        source.close()
    assert seasonal.get(CHAT, 60.0) is None
    assert seasonal.reads == 2
    warnings = [r for r in caplog.records if "a day and a week ago" in r.getMessage()]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
