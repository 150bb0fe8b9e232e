"""Put a scenario together and run policies over it: the engine behind ``llmscale simulate`` and
the benchmark.

A :class:`Scenario` is one LLMDeployment spec, one trace, the replica model the spec describes and
the capacity calibrated for it. Every policy runs on the *same* scenario — same requests, same
start (a warm pool sized by the oracle's need of the first minutes), same cluster behaviour — so
the only variable between rows of a report is the policy.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from llmscale.api import LLMDeploymentSpec
from llmscale.model import ReplicaModel
from llmscale.policy.windows import batch_window_open
from llmscale.sim.baselines import (
    POLICY_NAMES,
    HorizontalPodAutoscaler,
    KnativePodAutoscaler,
    LlmscalePolicy,
    Oracle,
    StaticReplicas,
    per_minute_need,
)
from llmscale.sim.calibrate import Capacity, calibrate
from llmscale.sim.fleet import Autoscaler, FleetConfig, SimResult, simulate
from llmscale.sim.replica import EngineConfig
from llmscale.sim.trace import Trace

__all__ = ["KEDA_QUEUE_THRESHOLD", "Scenario", "build_autoscaler", "compare", "run_policy"]

#: Waiting requests per replica at which KEDA's Prometheus trigger scales (``threshold: '5'`` on
#: ``vllm:num_requests_waiting`` in vLLM production-stack's KEDA autoscaling tutorial).
KEDA_QUEUE_THRESHOLD = 5.0


@dataclass
class Scenario:
    """Everything a run needs besides the policy.

    Attributes:
        spec: the LLMDeployment spec (SLO, bounds, cold start, cost, batch windows).
        trace: the requests.
        model: the replica's performance model (``ReplicaModel.from_spec(spec)``).
        engine: scheduler limits of each replica.
        capacity: the calibrated per-replica capacity at the SLO.
        warmup_s: excluded from the figures, seconds.
    """

    spec: LLMDeploymentSpec
    trace: Trace
    model: ReplicaModel
    engine: EngineConfig
    capacity: Capacity
    warmup_s: float

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
    ) -> Scenario:
        """Build the model from ``spec`` and calibrate its capacity on ``calibration_trace``
        (``capacity`` skips the calibration; ``capacity_rps`` fixes the rate and measures only the
        concurrency at it)."""
        model = ReplicaModel.from_spec(spec)
        engine = engine or EngineConfig()
        if capacity is None:
            capacity = calibrate(
                calibration_trace,
                model,
                spec.slo,
                engine=engine,
                context_limit_tokens=spec.model.context_limit_tokens,
                seed=seed,
                rate_rps=capacity_rps,
            )
        return cls(spec, trace, model, engine, capacity, warmup_s)

    def need(self) -> np.ndarray:
        """Per-minute replica need of the interactive load at the calibrated capacity."""
        t = self.trace
        inter = t.arrival_s[~t.is_batch]
        return per_minute_need(inter, t.start_s, t.end_s, self.capacity.rate_rps)

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
        """The cluster behaviour for a run starting with ``initial`` Ready replicas."""
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
        )


def build_autoscaler(name: str, sc: Scenario) -> Autoscaler:
    """Return the policy ``name`` (one of :data:`POLICY_NAMES`) set up for ``sc``.

    Raises:
        ValueError: an unknown name.
    """
    r = sc.spec.replicas
    cap = sc.capacity
    if name == "llmscale":
        return LlmscalePolicy(sc.spec)
    if name == "static-peak":
        return StaticReplicas(sc.peak_replicas())
    if name == "hpa":
        # Target: the running requests one replica holds at its SLO capacity.
        return HorizontalPodAutoscaler("hpa", "pods", "running", max(cap.running, 1.0), r.min, r.max)
    if name == "keda-queue":
        return HorizontalPodAutoscaler(
            "keda-queue", "external", "queue_depth", KEDA_QUEUE_THRESHOLD, r.min, r.max
        )
    if name == "kpa":
        return KnativePodAutoscaler(max(cap.concurrency, 1.0), r.min, r.max)
    if name == "oracle":
        return sc.oracle()
    raise ValueError(f"Unknown policy {name!r}; known: {', '.join(POLICY_NAMES)}")


def run_policy(name: str, sc: Scenario, progress: Callable[[float], None] | None = None) -> SimResult:
    """Run one policy over the scenario; the result's ``wall_s`` is the run's wall-clock time."""
    auto = build_autoscaler(name, sc)
    initial = auto.replicas if isinstance(auto, StaticReplicas) else sc.oracle().desired_at(sc.trace.start_s)
    t0 = time.perf_counter()
    res = simulate(
        sc.trace,
        auto,
        sc.model,
        engine=sc.engine,
        fleet=sc.fleet_config(initial),
        context_limit_tokens=sc.spec.model.context_limit_tokens,
        progress=progress,
    )
    res.wall_s = time.perf_counter() - t0
    return res


def compare(
    sc: Scenario,
    names: list[str],
    progress: Callable[[str, float], None] | None = None,
) -> list[tuple[dict[str, object], dict[str, np.ndarray]]]:
    """Run each policy in ``names`` over ``sc``; return ``(summary, minute series)`` per policy.

    ``progress(policy, simulated_time_s)`` is called now and then during each run.
    """
    from llmscale.sim.report import minute_series, summarize

    out: list[tuple[dict[str, object], dict[str, np.ndarray]]] = []
    for name in names:
        cb = (lambda t, _n=name: progress(_n, t)) if progress is not None else None
        res = run_policy(name, sc, cb)
        summary = summarize(res, sc.spec.slo, sc.spec.cost.gpu_hour_usd, sc.warmup_s)
        out.append((summary, minute_series(res, sc.spec.slo)))
    return out
