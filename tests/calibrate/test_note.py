"""From measurements to a calibration: lone prompts up to the context limit, chunked as the engine
chunks them, and a per-request cost told from the per-step one (synthetic measurements made by a
known model)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from llmscale.calibrate.note import (
    Measurement,
    fit_measurement,
    itl_spread,
    lone_prompt_steps,
    note_figures,
    observations,
    simulated_latency,
)
from llmscale.calibrate.sweep import DecodePoint, LatencyStats, PrefillPoint
from llmscale.commands.calibrate import default_prompt_lengths
from llmscale.model import ReplicaModel
from llmscale.model.capacity import EngineLimits
from llmscale.model.presets import GPU, ModelArch

CPU = GPU(name="cpu-test", memory_bytes=8 << 30, hbm_bandwidth_bytes_s=45e9, bf16_dense_flops=333e9,
          fp8_dense_flops=333e9, source="test")
TINY = ModelArch.from_hf_config(
    {"hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
     "num_key_value_heads": 2, "head_dim": 32, "vocab_size": 2048},
    name="tiny",
)
PRIOR = ReplicaModel(arch=TINY, gpu=CPU)
#: What the engine "is": a CPU-like tiny model whose long prompts are mostly attention.
TRUTH = PRIOR.with_changes(bandwidth_efficiency=0.3, compute_efficiency=0.2, step_overhead_s=0.0018,
                           seq_overhead_s=3e-5, attention_efficiency=0.02)
REQUEST_S = 0.004
BUDGET = 2048


def _stats(seconds: float) -> LatencyStats:
    return LatencyStats(5, seconds, seconds, seconds)


def _measurement(lengths: list[int]) -> Measurement:
    prefill = []
    for p in lengths:
        n, c, pairs = lone_prompt_steps(p, BUDGET)
        prefill.append(PrefillPoint(p, _stats(n * TRUTH.step_time(0, 0, c, pairs) + REQUEST_S)))
    decode = [
        DecodePoint(b, float(b), ctx, _stats(TRUTH.step_time(b, b * ctx, 0)), b / TRUTH.step_time(b, b * ctx, 0))
        for b in (1, 2, 4, 8, 16, 32) for ctx in (128.0, 2112.0)
    ]
    return Measurement("http://engine", "tiny", 4096, BUDGET, 128, prefill, decode)


def test_the_default_lone_prompts_reach_the_context_limit() -> None:
    assert default_prompt_lengths(4096) == [16, 64, 256, 1024, 2048, 3072, 4080]
    assert default_prompt_lengths(131072)[-3:] == [65536, 98304, 131056]


@given(st.integers(min_value=64, max_value=1 << 20))
def test_the_default_lone_prompts_ascend_below_the_limit(limit: int) -> None:
    lengths = default_prompt_lengths(limit)
    assert lengths == sorted(set(lengths))
    assert all(1 <= n < limit - 2 for n in lengths)
    assert lengths[-1] >= limit - 16


@given(st.integers(min_value=1, max_value=200_000), st.integers(min_value=16, max_value=16_384))
def test_a_lone_prompts_chunks_hold_its_whole_attention(prompt: int, budget: int) -> None:
    n, c, pairs = lone_prompt_steps(prompt, budget)
    assert c <= budget
    assert n * c == pytest.approx(prompt)
    assert n * pairs == pytest.approx(prompt * prompt / 2.0)


def test_every_lone_prompt_is_fitted_the_long_ones_as_their_chunks() -> None:
    obs = [o for o in observations(_measurement([256, 2048, 3072, 4080])) if o.request_share]
    assert [round(o.prefill_tokens) for o in obs] == [256, 2048, 1536, 2040]
    assert [o.request_share for o in obs] == [1.0, 1.0, 0.5, 0.5]


def test_the_fit_recovers_the_engine_that_made_the_measurement() -> None:
    fit = fit_measurement(PRIOR, _measurement(default_prompt_lengths(4096)))
    assert fit.attention_efficiency == pytest.approx(0.02, rel=0.05)
    assert fit.request_overhead_s == pytest.approx(REQUEST_S, rel=0.05)
    assert fit.step_overhead_s == pytest.approx(0.0018, rel=0.05)
    assert fit.rms_relative_error < 0.01


def test_after_calibration_every_lone_prompts_ttft_is_the_measured_one() -> None:
    m = _measurement(default_prompt_lengths(4096))
    fit = fit_measurement(PRIOR, m)
    figures = note_figures(m, PRIOR, fit.apply(PRIOR), simulate_rates=False, request_s=fit.request_overhead_s)
    lone = [f for f in figures if f.name.startswith("TTFT of a lone")]
    assert len(lone) == 7 and all(f.fitted for f in lone)
    for f in lone:
        assert f.calibrated == pytest.approx(f.measured, rel=0.02), f.name


def _decode_point(batch: float, p50: float, p95: float, ctx: float = 128.0) -> DecodePoint:
    return DecodePoint(int(batch), batch, ctx, LatencyStats(100, p50, p95, p95), batch / p50)


def test_the_itl_spread_is_the_batch_sweeps_p95_over_its_median_between_its_points() -> None:
    m = Measurement("u", "m", 4096, BUDGET, 128, [], [
        _decode_point(1, 0.002, 0.0026), _decode_point(8, 0.002, 0.0030), _decode_point(32, 0.004, 0.008),
        _decode_point(8, 0.004, 0.020, ctx=2112.0),  # the context sweep is not the batch sweep's scatter
    ])
    assert itl_spread(m, 1.0) == pytest.approx(1.3)
    assert itl_spread(m, 4.5) == pytest.approx(1.4)
    assert itl_spread(m, 0.5) == pytest.approx(1.3)  # held at the ends
    assert itl_spread(m, 64.0) == pytest.approx(2.0)
    assert itl_spread(Measurement("u", "m", 4096, BUDGET, 128, [], []), 4.0) == 1.0


def test_the_simulator_replays_the_requests_the_engine_got() -> None:
    """Lone 2,000-token prompts ten seconds apart: every TTFT is the prompt's prefill, whatever the
    rate the point was asked at."""
    model = TRUTH
    arrivals = [(10.0 * k, 2000, 2) for k in range(20)]
    limits = EngineLimits(BUDGET, 128, 4096)
    _, ttft = simulated_latency(model, [(16, 2)], 50.0, limits, warmup_s=0.0, arrivals=arrivals)
    n, c, pairs = lone_prompt_steps(2000, BUDGET)
    assert ttft == pytest.approx(n * model.step_time(0, 0, c, pairs), rel=0.08)
