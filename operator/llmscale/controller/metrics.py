"""The operator's own Prometheus metrics (prometheus-client), served on ``/metrics`` by
``llmscale run``; docs/operator.md lists them, the chart's dashboard plots them and its
PrometheusRule alerts on them (queries in :mod:`llmscale.signals.monitoring`).

Labels are bounded: ``namespace``, ``name`` and ``pool`` name an LLMDeployment's pool (dropped
when it is deleted), and every other label takes a handful of fixed values. The per-object
families are :class:`ObjectSeries`: one dict of values exported by a custom collector, since a
prometheus-client child costs ~660 bytes a series and an object has up to 71.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Sequence
from typing import Literal

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

__all__ = ["DEPRECATED_ALIASES", "LATENCIES", "SIGNALS", "ObjectSeries", "OperatorMetrics"]

#: Values of the ``signal`` label of the deprecated ``llmscale_signal`` and ``llmscale_signal_target``.
SIGNALS: tuple[str, ...] = ("queue_depth", "kv_cache_utilization", "preemption_rate", "ttft_p95_seconds",
                            "itl_p95_seconds")
#: Values of the ``latency`` label of ``llmscale_slo_target_seconds`` and ``llmscale_signal_latency_p95_seconds``.
LATENCIES: tuple[str, ...] = ("ttft", "itl")
#: Names 0.1.0 exported, still exported beside their successors for one release (removed in 0.3.0):
#: old name (and label selector) -> the new name. The Prometheus naming guide wants one unit per
#: metric, named by a suffix: ``llmscale_signal`` carried requests, a ratio, a rate and seconds.
DEPRECATED_ALIASES: dict[str, str] = {
    'llmscale_signal{signal="queue_depth"}': "llmscale_signal_queue_depth_requests",
    'llmscale_signal{signal="kv_cache_utilization"}': "llmscale_signal_kv_cache_utilization_ratio",
    'llmscale_signal{signal="preemption_rate"}': "llmscale_signal_preemptions_per_second",
    'llmscale_signal{signal="ttft_p95_seconds"}': 'llmscale_signal_latency_p95_seconds{latency="ttft"}',
    'llmscale_signal{signal="itl_p95_seconds"}': 'llmscale_signal_latency_p95_seconds{latency="itl"}',
    'llmscale_signal_target{signal="queue_depth"}': "llmscale_signal_target_queue_depth_requests",
    'llmscale_signal_target{signal="kv_cache_utilization"}': "llmscale_signal_target_kv_cache_utilization_ratio",
    'llmscale_signal_target{signal="preemption_rate"}': "llmscale_signal_target_preemptions_per_second",
    "llmscale_busy_share": "llmscale_busy_ratio",
    "llmscale_kv_cache_utilization_mean": "llmscale_kv_cache_utilization_ratio",
}


class _Child:
    """One series of an :class:`ObjectSeries`, as ``labels()`` returns it (prometheus-client's child API)."""

    __slots__ = ("_family", "_key")

    def __init__(self, family: ObjectSeries, key: tuple[str, ...]) -> None:
        self._family = family
        self._key = key

    def set(self, value: float) -> None:
        """Set the series to ``value`` (a gauge's)."""
        if self._family.kind == "counter":
            raise AttributeError("a counter is only increased")
        with self._family.lock:
            self._family.values[self._key] = float(value)

    def inc(self, amount: float = 1.0) -> None:
        """Add ``amount`` to the series (>= 0 for a counter)."""
        if amount < 0 and self._family.kind == "counter":
            raise ValueError("counters can only be incremented by non-negative amounts")
        with self._family.lock:
            self._family.values[self._key] = self._family.values.get(self._key, 0.0) + amount


class ObjectSeries(Collector):
    """A labelled gauge or counter kept as one dict ``labels -> value``, exported at scrape time
    through prometheus-client's custom-collector API; the part of the client's API the operator
    uses (``labels(...).set/inc``, ``remove``). About 120 bytes a series, against ~660 for a
    client child (a metric object with two locks): ~22 MB less at 1,000 objects. Unlike a client
    child, one kept past ``remove()`` brings its series back when set (no caller keeps one).

    Args:
        kind: ``"gauge"`` or ``"counter"`` (exported with the ``_total`` suffix).
        name: the metric name, without ``_total``.
        documentation: the HELP text.
        labelnames: the label names, in the order ``labels()`` takes their values.
        registry: where to register.
    """

    def __init__(self, kind: Literal["gauge", "counter"], name: str, documentation: str,
                 labelnames: Sequence[str], registry: CollectorRegistry) -> None:
        self.kind = kind
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self.values: dict[tuple[str, ...], float] = {}
        self.lock = threading.Lock()
        registry.register(self)

    def labels(self, *values: object) -> _Child:
        """The series of these label values (created at 0 if new).

        Raises:
            ValueError: not one value per label name.
        """
        if len(values) != len(self.labelnames):
            raise ValueError(f"{self.name} takes {len(self.labelnames)} label values, got {len(values)}")
        key = tuple(str(v) for v in values)
        with self.lock:
            self.values.setdefault(key, 0.0)
        return _Child(self, key)

    def remove(self, *values: object) -> None:
        """Drop the series of these label values.

        Raises:
            KeyError: there is none.
        """
        with self.lock:
            del self.values[tuple(str(v) for v in values)]

    def _family(self) -> GaugeMetricFamily | CounterMetricFamily:
        if self.kind == "counter":
            return CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)
        return GaugeMetricFamily(self.name, self.documentation, labels=self.labelnames)

    def describe(self) -> Iterator[Metric]:
        """The family without samples (the registry checks names with it)."""
        yield self._family()

    def collect(self) -> Iterator[Metric]:
        """The family with every series' value now."""
        family = self._family()
        with self.lock:
            items = list(self.values.items())
        for key, value in items:
            family.add_metric(key, value)
        yield family


