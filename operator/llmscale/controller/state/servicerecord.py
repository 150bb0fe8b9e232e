"""What a pool delivered over the last hour and day: SLO minutes, goodput, tokens, GPU time and
utilisation, kept in rolling buckets per pool. Pure (time is an argument).

**The SLO minute** (the simulator's definition, docs/simulate.md "One SLO definition"): a minute
meets the SLO when, over the minute, ``histogram_quantile(0.95)`` of vLLM's TTFT histogram is at
most ``spec.slo.ttftP95Seconds`` and that of its per-token ITL histogram at most
``spec.slo.itlP95Seconds`` (:func:`judge_minute`) — where a target lies inside a histogram bucket,
only a p95 at most that bucket's lower bound is surely within it, and only that counts as met
(:mod:`llmscale.signals.buckets`); a minute without a first token meets it unless
some pod's queue never emptied in it ("silence is not success"). A minute Prometheus could not
answer is not judged, and counts neither way.

**Attainment** is the share of judged minutes that met the SLO: over the last 60 minutes, and over
the last 24 hours (to the hour: the oldest of 24 hour buckets may be partly older). **Goodput** is
the tokens generated in minutes that met it, per second of minutes whose token count is known;
**tokens/s** the same for every minute. **Cost per million tokens** is the GPU time of the pool
over the last 24 hours at ``spec.cost.gpuHourUsd``, over the million tokens generated in it —
both up to the end of the newest minute folded in: tokens arrive a whole minute at a time while GPU
time accrues at every tick, so counting the GPU time of the minute in progress would make the
figure climb through each minute and drop at the next (by a tenth at ten minutes of history, past
the status deadband: a young pool, or every pool after a restart, would rewrite its status twice
a minute). GPU time is split at minute boundaries for the same reason.
**Busy share** is the share of the pool's reporting pods with a running request, and **KV use**
their mean KV-cache utilisation, both sampled at every tick over the last hour.

The buckets live in the operator's memory: after a restart they start again (the
``minutesJudged`` figures say over how many minutes), while the operator's own metrics
(``llmscale_slo_minutes_total``) keep the history in Prometheus.
"""

from __future__ import annotations

import math
from array import array
from dataclasses import dataclass, field

from llmscale.signals.buckets import judge_quantile
from llmscale.signals.minute import MinuteSample
from llmscale.signals.snapshot import SignalSnapshot

__all__ = ["PoolFigures", "ServiceRecord", "judge_minute"]

_MINUTE_S = 60.0
_HOUR_S = 3600.0
# Fields of a bucket, in order.
_JUDGED, _MET, _TOKEN_MINUTES, _TOKENS, _GOOD_TOKENS, _GPU_S, _BUSY_N, _BUSY, _KV_N, _KV = range(10)
_FIELDS = 10


def judge_minute(sample: MinuteSample, ttft_target_s: float, itl_target_s: float) -> bool | None:
    """Return whether the minute of ``sample`` met the SLO, or ``None`` when it cannot be judged
    (Prometheus had no series of the pool in it).

    Args:
        sample: the pool's minute (:func:`~llmscale.signals.queries.minute_query`).
        ttft_target_s: ``spec.slo.ttftP95Seconds``.
        itl_target_s: ``spec.slo.itlP95Seconds``.
    """
    if not sample.has_data:
        return None
    # Conservatively from the bucket counts: a p95 inside the bucket holding a target that is not
    # a bound (vLLM's (1, 2.5] for a 2 s TTFT) may be either side of it, and is not counted as met
    # (90 requests at 0.8 s and 10 at 2.4 s read 1.75 s; truly 10 % missed).
    ttft_ok = sample.ttft_p95_s is None or judge_quantile(sample.ttft_p95_s, ttft_target_s, sample.ttft_buckets_s) == "met"
    itl_ok = sample.itl_p95_s is None or judge_quantile(sample.itl_p95_s, itl_target_s, sample.itl_buckets_s) == "met"
    silent = not sample.ttft_observations and (sample.queue_min or 0.0) > 0.0
    return ttft_ok and itl_ok and not silent


