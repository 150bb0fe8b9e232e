"""Replicas a workload needs at its SLO (``llmscale.model.capacity``), against hand-worked numbers.

The hand-worked cases use a replica whose roofline is simple enough to follow on paper (:class:`Linear`):
a step reads 10 ms of weights and computes 50 µs per token, nothing for the KV cache. Every prompt
has 1,000 tokens and every output 101 (σ = 0), the step budget is 2,048 tokens.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from llmscale.api import EngineSpec, LLMDeploymentSpec, ModelSpec, ResourcesSpec
from llmscale.model import ReplicaModel
from llmscale.model.capacity import (
    DEFAULT_SHAPE,
    ITL_BUCKETS_S,
    TTFT_BUCKETS_S,
    Burstiness,
    EngineLimits,
    LengthDistribution,
    WorkloadShape,
    bucket_weights,
    capacity_per_replica,
    engine_limits,
    fleet_need,
    interpolated_quantile,
    max_batched_tokens_for_itl,
    replica_point,
    vllm_length_buckets,
)


class Linear:
    """``step = max(10 ms, 50 µs × (decodes + prompt tokens))``; a KV cache of 10 M tokens."""

    kv_cache_capacity_tokens = 10_000_000

    def step_time(self, decode_seqs: Any, kv_tokens_read: Any, prefill_tokens: Any = 0, prefill_pairs: Any = None) -> Any:
        return np.maximum(0.010, (decode_seqs + np.asarray(prefill_tokens, dtype=float)) * 5e-5)


FIXED = WorkloadShape(LengthDistribution(1000.0, 0.0), LengthDistribution(101.0, 0.0))
LIMITS = EngineLimits(max_num_batched_tokens=2048, max_num_seqs=256, context_limit_tokens=8192)


def test_one_replica_by_hand() -> None:
    # 10 requests/s on 3 replicas: 3.33 each. A prompt's chunk step carries its 1,000 tokens beside
    # B decodes: (B + 1000) × 50 µs ≈ 50.2 ms, over the 50 ms ITL target: one slow step per prompt.
    # Steps per second S = λ + (1 − λ × 50.2 ms) / 10 ms = 3.33 + 83.3 = 86.6; Little's law on the
    # decodes: B = λ × (101 − 1) / S = 333 / 86.6 = 3.85 running.
    p = replica_point(Linear(), FIXED, LIMITS, itl_s=0.05, ttft_s=10.0, rate_rps=10 / 3)
    assert p.running == pytest.approx(3.849, abs=0.01)
    assert p.steps_per_s == pytest.approx(86.60, abs=0.05)
    assert p.slow_steps_per_prompt == 1.0
    assert p.slow_step_share == pytest.approx((10 / 3) / 86.60, rel=1e-3)  # 3.8 % of the ITL samples
    assert p.prefill_busy == pytest.approx(10 / 3 * (3.849 + 1000) * 5e-5, rel=1e-3)
    assert p.decode_step_s == pytest.approx(0.010)
    assert p.ttft_miss < 1e-9  # a 50 ms prefill and a 5 ms queue never reach 10 s


def test_load_signal_by_hand() -> None:
    # A minute at Λ = 10 requests/s brings 600 prompts, each one slow step: 600 on average, standard
    # deviation √600 = 24.5 for Poisson arrivals; 99 % of minutes stay under 600 + 2.326 × 24.5 = 657.
    # The pool's steps in a minute are 60 × N × S(Λ/N) and at most 5 % of them may be slow:
    #   N = 2: S(5) = 79.8, 5 % × 60 × 2 × 79.8 = 479 < 657: misses the ITL p95 too often;
    #   N = 3: S(3.33) = 86.6, 5 % × 60 × 3 × 86.6 = 779 ≥ 657: enough.
    need = fleet_need(Linear(), FIXED, LIMITS, 0.05, 10.0, 10.0)
    assert (need.replicas, need.bound_by, need.within) == (3, "ITL", True)
    assert need.point.rate_rps == pytest.approx(10 / 3)
    # Burstier traffic: long prompts in clusters, 4 × the Poisson variance: 600 + 2.326 × 49 = 714;
    # still ≤ 779 on 3.
    assert fleet_need(Linear(), FIXED, LIMITS, 0.05, 10.0, 10.0, burstiness=Burstiness(1.0, 4.0)).replicas == 3
    # 9 × Poisson: 600 + 2.326 × 73.5 = 771, still 3; 16 ×: 600 + 2.326 × 98 = 828 > 779: 4.
    assert fleet_need(Linear(), FIXED, LIMITS, 0.05, 10.0, 10.0, burstiness=Burstiness(1.0, 16.0)).replicas == 4
    # A learnt correction of 0.5 sizes the pool for 20 requests/s.
    halved = fleet_need(Linear(), FIXED, LIMITS, 0.05, 10.0, 10.0, capacity_factor=0.5)
    assert halved.replicas == fleet_need(Linear(), FIXED, LIMITS, 0.05, 10.0, 20.0).replicas


def test_short_prompts_cost_no_slow_steps() -> None:
    # 500-token prompts: (B + 500) × 50 µs ≈ 25 ms < 50 ms: the ITL never breaks; what binds is the
    # decode batch or the prefill time, far beyond 10 requests/s.
    short = WorkloadShape(LengthDistribution(500.0, 0.0), LengthDistribution(101.0, 0.0))
    p = replica_point(Linear(), short, LIMITS, 0.05, 10.0, 10.0)
    assert p.slow_steps_per_prompt == 0.0
    assert fleet_need(Linear(), short, LIMITS, 0.05, 10.0, 10.0).replicas == 1


def test_no_load_needs_no_replica() -> None:
    assert fleet_need(Linear(), FIXED, LIMITS, 0.05, 10.0, 0.0).replicas == 0


def test_the_hint_changes_nothing() -> None:
    for rate in (0.5, 3.0, 10.0, 41.0, 130.0):
        plain = fleet_need(Linear(), FIXED, LIMITS, 0.05, 10.0, rate).replicas
        for hint in (1, 2, 7, 50):
            assert fleet_need(Linear(), FIXED, LIMITS, 0.05, 10.0, rate, hint=hint).replicas == plain


def test_more_load_never_needs_fewer_replicas() -> None:
    needs = [fleet_need(Linear(), FIXED, LIMITS, 0.05, 10.0, r).replicas for r in np.linspace(0, 200, 41)]
    assert needs == sorted(needs)


def test_a_limit_caps_the_answer() -> None:
    assert fleet_need(Linear(), FIXED, LIMITS, 0.05, 10.0, 10_000.0, limit=8).replicas == 8


def test_a_capped_answer_says_it_is_not_within_the_limit() -> None:
    assert fleet_need(Linear(), FIXED, LIMITS, 0.05, 10.0, 10_000.0, limit=8).within is False


@pytest.mark.parametrize("bad", [math.nan, math.inf, -1.0])
def test_a_rate_that_is_not_a_rate_is_refused(bad: float) -> None:
    with pytest.raises(ValueError, match="arrival_rps"):
        fleet_need(Linear(), FIXED, LIMITS, 0.05, 10.0, bad)


def test_lognormal_fit_by_hand() -> None:
    # Azure LLM inference trace 2023 prompts: mean 1,155, p95 4,083. ln(4083/1155) = 1.263;
    # σ = 1.645 − √(1.645² − 2 × 1.263) = 1.645 − 0.424 = 1.221; median = 1155 × e^(−σ²/2) = 549.
    d = LengthDistribution.fit(1155.0, p95=4083.0)
    assert d.sigma == pytest.approx(1.221, abs=0.002)
    assert d.median == pytest.approx(549, abs=2)
    assert d.mean == pytest.approx(1155.0)
    assert d.quantile(0.95) == pytest.approx(4083.0, rel=1e-6)
    # No tail quantile, or one at or below the mean: no spread.
    assert LengthDistribution.fit(200.0).sigma == 0.0
    assert LengthDistribution.fit(200.0, p95=150.0).sigma == 0.0
    # A p90 stands in for a missing p95 (z = 1.2816).
    assert LengthDistribution.fit(1155.0, p90=2000.0).quantile(0.9) == pytest.approx(2000.0, rel=1e-6)
    # A quantile too far above the mean for any log-normal keeps the widest σ that keeps the mean.
    assert LengthDistribution.fit(1155.0, p90=2900.0).sigma == pytest.approx(1.2816, abs=1e-3)


def test_lognormal_fit_through_vllms_buckets() -> None:
    # Mooncake's prompts: mean 12,035, true p95 39,550, which vLLM's 20,000–50,000 bucket reports as
    # 46,352. Read through the buckets, σ comes back near the log-lengths' own spread (1.20).
    buckets = vllm_length_buckets(131_072)
    naive = LengthDistribution.fit(12_035.0, p95=46_352.0)
    aware = LengthDistribution.fit(12_035.0, p95=46_352.0, buckets=buckets)
    assert naive.sigma == pytest.approx(1.55, abs=0.01)
    assert aware.sigma == pytest.approx(1.17, abs=0.01)
    assert interpolated_quantile(0.95, aware, buckets) == pytest.approx(46_352.0, rel=1e-3)
    # A p95 in the +Inf bucket reads as the last finite bound: the least spread that reports it.
    top = LengthDistribution.fit(2814.0, p95=5000.0, buckets=vllm_length_buckets(8192))
    assert top.sigma == pytest.approx(0.397, abs=0.01)
    # An average of such reports that passes the bound by float rounding is the same report (it
    # read as "beyond any log-normal" and fitted σ = 1.645: a 10,900-token p95 for a 5,000 cap).
    assert LengthDistribution.fit(2814.0, p95=5000.000000000001, buckets=vllm_length_buckets(8192)).sigma == top.sigma


def _bisected_sigma(mean: float, p95: float, buckets: tuple[float, ...]) -> float:
    """The σ a 50-step bisection finds for ``fit``'s equation (what ``fit`` solved before its root
    finder): the reference, slow and sure."""
    p95 = min(p95, buckets[-1])
    z = 1.6448536269514722

    def reported(sigma: float) -> float:
        return interpolated_quantile(0.95, LengthDistribution(mean * math.exp(-sigma * sigma / 2.0), sigma), buckets)

    if reported(z) < p95 * (1 - 1e-9):
        return z
    lo, hi = 0.0, z
    for _ in range(50):
        mid = (lo + hi) / 2.0
        lo, hi = (mid, hi) if reported(mid) < p95 else (lo, mid)
    return (lo + hi) / 2.0


@given(
    log_mean=st.floats(0.0, math.log(100_000.0)),
    ratio=st.floats(1.0001, 8.0),
    max_len=st.sampled_from([100, 4096, 32_768, 131_072]),
)
def test_the_bucketed_fit_finds_the_bisections_sigma(log_mean: float, ratio: float, max_len: int) -> None:
    # Including where the report first dips below its value at σ = 0 (mean 220.7, p95 479.8: 485 at
    # σ = 0, 474.7 at 0.3): the crossing the bisection finds.
    mean = math.exp(log_mean)
    buckets = vllm_length_buckets(max_len)
    fitted = LengthDistribution.fit(mean, p95=mean * ratio, buckets=buckets)
    assert fitted.sigma == pytest.approx(_bisected_sigma(mean, mean * ratio, buckets), abs=1e-10)


@pytest.mark.parametrize("mean, p90", [(1155.0, 2000.0), (300.0, 800.0), (40.0, 150.0)])
def test_the_bucketed_fit_of_a_p90_reports_that_p90(mean: float, p90: float) -> None:
    buckets = vllm_length_buckets(8192)
    fitted = LengthDistribution.fit(mean, p90=p90, buckets=buckets)
    assert 0.0 < fitted.sigma <= 1.2816
    if fitted.sigma < 1.2815:  # not the widest σ: the report is the p90 it was fitted to
        assert interpolated_quantile(0.9, fitted, buckets) == pytest.approx(p90, rel=1e-9)


def test_the_bucketed_fit_keeps_the_crossing_bisection_keeps() -> None:
    buckets = vllm_length_buckets(131_072)
    mean, p95 = 220.68950835124684, 479.83394767761445
    assert LengthDistribution.fit(mean, p95=p95, buckets=buckets).sigma == pytest.approx(0.4303, abs=1e-4)


def test_vllm_length_buckets() -> None:
    assert vllm_length_buckets(8192) == (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000)
    assert vllm_length_buckets(100) == (1, 2, 5, 10, 20, 50, 100)


@pytest.mark.parametrize(
    ("target", "bounds", "expect"),
    [
        # 2 s lies in vLLM's (1, 2.5] TTFT bucket: the p95 passes 2 s when P(>1)/3 + 2 P(>2.5)/3 > 5 %.
        pytest.param(2.0, TTFT_BUCKETS_S, (1.0, 2.5, 1 / 3), id="ttft-2s"),
        pytest.param(6.0, TTFT_BUCKETS_S, (5.0, 7.5, 0.6), id="ttft-6s"),
        pytest.param(0.1, ITL_BUCKETS_S, (0.1, 0.1, 1.0), id="itl-on-a-bound"),
        pytest.param(200.0, ITL_BUCKETS_S, (80.0, 80.0, 1.0), id="beyond-the-last-bound"),
    ],
)
def test_bucket_weights(target: float, bounds: tuple[float, ...], expect: tuple[float, float, float]) -> None:
    lo, hi, w = bucket_weights(target, bounds)
    assert (lo, hi) == expect[:2]
    assert w == pytest.approx(expect[2])


BIG = ReplicaModel.from_spec(
    LLMDeploymentSpec(model=ModelSpec(name="m", preset="llama-3.1-70b"), resources=ResourcesSpec(gpus_per_replica=4))
)


def test_chunk_budget_for_the_itl_target() -> None:
    # Llama-3.1-70B bf16 on 4 × H100-SXM: 2 × 70.6 G FLOPs per token over 4 × 989.4 T × 0.5 = 71.3 µs
    # per token, so a 2,048-token step takes 146 ms and 100 ms allows 1,402 tokens: 1,280 rounded
    # down to a multiple of 256.
    assert BIG.step_time(0, 0, 2048) == pytest.approx(0.146, abs=0.001)
    assert max_batched_tokens_for_itl(BIG, 0.1, running=20, context_tokens=1200) == 1280
    assert max_batched_tokens_for_itl(BIG, 0.1, running=20, context_tokens=1200, multiple=1) == pytest.approx(1402, abs=2)
    # A decode step alone over the target: no budget helps.
    assert max_batched_tokens_for_itl(BIG, 0.005, running=20, context_tokens=1200) == 0


def test_engine_limits_from_the_spec() -> None:
    def spec(args: list[str], gpu: str = "h100-sxm") -> LLMDeploymentSpec:
        return LLMDeploymentSpec(
            model=ModelSpec(name="m", preset="llama-3.1-8b"),
            resources=ResourcesSpec(gpu_type=gpu),
            engine=EngineSpec(args=args),
        )

    assert engine_limits(spec([])) == EngineLimits(8192, 1024, 8192)
    assert engine_limits(spec([], "a100-80gb")) == EngineLimits(2048, 256, 8192)
    assert engine_limits(spec(["--max-num-batched-tokens", "2048"])).max_num_batched_tokens == 2048
    assert engine_limits(spec(["--max-num-batched-tokens=1024", "--max-num-seqs=2000"])) == EngineLimits(1024, 1024, 8192)
    assert engine_limits(spec(["--max-num-seqs", "x"])).max_num_seqs == 1024  # unreadable: the default


def _capacity_per_replica(replicas: int, burstiness: Burstiness | None = None) -> tuple[float, str]:
    kw = {} if burstiness is None else {"burstiness": burstiness}
    capacity, _, bound = capacity_per_replica(
        BIG, DEFAULT_SHAPE, engine_limits(_big_spec()), 0.1, 2.0, replicas=replicas, **kw  # type: ignore[arg-type]
    )
    return capacity, bound


def test_capacity_per_replica_grows_with_the_pool() -> None:
    # More replicas share a minute's fluctuations: each carries more.
    one, bound = _capacity_per_replica(1)
    eight, _ = _capacity_per_replica(8)
    assert 5.0 < one < eight < 8.0
    assert bound == "ITL"


def test_capacity_per_replica_shrinks_with_bursts() -> None:
    # Clustered long prompts: less.
    eight, _ = _capacity_per_replica(8)
    bursty, _ = _capacity_per_replica(8, Burstiness(1.0, 20.0))
    assert bursty < eight


def _big_spec() -> LLMDeploymentSpec:
    return LLMDeploymentSpec(model=ModelSpec(name="m", preset="llama-3.1-70b"), resources=ResourcesSpec(gpus_per_replica=4))


def test_prefix_hits_lighten_the_prefill() -> None:
    hit = WorkloadShape(FIXED.prompt, FIXED.output, prefix_cache_hit_rate=0.6)
    # 40 % of 1,000 tokens computed: (B + 400) × 50 µs ≈ 20 ms, under the target: no slow steps.
    assert replica_point(Linear(), hit, LIMITS, 0.05, 10.0, 3.0).slow_steps_per_prompt == 0.0
