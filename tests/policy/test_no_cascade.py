"""Issue 27, item 2: no cascade on a step. Preemptions say *that* the pool is short, the load signal
*how* short; capacity already asked for is subtracted from every ask until it lands."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from llmscale.api import LLMDeploymentSpec, ModelSpec, ReplicasSpec, ResourcesSpec
from llmscale.policy import PolicyMemory, PoolState, decide
from llmscale.policy.mix import Arrivals
from llmscale.policy.proposals import DRAIN_SHARE_MAX, backlog_drain, preemption_proposal
from llmscale.signals.snapshot import SignalSnapshot, WorkloadMix

NOW = 1_717_416_000.0  # 2024-06-03 12:00:00 UTC


def _spec() -> LLMDeploymentSpec:
    return LLMDeploymentSpec(
        model=ModelSpec(name="chat", preset="llama-3.1-8b"),
        resources=ResourcesSpec(gpus_per_replica=1),
        replicas=ReplicasSpec(min=1, max=40),
    )


@pytest.mark.parametrize(
    "rate, reference, starting, load_known, expected",
    [
        # issue 27's flash crowd: 3 overloaded replicas at ~0.65 preemption/s each asked for 39.
        pytest.param(1.93, 3, 0, True, 4, id="symptom-one-more"),
        pytest.param(6.28, 20, 0, True, 21, id="thrashing-one-more"),
        pytest.param(1.93, 3, 4, True, 3, id="holds-while-asked-capacity-starts"),
        pytest.param(1.93, 3, 0, False, 39, id="no-load-signal-still-sizes"),
        pytest.param(0.0, 3, 0, True, None, id="no-preemption-proposes-nothing"),
    ],
)
def test_preemptions_are_a_symptom_when_the_load_is_known(
    rate: float, reference: int, starting: int, load_known: bool, expected: int | None
) -> None:
    p = preemption_proposal(_spec(), rate, 3, reference, starting, load_known)
    assert p.replicas == expected


def _arrivals(rate: float, growth: float) -> Arrivals:
    return Arrivals(rate, rate - growth, growth, "")


@pytest.mark.parametrize(
    "excess, growth, asked, expected",
    [
        # 18,000 waiting, in-flight falling 14/s, 90 arriving: min(60 − 14, 0.2 × 90) = 18.
        pytest.param(18_000.0, -14.0, 0, 18.0, id="capped-at-a-share"),
        pytest.param(3_000.0, -4.0, 0, 6.0, id="small-backlog-less-its-own-drain"),
        pytest.param(3_000.0, -20.0, 0, 0.0, id="falls-by-itself"),
        pytest.param(18_000.0, 50.0, 4, 0.0, id="asked-capacity-not-asked-again"),
        pytest.param(0.0, 0.0, 0, 0.0, id="no-backlog"),
    ],
)
def test_backlog_drain(excess: float, growth: float, asked: int, expected: float) -> None:
    assert backlog_drain(excess, _arrivals(90.0, growth), 300.0, asked, replicas=6) == pytest.approx(expected)


@pytest.mark.parametrize(
    "excess, rate, replicas, expected",
    [
        # 18 waiting beyond target on one replica at 0.53/s, lead 60 s: 18 / 60 = 0.3, under the one
        # replica's share 0.53 (a fifth, 0.106, would never add the replica the queue asks for).
        pytest.param(18.0, 0.53, 1, 0.3, id="one-replica-pool-drains-its-queue"),
        pytest.param(600.0, 0.53, 1, 0.53, id="one-replica-share-at-most"),
        pytest.param(600.0, 10.0, 2, 5.0, id="two-replicas-half"),
        pytest.param(600.0, 10.0, 20, 2.0, id="large-pool-a-fifth"),
    ],
)
def test_the_drain_share_is_at_least_one_replica(excess: float, rate: float, replicas: int, expected: float) -> None:
    assert backlog_drain(excess, _arrivals(rate, 0.0), 60.0, 0, replicas) == pytest.approx(expected)


@given(
    excess=st.floats(0, 1e7),
    rate=st.floats(0.1, 1e4),
    growth=st.floats(-1e3, 1e3),
    lead=st.floats(1, 3600),
)
def test_the_drain_never_asks_more_than_a_share_of_the_arrivals(
    excess: float, rate: float, growth: float, lead: float
) -> None:
    d = backlog_drain(excess, _arrivals(rate, growth), lead, 0, replicas=5)
    assert 0.0 <= d <= DRAIN_SHARE_MAX * rate * (1 + 1e-9) + 1e-9


def _snap(t: float, rate: float, queue: float, running: float, preempt: float) -> SignalSnapshot:
    mix = WorkloadMix(request_rate=rate, prompt_tokens_rate=1000.0 * rate, generation_tokens_rate=200.0 * rate,
                      prompt_tokens_mean=1000.0, generation_tokens_mean=200.0)
    return SignalSnapshot(t, queue_depth=queue, running_requests=running, kv_cache_utilization=1.0,
                          preemption_rate=preempt, replicas_reporting=3, workload=mix)


@pytest.mark.parametrize("step", [2.0, 3.0, 5.0])
def test_a_step_asks_for_what_the_arrivals_need_not_for_the_preemptions(step: float) -> None:
    # Three saturated replicas finish 35/s while 30 × step arrive; they preempt 2/s. The ask is the
    # load signal's (about step × the 3 replicas 30/s needed), never preemptions / target (40).
    spec = _spec()
    before = _snap(NOW - 60, 30.0, 0.0, 100.0, 0.0)
    grow = 30.0 * step - 35.0
    now = _snap(NOW, 35.0, grow * 60.0, 300.0, 2.0)
    d = decide(spec, [before, now], PoolState(3, 3), PolicyMemory(since=NOW - 3600), NOW)
    base = decide(spec, [before], PoolState(3, 3), PolicyMemory(since=NOW - 3600), NOW - 60).demand_replicas
    assert d.demand_replicas <= max(int(step * base * 1.5) + 1, 4), d.reasons
    assert not any("demand" in r and "(preemption rate)" in r for r in d.reasons)


# --------------------------------------------------------------------------- item 1: the SLO is the truth


def _breaching(t: float, itl: float) -> SignalSnapshot:
    mix = WorkloadMix(request_rate=60.0, prompt_tokens_rate=60_000.0, generation_tokens_rate=12_000.0,
                      prompt_tokens_mean=1000.0, generation_tokens_mean=200.0)
    return SignalSnapshot(t, queue_depth=0.0, running_requests=200.0, kv_cache_utilization=0.5,
                          preemption_rate=0.0, ttft_p95_s=0.3, itl_p95_s=itl, replicas_reporting=3, workload=mix)


@pytest.mark.parametrize(
    "itl_before, itl_now, stabilised",
    [
        pytest.param(0.2, 0.2, False, id="two-windows-breach-window-does-not-hold"),
        pytest.param(0.05, 0.2, True, id="one-breach-window-holds"),
        pytest.param(0.05, 0.05, True, id="no-breach-window-holds"),
    ],
)
def test_scale_up_stabilisation_does_not_hold_through_sustained_breaches(
    itl_before: float, itl_now: float, stabilised: bool
) -> None:
    # 3 replicas, recommendations of 3 in the last two minutes, 60 requests/s that need more now.
    spec = _spec()
    memory = PolicyMemory(recommendations=((NOW - 90, 3), (NOW - 30, 3)), since=NOW - 3600)
    history = [_breaching(NOW - 60, itl_before), _breaching(NOW, itl_now)]
    d = decide(spec, history, PoolState(3, 3), memory, NOW)
    if itl_now > 0.08:  # the breach asks for more (latency guard, capacity correction)
        assert d.demand_replicas > 3, d.reasons
        held = any(r.startswith("scale-up stabilised") for r in d.reasons)
        assert held == stabilised, d.reasons
    assert (d.interactive_replicas == 3) == stabilised
