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
    """

    end_s: float
    ttft_p95_s: float | None = None
    itl_p95_s: float | None = None
    ttft_observations: float | None = None
    generation_tokens: float | None = None
    queue_min: float | None = None
    ttft_buckets_s: tuple[float, ...] | None = None
    itl_buckets_s: tuple[float, ...] | None = None

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
        )
    return out
