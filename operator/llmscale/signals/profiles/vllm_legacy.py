"""Profile ``vllm-legacy``: the metric names of vLLM's V0 engine (vLLM < 0.8, or V0 forced).

Source: vLLM ``vllm/engine/metrics.py`` (``Metrics`` class, V0). The queue, running and
preemption names are the same as in V1; the KV-cache gauge is ``vllm:gpu_cache_usage_perc``
(a fraction, 0–1) and inter-token latency is ``vllm:time_per_output_token_seconds``.
"""

from __future__ import annotations

from llmscale.signals.profiles.base import MetricProfile

__all__ = ["PROFILE"]

PROFILE = MetricProfile(
    name="vllm-legacy",
    waiting="vllm:num_requests_waiting",
    running="vllm:num_requests_running",
    kv_cache_usage="vllm:gpu_cache_usage_perc",
    preemptions_total="vllm:num_preemptions_total",
    ttft_histogram="vllm:time_to_first_token_seconds",
    itl_histogram="vllm:time_per_output_token_seconds",
    source="vllm/engine/metrics.py (vLLM V0, < 0.8)",
)
