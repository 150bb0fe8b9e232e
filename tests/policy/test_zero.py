"""Scale to zero and back (``llmscale.policy.zero``): a fake clock stepped tick by tick.

The spec of every case (:func:`zero_spec`): replicas 0–8, headroom 1, cold start 30 s, KV target
0.75, queue 3 per replica; a wake query with threshold 0; scale-up window 120 s and 4 per 60 s;
scale-down window 60 s and 1 replica per 15 s. Each tick comments its arithmetic.
"""

from __future__ import annotations

from typing import Any

import pytest
from tests.policy.fleet import FakeFleet, Tick, run_scenario

from llmscale.api import (
    HeadroomSpec,
    LLMDeploymentSpec,
    ModelSpec,
    ReplicasSpec,
    ScaleDownBehavior,
    ScalingBehavior,
    ScalingSpec,
    ScalingTargets,
    WakeSpec,
)
from llmscale.policy import Decision, PolicyMemory, PoolState, Reason, decide
from llmscale.policy.zero import release_when_idle, wake_proposal
from llmscale.signals.snapshot import SignalSnapshot

NOON = 1_717_416_000.0
R = Reason


def zero_spec(threshold: float = 0.0, lo: int = 0, wake: bool = True) -> LLMDeploymentSpec:
    return LLMDeploymentSpec(
        model=ModelSpec(name="chat", preset="llama-3.1-8b"),
        replicas=ReplicasSpec(min=lo, max=8),
        headroom=HeadroomSpec(replicas=1, cold_start_seconds=30.0, growth_factor=0.0),
        scaling=ScalingSpec(
            targets=ScalingTargets(queue_depth_per_replica=3.0, kv_cache_utilization=0.75),
            scale_up=ScalingBehavior(stabilization_window_seconds=120, max_replicas_per_period=4, period_seconds=60),
            scale_down=ScaleDownBehavior(stabilization_window_seconds=60, max_replicas_per_period=1, period_seconds=15),
            wake=WakeSpec(query="sum(gateway_pending)", threshold=threshold) if wake else None,
        ),
    )


def idle(t: float, expect: int, **kw: Any) -> Tick:
    """Engines report, nothing waits, runs or arrives."""
    return Tick(t, expect, queue=0.0, kv=0.0, preempt=0.0, running=0.0, wake=0.0, **kw)


def at_zero(t: float, expect: int, wake: float | None, **kw: Any) -> Tick:
    """No engine (none runs, or none is Ready yet): the leading signals are unknown."""
    return Tick(t, expect, queue=None, kv=None, preempt=None, running=None, wake=wake, **kw)


def _idle_to_zero_and_awake() -> list[Decision]:
    """An idle pool released to zero after the scale-down window, then woken by the wake query
    (:func:`run_scenario` checks every tick's replicas and conditions)."""
    ticks = [
        # Light load: KV 2 × 0.3 / 0.75 = 0.8 → 1, + headroom 1 = 2: stays 2.
        Tick(0, 2, queue=0.0, kv=0.3, preempt=0.0, running=2.0, ttft=0.3, itl=0.03, wake=1.5,
             metrics=R.MetricsFresh),
        # Idle: demand 0, + 1 = 1, released to 0; the 2 of t=0 is in the 60 s scale-down window.
        idle(15, 2, able=R.ScaleDownStabilized, limited=R.DesiredWithinRange),
        idle(45, 2, able=R.ScaleDownStabilized),
        # t=0 has left the window (only recommendations after t=15 count): 0, one step per 15 s.
        idle(75, 1, able=R.ReadyForNewScale, limited=R.ScaleDownLimit),
        idle(90, 0, limited=R.DesiredWithinRange),
        # At zero no engine reports: the wake query alone, at 0, keeps it there.
        at_zero(105, 0, wake=0.0, metrics=R.WakeQueryOnly),
        # The wake query unknown: held at 0, nothing guessed.
        at_zero(120, 0, wake=None, metrics=R.MetricsMissing, valid=False),
        # A request waits at the gateway: 1 of demand + headroom 1 = 2 at once, although every
        # recommendation of the 120 s scale-up window was 0 (the window never holds a pool at zero).
        at_zero(135, 2, wake=2.0, metrics=R.WakeQueryOnly, able=R.ReadyForNewScale),
        # The two pods are in their 30 s cold start: nothing reports, held at 2 (not back to 0).
        at_zero(150, 2, wake=3.0, metrics=R.MetricsMissing, valid=False),
        # Ready at 165: the engines' signals take over; KV 2 × 0.3 / 0.75 → 1, + 1 = 2.
        Tick(180, 2, queue=0.0, kv=0.3, preempt=0.0, running=2.0, ttft=0.5, itl=0.03, wake=0.5,
             metrics=R.MetricsFresh),
    ]
    return run_scenario(zero_spec(), ticks, FakeFleet.ready(2, 30.0), NOON)


