"""The signal history rule shared by the operator and the simulator (llmscale.policy.history):
named cases for the append and trim rules, and the properties that trimming and slimming the older
entries are invisible to decide."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.strategies import T0, memories, pool_states, snapshots, specs

from llmscale.api import LLMDeploymentSpec
from llmscale.policy import PolicyMemory, PoolState, decide
from llmscale.policy.history import (
    append_snapshot,
    history_seconds,
    record_snapshot,
    slim_snapshot,
    trim_history,
)
from llmscale.signals.snapshot import CarriedRead, PodSignals, RateWindow, SignalSnapshot, WorkloadMix

WINDOW = RateWindow(60.0, "60s", 15.0, "targets", auto=True)


CARRIED = CarriedRead(failure="ttft query failed: timed out", failed_reads=1, failed_at=T0 + 20)


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
        # A carried snapshot is the last good read published again through a failed one (the
        # operator's fleet reader): with a rejected value of its own it joined every tick it was
        # carried (review of issue 14); it is news only with newer samples.
        pytest.param([snap(0), snap(15, error="kv: negative value")],
                     dataclasses.replace(snap(15, error="kv: negative value"), carried=CARRIED), False,
                     id="a carried snapshot with an error, already in the history"),
        pytest.param([snap(0)], dataclasses.replace(snap(15), carried=CARRIED), True,
                     id="a carried snapshot not yet in the history"),
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


def detailed(snapshot: SignalSnapshot, pods: int, stalled: bool) -> SignalSnapshot:
    """``snapshot`` with the per-pod detail the fleet reader fills in: pods (one stalled), the
    silent, ignored and absent lists, unknowns and quiet quantiles."""
    per_pod = tuple(PodSignals(pod=f"chat-{i}", queue_depth=1.0, running_requests=4.0, kv_cache_utilization=0.5,
                               preemption_rate=0.0, generation_tokens_rate=100.0,
                               newest_sample_s=snapshot.observed_at, stalled=stalled and i == 0)
                    for i in range(pods))
    return dataclasses.replace(
        snapshot, pods=per_pod, stalled_pods=("chat-0",) if stalled and pods else snapshot.stalled_pods,
        ignored_pods=("chat-gone",), silent_pods=("chat-new",), absent_counters=("vllm:num_preemptions_total",),
        unknown={"ttft_p95_s": "no requests in the window", "queue_depth": "unknown on pod chat-1 (see the error)"},
        quiet=("ttft_p95_s",),
    )


def test_slim_drops_only_the_per_pod_detail() -> None:
    whole = detailed(SignalSnapshot(observed_at=T0, queue_depth=3.0, running_requests=8.0, kv_cache_utilization=0.4,
                                    preemption_rate=0.1, ttft_p95_s=0.5, itl_p95_s=0.03, replicas_reporting=2,
                                    error="kv: negative value", wake_demand=2.0), pods=2, stalled=True)
    slim = slim_snapshot(whole)
    assert (slim.pods, slim.stalled_pods, slim.ignored_pods, slim.silent_pods, slim.absent_counters,
            dict(slim.unknown), slim.quiet) == ((), (), (), (), (), {}, ())
    assert dataclasses.replace(whole, pods=(), stalled_pods=(), ignored_pods=(), silent_pods=(), absent_counters=(),
                               unknown={}, quiet=()) == slim
    plain = snap(0)
    assert slim_snapshot(plain) is plain


def test_append_slims_the_entry_that_stops_being_the_newest() -> None:
    first, second = detailed(snap(0), 2, False), detailed(snap(15), 2, False)
    history = append_snapshot(append_snapshot((), first), second)
    assert history == (slim_snapshot(first), second)
    assert history[-1].pods and not history[0].pods
    # Not news: the newest stays whole.
    assert append_snapshot(history, detailed(snap(15, kv=0.9), 1, False)) == history


@st.composite
def detailed_histories(draw: st.DrawFn, now: float) -> list[SignalSnapshot]:
    """Up to 12 snapshots, oldest first, in the last 20 minutes, each with per-pod detail."""
    plain = draw(st.lists(snapshots(now, max_age_s=1200.0), min_size=1, max_size=12))
    return [detailed(s, draw(st.integers(0, 3)), draw(st.booleans()))
            for s in sorted(plain, key=lambda s: s.observed_at)]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), spec=specs(), state=pool_states())
def test_slimming_the_older_entries_never_changes_a_decision(
    data: st.DataObject, spec: LLMDeploymentSpec, state: PoolState
) -> None:
    """decide on a history whose entries before the newest are slimmed returns the same Decision
    (replicas, reasons, conditions, memory: all of it) as on the whole snapshots (issue 14)."""
    now = T0 + 86_400.0
    history = data.draw(detailed_histories(now))
    memory = data.draw(memories(now))
    slimmed = [*(slim_snapshot(s) for s in history[:-1]), history[-1]]
    # repr: NaN-safe equality of every field.
    assert repr(decide(spec, slimmed, state, memory, now)) == repr(decide(spec, history, state, memory, now))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=specs(with_batch=False), state=pool_states(lo=1),
       steps=st.lists(st.tuples(st.floats(5, 60), st.floats(0, 1), st.floats(0, 50), st.integers(1, 3)),
                      min_size=1, max_size=40))
def test_recorded_history_decides_as_the_whole_snapshots_tick_after_tick(
    spec: LLMDeploymentSpec, state: PoolState, steps: list[tuple[float, float, float, int]]
) -> None:
    """What the operator and the simulator keep (record_snapshot: trimmed, older entries slimmed)
    decides as every whole snapshot ever read, tick after tick with the memory carried: the live
    mix, the burstiness, the arrival rate and the trends read only what slimming keeps."""
    kept: tuple[SignalSnapshot, ...] = ()
    everything: list[SignalSnapshot] = []
    memory_kept = memory_all = PolicyMemory()
    now = T0
    for dt, kv, rate, pods in steps:
        now += dt
        read = detailed(SignalSnapshot(
            observed_at=now - 2.0, kv_cache_utilization=kv, queue_depth=rate / 10, running_requests=rate,
            preemption_rate=0.0, replicas_reporting=pods,
            workload=WorkloadMix(request_rate=rate, prompt_tokens_rate=rate * 900, generation_tokens_rate=rate * 200,
                                 prompt_tokens_mean=900.0, prompt_tokens_p95=2500.0, generation_tokens_mean=200.0,
                                 generation_tokens_p95=600.0, prefix_cache_hit_rate=0.3),
            window=WINDOW), pods, False)
        kept = record_snapshot(kept, read, now, history_seconds(spec))
        everything.append(read)
        a = decide(spec, kept, state, memory_kept, now)
        b = decide(spec, everything, state, memory_all, now)
        assert repr(a) == repr(b)
        memory_kept, memory_all = a.memory, b.memory
