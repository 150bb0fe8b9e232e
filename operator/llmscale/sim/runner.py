"""Put a scenario together and run policies over it: the engine behind ``llmscale simulate`` and
the benchmark.

A :class:`Scenario` is one LLMDeployment spec, one trace, the replica model the spec describes and
the capacity calibrated for it. Every policy runs on the *same* scenario — same requests, same
start (a warm pool sized by the oracle's need of the first minutes), same cluster behaviour — so
the only variable between rows of a report is the policy.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from llmscale.api import LLMDeploymentSpec
from llmscale.model import ReplicaModel
from llmscale.policy.windows import batch_window_open
from llmscale.sim.baselines import (
    POLICY_NAMES,
    SETTING_GRID,
    TUNABLE,
    AibrixKvAutoscaler,
    HorizontalPodAutoscaler,
    KnativePodAutoscaler,
    LlmscalePolicy,
    Oracle,
    StaticReplicas,
    per_minute_need,
)
from llmscale.sim.calibrate import Capacity, calibrate, calibrate_sizes, fleet_capacity_rps
from llmscale.sim.engine_args import engine_config
from llmscale.sim.fleet import Autoscaler, FleetConfig, SimResult, simulate
from llmscale.sim.replica import EngineConfig
from llmscale.sim.trace import Trace

__all__ = [
    "AIBRIX_KV_TARGET",
    "KEDA_QUEUE_THRESHOLD",
    "Scenario",
    "build_autoscaler",
    "compare",
    "default_setting",
    "run_policy",
    "sweep_settings",
]

#: Waiting requests per replica at which KEDA's Prometheus trigger scales (``threshold: '5'`` on
#: ``vllm:num_requests_waiting`` in vLLM production-stack's KEDA autoscaling tutorial).
KEDA_QUEUE_THRESHOLD = 5.0

#: KV-cache fraction per pod AIBrix's sample PodAutoscaler targets (``targetValue: '0.5'`` on
#: ``gpu_cache_usage_perc``, ``samples/autoscaling/kpa.yaml``).
AIBRIX_KV_TARGET = 0.5


@dataclass
class Scenario:
    """Everything a run needs besides the policy.

    Attributes:
        spec: the LLMDeployment spec (SLO, bounds, cold start, cost, batch windows).
        trace: the requests.
        model: the replica's performance model (``ReplicaModel.from_spec(spec)``).
        engine: scheduler limits of each replica.
        capacity: the calibrated per-replica capacity at the SLO (four replicas; the baselines'
            settings are derived from it).
        warmup_s: excluded from the figures, seconds.
        capacity_curve: the capacity at several fleet sizes (``{replicas: Capacity}``,
            :func:`~llmscale.sim.calibrate.calibrate_sizes`); when present, the oracle and
            static-peak are sized with it rather than with ``capacity`` alone.
    """

    spec: LLMDeploymentSpec
    trace: Trace
    model: ReplicaModel
    engine: EngineConfig
    capacity: Capacity
    warmup_s: float
    capacity_curve: dict[int, Capacity] | None = None

    @classmethod
    def build(
        cls,
        spec: LLMDeploymentSpec,
        trace: Trace,
        calibration_trace: Trace,
        *,
        warmup_s: float = 600.0,
        engine: EngineConfig | None = None,
        seed: int = 0,
        capacity: Capacity | None = None,
        capacity_rps: float | None = None,
        capacity_curve: dict[int, Capacity] | None = None,
    ) -> Scenario:
        """Build the model from ``spec`` and calibrate its capacity on ``calibration_trace``
        (``capacity`` skips the calibration; ``capacity_rps`` fixes the rate and measures only the
        concurrency at it; ``capacity_curve`` gives the curve measured elsewhere). Without any of
        them the capacity is measured at each of
        :data:`~llmscale.sim.calibrate.CURVE_SIZES` and ``capacity`` is the four-replica one.
        ``engine`` defaults to the limits ``spec.engine.args`` sets
        (:func:`llmscale.sim.engine_args.engine_config`).

        Raises:
            ValueError: bad ``spec.engine.args``, or the calibration finds no capacity.
        """
        model = ReplicaModel.from_spec(spec)
        engine = engine or engine_config(spec)
        if capacity_curve is not None and capacity is None:
            capacity = capacity_curve.get(4) or capacity_curve[max(capacity_curve)]
        if capacity is None and capacity_rps is not None:
            capacity = calibrate(
                calibration_trace,
                model,
                spec.slo,
                engine=engine,
                context_limit_tokens=spec.model.context_limit_tokens,
                seed=seed,
                rate_rps=capacity_rps,
            )
        if capacity is None:
            capacity_curve = calibrate_sizes(
                calibration_trace,
                model,
                spec.slo,
                engine=engine,
                context_limit_tokens=spec.model.context_limit_tokens,
                seed=seed,
            )
            capacity = capacity_curve.get(4) or capacity_curve[max(capacity_curve)]
        return cls(spec, trace, model, engine, capacity, warmup_s, capacity_curve)

    def need(self) -> np.ndarray:
        """Per-minute replica need of the interactive load at the calibrated capacity (the curve
        when there is one)."""
        t = self.trace
        inter = t.arrival_s[~t.is_batch]
        fleet = None
        if self.capacity_curve:
            fleet = fleet_capacity_rps(self.capacity_curve, self.spec.replicas.max)
        return per_minute_need(inter, t.start_s, t.end_s, self.capacity.rate_rps, fleet)

    def oracle(self) -> Oracle:
        """The clairvoyant policy for this scenario."""
        r = self.spec.replicas
        return Oracle(
            self.need(), self.trace.start_s, self.spec.headroom.cold_start_seconds, r.min, r.max,
            tick_s=float(self.spec.scaling.tick_seconds),
        )

    def peak_replicas(self) -> int:
        """static-peak's size: the largest per-minute need, within ``spec.replicas``."""
        r = self.spec.replicas
        return int(min(max(int(self.need().max()), r.min, 1), r.max))

    def fleet_config(self, initial: int) -> FleetConfig:
        """The cluster behaviour for a run starting with ``initial`` Ready replicas (held at least
        that large for the first half of the warm-up, see :class:`FleetConfig`)."""
        spec = self.spec
        schedule: Callable[[float], int] | None = None
        if spec.batch is not None:
            batch = spec.batch

            def schedule(t: float) -> int:
                return batch.replicas if batch_window_open(batch.windows, t) is not None else 0

        return FleetConfig(
            cold_start_s=spec.headroom.cold_start_seconds,
            initial_replicas=initial,
            min_replicas=spec.replicas.min,
            max_replicas=spec.replicas.max,
            gpus_per_replica=spec.resources.gpus_per_replica,
            batch_schedule=schedule,
            hold_initial_s=self.warmup_s / 2,
        )


