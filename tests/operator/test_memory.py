"""The per-object memory's rules (llmscale.controller.memory): which policy memory a tick keeps,
and where the first tick after a restart gets it from."""

from __future__ import annotations

import pytest

from llmscale.controller.memory import ObjectMemory, memory_after, object_memory
from llmscale.policy.types import ConditionResult, Decision, PolicyMemory, Reason

BEFORE = PolicyMemory(recommendations=((100.0, 2),), scale_events=())
AFTER = PolicyMemory(recommendations=((100.0, 2), (115.0, 11)), scale_events=((115.0, 4),))


def decision(memory: PolicyMemory) -> Decision:
    ok = ConditionResult("True", Reason.MetricsFresh, "fresh")
    return Decision(interactive_replicas=6, batch_replicas=3, demand_replicas=5, headroom_replicas=1, reasons=(),
                    metrics_available=ok, able_to_scale=ok, scaling_limited=ok, batch_window_open=ok,
                    policy_state_readable=ok, memory=memory)


@pytest.mark.parametrize(
    ("interactive_applied", "kept"),
    [
        pytest.param(True, AFTER, id="interactive applied (batch refused or not): the decision's memory"),
        pytest.param(False, BEFORE, id="interactive refused: the scale did not happen, nor its scale event"),
    ],
)
def test_memory_after_follows_the_interactive_pool(interactive_applied: bool, kept: PolicyMemory) -> None:
    assert memory_after(BEFORE, decision(AFTER), interactive_applied) == kept


@pytest.mark.parametrize(
    ("in_process", "status", "expected"),
    [
        pytest.param(None, {"policyState": AFTER.to_dict()}, AFTER, id="after a restart: status.policyState"),
        pytest.param(BEFORE, {"policyState": AFTER.to_dict()}, BEFORE, id="in this process: its own"),
        pytest.param(None, None, PolicyMemory(), id="new object: empty"),
    ],
)
def test_policy_memory_is_restored_from_status(
    in_process: PolicyMemory | None, status: dict[str, object] | None, expected: PolicyMemory
) -> None:
    assert ObjectMemory(policy_memory=in_process).restored_policy_memory(status) == expected


def test_object_memory_is_created_once_per_object() -> None:
    memo: dict[str, object] = {}
    first = object_memory(memo)
    assert object_memory(memo) is first
