"""Issue 11's properties closed-loop in the simulator: a steady load produces no direction changes,
at several multiples of one replica's capacity; a burst faster than the cold start does not cascade.

The traffic is synthetic (Poisson arrivals; log-normal lengths with the Azure LLM inference trace
2023's means and p95s, CC-BY 4.0, Patel et al., Splitwise, ISCA 2024), so the tests need no trace file.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from llmscale.api import HeadroomSpec, LLMDeploymentSpec, ModelSpec, ReplicasSpec, ResourcesSpec
from llmscale.model import ReplicaModel
from llmscale.model.capacity import DEFAULT_SHAPE, capacity_per_replica, engine_limits, fleet_need
from llmscale.sim.baselines import LlmscalePolicy
from llmscale.sim.fleet import FleetConfig, simulate
from llmscale.sim.report import summarize
from llmscale.sim.trace import Trace

T0 = 1_717_372_800.0  # 2024-06-03 00:00 UTC


def poisson(rates: list[tuple[float, float]], seed: int = 0) -> Trace:
    """Arrivals at ``rate`` requests/s for ``seconds``, stretch after stretch; Azure-like lengths."""
    rng = np.random.default_rng(seed)
    times, t = [], T0
    for rate, seconds in rates:
        n = int(rng.poisson(rate * seconds))
        times.append(t + np.sort(rng.uniform(0, seconds, n)))
        t += seconds
    arrival = np.concatenate(times)
    n = len(arrival)
    prompt = np.clip(rng.lognormal(np.log(DEFAULT_SHAPE.prompt.median), DEFAULT_SHAPE.prompt.sigma, n), 1, 8000)
    output = np.clip(rng.lognormal(np.log(DEFAULT_SHAPE.output.median), DEFAULT_SHAPE.output.sigma, n), 1, 2000)
    return Trace(arrival, prompt.astype(np.int64), output.astype(np.int64), np.zeros(n, bool), T0, t - T0)


def spec(preset: str, gpus: int, cold_start_s: float) -> LLMDeploymentSpec:
    return LLMDeploymentSpec(
        model=ModelSpec(name="chat", preset=preset),  # type: ignore[arg-type]
        resources=ResourcesSpec(gpus_per_replica=gpus, gpu_type="h100-sxm"),
        replicas=ReplicasSpec(min=1, max=64),
        headroom=HeadroomSpec(replicas=0, cold_start_seconds=cold_start_s),
    )


BIG = spec("llama-3.1-70b", 4, 120.0)
WARM_UP_S = 900.0


@pytest.mark.parametrize("multiple", [2, 4, 8])
def test_a_steady_load_produces_no_direction_changes(multiple: int) -> None:
    model = ReplicaModel.from_spec(BIG)
    per, _, _ = capacity_per_replica(model, DEFAULT_SHAPE, engine_limits(BIG), 0.1, 2.0, replicas=multiple)
    rate = multiple * per * 0.9  # a steady load of `multiple` replicas' worth
    start = fleet_need(model, DEFAULT_SHAPE, engine_limits(BIG), 0.1, 2.0, rate).replicas
    trace = poisson([(rate, 3600.0)], seed=multiple)
    res = simulate(trace, LlmscalePolicy(BIG), model, fleet=FleetConfig(cold_start_s=120.0, initial_replicas=start,
                   max_replicas=64, gpus_per_replica=4), context_limit_tokens=8192)
    # The first quarter of an hour learns the live mix, its burstiness and any capacity correction
    # (the model starts from the Azure trace's lengths); from then on the size moves one way at most.
    settled = [(t, b, a) for t, b, a in res.interactive_changes if t - T0 >= WARM_UP_S]
    moves = [np.sign(after - before) for _, before, after in settled]
    flips = sum(1 for a, b in itertools.pairwise(moves) if a != b)
    assert flips == 0, res.interactive_changes
    assert len(settled) <= 2, res.interactive_changes


SMALL = spec("llama-3.1-8b", 1, 300.0)


def test_a_burst_faster_than_the_cold_start_does_not_cascade() -> None:
    # Issue 11: 2 replicas, 17.7 → 53.1 requests/s within 30 s, a 300 s cold start: the old policy
    # cascaded to 36 replicas for a need of 4, TTFT p95 up to 138 s for ten minutes.
    model = ReplicaModel.from_spec(SMALL)
    need = fleet_need(model, DEFAULT_SHAPE, engine_limits(SMALL), 0.1, 2.0, 53.1).replicas
    trace = poisson([(17.7, 600.0), (53.1, 1800.0)], seed=3)
    res = simulate(trace, LlmscalePolicy(SMALL), model, fleet=FleetConfig(cold_start_s=300.0, initial_replicas=2,
                   max_replicas=64), context_limit_tokens=8192, itl_slo_s=SMALL.slo.itl_p95_seconds)
    peak = max(after for _, _, after in res.interactive_changes)
    assert peak <= 2 * need + 1, (need, res.interactive_changes)
    # After one cold start and the drain, the SLO holds again: the last 10 minutes meet it.
    s = summarize(res, SMALL.slo, 2.5, warmup_s=trace.duration_s - 600.0)
    assert s["minutes_meeting_slo_fraction"] == 1.0