def default_setting(name: str, cap: Capacity) -> float | None:
    """The setting ``name`` runs with unless told otherwise (``None`` for a policy without one):
    the calibrated running requests (hpa) and in-flight requests (kpa, keda-llmd) per replica,
    production-stack's 5 waiting requests (keda-queue), AIBrix's sample KV-cache fraction 0.5
    (aibrix-kv)."""
    return {
        "hpa": max(cap.running, 1.0),
        "keda-queue": KEDA_QUEUE_THRESHOLD,
        "keda-llmd": max(cap.concurrency, 1.0),
        "kpa": max(cap.concurrency, 1.0),
        "aibrix-kv": AIBRIX_KV_TARGET,
    }.get(name)


def sweep_settings(
    name: str, cap: Capacity, grid: tuple[str, tuple[float, ...]] | None = None
) -> list[float]:
    """The settings the benchmark tries for ``name``: ``grid`` (default
    :data:`~llmscale.sim.baselines.SETTING_GRID`'s for ``name``) with ``"capacity"`` factors scaled
    by the calibrated capacity ``cap``, plus the default setting; ascending, ``[]`` for a policy
    without a setting."""
    if name not in SETTING_GRID:
        return []
    kind, values = grid or SETTING_GRID[name]
    base = {
        "hpa": cap.running,
        "keda-llmd": cap.concurrency,
        "kpa": cap.concurrency,
        "aibrix-kv": cap.kv_cache_utilization,
    }.get(name, 1.0)
    out = {round(v * base if kind == "capacity" else v, 4) for v in values}
    default = default_setting(name, cap)
    if default is not None:
        out.add(round(default, 4))
    return sorted(v for v in out if v > 0)


