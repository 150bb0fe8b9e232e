"""The capacity model's latency quantiles at a rate: at no load they are a lone request's, and
they grow with the load."""

from __future__ import annotations

import math

import pytest

from llmscale.model import GPU_PRESETS, MODEL_PRESETS, LengthDistribution, ReplicaModel, WorkloadShape
from llmscale.model.capacity import EngineLimits
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