def test_an_idle_pool_goes_to_zero_after_the_window() -> None:
    decisions = _idle_to_zero_and_awake()
    assert any(line.startswith("idle: no request runs or waits on the engines") for line in decisions[1].reasons)
    assert any(line.startswith("idle: no engine runs") for line in decisions[5].reasons)


def test_a_pool_at_zero_wakes_on_the_query() -> None:
    decisions = _idle_to_zero_and_awake()
    assert "wake query reads 2 > threshold 0 at 0 replicas: proposes 1" in decisions[7].reasons
    assert "demand 1 replicas (wake query)" in decisions[7].reasons
    assert "wake query unknown" in decisions[6].metrics_available.message


@pytest.mark.parametrize(
    ("tick", "why"),
    [
        pytest.param(Tick(0, 1, queue=0.0, kv=0.0, preempt=0.0, running=1.0, wake=0.0), "a request runs",
                     id="running-request-keeps-the-headroom"),
        pytest.param(Tick(0, 1, queue=0.0, kv=0.0, preempt=0.0, running=0.0, wake=0.4), "requests arrive",
                     id="arrivals-keep-the-headroom"),
        pytest.param(Tick(0, 1, queue=0.0, kv=0.0, preempt=0.0, running=None, wake=0.0), "running unknown",
                     id="unknown-running-keeps-the-headroom"),
        pytest.param(Tick(0, 1, queue=0.0, kv=0.0, preempt=0.0, running=0.0, wake=None), "wake unknown",
                     id="unknown-wake-keeps-the-headroom"),
    ],
)
def test_anything_but_idle_keeps_the_warm_replica(tick: Tick, why: str) -> None:
    # 2 ready, demand 0: the recommendation is the headroom, 1 (the down limit steps 2 → 1 either
    # way); released, it would be 0. The memory has seen the whole window (missing history would hold 2).
    decisions = run_scenario(zero_spec(), [tick], FakeFleet.ready(2, 30.0), NOON, PolicyMemory(since=NOON - 3600))
    assert decisions[0].memory.recommendations == ((NOON, 1),), why
    assert not any(line.startswith("idle:") for line in decisions[0].reasons), why


def test_the_wake_threshold_is_strict() -> None:
    snap = SignalSnapshot(NOON, wake_demand=1.0)
    assert wake_proposal(zero_spec(threshold=1.0), snap, 0) == wake_proposal(zero_spec(threshold=1.0), snap, 0)
    proposal = wake_proposal(zero_spec(threshold=1.0), snap, 0)
    assert proposal is not None and proposal.replicas is None and proposal.known
    proposal = wake_proposal(zero_spec(threshold=0.5), snap, 0)
    assert proposal is not None and proposal.replicas == 1


def test_the_wake_query_proposes_nothing_off_zero_or_when_unset() -> None:
    snap = SignalSnapshot(NOON, wake_demand=1.0)
    assert wake_proposal(zero_spec(), snap, 1) is None
    assert wake_proposal(zero_spec(lo=1, wake=False), snap, 0) is None


def test_a_min_above_zero_never_releases() -> None:
    # min 1 with a wake query set: the headroom stays, idle or not.
    quiet = SignalSnapshot(NOON, queue_depth=0.0, running_requests=0.0, wake_demand=0.0)
    assert release_when_idle(zero_spec(lo=1), quiet, 2, 0, 1) == (1, None)
    assert release_when_idle(zero_spec(), quiet, 2, 0, 1)[0] == 0


def test_the_replica_bounds_still_bound_a_wake() -> None:
    spec = zero_spec().model_copy(update={"replicas": ReplicasSpec(min=0, max=1)})
    d = decide(spec, [SignalSnapshot(NOON, wake_demand=5.0)], PoolState(0, 0), PolicyMemory(), NOON)
    assert (d.interactive_replicas, d.scaling_limited.reason) == (1, R.TooManyReplicas)
