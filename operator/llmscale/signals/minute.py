"""One pool's minute: what the SLO judgement of a minute reads (:func:`~llmscale.signals.queries.minute_query`).

Pure module: the typed sample, and the split of a parsed answer into one sample per pool.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from llmscale.signals.answer import FleetAnswer
from llmscale.signals.queries import PoolTarget

__all__ = ["MinuteSample", "minute_samples"]


@dataclass(frozen=True, slots=True)
class MinuteSample:
    """What Prometheus says of one pool over the minute ``(end_s - 60, end_s]``.

    Every value is ``None`` when unknown (no series, or NaN: a quantile over a minute without a
    request is NaN).

    Attributes:
        end_s: the minute's end, seconds since the epoch (a whole minute).
        ttft_p95_s: TTFT at the reader's quantile (p95) over the minute, seconds.
        itl_p95_s: ITL at the reader's quantile over the minute, seconds.
        ttft_observations: first tokens observed in the minute (requests).
        generation_tokens: tokens generated in the minute (tokens).
        queue_min: the sum over pods of each pod's lowest queue depth in the minute (requests).
        ttft_buckets_s / itl_buckets_s: the histograms' finite bucket bounds, seconds (the
            profile's); ``None``: unknown. A p95 inside the bucket holding a target is judged
            conservatively (:func:`llmscale.signals.buckets.judge_quantile`).
        running_mean: the mean over pods of each pod's mean running batch in the minute (requests).
        itl_sum_s / itl_count: the ITL histogram's sum (seconds) and count (token gaps) in the minute.
        prefill_sum_s / prefill_count: the prefill-time histogram's sum (seconds) and count (requests).
        prompt_tokens_sum / prompt_tokens_count: the prompt-token histogram's sum (tokens) and
            count (requests).
        output_tokens_sum / output_tokens_count: the generated-token histogram's sum (tokens) and
            count (requests).
    """

    end_s: float
    ttft_p95_s: float | None = None
    itl_p95_s: float | None = None
    ttft_observations: float | None = None
    generation_tokens: float | None = None
    queue_min: float | None = None
    ttft_buckets_s: tuple[float, ...] | None = None
    itl_buckets_s: tuple[float, ...] | None = None
    running_mean: float | None = None
    itl_sum_s: float | None = None
    itl_count: float | None = None
    prefill_sum_s: float | None = None
    prefill_count: float | None = None
    prompt_tokens_sum: float | None = None
    prompt_tokens_count: float | None = None
    output_tokens_sum: float | None = None
    output_tokens_count: float | None = None

    @property
    def has_data(self) -> bool:
        """Whether any series answered for the pool in this minute."""
        return any(v is not None for v in (self.ttft_p95_s, self.itl_p95_s, self.ttft_observations,
                                            self.generation_tokens, self.queue_min))


def minute_samples(
    answer: FleetAnswer,
    end_s: float,
    pools: Collection[PoolTarget],
    ttft_buckets_s: tuple[float, ...] | None = None,
    itl_buckets_s: tuple[float, ...] | None = None,
) -> dict[PoolTarget, MinuteSample]:
    """Return the minute of each of ``pools`` from the parsed ``minute`` group of ``answer``; a pool
    Prometheus had no series of gets a sample with every value ``None``. ``*_buckets_s``: the
    profile's histogram bounds, carried on each sample."""
    out: dict[PoolTarget, MinuteSample] = {}
    for pool in pools:
        row = answer.pools.get(pool, {})
        out[pool] = MinuteSample(
            end_s=end_s,
            ttft_p95_s=row.get("minute_ttft_p95_s"),
            itl_p95_s=row.get("minute_itl_p95_s"),
            ttft_observations=row.get("minute_ttft_observations"),
            generation_tokens=row.get("minute_generation_tokens"),
            queue_min=row.get("minute_queue_min"),
            ttft_buckets_s=ttft_buckets_s,
            itl_buckets_s=itl_buckets_s,
            running_mean=row.get("minute_running_mean"),
            itl_sum_s=row.get("minute_itl_sum_s"),
            itl_count=row.get("minute_itl_count"),
            prefill_sum_s=row.get("minute_prefill_sum_s"),
            prefill_count=row.get("minute_prefill_count"),
            prompt_tokens_sum=row.get("minute_prompt_tokens_sum"),
            prompt_tokens_count=row.get("minute_prompt_tokens_count"),
            output_tokens_sum=row.get("minute_output_tokens_sum"),
            output_tokens_count=row.get("minute_output_tokens_count"),
        )
    return out
