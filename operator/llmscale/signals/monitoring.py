"""PromQL of the Grafana dashboard and the PrometheusRule alerts the chart ships. Pure (strings).

The dashboard reads the operator's own metrics (``llmscale.controller.metrics``: labels
``namespace``, ``name``, ``pool``) and the engines' latency histograms (labels of
:class:`~llmscale.signals.queries.SelectorLabels`); its variables are ``$namespace`` and ``$name``
(an LLMDeployment) and Grafana's ``$__rate_interval`` and ``$__range``. ``tools/monitoring.py``
turns :func:`dashboard_panels` into the dashboard JSON with Grafana's foundation SDK and
:func:`alert_groups` into the rules file; both are generated files, checked by tests.

The alerts and their thresholds (each with a ``runbook_url`` into docs/runbooks.md):

- **SLO burn rate**, multi-window and multi-burn-rate (Google SRE workbook, "Alerting on SLOs",
  table 5-8): the objective is :data:`SLO_OBJECTIVE` (99 % of minutes meet both p95s, a 1 %
  error budget a month); the error ratio is missed over judged minutes
  (``llmscale_slo_minutes_total``). Page at 14.4× over 1 h and 5 min (2 % of the month's budget
  spent in an hour), page at 6× over 6 h and 30 min (5 % in 6 h), ticket at 3× over 24 h and 2 h.
- **Stuck at max while the queue grows**: the pool at ``spec.replicas.max`` for 10 minutes while
  the queue depth's slope over them is positive.
- **Metrics missing or stale**: ``MetricsAvailable=False`` for 5 minutes; the newest sample older
  than 5 minutes.
- **Preemption storm**: preemptions per ready replica above 5× the target for 5 minutes.
- **Prefill interference**: ITL p95 above the SLO for 10 minutes while the KV cache is under its
  target and the queue per replica under its target — the signature of prompt chunks stretching
  decode steps, not of a short pool.
- **Operator not ticking**: no tick for 5 minutes from an operator that has LLMDeployments (the
  newest tick of the last 10 minutes, so that a scrape target gone stale still counts), or no
  operator metrics at all for 10 minutes.
- the earlier three: signal reads failing, applies refused, a pool not ready for 20 minutes.
- **Drift**, week over week (:mod:`llmscale.signals.drift`): prefix-cache hit rate, preemptions per
  request, utilisation, $/M tokens at constant traffic, capacity per replica after an engine change.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from llmscale.signals.drift import drift_group
from llmscale.signals.profiles.base import MetricProfile
from llmscale.signals.queries import DEFAULT_LABELS, SelectorLabels

__all__ = [
    "BURN_RATES",
    "RUNBOOK_URL",
    "SLO_OBJECTIVE",
    "Panel",
    "Target",
    "alert_groups",
    "dashboard_panels",
    "fleet_panels",
]

#: Where each alert's runbook lives; the anchor is the alert's name in lower case.
RUNBOOK_URL = "https://github.com/llmscale/llmscale/blob/main/docs/runbooks.md"
#: The SLO objective the burn-rate alerts hold: the share of minutes meeting both p95s.
SLO_OBJECTIVE = 0.99
#: ``(long window, short window, burn rate, severity)`` (SRE workbook, table 5-8).
BURN_RATES: tuple[tuple[str, str, float, str], ...] = (
    ("1h", "5m", 14.4, "critical"),
    ("6h", "30m", 6.0, "critical"),
    ("24h", "2h", 3.0, "warning"),
)


@dataclass(frozen=True, slots=True)
class Target:
    """One query of a panel: the PromQL and its legend (Grafana's ``{{label}}`` format)."""

    expr: str
    legend: str


@dataclass(frozen=True, slots=True)
class Panel:
    """One time-series panel: title, what it shows, its unit (Grafana's unit id) and its queries."""

    title: str
    description: str
    unit: str
    targets: tuple[Target, ...]
    kind: str = "timeseries"
    extra: dict[str, Any] = field(default_factory=dict)


def _obj(pool: str | None = None, **more: str) -> str:
    """Matchers of the operator's series of the chosen LLMDeployment (and pool)."""
    parts = ['namespace="$namespace"', 'name="$name"']
    if pool is not None:
        parts.append(f'pool="{pool}"')
    parts += [f'{k}="{v}"' for k, v in more.items()]
    return ", ".join(parts)


def dashboard_panels(profile: MetricProfile, labels: SelectorLabels = DEFAULT_LABELS) -> list[Panel]:
    """Return the panels of the per-LLMDeployment dashboard, in order.

    Args:
        profile: the engine profile whose latency histograms the TTFT and ITL panels read.
        labels: the label names of the engines' series.
    """
    engine = (f'{labels.namespace}="$namespace", {labels.deployment}="$name", {labels.pool}="interactive"')

    def p95(hist: str) -> str:
        native = f"histogram_quantile(0.95, sum(rate({hist}{{{engine}}}[$__rate_interval])))"
        classic = f"histogram_quantile(0.95, sum by (le) (rate({hist}_bucket{{{engine}}}[$__rate_interval])))"
        return f"{native} or {classic}"

    ready = f'clamp_min(llmscale_ready_replicas{{{_obj("interactive")}}}, 1)'

    def per_replica(metric: str) -> str:
        return f'{metric}{{{_obj()}}} / on (namespace, name) {ready}'

    return [
        Panel("Demand and replicas", "Replicas the operator set, Ready, in their cold start, the warm headroom "
              "above demand, and the batch pool.", "short", (
                  Target(f'llmscale_desired_replicas{{{_obj("interactive")}}}', "desired"),
                  Target(f'llmscale_ready_replicas{{{_obj("interactive")}}}', "ready"),
                  Target(f'llmscale_starting_replicas{{{_obj("interactive")}}}', "starting"),
                  Target(f'llmscale_headroom_replicas{{{_obj("interactive")}}}', "headroom"),
                  Target(f'llmscale_desired_replicas{{{_obj("interactive")}}} - on (namespace, name, pool) '
                         f'llmscale_headroom_replicas{{{_obj("interactive")}}}', "demand"),
                  Target(f'llmscale_desired_replicas{{{_obj("batch")}}}', "batch"),
              )),
        Panel("Queue depth per ready replica", "Requests waiting per Ready replica against "
              "spec.scaling.targets.queueDepthPerReplica.", "short", (
                  Target(per_replica("llmscale_signal_queue_depth_requests"), "queue per replica"),
                  Target(f'llmscale_signal_target_queue_depth_requests{{{_obj()}}}', "target"),
              )),
        Panel("KV-cache utilisation", "Mean KV-cache use of the Ready replicas against its target (set, or "
              "derived from the performance model and the ITL SLO).", "percentunit", (
                  Target(f'llmscale_signal_kv_cache_utilization_ratio{{{_obj()}}}', "KV cache"),
                  Target(f'llmscale_signal_target_kv_cache_utilization_ratio{{{_obj()}}}', "target"),
              )),
        Panel("Preemptions per ready replica", "Preemptions per second per Ready replica against "
              "spec.scaling.targets.preemptionsPerSecondPerReplica.", "ops", (
                  Target(per_replica("llmscale_signal_preemptions_per_second"), "preemptions/s per replica"),
                  Target(f'llmscale_signal_target_preemptions_per_second{{{_obj()}}}', "target"),
              )),
        Panel("TTFT p95 against the SLO", "Time to first token at p95 from the engines' histogram.", "s", (
            Target(p95(profile.ttft_histogram), "TTFT p95"),
            Target(f'llmscale_slo_target_seconds{{{_obj(latency="ttft")}}}', "SLO"),
        )),
        Panel("ITL p95 against the SLO", "Inter-token latency at p95 (one sample per output token).", "s", (
            Target(p95(profile.itl_histogram), "ITL p95"),
            Target(f'llmscale_slo_target_seconds{{{_obj(latency="itl")}}}', "SLO"),
        )),
        Panel("SLO attainment", "Share of judged minutes meeting both p95s, last hour and last 24 hours.",
              "percentunit", (
                  Target(f'llmscale_slo_attainment_ratio{{{_obj("interactive")}}}', "{{window}}"),
              )),
        Panel("Goodput", "Tokens per second generated in minutes that met the SLO, and all tokens, last hour.",
              "short", (
                  Target(f'llmscale_goodput_tokens_per_second{{{_obj("interactive")}}}', "goodput tokens/s"),
                  Target(f'llmscale_tokens_per_second{{{_obj()}}}', "{{pool}} tokens/s"),
              )),
        Panel("GPU-hours", "GPU-hours held by each pool's pods: last 24 hours and since creation; GPUs now.",
              "short", (
                  Target(f'llmscale_gpu_hours{{{_obj()}}}', "{{pool}} {{window}}"),
                  Target(f'llmscale_gpus{{{_obj()}}}', "{{pool}} GPUs now"),
              )),
        Panel("Cost per million tokens", "USD of GPU time (spec.cost.gpuHourUsd) per million tokens generated, "
              "last 24 hours.", "currencyUSD", (
                  Target(f'llmscale_usd_per_million_tokens{{{_obj()}}}', "{{pool}}"),
              )),
        Panel("Utilisation", "Share of reporting pods with a running request, and their mean KV-cache use, "
              "last hour.", "percentunit", (
                  Target(f'llmscale_busy_ratio{{{_obj()}}}', "{{pool}} busy"),
                  Target(f'llmscale_kv_cache_utilization_ratio{{{_obj()}}}', "{{pool}} KV mean"),
              )),
        Panel("Measured cold start", "Pod creation to Ready, P90 of the recent starts.", "s", (
            Target(f'llmscale_cold_start_p90_seconds{{{_obj()}}}', "{{pool}} P90"),
        )),
        Panel("Scale events", "Applied scales in the dashboard's time range, by pool, direction and the "
              "reason (the last clamp that bit).", "short", (
                  Target(f'sum by (pool, direction, reason) (increase(llmscale_scales_total{{{_obj()}}}[$__range]))',
                         "{{pool}} {{direction}} {{reason}}"),
              ), kind="table"),
    ]


def fleet_panels() -> list[Panel]:
    """Return the panels of the fleet dashboard: every LLMDeployment side by side (issue 23).

    Grafana's ``$__range`` and ``$__range_s`` are the dashboard's time range; GPU-hours over it are
    the mean GPUs held times its hours. ``llmscale report`` (docs/report.md) gives the same figures
    with the managed-API comparison and the consolidation candidates.
    """
    by = "sum by (namespace, name)"
    who = "{{namespace}}/{{name}}"
    return [
        Panel("GPUs held", "GPUs held by each LLMDeployment's pods (both pools): the fleet's bill.",
              "short", (Target(f"{by} (llmscale_gpus)", who),)),
        Panel("Busy share", "Share of each deployment's pods with a running request (last hour), weighted by "
              "its pools' GPUs; the fleet's in bold.", "percentunit", (
                  Target(f"{by} (llmscale_busy_ratio * on (namespace, name, pool) llmscale_gpus)\n"
                         f"/ {by} (llmscale_gpus > 0)", who),
                  Target("sum(llmscale_busy_ratio * on (namespace, name, pool) llmscale_gpus) / sum(llmscale_gpus > 0)",
                         "fleet"),
              )),
        Panel("KV-cache use", "Mean KV-cache use of each deployment's interactive pool, last hour.", "percentunit", (
            Target('llmscale_kv_cache_utilization_ratio{pool="interactive"}', who),
        )),
        Panel("Cost per million tokens", "USD of GPU time per million tokens generated, last 24 hours, per pool.",
              "currencyUSD", (Target("llmscale_usd_per_million_tokens", "{{namespace}}/{{name}} {{pool}}"),)),
        Panel("Goodput per GPU", "Tokens/s generated in minutes that met the SLO, per GPU held (last hour).",
              "short", (
                  Target(f'{by} (llmscale_goodput_tokens_per_second{{pool="interactive"}})\n'
                         f'/ {by} (llmscale_gpus{{pool="interactive"}} > 0)', who),
              )),
        Panel("The fleet over the range", "Per deployment over the dashboard's range: GPU-hours (mean GPUs × "
              "hours), mean busy share, mean $/M tokens.", "short", (
                  Target(f"{by} (avg_over_time(llmscale_gpus[$__range])) * $__range_s / 3600", "GPU-hours"),
                  Target('avg_over_time(llmscale_busy_ratio{pool="interactive"}[$__range])', "busy share"),
                  Target('avg_over_time(llmscale_usd_per_million_tokens{pool="interactive"}[$__range])',
                         "$/M tokens"),
              ), kind="table"),
    ]


def _runbook(alert: str) -> str:
    return f"{RUNBOOK_URL}#{alert.lower()}"


def _alert(name: str, expr: str, for_: str, severity: str, summary: str, description: str) -> dict[str, Any]:
    return {
        "alert": name,
        "expr": expr,
        "for": for_,
        "labels": {"severity": severity},
        "annotations": {"summary": summary, "description": description, "runbook_url": _runbook(name)},
    }


_WHO = "LLMDeployment {{ $labels.namespace }}/{{ $labels.name }}"


def _error_ratio(window: str) -> str:
    missed = f'sum by (namespace, name) (increase(llmscale_slo_minutes_total{{pool="interactive", result="missed"}}[{window}]))'
    judged = f'sum by (namespace, name) (increase(llmscale_slo_minutes_total{{pool="interactive"}}[{window}]))'
    return f"({missed} / {judged})"


def alert_groups() -> list[dict[str, Any]]:
    """Return the rule groups of the PrometheusRule (Prometheus rule-file format, ``groups``)."""
    budget = 1.0 - SLO_OBJECTIVE
    burn = []
    for long, short, rate, severity in BURN_RATES:
        threshold = f"{rate * budget:.4g}"
        burn.append(_alert(
            f"LLMScaleSLOBurnRate{long}",
            f"{_error_ratio(long)} > {threshold}\nand\n{_error_ratio(short)} > {threshold}",
            "2m" if short == "5m" else "5m" if short == "30m" else "15m",
            severity,
            f"{_WHO} burns its SLO error budget {rate:g}× too fast ({long} and {short} windows)",
            f"More than {rate * budget:.1%} of the minutes of the last {long} (and of the last {short}) missed "
            f"the latency SLO; the objective is {SLO_OBJECTIVE:.0%} of minutes meeting both p95s. At this rate "
            f"the month's error budget is gone in {30 / rate:.1f} days.",
        ))
    ready = 'clamp_min(llmscale_ready_replicas{pool="interactive"}, 1)'

    def per_replica(metric: str) -> str:
        return f'({metric} / on (namespace, name) {ready})'
    scaling = [
        _alert(
            "LLMScaleStuckAtMax",
            'llmscale_desired_replicas{pool="interactive"} >= on (namespace, name, pool) llmscale_max_replicas\n'
            'and on (namespace, name)\n(deriv(llmscale_signal_queue_depth_requests[10m]) > 0)\n'
            'and on (namespace, name)\n(llmscale_signal_queue_depth_requests > 0)',
            "10m", "warning",
            f"{_WHO} is at spec.replicas.max while its queue grows",
            "The pool has been at its maximum for 10 minutes and requests keep piling up: the SLO will be "
            "missed until max is raised or load shed.",
        ),
        _alert(
            "LLMScaleMetricsMissing",
            "llmscale_metrics_available == 0",
            "5m", "warning",
            f"{_WHO} scales on no signals (MetricsAvailable=False)",
            "The operator holds replicas while its signals are unknown: it neither scales up into load nor "
            "down after it.",
        ),
        _alert(
            "LLMScaleMetricsStale",
            "llmscale_signal_age_seconds > 300",
            "5m", "warning",
            f"The newest engine sample of {_WHO} is older than 5 minutes",
            "Prometheus stopped scraping the engines, or returns old samples: decisions wait on fresh data.",
        ),
        _alert(
            "LLMScalePreemptionStorm",
            per_replica("llmscale_signal_preemptions_per_second")
            + " > on (namespace, name) 5 * llmscale_signal_target_preemptions_per_second",
            "5m", "warning",
            f"{_WHO} preempts requests at over 5× its target per replica",
            "The KV cache runs out and the engines recompute evicted requests, which wastes GPU time and "
            "stretches latency.",
        ),
        _alert(
            "LLMScalePrefillInterference",
            'llmscale_signal_latency_p95_seconds{latency="itl"}\n'
            '  > on (namespace, name) llmscale_slo_target_seconds{latency="itl"}\n'
            "and on (namespace, name)\nllmscale_signal_kv_cache_utilization_ratio < on (namespace, name) "
            "llmscale_signal_target_kv_cache_utilization_ratio\n"
            "and on (namespace, name)\n" + per_replica("llmscale_signal_queue_depth_requests")
            + " < on (namespace, name) llmscale_signal_target_queue_depth_requests",
            "10m", "warning",
            f"ITL p95 of {_WHO} is over its SLO while the KV cache and the queue are low",
            "Adding replicas will not help much: prompt chunks share decode steps and stretch every token's gap.",
        ),
        _alert(
            "LLMScalePoolNotReady",
            "(llmscale_desired_replicas - llmscale_ready_replicas) > 0",
            "20m", "warning",
            f"{_WHO} pool {{{{ $labels.pool }}}} has had fewer ready replicas than desired for longer than a cold start",
            "Longer than a GPU cold start (the chart's prometheusRule.notReadyFor, 20m by default): pods are "
            "probably unschedulable (no free GPUs) or failing.",
        ),
    ]
    operator = [
        _alert(
            "LLMScaleOperatorNotTicking",
            "(time() - max(max_over_time(llmscale_last_tick_timestamp_seconds[10m]) > 0) > 300)\n"
            "and on ()\n(count(last_over_time(llmscale_desired_replicas[10m])) > 0)\n"
            "or\nabsent_over_time(llmscale_last_tick_timestamp_seconds[10m])",
            "1m", "critical",
            "The llmscale operator has not ticked for 5 minutes",
            "No LLMDeployment is being scaled: the operator is down, wedged, not scraped, or lost its peering.",
        ),
        _alert(
            "LLMScaleSignalReadsFailing",
            "sum by (namespace, name) (rate(llmscale_signal_read_errors_total[5m])) > 0",
            "10m", "warning",
            f"llmscale cannot read the signals of {_WHO}",
            "Signal reads (Prometheus queries) have failed for 10 minutes; unknown signals hold replicas.",
        ),
        _alert(
            "LLMScaleApplyRefused",
            "sum by (kind) (rate(llmscale_apply_errors_total[5m])) > 0",
            "10m", "warning",
            "The API server refuses llmscale's server-side applies of {{ $labels.kind }} objects",
            "Refused applies mean llmscale cannot create or scale engine Deployments.",
        ),
    ]
    return [
        {"name": "llmscale.slo", "rules": burn},
        {"name": "llmscale.scaling", "rules": scaling},
        {"name": "llmscale.operator", "rules": operator},
        drift_group(RUNBOOK_URL),
    ]
