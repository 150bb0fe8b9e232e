"""Baseline autoscalers as scenarios: a fake clock stepped through time, the expected decision at
each step (the HPA's and Knative's own unit-test style)."""

from __future__ import annotations

import numpy as np
import pytest

from llmscale.policy.types import PoolState
from llmscale.signals.snapshot import SignalSnapshot
from llmscale.sim.baselines import HorizontalPodAutoscaler, KnativePodAutoscaler, Oracle, per_minute_need
from llmscale.sim.fleet import Observation, PodSample


def obs(
    now: float,
    replicas: int,
    running: list[int] | None = None,
    queue: float | None = None,
    ready: int | None = None,
    integral: float = 0.0,
) -> Observation:
    pods = tuple(PodSample(0, r, 0.5) for r in (running or []))
    snap = SignalSnapshot(observed_at=now - 5, queue_depth=queue, replicas_reporting=len(pods))
    rdy = len(pods) if ready is None else ready
    return Observation(now, snap, pods, PoolState(replicas, rdy, replicas - rdy), integral, now - 5)


def hpa(target: float = 10.0) -> HorizontalPodAutoscaler:
    return HorizontalPodAutoscaler("hpa", "pods", "running", target, 1, 100)


@pytest.mark.parametrize(
    ("running", "expected"),
    [
        pytest.param([10, 10, 11], 3, id="within-tolerance-holds"),
        pytest.param([20, 20], 4, id="double-load-doubles"),
        pytest.param([13, 13], 3, id="ceil(2*1.3)"),
        pytest.param([10.9, 10.9], 2, id="1.09-inside-tolerance"),
    ],
)
def test_hpa_replica_calculator(running: list[int], expected: int) -> None:
    assert hpa().decide(obs(0, len(running), running)).interactive == expected


def test_hpa_counts_pods_in_their_cold_start_as_idle_when_scaling_up() -> None:
    # 2 Ready pods at 20 running (2× target), 2 starting: missing pods count as 0 → ratio 1.0 → hold
    assert hpa().decide(obs(0, 4, [20, 20])).interactive == 4
    # at 3× target the starting pods are not enough: ratio 60 / (10 × 4) = 1.5 → ceil(1.5 × 4) = 6
    # (not ceil(3 × 2) + 2 = 8: the starting pods are assumed idle, not at target)
    assert hpa().decide(obs(0, 4, [30, 30])).interactive == 6


def test_hpa_scale_up_is_limited_to_max_of_4_pods_and_100_percent_per_15_s() -> None:
    h = hpa()
    assert h.decide(obs(0, 2, [100, 100])).interactive == 6  # 2 + 4 beats 2 × 2
    assert h.decide(obs(15, 6, [100] * 6)).interactive == 12  # next period: 6 × 2 beats 6 + 4


def test_hpa_holds_the_highest_recommendation_for_300_s_before_scaling_down() -> None:
    h = hpa()
    assert h.decide(obs(0, 8, [10] * 8)).interactive == 8
    steps = [(15 * k, h.decide(obs(15 * k, 8, [2] * 8)).interactive) for k in range(1, 22)]
    assert all(n == 8 for t, n in steps if t <= 300)  # the recommendation 8 at t=0 is in the window
    assert steps[-1][1] == 2  # ceil(8 × 0.2) once it left the window


def test_hpa_without_metrics_holds() -> None:
    assert hpa().decide(obs(0, 5, [])).interactive == 5


def test_keda_queue_is_an_external_average_value_of_5_waiting_per_replica() -> None:
    k = HorizontalPodAutoscaler("keda-queue", "external", "queue_depth", 5.0, 1, 50)
    assert k.decide(obs(0, 2, [1, 1], queue=31.0)).interactive == 6  # ceil(31 / 5) = 7, limit 2 + 4
    k = HorizontalPodAutoscaler("keda-queue", "external", "queue_depth", 5.0, 1, 50)
    assert k.decide(obs(0, 4, [1] * 4, queue=21.0)).interactive == 4  # 21 / 20 within tolerance
    assert k.decide(obs(15, 4, [1] * 4, queue=None)).interactive == 4  # unknown holds


def test_kpa_stable_mode_targets_70_percent_of_the_per_pod_target() -> None:
    k = KnativePodAutoscaler(per_pod_target=10, min_replicas=1, max_replicas=100)
    integral = 0.0
    d = None
    for step in range(40):  # 80 s of 14 in flight: ceil(14 / 7) = 2
        integral += 14 * 2.0
        d = k.decide(obs(2.0 * step, 2, [7, 7], integral=integral))
    assert d is not None and d.interactive == 2
    assert "stable" in d.reason


def test_kpa_panics_on_a_burst_and_never_scales_down_while_panicking() -> None:
    k = KnativePodAutoscaler(per_pod_target=10, min_replicas=1, max_replicas=100)
    integral, t = 0.0, 0.0
    for _ in range(40):
        integral += 14 * 2.0
        k.decide(obs(t, 2, [7, 7], integral=integral))
        t += 2.0
    # burst: 80 in flight for 6 s → panic window average ≈ 80 → dppc = ceil(80 / 7) = 12 ≥ 2 × 2
    decisions = []
    for _ in range(3):
        integral += 80 * 2.0
        decisions.append(k.decide(obs(t, 2, [7, 7], integral=integral)))
        t += 2.0
    assert decisions[-1].interactive >= 12 and "panic" in decisions[-1].reason
    peak = decisions[-1].interactive
    # load falls back: still in panic for a stable window, the size holds at its peak
    for _ in range(20):
        integral += 14 * 2.0
        d = k.decide(obs(t, peak, [1] * peak, integral=integral))
        t += 2.0
        assert d.interactive == peak
    for _ in range(40):
        integral += 14 * 2.0
        d = k.decide(obs(t, peak, [1] * peak, integral=integral))
        t += 2.0
    assert "stable" in d.reason and d.interactive < peak


def test_oracle_starts_replicas_one_cold_start_ahead() -> None:
    start = 1_700_000_000.0
    # 10 minutes at 1 req/s then 10 at 10 req/s; 2 req/s per replica
    arrivals = start + np.concatenate([np.arange(0, 600, 1.0), 600 + np.arange(0, 600, 0.1)])
    need = per_minute_need(arrivals, start, start + 1200, capacity_rps=2.0)
    assert need.tolist() == [1] * 10 + [5] * 10
    o = Oracle(need, start, cold_start_s=180, min_replicas=1, max_replicas=10, tick_s=15)
    assert o.desired_at(start) == 1
    assert o.desired_at(start + 600 - 180 - 15 - 1) == 1
    assert o.desired_at(start + 600 - 180 - 15) == 5  # ready by minute 10
    assert o.desired_at(start + 1190) == 5
