"""The interactive pool's request counters as Prometheus would hold them, for the policy's inputs.

The operator reads the live workload mix from vLLM's counters and histograms
(``vllm:request_success_total``, ``vllm:prompt_tokens_total``, ``vllm:generation_tokens_total``,
``vllm:request_prompt_tokens`` / ``vllm:request_generation_tokens``, the prefix-cache counters), the
rate a day and a week ago from Prometheus' history, and each pod's creation → Ready time from the
API server. :class:`RequestCounters` keeps the same for a simulated pool, so that the simulator hands
:func:`llmscale.policy.decide` what the operator would:

- :meth:`RequestCounters.workload` — the :class:`~llmscale.signals.snapshot.WorkloadMix` over the
  last rate window: rates, means (``_sum``/``_count``), and the p90/p95 as ``histogram_quantile`` over
  vLLM's 1-2-5 length buckets (``build_1_2_5_buckets(max_model_len)`` in ``vllm/v1/metrics/loggers.py``);
- :meth:`RequestCounters.seasonal` — the finished-request rate one day and one week ago, per minute;
- :meth:`RequestCounters.minutes` — the judged minutes the live calibration folds
  (:class:`~llmscale.signals.minute.MinuteSample`: the mean running batch, and the ``_sum``/``_count``
  of the ITL, prefill-time and length histograms over each minute);
- :func:`cold_starts` — the measured creation → Ready of the pool's recent replicas.

A request is counted when it finishes (the histograms' observation time). Pure bookkeeping.
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from collections.abc import Iterable, Sequence

import numpy as np

from llmscale.model.capacity import vllm_length_buckets
from llmscale.policy.leadtime import COLD_START_SAMPLES
from llmscale.policy.types import RateSeries, SeasonalHistory
from llmscale.signals.minute import MinuteSample
from llmscale.signals.snapshot import WorkloadMix

__all__ = ["RequestCounters", "cold_starts"]

_DAY_S = 86_400.0
_WEEK_S = 7 * _DAY_S

# The seasonal series reach this far on each side of "the same time a period ago", seconds: the
# forecast's smoothing (5 min) before it and the longest lead time considered (30 min) after it.
_SEASONAL_BEFORE_S = 600.0
_SEASONAL_AFTER_S = 1800.0

# A minute's accumulators: prompt tokens, requests, output tokens, ITL sum (s), ITL count (gaps),
# prefill sum (s), prefill count, running-gauge sum over scrapes, scrapes.
_MINUTE_FIELDS = 9


def _quantile(q: float, bounds: Sequence[float], counts: Sequence[int]) -> float | None:
    """Prometheus' ``histogram_quantile`` (``promql/quantile.go``): linear inside the bucket holding
    the rank, 0 as the first bucket's lower bound, the highest finite bound for the ``+Inf`` bucket."""
    total = sum(counts)
    if total <= 0:
        return None
    rank = q * total
    cum = 0
    for i, bound in enumerate(bounds):
        here = counts[i]
        if cum + here >= rank:
            start = bounds[i - 1] if i > 0 else 0.0
            return start + (bound - start) * ((rank - cum) / here) if here > 0 else bound
        cum += here
    return float(bounds[-1]) if bounds else None


