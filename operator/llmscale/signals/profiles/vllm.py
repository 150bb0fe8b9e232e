"""Profile ``vllm``: the metric names of the vLLM V1 engine (vLLM >= 0.8, the default since 0.9).

Source: vLLM ``vllm/v1/metrics/loggers.py`` (``PrometheusStatLogger``), and the vLLM docs page
"Production Metrics". V1 renamed ``vllm:gpu_cache_usage_perc`` to ``vllm:kv_cache_usage_perc``,
``vllm:time_per_output_token_seconds`` to ``vllm:inter_token_latency_seconds`` and
``vllm:gpu_prefix_cache_{queries,hits}_total`` to ``vllm:prefix_cache_{queries,hits}_total``; use
the ``vllm-legacy`` profile for engines that still export the old names. Despite the ``_perc``
suffix the KV-cache gauge is a fraction, 0–1 ("1 means 100 percent usage").

Copies: none. Every series carries ``engine`` (the engine core's index); under data parallelism
(``--data-parallel-size`` > 1) each core has its own scheduler, queue and KV cache, so the cores'
series are *not* copies: queues and rates are summed over them, the KV-cache fraction averaged.
Tensor- and pipeline-parallel workers do not export metrics (only the front-end process does).
Every series is created at start-up, so none is absent on a live engine.
llmscale's mock engine (``llmscale engine``) speaks this profile.
"""

from __future__ import annotations

from llmscale.signals.profiles.base import MetricProfile

__all__ = ["ITL_BUCKETS_S", "PROFILE", "TTFT_BUCKETS_S"]

#: ``vllm:time_to_first_token_seconds`` default bucket upper bounds, seconds (vLLM 0.32
#: ``vllm/v1/metrics/buckets.py`` ``TIME_TO_FIRST_TOKEN_BUCKETS``, unchanged since 0.11; the same
#: as :data:`llmscale.model.vllm_defaults.TTFT_BUCKETS_S`, which a test checks). vLLM's
#: ``custom_histogram_buckets`` overrides them; llmscale does not read an override.
TTFT_BUCKETS_S: tuple[float, ...] = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
    80.0, 160.0, 640.0, 2560.0,
)
#: ``vllm:inter_token_latency_seconds`` default bucket upper bounds, seconds (same source,
#: ``INTER_TOKEN_LATENCY_BUCKETS``).
ITL_BUCKETS_S: tuple[float, ...] = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
)

PROFILE = MetricProfile(
    name="vllm",
    waiting="vllm:num_requests_waiting",
    running="vllm:num_requests_running",
    kv_cache_usage="vllm:kv_cache_usage_perc",
    preemptions_total="vllm:num_preemptions_total",
    ttft_histogram="vllm:time_to_first_token_seconds",
    itl_histogram="vllm:inter_token_latency_seconds",
    source="vllm/v1/metrics/loggers.py (vLLM V1, >= 0.8)",
    copy_labels=(),
    requests_total="vllm:request_success_total",
    prompt_tokens_total="vllm:prompt_tokens_total",
    generation_tokens_total="vllm:generation_tokens_total",
    prompt_tokens_histogram="vllm:request_prompt_tokens",
    generation_tokens_histogram="vllm:request_generation_tokens",
    prefix_cache_hits_total="vllm:prefix_cache_hits_total",
    prefix_cache_queries_total="vllm:prefix_cache_queries_total",
    ttft_buckets_s=TTFT_BUCKETS_S,
    itl_buckets_s=ITL_BUCKETS_S,
    finished_reason_label="finished_reason",
    served_reasons=("stop", "length"),
    failed_reasons=("error",),
    prefill_time_histogram="vllm:request_prefill_time_seconds",
    waiting_by_reason="vllm:num_requests_waiting_by_reason",
    sleep_state="vllm:engine_sleep_state",
)
