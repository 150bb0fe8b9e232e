"""The simulated replica's scheduler limits come from the LLMDeployment, as the engine reads them."""

from __future__ import annotations

from typing import Any

import pytest

from llmscale.api import LLMDeploymentSpec
from llmscale.sim.engine_args import engine_config, parse_engine_args


def spec(args: list[str], gpu: str = "h100-sxm") -> LLMDeploymentSpec:
    doc: dict[str, Any] = {
        "model": {"name": "m", "preset": "llama-3.1-8b"},
        "engine": {"args": args},
        "resources": {"gpuType": gpu},
    }
    return LLMDeploymentSpec.model_validate(doc)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        pytest.param([], {}, id="none"),
        pytest.param(["--max-num-batched-tokens", "2048"], {"max_num_batched_tokens": 2048}, id="space"),
        pytest.param(["--max-num-seqs=64"], {"max_num_seqs": 64}, id="equals"),
        pytest.param(["--max-num-seqs", "8", "--max-num-seqs", "16"], {"max_num_seqs": 16}, id="last-wins"),
        pytest.param(["--no-enable-prefix-caching"], {"enable_prefix_caching": False}, id="no-cache"),
        pytest.param(["--enable-prefix-caching"], {"enable_prefix_caching": True}, id="cache"),
        pytest.param(["--dtype", "bf16", "--port", "9000"], {}, id="others-ignored"),
    ],
)
def test_engine_args_are_read_like_the_engine_reads_them(args: list[str], expected: dict[str, Any]) -> None:
    assert parse_engine_args(args) == expected


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(["--max-num-batched-tokens"], "needs a value", id="no-value"),
        pytest.param(["--max-num-seqs", "many"], "not an integer", id="not-int"),
        pytest.param(["--max-num-batched-tokens=0"], "positive", id="zero"),
    ],
)
def test_bad_engine_args_name_the_field(args: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message) as info:
        parse_engine_args(args)
    assert "spec.engine.args" in str(info.value)


@pytest.mark.parametrize(
    ("gpu", "seqs", "tokens"),
    [pytest.param("h100-sxm", 1024, 8192, id="h100"), pytest.param("a100-80gb", 256, 2048, id="a100")],
)
def test_without_args_a_replica_runs_vllms_defaults_for_its_gpu(gpu: str, seqs: int, tokens: int) -> None:
    cfg = engine_config(spec([], gpu))
    assert (cfg.max_num_seqs, cfg.max_num_batched_tokens, cfg.enable_prefix_caching) == (seqs, tokens, True)


def test_spec_args_then_explicit_overrides_win() -> None:
    s = spec(["--max-num-batched-tokens", "2048", "--no-enable-prefix-caching"])
    cfg = engine_config(s)
    assert cfg.max_num_batched_tokens == 2048 and not cfg.enable_prefix_caching
    assert cfg.max_num_seqs == 1024  # capped at the budget only when the budget is smaller
    cfg = engine_config(s, max_num_batched_tokens=512)
    assert cfg.max_num_batched_tokens == 512 and cfg.max_num_seqs == 512  # vLLM caps seqs at tokens


def test_a_smaller_step_budget_lowers_the_per_token_itl_p95_under_long_prompts() -> None:
    # Llama-3.1-70B on 4 × H100, 6,000-token prompts at 1.5 requests/s on one replica: with vLLM's
    # 8,192-token budget a whole prompt rides in one step (~0.45 s, every running sequence waits for
    # it); with 2,048 the prompt is cut into chunks of ~0.15 s, so the gaps shrink.
    import numpy as np

    from llmscale.model import ReplicaModel
    from llmscale.model.vllm_defaults import ITL_BUCKETS_S
    from llmscale.sim.baselines import StaticReplicas
    from llmscale.sim.fleet import FleetConfig, simulate
    from llmscale.sim.latency import histogram_quantile
    from llmscale.sim.trace import Trace

    rng = np.random.default_rng(1)
    n = 900
    t = np.cumsum(rng.exponential(1 / 1.5, n))
    trace = Trace(t, np.full(n, 6000, np.int64), rng.integers(50, 400, n), np.zeros(n, bool), 0.0,
                  float(t[-1]) + 300.0, "long prompts")
    p95: dict[int, float] = {}
    for budget in (8192, 2048):
        s = spec(["--max-num-batched-tokens", str(budget)])
        s = s.model_copy(update={"model": s.model.model_copy(update={"preset": "llama-3.1-70b"}),
                                 "resources": s.resources.model_copy(update={"gpus_per_replica": 4})})
        res = simulate(trace, StaticReplicas(1), ReplicaModel.from_spec(s), engine=engine_config(s),
                       fleet=FleetConfig(cold_start_s=0, initial_replicas=1, min_replicas=1, max_replicas=1),
                       context_limit_tokens=8192, itl_slo_s=0.1)
        assert res.latency is not None
        itl = float(histogram_quantile(0.95, ITL_BUCKETS_S, res.latency.counts("itl").sum(axis=0)))
        p95[budget] = itl
    assert p95[2048] < 0.6 * p95[8192], p95
