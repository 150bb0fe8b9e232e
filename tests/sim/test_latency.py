"""The latency histograms: Prometheus's ``histogram_quantile`` worked by hand, and the recorder's
bins (a decode leap's tokens land in the bins of their own times)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from llmscale.model.vllm_defaults import ITL_BUCKETS_S
from llmscale.sim.latency import BIN_S, LatencyRecorder, histogram_quantile, histogram_quantile_1d

BOUNDS = (0.1, 0.2, 0.5)  # + the +Inf bucket


@pytest.mark.parametrize(
    ("counts", "q", "expected"),
    [
        # 10 samples ≤ 0.1: rank 9.5 of 10 inside the first bucket, interpolated from 0
        pytest.param([10, 0, 0, 0], 0.95, 0.095, id="first-bucket-from-zero"),
        # 50 ≤ 0.1, 50 in (0.1, 0.2]: rank 95 is 45 of 50 into the second bucket → 0.1 + 0.1 × 0.9
        pytest.param([50, 50, 0, 0], 0.95, 0.19, id="interpolated-in-second"),
        # rank exactly at the first bucket's cumulative count: its upper bound
        pytest.param([95, 5, 0, 0], 0.95, 0.1, id="rank-on-a-boundary"),
        # the rank falls in +Inf: the highest finite bound
        pytest.param([1, 0, 0, 99], 0.95, 0.5, id="in-the-inf-bucket"),
        # empty buckets before the one holding the rank are skipped
        pytest.param([0, 0, 4, 0], 0.5, 0.35, id="empty-buckets-skipped"),
        pytest.param([0, 0, 0, 0], 0.95, math.nan, id="no-samples-nan"),
    ],
)
def test_histogram_quantile_follows_prometheus(counts: list[int], q: float, expected: float) -> None:
    got = float(histogram_quantile(q, BOUNDS, np.array(counts)))
    one = histogram_quantile_1d(q, BOUNDS, counts)
    if math.isnan(expected):
        assert math.isnan(got) and one is None
    else:
        assert got == pytest.approx(expected) and one == pytest.approx(expected)


@given(st.lists(st.integers(0, 50), min_size=len(ITL_BUCKETS_S) + 1, max_size=len(ITL_BUCKETS_S) + 1),
       st.sampled_from([0.5, 0.9, 0.95, 0.99]))
def test_the_scalar_quantile_agrees_with_the_vector_one(counts: list[int], q: float) -> None:
    one = histogram_quantile_1d(q, ITL_BUCKETS_S, counts)
    vec = float(histogram_quantile(q, ITL_BUCKETS_S, np.array([counts]))[0])
    assert (one is None and math.isnan(vec)) or one == pytest.approx(vec)


def test_histogram_quantile_rejects_a_wrong_shape() -> None:
    with pytest.raises(ValueError, match="columns"):
        histogram_quantile(0.95, BOUNDS, np.zeros(3))
    with pytest.raises(ValueError, match="outside"):
        histogram_quantile(1.5, BOUNDS, np.zeros(4))


@settings(max_examples=200, deadline=None)
@given(
    t0=st.floats(-20.0, 300.0),
    dt=st.floats(0.004, 3.0),
    steps=st.integers(1, 400),
    seqs=st.integers(1, 64),
)
# The last step's stamp on the recorder's end, rounded differently by a division (found by Hypothesis).
@example(t0=0.0, dt=2.9999999999999996, steps=100, seqs=1)
# The same on the start and on a bin boundary.
@example(t0=-3.0 * (1 - 2**-52), dt=3.0 * (1 - 2**-52), steps=10, seqs=2)
@example(t0=0.0, dt=15.0 / 7, steps=14, seqs=1)
def test_a_leap_is_the_sum_of_its_steps(t0: float, dt: float, steps: int, seqs: int) -> None:
    # A pure-decode leap of `steps` steps over `seqs` sequences gives steps × seqs gaps of dt, each
    # stamped with its own step's end — bin for bin what recording every step would give, also for a
    # step ending on a bin boundary, on the run's start or on its end, and for a leap that starts
    # before the run or runs past its end.
    start = 1_000.0
    leap = LatencyRecorder(start, start + 300.0)
    each = LatencyRecorder(start, start + 300.0)
    leap.add_itl_steps(start + t0, dt, steps, seqs)
    for k in range(1, steps + 1):
        each.add_itl(start + t0 + k * dt, dt, seqs)
    a, b = leap.counts("itl"), each.counts("itl")
    assert np.array_equal(a, b)


def test_observations_outside_the_run_are_dropped() -> None:
    rec = LatencyRecorder(100.0, 160.0)
    rec.add_ttft(99.0, 0.5)
    rec.add_ttft(160.0, 0.5)
    rec.add_itl(170.0, 0.02, 10)
    rec.add_ttft(100.0, 0.5)
    assert rec.counts("ttft").sum() == 1 and rec.counts("itl").sum() == 0


def _two_busy_minutes() -> LatencyRecorder:
    rec = LatencyRecorder(0.0, 600.0)
    # minute 0: 100 fast gaps; minute 1: 100 fast and 20 slow gaps (0.3 s, 17 % of them)
    rec.add_itl(10.0, 0.02, 100)
    rec.add_itl(70.0, 0.02, 100)
    rec.add_itl(110.0, 0.3, 20)
    rec.add_ttft(20.0, 0.4)
    return rec


def test_the_scrape_window_is_the_last_four_bins() -> None:
    rec = _two_busy_minutes()
    ttft, itl = rec.window_p95(60.0)
    assert ttft == pytest.approx(0.25 + 0.25 * 0.95) and itl == pytest.approx(0.01 + 0.015 * 0.95)
    _, itl = rec.window_p95(120.0)
    assert itl is not None and itl > 0.25  # the slow gaps dominate the top 5 %
    assert rec.window_p95(BIN_S * 30) == (None, None)  # nothing observed then


def test_a_minute_is_four_bins() -> None:
    per_minute = _two_busy_minutes().minute_counts("itl")
    assert per_minute.shape == (10, len(ITL_BUCKETS_S) + 1)
    assert per_minute[0].sum() == 100 and per_minute[1].sum() == 120
