"""The roofline model against figures worked by hand from the formulas (arithmetic in comments).

Constants used below:
  GiB = 2**30 = 1,073,741,824 bytes; H100-SXM 80 GiB = 85,899,345,920 bytes, 3.35e12 B/s,
  989.4e12 dense BF16 FLOP/s (NVIDIA H100 datasheet); H200 141 GiB, 4.8e12 B/s.
  Default efficiencies: bandwidth 0.8, compute 0.5; gpu_memory_utilization 0.9; 16-token blocks.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import llmscale.model as model_pkg
from llmscale import api
from llmscale.model import (
    GPU_PRESETS,
    MODEL_PRESETS,
    ModelArch,
    ReplicaModel,
    dtype_bytes,
    estimate_parameters,
)

REL = 1e-9


@pytest.fixture
def llama8b_h100() -> ReplicaModel:
    return ReplicaModel(MODEL_PRESETS["llama-3.1-8b"], GPU_PRESETS["h100-sxm"])


@pytest.fixture
def llama70b_4h100() -> ReplicaModel:
    return ReplicaModel(MODEL_PRESETS["llama-3.1-70b"], GPU_PRESETS["h100-sxm"], gpus=4)


def test_presets_equal_the_api_name_lists() -> None:
    assert tuple(GPU_PRESETS) == api.GPU_PRESET_NAMES
    assert tuple(MODEL_PRESETS) == api.MODEL_PRESET_NAMES


def test_public_api_is_complete() -> None:
    public = {n for n in dir(model_pkg) if not n.startswith("_")} - {
        "batch", "capacity", "fit", "predict", "presets", "roofline", "vllm_defaults"}
    assert set(model_pkg.__all__) == public


@pytest.mark.parametrize("preset", [*GPU_PRESETS.values(), *MODEL_PRESETS.values()], ids=lambda p: p.name)
def test_every_preset_cites_a_source(preset: Any) -> None:
    assert len(preset.source) > 40


@pytest.mark.parametrize(
    ("name", "published"),
    [
        # Totals of the published safetensors weights on the Hugging Face Hub.
        pytest.param("llama-3.1-8b", 8_030_261_248, id="llama-3.1-8b"),
        pytest.param("llama-3.1-70b", 70_553_706_496, id="llama-3.1-70b"),
        pytest.param("mistral-7b", 7_248_023_552, id="mistral-7b-v0.3"),
        pytest.param("qwen2.5-7b", 7_615_616_512, id="qwen2.5-7b"),
        pytest.param("qwen2.5-72b", 72_706_203_648, id="qwen2.5-72b"),
        pytest.param("mixtral-8x7b", 46_702_792_704, id="mixtral-8x7b"),
    ],
)
def test_preset_parameter_counts_equal_the_published_ones(name: str, published: int) -> None:
    assert MODEL_PRESETS[name].parameters == published


def test_mixtral_active_parameters_worked_by_hand() -> None:
    # Per layer: attention 4096·4096·2 + 4096·1024·2 = 41,943,040; two experts 2·3·4096·14336
    # = 352,321,536; router 4096·8 = 32,768; norms 8,192 → 394,305,536; × 32 = 12,617,777,152.
    # + embeddings and LM head 2·32000·4096 = 262,144,000 + final norm 4,096 = 12,879,925,248.
    assert MODEL_PRESETS["mixtral-8x7b"].active_parameters == 12_879_925_248


def test_from_hf_config_on_a_literal_config() -> None:
    # Qwen2.5-7B-Instruct's config.json as published (abridged to the fields that matter plus a
    # few it ignores); no head_dim: it is hidden_size / heads = 3584 / 28 = 128.
    config = {
        "architectures": ["Qwen2ForCausalLM"],
        "hidden_act": "silu",
        "hidden_size": 3584,
        "intermediate_size": 18944,
        "max_position_embeddings": 32768,
        "model_type": "qwen2",
        "num_attention_heads": 28,
        "num_hidden_layers": 28,
        "num_key_value_heads": 4,
        "rms_norm_eps": 1e-06,
        "rope_theta": 1000000.0,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "vocab_size": 152064,
    }
    arch = ModelArch.from_hf_config(config, name="qwen")
    assert arch.head_dim == 128
    assert (arch.num_hidden_layers, arch.num_attention_heads, arch.num_key_value_heads) == (28, 28, 4)
    # Per layer: q 3584·3584 + 3584 bias = 12,848,640; k and v 3584·512 + 512 = 1,835,520 each;
    # o 12,845,056; MLP 3·3584·18944 = 203,685,888; norms 7,168 → 233,057,792; × 28 =
    # 6,525,618,176; + final norm 3,584 + 2·152064·3584 = 1,089,994,752 → 7,615,616,512.
    assert arch.parameters == arch.active_parameters == 7_615_616_512


def _small_arch() -> ModelArch:
    return ModelArch.from_hf_config(
        {"num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 256, "parameters": 5_000_000}
    )


def test_from_hf_config_defaults_the_kv_heads_to_the_attention_heads() -> None:
    arch = _small_arch()
    assert (arch.num_key_value_heads, arch.head_dim) == (4, 64)


def test_from_hf_config_takes_given_parameters() -> None:
    assert _small_arch().parameters == 5_000_000


def test_from_hf_config_without_the_fields_to_count_parameters_fails_clearly() -> None:
    with pytest.raises(ValueError, match="intermediate_size"):
        ModelArch.from_hf_config({"num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 256})


def test_tied_embeddings_count_once() -> None:
    base = {
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 1,
        "num_attention_heads": 4,
        "vocab_size": 1000,
    }
    untied, _ = estimate_parameters(base)
    tied, _ = estimate_parameters({**base, "tie_word_embeddings": True})
    assert untied - tied == 1000 * 64


def test_dtype_bytes() -> None:
    assert (dtype_bytes("bf16"), dtype_bytes("fp16"), dtype_bytes("fp8")) == (2, 2, 1)
    with pytest.raises(ValueError, match=r"known: .*bf16"):
        dtype_bytes("int3")


def test_llama8b_on_h100_sizes(llama8b_h100: ReplicaModel) -> None:
    m = llama8b_h100
    assert m.kv_bytes_per_token == 131_072  # 2 · 32 layers · 8 KV heads · 128 · 2 bytes
    assert m.weight_bytes == 16_060_522_496  # 8,030,261,248 · 2 bytes
    # usable = 85,899,345,920 · 0.9 = 77,309,411,328; KV bytes = 77,309,411,328 − 16,060,522,496
    # = 61,248,888,832; one block = 16 · 131,072 = 2,097,152 bytes → 29,205 blocks = 467,280 tokens.
    assert m.kv_cache_bytes == 61_248_888_832
    assert m.kv_cache_capacity_tokens == 467_280
    # 8192-token sequences need 512 blocks each: 29,205 // 512 = 57.
    assert m.max_concurrent_sequences(8192) == 57
    # 8193 tokens need 513 blocks: 29,205 // 513 = 56.
    assert m.max_concurrent_sequences(8193) == 56


def test_llama8b_on_h100_times(llama8b_h100: ReplicaModel) -> None:
    m = llama8b_h100
    # Effective bandwidth 3.35e12 · 0.8 = 2.68e12 B/s; effective FLOP/s 989.4e12 · 0.5 = 494.7e12.
    # Batch 1 at 2048 tokens: (16,060,522,496 + 2048 · 131,072) / 2.68e12 = 16,328,957,952 / 2.68e12.
    assert m.decode_step_time(1, 2048) == pytest.approx(0.0060928948, rel=1e-8)
    # Chunked prefill, 32 decodes at 2048 + 512 prompt tokens: memory (16,060,522,496 + 65,536 ·
    # 131,072) / 2.68e12 = 0.0091979 s; compute 2 · 8,030,261,248 · 544 / 494.7e12 = 0.0176611 s.
    assert m.step_time(32, 32 * 2048, 512) == pytest.approx(0.017661055666, rel=1e-8)
    # Prefill of 4096 tokens: 2 · 8,030,261,248 · 4096 / 494.7e12 = 0.13297736 s (> weight read 5.99 ms).
    assert m.prefill_time(4096) == pytest.approx(0.13297736031, rel=1e-8)
    # A 10-token prompt is bound by the weight read: 16,060,522,496 / 2.68e12 = 5.9927 ms.
    assert m.prefill_time(10) == pytest.approx(0.0059927322746, rel=1e-8)


def test_llama8b_on_h100_derived_figures(llama8b_h100: ReplicaModel) -> None:
    m = llama8b_h100
    # Knee at C = 2048: 16,060,522,496 / (2048 · 131,072 = 268,435,456) = 59.830.
    assert m.memory_knee_batch(2048) == pytest.approx(59.8301086, rel=1e-8)
    assert m.kv_read_fraction(59.830108642578125, 2048) == pytest.approx(0.5, rel=1e-12)
    # Ridge: (16,060,522,496 / 2.68e12) / (2 · 8,030,261,248 / 494.7e12) = 494.7 / 2.68 = 184.59.
    assert m.compute_ridge_batch() == pytest.approx(494.7 / 2.68, rel=REL)
    # Asymptote: min(2.68e12 / 268,435,456 = 9,983.78, 494.7e12 / 16,060,522,496 = 30,802) tok/s.
    assert m.throughput_asymptote_tok_s(2048) == pytest.approx(9983.778, rel=1e-6)
    # Floor 10 tok/s: (0.1 − 0.0059927) / (268,435,456 / 2.68e12 = 1.0016e-4) = 938.55 → 938.
    assert m.max_batch_at_speed(10, 2048) == 938
    assert m.per_user_tok_s(938, 2048) >= 10 > m.per_user_tok_s(939, 2048)


def test_llama70b_on_four_h100(llama70b_4h100: ReplicaModel) -> None:
    m = llama70b_4h100
    assert m.kv_bytes_per_token == 327_680  # 2 · 80 · 8 · 128 · 2
    assert m.weight_bytes == 141_107_412_992  # 70,553,706,496 · 2
    # usable 4 · 85,899,345,920 · 0.9 = 309,237,645,312; − weights = 168,130,232,320 bytes;
    # block 16 · 327,680 = 5,242,880 → 32,068 blocks = 513,088 tokens; 8192-token seqs: 32,068 // 512 = 62.
    assert m.kv_cache_bytes == 168_130_232_320
    assert m.kv_cache_capacity_tokens == 513_088
    assert m.max_concurrent_sequences(8192) == 62
    # Bandwidth 4 · 3.35e12 · 0.8 = 10.72e12: batch 1 at 2048 = (141,107,412,992 + 671,088,640) / 10.72e12.
    assert m.decode_step_time(1, 2048) == pytest.approx(0.0132256065, rel=1e-8)
    # Knee 141,107,412,992 / (2048 · 327,680) = 210.27; dense bf16 ridge is 2 B/param · FLOP/s /
    # (2 · B/s) = 1978.8e12 / 10.72e12 = 184.59, the same as on one GPU.
    assert m.memory_knee_batch(2048) == pytest.approx(210.26643066, rel=1e-8)
    assert m.compute_ridge_batch() == pytest.approx(184.5895522, rel=1e-8)
    # Floor 10 tok/s: (0.1 − 141,107,412,992 / 10.72e12) / (671,088,640 / 10.72e12) = 1387.1 → 1387.
    assert m.max_batch_at_speed(10, 2048) == 1387


def test_mixtral_on_h200_reads_all_experts_but_computes_two() -> None:
    m = ReplicaModel(MODEL_PRESETS["mixtral-8x7b"], GPU_PRESETS["h200"])
    assert m.weight_bytes == 93_405_585_408  # 46,702,792,704 · 2
    # usable int(151,397,597,184 · 0.9) = 136,257,837,465; − weights = 42,852,252,057 bytes;
    # 42,852,252,057 // 2,097,152 = 20,433 blocks = 326,928 tokens; 8192-token seqs: 39.
    assert m.kv_cache_capacity_tokens == 326_928
    assert m.max_concurrent_sequences(8192) == 39
    # Ridge: (93,405,585,408 / 3.84e12) / (2 · 12,879,925,248 / 494.7e12) = 467.13: much later than a
    # dense model's 184.6 on the same chip because every expert is read but only two compute.
    assert m.compute_ridge_batch() == pytest.approx(467.13261921, rel=1e-8)


def _bf16_and_fp8() -> tuple[ReplicaModel, ReplicaModel]:
    base = ReplicaModel(MODEL_PRESETS["llama-3.1-8b"], GPU_PRESETS["h100-sxm"])
    return base, base.with_changes(weight_dtype="fp8", kv_dtype="fp8")


def test_an_fp8_cache_halves_the_kv_bytes() -> None:
    base, fp8 = _bf16_and_fp8()
    assert fp8.kv_bytes_per_token == base.kv_bytes_per_token // 2


def test_fp8_weights_use_fp8_flops() -> None:
    base, fp8 = _bf16_and_fp8()
    assert fp8.weight_bytes == base.weight_bytes // 2
    assert fp8.effective_flops == pytest.approx(1978.9e12 * 0.5)
    # A100 has no FP8 tensor cores: its FP8 figure is its BF16 one.
    a100 = base.with_changes(gpu=GPU_PRESETS["a100-80gb"], weight_dtype="fp8")
    assert a100.peak_flops == 312e12


def test_seventy_billion_does_not_fit_on_one_h100() -> None:
    m = ReplicaModel(MODEL_PRESETS["llama-3.1-70b"], GPU_PRESETS["h100-sxm"])
    assert not m.fits
    assert m.kv_cache_capacity_tokens == 0
    assert m.max_concurrent_sequences(8192) == 0


def test_invalid_settings_are_rejected() -> None:
    arch, gpu = MODEL_PRESETS["mistral-7b"], GPU_PRESETS["l40s"]
    with pytest.raises(ValueError, match="gpus"):
        ReplicaModel(arch, gpu, gpus=0)
    with pytest.raises(ValueError, match="bandwidth_efficiency"):
        ReplicaModel(arch, gpu, bandwidth_efficiency=1.5)
    with pytest.raises(ValueError, match="Unknown dtype"):
        ReplicaModel(arch, gpu, kv_dtype="int4")


def _qwen_on_two_h200s() -> api.LLMDeploymentSpec:
    return api.LLMDeploymentSpec.model_validate(
        {
            "model": {"name": "chat", "preset": "qwen2.5-72b", "kvCacheDtype": "fp8"},
            "resources": {"gpusPerReplica": 2, "gpuType": "h200"},
        }
    )


def test_from_spec_reads_the_model_gpus_dtypes_from_the_spec() -> None:
    m = ReplicaModel.from_spec(_qwen_on_two_h200s(), bandwidth_efficiency=0.7)
    assert (m.arch.name, m.gpu.name, m.gpus, m.kv_dtype, m.bandwidth_efficiency) == (
        "qwen2.5-72b",
        "h200",
        2,
        "fp8",
        0.7,
    )


def test_from_spec_refuses_an_unknown_override() -> None:
    with pytest.raises(TypeError, match="no field"):
        ReplicaModel.from_spec(_qwen_on_two_h200s(), bogus=1)


def test_from_spec_with_an_explicit_architecture() -> None:
    spec = api.ModelSpec.model_validate(
        {
            "name": "mine",
            "architecture": {
                "numHiddenLayers": 4,
                "numAttentionHeads": 8,
                "numKeyValueHeads": 2,
                "headDim": 64,
                "parameters": 100_000_000,
            },
        }
    )
    arch = ModelArch.from_spec(spec)
    assert (arch.name, arch.hidden_size, arch.active_parameters) == ("mine", 512, 100_000_000)


def test_array_arguments_agree_with_scalars(llama8b_h100: ReplicaModel) -> None:
    batches = np.array([1, 8, 64, 512])
    curve = llama8b_h100.decode_step_time(batches, 2048)
    assert isinstance(curve, np.ndarray) and curve.shape == (4,)
    for b, t in zip(batches, curve, strict=True):
        assert t == pytest.approx(llama8b_h100.decode_step_time(int(b), 2048), rel=1e-12)


def test_array_arguments_broadcast(llama8b_h100: ReplicaModel) -> None:
    batches = np.array([1, 8, 64, 512])
    grid = llama8b_h100.step_time(batches[:, None], batches[:, None] * np.array([512, 4096]), 0)
    assert isinstance(grid, np.ndarray) and grid.shape == (4, 2)


@given(
    preset=st.sampled_from(sorted(MODEL_PRESETS)),
    gpu=st.sampled_from(sorted(GPU_PRESETS)),
    batch=st.integers(0, 4096),
    more_batch=st.integers(0, 4096),
    context=st.integers(0, 200_000),
    more_context=st.integers(0, 200_000),
    prefill=st.integers(0, 16_384),
)
def test_step_time_is_monotone_in_every_input(
    preset: str, gpu: str, batch: int, more_batch: int, context: int, more_context: int, prefill: int
) -> None:
    m = ReplicaModel(MODEL_PRESETS[preset], GPU_PRESETS[gpu])
    t = m.step_time(batch, batch * context, prefill)
    assert m.step_time(batch + more_batch, (batch + more_batch) * context, prefill) >= t
    assert m.step_time(batch, batch * (context + more_context), prefill) >= t
    assert m.step_time(batch, batch * context, prefill + more_batch) >= t
    assert t > 0 and math.isfinite(t)
