"""The shape of an engine metric profile: which Prometheus metric carries which signal.

Pure module: names only, no PromQL and no I/O (the queries are built in
:mod:`llmscale.signals.queries`).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["MetricProfile"]


@dataclass(frozen=True, slots=True)
class MetricProfile:
    """The metric names one inference engine exposes for llmscale's six signals.

    Every name is the metric as Prometheus stores it (after the engine's own prefix, before any
    ``_bucket``/``_sum``/``_count`` suffix for histograms). A name of ``None`` means the engine does
    not export that signal at all; the reader then reports it as unknown (``None``), never as zero.

    Attributes:
        name: the profile's name as used in ``spec.engine.metricsProfile`` (``vllm``, ...).
        waiting: gauge of requests waiting in the engine's queue, per replica (requests).
        running: gauge of requests in the running batch, per replica (requests).
        kv_cache_usage: gauge of the fraction of the paged KV cache in use, per replica (0–1).
        preemptions_total: counter of preempted (or retracted) requests, per replica (requests);
            the reader takes its ``rate()``, so counter resets are handled by Prometheus.
        ttft_histogram: histogram of time to first token (seconds); ``_bucket`` is appended.
        itl_histogram: histogram of inter-token latency (seconds); ``_bucket`` is appended.
        source: where the names come from (engine source file and version), for the docs.
    """

    name: str
    waiting: str
    running: str
    kv_cache_usage: str
    preemptions_total: str | None
    ttft_histogram: str
    itl_histogram: str
    source: str
