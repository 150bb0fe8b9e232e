"""The policy memory read back from ``status.policyState``: what cannot be read is dropped and said,
never a silent reset; ``decide`` reports it in ``PolicyStateReadable`` without changing a decision."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.strategies import memories

from llmscale.api import LLMDeploymentSpec, ModelSpec, ReplicasSpec
from llmscale.policy import PolicyMemory, PoolState, Reason, decide
from llmscale.signals.snapshot import SignalSnapshot

NOW = 1_717_416_000.0  # 2024-06-03 12:00:00 UTC


@pytest.mark.parametrize(
    ("data", "recommendations", "scale_events", "unreadable_names"),
    [
        pytest.param(None, (), (), None, id="absent-is-empty"),
        pytest.param({}, (), (), None, id="empty-object-is-empty"),
        pytest.param({"recommendations": [[NOW, 3]], "scaleEvents": [[NOW, -1]]}, ((NOW, 3),), ((NOW, -1),), None,
                     id="well-formed"),
        # The API server gives a float time back as an integer when it has no fraction.
        pytest.param({"recommendations": [[1717416000, 3.0]]}, ((NOW, 3),), (), None, id="integral-numbers"),
        pytest.param({"recommendations": [[NOW, 3], ["soon", 4], [NOW, 5]], "scaleEvents": [[NOW, 1]]},
                     ((NOW, 3), (NOW, 5)), ((NOW, 1),), "recommendations[1]", id="one-bad-entry-keeps-the-rest"),
        pytest.param({"recommendations": [[NOW, 3.5]]}, (), (), "recommendations[0]", id="fractional-replicas"),
        pytest.param({"recommendations": [[NOW, -2]]}, (), (), "recommendations[0]", id="negative-recommendation"),
        pytest.param({"scaleEvents": [[NOW, -2]]}, (), ((NOW, -2),), None, id="negative-delta-is-fine"),
        pytest.param({"recommendations": [[math.inf, 3]]}, (), (), "recommendations[0]", id="infinite-time"),
        pytest.param({"recommendations": [[NOW, True]]}, (), (), "recommendations[0]", id="boolean"),
        pytest.param({"recommendations": [[NOW, 3, 4]]}, (), (), "recommendations[0]", id="not-a-pair"),
        pytest.param({"recommendations": "3", "scaleEvents": [[NOW, 1]]}, (), ((NOW, 1),), "recommendations",
                     id="key-not-a-list"),
        pytest.param({"recommendations": [[NOW, 3]], "history": []}, ((NOW, 3),), (), "history", id="unknown-key"),
        pytest.param([[NOW, 3]], (), (), "status.policyState", id="not-an-object"),
        # The keys added with the load signal: each read on its own, each dropped with a word.
        pytest.param({"since": NOW, "capacityCorrection": {"factor": 0.8, "updatedAt": NOW, "breach": "ITL"},
                      "burstiness": [1.5, 12.0, 30, NOW], "batchYield": [2, 6]}, (), (), None, id="new-keys"),
        pytest.param({"since": "yesterday"}, (), (), "since", id="since-not-a-time"),
        # Issue 27: no 2× wall, so a factor of 4.5 is a correction; above 100 it is garbage.
        pytest.param({"capacityCorrection": {"factor": 4.5, "updatedAt": NOW}}, (), (), None,
                     id="correction-of-four-and-a-half"),
        pytest.param({"capacityCorrection": {"factor": 150.0, "updatedAt": NOW}}, (), (), "capacityCorrection",
                     id="correction-above-a-hundred"),
        pytest.param({"capacityCorrection": {"factor": 0.3, "updatedAt": NOW, "streak": -1}}, (), (),
                     "capacityCorrection", id="correction-negative-streak"),
        pytest.param({"capacityCorrection": {"factor": 0.0, "updatedAt": NOW}}, (), (), "capacityCorrection",
                     id="correction-zero"),
        pytest.param({"burstiness": [1.5, 12.0]}, (), (), "burstiness", id="burstiness-short"),
        pytest.param({"batchYield": [2.5, 6]}, (), (), "batchYield", id="yield-fractional"),
        pytest.param({"replicas": 3}, (), (), None, id="replicas"),
        pytest.param({"replicas": -1}, (), (), "replicas", id="replicas-negative"),
        pytest.param({"replicas": 2.5}, (), (), "replicas", id="replicas-fractional"),
        pytest.param({"replicas": "3"}, (), (), "replicas", id="replicas-a-string"),
    ],
)
def test_from_dict(
    data: Any,
    recommendations: tuple[tuple[float, int], ...],
    scale_events: tuple[tuple[float, int], ...],
    unreadable_names: str | None,
) -> None:
    memory = PolicyMemory.from_dict(data)
    assert (memory.recommendations, memory.scale_events) == (recommendations, scale_events)
    if unreadable_names is None:
        assert memory.unreadable is None
    else:
        # The problem is said, naming where it is, so that a user can find it in the object.
        assert memory.unreadable is not None and unreadable_names in memory.unreadable


@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_round_trip_through_status_reads_everything(data: st.DataObject) -> None:
    memory = data.draw(memories(NOW))
    assert PolicyMemory.from_dict(memory.to_dict()) == memory


def test_new_keys_read_back() -> None:
    memory = PolicyMemory.from_dict(
        {"since": NOW, "capacityCorrection": {"factor": 0.8, "updatedAt": NOW - 60, "breach": "ITL p95"},
         "burstiness": [1.5, 12.0, 30, NOW], "batchYield": [2, 6]}
    )
    assert memory.since == NOW
    assert memory.correction is not None and (memory.correction.factor, memory.correction.breach) == (0.8, "ITL p95")
    assert memory.burstiness == (1.5, 12.0, 30, NOW)
    assert memory.batch_yield == (2, 6)


def test_the_decision_memory_ends_at_the_decided_size() -> None:
    # The size a restart compares the pool with (ObjectMemory.restored_policy_memory).
    snap = SignalSnapshot(NOW, queue_depth=0.0, kv_cache_utilization=0.1, preemption_rate=0.0, replicas_reporting=8)
    d = decide(SPEC, [snap], PoolState(interactive_replicas=8, interactive_ready=8), PolicyMemory(), NOW)
    assert d.memory.replicas == d.interactive_replicas
    assert PolicyMemory.from_dict(d.memory.to_dict()).replicas == d.interactive_replicas


SPEC = LLMDeploymentSpec(model=ModelSpec(name="chat", preset="llama-3.1-8b"), replicas=ReplicasSpec(min=1, max=16))
# Defaults: scale-down window 300 s, scale-up window 120 s; periods 60 s; the latency window 60 s:
# the memory's horizon is 300 s.
HORIZON = 300.0


def _tick(memory: PolicyMemory, now: float) -> tuple[int, Reason, str, PolicyMemory]:
    snap = SignalSnapshot(now, queue_depth=0.0, kv_cache_utilization=0.1, preemption_rate=0.0, replicas_reporting=8)
    d = decide(SPEC, [snap], PoolState(interactive_replicas=8, interactive_ready=8), memory, now)
    return d.interactive_replicas, d.policy_state_readable.reason, d.policy_state_readable.status, d.memory


def _partly_unreadable_memory() -> PolicyMemory:
    # 8 recommended 100 s ago is readable and keeps the pool at 8; the second entry is not.
    status = {"recommendations": [[NOW - 100, 8], [NOW - 50, "nine"]], "scaleEvents": []}
    return PolicyMemory.from_dict(status)


def test_unreadable_memory_decides_as_the_kept_part() -> None:
    memory = _partly_unreadable_memory()
    kept = PolicyMemory(recommendations=((NOW - 100, 8),))
    assert _tick(memory, NOW)[:3] == (8, Reason.PolicyStateUnreadable, "False")
    assert _tick(kept, NOW)[:3] == (8, Reason.PolicyStateRead, "True")  # the same decision


def test_unreadable_memory_is_reported_until_the_horizon() -> None:
    # The warning is carried while a dropped entry could still count, and not after.
    replicas, reason, status_, carried = _tick(_partly_unreadable_memory(), NOW)
    assert (replicas, reason, status_) == (8, Reason.PolicyStateUnreadable, "False")
    assert _tick(carried, NOW + HORIZON - 1)[1:3] == (Reason.PolicyStateUnreadable, "False")
    later = _tick(carried, NOW + HORIZON)
    assert later[1:3] == (Reason.PolicyStateRead, "True")
    assert later[3].unreadable is None


def test_the_unreadable_warning_is_never_persisted() -> None:
    carried = _tick(_partly_unreadable_memory(), NOW)[3]
    # to_dict writes only what the policy reads.
    assert set(carried.to_dict()) <= {"recommendations", "scaleEvents", "since", "capacityCorrection",
                                      "burstiness", "batchYield", "replicas"}
    assert "unreadable" not in str(carried.to_dict())


def test_unreadable_memory_adds_a_reason_line() -> None:
    memory = PolicyMemory.from_dict({"recommendations": [["x", 1]]})
    snap = SignalSnapshot(NOW, queue_depth=0.0, kv_cache_utilization=0.1, preemption_rate=0.0, replicas_reporting=2)
    d = decide(SPEC, [snap], PoolState(interactive_replicas=2, interactive_ready=2), memory, NOW)
    assert d.reasons[0].startswith("policy memory incomplete: ")
