"""Issue 21, case 1: a pod that will never serve is not capacity on its way.

The given input: a pool of 4 replicas (3 Ready + 1 crash-looping for 6 h), headroom 1, queue 6, KV
0.70 over 3 reporting, TTFT p95 2.6 s against a 2 s SLO. It used to be counted as starting: the
latency guard waited for it for ever and the pool held 4. A failed pod is now its own count
(``PoolState.interactive_failed``): the current demand leaves it out and its replacement is asked
for at once. Neighbours: a failed pod in a quiet pool, several failed, more failed than Ready (not
replaced: the template is broken), and a rollout's surge pod (not starting).
"""

from __future__ import annotations

from typing import Any

import pytest

from llmscale.api import LLMDeploymentSpec
from llmscale.policy import PolicyMemory, PoolState, decide
from llmscale.signals.snapshot import SignalSnapshot

NOW = 1_717_416_000.0


def the_spec(**overrides: Any) -> LLMDeploymentSpec:
    data: dict[str, Any] = {
        "model": {"name": "chat", "preset": "llama-3.1-8b"},
        "replicas": {"min": 1, "max": 10},
        "headroom": {"replicas": 1},
        "slo": {"ttftP95Seconds": 2.0, "itlP95Seconds": 0.1},
        # The KV target the pool runs at (0.70 over 3 is within it): the auto target would
        # make KV alone ask for 8 and hide what the failed pod does.
        "scaling": {"scaleUp": {"stabilizationWindowSeconds": 0}, "targets": {"kvCacheUtilization": 0.8}},
    }
    data.update(overrides)
    return LLMDeploymentSpec.model_validate(data)


def snap(queue: float, kv: float, reporting: int, ttft: float | None) -> SignalSnapshot:
    return SignalSnapshot(NOW - 5, queue_depth=queue, kv_cache_utilization=kv, preemption_rate=0.0,
                          ttft_p95_s=ttft, itl_p95_s=0.03, replicas_reporting=reporting)


def quiet_memory() -> PolicyMemory:
    return PolicyMemory(since=NOW - 3600)


def test_the_crash_looping_pod_is_replaced_at_once() -> None:
    state = PoolState(interactive_replicas=4, interactive_ready=3, interactive_failed=1)
    d = decide(the_spec(), [snap(6.0, 0.70, 3, 2.6)], state, quiet_memory(), NOW)
    # Demand: the guard's 3 (2 serving after headroom, + 1), + headroom 1 + the replacement 1.
    assert d.interactive_replicas == 5, d.reasons
    assert any("failed pods will never serve" in r for r in d.reasons), d.reasons
    assert not any("starting" in r and "latency guard waits" in r for r in d.reasons), d.reasons
    # The replacement is not warm headroom.
    assert (d.demand_replicas, d.headroom_replicas) == (3, 1)


def test_before_the_fix_the_same_pod_as_starting_holds_the_pool() -> None:
    # The same pool with the pod counted as starting (what classify_pod said before): the guard
    # waits, the pool holds 4. Kept to show the difference is the failed count alone.
    state = PoolState(interactive_replicas=4, interactive_ready=3, interactive_starting=1)
    d = decide(the_spec(), [snap(6.0, 0.70, 3, 2.6)], state, quiet_memory(), NOW)
    assert d.interactive_replicas == 4


@pytest.mark.parametrize(
    ("replicas", "ready", "failed", "queue", "kv", "ttft", "expected"),
    [
        # Quiet pool of 3 (2 Ready + 1 failed), headroom 1, no breach: demand 1 + headroom 1 + 1 = 3 → holds 3
        # rather than scaling down onto the failed pod's place.
        pytest.param(3, 2, 1, 0.0, 0.2, 0.5, 3, id="quiet-pool-keeps-the-replacement"),
        # Two failed of 6, 4 Ready, queue 3 a replica: demand 4 (> the 3 serving after headroom, so
        # no guard) + headroom 1 + both replacements = 7.
        pytest.param(6, 4, 2, 12.0, 0.8, 2.6, 7, id="two-failed-both-replaced"),
        # More failed than Ready: the template or the cluster is broken; nothing added for them. The
        # 1 serving replica's demand 2 + headroom 1 = 3 < 4: one step down, which removes a failed pod
        # (a ReplicaSet deletes pods that are not Ready first).
        pytest.param(4, 1, 3, 6.0, 0.9, 2.6, 3, id="more-failed-than-ready-not-replaced"),
        pytest.param(3, 1, 2, 30.0, 0.9, 2.6, 3, id="more-failed-than-ready-never-added"),
    ],
)
def test_failed_pods_neighbours(replicas: int, ready: int, failed: int, queue: float, kv: float,
                                ttft: float, expected: int) -> None:
    state = PoolState(interactive_replicas=replicas, interactive_ready=ready, interactive_failed=failed)
    d = decide(the_spec(), [snap(queue, kv, ready, ttft)], state, quiet_memory(), NOW)
    assert d.interactive_replicas == expected, d.reasons


def test_a_rollout_surge_pod_does_not_hold_the_latency_guard() -> None:
    # Pool of 16 rolling to a new image, one surge pod starting: pool_state leaves it out of the
    # starting count (interactive_surge), so a breach adds a replica.
    state = PoolState(interactive_replicas=16, interactive_ready=16, interactive_surge=1)
    d = decide(the_spec(replicas={"min": 1, "max": 30}), [snap(2.0, 0.6, 16, 2.6)], state, quiet_memory(), NOW)
    assert d.interactive_replicas > 16, d.reasons
