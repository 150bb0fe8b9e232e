"""Request traces: load the Azure LLM inference trace format and synthesise a day from it.

Format: a CSV with the columns ``TIMESTAMP,ContextTokens,GeneratedTokens`` — the
timestamps as ``YYYY-MM-DD HH:MM:SS.fffffff`` (seven fractional digits, read as UTC) — and an
optional ``Class`` column (``interactive`` or ``batch``). The package ships a real one:
``llmscale.data.trace_path("azure-llm-2023-conv")`` is the Azure LLM inference trace 2023 (CC-BY
4.0; Patel et al., "Splitwise: Efficient generative LLM inference using phase splitting", ISCA
2024); :mod:`llmscale.data` lists the bundled traces with their citations.

A day is synthesised by **time rescaling** (Brown et al., "The time-rescaling theorem and its
application to neural spike train data analysis", Neural Computation 14(2), 2002): the trace,
looped with a seeded random rotation for every pass after the first, is a point process of rate
``r0`` in "trace time" ``u``; mapping each arrival to the instant ``T`` with
``Λ(T) = r0 · u``, where ``Λ`` is the cumulative of the target rate ``λ(t) = peak × envelope(t)``,
gives a process whose rate is ``λ(t)`` and whose gaps keep the trace's own burstiness (every gap
is stretched by the local ``r0 / λ``). Request sizes stay paired with their arrivals.

Before a shaped day is made, the trace's own slow rate changes are divided out the same way (its
rate smoothed over ``detrend_window_s``, 5 minutes by default, becomes flat): the real hour rises
from about 200 to 500 requests a minute and falls back, and a day compressing that hour nine-fold
at its peak would otherwise repeat the hump every few minutes — an oscillation no real service
has. What survives is the trace's burstiness below five minutes; the envelope is the only trend.

Pure module except :func:`load_azure_csv`, which reads a file.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from llmscale.data import BUNDLED_TRACES

__all__ = [
    "TRACE_CITATION",
    "DiurnalEnvelope",
    "Envelope",
    "Trace",
    "TraceFormatError",
    "load_azure_csv",
    "synthesize",
]

#: Attribution to print wherever the Azure trace or figures derived from it are shown (the
#: bundled Azure trace's :attr:`~llmscale.data.BundledTrace.attribution`).
TRACE_CITATION = BUNDLED_TRACES["azure-llm-2023-conv"].attribution


class TraceFormatError(ValueError):
    """The CSV is not in the Azure trace format (missing column, bad timestamp, bad class)."""


@dataclass(frozen=True)
class Trace:
    """A list of requests, sorted by arrival.

    Attributes:
        arrival_s: arrival times, seconds since the Unix epoch, float64, shape ``(n,)``, sorted.
        prompt_tokens: prompt (context) tokens of each request, int64, shape ``(n,)``.
        output_tokens: tokens each request generates, int64, shape ``(n,)``.
        is_batch: ``True`` for batch requests (routed to the batch pool), bool, shape ``(n,)``.
        start_s: start of the traced interval, seconds since the epoch (≤ the first arrival).
        duration_s: length of the traced interval, seconds.
        source: where the requests came from (file name and how they were shaped).
    """

    arrival_s: NDArray[np.float64]
    prompt_tokens: NDArray[np.int64]
    output_tokens: NDArray[np.int64]
    is_batch: NDArray[np.bool_]
    start_s: float
    duration_s: float
    source: str = ""

    def __post_init__(self) -> None:
        n = len(self.arrival_s)
        if not (len(self.prompt_tokens) == len(self.output_tokens) == len(self.is_batch) == n):
            raise ValueError("Trace columns have different lengths")
        if n and np.any(np.diff(self.arrival_s) < 0):
            raise ValueError("Trace arrivals are not sorted")

    def __len__(self) -> int:
        return len(self.arrival_s)

    @property
    def end_s(self) -> float:
        """End of the traced interval, seconds since the epoch."""
        return self.start_s + self.duration_s

    @property
    def mean_rate_rps(self) -> float:
        """Mean arrival rate over the interval, requests/s."""
        return len(self) / self.duration_s if self.duration_s > 0 else 0.0


def _parse_timestamp(text: str) -> float:
    """Parse ``YYYY-MM-DD HH:MM:SS[.fffffff]`` (UTC) to seconds since the epoch.

    Python's ``datetime`` takes at most six fractional digits; the Azure trace has seven
    (100 ns ticks), so the fraction is parsed separately.
    """
    text = text.strip()
    main, _, frac = text.partition(".")
    try:
        whole = datetime.strptime(main, "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC).timestamp()
    except ValueError:
        try:
            whole = datetime.fromisoformat(main).replace(tzinfo=UTC).timestamp()
        except ValueError:
            raise TraceFormatError(f"Bad TIMESTAMP {text!r}") from None
    if frac:
        if not frac.isdigit():
            raise TraceFormatError(f"Bad TIMESTAMP {text!r}")
        whole += int(frac) / 10 ** len(frac)
    return whole


def load_azure_csv(path: str | Path) -> Trace:
    """Read a trace CSV in the Azure LLM inference trace format.

    Columns ``TIMESTAMP``, ``ContextTokens``, ``GeneratedTokens`` (any order, as named in the
    header) and optionally ``Class`` (``interactive``/``batch``, case-insensitive; empty means
    interactive). The interval starts at the first arrival and ends at the last; requests are sorted
    by arrival (stable).

    Raises:
        TraceFormatError: a required column is missing, a timestamp or token count does not parse,
            a token count is negative, a class is unknown, or the file has no requests.
        OSError: the file cannot be read.
    """
    path = Path(path)
    with path.open(newline="", encoding="utf-8") as fh:
        reader = csv.reader(fh)
        try:
            header = [h.strip() for h in next(reader)]
        except StopIteration:
            raise TraceFormatError(f"{path}: empty file") from None
        need = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
        missing = [c for c in need if c not in header]
        if missing:
            raise TraceFormatError(f"{path}: missing column(s) {', '.join(missing)}")
        i_ts, i_ctx, i_gen = (header.index(c) for c in need)
        i_cls = header.index("Class") if "Class" in header else None
        times: list[float] = []
        ctx: list[int] = []
        gen: list[int] = []
        batch: list[bool] = []
        for lineno, row in enumerate(reader, start=2):
            if not row or all(not c.strip() for c in row):
                continue
            try:
                times.append(_parse_timestamp(row[i_ts]))
                c, g = int(row[i_ctx]), int(row[i_gen])
            except (IndexError, ValueError) as exc:
                raise TraceFormatError(f"{path}:{lineno}: {exc}") from None
            if c < 0 or g < 0:
                raise TraceFormatError(f"{path}:{lineno}: negative token count")
            ctx.append(c)
            gen.append(g)
            if i_cls is not None:
                cls = row[i_cls].strip().lower() if i_cls < len(row) else ""
                if cls not in ("", "interactive", "batch"):
                    raise TraceFormatError(f"{path}:{lineno}: Class {row[i_cls]!r} is not interactive or batch")
                batch.append(cls == "batch")
            else:
                batch.append(False)
    if not times:
        raise TraceFormatError(f"{path}: no requests")
    t = np.asarray(times, dtype=np.float64)
    order = np.argsort(t, kind="stable")
    t = t[order]
    return Trace(
        arrival_s=t,
        prompt_tokens=np.asarray(ctx, dtype=np.int64)[order],
        output_tokens=np.asarray(gen, dtype=np.int64)[order],
        is_batch=np.asarray(batch, dtype=np.bool_)[order],
        start_s=float(t[0]),
        duration_s=float(t[-1] - t[0]),
        source=path.name,
    )


@dataclass(frozen=True)
class DiurnalEnvelope:
    """A daily load envelope: the fraction of the peak rate at each hour of the (UTC) day.

    ``envelope(h) = trough + (1 − trough) × ((1 + cos(2π (h − peak_hour) / 24)) / 2) ** sharpness``

    It is 1 at ``peak_hour`` and ``trough_fraction`` twelve hours later. This is a *synthetic*
    shape, not a measurement: interactive services commonly show one afternoon peak and an overnight
    trough (e.g. the week-long Azure LLM inference trace 2024 of Stojkovic et al., "DynamoLLM",
    HPCA 2025, Fig. 2); ``sharpness`` > 1 narrows the busy hours.

    Attributes:
        peak_hour: hour of the day (0–24, UTC) of the peak.
        trough_fraction: rate at the trough as a fraction of the peak, 0–1.
        sharpness: exponent of the raised cosine (1 = plain cosine).
    """

    peak_hour: float = 15.0
    trough_fraction: float = 0.25
    sharpness: float = 1.5

    def __post_init__(self) -> None:
        if not 0 <= self.trough_fraction <= 1:
            raise ValueError("trough_fraction must be within 0–1")
        if self.sharpness <= 0:
            raise ValueError("sharpness must be positive")

    def __call__(self, seconds_of_day: NDArray[np.float64]) -> NDArray[np.float64]:
        """Fraction of the peak rate at each time, shape of the input (seconds after 00:00 UTC)."""
        h = np.asarray(seconds_of_day, dtype=np.float64) / 3600.0
        wave = ((1.0 + np.cos(2.0 * np.pi * (h - self.peak_hour) / 24.0)) / 2.0) ** self.sharpness
        return self.trough_fraction + (1.0 - self.trough_fraction) * wave


#: A load shape: seconds after 00:00 UTC (array) -> fraction of the peak rate (array, 0–1).
Envelope = Callable[[NDArray[np.float64]], NDArray[np.float64]]


def _detrended(t: NDArray[np.float64], start: float, duration: float, window_s: float) -> NDArray[np.float64]:
    """Map arrival times through the trace's own smoothed cumulative rate so that rate is flat.

    Rate per minute (the last bin as wide as what is left), smoothed by a centred moving average of
    ``window_s``; the cumulative ``Λ_b`` maps ``t`` to ``start + Λ_b(t) × duration / n``.
    """
    n = len(t)
    edges = np.append(np.arange(0.0, duration, 60.0), duration) + start
    counts = np.histogram(t, bins=edges)[0].astype(np.float64)
    widths = np.diff(edges)
    k = max(1, round(window_s / 60.0))
    kernel = np.ones(k)
    pad = (k // 2, k - 1 - k // 2)
    smooth = np.convolve(np.pad(counts, pad, mode="edge"), kernel, "valid") / np.convolve(
        np.pad(widths, pad, mode="edge"), kernel, "valid"
    )
    smooth = np.maximum(smooth, 1e-9)
    cum = np.concatenate(([0.0], np.cumsum(smooth * widths)))
    mapped: NDArray[np.float64] = start + np.interp(t, edges, cum) * duration / cum[-1] * (n - 1) / n
    return mapped


def _midnight_utc(t: float) -> float:
    return float(math.floor(t / 86_400.0) * 86_400.0)


def synthesize(
    base: Trace,
    *,
    duration_s: float,
    peak_rps: float | None = None,
    envelope: Envelope | None = None,
    seed: int = 0,
    start_s: float | None = None,
    batch_fraction: float = 0.0,
    detrend_window_s: float | None = 300.0,
) -> Trace:
    """Make a trace of ``duration_s`` from ``base`` by time rescaling (see the module docstring).

    Args:
        base: the real trace: request sizes and the shape of its gaps are kept.
        duration_s: length of the result, seconds (> 0).
        peak_rps: the rate at the envelope's peak, requests/s; ``None`` = the base's mean rate.
        envelope: the shape (a :class:`DiurnalEnvelope` or any :data:`Envelope`); ``None`` = a flat rate (shape ``none``: with the default peak and
            a duration no longer than the base, the base's own arrivals come out unchanged, shifted
            to ``start_s``).
        seed: seeds the rotation of every pass of the base after the first, and the batch marks.
        start_s: start of the result, seconds since the epoch; default: the base's start for a flat
            rate, midnight (UTC) of the base's first day for a diurnal envelope.
        batch_fraction: fraction (0–1) of requests additionally marked batch, drawn with ``seed``;
            requests the base already marks batch stay batch.
        detrend_window_s: flatten the base's rate smoothed over this window (seconds) before
            shaping, see the module docstring; ``None`` or 0 keeps the base's own rate changes.
            Ignored for a flat rate (``envelope=None``): a replay keeps the trace as it was.

    Returns:
        A new :class:`Trace`; its ``source`` says how it was made.

    Raises:
        ValueError: an empty base, a base shorter than one second, a non-positive duration or
            peak, or a batch fraction outside 0–1.
    """
    n0 = len(base)
    if n0 < 2 or base.duration_s < 1.0:
        raise ValueError("The base trace needs at least two requests over at least one second")
    if duration_s <= 0:
        raise ValueError("duration_s must be positive")
    if peak_rps is not None and peak_rps <= 0:
        raise ValueError("peak_rps must be positive")
    if not 0.0 <= batch_fraction <= 1.0:
        raise ValueError("batch_fraction must be within 0–1")
    rng = np.random.default_rng(seed)
    base_t = base.arrival_s
    if envelope is not None and detrend_window_s:
        base_t = _detrended(base_t, base.start_s, base.duration_s, detrend_window_s)
    # Gaps of one pass; the wrap-around gap closes the loop at the base's mean gap.
    gaps = np.diff(base_t)
    period = float(base.duration_s + base.duration_s / (n0 - 1))
    gaps = np.append(gaps, period - base.duration_s)
    r0 = n0 / period  # requests per second of trace time
    peak = float(peak_rps) if peak_rps is not None else r0
    if start_s is None:
        start_s = base.start_s if envelope is None else _midnight_utc(base.start_s)

    # Cumulative target intensity Λ(t) on a one-second grid (exact for a flat rate).
    grid = np.arange(0.0, duration_s + 1.0, 1.0)
    if envelope is None:
        cum = peak * grid
    else:
        mid = (start_s + grid[:-1] + 0.5) % 86_400.0
        rate = peak * envelope(mid)
        cum = np.concatenate(([0.0], np.cumsum(rate)))
    total = float(cum[-1])  # expected requests in the result

    # Base passes in trace time until they cover Λ(duration) / r0.
    need_u = total / r0
    passes = max(1, math.ceil(need_u / period) + 1)
    u_parts: list[NDArray[np.float64]] = []
    idx_parts: list[NDArray[np.int64]] = []
    offset = 0.0
    first = base_t[0]
    for p in range(passes):
        shift = 0 if p == 0 else int(rng.integers(0, n0))
        idx = np.roll(np.arange(n0, dtype=np.int64), -shift)
        g = np.roll(gaps, -shift)
        # Arrival k of this pass sits at the sum of the gaps before it.
        u = offset + np.concatenate(([0.0], np.cumsum(g[:-1])))
        if p == 0:
            u = offset + (base_t - first)
        u_parts.append(u)
        idx_parts.append(idx)
        offset += period
    u_all = np.concatenate(u_parts)
    idx_all = np.concatenate(idx_parts)
    keep = u_all * r0 < total
    u_all, idx_all = u_all[keep], idx_all[keep]
    t = np.interp(u_all * r0, cum, grid)
    batch = base.is_batch[idx_all].copy()
    if batch_fraction > 0:
        batch |= rng.random(len(t)) < batch_fraction
    if envelope is None:
        shape = "flat"
    elif isinstance(envelope, DiurnalEnvelope):
        shape = f"diurnal peak {envelope.peak_hour:g}h UTC, trough {envelope.trough_fraction:g} of peak"
    else:
        shape = "shaped"
    return Trace(
        arrival_s=start_s + t,
        prompt_tokens=base.prompt_tokens[idx_all].copy(),
        output_tokens=base.output_tokens[idx_all].copy(),
        is_batch=batch,
        start_s=float(start_s),
        duration_s=float(duration_s),
        source=f"{base.source} time-rescaled: {shape}, peak {peak:.3g} req/s, seed {seed}",
    )
