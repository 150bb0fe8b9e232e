"""Profile ``vllm``: the metric names of the vLLM V1 engine (vLLM >= 0.8, the default since 0.9).

Source: vLLM ``vllm/v1/metrics/loggers.py`` (``PrometheusStatLogger``), and the vLLM docs page
"Production Metrics". V1 renamed ``vllm:gpu_cache_usage_perc`` to ``vllm:kv_cache_usage_perc`` and
``vllm:time_per_output_token_seconds`` to ``vllm:inter_token_latency_seconds``; use the
``vllm-legacy`` profile for engines that still export the old names. Despite the ``_perc`` suffix
the KV-cache gauge is a fraction, 0–1 ("1 means 100 percent usage").
llmscale's mock engine (``llmscale engine``) speaks this profile.
"""

from __future__ import annotations

from llmscale.signals.profiles.base import MetricProfile

__all__ = ["PROFILE"]

PROFILE = MetricProfile(
    name="vllm",
    waiting="vllm:num_requests_waiting",
    running="vllm:num_requests_running",
    kv_cache_usage="vllm:kv_cache_usage_perc",
    preemptions_total="vllm:num_preemptions_total",
    ttft_histogram="vllm:time_to_first_token_seconds",
    itl_histogram="vllm:inter_token_latency_seconds",
    source="vllm/v1/metrics/loggers.py (vLLM V1, >= 0.8)",
)
