"""The shape of an engine metric profile: which Prometheus metric carries which signal.

Pure module: names only, no PromQL and no I/O (the queries are built in
:mod:`llmscale.signals.queries`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields

__all__ = ["MetricProfile"]

_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


@dataclass(frozen=True, slots=True)
class MetricProfile:
    """The metric names one inference engine exposes for llmscale's signals.

    Every name is the metric as Prometheus stores it (after the engine's own prefix, before any
    ``_bucket``/``_sum``/``_count`` suffix for histograms). A name of ``None`` means the engine does
    not export that signal at all; the reader then reports it as unknown (``None``, with the reason
    in ``SignalSnapshot.unknown``), never as zero.

    A *counter* that is missing on a pod that does export ``waiting`` is read as 0 for that pod:
    engines create some counters at their first event (SGLang's retraction counter appears at the
    first retraction), so absence on a live, scraped engine means "never happened".

    Attributes:
        name: the profile's name as used in ``spec.engine.metricsProfile`` (``vllm``, ...).
        waiting: gauge of requests waiting in the engine's queue (requests). Also the pod's
            presence anchor: a pod that exports it is *reporting*.
        running: gauge of requests in the running batch (requests).
        kv_cache_usage: gauge of the fraction of the paged KV cache in use (0–1).
        preemptions_total: counter of preempted (or retracted) requests (requests).
        ttft_histogram: histogram of time to first token (seconds), classic or native.
        itl_histogram: histogram of inter-token latency (seconds), classic or native.
        source: where the names come from (engine source file and version), for the docs.
        copy_labels: labels whose values tell apart *copies* of one series inside one pod (tensor-
            or pipeline-parallel ranks that each export the same scheduler gauge). Series that
            differ only by these labels are collapsed with ``max`` before anything is summed, so
            each pod counts once. Labels that tell apart *independent* schedulers (vLLM's
            ``engine`` under data parallelism, SGLang's ``dp_rank``) are not copies: they are summed.
        requests_total: counter of finished requests (requests); its rate is the request rate.
        prompt_tokens_total: counter of prompt (prefill) tokens (tokens).
        generation_tokens_total: counter of generated (decode) tokens (tokens); also the
            progress counter of the stall check.
        prompt_tokens_histogram: histogram of prompt tokens per request (tokens).
        generation_tokens_histogram: histogram of generated tokens per request (tokens).
        prefix_cache_hits_total: counter of prompt tokens served from the prefix cache (tokens).
        prefix_cache_queries_total: counter of prompt tokens looked up in the prefix cache (tokens).
        prefix_cache_hit_rate: gauge of the prefix-cache hit rate (0–1), read only where the two
            counters are absent (older engines).
        ttft_buckets_s / itl_buckets_s: the engine's default finite bucket upper bounds of the TTFT
            and ITL histograms, ascending, seconds; an SLO target inside a bucket is judged
            conservatively (:mod:`llmscale.signals.buckets`). ``None``: not known (plain comparison).
        finished_reason_label: the label of ``requests_total`` saying how a request finished
            (vLLM's ``finished_reason``); ``None``: not labelled (a pod failing every request is
            then not told from a serving one).
        served_reasons / failed_reasons: its values for a request answered (``stop``, ``length``)
            and for one that failed in the engine (``error``: always an HTTP 500).
        waiting_by_reason: gauge of waiting requests by ``reason`` (``capacity``: no KV blocks or
            batch slot; ``deferred``: held back by a transient constraint such as a LoRA budget or a
            KV transfer). Where a pod exports it, the queue signal counts its ``capacity`` waits
            only (a replica fixes those, not deferred ones); elsewhere ``waiting``.
        sleep_state: gauge labelled ``sleep_state`` (``awake``, ``weights_offloaded``,
            ``discard_all``), 1 for the engine's current state. A pod whose engine sleeps is neither
            idle capacity nor a failure: it is left out of the pool's aggregates and replicas
            (``SignalSnapshot.sleeping_pods``), never judged stalled or failed.
        prefill_time_histogram: histogram of each request's prefill time (seconds), read once a
            minute for the live calibration (:mod:`llmscale.policy.livefit`); not a leading signal,
            so its absence is not reported per pod.
    """

    name: str
    waiting: str
    running: str
    kv_cache_usage: str
    preemptions_total: str | None
    ttft_histogram: str
    itl_histogram: str
    source: str
    copy_labels: tuple[str, ...] = ()
    requests_total: str | None = None
    prompt_tokens_total: str | None = None
    generation_tokens_total: str | None = None
    prompt_tokens_histogram: str | None = None
    generation_tokens_histogram: str | None = None
    prefix_cache_hits_total: str | None = None
    prefix_cache_queries_total: str | None = None
    prefix_cache_hit_rate: str | None = None
    ttft_buckets_s: tuple[float, ...] | None = None
    itl_buckets_s: tuple[float, ...] | None = None
    finished_reason_label: str | None = None
    served_reasons: tuple[str, ...] = ()
    failed_reasons: tuple[str, ...] = ()
    prefill_time_histogram: str | None = None
    waiting_by_reason: str | None = None
    sleep_state: str | None = None

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in ("name", "source", "copy_labels", "ttft_buckets_s", "itl_buckets_s", "finished_reason_label",
                          "served_reasons", "failed_reasons") or value is None:
                continue
            if not _METRIC_NAME.fullmatch(value):
                raise ValueError(f"profile {self.name}: {f.name} {value!r} is not a Prometheus metric name")
        for label in (*self.copy_labels, *([self.finished_reason_label] if self.finished_reason_label else [])):
            if not _LABEL_NAME.fullmatch(label):
                raise ValueError(f"profile {self.name}: copy label {label!r} is not a Prometheus label name")

    @property
    def counters(self) -> dict[str, str]:
        """The counters this profile reads, by the per-pod signal their rate feeds."""
        names = {
            "preemption_rate": self.preemptions_total,
            "request_rate": self.requests_total,
            "prompt_tokens_rate": self.prompt_tokens_total,
            "generation_tokens_rate": self.generation_tokens_total,
            "prefix_cache_hits_rate": self.prefix_cache_hits_total,
            "prefix_cache_queries_rate": self.prefix_cache_queries_total,
        }
        return {signal: name for signal, name in names.items() if name is not None}

    @property
    def histograms(self) -> dict[str, str]:
        """The histograms this profile reads, by short key (``ttft``, ``itl``, ``prompt``, ``generation``)."""
        names = {
            "ttft": self.ttft_histogram,
            "itl": self.itl_histogram,
            "prompt": self.prompt_tokens_histogram,
            "generation": self.generation_tokens_histogram,
        }
        return {key: name for key, name in names.items() if name is not None}
