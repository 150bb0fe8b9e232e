"""Request traces: load the Azure and Mooncake trace formats and synthesise days from them.

Formats (DESIGN.md):

- **Azure CSV** — the columns ``TIMESTAMP,ContextTokens,GeneratedTokens`` (timestamps
  ``YYYY-MM-DD HH:MM:SS.fffffff``, seven fractional digits, read as UTC) and an optional ``Class``
  column (``interactive`` or ``batch``): :func:`load_azure_csv`.
- **Mooncake JSONL** — one JSON object a line with ``timestamp`` (milliseconds from the trace's
  start), ``input_length`` and ``output_length`` (tokens) and ``hash_ids`` (one id per 512-token
  prompt block; equal ids are equal prefixes, which prefix caching can reuse):
  :func:`load_mooncake_jsonl`.

:func:`load_trace` picks the format from the file. Each loaded trace carries the citation of the
dataset it comes from when the file is one of the known public traces (:data:`KNOWN_TRACES`), and
says so when it is not. The package ships one trace of each format (:mod:`llmscale.data`:
``trace_path("azure-llm-2023-conv")``, ``trace_path("mooncake-conversation")``, with their
citations).

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

Pure module except the loaders, which read a file.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import ClassVar

import numpy as np
from numpy.typing import NDArray

from llmscale.data import BUNDLED_TRACES

__all__ = [
    "AZURE_2023_CITATION",
    "KNOWN_TRACES",
    "MOONCAKE_CITATION",
    "TRACE_CITATION",
    "DiurnalEnvelope",
    "Envelope",
    "LogNormalLengths",
    "Trace",
    "TraceFormatError",
    "WeeklyEnvelope",
    "citation_for",
    "load_azure_csv",
    "load_mooncake_jsonl",
    "load_trace",
    "resample_lengths",
    "synthesize",
]

#: Attribution of the Azure LLM inference trace 2023 (Azure Public Dataset): the bundled trace's
#: :attr:`~llmscale.data.BundledTrace.attribution`.
AZURE_2023_CITATION = BUNDLED_TRACES["azure-llm-2023-conv"].attribution

#: Attribution of the Mooncake traces (kvcache-ai/Mooncake, ``FAST25-release/traces``): the bundled
#: trace's :attr:`~llmscale.data.BundledTrace.attribution`.
MOONCAKE_CITATION = BUNDLED_TRACES["mooncake-conversation"].attribution

#: The Azure citation under its old name (the demo and older callers).
TRACE_CITATION = AZURE_2023_CITATION

#: File names of the public traces this module knows, and the attribution each one needs.
KNOWN_TRACES: dict[str, str] = {
    "azure-llm-2023-conv.csv": AZURE_2023_CITATION,
    "AzureLLMInferenceTrace_conv.csv": AZURE_2023_CITATION,
    "AzureLLMInferenceTrace_code.csv": AZURE_2023_CITATION,
    "mooncake-conversation-trace.jsonl": MOONCAKE_CITATION,
    "conversation_trace.jsonl": MOONCAKE_CITATION,
}

#: Tokens per prompt block of the Mooncake traces' ``hash_ids``.
MOONCAKE_BLOCK_TOKENS = 512


def citation_for(path: str | Path) -> str:
    """The attribution of the trace file ``path`` (by its name), or ``""`` for a trace this module
    does not know (the caller says so rather than credit a dataset it did not replay)."""
    return KNOWN_TRACES.get(Path(path).name, "")


class TraceFormatError(ValueError):
    """The file is not in a trace format (missing column or key, bad timestamp, bad class)."""


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
        hash_offsets / hash_ids: the prompt blocks' hashes as a CSR pair — request ``i``'s block ids
            are ``hash_ids[hash_offsets[i]:hash_offsets[i + 1]]``, int64, shapes ``(n + 1,)`` and
            ``(blocks,)``; ``None`` when the trace carries none (no prefix caching is modelled).
        block_tokens: tokens per hashed block (512 in the Mooncake traces).
        citation: the attribution of the dataset the requests come from (``""``: not a known
            public trace).
    """

    arrival_s: NDArray[np.float64]
    prompt_tokens: NDArray[np.int64]
    output_tokens: NDArray[np.int64]
    is_batch: NDArray[np.bool_]
    start_s: float
    duration_s: float
    source: str = ""
    hash_offsets: NDArray[np.int64] | None = None
    hash_ids: NDArray[np.int64] | None = None
    block_tokens: int = MOONCAKE_BLOCK_TOKENS
    citation: str = ""

    def __post_init__(self) -> None:
        n = len(self.arrival_s)
        if not (len(self.prompt_tokens) == len(self.output_tokens) == len(self.is_batch) == n):
            raise ValueError("Trace columns have different lengths")
        if n and np.any(np.diff(self.arrival_s) < 0):
            raise ValueError("Trace arrivals are not sorted")
        if (self.hash_offsets is None) != (self.hash_ids is None):
            raise ValueError("hash_offsets and hash_ids come together")
        if (
            self.hash_offsets is not None
            and self.hash_ids is not None
            and (len(self.hash_offsets) != n + 1 or self.hash_offsets[-1] != len(self.hash_ids))
        ):
            raise ValueError("hash_offsets does not index hash_ids")
        if self.block_tokens < 1:
            raise ValueError("block_tokens must be positive")

    @property
    def has_hashes(self) -> bool:
        """Whether the trace carries prompt-block hashes."""
        return self.hash_ids is not None

    def select(self, idx: NDArray[np.int64], *, arrival_s: NDArray[np.float64] | None = None,
               is_batch: NDArray[np.bool_] | None = None, start_s: float | None = None,
               duration_s: float | None = None, source: str | None = None,
               hash_offset: NDArray[np.int64] | None = None) -> Trace:
        """The requests ``idx`` (in that order) as a new trace, hashes carried along.

        Args:
            idx: request indices, int64, shape ``(m,)``.
            arrival_s: new arrival times, shape ``(m,)``, sorted (default: the selected ones).
            is_batch: new batch marks (default: the selected ones).
            start_s / duration_s / source: replace the interval and the description.
            hash_offset: added to every block id of each selected request, shape ``(m,)`` (keeps
                the passes of a looped trace from sharing prefixes they never shared).
        """
        ho = hi = None
        if self.hash_offsets is not None and self.hash_ids is not None:
            ho, hi = _gather_rows(self.hash_offsets, self.hash_ids, idx, hash_offset)
        return Trace(
            arrival_s=self.arrival_s[idx] if arrival_s is None else arrival_s,
            prompt_tokens=self.prompt_tokens[idx].copy(),
            output_tokens=self.output_tokens[idx].copy(),
            is_batch=self.is_batch[idx].copy() if is_batch is None else is_batch,
            start_s=self.start_s if start_s is None else float(start_s),
            duration_s=self.duration_s if duration_s is None else float(duration_s),
            source=self.source if source is None else source,
            hash_offsets=ho,
            hash_ids=hi,
            block_tokens=self.block_tokens,
            citation=self.citation,
        )

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