@dataclass(frozen=True, slots=True)
class PoolFigures:
    """The headline numbers of one pool at one instant (``None``: not known yet).

    Attributes:
        slo_attainment_1h_percent / slo_attainment_24h_percent: share of judged minutes meeting
            the SLO, percent (interactive pool only).
        minutes_judged_1h / minutes_judged_24h: minutes those shares are over.
        goodput_tokens_per_second: tokens/s generated in minutes that met the SLO, last hour.
        tokens_per_second: tokens/s generated, last hour.
        gpu_hours_24h / gpu_hours_since_creation: GPU-hours held by the pool's pods.
        usd_per_million_tokens: GPU cost over the last 24 h per million tokens generated in it.
        busy_share: share of reporting pods with a running request, last hour, 0–1.
        kv_cache_utilization_mean: mean KV-cache utilisation of the reporting pods, last hour, 0–1.
        cold_start_p90_seconds: pod creation to Ready, P90 of the recent starts, seconds.
        cold_starts_measured: starts that P90 is over.
        gpus: GPUs held now.
    """

    slo_attainment_1h_percent: float | None = None
    slo_attainment_24h_percent: float | None = None
    minutes_judged_1h: int = 0
    minutes_judged_24h: int = 0
    goodput_tokens_per_second: float | None = None
    tokens_per_second: float | None = None
    gpu_hours_24h: float | None = None
    gpu_hours_since_creation: float | None = None
    usd_per_million_tokens: float | None = None
    busy_share: float | None = None
    kv_cache_utilization_mean: float | None = None
    cold_start_p90_seconds: float | None = None
    cold_starts_measured: int = 0
    gpus: float = 0.0


