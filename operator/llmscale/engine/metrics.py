"""The mock engine's ``/metrics``: vLLM V1's Prometheus names, types, labels and histogram buckets.

Names, help texts and buckets follow vLLM's ``vllm/v1/metrics/loggers.py`` (``PrometheusStatLogger``,
vLLM 0.11): every series carries the labels ``model_name`` (the served model name) and ``engine``
(``"0"``: one engine core per server). All latencies are in **engine seconds** (what the modelled
GPU would see), however fast ``--time-scale`` runs the process.

Two name sets:

* ``current`` (default): ``vllm:kv_cache_usage_perc``, ``vllm:inter_token_latency_seconds``,
  ``vllm:prefix_cache_queries_total`` / ``vllm:prefix_cache_hits_total`` — vLLM ≥ 0.11.
* ``legacy``: ``vllm:gpu_cache_usage_perc``, ``vllm:time_per_output_token_seconds``,
  ``vllm:gpu_prefix_cache_queries_total`` / ``vllm:gpu_prefix_cache_hits_total`` — the names vLLM
  used before they were renamed (deprecated in 0.9 and 0.11), still scraped by older dashboards.

Each instance has its own :class:`prometheus_client.CollectorRegistry`, so several engines can live
in one process (tests).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from llmscale.engine.scheduler import FINISH_REASONS, FinishedRequest, StepResult
from llmscale.model.vllm_defaults import ITL_BUCKETS_S, TTFT_BUCKETS_S

__all__ = [
    "E2E_BUCKETS_S",
    "ITERATION_TOKENS_BUCKETS",
    "ITL_BUCKETS_S",
    "SLEEP_STATES",
    "TTFT_BUCKETS_S",
    "WAITING_REASONS",
    "EngineMetrics",
    "MetricNames",
    "build_1_2_5_buckets",
]

MetricNames = Literal["current", "legacy"]
#: ``reason`` values of ``vllm:num_requests_waiting_by_reason`` (vLLM 0.32).
WAITING_REASONS = ("capacity", "deferred")
#: ``sleep_state`` values of ``vllm:engine_sleep_state`` (vLLM 0.32).
SLEEP_STATES = ("awake", "weights_offloaded", "discard_all")

#: Request-latency buckets (e2e, queue, inference, prefill, decode), seconds (vLLM ``loggers.py``).
E2E_BUCKETS_S: tuple[float, ...] = (
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
    960.0,
    1920.0,
    7680.0,
)
#: ``vllm:iteration_tokens_total`` buckets, tokens per step (vLLM's eager-mode list).
ITERATION_TOKENS_BUCKETS: tuple[float, ...] = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)


def build_1_2_5_buckets(max_value: int) -> list[int]:
    """1, 2, 5, 10, 20, 50, … up to ``max_value`` (vLLM's ``build_1_2_5_buckets``), tokens."""
    out: list[int] = []
    scale = 1
    while True:
        for m in (1, 2, 5):
            if m * scale > max_value:
                return out
            out.append(m * scale)
        scale *= 10


class EngineMetrics:
    """Prometheus series of one mock engine, updated once per engine step.

    Args:
        model_name: served model name (the ``model_name`` label).
        max_model_len: context limit, tokens (top of the token-count histograms' buckets).
        cache_info: labels of ``vllm:cache_config_info`` (vLLM's ``CacheConfig.metrics_info``),
            values as strings; ``engine`` is added.
        names: ``current`` or ``legacy`` (see the module docstring).
    """

    def __init__(
        self,
        model_name: str,
        max_model_len: int,
        cache_info: Mapping[str, str],
        names: MetricNames = "current",
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.names = names
        labels = ["model_name", "engine"]
        values = (model_name, "0")
        reg = self.registry
        legacy = names == "legacy"

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(name, doc, labels, registry=reg)

        def counter(name: str, doc: str) -> Counter:
            return Counter(name, doc, labels, registry=reg)

        def hist(name: str, doc: str, buckets: tuple[float, ...] | list[int]) -> Histogram:
            return Histogram(name, doc, labels, buckets=buckets, registry=reg)

        self.running = gauge(
            "vllm:num_requests_running", "Number of requests in model execution batches."
        ).labels(*values)
        self.waiting = gauge(
            "vllm:num_requests_waiting", "Number of requests waiting to be processed."
        ).labels(*values)
        # vLLM 0.32 (v1/metrics/loggers.py): the queue split by why a request waits ("capacity":
        # scheduling capacity; "deferred": LoRA budget, KV transfer, a blocked request), and the
        # sleep state (/sleep offloads or drops the weights). The mock's queue is all capacity, and
        # it never sleeps. docs/signals.md says what llmscale does with them.
        self.waiting_by_reason: dict[str, Any] = {}
        if not legacy:
            by_reason = Gauge("vllm:num_requests_waiting_by_reason", "Number of requests waiting, by reason.",
                              [*labels, "reason"], registry=reg)
            self.waiting_by_reason = {r: by_reason.labels(*values, r) for r in WAITING_REASONS}
            sleep = Gauge("vllm:engine_sleep_state", "Engine sleep state: 1 for the current state, else 0.",
                          [*labels, "sleep_state"], registry=reg)
            for state in SLEEP_STATES:
                sleep.labels(*values, state).set(1 if state == "awake" else 0)
        if legacy:
            self.kv_usage = gauge(
                "vllm:gpu_cache_usage_perc", "GPU KV-cache usage. 1 means 100 percent usage."
            ).labels(*values)
            self.prefix_queries = counter(
                "vllm:gpu_prefix_cache_queries",
                "GPU prefix cache queries, in terms of number of queried tokens.",
            ).labels(*values)
            self.prefix_hits = counter(
                "vllm:gpu_prefix_cache_hits", "GPU prefix cache hits, in terms of number of cached tokens."
            ).labels(*values)
        else:
            self.kv_usage = gauge(
                "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage."
            ).labels(*values)
            self.prefix_queries = counter(
                "vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens."
            ).labels(*values)
            self.prefix_hits = counter(
                "vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens."
            ).labels(*values)

        self.preemptions = counter(
            "vllm:num_preemptions", "Cumulative number of preemption from the engine."
        ).labels(*values)
        self.prompt_tokens = counter("vllm:prompt_tokens", "Number of prefill tokens processed.").labels(
            *values
        )
        self.generation_tokens = counter(
            "vllm:generation_tokens", "Number of generation tokens processed."
        ).labels(*values)
        success = Counter(
            "vllm:request_success",
            "Count of successfully processed requests.",
            [*labels, "finished_reason"],
            registry=reg,
        )
        self.success = {r: success.labels(model_name, "0", r) for r in FINISH_REASONS}

        token_buckets = build_1_2_5_buckets(max_model_len)
        self.req_prompt_tokens = hist(
            "vllm:request_prompt_tokens", "Number of prefill tokens processed.", token_buckets
        ).labels(*values)
        self.req_generation_tokens = hist(
            "vllm:request_generation_tokens", "Number of generation tokens processed.", token_buckets
        ).labels(*values)
        self.req_max_tokens = hist(
            "vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter.", token_buckets
        ).labels(*values)
        self.iteration_tokens = hist(
            "vllm:iteration_tokens_total",
            "Histogram of number of tokens per engine_step.",
            ITERATION_TOKENS_BUCKETS,
        ).labels(*values)

        self.req_tpot: Histogram | None = None
        self.ttft = hist(
            "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", TTFT_BUCKETS_S
        ).labels(*values)
        if legacy:
            self.itl = hist(
                "vllm:time_per_output_token_seconds",
                "Histogram of time per output token in seconds.",
                ITL_BUCKETS_S,
            ).labels(*values)
        else:
            self.itl = hist(
                "vllm:inter_token_latency_seconds",
                "Histogram of inter-token latency in seconds.",
                ITL_BUCKETS_S,
            ).labels(*values)
            self.req_tpot = hist(
                "vllm:request_time_per_output_token_seconds",
                "Histogram of time_per_output_token_seconds per request.",
                ITL_BUCKETS_S,
            ).labels(*values)
        self.e2e = hist(
            "vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", E2E_BUCKETS_S
        ).labels(*values)
        self.queue = hist(
            "vllm:request_queue_time_seconds",
            "Histogram of time spent in WAITING phase for request.",
            E2E_BUCKETS_S,
        ).labels(*values)
        self.inference = hist(
            "vllm:request_inference_time_seconds",
            "Histogram of time spent in RUNNING phase for request.",
            E2E_BUCKETS_S,
        ).labels(*values)
        self.prefill = hist(
            "vllm:request_prefill_time_seconds",
            "Histogram of time spent in PREFILL phase for request.",
            E2E_BUCKETS_S,
        ).labels(*values)
        self.decode = hist(
            "vllm:request_decode_time_seconds",
            "Histogram of time spent in DECODE phase for request.",
            E2E_BUCKETS_S,
        ).labels(*values)

        # Info metrics are a gauge fixed at 1 (vLLM emulates Info this way for multiprocess mode).
        info = {**cache_info, "engine": "0"}
        Gauge(
            "vllm:cache_config_info", "Information of the LLMEngine CacheConfig", list(info), registry=reg
        ).labels(**info).set(1)

    def record_step(self, step: StepResult) -> None:
        """Fold one engine step into the series (gauges after the step, counters, histograms)."""
        self.running.set(step.num_running)
        self._set_waiting(step.num_waiting)
        self.kv_usage.set(step.kv_cache_usage)
        self.prefix_queries.inc(step.prefix_cache_queries)
        self.prefix_hits.inc(0)
        self.preemptions.inc(len(step.preempted))
        self.prompt_tokens.inc(step.new_prompt_tokens)
        self.generation_tokens.inc(len(step.tokens))
        self.iteration_tokens.observe(step.prefill_tokens + step.decode_seqs)
        for t in step.tokens:
            if t.ttft_s is not None:
                self.ttft.observe(t.ttft_s)
            if t.itl_s is not None:
                self.itl.observe(t.itl_s)
        for f in step.finished:
            self.record_finished(f)

    def record_finished(self, f: FinishedRequest) -> None:
        """Count a finished (or aborted) request and observe its request-level latencies."""
        self.success[f.finish_reason].inc()
        self.e2e.observe(f.e2e_s)
        self.queue.observe(f.queue_s)
        self.inference.observe(f.inference_s)
        self.prefill.observe(f.prefill_s)
        self.decode.observe(f.decode_s)
        self.req_prompt_tokens.observe(f.prompt_tokens)
        self.req_generation_tokens.observe(f.output_tokens)
        self.req_max_tokens.observe(f.max_tokens)
        if self.req_tpot is not None and f.output_tokens > 1:
            self.req_tpot.observe(f.decode_s / (f.output_tokens - 1))

    def set_idle_gauges(self, running: int, waiting: int, kv_usage: float) -> None:
        """Set the gauges outside a step (after an abort, or when requests are queued)."""
        self.running.set(running)
        self._set_waiting(waiting)
        self.kv_usage.set(kv_usage)

    def _set_waiting(self, waiting: int) -> None:
        self.waiting.set(waiting)
        if self.waiting_by_reason:
            self.waiting_by_reason["capacity"].set(waiting)

    def exposition(self) -> bytes:
        """The Prometheus text exposition of all series."""
        return generate_latest(self.registry)
