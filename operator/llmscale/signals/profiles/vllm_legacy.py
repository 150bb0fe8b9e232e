"""Profile ``vllm-legacy``: the metric names of vLLM's V0 engine and of early V1 releases.

Source: vLLM ``vllm/engine/metrics.py`` (``Metrics`` class, V0) and ``vllm/v1/metrics/loggers.py``
before 0.11. The queue, running, preemption, token and request names are the same as in V1; the
KV-cache gauge is ``vllm:gpu_cache_usage_perc`` (a fraction, 0–1) and inter-token latency is
``vllm:time_per_output_token_seconds``. The prefix cache: V1 before 0.11 exports the counters
``vllm:gpu_prefix_cache_{hits,queries}_total``; V0 only the gauge ``vllm:gpu_prefix_cache_hit_rate``,
read where the counters are absent. Copies: none (see the ``vllm`` profile). Buckets: V0's TTFT and
TPOT buckets are V1's up to 10 s and 2.5 s; V1 added longer ones, so only the bounds both share are
used (a target past them is judged inside an open bucket, conservatively).
"""

from __future__ import annotations

from llmscale.signals.profiles.base import MetricProfile
from llmscale.signals.profiles.vllm import ITL_BUCKETS_S, TTFT_BUCKETS_S

__all__ = ["PROFILE"]

PROFILE = MetricProfile(
    name="vllm-legacy",
    waiting="vllm:num_requests_waiting",
    running="vllm:num_requests_running",
    kv_cache_usage="vllm:gpu_cache_usage_perc",
    preemptions_total="vllm:num_preemptions_total",
    ttft_histogram="vllm:time_to_first_token_seconds",
    itl_histogram="vllm:time_per_output_token_seconds",
    source="vllm/engine/metrics.py (vLLM V0, < 0.8) and vllm/v1/metrics/loggers.py (< 0.11)",
    copy_labels=(),
    requests_total="vllm:request_success_total",
    prompt_tokens_total="vllm:prompt_tokens_total",
    generation_tokens_total="vllm:generation_tokens_total",
    prompt_tokens_histogram="vllm:request_prompt_tokens",
    generation_tokens_histogram="vllm:request_generation_tokens",
    prefix_cache_hits_total="vllm:gpu_prefix_cache_hits_total",
    prefix_cache_queries_total="vllm:gpu_prefix_cache_queries_total",
    prefix_cache_hit_rate="vllm:gpu_prefix_cache_hit_rate",
    ttft_buckets_s=tuple(b for b in TTFT_BUCKETS_S if b <= 10.0),
    itl_buckets_s=tuple(b for b in ITL_BUCKETS_S if b <= 2.5),
    finished_reason_label="finished_reason",
    served_reasons=("stop", "length"),
    failed_reasons=("error",),
)
