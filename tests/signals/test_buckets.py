"""An SLO target inside a histogram bucket (issue 21): what a ``histogram_quantile`` p95 can say."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from llmscale.model.vllm_defaults import ITL_BUCKETS_S as MODEL_ITL_BUCKETS_S
from llmscale.model.vllm_defaults import TTFT_BUCKETS_S as MODEL_TTFT_BUCKETS_S
from llmscale.signals.buckets import judge_quantile, scaled, wide_bucket
from llmscale.signals.profiles import get_profile
from llmscale.signals.profiles.vllm import ITL_BUCKETS_S, TTFT_BUCKETS_S


def histogram_quantile(q: float, bounds: tuple[float, ...], values: list[float]) -> float:
    """Prometheus's classic ``histogram_quantile`` (promql/quantile.go ``bucketQuantile``) of
    ``values`` observed into ``bounds`` (+Inf last)."""
    counts = [sum(v <= b for v in values) for b in bounds] + [len(values)]
    rank = q * len(values)
    i = next(k for k, c in enumerate(counts) if c >= rank)
    if i == len(bounds):
        return bounds[-1]
    lo = 0.0 if i == 0 else bounds[i - 1]
    below = 0 if i == 0 else counts[i - 1]
    inside = counts[i] - below
    return lo + (bounds[i] - lo) * ((rank - below) / inside)


def true_p95(values: list[float]) -> float:
    """The 95th percentile as the SLO means it: 95 % of requests at most this (nearest rank)."""
    return sorted(values)[math.ceil(0.95 * len(values)) - 1]


def test_the_profiles_bounds_are_vllms() -> None:
    assert TTFT_BUCKETS_S == MODEL_TTFT_BUCKETS_S and ITL_BUCKETS_S == MODEL_ITL_BUCKETS_S
    assert get_profile("vllm").ttft_buckets_s == TTFT_BUCKETS_S
    legacy = get_profile("vllm-legacy")
    assert legacy.ttft_buckets_s is not None and legacy.ttft_buckets_s[-1] == 10.0
    assert get_profile("sglang").ttft_buckets_s is None


@pytest.mark.parametrize(
    ("target", "bounds", "expected"),
    [
        pytest.param(2.0, TTFT_BUCKETS_S, (1.0, 2.5, 1.5, 2.5), id="default-2s-ttft-inside-(1,2.5]"),
        pytest.param(0.1, ITL_BUCKETS_S, None, id="default-100ms-itl-on-a-bound"),
        pytest.param(1.7, TTFT_BUCKETS_S, (1.0, 2.5, 1.5, 1.0), id="nearer-the-lower-bound"),
        pytest.param(1.75, TTFT_BUCKETS_S, (1.0, 2.5, 1.5, 1.0), id="a-tie-takes-the-stricter-bound"),
        pytest.param(0.12, ITL_BUCKETS_S, (0.1, 0.15, 0.05, 0.1), id="itl-120ms-inside-(0.1,0.15]"),
        pytest.param(3000.0, TTFT_BUCKETS_S, (2560.0, math.inf, math.inf, 2560.0), id="above-the-last-bound"),
        pytest.param(0.0005, TTFT_BUCKETS_S, (0.0, 0.001, 0.001, 0.001), id="below-the-first-bound"),
        pytest.param(2.0, None, None, id="bounds-unknown"),
    ],
)
def test_the_bucket_a_target_lies_inside(target: float, bounds: tuple[float, ...] | None,
                                         expected: tuple[float, float, float, float] | None) -> None:
    bucket = wide_bucket(target, bounds)
    if expected is None:
        assert bucket is None
    else:
        assert bucket is not None
        assert (bucket.lo, bucket.hi, bucket.error_s, bucket.nearest_bound) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("minute", "reads", "verdict"),
    [
        pytest.param({0.8: 90, 2.4: 10}, 1.75, "inside", id="issue-90x0.8s+10x2.4s-truly-missed"),
        pytest.param({0.8: 80, 1.2: 20}, 2.125, "inside", id="issue-80x0.8s+20x1.2s-truly-met"),
        pytest.param({0.8: 96, 2.4: 4}, 0.75 + 0.25 * 95 / 96, "met", id="p95-in-(0.75,1]-met"),
        pytest.param({0.8: 90, 3.0: 10}, 3.75, "missed", id="p95-beyond-the-bucket-missed"),
    ],
)
def test_the_issues_minutes(minute: dict[float, int], reads: float, verdict: str) -> None:
    values = [v for v, n in minute.items() for _ in range(n)]
    p95 = histogram_quantile(0.95, TTFT_BUCKETS_S, values)
    assert p95 == pytest.approx(reads)
    assert judge_quantile(p95, 2.0, TTFT_BUCKETS_S) == verdict
    # Without the bounds the old plain comparison: the first reads met, the second breached.
    assert judge_quantile(p95, 2.0, None) == ("met" if p95 <= 2.0 else "missed")


@given(
    values=st.lists(st.floats(0.0005, 100.0, allow_nan=False), min_size=1, max_size=300),
    target=st.one_of(st.sampled_from(TTFT_BUCKETS_S), st.floats(0.002, 3000.0, allow_nan=False)),
)
def test_a_certain_verdict_is_never_wrong(values: list[float], target: float) -> None:
    """Whatever the observations and the target: 'met' means the true p95 is within the target,
    'missed' that it is over; a target on a bound is never 'inside'."""
    p95 = histogram_quantile(0.95, TTFT_BUCKETS_S, values)
    verdict = judge_quantile(p95, target, TTFT_BUCKETS_S)
    truth = true_p95(values)
    if verdict == "met":
        assert truth <= target * (1 + 1e-9)
    elif verdict == "missed":
        assert truth > target
    if wide_bucket(target, TTFT_BUCKETS_S) is None:
        assert verdict != "inside"


def test_speculative_decodings_per_token_bounds() -> None:
    assert scaled((0.1, 0.15), 2.5) == pytest.approx((0.04, 0.06))
    assert scaled((0.1,), None) == (0.1,) and scaled(None, 2.0) is None