class RequestCounters:
    """The finished interactive requests of a simulated pool, by finish time.

    Args:
        start_s: the run's start, seconds since the epoch.
        max_model_len: ``--max-model-len`` (the length buckets end there), tokens.
        window_s: the rate window of :meth:`workload`, seconds (the signals reader's 60 s).
    """

    def __init__(self, start_s: float, max_model_len: int, window_s: float = 60.0) -> None:
        self.start_s = start_s
        self.window_s = window_s
        self.bounds = vllm_length_buckets(max_model_len)
        self._t: list[float] = []
        self._prompt: list[int] = []
        self._output: list[int] = []
        self._head = 0
        self._per_minute: list[int] = []  # finished requests per minute since start_s
        self._prefix: deque[tuple[float, float, float]] = deque()
        # Per minute since start_s: the histograms' _sum/_count increases and the running gauge's
        # scrapes (_MINUTE_FIELDS).
        self._minute_sums: list[list[float]] = []

    def _minute(self, t: float) -> list[float] | None:
        # The minute ending at start_s + 60·(m + 1) holds (end − 60, end], as Prometheus reads it:
        # a scrape on a boundary belongs to the minute it ends.
        m = math.ceil((t - self.start_s) / 60.0 - 1e-9) - 1
        if m < 0:
            return None
        if m >= len(self._minute_sums):
            self._minute_sums.extend([0.0] * _MINUTE_FIELDS for _ in range(m + 1 - len(self._minute_sums)))
        return self._minute_sums[m]

    def finished(self, t: float, prompt_tokens: int, output_tokens: int,
                 decode_s: float | None = None, prefill_s: float | None = None) -> None:
        """Count one request an interactive replica finished at ``t`` (non-decreasing): an
        interactive one, or a batch one sent to the interactive Service (vLLM counts every request).

        Args:
            decode_s: first token → finish, seconds: the sum of its ``output_tokens − 1`` inter-token
                gaps (``vllm:inter_token_latency_seconds``); ``None``: not recorded.
            prefill_s: first scheduled → first token, seconds (``vllm:request_prefill_time_seconds``).
        """
        self._t.append(t)
        self._prompt.append(prompt_tokens)
        self._output.append(output_tokens)
        minute = int((t - self.start_s) // 60.0)
        if minute >= 0:
            if minute >= len(self._per_minute):
                self._per_minute.extend([0] * (minute + 1 - len(self._per_minute)))
            self._per_minute[minute] += 1
        acc = self._minute(t)
        if acc is not None:
            acc[0] += prompt_tokens
            acc[1] += 1.0
            acc[2] += output_tokens
            if decode_s is not None and output_tokens > 1:
                acc[3] += decode_s
                acc[4] += output_tokens - 1
            if prefill_s is not None and prefill_s >= 0:
                acc[5] += prefill_s
                acc[6] += 1.0

    def running(self, t: float, mean_running: float) -> None:
        """Record one scrape at ``t`` of the pool's running batch, averaged over its ready pods."""
        acc = self._minute(t)
        if acc is not None:
            acc[7] += mean_running
            acc[8] += 1.0

    def minutes(self, t: float, last: int = 2) -> tuple[MinuteSample, ...]:
        """The ``last`` whole minutes ended by ``t``, oldest first, as the operator's minute query
        reads them (``avg_over_time`` of the running gauge, ``increase`` of each histogram's ``_sum``
        and ``_count``); a minute without a scrape or a finished request has ``None`` there. A request
        is counted in the minute it finished, its gaps with it (vLLM observes each gap as it
        happens: a request spanning a boundary moves a few gaps one minute later here)."""
        end = int((t - self.start_s + 1e-9) // 60.0)  # minutes [0, end) have ended by t
        out = []
        for m in range(max(end - last, 0), end):
            acc = self._minute_sums[m] if m < len(self._minute_sums) else [0.0] * _MINUTE_FIELDS
            done = acc[1] > 0
            out.append(MinuteSample(
                end_s=self.start_s + 60.0 * (m + 1),
                running_mean=acc[7] / acc[8] if acc[8] > 0 else None,
                itl_sum_s=acc[3] if done else None,
                itl_count=acc[4] if done else None,
                prefill_sum_s=acc[5] if acc[6] > 0 else None,
                prefill_count=acc[6] if acc[6] > 0 else None,
                prompt_tokens_sum=acc[0] if done else None,
                prompt_tokens_count=acc[1] if done else None,
                output_tokens_sum=acc[2] if done else None,
                output_tokens_count=acc[1] if done else None,
            ))
        return tuple(out)

    def prefix_cache(self, t: float, queries: float, hits: float) -> None:
        """Record the pool's cumulative prefix-cache query and hit counters (tokens) at a scrape at ``t``."""
        self._prefix.append((t, queries, hits))
        while self._prefix and self._prefix[0][0] < t - self.window_s - 1e-9:
            self._prefix.popleft()

    def workload(self, t: float) -> WorkloadMix:
        """The :class:`WorkloadMix` of the ``window_s`` before ``t``, as the signals reader builds it;
        all ``None`` when no request finished in it."""
        lo = bisect.bisect_right(self._t, t - self.window_s, lo=self._head)
        if lo > 100_000:  # forget what no window reads again
            del self._t[:lo], self._prompt[:lo], self._output[:lo]
            lo = 0
        self._head = lo
        hi = bisect.bisect_right(self._t, t, lo=lo)
        n = hi - lo
        hit_rate = None
        if len(self._prefix) >= 2:
            (_, q0, h0), (_, q1, h1) = self._prefix[0], self._prefix[-1]
            if q1 > q0:
                hit_rate = (h1 - h0) / (q1 - q0)
        if n <= 0:
            return WorkloadMix(request_rate=0.0, prompt_tokens_rate=0.0, generation_tokens_rate=0.0,
                               prefix_cache_hit_rate=hit_rate)
        prompt = np.asarray(self._prompt[lo:hi], dtype=np.float64)
        output = np.asarray(self._output[lo:hi], dtype=np.float64)
        w = self.window_s
        edges = np.asarray(self.bounds)

        def buckets(x: np.ndarray) -> list[int]:
            counts: list[int] = np.bincount(np.searchsorted(edges, x, side="left"), minlength=len(edges) + 1).tolist()
            return counts

        pb, ob = buckets(prompt), buckets(output)
        return WorkloadMix(
            request_rate=n / w,
            prompt_tokens_rate=float(prompt.sum()) / w,
            generation_tokens_rate=float(output.sum()) / w,
            prompt_tokens_mean=float(prompt.mean()),
            prompt_tokens_p90=_quantile(0.90, self.bounds, pb),
            prompt_tokens_p95=_quantile(0.95, self.bounds, pb),
            generation_tokens_mean=float(output.mean()),
            generation_tokens_p90=_quantile(0.90, self.bounds, ob),
            generation_tokens_p95=_quantile(0.95, self.bounds, ob),
            prefix_cache_hit_rate=hit_rate,
        )

    def _series(self, t0: float, t1: float) -> RateSeries | None:
        if t0 < self.start_s:
            return None
        first = int((t0 - self.start_s) // 60.0)
        last = int((t1 - self.start_s) // 60.0)
        rates = tuple(
            (self._per_minute[m] / 60.0 if m < len(self._per_minute) else 0.0) for m in range(first, last + 1)
        )
        return RateSeries(self.start_s + first * 60.0 + 30.0, 60.0, rates)

    def seasonal(self, t: float) -> SeasonalHistory | None:
        """The finished-request rate per minute around ``t`` a day and a week ago (``None`` where the
        run does not reach back that far), as a Prometheus range query would give it."""
        day = self._series(t - _DAY_S - _SEASONAL_BEFORE_S, t - _DAY_S + _SEASONAL_AFTER_S)
        week = self._series(t - _WEEK_S - _SEASONAL_BEFORE_S, t - _WEEK_S + _SEASONAL_AFTER_S)
        if day is None and week is None:
            return None
        return SeasonalHistory(day=day, week=week)


def cold_starts(created_ready: Iterable[tuple[float, float]], now: float) -> tuple[float, ...]:
    """The creation → Ready durations (seconds) of the last :data:`COLD_START_SAMPLES` replicas that
    became Ready by ``now``, oldest first (what the shell measures from pods' Ready conditions).

    Args:
        created_ready: ``(created_s, ready_s)`` of the pool's replicas (``ready_s`` infinite when
            never Ready).
        now: seconds since the epoch.
    """
    done = sorted((r, r - c) for c, r in created_ready if math.isfinite(r) and r <= now and r > c)
    return tuple(d for _, d in done[-COLD_START_SAMPLES:])
