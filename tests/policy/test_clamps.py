"""The clamps of ``decide`` one at a time, then chained: table tests that assert (replicas, reason).

Each case states every input the clamp reads (the value, the current size, the behaviour, the
memory, the instant); the spec is built from those and nothing else matters to the clamp. The
properties at the end hold the split windows and limits against the HPA's one-function formulas.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.strategies import behaviors, memories

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
from llmscale.policy import Clamped, PolicyMemory, PoolState, Reason, decide
from llmscale.policy.clamps import (
    LIMITS,
    WINDOWS,
    Clamp,
    Normalization,
    calendar_floor,
    chain,
    insufficient_capacity,
    no_scale_down_on_partial,
    no_scale_down_while_stalled,
    replica_bounds,
    scale_down_limit,
    scale_down_window,
    scale_up_limit,
    scale_up_window,
)
from llmscale.signals.snapshot import SignalSnapshot

NOW = 1_717_416_000.0  # 2024-06-03 12:00:00 UTC
R = Reason


def the_spec(
    *,
    lo: int,
    hi: int,
    up_window: int,
    up_per_period: int,
    up_period: int,
    down_window: int,
    down_per_period: int,
    down_period: int,
) -> LLMDeploymentSpec:
    """A spec with exactly the clamp settings given (the clamps read nothing else; min 0 needs a wake
    query, which no clamp reads)."""
    return LLMDeploymentSpec(
        model=ModelSpec(name="chat", preset="llama-3.1-8b"),
        replicas=ReplicasSpec(min=lo, max=hi),
        scaling=ScalingSpec(
            scale_up=ScalingBehavior(
                stabilization_window_seconds=up_window,
                max_replicas_per_period=up_per_period,
                period_seconds=up_period,
            ),
            scale_down=ScaleDownBehavior(
                stabilization_window_seconds=down_window,
                max_replicas_per_period=down_per_period,
                period_seconds=down_period,
            ),
            wake=WakeSpec(query="sum(gateway_pending)") if lo == 0 else None,
        ),
    )


@dataclass(frozen=True)
class Case:
    """One clamp call: every input, then the expected (replicas, reason)."""

    clamp: Clamp
    value: int
    current: int
    recommendations: tuple[tuple[float, int], ...]  # (seconds before NOW, replicas)
    scale_events: tuple[tuple[float, int], ...]  # (seconds before NOW, delta)
    unschedulable: int
    unknown: tuple[str, ...]
    lo: int
    hi: int
    up_window: int
    up_per_period: int
    up_period: int
    down_window: int
    down_per_period: int
    down_period: int
    since_ago: float  # seconds of history the memory has seen (memory.since = NOW - since_ago)
    floor: int  # the calendar floor in force
    stalled: tuple[str, ...]
    expect: tuple[int, Reason]


def case(clamp: Clamp, value: int, current: int, expect: tuple[int, Reason], **kw: object) -> Case:
    """A :class:`Case`; keyword arguments left out are the neutral settings listed here."""
    fields: dict[str, object] = {
        "recommendations": (),
        "scale_events": (),
        "unschedulable": 0,
        "unknown": (),
        "lo": 0,
        "hi": 100,
        "up_window": 0,
        "up_per_period": 100,
        "up_period": 60,
        "down_window": 0,
        "down_per_period": 100,
        "down_period": 60,
        "since_ago": 3600.0,
        "floor": 0,
        "stalled": (),
    }
    fields.update(kw)
    return Case(clamp=clamp, value=value, current=current, expect=expect, **fields)  # type: ignore[arg-type]


CASES = [
    # --- MetricsPartial: floor at the current size while a signal is unknown.
    pytest.param(case(no_scale_down_on_partial, 3, 6, (6, Reason.MetricsPartial), unknown=("KV-cache utilisation",)),
                 id="partial-floors-a-fall"),
    pytest.param(case(no_scale_down_on_partial, 9, 6, (9, Reason.DesiredWithinRange), unknown=("queue depth",)),
                 id="partial-lets-a-rise-through"),
    pytest.param(case(no_scale_down_on_partial, 3, 6, (3, Reason.DesiredWithinRange)), id="all-known-lets-a-fall"),
    # --- Scale-up window: min of the recommendations in the window, this one included.
    # 2 now, 8 recommended, 5 recommended 30 s ago inside a 60 s window: goes to 5.
    pytest.param(case(scale_up_window, 8, 2, (5, Reason.ScaleUpStabilized), up_window=60,
                      recommendations=((30, 5),)), id="up-window-holds-to-lowest"),
    # The 5 was 90 s ago, outside the 60 s window: 8.
    pytest.param(case(scale_up_window, 8, 2, (8, Reason.ReadyForNewScale), up_window=60,
                      recommendations=((90, 5),)), id="up-window-forgets-old"),
    # The lowest (1) is below the current size: stays at 2, never below it.
    pytest.param(case(scale_up_window, 8, 2, (2, Reason.ScaleUpStabilized), up_window=60,
                      recommendations=((30, 1),)), id="up-window-never-below-current"),
    # A fall is not the scale-up window's business.
    pytest.param(case(scale_up_window, 1, 4, (1, Reason.ReadyForNewScale), up_window=60,
                      recommendations=((30, 0),)), id="up-window-ignores-a-fall"),
    # At zero nothing serves: a wake goes through at once, whatever the window remembers (idle 0s).
    pytest.param(case(scale_up_window, 2, 0, (2, Reason.ReadyForNewScale), up_window=120,
                      recommendations=((60, 0), (30, 0))), id="up-window-never-holds-a-pool-at-zero"),
    # From one replica the window holds as usual.
    pytest.param(case(scale_up_window, 2, 1, (1, Reason.ScaleUpStabilized), up_window=120,
                      recommendations=((60, 0), (30, 1))), id="up-window-holds-from-one"),
    # --- Scale-down window: max of the recommendations in the window.
    pytest.param(case(scale_down_window, 2, 8, (6, Reason.ScaleDownStabilized), down_window=300,
                      recommendations=((200, 6), (100, 3))), id="down-window-holds-to-highest"),
    pytest.param(case(scale_down_window, 2, 8, (8, Reason.ScaleDownStabilized), down_window=300,
                      recommendations=((299, 12),)), id="down-window-never-above-current"),
    # The boundary is open, as the HPA's rec.timestamp.After(cutoff): 300 s ago is outside.
    pytest.param(case(scale_down_window, 2, 8, (2, Reason.ReadyForNewScale), down_window=300,
                      recommendations=((300, 6),)), id="down-window-boundary-is-outside"),
    pytest.param(case(scale_down_window, 9, 8, (9, Reason.ReadyForNewScale), down_window=300,
                      recommendations=((10, 12),)), id="down-window-ignores-a-rise"),
    # --- Scale-up rate limit: 4 per 60 s counted from the size at the period's start.
    # 6 now after +4 at 45 s ago: limit 6 - 4 + 4 = 6.
    pytest.param(case(scale_up_limit, 9, 6, (6, Reason.ScaleUpLimit), up_per_period=4, up_period=60,
                      scale_events=((45, 4),)), id="up-limit-spent"),
    pytest.param(case(scale_up_limit, 9, 6, (9, Reason.DesiredWithinRange), up_per_period=4, up_period=60,
                      scale_events=((61, 4),)), id="up-limit-period-passed"),
    pytest.param(case(scale_up_limit, 12, 2, (6, Reason.ScaleUpLimit), up_per_period=4, up_period=60),
                 id="up-limit-from-current"),
    # A scale-down in the period does not give scale-up budget back (the HPA counts ups only).
    pytest.param(case(scale_up_limit, 9, 5, (5, Reason.ScaleUpLimit), up_per_period=4, up_period=60,
                      scale_events=((50, 4), (20, -1))), id="up-limit-ignores-downs"),
    # --- Scale-down rate limit.
    pytest.param(case(scale_down_limit, 1, 8, (7, Reason.ScaleDownLimit), down_per_period=1, down_period=60),
                 id="down-limit-one-step"),
    pytest.param(case(scale_down_limit, 1, 7, (7, Reason.ScaleDownLimit), down_per_period=1, down_period=60,
                      scale_events=((30, -1),)), id="down-limit-spent"),
    pytest.param(case(scale_down_limit, 6, 7, (6, Reason.DesiredWithinRange), down_per_period=1,
                      down_period=60), id="down-limit-within"),
    # --- StalledPods: no removing while an engine hangs; adding is fine.
    pytest.param(case(no_scale_down_while_stalled, 3, 5, (5, Reason.StalledPods), stalled=("chat-hung",)),
                 id="stalled-stops-removing"),
    pytest.param(case(no_scale_down_while_stalled, 7, 5, (7, Reason.DesiredWithinRange), stalled=("chat-hung",)),
                 id="stalled-allows-adding"),
    pytest.param(case(no_scale_down_while_stalled, 3, 5, (3, Reason.DesiredWithinRange)), id="none-stalled-removes"),
    # --- InsufficientCapacity: no adding while a pod waits for a node; removing is fine.
    pytest.param(case(insufficient_capacity, 12, 9, (9, Reason.InsufficientCapacity), unschedulable=1),
                 id="unschedulable-stops-adding"),
    pytest.param(case(insufficient_capacity, 7, 9, (7, Reason.DesiredWithinRange), unschedulable=1),
                 id="unschedulable-allows-removing"),
    pytest.param(case(insufficient_capacity, 12, 9, (12, Reason.DesiredWithinRange)), id="schedulable-adds"),
    # --- Missing history (issue 11): a memory younger than the down window holds the current size.
    # 8 now, 2 recommended, the memory began 100 s ago (a new object): the 300 s window is not
    # covered, so the current 8 counts as recommended in it.
    pytest.param(case(scale_down_window, 2, 8, (8, Reason.ScaleDownStabilized), down_window=300, since_ago=100),
                 id="missing-history-holds-current"),
    # Same memory, 299 s old: still missing 1 s of the window.
    pytest.param(case(scale_down_window, 2, 8, (8, Reason.ScaleDownStabilized), down_window=300, since_ago=299),
                 id="missing-history-until-the-last-second"),
    # 300 s of history and nothing above 2 in it: free to fall.
    pytest.param(case(scale_down_window, 2, 8, (2, Reason.ReadyForNewScale), down_window=300, since_ago=300),
                 id="whole-window-seen-falls"),
    # A rise is never held back by missing history.
    pytest.param(case(scale_down_window, 9, 8, (9, Reason.ReadyForNewScale), down_window=300, since_ago=0),
                 id="missing-history-lets-a-rise-through"),
    # --- Calendar floor (spec.replicas.schedule).
    pytest.param(case(calendar_floor, 2, 2, (6, Reason.ScheduledMinimum), floor=6), id="floor-raises"),
    pytest.param(case(calendar_floor, 7, 7, (7, Reason.DesiredWithinRange), floor=6), id="above-floor"),
    pytest.param(case(calendar_floor, 3, 5, (3, Reason.DesiredWithinRange)), id="no-floor"),
    # --- spec.replicas.min/max.
    pytest.param(case(replica_bounds, 2, 4, (3, Reason.TooFewReplicas), lo=3, hi=5), id="below-min"),
    pytest.param(case(replica_bounds, 7, 4, (5, Reason.TooManyReplicas), lo=3, hi=5), id="above-max"),
    pytest.param(case(replica_bounds, 4, 4, (4, Reason.DesiredWithinRange), lo=3, hi=5), id="inside-bounds"),
]


def _arg(c: Case) -> Normalization:
    spec = the_spec(
        lo=c.lo, hi=c.hi, up_window=c.up_window, up_per_period=c.up_per_period, up_period=c.up_period,
        down_window=c.down_window, down_per_period=c.down_per_period, down_period=c.down_period,
    )
    memory = PolicyMemory(
        recommendations=tuple((NOW - ago, r) for ago, r in c.recommendations),
        scale_events=tuple((NOW - ago, d) for ago, d in c.scale_events),
        since=NOW - c.since_ago,
    )
    return Normalization(
        spec=spec, current=c.current, unschedulable=c.unschedulable, unknown=c.unknown, memory=memory, now=NOW,
        floor=c.floor, floor_window="07:00–10:00 UTC daily" if c.floor else "",
        stalled=c.stalled,
    )


@pytest.mark.parametrize("c", CASES)
def test_clamp(c: Case) -> None:
    step = c.clamp(c.value, _arg(c))
    assert (step.replicas, step.reason) == c.expect
    # A clamp that bites says why in words; one that does not says nothing.
    assert bool(step.message) == (step.replicas != c.value)


def test_chain_keeps_only_the_steps_that_changed_the_value() -> None:
    # 2 now, 12 wanted: the up window (lowest 10) holds it to 10, the up limit (4 per 60 s) to 6,
    # the bounds (max 20) let it be.
    arg = _arg(case(scale_up_window, 12, 2, (0, Reason.DesiredWithinRange), up_window=60, up_per_period=4,
                    recommendations=((30, 10),), hi=20))
    stabilised, windows = chain(12, arg, WINDOWS)
    desired, limits = chain(stabilised, arg, LIMITS)
    assert [(s.replicas, s.reason) for s in windows] == [(10, Reason.ScaleUpStabilized)]
    assert [(s.replicas, s.reason) for s in limits] == [(6, Reason.ScaleUpLimit)]
    assert desired == 6


# --------------------------------------------------------------------------------------------
# decide: AbleToScale (windows) apart from ScalingLimited (limits), as the HPA reports them
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DecideCase:
    """One ``decide`` call with every input it depends on; then the expected outcome.

    Fixed for every case (:func:`_decide_spec`): targets queue 3 per replica and KV 0.75, headroom
    1 (adaptive part off), replicas 1–16, scale-up 4 per 60 s, scale-down window 300 s and 1 per 60 s.
    """

    up_window: int  # scaleUp.stabilizationWindowSeconds
    queue: float | None  # queue depth, summed
    kv: float | None  # KV-cache utilisation, mean
    preempt: float | None  # preemptions per second, summed
    ready: int
    current: int
    unschedulable: int
    recommendations: tuple[tuple[float, int], ...]  # (seconds before NOW, replicas)
    expect: tuple[int, Reason, Reason, Reason]  # replicas, AbleToScale, ScalingLimited, clamped_by


def _decide_spec(up_window: int) -> LLMDeploymentSpec:
    return LLMDeploymentSpec(
        model=ModelSpec(name="chat", preset="llama-3.1-8b"),
        replicas=ReplicasSpec(min=1, max=16),
        headroom=HeadroomSpec(replicas=1, cold_start_seconds=180.0, growth_factor=0.0),
        scaling=ScalingSpec(
            targets=ScalingTargets(queue_depth_per_replica=3.0, kv_cache_utilization=0.75),
            scale_up=ScalingBehavior(stabilization_window_seconds=up_window, max_replicas_per_period=4,
                                     period_seconds=60),
            scale_down=ScaleDownBehavior(stabilization_window_seconds=300, max_replicas_per_period=1,
                                         period_seconds=60),
        ),
    )


DECIDE_CASES = [
    # queue 14 / 3 → 5, + headroom 1 = 6 from 2: within the up limit 2 + 4.
    pytest.param(DecideCase(up_window=0, queue=14.0, kv=0.3, preempt=0.0, ready=2, current=2, unschedulable=0,
                            recommendations=(),
                            expect=(6, R.ReadyForNewScale, R.DesiredWithinRange, R.DesiredWithinRange)),
                 id="nothing-bites"),
    # Load gone (demand 0, + 1 = 1) but 8 was recommended 100 s ago in the 300 s window: holds 8.
    pytest.param(DecideCase(up_window=0, queue=0.0, kv=0.0, preempt=0.0, ready=8, current=8, unschedulable=0,
                            recommendations=((100, 8),),
                            expect=(8, R.ScaleDownStabilized, R.DesiredWithinRange, R.ScaleDownStabilized)),
                 id="down-window-is-not-a-limit"),
    # The window lets 8 fall to 5 (the highest), the down limit one step: 7. Both conditions speak.
    pytest.param(DecideCase(up_window=0, queue=0.0, kv=0.0, preempt=0.0, ready=8, current=8, unschedulable=0,
                            recommendations=((100, 5),),
                            expect=(7, R.ScaleDownStabilized, R.ScaleDownLimit, R.ScaleDownLimit)),
                 id="down-window-then-down-limit"),
    # queue 45 / 3 = 15, + 1 = 16 from 2, with a 120 s up window whose lowest is 10: the window holds
    # it to 10, the up limit (4 per 60 s) to 6.
    pytest.param(DecideCase(up_window=120, queue=45.0, kv=0.3, preempt=0.0, ready=2, current=2, unschedulable=0,
                            recommendations=((60, 10),),
                            expect=(6, R.ScaleUpStabilized, R.ScaleUpLimit, R.ScaleUpLimit)),
                 id="up-window-then-up-limit"),
    # Same with the lowest 4: within the limit, so only the window speaks.
    pytest.param(DecideCase(up_window=120, queue=45.0, kv=0.3, preempt=0.0, ready=2, current=2, unschedulable=0,
                            recommendations=((60, 4),),
                            expect=(4, R.ScaleUpStabilized, R.DesiredWithinRange, R.ScaleUpStabilized)),
                 id="up-window-alone"),
    # KV unknown: the fall to 1 is floored at 6 before the windows see it.
    pytest.param(DecideCase(up_window=0, queue=0.0, kv=None, preempt=0.0, ready=6, current=6, unschedulable=0,
                            recommendations=(),
                            expect=(6, R.ReadyForNewScale, R.MetricsPartial, R.MetricsPartial)),
                 id="partial-floor-is-a-limit"),
    # A pod is unschedulable: the rise to 16 stops at 9.
    pytest.param(DecideCase(up_window=0, queue=45.0, kv=0.3, preempt=0.0, ready=8, current=9, unschedulable=1,
                            recommendations=(),
                            expect=(9, R.ReadyForNewScale, R.InsufficientCapacity, R.InsufficientCapacity)),
                 id="unschedulable"),
    # Nothing known: held at 0 (no recommendation, no window), raised to min 1.
    pytest.param(DecideCase(up_window=0, queue=None, kv=None, preempt=None, ready=0, current=0, unschedulable=0,
                            recommendations=(),
                            expect=(1, R.ReadyForNewScale, R.TooFewReplicas, R.TooFewReplicas)),
                 id="hold-then-min"),
]


@pytest.mark.parametrize("c", DECIDE_CASES)
def test_decide_reports_windows_apart_from_limits(c: DecideCase) -> None:
    snap = SignalSnapshot(NOW, queue_depth=c.queue, kv_cache_utilization=c.kv, preemption_rate=c.preempt,
                          replicas_reporting=c.ready)
    state = PoolState(interactive_replicas=c.current, interactive_ready=c.ready,
                      interactive_starting=c.current - c.ready - c.unschedulable,
                      interactive_unschedulable=c.unschedulable)
    memory = PolicyMemory(recommendations=tuple((NOW - ago, r) for ago, r in c.recommendations), since=NOW - 3600)
    d = decide(_decide_spec(c.up_window), [snap], state, memory, NOW)
    assert (d.interactive_replicas, d.able_to_scale.reason, d.scaling_limited.reason, d.clamped_by) == c.expect
    assert d.able_to_scale.status == "True"  # the HPA never makes AbleToScale False for a window
    assert d.scaling_limited.status == ("False" if c.expect[2] is Reason.DesiredWithinRange else "True")


# --------------------------------------------------------------------------------------------
# Properties: the split clamps give the HPA's one-function answers
# --------------------------------------------------------------------------------------------


def _hpa_stabilize(current: int, recommendation: int, arg: Normalization) -> int:
    """The HPA's stabilizeRecommendationWithBehaviors, as written there (both windows at once)."""
    up_w = arg.spec.scaling.scale_up.stabilization_window_seconds
    down_w = arg.spec.scaling.scale_down.stabilization_window_seconds
    up_rec = min([r for t, r in arg.memory.recommendations if t > arg.now - up_w] + [recommendation])
    down_rec = max([r for t, r in arg.memory.recommendations if t > arg.now - down_w] + [recommendation])
    value = current
    if value < up_rec:
        value = up_rec
    if value > down_rec:
        value = down_rec
    return value


