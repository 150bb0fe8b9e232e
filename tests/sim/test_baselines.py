"""Baseline autoscalers as scenarios: a fake clock stepped through time, the expected decision at
each step (the HPA's and Knative's own unit-test style)."""

from __future__ import annotations

import numpy as np
import pytest

from llmscale.policy.types import PoolState
from llmscale.signals.snapshot import SignalSnapshot
from llmscale.sim.baselines import (
    AibrixKvAutoscaler,
    HorizontalPodAutoscaler,
    KnativePodAutoscaler,
    Oracle,
    per_minute_need,
)
from llmscale.sim.fleet import Observation, PodSample, ScaleDecision


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


def test_hpa_scale_up_is_limited_to_the_larger_of_4_pods_or_100_percent_per_15_s() -> None:
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


def _kpa_after_a_burst() -> tuple[KnativePodAutoscaler, float, float, ScaleDecision]:
    """A KPA at 14 requests in flight on 2 pods, then a 6 s burst of 80: the autoscaler, the
    integral and time so far, and its last decision."""
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
    return k, integral, t, decisions[-1]


def test_kpa_panics_on_a_burst() -> None:
    _, _, _, last = _kpa_after_a_burst()
    assert last.interactive >= 12 and "panic" in last.reason


def test_kpa_never_scales_down_while_panicking() -> None:
    k, integral, t, last = _kpa_after_a_burst()
    peak = last.interactive
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


def test_keda_llmd_scales_on_running_plus_waiting_per_replica() -> None:
    k = HorizontalPodAutoscaler("keda-llmd", "external", "running_plus_waiting", 20.0, 1, 50)
    snap = SignalSnapshot(observed_at=-5, queue_depth=10.0, running_requests=70.0, replicas_reporting=2)
    o = Observation(0.0, snap, (PodSample(5, 35, 0.1), PodSample(5, 35, 0.1)), PoolState(2, 2, 0), 0.0, -5)
    # (70 + 10) / 20 = 4 replicas; starting pods are already counted in the answer, not added to it
    assert k.decide(o).interactive == 4
    starting = Observation(15.0, snap, o.pods, PoolState(4, 2, 2), 0.0, 10)
    assert k.decide(starting).interactive == 4  # 80 / (20 × 4) = 1.0: hold, no second scale-up
    unknown = SignalSnapshot(observed_at=25, queue_depth=None, running_requests=70.0)
    assert k.decide(Observation(30.0, unknown, (), PoolState(4, 4, 0), 0.0, 25)).interactive == 4


def _kv_obs(now: float, kv: list[float], replicas: int | None = None) -> Observation:
    pods = tuple(PodSample(0, 10, v) for v in kv)
    n = len(kv) if replicas is None else replicas
    return Observation(now, SignalSnapshot(observed_at=now - 5), pods, PoolState(n, len(kv), n - len(kv)), 0.0,
                       now - 5)


def test_aibrix_kv_targets_the_summed_kv_fraction_per_pod() -> None:
    a = AibrixKvAutoscaler(0.5, 1, 50)
    # two pods at 0.9: the sum 1.8 over a 0.5 target asks for ceil(3.6) = 4 pods (≤ 2 × ready)
    d = a.decide(_kv_obs(15.0, [0.9, 0.9]))
    assert d.interactive == 4 and "kv stable 1.80" in d.reason


def _aibrix_on_a_kv_jump() -> ScaleDecision:
    a = AibrixKvAutoscaler(0.1, 1, 50)
    for k in range(5):
        a.decide(_kv_obs(15.0 * k, [0.1, 0.1]))  # on target: 2 pods
    return a.decide(_kv_obs(75.0, [0.9, 0.9]))  # 1.8 / 0.1 = 18 wanted, capped at ceil(2 × 2) = 4


def test_aibrix_kv_panics_on_a_jump() -> None:
    assert "panic" in _aibrix_on_a_kv_jump().reason


def test_aibrix_kv_growth_is_capped_at_twice_the_ready_pods() -> None:
    assert _aibrix_on_a_kv_jump().interactive == 4


def test_aibrix_kv_holds_the_largest_recommendation_for_its_300_s_cooldown() -> None:
    a = AibrixKvAutoscaler(0.5, 1, 50)
    assert a.decide(_kv_obs(0.0, [1.0, 1.0])).interactive == 4
    sizes = [a.decide(_kv_obs(15.0 * k, [0.05] * 4)).interactive for k in range(1, 26)]
    assert all(n == 4 for n in sizes[:19])  # within 300 s of the recommendation of 4
    assert sizes[-1] < 4


def test_the_oracle_sizes_each_minute_from_the_capacity_curve() -> None:
    from llmscale.sim.calibrate import Capacity, fleet_capacity_rps

    def cap(rate: float, n: int) -> Capacity:
        return Capacity(rate, 1.0, 1.0, 0.0, 1.0, n)

    # 1 replica cannot meet the SLO; 2 replicas carry 1 req/s each, 4 carry 2 req/s each
    fleet = fleet_capacity_rps({2: cap(1.0, 2), 4: cap(2.0, 4)}, max_replicas=10)
    assert fleet.tolist()[:6] == [0.0, 0.0, 2.0, 4.5, 8.0, 10.0]  # 3 interpolates 1.5 per replica
    assert np.all(np.diff(fleet) >= 0)
    start = 0.0
    # minutes at 0.5, 3, 8 and 30 req/s
    arrivals = np.concatenate([np.linspace(0, 59.9, 30), 60 + np.linspace(0, 59.9, 180),
                               120 + np.linspace(0, 59.9, 480), 180 + np.linspace(0, 59.9, 1800)])
    need = per_minute_need(arrivals, start, 240.0, 1.0, fleet)
    assert need.tolist() == [2, 3, 4, 10]  # 30 req/s is beyond what 10 carry: the bound
