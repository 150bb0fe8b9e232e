"""The efficiency fit recovers what made the data: synthetic steps from a model with known
efficiencies and overhead, with and without noise, and sides the data cannot reach."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from llmscale.api import LLMDeploymentSpec
from llmscale.model import GPU_PRESETS, MODEL_PRESETS, ReplicaModel
from llmscale.model.fit import EfficiencyFit, StepObservation, figure_time, fit_efficiencies
from llmscale.model.presets import GPU

CPU = GPU(
    name="cpu-test",
    memory_bytes=8 << 30,
    hbm_bandwidth_bytes_s=20e9,
    bf16_dense_flops=200e9,
    fp8_dense_flops=200e9,
    source="test",
)


def _truth(gpu: GPU, arch: str, bw: float, comp: float, overhead: float, per_seq: float = 0.0) -> ReplicaModel:
    return ReplicaModel(
        arch=MODEL_PRESETS[arch],
        gpu=gpu,
        bandwidth_efficiency=bw,
        compute_efficiency=comp,
        step_overhead_s=overhead,
        seq_overhead_s=per_seq,
    )


def _sweep(truth: ReplicaModel, noise: float = 0.0, seed: int = 0) -> list[StepObservation]:
    """Decode steps at batches 1–256 (context 600) and lone prefills of 16–4,096 tokens, as the
    calibration verb measures them."""
    rng = np.random.default_rng(seed)
    obs = []
    for b in (1, 2, 4, 8, 16, 32, 64, 128, 256):
        t = truth.step_time(b, b * 600, 0)
        obs.append(StepObservation(b, b * 600, 0, t * (1 + noise * rng.standard_normal())))
    # The context alone (a per-sequence cost and KV reads both grow with the batch: only the
    # context tells them apart).
    for c in (2000, 6000):
        t = truth.step_time(16, 16 * c, 0)
        obs.append(StepObservation(16, 16 * c, 0, t * (1 + noise * rng.standard_normal())))
    for p in (16, 64, 256, 1024, 4096):
        t = truth.step_time(0, 0, p)
        obs.append(StepObservation(0, 0, p, t * (1 + noise * rng.standard_normal())))
    return obs


@pytest.mark.parametrize(
    ("gpu", "arch", "bw", "comp", "overhead", "per_seq"),
    [
        pytest.param(GPU_PRESETS["h100-sxm"], "llama-3.1-8b", 0.8, 0.5, 0.0, 0.0, id="h100-defaults-no-overhead"),
        pytest.param(GPU_PRESETS["h100-sxm"], "llama-3.1-8b", 0.55, 0.3, 0.004, 0.0, id="h100-slow-with-overhead"),
        pytest.param(GPU_PRESETS["l40s"], "mistral-7b", 0.9, 0.7, 0.001, 0.0, id="l40s-fast"),
        pytest.param(CPU, "llama-3.1-8b", 0.25, 0.05, 0.002, 0.0, id="cpu-low-efficiencies"),
        pytest.param(GPU_PRESETS["h100-sxm"], "llama-3.1-8b", 0.7, 0.4, 0.002, 5e-5, id="h100-per-sequence-cost"),
        pytest.param(CPU, "llama-3.1-8b", 0.3, 0.1, 0.001, 2e-4, id="cpu-per-sequence-cost"),
    ],
)
def test_recovers_known_efficiencies_exactly(
    gpu: GPU, arch: str, bw: float, comp: float, overhead: float, per_seq: float
) -> None:
    truth = _truth(gpu, arch, bw, comp, overhead, per_seq)
    prior = _truth(gpu, arch, 0.8, 0.5, 0.0)
    sweep = _sweep(truth)
    fit = fit_efficiencies(prior, sweep)
    assert fit.bandwidth_efficiency == pytest.approx(bw, rel=0.01)
    assert fit.compute_efficiency == pytest.approx(comp, rel=0.01)
    # Overheads are found to a thousandth of the shortest step (an 8B model on a slow device takes
    # seconds a step: a millisecond of overhead is then below what any step can show).
    shortest = min(o.seconds for o in sweep)
    assert fit.step_overhead_s == pytest.approx(overhead, abs=max(2e-5, 1e-3 * shortest))
    assert fit.seq_overhead_s == pytest.approx(per_seq, abs=max(1e-6, 1e-4 * shortest))
    assert fit.rms_relative_error < 0.005
    assert fit.bandwidth_identified and fit.compute_identified


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_recovers_efficiencies_through_five_percent_noise(seed: int) -> None:
    truth = _truth(GPU_PRESETS["h100-sxm"], "llama-3.1-8b", 0.6, 0.35, 0.003)
    prior = _truth(GPU_PRESETS["h100-sxm"], "llama-3.1-8b", 0.8, 0.5, 0.0)
    fit = fit_efficiencies(prior, _sweep(truth, noise=0.05, seed=seed))
    assert fit.bandwidth_efficiency == pytest.approx(0.6, rel=0.15)
    assert fit.compute_efficiency == pytest.approx(0.35, rel=0.15)
    # The fitted model predicts the true step times within the noise.
    fitted = fit.apply(prior)
    for b in (1, 16, 128):
        assert fitted.step_time(b, b * 600, 0) == pytest.approx(truth.step_time(b, b * 600, 0), rel=0.1)
    assert fitted.prefill_time(2048) == pytest.approx(truth.prefill_time(2048), rel=0.1)


def _fit_of_decode_only_steps() -> EfficiencyFit:
    truth = _truth(GPU_PRESETS["h100-sxm"], "llama-3.1-8b", 0.7, 0.4, 0.001)
    prior = _truth(GPU_PRESETS["h100-sxm"], "llama-3.1-8b", 0.8, 0.5, 0.0)
    decode_only = [
        StepObservation(b, b * c, 0, truth.step_time(b, b * c, 0)) for b in (1, 4, 16, 64) for c in (600, 4000)
    ]
    return fit_efficiencies(prior, decode_only)


def test_memory_bound_data_keeps_the_prior_compute_efficiency() -> None:
    fit = _fit_of_decode_only_steps()
    assert fit.bandwidth_efficiency == pytest.approx(0.7, rel=0.01)
    assert fit.step_overhead_s == pytest.approx(0.001, rel=0.02)
    assert fit.compute_efficiency == pytest.approx(0.5)


def test_memory_bound_data_says_the_compute_efficiency_is_not_identified() -> None:
    assert not _fit_of_decode_only_steps().compute_identified


def test_the_fit_never_claims_more_than_the_datasheet() -> None:
    """Steps faster than peak bandwidth allows are explained by efficiency 1, never above it."""
    model = _truth(GPU_PRESETS["h100-sxm"], "llama-3.1-8b", 0.8, 0.5, 0.0)
    fast = [StepObservation(b, b * 600, 0, 0.5 * model.step_time(b, b * 600, 0)) for b in (1, 8, 64)]
    fit = fit_efficiencies(model, fast)
    assert 0 < fit.bandwidth_efficiency <= 1.0
    assert 0 < fit.compute_efficiency <= 1.0
    assert fit.step_overhead_s >= 0.0


@pytest.mark.parametrize(
    "observations",
    [
        pytest.param([StepObservation(1, 600, 0, 0.01)], id="one-observation"),
        pytest.param([StepObservation(1, 600, 0, 0.01), StepObservation(2, 1200, 0, 0.0)], id="zero-duration"),
        pytest.param(
            [StepObservation(1, 600, 0, 0.01), StepObservation(2, 1200, 0, float("nan"))], id="nan-duration"
        ),
    ],
)
def test_refuses_data_it_cannot_fit(observations: list[StepObservation]) -> None:
    model = _truth(GPU_PRESETS["h100-sxm"], "llama-3.1-8b", 0.8, 0.5, 0.0)
    with pytest.raises(ValueError):
        fit_efficiencies(model, observations)


def _with_overheads() -> tuple[ReplicaModel, ReplicaModel]:
    base = _truth(GPU_PRESETS["h100-sxm"], "llama-3.1-8b", 0.8, 0.5, 0.0)
    return base, base.with_changes(step_overhead_s=0.005, seq_overhead_s=0.0002)


def test_overhead_enters_every_step() -> None:
    base, slow = _with_overheads()
    assert slow.step_time(8, 8000, 0) == pytest.approx(base.step_time(8, 8000, 0) + 0.005 + 8 * 0.0002)
    assert slow.prefill_time(512) == pytest.approx(base.prefill_time(512) + 0.005)
    arr = slow.step_time(np.array([1, 8]), np.array([600, 4800]), 0)
    assert arr == pytest.approx([slow.step_time(1, 600, 0), slow.step_time(8, 4800, 0)])


def test_overhead_enters_the_speed_floor() -> None:
    _, slow = _with_overheads()
    b = slow.max_batch_at_speed(50.0, 1000)
    assert slow.per_user_tok_s(b, 1000) >= 50.0 > slow.per_user_tok_s(b + 1, 1000)


def test_a_negative_overhead_is_refused() -> None:
    base, _ = _with_overheads()
    with pytest.raises(ValueError):
        base.with_changes(step_overhead_s=-1.0)


def _calibrated_spec_on_a_custom_accelerator() -> LLMDeploymentSpec:
    from llmscale.api import LLMDeploymentSpec

    spec = LLMDeploymentSpec.model_validate(
        {
            "model": {
                "name": "tiny",
                "preset": "llama-3.1-8b",
                "calibration": {
                    "bandwidthEfficiency": 0.3,
                    "computeEfficiency": 0.1,
                    "stepOverheadSeconds": 0.002,
                    "sequenceOverheadSeconds": 0.0001,
                },
            },
            "resources": {
                "accelerator": {
                    "name": "cpu-2core",
                    "memoryBytes": 8 << 30,
                    "memoryBandwidthBytesPerSecond": 20e9,
                    "denseFlops": 200e9,
                }
            },
        }
    )
    return spec


def test_from_spec_uses_the_custom_accelerator() -> None:
    from llmscale.model.capacity import engine_limits

    spec = _calibrated_spec_on_a_custom_accelerator()
    model = ReplicaModel.from_spec(spec)
    assert model.gpu.name == "cpu-2core"
    assert model.gpu.hbm_bandwidth_bytes_s == 20e9 and model.gpu.fp8_dense_flops == 200e9
    assert engine_limits(spec).max_num_batched_tokens == 2048  # a small device: vLLM's small defaults


def test_from_spec_uses_the_calibration() -> None:
    from llmscale.api import LLMDeploymentSpec

    model = ReplicaModel.from_spec(_calibrated_spec_on_a_custom_accelerator())
    assert (model.bandwidth_efficiency, model.compute_efficiency, model.step_overhead_s) == (0.3, 0.1, 0.002)
    assert model.seq_overhead_s == 0.0001
    uncalibrated = LLMDeploymentSpec.model_validate({"model": {"name": "x", "preset": "llama-3.1-8b"}})
    assert ReplicaModel.from_spec(uncalibrated).step_overhead_s == 0.0


def test_live_windows_recover_an_upgrade_that_halves_the_overhead() -> None:
    """Production: windows of live histogram means at different loads; an engine upgrade that
    changes the efficiencies shows as a different fit on the windows after it."""
    from llmscale.model.fit import LiveWindow, fit_live

    prior = _truth(GPU_PRESETS["h100-sxm"], "llama-3.1-8b", 0.8, 0.5, 0.0)

    def windows(truth: ReplicaModel) -> list[LiveWindow]:
        out = []
        for running, prompt in ((2, 300), (10, 900), (40, 2000), (120, 4000), (200, 12000)):
            ctx = prompt + 100
            n = -(-prompt // 8192)
            out.append(
                LiveWindow(
                    running=running,
                    context_tokens=ctx,
                    itl_mean_s=truth.step_time(running, running * ctx, 0),
                    prompt_tokens=prompt,
                    # vLLM's prefill time: the chunk steps, each beside the running batch's decodes.
                    prefill_mean_s=n * truth.step_time(running, running * ctx, prompt / n),
                    tokens=1000,
                )
            )
        return out

    before = fit_live(prior, windows(_truth(GPU_PRESETS["h100-sxm"], "llama-3.1-8b", 0.6, 0.4, 0.004)))
    after = fit_live(prior, windows(_truth(GPU_PRESETS["h100-sxm"], "llama-3.1-8b", 0.6, 0.4, 0.002)))
    assert before is not None and after is not None
    assert before.step_overhead_s == pytest.approx(0.004, rel=0.05)
    assert after.step_overhead_s == pytest.approx(0.002, rel=0.05)
    assert after.bandwidth_efficiency == pytest.approx(0.6, rel=0.02)
    assert after.compute_efficiency == pytest.approx(0.4, rel=0.02)
    # Idle windows (no running requests, no prompts) are not evidence.
    idle = [LiveWindow(0.0, 0.0, float("nan"), 0.0, float("nan"))] * 3
    assert fit_live(prior, idle) is None


@pytest.mark.parametrize(("bandwidth", "compute", "overhead"), [(0.8, 0.5, 0.0), (0.6, 0.4, 0.002), (0.8, 0.15, 0.0),
                                                                 (0.3, 0.5, 0.001)])
def test_live_windows_whose_mean_itl_carries_the_chunk_steps_give_the_engine(bandwidth: float, compute: float,
                                                                             overhead: float) -> None:
    """A window's mean ITL is the mean of its steps, a share of which also computed a prompt chunk
    (vLLM's chunked prefill): read as decode steps alone, the fit put the chunks' time into a
    per-sequence overhead and a slower bandwidth (the simulator's engine equal to the model read
    0.89-0.91 of its batch-1 decode speed); read as the mixture, it gives the engine."""
    from llmscale.model.fit import LiveWindow, fit_live, lone_prompt_steps

    prior = _truth(GPU_PRESETS["h100-sxm"], "llama-3.1-8b", 0.8, 0.5, 0.0)
    truth = _truth(GPU_PRESETS["h100-sxm"], "llama-3.1-8b", bandwidth, compute, overhead)

    def windows(mixture: bool) -> list[LiveWindow]:
        out = []
        for running, prompt, rate in ((2, 300, 1.0), (10, 900, 3.0), (40, 2000, 6.0), (120, 4000, 4.0), (60, 1500, 9.0)):
            ctx = prompt + 100
            n, c, pairs = lone_prompt_steps(prompt, 8192)
            decode = truth.step_time(running, running * ctx, 0)
            chunked = truth.step_time(running, running * ctx, c, pairs)
            # Steps a second: each ITL second holds 1/mean-step steps; the prompts' n chunks take
            # rate·n of them, so the mean step solves  mean = decode + rate·n·mean·(chunked − decode).
            share = rate * n * decode / (1.0 - rate * n * (chunked - decode))
            mean = (1.0 - share) * decode + share * chunked
            steps = 60.0 / mean
            out.append(LiveWindow(running=running, context_tokens=ctx, itl_mean_s=mean, prompt_tokens=prompt,
                                  prefill_mean_s=n * chunked, tokens=steps * running,
                                  requests=60.0 * rate if mixture else 0.0))
        return out

    fit = fit_live(prior, windows(mixture=True))
    assert fit is not None
    fitted = fit.apply(prior)
    for d, ctx in ((1, 1024), (64, 1024), (256, 2048)):
        assert fitted.step_time(d, d * ctx, 0) == pytest.approx(truth.step_time(d, d * ctx, 0), rel=0.03), d
    assert fitted.prefill_time(4096) == pytest.approx(truth.prefill_time(4096), rel=0.03)
    # The neighbour: the same windows read as decode steps alone make each decode step slower.
    alone = fit_live(prior, windows(mixture=False))
    assert alone is not None
    assert alone.apply(prior).step_time(64, 64 * 1024, 0) > fitted.step_time(64, 64 * 1024, 0)


def test_figures_of_chunk_steps_alone_still_say_the_bandwidth() -> None:
    """Outputs of a few tokens: every step the window timed also took a chunk (a share of 1). Those
    chunk steps are memory-bound when the chunk is small, so they identify the bandwidth: they once
    left it to the prior (0.8 for 0.6) with a 24 % error."""
    prior = _truth(GPU_PRESETS["h100-sxm"], "llama-3.1-8b", 0.8, 0.5, 0.0)
    truth = _truth(GPU_PRESETS["h100-sxm"], "llama-3.1-8b", 0.6, 0.4, 0.0)
    obs = []
    for running in (8.0, 32.0, 64.0, 128.0):
        ob = StepObservation(running, running * 1100.0, 0.0, 1.0, chunk_share=1.0, chunk_tokens=64.0,
                             chunk_pairs=64.0 * 64.0 / 2.0)
        obs.append(dataclasses.replace(ob, seconds=figure_time(truth, ob)))
    for prompt in (2048.0, 4096.0, 8192.0):
        ob = StepObservation(0.0, 0.0, prompt, 1.0)
        obs.append(dataclasses.replace(ob, seconds=figure_time(truth, ob)))
    fit = fit_efficiencies(prior, obs)
    assert fit.bandwidth_identified
    assert fit.bandwidth_efficiency == pytest.approx(0.6, rel=0.02)
    assert fit.compute_efficiency == pytest.approx(0.4, rel=0.02)
    assert fit.rms_relative_error < 0.01


def test_recovers_attention_that_dominates_a_small_models_long_prompts() -> None:
    """A tiny model on a CPU: attention over a 4k prompt costs more than its weights' FLOPs."""
    from llmscale.model.presets import ModelArch

    tiny = ModelArch.from_hf_config(
        {"hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
         "num_key_value_heads": 2, "head_dim": 32, "vocab_size": 2048},
        name="tiny",
    )
    truth = ReplicaModel(arch=tiny, gpu=CPU, bandwidth_efficiency=0.2, compute_efficiency=0.3,
                         step_overhead_s=0.001, seq_overhead_s=1e-4, attention_efficiency=0.02)
    prior = ReplicaModel(arch=tiny, gpu=CPU)
    obs = [StepObservation(b, b * c, 0, truth.step_time(b, b * c, 0)) for b in (1, 4, 16, 32) for c in (128, 2000)]
    obs += [StepObservation(0, 0, p, truth.step_time(0, 0, p)) for p in (16, 256, 1024, 2048, 4096)]
    fit = fit_efficiencies(prior, obs)
    assert fit.attention_efficiency == pytest.approx(0.02, rel=0.05)
    assert fit.rms_relative_error < 0.01
    without = fit_efficiencies(prior, obs, attention=False)
    assert without.attention_efficiency is None
    assert without.rms_relative_error > 5 * fit.rms_relative_error


def _tiny() -> ReplicaModel:
    from llmscale.model.presets import ModelArch

    arch = ModelArch.from_hf_config(
        {"hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
         "num_key_value_heads": 2, "head_dim": 32, "vocab_size": 2048},
        name="tiny",
    )
    return ReplicaModel(arch=arch, gpu=CPU)


def test_recovers_attention_from_prompts_longer_than_the_step_budget() -> None:
    """Lone prompts up to the context limit in chunks of a 2,048-token budget: each chunk attends to
    the ones before it, so the TTFT grows with the square of the whole prompt."""
    prior = _tiny()
    truth = prior.with_changes(bandwidth_efficiency=0.2, compute_efficiency=0.3, step_overhead_s=0.001,
                               attention_efficiency=0.02)
    obs = [StepObservation(b, b * 128, 0, truth.step_time(b, b * 128, 0)) for b in (1, 4, 16, 32)]
    for p in (256, 1024, 2048, 3072, 4080):
        n = -(-p // 2048)
        c = p / n
        obs.append(StepObservation(0, 0, c, truth.step_time(0, 0, c, n * c * c / 2), prefill_pairs=n * c * c / 2))
    fit = fit_efficiencies(prior, obs)
    assert fit.attention_efficiency == pytest.approx(0.02, rel=0.05)
    assert fit.rms_relative_error < 0.01


def test_tells_a_per_request_cost_from_the_per_step_one() -> None:
    """A lone prompt's TTFT carries what the request pays once (HTTP, tokenising, streaming the
    token back); a decode step does not. The fit finds both and puts neither in the other."""
    truth = _tiny().with_changes(bandwidth_efficiency=0.2, compute_efficiency=0.3, step_overhead_s=0.001)
    q = 0.004
    obs = [StepObservation(b, b * 128, 0, truth.step_time(b, b * 128, 0)) for b in (1, 4, 16, 32)]
    obs += [StepObservation(0, 0, p, truth.step_time(0, 0, p) + q, request_share=1.0) for p in (16, 256, 1024, 2048)]
    fit = fit_efficiencies(_tiny(), obs)
    assert fit.request_overhead_s == pytest.approx(q, rel=0.02)
    assert fit.step_overhead_s == pytest.approx(0.001, rel=0.02)
    assert fit.rms_relative_error < 0.01
    # Decode steps alone carry no request: the cost is 0, not a guess.
    decode_only = fit_efficiencies(_tiny(), [o for o in obs if o.request_share == 0])
    assert decode_only.request_overhead_s == 0.0


@pytest.mark.parametrize("share", [-0.1, 1.5, float("nan")])
def test_refuses_a_request_share_outside_zero_to_one(share: float) -> None:
    obs = [StepObservation(1, 128, 0, 0.002), StepObservation(0, 0, 256, 0.005, request_share=share)]
    with pytest.raises(ValueError, match="request_share"):
        fit_efficiencies(_tiny(), obs)
