"""Issue 21, a partial answer: Thanos or Mimir with partial response on answers HTTP 200 with
``"warnings": ["store B unavailable"]`` and the series of pods 0–3 of 8, for 12 minutes, at full
load. The sums read half the load; the pool used to walk down towards 5 and pay cold starts when
the store came back. An answer with warnings, or sums that miss Ready pods, never scales down, and
``MetricsAvailable`` says why (``PartialAnswer``)."""

from __future__ import annotations

import pytest

from llmscale.api import LLMDeploymentSpec
from llmscale.policy import PolicyMemory, PoolState, Reason, decide
from llmscale.signals.snapshot import SignalSnapshot

NOW = 1_717_416_000.0
SPEC = LLMDeploymentSpec.model_validate({
    "model": {"name": "chat", "preset": "llama-3.1-8b"},
    "replicas": {"min": 1, "max": 16},
    "headroom": {"replicas": 0},
    "scaling": {"scaleDown": {"stabilizationWindowSeconds": 0}, "targets": {"kvCacheUtilization": 0.8}},
})


def snap(reporting: int, warnings: tuple[str, ...]) -> SignalSnapshot:
    # Pods 0-3 answer: queue and KV read as for half the load.
    return SignalSnapshot(NOW - 5, queue_depth=2.0, kv_cache_utilization=0.3, preemption_rate=0.0,
                          replicas_reporting=reporting, warnings=warnings)


@pytest.mark.parametrize(
    ("reporting", "warnings", "expected_reason"),
    [
        pytest.param(4, ("store B unavailable",), Reason.PartialAnswer, id="thanos-partial-response"),
        pytest.param(8, ("store B unavailable",), Reason.PartialAnswer, id="warnings-with-every-pod"),
        pytest.param(4, (), Reason.PartialAnswer, id="sums-miss-ready-pods-without-warning"),
    ],
)
def test_a_partial_answer_never_scales_down(reporting: int, warnings: tuple[str, ...],
                                            expected_reason: Reason) -> None:
    state = PoolState(interactive_replicas=8, interactive_ready=8)
    memory = PolicyMemory(since=NOW - 3600)
    d = decide(SPEC, [snap(reporting, warnings)], state, memory, NOW)
    assert d.interactive_replicas == 8, d.reasons
    assert d.metrics_available.reason is expected_reason
    assert d.scaling_limited.reason is Reason.MetricsPartial
    if warnings:
        assert "store B unavailable" in d.metrics_available.message


def test_a_complete_answer_at_low_load_still_scales_down() -> None:
    # The neighbour that must still move: every Ready pod reports, no warning.
    d = decide(SPEC, [snap(8, ())], PoolState(interactive_replicas=8, interactive_ready=8),
               PolicyMemory(since=NOW - 3600), NOW)
    assert d.interactive_replicas < 8 and d.metrics_available.reason is not Reason.PartialAnswer


def test_a_partial_answer_still_scales_up() -> None:
    hot = SignalSnapshot(NOW - 5, queue_depth=40.0, kv_cache_utilization=0.95, preemption_rate=0.0,
                         replicas_reporting=4, warnings=("store B unavailable",))
    d = decide(SPEC, [hot], PoolState(interactive_replicas=8, interactive_ready=8), PolicyMemory(since=NOW - 3600), NOW)
    assert d.interactive_replicas > 8


@pytest.mark.parametrize("sleeping", [1, 4], ids=["one-asleep", "half-asleep"])
def test_a_sleeping_engine_is_not_idle_capacity_to_remove(sleeping: int) -> None:
    # Issue 24: vLLM's sleep mode. The awake pods are idle, the sleeping ones report an empty queue;
    # neither is a reason to remove a replica, and the sleeping ones are not counted as failed.
    asleep = tuple(f"chat-{i}" for i in range(sleeping))
    idle = SignalSnapshot(NOW - 5, queue_depth=0.0, kv_cache_utilization=0.1, preemption_rate=0.0,
                          replicas_reporting=8 - sleeping, sleeping_pods=asleep)
    d = decide(SPEC, [idle], PoolState(interactive_replicas=8, interactive_ready=8), PolicyMemory(since=NOW - 3600), NOW)
    assert d.interactive_replicas == 8, d.reasons
    assert d.metrics_available.reason is Reason.PartialAnswer
    assert f"{sleeping} pod(s) asleep" in d.metrics_available.message
    assert "Ready pods reported" not in d.metrics_available.message


def test_a_sleeping_engine_does_not_hide_load_on_the_awake_ones() -> None:
    hot = SignalSnapshot(NOW - 5, queue_depth=40.0, kv_cache_utilization=0.95, preemption_rate=0.0,
                         replicas_reporting=4, sleeping_pods=("chat-4", "chat-5", "chat-6", "chat-7"))
    d = decide(SPEC, [hot], PoolState(interactive_replicas=8, interactive_ready=8), PolicyMemory(since=NOW - 3600), NOW)
    assert d.interactive_replicas > 8


def test_a_failing_pod_does_not_hide_a_missing_one() -> None:
    """Review finding: 4 Ready pods; pod d fails every request (the tick judges it failed: 3 Ready);
    pod c's series are missing (a store down): 2 report. Counting d among the reporting side read
    2 + 1 = 3 of 3 and let the pool scale down on a sum over 2 of 3 pods."""
    from llmscale.policy.signal_health import partial_answer

    snap = SignalSnapshot(0.0, queue_depth=0.0, replicas_reporting=2, failing_pods=("chat-d",))
    assert partial_answer(snap, 3) == "2 of 3 Ready pods reported"