class OperatorMetrics:
    """The operator's own Prometheus metrics, on a registry of their own (tests get fresh ones).

    Decisions and scaling:

    - ``llmscale_decisions_total{direction, reason}``: ticks that decided, by direction (``up``,
      ``down``, ``hold``, ``invalid``) and the last clamp that changed the count
      (``Decision.clamped_by``, e.g. ``ScaleUpLimit``, ``ScaleDownStabilized``; ``DesiredWithinRange``
      when none did), or ``InvalidSpec``.
    - ``llmscale_scales_total{namespace, name, pool, direction, reason}``: applied scales, by the
      last clamp that bit (the dashboard's scale events with reasons).
    - ``llmscale_desired_replicas`` / ``llmscale_ready_replicas`` / ``llmscale_starting_replicas`` /
      ``llmscale_headroom_replicas`` / ``llmscale_max_replicas`` ``{namespace, name, pool}``.
    - The newest snapshot of the interactive pool as the policy saw it, one metric per unit
      (absent while unknown), ``{namespace, name}``: ``llmscale_signal_queue_depth_requests``
      (waiting requests, summed over ready replicas), ``llmscale_signal_kv_cache_utilization_ratio``
      (0–1), ``llmscale_signal_preemptions_per_second`` and
      ``llmscale_signal_latency_p95_seconds{latency}`` (``ttft``, ``itl``).
    - The per-replica target of each leading signal (``spec.scaling.targets``; KV cache as derived):
      ``llmscale_signal_target_queue_depth_requests``, ``llmscale_signal_target_kv_cache_utilization_ratio``,
      ``llmscale_signal_target_preemptions_per_second``.
    - ``llmscale_slo_target_seconds{namespace, name, latency}``: ``spec.slo`` (``ttft``, ``itl``).
    - ``llmscale_metrics_available{namespace, name}``: 1 while the MetricsAvailable condition is
      True; ``llmscale_signal_age_seconds{namespace, name}``: the snapshot's age at the tick.

    Headline numbers, per pool (``status.pools``):

    - ``llmscale_slo_minutes_total{namespace, name, pool, result}``: judged minutes, ``met`` or
      ``missed`` — the SLO burn-rate alerts' input, kept by Prometheus across operator restarts.
    - ``llmscale_slo_attainment_ratio{namespace, name, pool, window}``: share of judged minutes
      meeting the SLO, 0–1, ``window`` ``1h`` or ``24h``.
    - ``llmscale_goodput_tokens_per_second`` / ``llmscale_tokens_per_second``: last hour.
    - ``llmscale_gpus``: GPUs held now; ``llmscale_gpu_hours{window}``: ``24h`` or ``total``
      (since creation).
    - ``llmscale_usd_per_million_tokens``: last 24 hours.
    - ``llmscale_busy_ratio`` (share of reporting pods with a running request) /
      ``llmscale_kv_cache_utilization_ratio`` (mean): last hour, 0–1.
    - ``llmscale_cold_start_p90_seconds``: measured, pod creation to Ready.
    - ``llmscale_engine_spec_hash{namespace, name}``: a 48-bit digest of ``spec.engine`` type, image
      and args; it changes when the engine is upgraded (the drift group's upgrade check).

    The operator itself:

    - ``llmscale_signal_read_errors_total{namespace, name}``: failed or timed-out signal reads, one
      per tick that got an incomplete snapshot, and one per read that failed for the object's pool
      while its last good snapshot was carried through it (``llmscale.controller.signals.carry``).
    - ``llmscale_apply_errors_total{kind}``: refused server-side applies.
    - ``llmscale_tick_duration_seconds``: one tick, signal read to status, in seconds.
    - ``llmscale_api_connection_wait_seconds``: how long requests to the API server waited for a
      free connection of the bounded pool (``--api-requests``); only requests that waited.
    - ``llmscale_placeholder_replicas{namespace, name}``: placeholder pods kept for the node
      headroom (``spec.headroom.warmNodes``).

    In ``Advisory`` mode ``llmscale_desired_replicas`` is the advice (nothing is written), so it can
    be compared with what the other autoscaler set (kube-state-metrics'
    ``kube_deployment_spec_replicas``).
    - ``llmscale_last_tick_timestamp_seconds``: when a tick last finished (the not-ticking alert).
    - ``llmscale_status_writes_total``: status patches the ticks asked for.
    - ``llmscale_gpus_free_read_timestamp_seconds``: when the newest successful read of nodes and
      pods for the GPUs free started (0 while none has; :class:`~llmscale.controller.gpusfree.GpuReader`).

    Deprecated, exported beside their successors until 0.3.0 (:data:`DEPRECATED_ALIASES`):
    ``llmscale_signal{signal}``, ``llmscale_signal_target{signal}``, ``llmscale_busy_share``,
    ``llmscale_kv_cache_utilization_mean``. Set them through :meth:`set_signals`,
    :meth:`set_signal_targets` and :meth:`set_usage`, which write both.
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        pool = ["namespace", "name", "pool"]
        obj = ["namespace", "name"]

        def gauge(name: str, documentation: str, labelnames: Sequence[str]) -> ObjectSeries:
            return ObjectSeries("gauge", name, documentation, labelnames, r)

        def counter(name: str, documentation: str, labelnames: Sequence[str]) -> ObjectSeries:
            return ObjectSeries("counter", name, documentation, labelnames, r)

        self.decisions = Counter(
            "llmscale_decisions", "Scaling decisions by direction and the reason of the last clamp that bit",
            ["direction", "reason"], registry=r,
        )
        self.scales = counter(
            "llmscale_scales", "Applied scales per pool, by direction and the reason of the last clamp that bit",
            [*pool, "direction", "reason"],
        )
        self.placeholders = gauge(
            "llmscale_placeholder_replicas", "Placeholder pods kept for the node headroom, per LLMDeployment", obj,
        )
        self.desired = gauge("llmscale_desired_replicas", "Replicas the operator set, per LLMDeployment pool", pool)
        self.ready = gauge("llmscale_ready_replicas", "Ready replicas, per LLMDeployment pool", pool)
        self.starting = gauge("llmscale_starting_replicas", "Replicas in their cold start, per pool", pool)
        self.headroom = gauge("llmscale_headroom_replicas", "Warm replicas above demand in the desired count", pool)
        self.max_replicas = gauge("llmscale_max_replicas", "spec.replicas.max (interactive) or the batch pool's most",
                                  pool)
        self.queue_depth = gauge("llmscale_signal_queue_depth_requests",
                                 "Requests waiting in the interactive pool's engines, as the policy saw them", obj)
        self.kv_cache = gauge("llmscale_signal_kv_cache_utilization_ratio",
                              "Mean KV-cache utilisation of the interactive pool's ready replicas, 0-1", obj)
        self.preemptions = gauge("llmscale_signal_preemptions_per_second",
                                 "Preemptions per second in the interactive pool", obj)
        self.latency_p95 = gauge("llmscale_signal_latency_p95_seconds",
                                 "p95 TTFT and ITL of the interactive pool as the policy saw them, seconds",
                                 [*obj, "latency"])
        self.target_queue_depth = gauge("llmscale_signal_target_queue_depth_requests",
                                        "spec.scaling.targets.queueDepthPerReplica: waiting requests per replica", obj)
        self.target_kv_cache = gauge("llmscale_signal_target_kv_cache_utilization_ratio",
                                     "KV-cache utilisation target (set, or derived), 0-1", obj)
        self.target_preemptions = gauge("llmscale_signal_target_preemptions_per_second",
                                        "spec.scaling.targets.preemptionsPerSecondPerReplica", obj)
        self.signal = gauge("llmscale_signal", "Deprecated (removed in 0.3.0): the llmscale_signal_* metrics",
                            [*obj, "signal"])
        self.signal_target = gauge("llmscale_signal_target",
                                   "Deprecated (removed in 0.3.0): the llmscale_signal_target_* metrics",
                                   [*obj, "signal"])
        self.slo_target = gauge("llmscale_slo_target_seconds", "spec.slo: p95 TTFT and ITL targets, seconds",
                                [*obj, "latency"])
        self.metrics_available = gauge("llmscale_metrics_available", "1 while MetricsAvailable is True", obj)
        self.signal_age = gauge("llmscale_signal_age_seconds", "Age of the newest signal sample at the tick, seconds",
                                obj)
        self.slo_minutes = counter("llmscale_slo_minutes", "Judged minutes of a pool, met or missed the SLO",
                                   [*pool, "result"])
        self.slo_attainment = gauge("llmscale_slo_attainment_ratio", "Share of judged minutes meeting the SLO, 0-1",
                                    [*pool, "window"])
        self.goodput = gauge("llmscale_goodput_tokens_per_second",
                             "Tokens/s generated in minutes that met the SLO, last hour", pool)
        self.tokens = gauge("llmscale_tokens_per_second", "Tokens/s generated, last hour", pool)
        self.gpus = gauge("llmscale_gpus", "GPUs held by the pool's pods now", pool)
        self.gpu_hours = gauge("llmscale_gpu_hours", "GPU-hours held by the pool's pods (24h or total)",
                               [*pool, "window"])
        self.usd_per_mtok = gauge("llmscale_usd_per_million_tokens", "USD of GPU time per million tokens, last 24 h",
                                  pool)
        self.busy = gauge("llmscale_busy_ratio", "Share of reporting pods with a running request, last hour, 0-1",
                          pool)
        self.kv_mean = gauge("llmscale_kv_cache_utilization_ratio", "Mean KV-cache utilisation, last hour, 0-1", pool)
        self.busy_share = gauge("llmscale_busy_share", "Deprecated (removed in 0.3.0): llmscale_busy_ratio", pool)
        self.kv_mean_deprecated = gauge("llmscale_kv_cache_utilization_mean",
                                        "Deprecated (removed in 0.3.0): llmscale_kv_cache_utilization_ratio", pool)
        self.cold_start = gauge("llmscale_cold_start_p90_seconds", "Measured cold start, P90 of recent starts", pool)
        self.signal_errors = counter("llmscale_signal_read_errors", "Signal reads that failed or timed out", obj)
        self.apply_errors = Counter(
            "llmscale_apply_errors", "Server-side applies refused by the API server", ["kind"], registry=r,
        )
        # Buckets: a tick is a lookup of the fleet reader's snapshot (~1 ms) and at most two
        # applies; 10 s is the default signal timeout a tick may wait for a read.
        self.tick_duration = Histogram(
            "llmscale_tick_duration_seconds", "Duration of one tick (read, decide, apply, status)",
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
            registry=r,
        )
        # Buckets around Kopf's peering keep-alive margin (5-10 s before a peer's lifetime ends).
        self.api_connection_wait = Histogram(
            "llmscale_api_connection_wait_seconds",
            "Time a request to the API server waited for a free connection of the bounded pool",
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0), registry=r,
        )
        self.engine_spec = gauge(
            "llmscale_engine_spec_hash", "Digest of spec.engine type, image and args (changes on an engine upgrade)",
            obj,
        )
        self.last_tick = Gauge("llmscale_last_tick_timestamp_seconds", "When a tick last finished", registry=r)
        self.status_writes = Counter("llmscale_status_writes", "Status patches the ticks asked for", registry=r)
        self.gpus_read = Gauge("llmscale_gpus_free_read_timestamp_seconds",
                               "When the newest successful read of nodes and pods for the GPUs free started",
                               registry=r)

    def set_signals(self, namespace: str, name: str, *, queue_depth: float | None, kv_cache_utilization: float | None,
                    preemption_rate: float | None, ttft_p95_s: float | None, itl_p95_s: float | None) -> None:
        """Export the interactive pool's snapshot (``None``: unknown, the series is dropped), under the
        unit-suffixed names and the deprecated ``llmscale_signal{signal}``."""
        obj = (namespace, name)
        for gauge, labels, old, value in (
            (self.queue_depth, obj, "queue_depth", queue_depth),
            (self.kv_cache, obj, "kv_cache_utilization", kv_cache_utilization),
            (self.preemptions, obj, "preemption_rate", preemption_rate),
            (self.latency_p95, (*obj, "ttft"), "ttft_p95_seconds", ttft_p95_s),
            (self.latency_p95, (*obj, "itl"), "itl_p95_seconds", itl_p95_s),
        ):
            _set(gauge, labels, value)
            _set(self.signal, (*obj, old), value)

    def set_signal_targets(self, namespace: str, name: str, *, queue_depth: float, kv_cache_utilization: float,
                           preemption_rate: float) -> None:
        """Export the per-replica targets of the leading signals (and the deprecated ``llmscale_signal_target``)."""
        obj = (namespace, name)
        for gauge, old, value in ((self.target_queue_depth, "queue_depth", queue_depth),
                                  (self.target_kv_cache, "kv_cache_utilization", kv_cache_utilization),
                                  (self.target_preemptions, "preemption_rate", preemption_rate)):
            gauge.labels(*obj).set(value)
            self.signal_target.labels(*obj, old).set(value)

    def set_usage(self, labels: tuple[str, str, str], *, busy: float | None, kv_cache_mean: float | None) -> None:
        """Export a pool's last-hour busy and KV-cache ratios (and their deprecated names)."""
        for gauge, value in ((self.busy, busy), (self.busy_share, busy), (self.kv_mean, kv_cache_mean),
                             (self.kv_mean_deprecated, kv_cache_mean)):
            _set(gauge, labels, value)

    def forget(self, namespace: str, name: str) -> None:
        """Drop every per-object series of a deleted LLMDeployment."""
        for family in (self.desired, self.ready, self.starting, self.headroom, self.max_replicas, self.signal,
                       self.signal_target, self.queue_depth, self.kv_cache, self.preemptions, self.latency_p95,
                       self.target_queue_depth, self.target_kv_cache, self.target_preemptions,
                       self.slo_target, self.metrics_available, self.signal_age,
                       self.slo_minutes, self.slo_attainment, self.goodput, self.tokens, self.gpus, self.gpu_hours,
                       self.usd_per_mtok, self.busy, self.kv_mean, self.busy_share, self.kv_mean_deprecated,
                       self.cold_start, self.signal_errors, self.scales, self.placeholders, self.engine_spec):
            _drop(family, namespace, name)


def _set(gauge: ObjectSeries, labels: tuple[str, ...], value: float | None) -> None:
    """Set a labelled gauge, or drop its series while the value is unknown."""
    if value is None:
        with contextlib.suppress(KeyError):
            gauge.remove(*labels)
    else:
        gauge.labels(*labels).set(value)


def _drop(family: ObjectSeries, namespace: str, name: str) -> None:
    """Remove every series of ``family`` whose first two labels are ``namespace`` and ``name``."""
    with family.lock:
        for key in [k for k in family.values if k[:2] == (namespace, name)]:
            del family.values[key]

