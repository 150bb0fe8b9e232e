"""The capacity model's latency quantiles at a rate: at no load they are a lone request's, and
they grow with the load."""

from __future__ import annotations

import math

import numpy as np
import pytest

from llmscale.model import GPU_PRESETS, MODEL_PRESETS, LengthDistribution, ReplicaModel, WorkloadShape
from llmscale.model.capacity import EngineLimits, replica_point
from llmscale.model.predict import predict_latency

MODEL = ReplicaModel(arch=MODEL_PRESETS["llama-3.1-8b"], gpu=GPU_PRESETS["h100-sxm"])
LIMITS = EngineLimits(max_num_batched_tokens=8192, max_num_seqs=256, context_limit_tokens=8192)
SHAPE = WorkloadShape(LengthDistribution.fit(1155.0, p95=4083.0), LengthDistribution.fit(211.0, p95=451.0))


def test_at_no_load_ttft_is_the_p95_prompts_prefill() -> None:
    idle = predict_latency(MODEL, SHAPE, LIMITS, 1e-6)
    p95_prompt = SHAPE.prompt.quantile(0.95)
    assert idle.ttft_p95_s == pytest.approx(MODEL.prefill_time(p95_prompt), rel=0.1)


def test_at_no_load_itl_is_a_lone_decode_step() -> None:
    idle = predict_latency(MODEL, SHAPE, LIMITS, 1e-6)
    assert idle.itl_p95_s == pytest.approx(MODEL.decode_step_time(1, 1500), rel=0.2)


@pytest.mark.parametrize("shape", [SHAPE, WorkloadShape(LengthDistribution(200.0, 0.3), LengthDistribution(800.0, 0.5))],
                         ids=["azure-like", "short-prompts-long-outputs"])
def test_latencies_grow_with_the_rate_until_the_prefills_cannot_keep_up(shape: WorkloadShape) -> None:
    last_ttft, last_itl = 0.0, 0.0
    rate = 0.5
    while True:
        p = predict_latency(MODEL, shape, LIMITS, rate)
        if math.isinf(p.ttft_p95_s):
            break
        assert p.ttft_p95_s >= last_ttft * (1 - 1e-9)
        assert p.itl_p95_s >= last_itl * (1 - 1e-9)
        last_ttft, last_itl = p.ttft_p95_s, p.itl_p95_s
        rate *= 2
        assert rate < 1e5


@pytest.mark.parametrize("budget", [1024, 2048, 8192])
def test_at_no_load_a_chunked_prompt_pays_its_whole_attention(budget: int) -> None:
    """With an attention term, the p95 prompt's TTFT is its chunk steps with each chunk attending to
    the ones before it: the same attention whatever the step budget."""
    model = MODEL.with_changes(attention_efficiency=0.05)
    limits = EngineLimits(max_num_batched_tokens=budget, max_num_seqs=256, context_limit_tokens=8192)
    idle = predict_latency(model, SHAPE, limits, 1e-6)
    p = SHAPE.prompt.quantile(0.95)
    done, want = 0.0, 0.0
    while done < p - 1e-9:
        c = min(budget - 1.0, p - done)  # a step's budget less the one decode beside it
        want += model.step_time(1, 1500, c, c * done + c * c / 2.0)
        done += c
    attention_alone = p * p / 2.0 * model.attention_flops_per_token_pair / (model.peak_flops * model.attention_efficiency)
    assert idle.ttft_p95_s == pytest.approx(want, rel=0.1)
    assert idle.ttft_p95_s > attention_alone


# A small model on a slow accelerator: the KV cache's reads and the batch move a decode step.
SMALL = ReplicaModel(arch=MODEL_PRESETS["llama-3.1-8b"], gpu=GPU_PRESETS["l40s"]).with_changes(
    attention_efficiency=0.05, seq_overhead_s=2e-4)


