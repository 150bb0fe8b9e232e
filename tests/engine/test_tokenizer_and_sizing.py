"""The mock's token counting rules and how the engine is sized from the performance model."""

from __future__ import annotations

import asyncio

import pytest

from llmscale.engine.main import EngineSettings, build_core, vllm_batch_defaults
from llmscale.engine.metrics import build_1_2_5_buckets
from llmscale.engine.tokenizer import chat_prompt_tokens, count_text_tokens, filler_text, prompt_tokens
from llmscale.model import GPU_PRESETS, MODEL_PRESETS, ReplicaModel


@pytest.mark.parametrize(
    ("prompt", "tokens"),
    [
        pytest.param("", 0, id="empty"),
        pytest.param("abcd", 1, id="four-bytes"),
        pytest.param("abcde", 2, id="five-bytes-round-up"),
        pytest.param("é", 1, id="two-byte-char"),
        pytest.param([5, 6, 7], 3, id="token-ids"),
        pytest.param([[1] * 10], 10, id="one-batched-id-list"),
        pytest.param(["abcdefgh"], 2, id="one-batched-string"),
    ],
)
def test_prompt_tokens(prompt: object, tokens: int) -> None:
    assert prompt_tokens(prompt) == tokens


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param(["a", "b"], id="batch-of-two"),
        pytest.param(3, id="int"),
        pytest.param([True], id="bools"),
    ],
)
def test_prompt_shapes_the_mock_refuses(bad: object) -> None:
    with pytest.raises(ValueError):
        prompt_tokens(bad)


def test_chat_template_overhead() -> None:
    # 5 priming + per message 5 + content tokens; content parts are concatenated.
    assert chat_prompt_tokens([{"role": "user", "content": "abcdefgh"}]) == 5 + 5 + 2
    assert chat_prompt_tokens([{"role": "user", "content": [{"type": "text", "text": "abcd"}]}]) == 11
    with pytest.raises(ValueError):
        chat_prompt_tokens([])


def test_filler_text_has_one_word_per_token() -> None:
    assert len(filler_text(0, 50).split()) == 50
    assert count_text_tokens(" the") == 1


def test_filler_text_continues_where_it_left_off() -> None:
    assert filler_text(0, 3) + filler_text(3, 2) == filler_text(0, 5)


def test_1_2_5_buckets_as_vllm() -> None:
    assert build_1_2_5_buckets(100) == [1, 2, 5, 10, 20, 50, 100]
    assert build_1_2_5_buckets(8192)[-1] == 5000


async def test_cache_is_sized_from_the_model() -> None:
    core, info, _ = build_core(EngineSettings(model="llama-3.1-8b", gpu="h100-sxm"))
    # Llama-3.1-8B bf16 on an 80 GiB H100 at 0.9 utilisation: the model's capacity, in 16-token blocks.
    expected = (
        ReplicaModel(arch=MODEL_PRESETS["llama-3.1-8b"], gpu=GPU_PRESETS["h100-sxm"]).kv_cache_capacity_tokens
        // 16
    )
    assert core.scheduler.config.num_gpu_blocks == expected
    assert info.max_model_len == 131072  # Llama 3.1 max_position_embeddings, fits in the cache
    small, info2, _ = build_core(
        EngineSettings(model="llama-3.1-8b", gpu="h100-sxm", num_gpu_blocks_override=100)
    )
    assert (
        small.scheduler.config.num_gpu_blocks == 100 and info2.max_model_len == 1600
    )  # lowered to the cache
    await asyncio.sleep(0)


@pytest.mark.parametrize(
    ("settings", "error"),
    [
        pytest.param(EngineSettings(model="llama-3.1-70b", gpu="l40s"), ValueError, id="weights-do-not-fit"),
        pytest.param(EngineSettings(model="gpt-5", gpu="h100-sxm"), KeyError, id="unknown-model"),
        pytest.param(
            EngineSettings(model="llama-3.1-8b", gpu="h100-sxm", max_model_len=10**7),
            ValueError,
            id="context-over-cache",
        ),
    ],
)
async def test_engine_refuses_to_start_like_vllm(settings: EngineSettings, error: type[Exception]) -> None:
    with pytest.raises(error):
        build_core(settings)


@pytest.mark.parametrize(
    ("gpu", "expected"),
    [
        pytest.param("h100-sxm", (1024, 8192), id="h100"),
        pytest.param("h200", (1024, 8192), id="h200"),
        pytest.param("b200", (1024, 8192), id="b200"),
        pytest.param("a100-80gb", (256, 2048), id="a100-excluded-by-name"),
        pytest.param("l40s", (256, 2048), id="l40s-under-70-gib"),
    ],
)
async def test_batch_limits_default_as_vllm_per_gpu(gpu: str, expected: tuple[int, int]) -> None:
    assert vllm_batch_defaults(GPU_PRESETS[gpu]) == expected
    core, _, _ = build_core(EngineSettings(model="mistral-7b", gpu=gpu, max_model_len=4096))
    cfg = core.scheduler.config
    assert (cfg.max_num_seqs, cfg.max_num_batched_tokens) == expected
    explicit, _, _ = build_core(
        EngineSettings(model="mistral-7b", gpu=gpu, max_model_len=4096, max_num_seqs=7)
    )
    assert explicit.scheduler.config.max_num_seqs == 7
