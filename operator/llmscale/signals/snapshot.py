"""The typed signal snapshot: what the policy sees of a pool at one instant.

Pure module, shared by the operator (built from Prometheus by :mod:`llmscale.signals`) and the
simulator (built from simulated replicas), so scaling behaves the same in both.

"Unknown is not zero": a signal that could not be read (no series, NaN, query failed) is ``None``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["SignalSnapshot"]


@dataclass(frozen=True, slots=True)
class SignalSnapshot:
    """Leading and lagging signals of one pool of one LLMDeployment.

    Attributes:
        observed_at: time of the data in seconds since the Unix epoch (the newest sample's
            timestamp, not the time of the query); the policy compares it with ``now`` to judge
            staleness.
        queue_depth: requests waiting in the engines, summed over the pool's replicas
            (``vllm:num_requests_waiting``); ``None`` when unknown.
        running_requests: requests running (in the batch), summed (``vllm:num_requests_running``).
        kv_cache_utilization: mean fraction of the paged KV cache in use over the replicas, 0–1
            (``vllm:kv_cache_usage_perc``).
        preemption_rate: preemptions per second summed over the replicas
            (``sum(rate(vllm:num_preemptions_total[1m]))``).
        ttft_p95_s: p95 time to first token over the last minute, seconds (lagging).
        itl_p95_s: p95 inter-token latency over the last minute, seconds (lagging).
        replicas_reporting: number of replicas (scrape targets) that contributed samples.
        error: why the snapshot is incomplete (query failure), or ``None``.
    """

    observed_at: float
    queue_depth: float | None = None
    running_requests: float | None = None
    kv_cache_utilization: float | None = None
    preemption_rate: float | None = None
    ttft_p95_s: float | None = None
    itl_p95_s: float | None = None
    replicas_reporting: int = 0
    error: str | None = None

    def __post_init__(self) -> None:
        # NaN and ±Inf are not measurements: store them as unknown so no caller can mistake them.
        for name in (
            "queue_depth",
            "running_requests",
            "kv_cache_utilization",
            "preemption_rate",
            "ttft_p95_s",
            "itl_p95_s",
        ):
            value = getattr(self, name)
            if value is not None and not math.isfinite(value):
                object.__setattr__(self, name, None)

    def age(self, now: float) -> float:
        """Return the snapshot's age at ``now`` (seconds since the epoch), in seconds."""
        return now - self.observed_at

    @property
    def leading_known(self) -> bool:
        """Whether all three leading signals (queue, KV cache, preemptions) are known."""
        return (
            self.queue_depth is not None
            and self.kv_cache_utilization is not None
            and self.preemption_rate is not None
        )
