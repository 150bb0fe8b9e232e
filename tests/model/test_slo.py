"""The SLO operating point of one replica under chunked prefill (``llmscale.model.slo``)."""

from __future__ import annotations

import math

import pytest

from llmscale.model import GPU_PRESETS, MODEL_PRESETS, ReplicaModel
from llmscale.model.slo import ITL_MEAN_SHARE_OF_SLO, mean_itl_s, slo_operating_point

BIG = ReplicaModel(MODEL_PRESETS["llama-3.1-70b"], GPU_PRESETS["h100-sxm"], gpus=4)


def test_mean_itl_at_the_calibrated_capacity_matches_the_measured_share() -> None:
    # The simulator's calibration (docs/simulate.md): 7.32 req/s per replica is the edge of the
    # SLO (ITL p95 100 ms in 99 % of minutes) at ~52 running. The model puts the mean ITL at 31 ms
    # there, which is where ITL_MEAN_SHARE_OF_SLO comes from.
    itl, running = mean_itl_s(BIG, 7.32)
    assert itl == pytest.approx(ITL_MEAN_SHARE_OF_SLO * 0.1, rel=0.02)
    assert 40 < running < 60


def test_mean_itl_rises_with_the_rate_and_starts_at_the_bare_decode_step() -> None:
    rates = [0.0, 2.0, 5.0, 8.0, 10.0]
    itls = [mean_itl_s(BIG, r)[0] for r in rates]
    assert itls == sorted(itls)
    assert itls[0] == pytest.approx(BIG.decode_step_time(0, 1226), rel=1e-6)
    # Prefill alone (1,155 tokens × 2 × 70.6e9 FLOP at 1.98 PFLOP/s ≈ 82 ms) fills the time above ~12 req/s.
    assert math.isinf(mean_itl_s(BIG, 13.0)[0])


def test_operating_point_of_the_benchmark_deployment() -> None:
    point = slo_operating_point(BIG, 0.1)
    assert point.mean_itl_s == pytest.approx(0.031, rel=1e-3)
    assert point.rate_rps == pytest.approx(7.3, abs=0.1)
    # ~48 running × 1,226 tokens of 513,088: KV-cache utilisation ≈ 0.114, far below vLLM's 0.75.
    assert point.kv_cache_utilization == pytest.approx(0.114, abs=0.005)
    assert 0.5 < point.prefill_busy_fraction < 0.7


def test_smaller_model_carries_more_and_a_looser_slo_admits_more() -> None:
    small = ReplicaModel(MODEL_PRESETS["llama-3.1-8b"], GPU_PRESETS["h100-sxm"], gpus=1)
    assert slo_operating_point(small, 0.1).rate_rps > slo_operating_point(BIG, 0.1).rate_rps
    assert slo_operating_point(BIG, 0.2).running > slo_operating_point(BIG, 0.1).running


def test_an_slo_faster_than_the_bare_decode_step_carries_nothing() -> None:
    # Batch-1 decode of 70B on 4 × H100 reads 141 GB at 10.7 TB/s: 13 ms. A 10 ms mean is impossible.
    point = slo_operating_point(BIG, 0.01 / ITL_MEAN_SHARE_OF_SLO)
    assert point.rate_rps == 0.0


@pytest.mark.parametrize(
    "kwargs",
    [
        pytest.param({"prompt_tokens": 0}, id="no-prompt"),
        pytest.param({"output_tokens": -1}, id="negative-output"),
    ],
)
def test_bad_inputs_raise(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        mean_itl_s(BIG, 1.0, **kwargs)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        slo_operating_point(BIG, 0.0)
