"""The signal history rule shared by the operator and the simulator (llmscale.policy.history):
named cases for the append and trim rules, and the property that trimming is invisible to decide."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.strategies import T0, pool_states, specs

from llmscale.api import LLMDeploymentSpec
from llmscale.policy import PolicyMemory, PoolState, decide
from llmscale.policy.history import append_snapshot, history_seconds, record_snapshot, trim_history
from llmscale.signals.snapshot import SignalSnapshot


def snap(t: float, *, error: str | None = None, kv: float = 0.5) -> SignalSnapshot:
    """A snapshot observed ``t`` seconds after T0."""
    return SignalSnapshot(observed_at=T0 + t, kv_cache_utilization=kv, queue_depth=0.0, preemption_rate=0.0,
                          replicas_reporting=2, error=error)


@pytest.mark.parametrize(
    ("before", "read", "appended"),
    [
        pytest.param([], snap(0), True, id="first read"),
        pytest.param([snap(0)], snap(15), True, id="newer samples"),
        pytest.param([snap(0), snap(15)], snap(15, kv=0.9), False, id="same samples again: no new scrape"),
        pytest.param([snap(0), snap(15)], snap(10), False, id="older samples: dropped"),
        pytest.param([snap(0), snap(15)], snap(15, error="kv: negative value"), True,
                     id="same samples with an error: the policy must judge it"),
        pytest.param([snap(0), snap(15)], snap(5, error="Prometheus did not answer"), True,
                     id="an error always reaches the policy"),
    ],
)
def test_append_rule(before: list[SignalSnapshot], read: SignalSnapshot, appended: bool) -> None:
    after = append_snapshot(before, read)
    assert after == ((*before, read) if appended else tuple(before))
    assert isinstance(after, tuple)


@pytest.mark.parametrize(
    ("times", "now", "keep_s", "kept"),
    [
        pytest.param([], 100, 60, [], id="empty"),
        pytest.param([0, 30, 60, 90], 100, 60, [60, 90], id="older than keep_s dropped"),
        pytest.param([0, 40, 60], 100, 60, [40, 60], id="exactly keep_s old is kept"),
        pytest.param([0, 10], 1000, 60, [10], id="the newest stays however old: the policy says MetricsStale"),
        pytest.param([0, 10, 20], 20, 0, [20], id="keep nothing but the newest"),
    ],
)
def test_trim_rule(times: list[float], now: float, keep_s: float, kept: list[float]) -> None:
    trimmed = trim_history([snap(t) for t in times], T0 + now, keep_s)
    assert [s.observed_at - T0 for s in trimmed] == kept


def test_negative_keep_is_refused() -> None:
    with pytest.raises(ValueError, match="keep_s"):
        trim_history([snap(0)], T0, -1.0)


def test_record_appends_then_trims() -> None:
    history = (snap(0), snap(15), snap(30))
    assert record_snapshot(history, snap(45), T0 + 45, 20) == (snap(30), snap(45))
    # A repeated read is not appended; the trim still runs on the wall clock.
    assert record_snapshot(history, snap(30), T0 + 60, 20) == (snap(30),)


def test_history_seconds_is_one_cold_start() -> None:
    spec = LLMDeploymentSpec.model_validate(
        {"model": {"name": "chat", "preset": "llama-3.1-8b"}, "headroom": {"coldStartSeconds": 420}}
    )
    assert history_seconds(spec) == 420.0


@st.composite
def reads(draw: st.DrawFn) -> list[tuple[float, float | None, int]]:
    """Reads one tick apart (5-60 s), each ``(seconds since the previous, KV use or unknown, replicas)``."""
    return draw(st.lists(
        st.tuples(st.floats(5, 60), st.one_of(st.none(), st.floats(0, 1)), st.integers(0, 12)),
        min_size=1, max_size=40,
    ))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=specs(with_batch=False), steps=reads(), state=pool_states(lo=1))
def test_trimming_to_history_seconds_never_changes_a_decision(
    spec: LLMDeploymentSpec, steps: list[tuple[float, float | None, int]], state: PoolState
) -> None:
    """decide on the history kept by record_snapshot(keep_s=history_seconds(spec)) equals decide on
    every snapshot ever read, tick after tick (memory carried in both): what is trimmed is never
    read. The simulator relies on this (its benchmark table must not move) and so does the
    operator, which keeps at least as much."""
    kept: tuple[SignalSnapshot, ...] = ()
    everything: list[SignalSnapshot] = []
    memory_kept = memory_all = PolicyMemory()
    now = T0
    for dt, kv, replicas in steps:
        now += dt
        read = SignalSnapshot(observed_at=now - 2.0, kv_cache_utilization=kv, queue_depth=0.0,
                              preemption_rate=0.0, replicas_reporting=replicas)
        kept = record_snapshot(kept, read, now, history_seconds(spec))
        everything.append(read)
        a = decide(spec, kept, state, memory_kept, now)
        b = decide(spec, everything, state, memory_all, now)
        assert (a.interactive_replicas, a.headroom_replicas, a.reasons) == (
            b.interactive_replicas, b.headroom_replicas, b.reasons)
        memory_kept, memory_all = a.memory, b.memory
