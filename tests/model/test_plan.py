"""The capacity planner and ``llmscale plan`` against figures worked by hand.

Llama-3.1-8B on one H100-SXM, bf16, at a mean context C = 2048 (see test_model.py for the sizes):
  KV cache 467,280 tokens → 467,280 // 2048 = 228 sequences at the mean context;
  latency floor 10 tok/s allows 938 → goodput peak batch 228, limited by the KV cache;
  step(228) = (16,060,522,496 + 228 · 268,435,456) / 2.68e12 = 77,263,806,464 / 2.68e12 = 28.8298 ms;
  throughput 228 / 0.0288298 = 7,908.49 tok/s;
  cost = 2.5 USD · 1 GPU / (7,908.49 · 3600 · 0.5) · 1e6 = 0.17562 USD per million tokens.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from llmscale import cli, planner
from llmscale.model import GPU_PRESETS, MODEL_PRESETS, ModelArch, ModelDoesNotFit, ReplicaModel

JSON_KEYS = {
    "kv_bytes_per_token",
    "weight_bytes",
    "max_concurrent_sequences",
    "memory_knee_batch",
    "compute_ridge_batch",
    "throughput_asymptote_tok_s",
    "goodput_peak_tok_s",
    "goodput_peak_batch",
    "recommended_max_num_seqs",
    "usd_per_million_tokens",
    "curve",
}
CURVE_KEYS = {"batch", "step_time_s", "per_user_tok_s", "throughput_tok_s", "kv_read_fraction"}


def _llama8b() -> ReplicaModel:
    return ReplicaModel(MODEL_PRESETS["llama-3.1-8b"], GPU_PRESETS["h100-sxm"])


def test_llama8b_on_h100_goodput_peak_is_limited_by_the_kv_cache() -> None:
    p = planner.plan(_llama8b(), mean_context_tokens=2048)
    assert p.sequences_at_mean_context == 228
    assert p.latency_floor_batch == 938
    assert (p.goodput_peak_batch, p.goodput_peak_limited_by, p.recommended_max_num_seqs) == (
        228,
        "kv cache",
        228,
    )
    assert p.goodput_peak_itl_s == pytest.approx(0.0288297785, rel=1e-8)
    assert p.goodput_peak_tok_s == pytest.approx(7908.48947, rel=1e-8)
    assert p.usd_per_million_tokens == pytest.approx(0.17561999593, rel=1e-8)
    assert p.max_concurrent_sequences == 57


def test_a_stricter_floor_moves_the_peak_to_the_latency_limit() -> None:
    # Floor 50 tok/s: (0.02 − 0.0059927) / 1.0016e-4 = 139.85 → 139 < 228. step(139) =
    # (16,060,522,496 + 139 · 268,435,456) / 2.68e12 = 19.9153 ms → 139 / 0.0199153 = 6,979.55 tok/s.
    p = planner.plan(_llama8b(), mean_context_tokens=2048, min_tokens_per_second_per_user=50)
    assert (p.goodput_peak_batch, p.goodput_peak_limited_by) == (139, "latency floor")
    assert p.goodput_peak_tok_s == pytest.approx(6979.5523, rel=1e-7)
    assert p.usd_per_million_tokens == pytest.approx(0.19899398, rel=1e-7)


def test_llama70b_on_four_h100() -> None:
    # KV cache 513,088 tokens // 2048 = 250 (floor allows 1387). step(250) = (141,107,412,992 +
    # 250 · 2048 · 327,680) / 10.72e12 = 308,876,820,992 / 10.72e12 = 28.8134 ms → 8,676.52 tok/s;
    # cost 2.5 · 4 / (8,676.52 · 1800) · 1e6 = 0.64030 USD.
    m = ReplicaModel(MODEL_PRESETS["llama-3.1-70b"], GPU_PRESETS["h100-sxm"], gpus=4)
    p = planner.plan(m, mean_context_tokens=2048)
    assert (p.goodput_peak_batch, p.goodput_peak_limited_by) == (250, "kv cache")
    assert p.goodput_peak_tok_s == pytest.approx(8676.52067, rel=1e-8)
    assert p.usd_per_million_tokens == pytest.approx(0.64029762, rel=1e-7)


def test_what_if_an_fp8_cache_doubles_the_sequences() -> None:
    p = planner.plan(_llama8b(), mean_context_tokens=2048, context_limit_tokens=8192)
    fp8, _ = p.what_if
    # fp8 KV: 61,248,888,832 // (16 · 65,536) = 58,411 blocks → 58,411 // 512 = 114 at 8192 and
    # 934,576 // 2048 = 456 at the mean; step(456) = the same 77,263,806,464 bytes → 2 × 7,908.49 tok/s.
    assert (fp8.change, fp8.kv_bytes_per_token, fp8.max_concurrent_sequences) == ("kv_dtype=fp8", 65_536, 114)
    assert fp8.goodput_peak_batch == 456
    assert fp8.goodput_peak_tok_s == pytest.approx(2 * 7908.48947, rel=1e-8)


def test_what_if_a_shorter_limit_changes_only_the_concurrency() -> None:
    p = planner.plan(_llama8b(), mean_context_tokens=2048, context_limit_tokens=8192)
    _, shorter = p.what_if
    # Limit 4096: 256 blocks each → 29,205 // 256 = 114 sequences; the goodput peak is unchanged.
    assert (shorter.change, shorter.max_concurrent_sequences) == ("context_limit_tokens=4096", 114)
    assert shorter.goodput_peak_batch == p.goodput_peak_batch


def test_curve_runs_from_one_to_the_sequences_that_fit() -> None:
    p = planner.plan(_llama8b(), mean_context_tokens=2048)
    batches = [c.batch for c in p.curve]
    assert batches[0] == 1 and batches[-1] == 228 and batches == sorted(set(batches))
    assert 60 in batches  # the knee 59.83, rounded
    assert all(a.per_user_tok_s >= b.per_user_tok_s for a, b in zip(p.curve, p.curve[1:], strict=False))
    assert all(a.throughput_tok_s <= b.throughput_tok_s for a, b in zip(p.curve, p.curve[1:], strict=False))


def test_no_batch_meets_an_impossible_floor() -> None:
    # Batch 1 decodes at 1 / 6.09 ms = 164 tok/s; a 1000 tok/s floor is unreachable: cost is unknown.
    p = planner.plan(_llama8b(), mean_context_tokens=2048, min_tokens_per_second_per_user=1000)
    assert (p.goodput_peak_batch, p.goodput_peak_tok_s, p.usd_per_million_tokens) == (0, 0.0, None)
    assert p.recommended_max_num_seqs == 1


def test_plan_refuses_what_vllm_would_refuse() -> None:
    with pytest.raises(ModelDoesNotFit, match="does not fit"):
        planner.plan(ReplicaModel(MODEL_PRESETS["llama-3.1-70b"], GPU_PRESETS["h100-sxm"]))
    # 2 × H100: KV cache 13,511,409,664 bytes = 2,577 blocks; 65,536 tokens need 4,096.
    two = ReplicaModel(MODEL_PRESETS["llama-3.1-70b"], GPU_PRESETS["h100-sxm"], gpus=2)
    with pytest.raises(ModelDoesNotFit, match="lower the context limit"):
        planner.plan(two, context_limit_tokens=65_536)


# ------------------------------------------------------------------ through the CLI


def test_plan_json_through_the_cli(capsys: pytest.CaptureFixture[str]) -> None:
    rc = cli.main(
        [
            "plan",
            "--model",
            "llama-3.1-8b",
            "--gpu",
            "h100-sxm",
            "--mean-context-tokens",
            "2048",
            "--output",
            "json",
        ]
    )
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) >= JSON_KEYS
    assert out["kv_bytes_per_token"] == 131_072
    assert out["weight_bytes"] == 16_060_522_496
    assert out["max_concurrent_sequences"] == 57
    assert out["memory_knee_batch"] == pytest.approx(59.8301086, rel=1e-8)
    assert out["compute_ridge_batch"] == pytest.approx(184.5895522, rel=1e-8)
    assert out["throughput_asymptote_tok_s"] == pytest.approx(9983.778, rel=1e-6)
    assert (out["goodput_peak_batch"], out["recommended_max_num_seqs"]) == (228, 228)
    assert out["goodput_peak_tok_s"] == pytest.approx(7908.48947, rel=1e-8)
    assert out["usd_per_million_tokens"] == pytest.approx(0.17562, rel=1e-5)
    first = out["curve"][0]
    assert set(first) >= CURVE_KEYS
    assert first["batch"] == 1
    assert first["step_time_s"] == pytest.approx(0.0060928948, rel=1e-8)
    assert first["kv_read_fraction"] == pytest.approx(268_435_456 / 16_328_957_952, rel=1e-12)


def test_plan_options_reach_the_model(capsys: pytest.CaptureFixture[str]) -> None:
    rc = cli.main(
        [
            "plan",
            "--model",
            "llama-3.1-8b",
            "--gpu",
            "h100-sxm",
            "--kv-dtype",
            "fp8",
            "--bandwidth-efficiency",
            "0.5",
            "--gpu-hour-usd",
            "4",
            "--utilisation",
            "1",
            "--context-limit-tokens",
            "4096",
            "--output",
            "json",
        ]
    )
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert out["kv_bytes_per_token"] == 65_536
    # fp8 KV: 58,411 blocks // 256 blocks per 4096-token sequence = 228.
    assert out["max_concurrent_sequences"] == 228
    # Ridge with bandwidth efficiency 0.5: 494.7e12 / (3.35e12 · 0.5) = 295.34.
    assert out["compute_ridge_batch"] == pytest.approx(494.7 / 1.675, rel=1e-9)
    assert out["usd_per_million_tokens"] == pytest.approx(4 / (out["goodput_peak_tok_s"] * 3600) * 1e6)
    assert [w["change"] for w in out["what_if"]] == ["context_limit_tokens=2048"]


def test_plan_from_a_config_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "my-model" / "config.json"
    config.parent.mkdir()
    config.write_text(
        json.dumps(
            {
                "model_type": "llama",
                "hidden_size": 4096,
                "intermediate_size": 14336,
                "num_hidden_layers": 32,
                "num_attention_heads": 32,
                "num_key_value_heads": 8,
                "vocab_size": 128256,
            }
        )
    )
    rc = cli.main(["plan", "--config", str(config), "--gpu", "h100-sxm", "--output", "json"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["model"], out["weight_bytes"]) == ("my-model", 16_060_522_496)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        pytest.param(
            ["--model", "llama-4", "--gpu", "h100-sxm"], "known: llama-3.1-8b, llama-3.1-70b", id="model"
        ),
        pytest.param(
            ["--model", "llama-3.1-8b", "--gpu", "tpu"], "known: a100-80gb, h100-sxm, h200", id="gpu"
        ),
        pytest.param(["--model", "llama-3.1-70b", "--gpu", "h100-sxm"], "does not fit", id="no-fit"),
        pytest.param(
            ["--config", "/nonexistent/config.json", "--gpu", "h100-sxm"], "cannot read", id="config"
        ),
        pytest.param(
            ["--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--utilisation", "0"],
            "utilisation",
            id="utilisation",
        ),
    ],
)
def test_plan_errors_exit_2_with_a_clear_message(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["plan", *argv]) == 2
    assert message in capsys.readouterr().err


def test_plan_table_for_people(capsys: pytest.CaptureFixture[str]) -> None:
    rc = cli.main(["plan", "--model", "llama-3.1-8b", "--gpu", "h100-sxm"])
    assert rc == 0
    out = capsys.readouterr().out
    for text in (
        "Fits",
        "KV per token",
        "Memory knee",
        "Compute ridge",
        "Goodput peak",
        "Recommended --max-num-seqs",
        "Cost per million tokens",
        "What if kv_dtype=fp8",
    ):
        assert text in out


def test_recommended_max_num_batched_tokens_keeps_a_chunk_step_within_the_itl_target() -> None:
    # Llama-3.1-8B on one H100: 2 × 8.03 G FLOPs per token over 989.4 T × 0.5 = 32.5 µs per token,
    # so 100 ms (the default 10 tok/s floor) allows 3,077 tokens a step: 3,072 on a multiple of 256.
    assert planner.plan(_llama8b()).recommended_max_num_batched_tokens == 3072
    # Llama-3.1-70B on 4 × H100: 71.3 µs per token, 1,402 tokens: 1,280.
    big = ReplicaModel(MODEL_PRESETS["llama-3.1-70b"], GPU_PRESETS["h100-sxm"], gpus=4)
    p = planner.plan(big)
    assert p.recommended_max_num_batched_tokens == 1280
    assert big.step_time(p.recommended_max_num_seqs, p.recommended_max_num_seqs * 1226, 1280 - p.recommended_max_num_seqs) <= 0.1
    # A looser ITL target admits a larger budget; never below --max-num-seqs.
    # 200 ms: 2,805 tokens, 2,560 on a multiple of 256.
    assert planner.plan(big, min_tokens_per_second_per_user=5.0).recommended_max_num_batched_tokens == 2560
    assert planner.plan(_llama8b()).to_json()["recommended_max_num_batched_tokens"] == 3072


MOE_CONFIG = {  # Mixtral-8x7B's config.json: a mixture of experts (active parameters < total)
    "model_type": "mixtral", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
    "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 32000, "num_local_experts": 8,
    "num_experts_per_tok": 2,
}


def _spec_with(fragment: dict[str, Any]) -> Any:
    """The sample LLMDeployment with ``fragment`` (``plan -o spec``'s ``spec``) merged in, validated."""
    from llmscale.api import LLMDeploymentSpec
    from llmscale.localcluster import SAMPLE

    spec = yaml.safe_load(SAMPLE.read_text())["spec"]
    spec["model"] = fragment["model"]
    spec["resources"] = {**spec.get("resources", {}), **fragment["resources"]}
    return LLMDeploymentSpec.model_validate(spec)


@pytest.mark.parametrize("gpu", sorted(GPU_PRESETS))
def test_plan_o_spec_of_a_preset_is_a_valid_spec_on_every_gpu(gpu: str, capsys: pytest.CaptureFixture[str]) -> None:
    if cli.main(["plan", "--model", "llama-3.1-8b", "--gpu", gpu, "-o", "spec"]) != 0:
        assert "does not fit" in capsys.readouterr().err  # a clear refusal, never a broken fragment
        return
    fragment = yaml.safe_load(capsys.readouterr().out)["spec"]
    spec = _spec_with(fragment)
    assert (spec.model.preset, spec.resources.gpu_type) == ("llama-3.1-8b", gpu)
    assert spec.resources.gpu_resource_name == GPU_PRESETS[gpu].resource_name


@pytest.mark.parametrize("config", [
    pytest.param({"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
                  "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256}, id="dense-gqa"),
    pytest.param(MOE_CONFIG, id="moe"),
])
def test_plan_o_spec_of_a_config_carries_its_architecture(
    config: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The fragment's architecture plans exactly as the config.json did: nothing lost in transcription."""
    path = tmp_path / "my-model" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(config))
    assert cli.main(["plan", "--config", str(path), "--gpu", "h200", "-o", "spec", "--context-limit-tokens", "16384"]) == 0
    spec = _spec_with(yaml.safe_load(capsys.readouterr().out)["spec"])
    arch = ModelArch.from_hf_config(config, name="my-model")
    got = spec.model.architecture
    assert got is not None and spec.model.name == "my-model" and spec.model.context_limit_tokens == 16384
    assert (got.num_hidden_layers, got.num_key_value_heads, got.head_dim, got.parameters) == (
        arch.num_hidden_layers, arch.num_key_value_heads, arch.head_dim, arch.parameters)
    assert (got.active_parameters or got.parameters) == arch.active_parameters


def test_every_gpu_preset_has_consistent_figures() -> None:
    for gpu in GPU_PRESETS.values():
        assert gpu.memory_bytes >= 16 * (1 << 30) and gpu.hbm_bandwidth_bytes_s > 1e11, gpu.name
        assert gpu.bf16_dense_flops <= gpu.fp8_dense_flops <= 2.05 * gpu.bf16_dense_flops, gpu.name  # datasheet rounding (L40S 2.02)
        assert gpu.source, gpu.name


def test_plan_of_a_spec_plans_its_declared_accelerator_as_the_flags_would(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Hardware that is no preset, declared in spec.resources.accelerator, is planned as declared:
    the same figures as the flags give for a preset with those figures."""
    manifest = {"apiVersion": "llmscale.dev/v1alpha1", "kind": "LLMDeployment", "metadata": {"name": "x"},
                "spec": {"model": {"name": "m", "preset": "llama-3.1-8b", "contextLimitTokens": 4096},
                         "engine": {"image": "vllm/vllm-openai:v0.32.0"},
                         "slo": {"itlP95Seconds": 0.05},
                         "resources": {"accelerator": {
                             "name": "like-h100", "memoryBytes": GPU_PRESETS["h100-sxm"].memory_bytes,
                             "memoryBandwidthBytesPerSecond": GPU_PRESETS["h100-sxm"].hbm_bandwidth_bytes_s,
                             "denseFlops": GPU_PRESETS["h100-sxm"].bf16_dense_flops,
                             "fp8DenseFlops": GPU_PRESETS["h100-sxm"].fp8_dense_flops}}}}
    path = tmp_path / "x.yaml"
    path.write_text(yaml.safe_dump_all([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "n"}},
                                        manifest]))
    assert cli.main(["plan", "--spec", str(path), "-o", "json"]) == 0
    from_spec = json.loads(capsys.readouterr().out)
    assert cli.main(["plan", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--context-limit-tokens", "4096",
                     "--min-tokens-per-second-per-user", "20", "-o", "json"]) == 0
    from_flags = json.loads(capsys.readouterr().out)
    assert from_spec["gpu"] == "like-h100"
    for key in ("kv_cache_capacity_tokens", "max_concurrent_sequences", "goodput_peak_tok_s", "goodput_peak_batch"):
        assert from_spec[key] == pytest.approx(from_flags[key]), key


@pytest.mark.parametrize(("argv", "message"), [
    pytest.param(["--spec", "{spec}", "--gpu", "h100-sxm"], "--gpu and -o spec go with --model", id="spec-and-gpu"),
    pytest.param(["--model", "llama-3.1-8b"], "--gpu is required", id="no-gpu"),
    pytest.param(["--spec", "{missing}"], "cannot read the LLMDeployment", id="missing-file"),
    pytest.param(["--spec", "{invalid}"], "spec.replicas", id="invalid-spec"),
    pytest.param(["--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--gpus", "100", "-o", "spec"], "must be ≤ 64",
                 id="spec-beyond-the-crd"),
    pytest.param(["--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--context-limit-tokens", "100", "-o", "spec"],
                 "must be ≥ 256", id="spec-limit-below-the-crd"),
])
def test_plan_spec_errors(argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from llmscale.localcluster import SAMPLE
    invalid = yaml.safe_load(SAMPLE.read_text())
    invalid["spec"]["replicas"] = {"min": -1}
    (tmp_path / "invalid.yaml").write_text(yaml.safe_dump(invalid))
    paths = {"spec": str(SAMPLE), "missing": str(tmp_path / "nope.yaml"), "invalid": str(tmp_path / "invalid.yaml")}
    assert cli.main(["plan", *[a.format(**paths) for a in argv]]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err, err
