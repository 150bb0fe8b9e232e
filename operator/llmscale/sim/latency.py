"""The latency histograms of a simulated fleet, kept the way vLLM exports them and read the way the
operator reads them.

vLLM observes one ``vllm:time_to_first_token_seconds`` sample per request (when its first token is
sampled) and one ``vllm:inter_token_latency_seconds`` sample per later output token (the gap since
that request's previous token), into fixed buckets (:mod:`llmscale.model.vllm_defaults`). The
operator asks Prometheus for ``histogram_quantile(0.95, sum by (le) (rate(..._bucket[1m])))`` over
the interactive pool. :class:`LatencyRecorder` keeps exactly those bucket counts for the whole
interactive pool in 15-second bins (one scrape interval), so that

- the signals a simulated policy sees are that query over the last four bins (one minute), and
- a minute of the run is scored by the same quantile over its own four bins.

:func:`histogram_quantile` is Prometheus's algorithm (``promql/quantile.go``, ``bucketQuantile``):
linear interpolation inside the bucket that holds the rank, the lower bound of the first bucket
taken as 0, and the highest finite bound returned when the rank falls in the ``+Inf`` bucket.

Pure module: numbers in, numbers out.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from llmscale.model.vllm_defaults import ITL_BUCKETS_S, TTFT_BUCKETS_S

__all__ = ["BIN_S", "LatencyRecorder", "histogram_quantile", "histogram_quantile_1d"]

#: Width of one bin of the recorder, seconds: the scrape interval (kube-prometheus-stack's 15 s).
BIN_S = 15.0


def histogram_quantile(
    q: float, upper_bounds: Sequence[float], counts: NDArray[np.int64] | NDArray[np.float64]
) -> NDArray[np.float64]:
    """Prometheus's ``histogram_quantile`` over rows of bucket counts.

    Args:
        q: the quantile, 0–1.
        upper_bounds: the finite bucket upper bounds (``le``), increasing, length ``B``.
        counts: observations per bucket (not cumulative), shape ``(..., B + 1)``; the last column is
            the ``+Inf`` bucket.

    Returns:
        The quantile of each row, shape ``counts.shape[:-1]``; ``nan`` for a row without
        observations.

    Raises:
        ValueError: ``counts`` does not have ``len(upper_bounds) + 1`` columns, or ``q`` is outside 0–1.
    """
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"q {q} is outside 0-1")
    c = np.asarray(counts, dtype=np.float64)
    nb = len(upper_bounds)
    if c.shape[-1] != nb + 1:
        raise ValueError(f"counts has {c.shape[-1]} columns, expected {nb + 1}")
    cum = np.cumsum(c, axis=-1)
    total = cum[..., -1]
    rank = q * total
    finite = cum[..., :nb]
    # first bucket whose cumulative count reaches the rank (sort.Search over the finite buckets)
    b = np.sum(finite < rank[..., None], axis=-1)
    bounds = np.asarray(upper_bounds, dtype=np.float64)
    in_inf = b >= nb
    bb = np.minimum(b, nb - 1)
    end = bounds[bb]
    start = np.where(bb > 0, bounds[np.maximum(bb - 1, 0)], 0.0)
    below = np.where(bb > 0, np.take_along_axis(cum, np.maximum(bb - 1, 0)[..., None], axis=-1)[..., 0], 0.0)
    here = np.take_along_axis(c, bb[..., None], axis=-1)[..., 0]
    with np.errstate(invalid="ignore", divide="ignore"):
        frac = np.where(here > 0, (rank - below) / here, 1.0)
    out = start + (end - start) * frac
    out = np.where(in_inf, bounds[-1], out)
    return np.where(total > 0, out, np.nan)


def histogram_quantile_1d(q: float, upper_bounds: Sequence[float], counts: Sequence[int]) -> float | None:
    """:func:`histogram_quantile` of one histogram in plain Python (the per-scrape path); ``None``
    when it has no observations."""
    total = 0
    for v in counts:
        total += v
    if total <= 0:
        return None
    rank = q * total
    cum = 0
    nb = len(upper_bounds)
    for i in range(nb):
        here = counts[i]
        if cum + here >= rank:
            start = upper_bounds[i - 1] if i > 0 else 0.0
            end = upper_bounds[i]
            return start + (end - start) * ((rank - cum) / here) if here > 0 else end
        cum += here
    return float(upper_bounds[-1])


class LatencyRecorder:
    """TTFT and per-token ITL bucket counts of the interactive pool, in :data:`BIN_S` bins.

    Observations are stamped with the time vLLM makes them (a first token, an output token) and
    counted in the bin of that time; observations outside ``[start_s, end_s)`` are dropped (the
    drain after the run is not scored).

    Args:
        start_s / end_s: the run, seconds since the epoch.
        itl_bounds / ttft_bounds: the buckets (vLLM's by default).

    Attributes:
        ttft / itl: flat lists of counts, bin-major: bin ``k``, bucket ``j`` at ``k × (B + 1) + j``.
        bins: number of bins.
        itl_width / ttft_width: buckets per bin (``B + 1``).
    """

    __slots__ = ("bins", "end_s", "itl", "itl_bounds", "itl_width", "start_s", "ttft", "ttft_bounds", "ttft_width")

    def __init__(
        self,
        start_s: float,
        end_s: float,
        *,
        itl_bounds: Sequence[float] = ITL_BUCKETS_S,
        ttft_bounds: Sequence[float] = TTFT_BUCKETS_S,
    ) -> None:
        if end_s <= start_s:
            raise ValueError("end_s must be after start_s")
        self.start_s = float(start_s)
        self.end_s = float(end_s)
        self.bins = max(1, math.ceil((end_s - start_s) / BIN_S - 1e-9))
        self.itl_bounds = tuple(float(b) for b in itl_bounds)
        self.ttft_bounds = tuple(float(b) for b in ttft_bounds)
        self.itl_width = len(self.itl_bounds) + 1
        self.ttft_width = len(self.ttft_bounds) + 1
        self.itl: list[int] = [0] * (self.bins * self.itl_width)
        self.ttft: list[int] = [0] * (self.bins * self.ttft_width)

    # ------------------------------------------------------------------ recording (hot path)

    def add_ttft(self, t: float, value_s: float) -> None:
        """One first token at ``t`` after ``value_s`` seconds."""
        k = int((t - self.start_s) // BIN_S)
        if 0 <= k < self.bins and t < self.end_s:
            self.ttft[k * self.ttft_width + bisect.bisect_left(self.ttft_bounds, value_s)] += 1

    def add_itl(self, t: float, gap_s: float, count: int) -> None:
        """``count`` tokens sampled at ``t``, each ``gap_s`` after its request's previous one."""
        k = int((t - self.start_s) // BIN_S)
        if 0 <= k < self.bins and t < self.end_s:
            self.itl[k * self.itl_width + bisect.bisect_left(self.itl_bounds, gap_s)] += count

    def add_itl_steps(self, t0: float, dt: float, steps: int, seqs: int) -> None:
        """``steps`` back-to-back engine steps of ``dt`` seconds from ``t0``, each sampling one token
        for each of ``seqs`` sequences (a pure-decode leap): ``steps × seqs`` gaps of ``dt``, stamped
        ``t0 + k·dt`` for ``k = 1..steps``. Bin for bin what :meth:`add_itl` would record for each
        step: a stamp on a bin boundary or on the recorder's end falls on the side its own
        arithmetic puts it."""
        start, end = self.start_s, self.end_s
        j = bisect.bisect_left(self.itl_bounds, dt)
        w = self.itl_width
        last_t = t0 + steps * dt
        k0 = int((t0 + dt - start) // BIN_S)
        k1 = int((last_t - start) // BIN_S)
        bins = self.bins
        if k0 == k1 and last_t < end:
            if 0 <= k0 < bins:
                self.itl[k0 * w + j] += steps * seqs
            return
        off = t0 - start
        span = end - start

        def before(b: int) -> int:
            # Steps whose stamp lies in a bin below b and before the end: estimated by a division,
            # then corrected by the stamps themselves (the division may round a boundary stamp the
            # other way; the estimate is off by one at most, so the loops run once or not at all).
            n = min(steps, max(0, math.ceil((min(b * BIN_S, span) - off) / dt) - 1))

            def inside(m: int) -> bool:
                t = t0 + m * dt
                return (t - start) // BIN_S < b and t < end

            while n > 0 and not inside(n):
                n -= 1
            while n < steps and inside(n + 1):
                n += 1
            return n

        prev = before(max(k0, 0))
        for k in range(max(k0, 0), min(k1, bins - 1) + 1):
            upto = before(k + 1)
            if upto > prev:
                self.itl[k * w + j] += (upto - prev) * seqs
                prev = upto

    # ------------------------------------------------------------------ reading

    def window_p95(self, t: float, window_s: float = 60.0) -> tuple[float | None, float | None]:
        """``(ttft_p95_s, itl_p95_s)`` over the bins that end within ``(t − window_s, t]`` — what
        ``histogram_quantile(0.95, sum by (le) (rate(...[1m])))`` answers at a scrape at ``t``;
        ``None`` for a window without observations."""
        k1 = int((t - self.start_s + 1e-9) // BIN_S)  # bins [k0, k1) have ended by t
        k0 = k1 - max(1, round(window_s / BIN_S))
        k0, k1 = max(k0, 0), min(k1, self.bins)
        if k1 <= k0:
            return None, None
        tw, iw = self.ttft_width, self.itl_width
        tt = [0] * tw
        it = [0] * iw
        ttft, itl = self.ttft, self.itl
        for k in range(k0, k1):
            base = k * tw
            for j in range(tw):
                tt[j] += ttft[base + j]
            base = k * iw
            for j in range(iw):
                it[j] += itl[base + j]
        return (
            histogram_quantile_1d(0.95, self.ttft_bounds, tt),
            histogram_quantile_1d(0.95, self.itl_bounds, it),
        )

    def counts(self, kind: str) -> NDArray[np.int64]:
        """Bucket counts per bin, shape ``(bins, B + 1)``; ``kind`` is ``"ttft"`` or ``"itl"``.

        Raises:
            ValueError: another kind.
        """
        if kind == "ttft":
            return np.asarray(self.ttft, dtype=np.int64).reshape(self.bins, self.ttft_width)
        if kind == "itl":
            return np.asarray(self.itl, dtype=np.int64).reshape(self.bins, self.itl_width)
        raise ValueError(f"kind is ttft or itl, not {kind!r}")

    def minute_counts(self, kind: str) -> NDArray[np.int64]:
        """Bucket counts per minute of the run (four bins each; a last partial minute keeps what it
        has), shape ``(minutes, B + 1)``."""
        c = self.counts(kind)
        per = round(60.0 / BIN_S)
        minutes = math.ceil(self.bins / per)
        pad = minutes * per - self.bins
        if pad:
            c = np.vstack([c, np.zeros((pad, c.shape[1]), dtype=np.int64)])
        out: NDArray[np.int64] = c.reshape(minutes, per, c.shape[1]).sum(axis=1)
        return out
