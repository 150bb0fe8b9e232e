"""Issue 21, clock skew: the snapshot's time is already in the operator's clock (the reader moved
it); the policy says how far Prometheus's clock is off, above a few seconds."""

from __future__ import annotations

import pytest

from llmscale.api import LLMDeploymentSpec
from llmscale.policy import Decision, PolicyMemory, PoolState, Reason, decide
from llmscale.signals.snapshot import SignalSnapshot

NOW = 1_717_416_000.0
SPEC = LLMDeploymentSpec.model_validate({"model": {"name": "chat", "preset": "llama-3.1-8b"}})


SKEWS = pytest.mark.parametrize(
    ("skew", "said"),
    [
        pytest.param(-120.0, "120 s behind the operator's", id="operator-ahead"),
        pytest.param(120.0, "120 s ahead of the operator's", id="operator-behind"),
        pytest.param(2.0, None, id="round-trip"),
    ],
)


def _decide_with_skew(skew: float) -> Decision:
    snap = SignalSnapshot(NOW - 8, queue_depth=2.0, kv_cache_utilization=0.3, preemption_rate=0.0,
                          ttft_p95_s=0.4, itl_p95_s=0.02, replicas_reporting=2, clock_skew_s=skew)
    return decide(SPEC, [snap], PoolState(2, 2), PolicyMemory(since=NOW - 3600), NOW)


@SKEWS
def test_a_skewed_snapshot_is_still_fresh(skew: float, said: str | None) -> None:
    assert _decide_with_skew(skew).metrics_available.reason is Reason.MetricsFresh


@SKEWS
def test_the_skew_is_reported(skew: float, said: str | None) -> None:
    d = _decide_with_skew(skew)
    assert (said in d.metrics_available.message) if said else ("clock" not in d.metrics_available.message)