def _gather_rows(
    offsets: NDArray[np.int64],
    ids: NDArray[np.int64],
    idx: NDArray[np.int64],
    add: NDArray[np.int64] | None = None,
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Rows ``idx`` of the CSR pair ``(offsets, ids)`` as a new CSR pair; ``add[i]`` (if given) is
    added to every id of output row ``i``."""
    lens = (offsets[1:] - offsets[:-1])[idx]
    out_off = np.concatenate(([0], np.cumsum(lens))).astype(np.int64)
    starts = offsets[:-1][idx]
    # position p of output row i is starts[i] + p
    row = np.repeat(np.arange(len(idx), dtype=np.int64), lens)
    pos = np.arange(int(out_off[-1]), dtype=np.int64) - out_off[:-1][row]
    out_ids = ids[starts[row] + pos]
    if add is not None:
        out_ids = out_ids + np.asarray(add, dtype=np.int64)[row]
    return out_off, out_ids


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
        citation=citation_for(path),
    )


def load_mooncake_jsonl(path: str | Path, *, start_s: float = 0.0) -> Trace:
    """Read a trace in the Mooncake JSONL format.

    One JSON object a line: ``timestamp`` (milliseconds from the trace's start, ≥ 0),
    ``input_length`` and ``output_length`` (tokens, ≥ 0) and optionally ``hash_ids`` (a list of
    integer block ids, one per :data:`MOONCAKE_BLOCK_TOKENS`-token prompt block). Blank lines are
    skipped. The trace has no calendar date: its start is ``start_s`` (default the Unix epoch,
    a midnight UTC). All requests are interactive. The interval runs from the first arrival to the
    last; requests are sorted by arrival (stable).

    Raises:
        TraceFormatError: a line is not a JSON object, a key is missing or of the wrong type, a
            value is negative, or the file has no requests (the message names the line).
        OSError: the file cannot be read.
    """
    path = Path(path)
    times: list[float] = []
    ins: list[int] = []
    outs: list[int] = []
    offsets: list[int] = [0]
    ids: list[int] = []
    any_hashes = False
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise TraceFormatError(f"{path}:{lineno}: not JSON ({exc.msg})") from None
            if not isinstance(row, dict):
                raise TraceFormatError(f"{path}:{lineno}: not a JSON object")
            try:
                ts, i_len, o_len = row["timestamp"], row["input_length"], row["output_length"]
            except KeyError as exc:
                raise TraceFormatError(f"{path}:{lineno}: missing key {exc.args[0]!r}") from None
            for key, value in (("timestamp", ts), ("input_length", i_len), ("output_length", o_len)):
                if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                    raise TraceFormatError(f"{path}:{lineno}: {key} {value!r} is not a non-negative number")
            if int(i_len) != i_len or int(o_len) != o_len:
                raise TraceFormatError(f"{path}:{lineno}: token counts must be whole numbers")
            hashes = row.get("hash_ids")
            if hashes is not None:
                if not isinstance(hashes, list) or not all(
                    isinstance(h, int) and not isinstance(h, bool) for h in hashes
                ):
                    raise TraceFormatError(f"{path}:{lineno}: hash_ids must be a list of integers")
                any_hashes = True
                ids.extend(hashes)
            offsets.append(len(ids))
            times.append(start_s + float(ts) / 1000.0)
            ins.append(int(i_len))
            outs.append(int(o_len))
    if not times:
        raise TraceFormatError(f"{path}: no requests")
    t = np.asarray(times, dtype=np.float64)
    order = np.argsort(t, kind="stable").astype(np.int64)
    ho = hi = None
    if any_hashes:
        ho, hi = _gather_rows(np.asarray(offsets, dtype=np.int64), np.asarray(ids, dtype=np.int64), order)
    return Trace(
        arrival_s=t[order],
        prompt_tokens=np.asarray(ins, dtype=np.int64)[order],
        output_tokens=np.asarray(outs, dtype=np.int64)[order],
        is_batch=np.zeros(len(t), dtype=np.bool_),
        start_s=float(t.min()),
        duration_s=float(t.max() - t.min()),
        source=path.name,
        hash_offsets=ho,
        hash_ids=hi,
        block_tokens=MOONCAKE_BLOCK_TOKENS,
        citation=citation_for(path),
    )


def load_trace(path: str | Path) -> Trace:
    """Read a trace in either format: ``.jsonl`` (or a first character ``{``) is Mooncake JSONL,
    anything else the Azure CSV.

    Raises:
        TraceFormatError: as the format's loader.
        OSError: the file cannot be read.
    """
    path = Path(path)
    if path.suffix.lower() == ".jsonl":
        return load_mooncake_jsonl(path)
    with path.open(encoding="utf-8") as fh:
        head = fh.read(64).lstrip()
    if head.startswith("{"):
        return load_mooncake_jsonl(path)
    return load_azure_csv(path)


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


#: Monday 1970-01-05 00:00 UTC, seconds since the epoch (the epoch itself was a Thursday).
FIRST_MONDAY_S = 4 * 86_400.0

#: Seconds in a week.
WEEK_S = 7 * 86_400.0


@dataclass(frozen=True)
class WeeklyEnvelope:
    """A weekly load envelope: a daily shape, scaled down on weekend days.

    ``envelope(t) = day(t mod 1 day) × (weekend_fraction if t falls on a weekend day else 1)``,
    ``t`` in seconds since Monday 00:00 UTC. Like :class:`DiurnalEnvelope` this is a *synthetic*
    shape, not a measurement: business-facing services commonly see quieter weekends (the week-long
    Azure LLM inference trace 2024, Stojkovic et al., "DynamoLLM", HPCA 2025, Fig. 2, shows lower
    weekend peaks); it gives a forecast a weekly pattern to learn.

    Attributes:
        day: the daily shape (its peak is the weekday peak).
        weekend_fraction: weekend rate as a fraction of the weekday rate at the same hour, 0–1.
        weekend_days: days of the week (0 = Monday) scaled by ``weekend_fraction``.
    """

    day: DiurnalEnvelope = DiurnalEnvelope()
    weekend_fraction: float = 0.5
    weekend_days: tuple[int, ...] = (5, 6)

    #: the envelope repeats every week, counted from a Monday 00:00 UTC (see :func:`synthesize`).
    period_s: ClassVar[float] = WEEK_S
    epoch_s: ClassVar[float] = FIRST_MONDAY_S

    def __post_init__(self) -> None:
        if not 0 <= self.weekend_fraction <= 1:
            raise ValueError("weekend_fraction must be within 0–1")
        if any(not 0 <= d <= 6 for d in self.weekend_days):
            raise ValueError("weekend_days are 0 (Monday) to 6 (Sunday)")

    def __call__(self, seconds_of_week: NDArray[np.float64]) -> NDArray[np.float64]:
        """Fraction of the weekday peak at each time, shape of the input (seconds after Monday
        00:00 UTC)."""
        s = np.asarray(seconds_of_week, dtype=np.float64)
        day = (s // 86_400.0).astype(np.int64) % 7
        scale = np.where(np.isin(day, self.weekend_days), self.weekend_fraction, 1.0)
        out: NDArray[np.float64] = self.day(s % 86_400.0) * scale
        return out


#: A load shape: time (array, seconds after 00:00 UTC; or, for an envelope with ``period_s`` and
#: ``epoch_s`` attributes such as :class:`WeeklyEnvelope`, seconds after the start of its period)
#: -> fraction of the peak rate (array, 0–1).
Envelope = Callable[[NDArray[np.float64]], NDArray[np.float64]]


def _phase(envelope: Envelope, t: NDArray[np.float64]) -> NDArray[np.float64]:
    """The argument ``envelope`` expects at absolute times ``t`` (seconds since the epoch)."""
    period = float(getattr(envelope, "period_s", 86_400.0))
    epoch = float(getattr(envelope, "epoch_s", 0.0))
    out: NDArray[np.float64] = (t - epoch) % period
    return out


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


@dataclass(frozen=True)
class LogNormalLengths:
    """Token counts drawn from a log-normal distribution, rounded and clipped.

    Attributes:
        median: the median, tokens (``exp(μ)``).
        sigma: the standard deviation of the log (σ).
        low / high: the clip range, tokens (inclusive).
    """

    median: float
    sigma: float
    low: int
    high: int

    def __post_init__(self) -> None:
        if self.median <= 0 or self.sigma < 0 or not 0 <= self.low <= self.high:
            raise ValueError("LogNormalLengths needs median > 0, sigma ≥ 0 and 0 ≤ low ≤ high")

    def draw(self, rng: np.random.Generator, n: int) -> NDArray[np.int64]:
        """``n`` token counts, int64, shape ``(n,)``."""
        x = rng.lognormal(math.log(self.median), self.sigma, n)
        out: NDArray[np.int64] = np.clip(np.rint(x), self.low, self.high).astype(np.int64)
        return out

    def describe(self) -> str:
        """E.g. ``log-normal(median 2500, σ 0.5) clipped to [512, 7168]``."""
        return f"log-normal(median {self.median:g}, σ {self.sigma:g}) clipped to [{self.low}, {self.high}]"


def resample_lengths(trace: Trace, prompt: LogNormalLengths, output: LogNormalLengths, seed: int) -> Trace:
    """Keep ``trace``'s arrival times and draw new request sizes: a workload with a real trace's
    timing and a stated size distribution (e.g. prefill-heavy traffic: prompts of a few thousand
    tokens, outputs of tens).

    Prompt and output are drawn independently with ``seed``; block hashes are dropped (they
    described the old prompts). ``source`` says what was drawn; ``citation`` stays the trace's (its
    timing is still the dataset's).
    """
    rng = np.random.default_rng(seed)
    n = len(trace)
    return Trace(
        arrival_s=trace.arrival_s.copy(),
        prompt_tokens=prompt.draw(rng, n),
        output_tokens=output.draw(rng, n),
        is_batch=trace.is_batch.copy(),
        start_s=trace.start_s,
        duration_s=trace.duration_s,
        source=f"{trace.source} with prompts {prompt.describe()} and outputs {output.describe()}, seed {seed}",
        citation=trace.citation,
    )


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
            Every pass after the first also gets its own block-hash ids (offset by the pass number
            × the base's largest id + 1): the base's prefix reuse repeats within each pass, and a
            later pass does not hit prefixes cached from an earlier one.
        start_s: start of the result, seconds since the epoch; default: the base's start for a flat
            rate, midnight (UTC) of the base's first day for a diurnal envelope, the Monday 00:00
            UTC of the base's first week for a weekly one.
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
        if envelope is None:
            start_s = base.start_s
        else:
            env_period = float(getattr(envelope, "period_s", 86_400.0))
            epoch = float(getattr(envelope, "epoch_s", 0.0))
            start_s = float(math.floor((base.start_s - epoch) / env_period) * env_period + epoch)

    # Cumulative target intensity Λ(t) on a one-second grid (exact for a flat rate).
    grid = np.arange(0.0, duration_s + 1.0, 1.0)
    if envelope is None:
        cum = peak * grid
    else:
        mid = _phase(envelope, start_s + grid[:-1] + 0.5)
        rate = peak * envelope(mid)
        cum = np.concatenate(([0.0], np.cumsum(rate)))
    total = float(cum[-1])  # expected requests in the result

    # Base passes in trace time until they cover Λ(duration) / r0.
    need_u = total / r0
    passes = max(1, math.ceil(need_u / period) + 1)
    u_parts: list[NDArray[np.float64]] = []
    idx_parts: list[NDArray[np.int64]] = []
    pass_parts: list[NDArray[np.int64]] = []
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
        pass_parts.append(np.full(n0, p, dtype=np.int64))
        offset += period
    u_all = np.concatenate(u_parts)
    idx_all = np.concatenate(idx_parts)
    pass_all = np.concatenate(pass_parts)
    keep = u_all * r0 < total
    u_all, idx_all, pass_all = u_all[keep], idx_all[keep], pass_all[keep]
    t = np.interp(u_all * r0, cum, grid)
    batch = base.is_batch[idx_all].copy()
    if batch_fraction > 0:
        batch |= rng.random(len(t)) < batch_fraction
    if envelope is None:
        shape = "flat"
    elif isinstance(envelope, DiurnalEnvelope):
        shape = f"diurnal peak {envelope.peak_hour:g}h UTC, trough {envelope.trough_fraction:g} of peak"
    elif isinstance(envelope, WeeklyEnvelope):
        d = envelope.day
        shape = (
            f"weekly from Monday 00:00 UTC: diurnal peak {d.peak_hour:g}h UTC, trough "
            f"{d.trough_fraction:g} of peak, weekends {envelope.weekend_fraction:g} of weekdays"
        )
    else:
        shape = "shaped"
    hash_offset = None
    if base.hash_ids is not None and len(base.hash_ids):
        hash_offset = pass_all * (int(base.hash_ids.max()) + 1)
    return base.select(
        idx_all,
        arrival_s=start_s + t,
        is_batch=batch,
        start_s=float(start_s),
        duration_s=float(duration_s),
        # Flat: every moment runs at the one rate, so there is no peak to speak of (a replay's own
        # busiest minute is far above it); shaped: the envelope's top.
        source=(f"{base.source} time-rescaled: flat at {peak:.3g} req/s, seed {seed}" if envelope is None
                else f"{base.source} time-rescaled: {shape}, peak {peak:.3g} req/s, seed {seed}"),
        hash_offset=hash_offset,
    )