def _sampled_itl_p95(model: ReplicaModel, shape: WorkloadShape, limits: EngineLimits, rate: float) -> float:
    """The decode gaps' p95 drawn one token at a time: the token's own request (weighted by its
    output) at a uniform point of its output, beside a Poisson number of others at the mean
    context; no chunk steps (the rates used keep them under 1 %)."""
    point = predict_latency(model, shape, limits, rate)
    rng = np.random.default_rng(7)
    n = 200_000
    prompt = np.clip(shape.prompt.median * np.exp(shape.prompt.sigma * rng.standard_normal(n)), 1.0,
                     limits.context_limit_tokens - 1)
    output = np.clip(shape.output.median * np.exp(shape.output.sigma * rng.standard_normal(n)), 1.0,
                     limits.context_limit_tokens)
    pick = rng.choice(n, size=n, p=output / output.sum())
    own = prompt[pick] + rng.uniform(0.0, 1.0, n) * output[pick]
    others = rng.poisson(point.running, n)
    mean_context = float(prompt.mean() + (np.mean(output**2) + output.mean()) / (2.0 * output.mean()))
    gaps = model.step_time(1.0 + others, own + others * mean_context, 0.0)
    return float(np.quantile(gaps, 0.95))


@pytest.mark.parametrize("rate", [0.05, 0.2, 0.5])
def test_the_itl_p95_is_the_token_gaps_p95_a_sampler_finds(rate: float) -> None:
    shape = WorkloadShape(LengthDistribution.fit(1155.0, p95=4083.0), LengthDistribution.fit(211.0, p95=451.0))
    predicted = predict_latency(SMALL, shape, LIMITS, rate)
    assert predicted.itl_p95_s == pytest.approx(_sampled_itl_p95(SMALL, shape, LIMITS, rate), rel=0.03)


def test_a_wider_context_spread_raises_the_itl_p95_at_the_same_mean() -> None:
    """The p95 is a token's gap, not the step at the mean context: long prompts make slow steps."""
    model = SMALL.with_changes(attention_efficiency=0.002)  # the context dominates the step
    narrow = WorkloadShape(LengthDistribution.fit(1155.0, p95=1500.0), LengthDistribution.fit(211.0, p95=300.0))
    wide = WorkloadShape(LengthDistribution.fit(1155.0, p95=4000.0), LengthDistribution.fit(211.0, p95=300.0))
    assert predict_latency(model, wide, LIMITS, 0.05).itl_p95_s > 1.05 * predict_latency(model, narrow, LIMITS, 0.05).itl_p95_s


def test_a_busier_replica_has_a_slower_itl_p95_than_its_mean_step() -> None:
    """A batch that varies around its mean (Poisson) has slower steps than the mean batch's."""
    p = predict_latency(SMALL, SHAPE, LIMITS, 5.0)
    assert p.itl_p95_s > p.decode_step_s


def test_chunk_steps_over_a_twentieth_of_the_gaps_set_the_itl_p95() -> None:
    """Long prompts at a high rate: the chunk steps are more than 5 % of the gaps, so the p95 is one."""
    shape = WorkloadShape(LengthDistribution.fit(6000.0, p95=7900.0), LengthDistribution.fit(20.0, p95=40.0))
    limits = EngineLimits(max_num_batched_tokens=512, max_num_seqs=256, context_limit_tokens=8192)
    busy = predict_latency(MODEL, shape, limits, 1.0)
    assert busy.itl_p95_s == pytest.approx(replica_point(MODEL, shape, limits, 1.0, 1.0, 1.0).chunk_step_s)
    assert busy.itl_p95_s > 2 * busy.decode_step_s


def test_a_short_prompts_chunk_step_is_its_own_size_not_the_budgets() -> None:
    """1,000-token prompts under an 8,192-token budget: the gaps that carry a prompt are steps of
    1,000 prompt tokens, whatever the budget would allow (a full-budget step is 8× the work)."""
    shape = WorkloadShape(LengthDistribution(1000.0, 0.001), LengthDistribution(200.0, 0.001))
    predicted = predict_latency(MODEL, shape, LIMITS, 10.0)
    point = replica_point(MODEL, shape, LIMITS, 1.0, 1.0, 10.0)
    one_prompt = MODEL.step_time(point.running, point.running * point.context_tokens, 1000.0, 1000.0**2 / 2.0)
    assert predicted.itl_p95_s <= one_prompt * 1.01
    assert predicted.itl_p95_s < 0.5 * point.chunk_step_s


@pytest.mark.parametrize("quantile", [0.0, 1.0, 1.5, -0.1, math.nan])
def test_a_quantile_outside_zero_to_one_is_refused(quantile: float) -> None:
    # Above 1 the TTFT search would never end (no wait is long enough for a share above all).
    with pytest.raises(ValueError, match="quantile"):
        predict_latency(MODEL, SHAPE, LIMITS, 1.0, quantile=quantile)
