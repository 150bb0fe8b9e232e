"""Invariants of the policy as Hypothesis properties (strategies in tests/strategies.py)."""

from __future__ import annotations

from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.strategies import (
    DST_FREE_ZONES,
    ZONES,
    decide_inputs,
    hhmm,
    instants,
    snapshots,
    specs,
    trough_windows,
)

from llmscale.api import DAYS_OF_WEEK, LLMDeploymentSpec, TroughWindow
from llmscale.policy import PolicyMemory, PoolState, batch_window_open, decide
from llmscale.signals.snapshot import SignalSnapshot

PROPS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _leading_unknown(snap: SignalSnapshot) -> bool:
    values = (snap.queue_depth, snap.kv_cache_utilization, snap.preemption_rate)
    return any(v is None or v < 0 for v in values)


@PROPS
@given(decide_inputs())
def test_every_decision_keeps_to_the_replica_bounds(
    args: tuple[LLMDeploymentSpec, list[SignalSnapshot], PoolState, PolicyMemory, float],
) -> None:
    spec, history, state, memory, now = args
    d = decide(spec, history, state, memory, now)
    assert spec.replicas.min <= d.interactive_replicas <= spec.replicas.max
    assert d.batch_replicas >= 0 and d.demand_replicas >= 0 and d.headroom_replicas >= 0


@PROPS
@given(decide_inputs())
def test_every_decision_has_reasons_with_well_formed_conditions(
    args: tuple[LLMDeploymentSpec, list[SignalSnapshot], PoolState, PolicyMemory, float],
) -> None:
    d = decide(*args)
    assert d.reasons and all(isinstance(r, str) and r for r in d.reasons)
    for cond in (d.metrics_available, d.able_to_scale, d.scaling_limited, d.batch_window_open, d.policy_state_readable):
        assert (
            cond.status in ("True", "False", "Unknown") and cond.reason.isalnum() and cond.reason[0].isupper()
        )


@PROPS
@given(decide_inputs())
def test_deterministic(
    args: tuple[LLMDeploymentSpec, list[SignalSnapshot], PoolState, PolicyMemory, float],
) -> None:
    assert decide(*args) == decide(*args)


@PROPS
@given(decide_inputs())
def test_unknown_never_decreases(
    args: tuple[LLMDeploymentSpec, list[SignalSnapshot], PoolState, PolicyMemory, float],
) -> None:
    spec, history, state, memory, now = args
    d = decide(spec, history, state, memory, now)
    newest = history[-1] if history else None
    stale = newest is None or newest.age(now) > spec.scaling.metrics_max_age_seconds
    if stale or _leading_unknown(newest):  # type: ignore[arg-type]
        # Only the user's bound spec.replicas.max may take the pool below its current size.
        assert d.interactive_replicas >= min(state.interactive_replicas, spec.replicas.max)
    if stale:
        assert not d.valid
        assert d.interactive_replicas == min(
            max(state.interactive_replicas, spec.replicas.min), spec.replicas.max
        )
        assert d.metrics_available.status == "False"


# Each example is a run of up to 40 decisions: 60 of them are ~1,200 decisions.
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=specs(), start=instants(), data=st.data())
def test_rate_limits_hold_over_a_run(spec: LLMDeploymentSpec, start: float, data: st.DataObject) -> None:
    """Fed its own decisions tick after tick, the pool never changes faster than the limits."""
    replicas = data.draw(st.integers(spec.replicas.min, spec.replicas.max))
    memory = PolicyMemory()
    history: list[SignalSnapshot] = []
    changes: list[tuple[float, int]] = []
    tick = spec.scaling.tick_seconds
    for i in range(data.draw(st.integers(2, 40))):
        now = start + i * tick
        history.append(data.draw(snapshots(now, max_age_s=tick, known=data.draw(st.booleans()))))
        state = PoolState(interactive_replicas=replicas, interactive_ready=replicas)
        d = decide(spec, history[-20:], state, memory, now)
        if d.interactive_replicas != replicas:
            changes.append((now, d.interactive_replicas - replicas))
        up, down = spec.scaling.scale_up, spec.scaling.scale_down
        added = sum(c for t, c in changes if c > 0 and t > now - up.period_seconds)
        removed = -sum(c for t, c in changes if c < 0 and t > now - down.period_seconds)
        assert added <= up.max_replicas_per_period, d.reasons
        assert removed <= down.max_replicas_per_period, d.reasons
        replicas, memory = d.interactive_replicas, d.memory


@PROPS
@given(decide_inputs())
def test_batch_is_zero_outside_windows(
    args: tuple[LLMDeploymentSpec, list[SignalSnapshot], PoolState, PolicyMemory, float],
) -> None:
    spec, history, state, memory, now = args
    d = decide(spec, history, state, memory, now)
    if spec.batch is None or batch_window_open(spec.batch.windows, now) is None:
        assert d.batch_replicas == 0
        assert d.batch_window_open.status == "False"
    else:
        assert d.batch_window_open.status == "True"
        if state.interactive_unschedulable == 0 and memory.batch_yield is None:
            assert d.batch_replicas == spec.batch.replicas
        else:  # interactive first: batch gives replicas up to unschedulable interactive pods
            assert 0 <= d.batch_replicas <= spec.batch.replicas


def _oracle_open(window: TroughWindow, now: float) -> bool:
    """An independent reading: the window as intervals of instants, one per starting day."""
    tz = ZoneInfo(window.timezone)
    today = datetime.fromtimestamp(now, tz).date()
    for day in (today - timedelta(days=1), today):
        if DAYS_OF_WEEK[day.weekday()] not in window.days:
            continue
        opens = datetime.combine(day, window.start_time(), tz)
        end_day = day if window.start_time() < window.end_time() else day + timedelta(days=1)
        closes = datetime.combine(end_day, window.end_time(), tz)
        if opens.timestamp() <= now < closes.timestamp():
            return True
    return False


_AWAY_FROM_DST_CHANGES = hhmm().filter(lambda s: int(s[:2]) >= 4)


@PROPS
@given(
    window=st.one_of(
        trough_windows(DST_FREE_ZONES),
        # In zones with DST, start and end away from the 00:00–04:00 hours where clocks change:
        # there wall-clock and interval readings legitimately differ (see windows.py).
        st.tuples(
            _AWAY_FROM_DST_CHANGES,
            _AWAY_FROM_DST_CHANGES,
            st.sampled_from([z for z in ZONES if z not in DST_FREE_ZONES]),
            st.lists(st.sampled_from(DAYS_OF_WEEK), min_size=1, max_size=7, unique=True),
        )
        .filter(lambda a: a[0] != a[1])
        .map(lambda a: TroughWindow(start=a[0], end=a[1], timezone=a[2], days=a[3])),
    ),
    now=instants(),
)
def test_window_matches_interval_oracle(window: TroughWindow, now: float) -> None:
    assert (batch_window_open([window], now) is window) == _oracle_open(window, now)
