"""PromQL for llmscale's signals: the only place queries are written.

Pure module (strings only, no I/O). :func:`signal_queries` gives one PromQL expression per signal;
:func:`batched_query` joins them into one expression so a tick costs one HTTP round trip and every
signal is evaluated at the same instant.

How the batch works: each per-signal expression aggregates to at most one series with no labels
(``sum``, ``avg``, ``count``, ``max``, ``histogram_quantile`` over ``sum by (le)``); ``label_replace``
then stamps it with a constant label ``llmscale_signal="<signal>"`` and the expressions are joined
with ``or``. ``or`` keeps every series of its right-hand side whose label set is not already on the
left, and the stamps make every label set distinct, so nothing is dropped. A signal whose metric
has no series is simply absent from the answer (unknown), and one whose value is NaN (e.g.
``histogram_quantile`` over a minute without requests) comes back as ``"NaN"`` (unknown too).
Source: Prometheus docs, "Operators — Logical/set binary operators" and "Functions —
label_replace()".
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from llmscale.signals.profiles.base import MetricProfile

__all__ = [
    "SIGNALS",
    "SIGNAL_LABEL",
    "PoolTarget",
    "SelectorLabels",
    "batched_query",
    "selector",
    "signal_queries",
]

#: The constant label the batched query stamps on each signal's series.
SIGNAL_LABEL = "llmscale_signal"

#: Every signal key in the batched answer, in query order. ``newest_sample_s`` is the newest
#: sample timestamp of the queue-depth metric (freshness); ``evaluated_at_s`` is Prometheus's
#: evaluation time (always present when Prometheus answered).
SIGNALS: tuple[str, ...] = (
    "queue_depth",
    "running_requests",
    "kv_cache_utilization",
    "preemption_rate",
    "ttft_p95_s",
    "itl_p95_s",
    "replicas_reporting",
    "newest_sample_s",
    "evaluated_at_s",
)

_DURATION = re.compile(r"^([0-9]+(ms|s|m|h))+$")


@dataclass(frozen=True, slots=True)
class SelectorLabels:
    """Names of the Prometheus labels that identify an LLMDeployment's pool.

    llmscale puts ``llmscale.dev/deployment`` and ``llmscale.dev/pool`` on every pod (DESIGN.md).
    With Kubernetes service discovery, the usual relabelling
    (``action: labelmap, regex: __meta_kubernetes_pod_label_(.+)``) turns them into
    ``llmscale_dev_deployment`` and ``llmscale_dev_pool`` (Prometheus replaces each character
    that is not ``[a-zA-Z0-9_]`` with ``_``), and ``__meta_kubernetes_namespace`` is commonly
    relabelled to ``namespace``. Those are the defaults; set these fields when your scrape
    configuration names them differently (e.g. the Prometheus Operator's PodMonitor
    ``podTargetLabels`` keeps the same sanitised names).

    Attributes:
        namespace: label carrying the pod's namespace.
        deployment: label carrying the LLMDeployment's name.
        pool: label carrying the pool (``interactive`` or ``batch``).
    """

    namespace: str = "namespace"
    deployment: str = "llmscale_dev_deployment"
    pool: str = "llmscale_dev_pool"


@dataclass(frozen=True, slots=True)
class PoolTarget:
    """One pool of one LLMDeployment: what a snapshot describes.

    Attributes:
        namespace: the LLMDeployment's namespace.
        deployment: the LLMDeployment's name.
        pool: ``interactive`` or ``batch``.
    """

    namespace: str
    deployment: str
    pool: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.deployment} pool {self.pool}"


def _quote(value: str) -> str:
    """Return ``value`` as a PromQL double-quoted string literal (backslash and quote escaped)."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def selector(target: PoolTarget, labels: SelectorLabels = SelectorLabels()) -> str:
    """Return the label matcher block for ``target``, e.g. ``{namespace="ml",...}``."""
    return (
        "{"
        f"{labels.namespace}={_quote(target.namespace)}, "
        f"{labels.deployment}={_quote(target.deployment)}, "
        f"{labels.pool}={_quote(target.pool)}"
        "}"
    )


def signal_queries(
    profile: MetricProfile,
    target: PoolTarget,
    labels: SelectorLabels = SelectorLabels(),
    rate_window: str = "1m",
    quantile: float = 0.95,
) -> dict[str, str]:
    """Return one PromQL expression per signal, keyed as in :data:`SIGNALS`.

    Args:
        profile: the engine's metric names.
        target: the pool to select.
        labels: the selector label names.
        rate_window: range of ``rate()``; keep it at least four scrape intervals (the default
            ``1m`` suits the usual 15 s scrape), so every window holds enough samples.
        quantile: latency quantile, 0–1 (0.95: the SLO is stated at p95).

    A signal the profile does not export (``preemptions_total`` of ``None``) has no entry.
    Replicas are counted by scrape target (``instance``), not by series, because a vLLM pod
    running several engine cores (data parallel) exports one series per core (label ``engine``).

    Raises:
        ValueError: ``rate_window`` is not a PromQL duration or ``quantile`` is outside 0–1.
    """
    if not _DURATION.match(rate_window):
        raise ValueError(f"rate_window {rate_window!r} is not a PromQL duration such as 1m or 30s")
    if not 0.0 <= quantile <= 1.0:
        raise ValueError(f"quantile {quantile} is outside 0-1")
    sel = selector(target, labels)

    def hq(histogram: str) -> str:
        return f"histogram_quantile({quantile}, sum by (le) (rate({histogram}_bucket{sel}[{rate_window}])))"

    queries = {
        "queue_depth": f"sum({profile.waiting}{sel})",
        "running_requests": f"sum({profile.running}{sel})",
        "kv_cache_utilization": f"avg({profile.kv_cache_usage}{sel})",
        # rate() treats any decrease of a counter as a reset (the process restarted) and
        # continues from the new value, so a restarted engine does not read as a negative rate.
        "preemption_rate": (
            f"sum(rate({profile.preemptions_total}{sel}[{rate_window}]))"
            if profile.preemptions_total is not None
            else ""
        ),
        "ttft_p95_s": hq(profile.ttft_histogram),
        "itl_p95_s": hq(profile.itl_histogram),
        "replicas_reporting": f"count(count by (instance) ({profile.waiting}{sel}))",
        # An instant query stamps every answer with the evaluation time, not the scrape time;
        # timestamp() returns the time of the sample itself, which stays old when scraping stops
        # without a staleness marker (up to the 5 min lookback).
        "newest_sample_s": f"max(timestamp({profile.waiting}{sel}))",
        "evaluated_at_s": "vector(time())",
    }
    return {name: q for name, q in queries.items() if q}


def batched_query(
    profile: MetricProfile,
    target: PoolTarget,
    labels: SelectorLabels = SelectorLabels(),
    rate_window: str = "1m",
    quantile: float = 0.95,
) -> str:
    """Return one PromQL expression answering every signal, each series labelled by signal.

    The answer is an instant vector with at most one series per signal, carrying the label
    :data:`SIGNAL_LABEL` set to the signal's key (see :data:`SIGNALS`). Arguments and errors as
    in :func:`signal_queries`.
    """
    parts = [
        f'label_replace({q}, "{SIGNAL_LABEL}", "{name}", "", "")'
        for name, q in signal_queries(profile, target, labels, rate_window, quantile).items()
    ]
    return "\n  or ".join(parts)
