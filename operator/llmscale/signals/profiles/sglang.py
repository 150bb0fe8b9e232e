"""Profile ``sglang``: the metric names of SGLang's runtime (``--enable-metrics``).

Source: SGLang ``python/sglang/srt/metrics/collector.py`` (``SchedulerMetricsCollector`` and
``TokenizerMetricsCollector``) and ``docs/references/production_metrics.md``.

- Queue: ``sglang:num_queue_reqs``; running batch: ``sglang:num_running_reqs``.
- KV cache: ``sglang:token_usage``, the fraction (0–1) of the KV token pool in use — SGLang's
  equivalent of vLLM's KV-cache utilisation.
- Preemption: SGLang calls it *retraction* (requests taken out of the decode batch when the KV
  pool runs out). Recent SGLang exports the counter ``sglang:num_retracted_requests_total``; older
  releases only have the gauge ``sglang:num_retracted_reqs`` (retractions in the last scheduler
  step, not a counter, so ``rate()`` of it means nothing and llmscale does not use it). On those
  releases the counter is absent and the preemption rate is *unknown* (``None``), never zero.
- Latency: ``sglang:time_to_first_token_seconds`` and ``sglang:inter_token_latency_seconds``
  (older releases: ``sglang:time_per_output_token_seconds``, not read by this profile).
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
)
