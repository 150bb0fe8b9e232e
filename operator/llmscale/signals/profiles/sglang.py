"""Profile ``sglang``: the metric names of SGLang's runtime (``--enable-metrics``).

Source: SGLang ``python/sglang/srt/metrics/collector.py`` (``SchedulerMetricsCollector`` and
``TokenizerMetricsCollector``) and ``docs/references/production_metrics.md``.

- Queue: ``sglang:num_queue_reqs``; running batch: ``sglang:num_running_reqs``.
- KV cache: ``sglang:token_usage``, the fraction (0–1) of the KV token pool in use — SGLang's
  equivalent of vLLM's KV-cache utilisation.
- Preemption: SGLang calls it *retraction* (requests taken out of the decode batch when the KV
  pool runs out). Recent SGLang exports the counter ``sglang:num_retracted_requests_total``,
  created at the first retraction: absent on a live pod it reads as 0. Older releases only have
  the gauge ``sglang:num_retracted_reqs`` (retractions in the last scheduler step, not a counter),
  which llmscale does not use; there the counter is always absent and the rate reads 0.
- Latency: ``sglang:time_to_first_token_seconds`` and ``sglang:inter_token_latency_seconds``
  (older releases: ``sglang:time_per_output_token_seconds``, not read by this profile).
- Workload mix (tokenizer manager, created at the first request): ``sglang:num_requests_total``,
  ``sglang:prompt_tokens_total``, ``sglang:generation_tokens_total``,
  ``sglang:cached_tokens_total`` (prompt tokens served from the radix cache; its rate over the
  prompt-token rate is the hit rate). The per-request token histograms
  ``sglang:prompt_tokens_histogram`` / ``sglang:generation_tokens_histogram`` exist only with
  ``--collect-tokens-histogram``; without them the mean comes from the counters and the tails are
  unknown. ``sglang:cache_hit_rate`` (scheduler gauge) is the fallback hit rate. These names are
  from SGLang 0.4–0.5 and less certain than the core six: see docs/signals.md.

Copies: each tensor-parallel (``tp_rank``) and pipeline-parallel (``pp_rank``) scheduler process
exports the scheduler gauges, so a TP 8 pod has eight identical ``sglang:num_queue_reqs`` series.
Those labels are ``copy_labels``: collapsed with ``max`` so the pod counts once. ``dp_rank``
(data-parallel attention) schedulers have their own queues and are summed, not collapsed.
"""

from __future__ import annotations

from llmscale.signals.profiles.base import MetricProfile

__all__ = ["PROFILE"]

PROFILE = MetricProfile(
    name="sglang",
    waiting="sglang:num_queue_reqs",
    running="sglang:num_running_reqs",
    kv_cache_usage="sglang:token_usage",
    preemptions_total="sglang:num_retracted_requests_total",
    ttft_histogram="sglang:time_to_first_token_seconds",
    itl_histogram="sglang:inter_token_latency_seconds",
    source="python/sglang/srt/metrics/collector.py (SGLang >= 0.4)",
    copy_labels=("tp_rank", "pp_rank"),
    requests_total="sglang:num_requests_total",
    prompt_tokens_total="sglang:prompt_tokens_total",
    generation_tokens_total="sglang:generation_tokens_total",
    prompt_tokens_histogram="sglang:prompt_tokens_histogram",
    generation_tokens_histogram="sglang:generation_tokens_histogram",
    prefix_cache_hits_total="sglang:cached_tokens_total",
    prefix_cache_queries_total="sglang:prompt_tokens_total",
    prefix_cache_hit_rate="sglang:cache_hit_rate",
)