@settings(max_examples=300, deadline=None)
@given(
    up=behaviors(120),
    down=behaviors(cls=ScaleDownBehavior),
    # From 1 up: at 0 our scale-up window lets a wake through (up-window-never-holds-a-pool-at-zero),
    # where the HPA's would hold it (the HPA never scales from zero on its own).
    current=st.integers(1, 30),
    value=st.integers(0, 30),
    unschedulable=st.integers(0, 2),
    data=st.data(),
)
def test_split_clamps_match_the_hpa(
    up: ScalingBehavior, down: ScaleDownBehavior, current: int, value: int, unschedulable: int, data: st.DataObject
) -> None:
    memory = replace(data.draw(memories(NOW)), since=NOW - 3600)  # the whole window seen (as the HPA has)
    spec = the_spec(lo=0, hi=100, up_window=up.stabilization_window_seconds,
                    up_per_period=up.max_replicas_per_period, up_period=up.period_seconds,
                    down_window=down.stabilization_window_seconds, down_per_period=down.max_replicas_per_period,
                    down_period=down.period_seconds)
    arg = Normalization(spec=spec, current=current, unschedulable=unschedulable, unknown=(), memory=memory, now=NOW)
    stabilised, windows = chain(value, arg, WINDOWS)
    assert stabilised == _hpa_stabilize(current, value, arg)
    assert len(windows) <= 1  # only the window of the direction of the move can bite
    # At most one rate limit bites, and the value stays between the two limits.
    _, rate = chain(stabilised, arg, (scale_up_limit, scale_down_limit))
    assert len(rate) <= 1
    for step in windows + rate:
        assert isinstance(step, Clamped) and step.message
