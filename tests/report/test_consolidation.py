"""Consolidation candidates (llmscale.consolidation): groups, the simulated replica need, savings.

The need comes from the simulator, so the tests check what must hold whatever its figures: no
traffic needs no replica; more traffic never needs fewer replicas; the need meets the SLO and one
replica fewer does not (checked by the simulator's own summary); groups are by model and engine
settings; two small deployments held at their floors merge into one floor (the runbook's case),
and two with peaks at different hours merge into fewer replicas than their peaks summed.
"""

from __future__ import annotations

import pytest

from llmscale.api import LLMDeploymentSpec
from llmscale.consolidation import HOURS_PER_MONTH, Traffic, candidates, replicas_needed, traffic_of
from llmscale.fleetreport import Deployment, Recorded

HOUR = 3600.0


def spec(floor: int = 1, image: str = "vllm/vllm-openai:v0.11.0", preset: str = "llama-3.1-8b") -> LLMDeploymentSpec:
    return LLMDeploymentSpec.model_validate({"model": {"name": preset, "preset": preset},
                                             "engine": {"image": image}, "replicas": {"min": floor, "max": 16},
                                             "cost": {"gpuHourUsd": 2.0}})


def dep(name: str, s: LLMDeploymentSpec) -> Deployment:
    return Deployment("ml", name, s.model.name, repr((s.engine.type, s.engine.image, s.engine.args)),
                      s.resources.gpus_per_replica, s.replicas.min, s.cost.gpu_hour_usd)


def flat(rps: float, hours: int = 24, prompt: float = 1000, output: float = 200) -> Traffic:
    return Traffic(tuple((i * HOUR, rps, prompt, output) for i in range(hours)))


def test_no_traffic_needs_no_replica() -> None:
    assert replicas_needed(spec(), 0.0, 1000, 200) == 0


def test_more_traffic_never_needs_fewer_replicas() -> None:
    s = spec()
    needs = [replicas_needed(s, rps, 2000, 300) for rps in (1, 8, 24)]
    assert needs == sorted(needs) and needs[0] >= 1 and needs[-1] > needs[0]


def test_the_need_is_the_fewest_that_meet_the_slo() -> None:
    s = spec()
    n = replicas_needed(s, 24, 2000, 300)
    assert n >= 2
    with pytest.raises(ValueError, match="do not meet the SLO"):
        replicas_needed(s, 24, 2000, 300, most=n - 1)


def test_traffic_of_the_recorded_series() -> None:
    times = [i * HOUR for i in range(1, 5)]
    rec = Recorded(pools={"interactive": {"tokens_per_second": [(t, 400.0) for t in times]}},
                   input_tokens_per_second=[(t, 2000.0) for t in times],
                   requests_per_second=[(t, 2.0 if t != 3 * HOUR else 0.0) for t in times])
    got = traffic_of(rec, start=HOUR, now=4 * HOUR)  # (start, now]: hours 2, 3 and 4; hour 3 had none
    assert got.hours == ((2 * HOUR, 2.0, 1000.0, 200.0), (4 * HOUR, 2.0, 1000.0, 200.0))
    assert got.peak() == (2 * HOUR, 2.0, 1000.0, 200.0) and Traffic(()).peak()[1] == 0.0


def test_floors_of_small_deployments_merge_into_one() -> None:
    a, b, other = spec(floor=2), spec(floor=2), spec(floor=2, image="vllm/vllm-openai:v0.10.0")
    specs = {("ml", "a"): a, ("ml", "b"): b, ("ml", "other"): other}
    deps = [dep("a", a), dep("b", b), dep("other", other)]
    found = candidates(deps, specs, {("ml", "a"): flat(0.5), ("ml", "b"): flat(0.3), ("ml", "other"): flat(0.2)})
    (c,) = found  # "other" runs another image: not the same engine settings
    assert c.deployments == ("ml/a", "ml/b")
    assert (c.separate_replicas, c.merged_replicas, c.floors) == (4, 2, 4)
    assert c.gpus_saved == 2 and c.usd_per_month_saved == pytest.approx(2 * HOURS_PER_MONTH * 2.0)
    assert c.floors_exceed_peak and c.merged_peak_rps == pytest.approx(0.8)


def test_peaks_at_different_hours_merge_into_fewer_replicas() -> None:
    a, b = spec(floor=1), spec(floor=1)
    day = Traffic(tuple((i * HOUR, 16.0 if 8 <= i < 20 else 1.0, 2000.0, 300.0) for i in range(24)))
    night = Traffic(tuple((i * HOUR, 1.0 if 8 <= i < 20 else 16.0, 2000.0, 300.0) for i in range(24)))
    (c,) = candidates([dep("day", a), dep("night", b)], {("ml", "day"): a, ("ml", "night"): b},
                      {("ml", "day"): day, ("ml", "night"): night})
    own = replicas_needed(a, 16.0, 2000, 300)
    assert c.separate_replicas == 2 * own
    assert c.merged_replicas == replicas_needed(a, 17.0, 2000, 300) < c.separate_replicas
    assert not c.floors_exceed_peak and c.gpus_saved > 0


def test_a_lone_deployment_is_no_candidate() -> None:
    a = spec()
    assert candidates([dep("a", a)], {("ml", "a"): a}, {("ml", "a"): flat(1.0)}) == []
