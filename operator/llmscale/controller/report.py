"""A tick's headline numbers and metrics: each pool observed (:mod:`llmscale.controller.observe`),
its figures turned into ``status.pools`` and ``status.usageLedger``, and every per-object series
of :class:`~llmscale.controller.metrics.OperatorMetrics` set.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from llmscale.api import LLMDeploymentSpec
from llmscale.controller.indexes import IndexedPod
from llmscale.controller.manifests.names import BATCH, INTERACTIVE, POOLS, Pool
from llmscale.controller.memory import ObjectMemory
from llmscale.controller.metrics import OperatorMetrics
from llmscale.controller.observe import JudgedMinute, PoolObservation, observe_pool, pool_report
from llmscale.controller.state.servicerecord import PoolFigures
from llmscale.policy import kv_cache_target
from llmscale.policy.types import Decision, PoolState
from llmscale.signals.minute import MinuteSample
from llmscale.signals.snapshot import SignalSnapshot

__all__ = ["PoolReports", "observe_pools", "record_metrics"]


@dataclass(frozen=True, slots=True)
class PoolReports:
    """What a tick reports of its pools.

    Attributes:
        figures: per pool observed.
        pools: ``status.pools`` in wire format.
        ledger: ``status.usageLedger`` in wire format.
        minutes: per pool, the minutes folded in at this tick.
    """

    figures: dict[Pool, PoolFigures]
    pools: dict[str, Any]
    ledger: dict[str, Any]
    minutes: dict[Pool, list[JudgedMinute]]


def observe_pools(
    mem: ObjectMemory,
    *,
    spec: LLMDeploymentSpec,
    status: Mapping[str, Any] | None,
    pods: Mapping[Pool, Iterable[IndexedPod]],
    snapshot: SignalSnapshot | None,
    minutes: Mapping[Pool, Iterable[MinuteSample]],
    now: float,
    max_gap_s: float,
) -> PoolReports:
    """Observe the interactive pool, and the batch pool when ``spec.batch`` is set or it has pods.

    Args:
        mem: the object's memory (``mem.pools`` updated in place).
        spec: the spec.
        status: the object's status (``usageLedger`` read back on the first tick of the process).
        pods: live pods per pool (the pod index).
        snapshot: the interactive pool's snapshot this tick.
        minutes: minute samples per pool (the fleet reader's).
        now: seconds since the epoch.
        max_gap_s: longest gap between ticks billed at the current GPU count.
    """
    saved = (status or {}).get("usageLedger") or {}
    figures: dict[Pool, PoolFigures] = {}
    folded: dict[Pool, list[JudgedMinute]] = {}
    for pool in POOLS:
        live = list(pods.get(pool, ()))
        if pool == BATCH and spec.batch is None and not live and pool not in mem.pools:
            continue
        obs = mem.pools.setdefault(pool, PoolObservation())
        figures[pool], _, folded[pool] = observe_pool(
            obs, spec=spec, pods=live, snapshot=snapshot if pool == INTERACTIVE else None,
            minutes=minutes.get(pool, ()), judged=pool == INTERACTIVE,
            saved_ledger=saved.get(pool) if isinstance(saved, Mapping) else None, now=now, max_gap_s=max_gap_s,
        )
    return PoolReports(
        figures=figures,
        pools={pool: pool_report(f, now) for pool, f in figures.items()},
        ledger={pool: mem.pools[pool].ledger.to_dict() for pool in figures},
        minutes=folded,
    )


def _set(gauge: Any, labels: tuple[str, ...], value: float | None) -> None:
    """Set a labelled gauge, or drop its series while the value is unknown."""
    if value is None:
        with contextlib.suppress(KeyError):
            gauge.remove(*labels)
    else:
        gauge.labels(*labels).set(value)


def engine_spec_digest(spec: LLMDeploymentSpec) -> int:
    """A 48-bit digest of ``spec.engine`` type, image and args (exact as a float sample)."""
    engine = spec.engine
    text = json.dumps([engine.type, engine.image, list(engine.args)])
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:6], "big")


def record_metrics(
    metrics: OperatorMetrics,
    *,
    namespace: str,
    name: str,
    spec: LLMDeploymentSpec,
    state: PoolState,
    decision: Decision,
    applied: Mapping[Pool, int],
    snapshot: SignalSnapshot,
    reports: PoolReports,
    now: float,
) -> None:
    """Set every per-object series of ``metrics`` after a tick (see :class:`OperatorMetrics`)."""
    obj = (namespace, name)
    for pool in POOLS:
        labels = (*obj, pool)
        metrics.desired.labels(*labels).set(applied[pool])
    metrics.ready.labels(*obj, INTERACTIVE).set(state.interactive_ready)
    metrics.ready.labels(*obj, BATCH).set(state.batch_ready)
    metrics.starting.labels(*obj, INTERACTIVE).set(state.interactive_starting + state.interactive_unschedulable)
    metrics.headroom.labels(*obj, INTERACTIVE).set(decision.headroom_replicas)
    metrics.max_replicas.labels(*obj, INTERACTIVE).set(spec.replicas.max)
    if spec.batch is not None:
        metrics.max_replicas.labels(*obj, BATCH).set(spec.batch.most_replicas())
    metrics.set_signals(
        namespace, name, queue_depth=snapshot.queue_depth, kv_cache_utilization=snapshot.kv_cache_utilization,
        preemption_rate=snapshot.preemption_rate, ttft_p95_s=snapshot.ttft_p95_s, itl_p95_s=snapshot.itl_p95_s,
    )
    targets = spec.scaling.targets
    metrics.set_signal_targets(
        namespace, name, queue_depth=targets.queue_depth_per_replica,
        kv_cache_utilization=kv_cache_target(spec)[0], preemption_rate=targets.preemptions_per_second_per_replica,
    )
    metrics.slo_target.labels(*obj, "ttft").set(spec.slo.ttft_p95_seconds)
    metrics.slo_target.labels(*obj, "itl").set(spec.slo.itl_p95_seconds)
    metrics.metrics_available.labels(*obj).set(1.0 if decision.metrics_available.status == "True" else 0.0)
    metrics.signal_age.labels(*obj).set(max(0.0, now - snapshot.observed_at))
    metrics.engine_spec.labels(*obj).set(engine_spec_digest(spec))
    for pool, figures in reports.figures.items():
        labels = (*obj, pool)
        for judged in reports.minutes.get(pool, ()):
            if judged.met is not None:
                metrics.slo_minutes.labels(*labels, "met" if judged.met else "missed").inc()
        if pool == INTERACTIVE:  # both results exist from the first tick, so rate() sees a 0
            metrics.slo_minutes.labels(*labels, "met").inc(0)
            metrics.slo_minutes.labels(*labels, "missed").inc(0)
        for window, value in (("1h", figures.slo_attainment_1h_percent), ("24h", figures.slo_attainment_24h_percent)):
            _set(metrics.slo_attainment, (*labels, window), None if value is None else value / 100.0)
        _set(metrics.goodput, labels, figures.goodput_tokens_per_second)
        _set(metrics.tokens, labels, figures.tokens_per_second)
        metrics.gpus.labels(*labels).set(figures.gpus)
        _set(metrics.gpu_hours, (*labels, "24h"), figures.gpu_hours_24h)
        _set(metrics.gpu_hours, (*labels, "total"), figures.gpu_hours_since_creation)
        _set(metrics.usd_per_mtok, labels, figures.usd_per_million_tokens)
        metrics.set_usage(labels, busy=figures.busy_share, kv_cache_mean=figures.kv_cache_utilization_mean)
        _set(metrics.cold_start, labels, figures.cold_start_p90_seconds)
