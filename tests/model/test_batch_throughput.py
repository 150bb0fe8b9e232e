"""One replica's throughput on batch work (``llmscale.model.batch``), worked through by hand."""

from __future__ import annotations

import pytest

from llmscale.model import GPU_PRESETS, MODEL_PRESETS, ModelDoesNotFit, ReplicaModel
from llmscale.model.batch import batch_throughput

BIG = ReplicaModel(MODEL_PRESETS["llama-3.1-70b"], GPU_PRESETS["h100-sxm"], gpus=4)
SMALL = ReplicaModel(MODEL_PRESETS["llama-3.1-8b"], GPU_PRESETS["h100-sxm"], gpus=1)


def test_benchmark_deployment_on_the_azure_mix() -> None:
    """Llama-3.1-70B bf16 on 4 × H100-SXM, prompt 1,155 and output 211 tokens, floor 10 tokens/s.

    Mean decode context 1,155 + 211/2 = 1,260.5 tokens: the 513,088-token KV cache holds 407 such
    sequences, fewer than the floor allows (1,402), so 407 run. Their decode step is compute-bound:
    407 × 2 × 70.6e9 FLOP ÷ 1.98 PFLOP/s = 29.0 ms. A request costs its 82.4 ms prefill plus
    211 × 29.0 ms ÷ 407 = 15.0 ms of decode: 97.4 ms, so 10.3 requests/s and 14,000 tokens/s
    (every token costs the same FLOPs once both phases are compute-bound).
    """
    got = batch_throughput(BIG, prompt_tokens=1155, output_tokens=211, min_tok_s_per_user=10)
    assert got.running == 407
    assert got.seconds_per_request == pytest.approx(0.0974, abs=5e-4)
    assert got.requests_per_s == pytest.approx(10.27, abs=0.02)
    assert got.tokens_per_s == pytest.approx(BIG.effective_flops / BIG.flops_per_token, rel=1e-9)
    # Batch work beats the interactive SLO point (7.3 requests/s at ITL p95 100 ms, test_slo.py).
    assert got.requests_per_s > 7.3


def test_formula_holds() -> None:
    got = batch_throughput(SMALL, prompt_tokens=500, output_tokens=400, min_tok_s_per_user=20)
    context = 500 + 400 / 2
    expected = SMALL.prefill_time(500) + 400 * SMALL.decode_step_time(got.running, context) / got.running
    assert got.seconds_per_request == pytest.approx(expected, rel=1e-12)
    assert got.tokens_per_s == pytest.approx(900 / expected, rel=1e-12)
    assert got.running == min(
        SMALL.max_batch_at_speed(20, context), SMALL.kv_cache_capacity_tokens // context
    )


def test_a_stricter_floor_never_speeds_it_up() -> None:
    rates = [
        batch_throughput(SMALL, prompt_tokens=1000, output_tokens=300, min_tok_s_per_user=f).tokens_per_s
        for f in (1, 10, 30, 60, 200)
    ]
    assert rates == sorted(rates, reverse=True)
    # Above the batch-1 speed the replica still works, one sequence at a time.
    slowest = batch_throughput(SMALL, prompt_tokens=1000, output_tokens=300, min_tok_s_per_user=1e6)
    assert slowest.running == 1 and slowest.tokens_per_s > 0


def test_errors() -> None:
    with pytest.raises(ValueError, match="prompt_tokens"):
        batch_throughput(SMALL, prompt_tokens=0, output_tokens=1, min_tok_s_per_user=10)
    with pytest.raises(ValueError, match="output_tokens"):
        batch_throughput(SMALL, prompt_tokens=10, output_tokens=0.5, min_tok_s_per_user=10)
    with pytest.raises(ValueError, match="min_tok_s_per_user"):
        batch_throughput(SMALL, prompt_tokens=10, output_tokens=1, min_tok_s_per_user=0)
    with pytest.raises(ModelDoesNotFit, match="not one sequence"):
        batch_throughput(SMALL, prompt_tokens=10_000_000, output_tokens=1, min_tok_s_per_user=10)
