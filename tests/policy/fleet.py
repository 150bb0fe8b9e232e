"""Scenario helper: a fake clock stepped tick by tick over a fake fleet with cold starts.

The fleet is the smallest thing that behaves like a Deployment of GPU pods: a pod created at ``t``
is Ready at ``t + cold_start_s`` and starting until then; scaling down removes the youngest pods
first (starting ones before ready ones, as the ReplicaSet controller prefers unready pods). Each
:class:`Tick` gives the signals seen at that instant and the decision expected; the helper builds
the snapshot and the :class:`PoolState`, calls the real :func:`llmscale.policy.decide`, checks
the expectation, applies the decision and carries the memory to the next tick.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from llmscale.api import LLMDeploymentSpec
from llmscale.policy import Decision, PolicyMemory, PoolState, Reason, decide
from llmscale.signals.snapshot import SignalSnapshot

__all__ = ["FakeFleet", "Tick", "run_scenario"]


@dataclass(frozen=True)
class Tick:
    """One step of a scenario.

    Attributes:
        t: seconds after the scenario's start.
        expect: interactive replicas the policy must decide.
        queue/kv/preempt/ttft/itl/running: the snapshot's signals (``None`` or NaN for unknown).
        wake: the wake query's value (``SignalSnapshot.wake_demand``; ``None``: unknown or unset).
        age: age of the snapshot at ``t``, seconds.
        unschedulable: of the not-ready pods, how many are Pending with no node.
        able: expected ``AbleToScale`` reason (``ReadyForNewScale`` when no stabilisation window
            held the recommendation back); ``None`` does not check.
        limited: expected ``ScalingLimited`` reason (``DesiredWithinRange`` when no limit bit);
            ``None`` does not check.
        valid: expected ``Decision.valid``.
        metrics: expected ``MetricsAvailable`` reason; ``None`` does not check.
        starting: expected starting pods in the state handed to the policy; ``None`` does not check.
        batch: expected batch replicas; ``None`` does not check.
    """

    t: float
    expect: int
    queue: float | None = 0.0
    kv: float | None = 0.2
    preempt: float | None = 0.0
    ttft: float | None = None
    itl: float | None = None
    running: float | None = None
    wake: float | None = None
    age: float = 5.0
    unschedulable: int = 0
    able: Reason | None = None
    limited: Reason | None = None
    valid: bool = True
    starting: int | None = None
    batch: int | None = None
    metrics: Reason | None = None


@dataclass
class FakeFleet:
    """Pods of the interactive pool by creation time; ready after ``cold_start_s``."""

    cold_start_s: float
    created: list[float] = field(default_factory=list)

    @classmethod
    def ready(cls, n: int, cold_start_s: float) -> FakeFleet:
        """Return a fleet of ``n`` pods Ready since forever."""
        return cls(cold_start_s, [-math.inf] * n)

    def state(self, now: float, unschedulable: int = 0) -> PoolState:
        """Return the :class:`PoolState` at ``now``."""
        ready = sum(1 for c in self.created if c + self.cold_start_s <= now)
        not_ready = len(self.created) - ready
        pending = min(unschedulable, not_ready)
        return PoolState(
            interactive_replicas=len(self.created),
            interactive_ready=ready,
            interactive_starting=not_ready - pending,
            interactive_unschedulable=pending,
        )

    def apply(self, now: float, desired: int) -> None:
        """Scale to ``desired`` pods: new ones created at ``now``, the youngest removed first."""
        self.created.sort()
        while len(self.created) < desired:
            self.created.append(now)
        del self.created[desired:]


def run_scenario(
    spec: LLMDeploymentSpec,
    ticks: Sequence[Tick],
    fleet: FakeFleet,
    start: float,
    memory: PolicyMemory | None = None,
) -> list[Decision]:
    """Step ``ticks`` in order from ``start`` (seconds since the epoch); assert each expectation.

    Returns:
        The decisions, one per tick.

    Raises:
        AssertionError: a decision differs from its tick's expectation (the message shows the
            tick and the decision's reasons).
    """
    history: list[SignalSnapshot] = []
    mem = memory or PolicyMemory()
    decisions: list[Decision] = []
    for tick in ticks:
        now = start + tick.t
        state = fleet.state(now, tick.unschedulable)
        history.append(
            SignalSnapshot(
                observed_at=now - tick.age,
                queue_depth=tick.queue,
                kv_cache_utilization=tick.kv,
                preemption_rate=tick.preempt,
                ttft_p95_s=tick.ttft,
                itl_p95_s=tick.itl,
                running_requests=tick.running,
                wake_demand=tick.wake,
                replicas_reporting=state.interactive_ready,
            )
        )
        decision = decide(spec, history, state, mem, now)
        where = f"at t={tick.t:g} s with {state}:\n  " + "\n  ".join(decision.reasons)
        assert decision.interactive_replicas == tick.expect, f"expected {tick.expect} {where}"
        assert decision.valid == tick.valid, f"expected valid={tick.valid} {where}"
        if tick.able is not None:
            assert decision.able_to_scale.reason == tick.able, f"expected {tick.able} {where}"
            assert decision.able_to_scale.status == "True"  # the HPA's convention: windows do not make it False
        if tick.limited is not None:
            assert decision.scaling_limited.reason == tick.limited, f"expected {tick.limited} {where}"
            assert (decision.scaling_limited.status == "True") == (tick.limited != Reason.DesiredWithinRange)
        if tick.starting is not None:
            assert state.interactive_starting == tick.starting, f"expected {tick.starting} starting {where}"
        if tick.batch is not None:
            assert decision.batch_replicas == tick.batch, f"expected batch {tick.batch} {where}"
        if tick.metrics is not None:
            got = decision.metrics_available
            assert got.reason == tick.metrics, f"expected {tick.metrics}, got {got} {where}"
        fleet.apply(now, decision.interactive_replicas)
        mem = decision.memory
        decisions.append(decision)
    return decisions