@dataclass
class _Buckets:
    """Rolling sums in ``count`` buckets of ``width_s`` seconds, keyed by bucket start.

    A ring of ``count`` slots in two flat arrays (issue 14: a dict of one array per bucket cost
    ~220 bytes a bucket, ~18 KB a pool at a day's age; the ring costs ``count × 88`` bytes, ~7.5 KB
    a pool): the bucket starting at ``key`` lives in slot ``(key / width_s) mod count``, its start in
    ``keys`` (NaN: empty) and its ``_FIELDS`` sums in ``values``. A newer bucket replaces the one a
    whole ring older in its slot; a value older than what its slot holds is dropped (it lies outside
    every window :meth:`sums` reads from the newest bucket on).
    """

    width_s: float
    count: int
    keys: array[float] = field(init=False, repr=False)
    values: array[float] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.keys = array("d", [math.nan]) * self.count
        self.values = array("d", bytes(8 * _FIELDS * self.count))

    def add(self, t: float, index: int, value: float) -> None:
        key = math.floor(t / self.width_s) * self.width_s
        slot = int(key // self.width_s) % self.count
        held = self.keys[slot]
        if held != key:
            if held > key:
                return
            self.keys[slot] = key
            base = slot * _FIELDS
            self.values[base:base + _FIELDS] = array("d", bytes(8 * _FIELDS))
        self.values[slot * _FIELDS + index] += value

    def field_sum(self, index: int, low: float, high: float) -> float:
        """Sum of field ``index`` over the buckets starting in ``[low, high]``."""
        return sum(self.values[slot * _FIELDS + index] for slot, key in enumerate(self.keys) if low <= key <= high)

    def sums(self, now: float) -> list[float]:
        oldest = math.floor(now / self.width_s) * self.width_s - (self.count - 1) * self.width_s
        total = [0.0] * _FIELDS
        for slot, key in enumerate(self.keys):
            if oldest <= key <= now:
                base = slot * _FIELDS
                for i in range(_FIELDS):
                    total[i] += self.values[base + i]
        return total


@dataclass
class ServiceRecord:
    """The rolling record of one pool: minute buckets for the last hour, hour buckets for the day.

    Attributes:
        last_minute_end_s: end of the newest minute folded in (a minute is folded in once).
        last_tick_s: time of the last tick folded in (GPU time is integrated between ticks).
    """

    minutes: _Buckets = field(default_factory=lambda: _Buckets(_MINUTE_S, 60))
    hours: _Buckets = field(default_factory=lambda: _Buckets(_HOUR_S, 24))
    last_minute_end_s: float | None = None
    last_tick_s: float | None = None

    def _add(self, t: float, index: int, value: float) -> None:
        self.minutes.add(t, index, value)
        self.hours.add(t, index, value)

    def add_minute(self, sample: MinuteSample, met: bool | None) -> bool:
        """Fold in a judged minute (``met`` from :func:`judge_minute`, ``None``: not judged);
        return ``False`` when that minute was already folded in."""
        if self.last_minute_end_s is not None and sample.end_s <= self.last_minute_end_s:
            return False
        self.last_minute_end_s = sample.end_s
        t = sample.end_s - 1.0  # inside the minute it judges
        if met is not None:
            self._add(t, _JUDGED, 1.0)
            self._add(t, _MET, 1.0 if met else 0.0)
        if sample.generation_tokens is not None:
            self._add(t, _TOKEN_MINUTES, 1.0)
            self._add(t, _TOKENS, sample.generation_tokens)
            if met is not False:  # a minute that met the SLO, or one not judged for latency (batch)
                self._add(t, _GOOD_TOKENS, sample.generation_tokens)
        return True

    def add_tick(self, now: float, gpus: float, snapshot: SignalSnapshot | None, max_gap_s: float) -> None:
        """Fold in one tick: the GPU time since the last tick (``gpus`` held, the gap capped at
        ``max_gap_s`` so that a pause of the operator is not billed twice), and the utilisation of
        the snapshot's contributing pods."""
        if self.last_tick_s is not None and now > self.last_tick_s:
            # Each second lands in the minute it belongs to (a 15 s tick gap often straddles two).
            t = max(self.last_tick_s, now - max_gap_s)
            while t < now:
                edge = min(now, (math.floor(t / _MINUTE_S) + 1) * _MINUTE_S)
                self._add(t, _GPU_S, gpus * (edge - t))
                t = edge
        self.last_tick_s = now
        if snapshot is None or snapshot.error is not None or snapshot.carried is not None:
            return  # a carried snapshot's pods were folded in when it was read
        stalled = set(snapshot.stalled_pods)
        for pod in snapshot.pods:
            if pod.pod in stalled:
                continue
            if pod.running_requests is not None:
                self._add(now, _BUSY_N, 1.0)
                self._add(now, _BUSY, 1.0 if pod.running_requests > 0 else 0.0)
            if pod.kv_cache_utilization is not None:
                self._add(now, _KV_N, 1.0)
                self._add(now, _KV, pod.kv_cache_utilization)

    def figures(self, now: float, *, gpu_hour_usd: float, judged: bool) -> PoolFigures:
        """Return the headline numbers at ``now`` (GPU-hours and cold start are left to the caller).

        Args:
            now: seconds since the epoch.
            gpu_hour_usd: ``spec.cost.gpuHourUsd``.
            judged: whether the pool has an SLO (the interactive pool).
        """
        hour = self.minutes.sums(now)
        day = self.hours.sums(now)

        def share(s: list[float]) -> float | None:
            return 100.0 * s[_MET] / s[_JUDGED] if judged and s[_JUDGED] > 0 else None

        def per_second(value: float, minutes: float) -> float | None:
            return value / (minutes * _MINUTE_S) if minutes > 0 else None

        # GPU time after the newest folded minute has no tokens yet (module docstring).
        pending_gpu_s = (self.minutes.field_sum(_GPU_S, self.last_minute_end_s, now)
                         if self.last_minute_end_s is not None else 0.0)
        usd = max(0.0, day[_GPU_S] - pending_gpu_s) / _HOUR_S * gpu_hour_usd
        return PoolFigures(
            slo_attainment_1h_percent=share(hour),
            slo_attainment_24h_percent=share(day),
            minutes_judged_1h=int(hour[_JUDGED]) if judged else 0,
            minutes_judged_24h=int(day[_JUDGED]) if judged else 0,
            goodput_tokens_per_second=per_second(hour[_GOOD_TOKENS], hour[_TOKEN_MINUTES]),
            tokens_per_second=per_second(hour[_TOKENS], hour[_TOKEN_MINUTES]),
            usd_per_million_tokens=usd / (day[_TOKENS] / 1e6) if day[_TOKENS] > 0 and day[_GPU_S] > 0 else None,
            busy_share=hour[_BUSY] / hour[_BUSY_N] if hour[_BUSY_N] > 0 else None,
            kv_cache_utilization_mean=hour[_KV] / hour[_KV_N] if hour[_KV_N] > 0 else None,
        )