def build_autoscaler(name: str, sc: Scenario, setting: float | None = None) -> Autoscaler:
    """Return the policy ``name`` (one of :data:`POLICY_NAMES`) set up for ``sc``.

    Args:
        name: the policy.
        sc: the scenario.
        setting: the baseline's target (see :data:`~llmscale.sim.baselines.TUNABLE`); ``None`` =
            :func:`default_setting`. Ignored by llmscale, static-peak and oracle.

    Raises:
        ValueError: an unknown name, or a setting that is not positive.
    """
    r = sc.spec.replicas
    if name == "llmscale":
        return LlmscalePolicy(sc.spec)
    if name == "static-peak":
        return StaticReplicas(sc.peak_replicas())
    if name == "oracle":
        return sc.oracle()
    if name not in TUNABLE:
        raise ValueError(f"Unknown policy {name!r}; known: {', '.join(POLICY_NAMES)}")
    value = default_setting(name, sc.capacity) if setting is None else float(setting)
    assert value is not None
    if value <= 0:
        raise ValueError(f"The {name} setting must be positive, got {value}")
    if name == "hpa":
        return HorizontalPodAutoscaler("hpa", "pods", "running", value, r.min, r.max)
    if name == "keda-queue":
        return HorizontalPodAutoscaler("keda-queue", "external", "queue_depth", value, r.min, r.max)
    if name == "keda-llmd":
        return HorizontalPodAutoscaler("keda-llmd", "external", "running_plus_waiting", value, r.min, r.max)
    if name == "kpa":
        return KnativePodAutoscaler(value, r.min, r.max)
    return AibrixKvAutoscaler(value, r.min, r.max)


def run_policy(
    name: str,
    sc: Scenario,
    progress: Callable[[float], None] | None = None,
    setting: float | None = None,
) -> SimResult:
    """Run one policy over the scenario; the result's ``wall_s`` is the run's wall-clock time."""
    return run_autoscaler(build_autoscaler(name, sc, setting), sc, progress)


def run_autoscaler(auto: Autoscaler, sc: Scenario, progress: Callable[[float], None] | None = None) -> SimResult:
    """Run the autoscaler ``auto`` over the scenario (a built-in policy or the user's own,
    :mod:`llmscale.sim.manifests`), starting at the oracle's size for the first moment."""
    initial = auto.replicas if isinstance(auto, StaticReplicas) else sc.oracle().desired_at(sc.trace.start_s)
    t0 = time.perf_counter()
    res = simulate(
        sc.trace,
        auto,
        sc.model,
        engine=sc.engine,
        fleet=sc.fleet_config(initial),
        context_limit_tokens=sc.spec.model.context_limit_tokens,
        itl_slo_s=sc.spec.slo.itl_p95_seconds,
        progress=progress,
    )
    res.wall_s = time.perf_counter() - t0
    return res


def compare(
    sc: Scenario,
    names: list[str],
    progress: Callable[[str, float], None] | None = None,
    settings: Mapping[str, float] | None = None,
    custom: Sequence[Autoscaler] = (),
) -> list[tuple[dict[str, object], dict[str, np.ndarray]]]:
    """Run each policy in ``names`` over ``sc`` (a baseline at ``settings[name]`` where given, else
    its default setting), then each autoscaler of ``custom`` (the user's own); return ``(summary,
    minute series)`` per run.

    ``progress(policy, simulated_time_s)`` is called now and then during each run.
    """
    from llmscale.sim.report import minute_series, summarize

    given = dict(settings or {})
    runs: list[Autoscaler] = [build_autoscaler(name, sc, given.get(name)) for name in names]
    out: list[tuple[dict[str, object], dict[str, np.ndarray]]] = []
    for auto in [*runs, *custom]:
        cb = (lambda t, _n=auto.name: progress(_n, t)) if progress is not None else None
        res = run_autoscaler(auto, sc, cb)
        summary = summarize(res, sc.spec.slo, sc.spec.cost.gpu_hour_usd, sc.warmup_s)
        out.append((summary, minute_series(res, sc.spec.slo)))
    return out
