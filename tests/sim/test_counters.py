"""The simulated pool's counters: the workload mix, the seasonal rate and the cold starts the
simulator hands the policy, as the operator would read them."""

from __future__ import annotations

import math

import pytest

from llmscale.sim.counters import RequestCounters, cold_starts

T0 = 1_717_372_800.0  # 2024-06-03 00:00 UTC


def test_workload_over_the_rate_window() -> None:
    c = RequestCounters(T0, max_model_len=8192, window_s=60.0)
    c.finished(T0 + 10, 9999, 9)  # before the window
    # 30 requests finished in the minute before T0 + 120: prompts 100, 199, 299, …, 2,999; output 50.
    for i in range(30):
        c.finished(T0 + 61 + 2 * i, 100 * (i + 1) - 1 if i else 100, 50)
    mix = c.workload(T0 + 120)
    assert mix.request_rate == pytest.approx(30 / 60)
    prompts = [100] + [100 * (i + 1) - 1 for i in range(1, 30)]
    assert mix.prompt_tokens_rate == pytest.approx(sum(prompts) / 60)
    assert mix.prompt_tokens_mean == pytest.approx(sum(prompts) / 30)
    assert mix.generation_tokens_mean == 50.0
    # histogram_quantile over vLLM's 1-2-5 buckets: 28.5 of 30 falls in (2000, 5000], which holds the
    # 10 prompts of 2,099..2,999 above the 20 at or under 2,000: 2000 + 3000 × (28.5 - 20) / 10.
    assert mix.prompt_tokens_p95 == pytest.approx(2000 + 3000 * 8.5 / 10)
    assert mix.prefix_cache_hit_rate is None  # no engine keeps prefix-cache counters


def test_an_empty_window_has_zero_rates_with_unknown_lengths() -> None:
    mix = RequestCounters(T0, 8192).workload(T0 + 600)
    assert (mix.request_rate, mix.prompt_tokens_mean, mix.prompt_tokens_p95) == (0.0, None, None)


def test_prefix_cache_hit_rate_from_the_counters() -> None:
    c = RequestCounters(T0, 8192)
    c.prefix_cache(T0, queries=1000, hits=100)
    c.prefix_cache(T0 + 30, queries=2000, hits=400)
    c.prefix_cache(T0 + 60, queries=5000, hits=1300)
    c.finished(T0 + 59, 10, 10)
    assert c.workload(T0 + 60).prefix_cache_hit_rate == pytest.approx((1300 - 100) / (5000 - 1000))


def test_seasonal_rates_a_day_ago() -> None:
    c = RequestCounters(T0, 8192)
    for minute in range(24 * 60 + 60):
        for k in range(minute % 7):
            c.finished(T0 + 60 * minute + k, 100, 10)
    now = T0 + 86_400 + 1800
    seasonal = c.seasonal(now)
    assert seasonal is not None and seasonal.week is None and seasonal.day is not None
    # The minute at now - 1 day is minute 30: 30 % 7 = 2 requests, 2/60 per second.
    assert seasonal.day.mean(now - 86_400, now - 86_400 + 59) == pytest.approx(2 / 60)
    assert c.seasonal(T0 + 3600) is None  # the run does not reach back a day


def test_cold_starts_are_the_last_ones_ready() -> None:
    records = [(0.0, 300.0), (10.0, 330.0), (20.0, math.inf), (T0, T0), (50.0, 400.0)]
    assert cold_starts(records, now=350.0) == (300.0, 320.0)
    assert cold_starts(records, now=1e9) == (300.0, 320.0, 350.0)


def test_a_minute_holds_the_histograms_sums_of_the_requests_that_finished_in_it() -> None:
    c = RequestCounters(T0, 8192)
    c.running(T0 + 15, 4.0)
    c.running(T0 + 60, 6.0)  # on the boundary: the minute it ends, as (end - 60, end]
    c.running(T0 + 75, 9.0)
    c.finished(T0 + 20, 1000, 11, decode_s=0.5, prefill_s=0.1)
    c.finished(T0 + 50, 3000, 1, decode_s=0.0, prefill_s=0.3)  # one token: no gap
    c.finished(T0 + 70, 500, 5, decode_s=0.2, prefill_s=0.05)  # the next minute
    first, second = c.minutes(T0 + 125)
    assert (first.end_s, second.end_s) == (T0 + 60, T0 + 120)
    assert first.running_mean == 5.0
    assert (first.itl_sum_s, first.itl_count) == (0.5, 10)
    assert first.prefill_sum_s == pytest.approx(0.4) and first.prefill_count == 2
    assert (first.prompt_tokens_sum, first.prompt_tokens_count) == (4000, 2)
    assert (first.output_tokens_sum, first.output_tokens_count) == (12, 2)
    assert second.running_mean == 9.0
    assert (second.itl_sum_s, second.itl_count, second.prompt_tokens_count) == (0.2, 4, 1)


def test_a_minute_without_a_finished_request_has_unknown_sums() -> None:
    c = RequestCounters(T0, 8192)
    c.finished(T0 + 70, 500, 5, decode_s=0.2, prefill_s=0.05)
    (only,) = c.minutes(T0 + 119, last=2)
    assert only.end_s == T0 + 60 and only.itl_sum_s is None and only.prompt_tokens_count is None
    assert only.running_mean is None  # no scrape in it


def test_a_minute_not_yet_ended_is_not_read() -> None:
    c = RequestCounters(T0, 8192)
    c.finished(T0 + 10, 500, 5, decode_s=0.2, prefill_s=0.05)
    assert c.minutes(T0 + 30) == ()
    assert [m.end_s for m in c.minutes(T0 + 60)] == [T0 + 60]
