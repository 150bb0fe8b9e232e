"""The autoscalers llmscale is compared with, each a faithful rendering of the real algorithm and its
defaults, plus llmscale's own policy behind the same interface.

- ``llmscale`` — :func:`llmscale.policy.decide`, the operator's code, on the operator's tick with
  the same :class:`~llmscale.signals.SignalSnapshot` history and memory carried between ticks.
- ``static-peak`` — a fixed size: the oracle's largest per-minute need over the whole run (the
  replicas the peak minute needs at the calibrated capacity), all day.
- ``hpa`` — the Kubernetes HorizontalPodAutoscaler (``pkg/controller/podautoscaler/horizontal.go``
  and ``replica_calculator.go``, autoscaling/v2 defaults) on the Pods metric
  ``vllm:num_requests_running`` with an AverageValue target.
- ``keda-queue`` — KEDA's Prometheus scaler on ``sum(vllm:num_requests_waiting)`` with threshold 5,
  as vLLM's production-stack ships it; KEDA hands the HPA an External AverageValue metric and the
  HPA's default behaviour applies.
- ``keda-llmd`` — KEDA as llm-d's autoscaling guides recommend it: scale on the pool's queued
  *and* running requests (``inference_extension_flow_control_queue_size`` and
  ``inference_objective_running_requests`` of llm-d's endpoint picker; without the gateway, the
  engines' ``vllm:num_requests_waiting + vllm:num_requests_running``, plus requests held at the
  router) against a per-replica AverageValue. As an External metric,
  ``desired = ceil(total / target)`` counts replicas still starting as capacity already asked for
  (they are discounted, not requested again).
- ``kpa`` — Knative's KPA (``pkg/autoscaler/scaling/autoscaler.go``) on in-flight concurrency with
  the stable (60 s) and panic (6 s, 200 %) windows.
- ``aibrix-kv`` — AIBrix's PodAutoscaler with its KPA strategy on ``gpu_cache_usage_perc`` (the
  KV-cache fraction; ``samples/autoscaling/kpa.yaml`` targets 0.5 per pod):
  ``pkg/controller/podautoscaler/algorithm/kpa.go`` over the pods' summed metric averaged on a 60 s
  stable and a 10 s panic window, AIBrix's defaults (panic at 200 %, at most ×2 up and ÷2 down per
  step, 300 s scale-down cooldown).
- ``oracle`` — clairvoyant: knows every future minute's arrivals and starts replicas exactly one
  cold start before they are needed; the physical lower bound for this trace and SLO.

Each baseline takes one *setting* — its target, the number a platform engineer tunes. The default
settings of hpa, kpa and keda-llmd come from the same calibration that sizes the oracle and
static-peak (:mod:`llmscale.sim.calibrate`: the running / in-flight requests one replica holds at
the highest rate that still meets the SLO); keda-queue's default is production-stack's 5 and
aibrix-kv's AIBrix's sample 0.5. The benchmark sweeps each setting over a grid
(:data:`SETTING_GRID`) and reports each baseline at its cheapest setting that meets the SLO.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import NDArray

from llmscale.api import LLMDeploymentSpec
from llmscale.policy.history import history_seconds, record_snapshot
from llmscale.policy.livefit import LiveRecord, advance, used_fit
from llmscale.policy.types import Decision, PolicyMemory, PoolState
from llmscale.signals.snapshot import SignalSnapshot
from llmscale.sim.fleet import Observation, ScaleDecision

__all__ = [
    "POLICY_NAMES",
    "SETTING_GRID",
    "TUNABLE",
    "AibrixKvAutoscaler",
    "HorizontalPodAutoscaler",
    "KnativePodAutoscaler",
    "LlmscalePolicy",
    "Oracle",
    "StaticReplicas",
    "per_minute_need",
]

#: Every policy ``llmscale simulate --policy`` knows, in report order.
POLICY_NAMES: tuple[str, ...] = (
    "llmscale", "static-peak", "hpa", "keda-queue", "keda-llmd", "kpa", "aibrix-kv", "oracle",
)

#: The baselines with a setting to sweep, and what the setting is.
TUNABLE: dict[str, str] = {
    "hpa": "running requests per pod",
    "keda-queue": "waiting requests per replica",
    "keda-llmd": "running + waiting requests per replica",
    "kpa": "autoscaling.knative.dev/target: in-flight requests per pod (× 0.7 utilisation)",
    "aibrix-kv": "KV-cache fraction per pod",
}

#: The grid each baseline is swept over: ``("capacity", factors)`` multiplies the calibrated
#: per-replica figure (running requests for hpa, in-flight requests for kpa and keda-llmd, KV-cache
#: use for aibrix-kv) by each factor; ``("absolute", values)`` is the setting itself. Each grid
#: includes the baseline's documented default (production-stack's 5 waiting requests, AIBrix's
#: sample 0.5, the calibrated figures) so the sweep can only improve on it.
SETTING_GRID: dict[str, tuple[str, tuple[float, ...]]] = {
    "hpa": ("capacity", (0.7, 0.85, 1.0, 1.2)),
    "keda-queue": ("absolute", (1.0, 2.0, 5.0, 10.0)),
    "keda-llmd": ("capacity", (0.7, 0.85, 1.0, 1.2)),
    "kpa": ("capacity", (0.8, 1.0, 1.2, 1.45)),
    "aibrix-kv": ("capacity", (0.7, 0.85, 1.0, 1.2)),
}


class StaticReplicas:
    """A fixed pool size (``static-peak``): what a capacity plan for the peak buys.

    Args:
        replicas: the size, kept all the time.
        name: policy name in reports.
    """

    tick_s = 60.0

    def __init__(self, replicas: int, name: str = "static-peak") -> None:
        self.replicas = int(replicas)
        self.name = name

    def decide(self, obs: Observation) -> ScaleDecision:
        """Return the fixed size."""
        return ScaleDecision(self.replicas, reason=f"static {self.replicas}")


@dataclass(frozen=True)
class _Rule:
    kind: str  # "Pods" or "Percent"
    value: int
    period_s: float


class HorizontalPodAutoscaler:
    """The Kubernetes HPA, autoscaling/v2, one metric, default behaviour.

    Algorithm (Kubernetes ``pkg/controller/podautoscaler``), every ``sync_period_s`` (15 s, the
    kube-controller-manager ``--horizontal-pod-autoscaler-sync-period`` default):

    1. Replica calculator. *Pods* metric with an AverageValue target (``kind="pods"``):
       ``ratio = Σ metric / (target × pods_with_metrics)``; within ``tolerance`` (0.1) of 1 → keep
       the current count, else ``ceil(ratio × pods_with_metrics)``. Pods without a metric (still in
       their cold start) count as 0 when scaling up and as exactly on target when scaling down,
       and a result that flips direction or lands within tolerance keeps the current count
       (``calcPlainMetricReplicas``). *External* metric with an AverageValue target
       (``kind="external"``, what KEDA creates): ``ratio = value / (target × current)``; outside
       tolerance → ``ceil(value / target)`` (``GetExternalPerPodMetricReplicas``).
    2. Stabilisation (``stabilizeRecommendationWithBehaviors``): the result is the current count
       raised to the lowest recommendation of the scale-up window (0 s) and lowered to the highest
       of the scale-down window (300 s).
    3. Rate limits (``calculateScaleUpLimitWithScalingRules``), default policies: scale up by at
       most ``max(4 pods, 100 %)`` per 15 s, scale down by up to 100 % per 15 s, both relative to
       the replicas at the start of the period; then ``min``/``max`` replicas.

    A missing metric (no scrape yet) keeps the current count, as the HPA does when it cannot fetch
    its metric (``FailedGetPodsMetric``).

    Args:
        name: policy name in reports.
        kind: ``"pods"`` (metric per pod) or ``"external"`` (one value for the whole pool).
        metric: which gauge: ``"running"`` or ``"waiting"`` (per pod), ``"queue_depth"`` or
            ``"running_plus_waiting"`` (pool sums).
        target: the AverageValue target (per pod).
        min_replicas / max_replicas: the HPA's bounds.
    """

    def __init__(
        self,
        name: str,
        kind: str,
        metric: str,
        target: float,
        min_replicas: int,
        max_replicas: int,
        *,
        tolerance: float = 0.1,
        sync_period_s: float = 15.0,
        scale_up_window_s: float = 0.0,
        scale_down_window_s: float = 300.0,
    ) -> None:
        if target <= 0:
            raise ValueError("target must be positive")
        if kind not in ("pods", "external"):
            raise ValueError("kind is pods or external")
        self.name = name
        self.kind = kind
        self.metric = metric
        self.target = float(target)
        self.min_replicas = max(1, int(min_replicas))
        self.max_replicas = int(max_replicas)
        self.tolerance = tolerance
        self.tick_s = sync_period_s
        self.up_window = scale_up_window_s
        self.down_window = scale_down_window_s
        self.up_rules = (_Rule("Pods", 4, 15.0), _Rule("Percent", 100, 15.0))
        self.down_rules = (_Rule("Percent", 100, 15.0),)
        self._recs: deque[tuple[float, int]] = deque()
        self._events: deque[tuple[float, int]] = deque()

    def _calc(self, obs: Observation, current: int) -> int | None:
        tol = self.tolerance
        if self.kind == "external":
            value: float | None
            if self.metric == "running_plus_waiting":
                q, r = obs.snapshot.queue_depth, obs.snapshot.running_requests
                value = None if q is None or r is None else q + r
            else:
                value = getattr(obs.snapshot, self.metric)
            if value is None:
                return None
            ratio = value / (self.target * max(current, 1))
            if abs(1.0 - ratio) <= tol:
                return current
            return math.ceil(float(value) / self.target)
        pods = obs.pods
        if not pods:
            return None
        values = [float(getattr(p, self.metric)) for p in pods][: max(current, 1)]
        n = len(values)
        missing = max(0, current - n)
        ratio = sum(values) / (self.target * n)
        if missing == 0:
            if abs(1.0 - ratio) <= tol:
                return current
            return math.ceil(ratio * n)
        fill = 0.0 if ratio > 1.0 else self.target
        new_ratio = (sum(values) + fill * missing) / (self.target * (n + missing))
        if abs(1.0 - new_ratio) <= tol or (ratio < 1.0 < new_ratio) or (ratio > 1.0 > new_ratio):
            return current
        new = math.ceil(new_ratio * (n + missing))
        if (new_ratio < 1.0 and new > current) or (new_ratio > 1.0 and new < current):
            return current
        return new

    def _limit(self, rules: Sequence[_Rule], current: int, now: float, up: bool) -> int:
        limits = []
        for rule in rules:
            added = sum(d for t, d in self._events if t > now - rule.period_s and d > 0)
            removed = -sum(d for t, d in self._events if t > now - rule.period_s and d < 0)
            start = current - added + removed
            if up:
                limits.append(start + rule.value if rule.kind == "Pods" else math.ceil(start * (1 + rule.value / 100)))
            else:
                limits.append(start - rule.value if rule.kind == "Pods" else int(start * (1 - rule.value / 100)))
        # selectPolicy Max: the policy that allows the largest change.
        return max(limits) if up else min(limits)

    def decide(self, obs: Observation) -> ScaleDecision:
        """One HPA sync: calculator, stabilisation, rate limits, bounds."""
        now = obs.now
        current = obs.state.interactive_replicas
        raw = self._calc(obs, current)
        if raw is None:
            return ScaleDecision(current, reason="metric unavailable: hold")
        self._recs.append((now, raw))
        keep = max(self.up_window, self.down_window)
        while self._recs and self._recs[0][0] < now - keep:
            self._recs.popleft()
        up_rec = min((r for t, r in self._recs if t >= now - self.up_window), default=raw)
        down_rec = max((r for t, r in self._recs if t >= now - self.down_window), default=raw)
        rec = current
        rec = max(rec, up_rec)
        rec = min(rec, down_rec)
        while self._events and self._events[0][0] < now - 60.0:
            self._events.popleft()
        if rec > current:
            rec = min(rec, self._limit(self.up_rules, current, now, up=True))
        elif rec < current:
            rec = max(rec, self._limit(self.down_rules, current, now, up=False))
        rec = min(max(rec, self.min_replicas), self.max_replicas)
        if rec != current:
            self._events.append((now, rec - current))
        return ScaleDecision(rec, reason=f"{self.metric} raw {raw} -> {rec}")


class _KpaCore:
    """The KPA decision shared by Knative and AIBrix (Knative's ``autoscaler.go``, which AIBrix's
    ``algorithm/kpa.go`` follows line by line): desired pods from the stable and panic averages,
    clamped by the scale rates, panic mode that never scales down."""

    def __init__(self, target: float, panic_threshold: float, up_rate: float, down_rate: float,
                 stable_window_s: float) -> None:
        self.target = target
        self.panic_threshold = panic_threshold
        self.up_rate = up_rate
        self.down_rate = down_rate
        self.stable = stable_window_s
        self._panic_time: float | None = None
        self._max_panic_pods = 0

    def desired(self, now: float, stable: float, panic: float, ready: int) -> tuple[int, str]:
        rdy = max(1.0, float(ready))
        max_up = max(1, math.ceil(self.up_rate * rdy))
        max_down = math.floor(rdy / self.down_rate)
        dspc = min(max(math.ceil(stable / self.target), max_down), max_up)
        dppc = min(max(math.ceil(panic / self.target), max_down), max_up)
        if dppc / rdy >= self.panic_threshold:
            self._panic_time = now
        elif self._panic_time is not None and self._panic_time + self.stable < now:
            self._panic_time = None
            self._max_panic_pods = 0
        desired = dspc
        if self._panic_time is not None:
            desired = max(desired, dppc)
            if desired > self._max_panic_pods:
                self._max_panic_pods = desired
            else:
                desired = self._max_panic_pods
        mode = "panic" if self._panic_time is not None else "stable"
        return desired, mode


class KnativePodAutoscaler:
    """Knative Serving's KPA on concurrency (``pkg/autoscaler/scaling/autoscaler.go``, defaults of
    ``config-autoscaler``).

    Every 2 s (the autoscaler's tick): the observed concurrency of the revision (in-flight requests
    summed over pods, averaged over time as the queue-proxies report it) over the stable window
    (60 s) and the panic window (10 % of it, 6 s) gives ``dspc = ceil(stable / target)`` and
    ``dppc = ceil(panic / target)``, each clamped to ``[floor(ready / 2), ceil(1000 × ready)]``
    (max-scale-down-rate 2, max-scale-up-rate 1000). Panic starts when ``dppc / ready ≥ 2``
    (panic-threshold 200 %) and ends a stable window after the last time it held; in panic the
    size never goes down (``max(dspc, dppc)``, ratcheted). Otherwise the result is ``dspc``.
    ``target = per_pod_target × 0.7`` (container-concurrency-target-percentage 70 %).

    Args:
        per_pod_target: the revision's concurrency target per pod (``autoscaling.knative.dev/target``;
            Knative's default 100 is meaningless for an LLM replica, so the caller passes a
            setting derived from the calibrated concurrency one replica sustains within the SLO).
        min_replicas / max_replicas: ``min-scale``/``max-scale`` (min at least 1: no scale to zero).
    """

    name = "kpa"
    tick_s = 2.0

    def __init__(
        self,
        per_pod_target: float,
        min_replicas: int,
        max_replicas: int,
        *,
        utilization: float = 0.7,
        stable_window_s: float = 60.0,
        panic_window_fraction: float = 0.10,
        panic_threshold: float = 2.0,
        max_scale_up_rate: float = 1000.0,
        max_scale_down_rate: float = 2.0,
    ) -> None:
        if per_pod_target <= 0:
            raise ValueError("per_pod_target must be positive")
        self.target = per_pod_target * utilization
        self.min_replicas = max(1, int(min_replicas))
        self.max_replicas = int(max_replicas)
        self.stable = stable_window_s
        self.panic = stable_window_s * panic_window_fraction
        self._core = _KpaCore(self.target, panic_threshold, max_scale_up_rate, max_scale_down_rate,
                              stable_window_s)
        self._hist: deque[tuple[float, float]] = deque()

    def _avg(self, now: float, integral: float, window: float) -> float:
        t0, i0 = self._hist[0]
        for t, i in self._hist:
            if t >= now - window:
                t0, i0 = t, i
                break
        span = now - t0
        return (integral - i0) / span if span > 0 else 0.0

    def decide(self, obs: Observation) -> ScaleDecision:
        """One KPA tick."""
        now = obs.now
        self._hist.append((now, obs.inflight_integral))
        while self._hist and self._hist[0][0] < now - self.stable - self.tick_s:
            self._hist.popleft()
        if len(self._hist) < 2:
            return ScaleDecision(obs.state.interactive_replicas, reason="no data yet")
        stable = self._avg(now, obs.inflight_integral, self.stable)
        panic = self._avg(now, obs.inflight_integral, self.panic)
        desired, mode = self._core.desired(now, stable, panic, obs.state.interactive_ready)
        desired = min(max(desired, self.min_replicas), self.max_replicas)
        return ScaleDecision(desired, reason=f"{mode}: stable {stable:.1f} panic {panic:.1f}")


class AibrixKvAutoscaler:
    """AIBrix's PodAutoscaler, KPA strategy, on the KV-cache fraction (``gpu_cache_usage_perc``).

    AIBrix (``pkg/controller/podautoscaler``) scrapes each Ready pod's metric, records the *sum*
    over pods in a 60 s stable and a 10 s panic window (``metrics/client.go``,
    ``KPAMetricsClient``) and runs Knative's KPA arithmetic on the window averages
    (``algorithm/kpa.go``) with AIBrix's defaults (``context/context.go``): panic threshold 200 %,
    max scale-up rate 2, max scale-down rate 2, and a 300 s scale-down cooldown (the size does not
    fall below the largest recommendation of the last 300 s). Here the metric is the last
    Prometheus scrape of ``vllm:kv_cache_usage_perc`` (the V1 name of the same fraction), sampled
    on each 15 s tick.

    Args:
        per_pod_target: ``targetValue`` — KV-cache fraction per pod, 0–1 (AIBrix's sample: 0.5).
        min_replicas / max_replicas: the PodAutoscaler's bounds.
    """

    name = "aibrix-kv"
    tick_s = 15.0

    def __init__(
        self,
        per_pod_target: float,
        min_replicas: int,
        max_replicas: int,
        *,
        stable_window_s: float = 60.0,
        panic_window_s: float = 10.0,
        panic_threshold: float = 2.0,
        max_scale_up_rate: float = 2.0,
        max_scale_down_rate: float = 2.0,
        scale_down_cooldown_s: float = 300.0,
    ) -> None:
        if per_pod_target <= 0:
            raise ValueError("per_pod_target must be positive")
        self.target = float(per_pod_target)
        self.min_replicas = max(1, int(min_replicas))
        self.max_replicas = int(max_replicas)
        self.stable = stable_window_s
        self.panic = panic_window_s
        self.cooldown = scale_down_cooldown_s
        self._core = _KpaCore(self.target, panic_threshold, max_scale_up_rate, max_scale_down_rate,
                              stable_window_s)
        self._samples: deque[tuple[float, float]] = deque()
        self._recs: deque[tuple[float, int]] = deque()
        self._last_scrape = -math.inf

    def decide(self, obs: Observation) -> ScaleDecision:
        """One tick: sample the pods' summed KV fraction, then the KPA arithmetic."""
        now = obs.now
        current = obs.state.interactive_replicas
        if obs.pods and obs.scrape_time > self._last_scrape:
            self._last_scrape = obs.scrape_time
            self._samples.append((obs.scrape_time, sum(p.kv_cache_utilization for p in obs.pods)))
        while self._samples and self._samples[0][0] <= now - self.stable:
            self._samples.popleft()
        if not self._samples:
            return ScaleDecision(current, reason="metric unavailable: hold")
        stable = sum(v for _, v in self._samples) / len(self._samples)
        recent = [v for t, v in self._samples if t > now - self.panic]
        panic = sum(recent) / len(recent) if recent else self._samples[-1][1]
        desired, mode = self._core.desired(now, stable, panic, obs.state.interactive_ready)
        self._recs.append((now, desired))
        while self._recs and self._recs[0][0] < now - self.cooldown:
            self._recs.popleft()
        if desired < current:
            desired = min(current, max(r for _, r in self._recs))
        desired = min(max(desired, self.min_replicas), self.max_replicas)
        return ScaleDecision(desired, reason=f"{mode}: kv stable {stable:.2f} panic {panic:.2f}")


def per_minute_need(
    arrival_s: NDArray[np.float64],
    start_s: float,
    end_s: float,
    capacity_rps: float,
    fleet_rps: NDArray[np.float64] | None = None,
) -> NDArray[np.int64]:
    """Replicas each minute of ``[start, end)`` needs; shape ``(minutes,)``.

    With a scalar capacity: ``ceil(arrivals in the minute / 60 / capacity_rps)``. With
    ``fleet_rps`` (what ``n`` replicas carry, index ``n``, from
    :func:`llmscale.sim.calibrate.fleet_capacity_rps`): the smallest ``n`` whose fleet carries the
    minute's rate (the largest ``n`` when none does); ``capacity_rps`` is then unused.

    Raises:
        ValueError: ``capacity_rps`` ≤ 0 without ``fleet_rps``.
    """
    minutes = max(1, math.ceil((end_s - start_s) / 60.0))
    counts = np.bincount(((arrival_s - start_s) // 60.0).astype(np.int64).clip(0, minutes - 1), minlength=minutes)
    rate = counts / 60.0
    if fleet_rps is not None:
        need = np.searchsorted(np.asarray(fleet_rps) * (1 + 1e-12), rate, side="left")
        return np.minimum(need, len(fleet_rps) - 1).astype(np.int64)
    if capacity_rps <= 0:
        raise ValueError("capacity_rps must be positive")
    return np.ceil(rate / capacity_rps - 1e-9).astype(np.int64)


class Oracle:
    """The clairvoyant lower bound: knows the arrivals of every future minute.

    The need of minute ``m`` is the replicas that carry that minute's rate within the SLO at the
    calibrated capacity (:func:`per_minute_need`, with the capacity measured at several fleet
    sizes when the scenario has that curve). A replica asked for at
    ``t`` is Ready at ``t + cold_start``, so at every tick the oracle asks for the largest need of
    the minutes in ``[t, t + cold_start + tick]``: replicas start exactly one cold start before
    their minute, and a replica that will be needed again within a cold start is kept rather than
    restarted (a restart costs the same cold start).

    Args:
        need: per-minute needs from :func:`per_minute_need`, starting at ``start_s``.
        start_s: time of minute 0, seconds since the epoch.
        cold_start_s: pod creation to Ready, seconds.
        min_replicas / max_replicas: bounds.
        tick_s: how often it acts, seconds.
    """

    name = "oracle"
    #: The reason every decision gives.
    reason = "clairvoyant"

    def __init__(
        self,
        need: NDArray[np.int64],
        start_s: float,
        cold_start_s: float,
        min_replicas: int,
        max_replicas: int,
        tick_s: float = 15.0,
    ) -> None:
        self.need = need
        self.start_s = start_s
        self.cold_start_s = cold_start_s
        self.min_replicas = max(1, int(min_replicas))
        self.max_replicas = int(max_replicas)
        self.tick_s = tick_s

    def desired_at(self, t: float) -> int:
        """Replicas the oracle asks for at ``t`` (before bounds)."""
        a = int((t - self.start_s) // 60.0)
        b = int((t + self.cold_start_s + self.tick_s - self.start_s) // 60.0)
        a = min(max(a, 0), len(self.need) - 1)
        b = min(max(b, a), len(self.need) - 1)
        return int(self.need[a : b + 1].max())

    def decide(self, obs: Observation) -> ScaleDecision:
        """Return the largest need within the coming cold start."""
        d = min(max(self.desired_at(obs.now), self.min_replicas), self.max_replicas)
        return ScaleDecision(d, reason=self.reason)


class LlmscalePolicy:
    """llmscale's own policy, called exactly as the operator calls it.

    Every ``spec.scaling.tick_seconds`` the newest scrape becomes a
    :class:`~llmscale.signals.SignalSnapshot` recorded in the history by
    :func:`llmscale.policy.history.record_snapshot` (the operator's own rule, kept for
    :func:`~llmscale.policy.history.history_seconds`: one cold start), :func:`llmscale.policy.decide`
    runs with the pool state, and ``Decision.memory`` is carried to the next tick. The judged
    minutes (``Observation.minutes``) go through the live calibration as the operator's shell puts
    them (:func:`llmscale.policy.livefit.advance`), and its fit, once used, is the state's
    ``live_fit``: the simulated engine may differ from the model (``llmscale.sim.skew``), and the
    operator measures its own.

    Args:
        spec: the LLMDeployment spec under test.
    """

    name = "llmscale"

    def __init__(self, spec: LLMDeploymentSpec) -> None:
        self.spec = spec
        self.tick_s = float(spec.scaling.tick_seconds)
        self.keep_s = history_seconds(spec)
        self.history: tuple[SignalSnapshot, ...] = ()
        self.memory = PolicyMemory()
        self.last_reasons: tuple[str, ...] = ()
        self.live: LiveRecord | None = None

    def tick(self, obs: Observation) -> tuple[Decision, PoolState]:
        """Record the snapshot, fold the judged minutes into the live calibration, run
        :func:`llmscale.policy.decide` and carry its memory; return the decision and the pool state
        it was made on (``obs.state`` with the live fit), which the batch step takes too, as in the
        operator's tick (the batch planner sizes from the spec's model: it does not read the fit)."""
        from llmscale.policy import decide

        self.history = record_snapshot(self.history, obs.snapshot, obs.now, self.keep_s)
        # One engine all run: its digest is a constant.
        self.live = advance(self.live, self.spec, 0, obs.minutes, obs.now)
        state = replace(obs.state, live_fit=used_fit(self.live))
        d = decide(self.spec, self.history, state, self.memory, obs.now)
        self.memory = d.memory
        self.last_reasons = d.reasons
        return d, state

    def decide(self, obs: Observation) -> ScaleDecision:
        """:meth:`tick`, as the simulator's :class:`~llmscale.sim.fleet.ScaleDecision`."""
        d, _ = self.tick(obs)
        batch = d.batch_replicas if self.spec.batch is not None else 0
        return ScaleDecision(d.interactive_replicas, batch, reason="; ".join(d.reasons))
