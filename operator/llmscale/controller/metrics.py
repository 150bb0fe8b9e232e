"""The operator's own Prometheus metrics (prometheus-client), served on ``/metrics`` by
``llmscale run``; docs/operator.md lists them and the chart's PrometheusRule alerts on them.
"""

from __future__ import annotations

import contextlib

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from llmscale.controller.names import POOLS

__all__ = ["OperatorMetrics"]


class OperatorMetrics:
    """The operator's own Prometheus metrics, on a registry of their own (tests get fresh ones).

    - ``llmscale_decisions_total{direction, reason}``: ticks that decided, by direction (``up``,
      ``down``, ``hold``, ``invalid``) and the last clamp that changed the count
      (``Decision.clamped_by``, e.g. ``ScaleUpLimit``, ``ScaleDownStabilized``; ``DesiredWithinRange``
      when none did), or ``InvalidSpec``.
    - ``llmscale_desired_replicas{namespace, name, pool}`` / ``llmscale_ready_replicas{...}``.
    - ``llmscale_signal_read_errors_total{namespace, name}``: failed or timed-out signal reads.
    - ``llmscale_apply_errors_total{kind}``: refused server-side applies.
    - ``llmscale_tick_duration_seconds``: one tick, signal read to status, in seconds.
    - ``llmscale_placeholder_replicas{namespace, name}``: placeholder pods kept for the node
      headroom (``spec.headroom.warmNodes``).

    In ``Advisory`` mode ``llmscale_desired_replicas`` is the advice (nothing is written), so it can
    be compared with what the other autoscaler set (kube-state-metrics'
    ``kube_deployment_spec_replicas``).
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.decisions = Counter(
            "llmscale_decisions", "Scaling decisions by direction and the reason of the last clamp that bit",
            ["direction", "reason"], registry=self.registry,
        )
        self.desired = Gauge(
            "llmscale_desired_replicas", "Replicas the operator set, per LLMDeployment pool",
            ["namespace", "name", "pool"], registry=self.registry,
        )
        self.ready = Gauge(
            "llmscale_ready_replicas", "Ready replicas, per LLMDeployment pool",
            ["namespace", "name", "pool"], registry=self.registry,
        )
        self.placeholders = Gauge(
            "llmscale_placeholder_replicas", "Placeholder pods kept for the node headroom, per LLMDeployment",
            ["namespace", "name"], registry=self.registry,
        )
        self.signal_errors = Counter(
            "llmscale_signal_read_errors", "Signal reads that failed or timed out",
            ["namespace", "name"], registry=self.registry,
        )
        self.apply_errors = Counter(
            "llmscale_apply_errors", "Server-side applies refused by the API server",
            ["kind"], registry=self.registry,
        )
        # Buckets: a tick is one Prometheus query (~10-100 ms) and at most two applies; 10 s is
        # the default signal timeout.
        self.tick_duration = Histogram(
            "llmscale_tick_duration_seconds", "Duration of one tick (read, decide, apply, status)",
            buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0), registry=self.registry,
        )

    def forget(self, namespace: str, name: str) -> None:
        """Drop the per-object series of a deleted LLMDeployment."""
        for pool in POOLS:
            for gauge in (self.desired, self.ready):
                with contextlib.suppress(KeyError):
                    gauge.remove(namespace, name, pool)
        for metric in (self.signal_errors, self.placeholders):
            with contextlib.suppress(KeyError):
                metric.remove(namespace, name)
