"""The fleet cost report of ``llmscale report`` (issue 23): pure figures over fetched series.

Input: every LLMDeployment's settings (:class:`Deployment`, from the API server) and its recorded
series (:class:`Recorded`, from Prometheus: the operator's per-pool gauges and the engines' prompt
tokens), and the time of the report (``now``, Unix seconds; nothing here reads a clock). Output:
per deployment and for the fleet, for each window (7 and 30 days by default), :class:`Figures` —
GPU-hours, busy share, KV use, goodput per GPU-hour, $/M tokens, the same traffic priced at a
managed API, and a one-line build-or-buy verdict. docs/report.md gives the formulas:

- each sample at ``t`` stands for the ``step_s`` before it (a range query's step), so a gauge's
  time integral over a window is the sum of the samples inside it times ``step_s``;
- GPU-hours: ``llmscale_gpus`` integrated, both pools; busy share and KV use: their samples
  weighted by the GPUs held then (an idle night on one replica weighs less than a busy day on ten);
- tokens: ``llmscale_tokens_per_second`` integrated (output tokens, both pools); goodput: the
  interactive pool's ``llmscale_goodput_tokens_per_second`` (tokens of minutes that met the SLO)
  plus the batch pool's tokens (batch work has no latency SLO); input tokens: the engines' prompt
  tokens per second integrated (absent: the managed price counts output tokens only, and says so);
- cost: GPU-hours × ``spec.cost.gpuHourUsd``; $/M tokens: cost over output tokens in millions;
  managed API: input and output millions at the reference price (:class:`Price`);
- verdict: **build** when self-hosting costs less than the managed API for the same traffic,
  **buy** when it costs more, **no traffic** when nothing was generated. At a busy share under
  :data:`LOW_BUSY` a "buy" verdict adds that consolidating (fuller GPUs) comes first.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

__all__ = [
    "DAY_S",
    "LOW_BUSY",
    "Deployment",
    "Figures",
    "FleetReport",
    "Price",
    "Recorded",
    "Row",
    "Samples",
    "build_report",
    "window_figures",
]

DAY_S = 86400.0
#: A busy share under this is a floor held at low utilisation (the verdict says so).
LOW_BUSY = 0.3
#: Metric keys of :class:`Recorded` (per pool, ``interactive`` and ``batch``).
POOL_METRICS = ("gpus", "busy_share", "kv_mean", "tokens_per_second", "goodput_tokens_per_second")

#: A series: ``(unix seconds, value)`` samples in time order.
Samples = Sequence[tuple[float, float]]


@dataclass(frozen=True, slots=True)
class Price:
    """A managed API's list price, USD per million input (prompt) and output (generated) tokens."""

    input_usd_per_million: float
    output_usd_per_million: float

    def __post_init__(self) -> None:
        if not (self.input_usd_per_million >= 0 and self.output_usd_per_million >= 0):
            raise ValueError(f"a reference price is USD per million tokens, 0 or more: {self}")


@dataclass(frozen=True, slots=True)
class Deployment:
    """One LLMDeployment's settings the report needs (from its spec)."""

    namespace: str
    name: str
    model: str
    engine: str
    """Engine type, image and args, one string: equal strings serve alike (consolidation)."""
    gpus_per_replica: int
    min_replicas: int
    gpu_hour_usd: float

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)


@dataclass(frozen=True, slots=True)
class Recorded:
    """One deployment's recorded series.

    ``pools[pool][metric]``: the operator's gauges (:data:`POOL_METRICS`), ``pool`` ``interactive``
    or ``batch``; ``input_tokens_per_second`` and ``requests_per_second``: the engines' prompt tokens
    and finished requests per second, summed over the deployment's pods (empty when the engines do
    not export them).
    """

    pools: Mapping[str, Mapping[str, Samples]]
    input_tokens_per_second: Samples = ()
    requests_per_second: Samples = ()
    """The engines' finished requests per second (consolidation's recorded traffic)."""


@dataclass(frozen=True, slots=True)
class Figures:
    """The figures of one deployment (or the fleet) over one window."""

    window_days: float
    gpu_hours: float
    busy_share: float | None
    kv_use: float | None
    output_tokens: float
    input_tokens: float | None
    goodput_tokens: float
    cost_usd: float
    reference_usd: float | None

    @property
    def goodput_per_gpu_hour(self) -> float | None:
        """Tokens generated at SLO per GPU-hour."""
        return self.goodput_tokens / self.gpu_hours if self.gpu_hours > 0 else None

    @property
    def usd_per_million_tokens(self) -> float | None:
        """Cost of GPU time per million output tokens."""
        return self.cost_usd / (self.output_tokens / 1e6) if self.output_tokens > 0 else None

    @property
    def reference_usd_per_million_tokens(self) -> float | None:
        """The managed API's price of the same traffic per million output tokens."""
        if self.reference_usd is None or self.output_tokens <= 0:
            return None
        return self.reference_usd / (self.output_tokens / 1e6)

    @property
    def verdict(self) -> str:
        """One line: build or buy, and by how much."""
        if self.output_tokens <= 0:
            return f"no traffic: ${self.cost_usd:,.0f} of GPU time generated nothing — scale to zero or remove"
        if self.reference_usd is None:
            return "no reference price: set one to compare with a managed API"
        ratio = self.cost_usd / self.reference_usd if self.reference_usd > 0 else math.inf
        if ratio <= 1.0:
            return (f"build: self-hosting costs ${self.cost_usd:,.0f}, {ratio:.0%} of the managed API's "
                    f"${self.reference_usd:,.0f} for the same traffic")
        line = (f"buy: the managed API would cost ${self.reference_usd:,.0f}, "
                f"{1 - 1 / ratio:.0%} less than self-hosting's ${self.cost_usd:,.0f}")
        if self.busy_share is not None and self.busy_share < LOW_BUSY:
            line += f" — but GPUs are busy {self.busy_share:.0%} of the time: consolidate first"
        return line


@dataclass(frozen=True, slots=True)
class Row:
    """One deployment's figures per window, and its utilisation series (for the plot)."""

    deployment: Deployment
    price: Price | None
    figures: Mapping[float, Figures]
    busy_series: Samples = ()


@dataclass(frozen=True, slots=True)
class FleetReport:
    """Every deployment's :class:`Row` and the fleet's totals per window."""

    now: float
    step_s: float
    windows_days: tuple[float, ...]
    rows: tuple[Row, ...]
    total: Mapping[float, Figures] = field(default_factory=dict)


def _inside(samples: Samples, start: float, end: float) -> list[tuple[float, float]]:
    return [(t, v) for t, v in samples if start < t <= end and math.isfinite(v)]


def _integral(samples: Samples, start: float, end: float, step_s: float) -> float:
    """Time integral of a gauge over ``(start, end]``: each sample stands for ``step_s`` before it."""
    return sum(v for _, v in _inside(samples, start, end)) * step_s


def _weighted(values: Samples, weights: Samples, start: float, end: float) -> tuple[float, float]:
    """(Σ value × weight, Σ weight) over the samples at the same times."""
    w = dict(_inside(weights, start, end))
    num = den = 0.0
    for t, v in _inside(values, start, end):
        if w.get(t, 0.0) > 0:
            num += v * w[t]
            den += w[t]
    return num, den


def window_figures(dep: Deployment, rec: Recorded, price: Price | None, *, now: float, days: float,
                   step_s: float) -> Figures:
    """The figures of one deployment over the ``days`` before ``now`` (see the module's formulas)."""
    if step_s <= 0 or days <= 0:
        raise ValueError(f"step and window must be positive: step_s={step_s}, days={days}")
    start = now - days * DAY_S
    gpu_s = out = good = busy_n = busy_d = kv_n = kv_d = 0.0
    for pool, metrics in rec.pools.items():
        gpus = metrics.get("gpus", ())
        gpu_s += _integral(gpus, start, now, step_s)
        tokens = _integral(metrics.get("tokens_per_second", ()), start, now, step_s)
        out += tokens
        good += _integral(metrics.get("goodput_tokens_per_second", ()), start, now, step_s) \
            if pool == "interactive" else tokens
        n, d = _weighted(metrics.get("busy_share", ()), gpus, start, now)
        busy_n, busy_d = busy_n + n, busy_d + d
        n, d = _weighted(metrics.get("kv_mean", ()), gpus, start, now)
        kv_n, kv_d = kv_n + n, kv_d + d
    gpu_hours = gpu_s / 3600.0
    inside_input = _inside(rec.input_tokens_per_second, start, now)
    inp = sum(v for _, v in inside_input) * step_s if inside_input else None
    reference = None
    if price is not None:
        reference = (inp or 0.0) / 1e6 * price.input_usd_per_million + out / 1e6 * price.output_usd_per_million
    return Figures(
        window_days=days, gpu_hours=gpu_hours, busy_share=busy_n / busy_d if busy_d else None,
        kv_use=kv_n / kv_d if kv_d else None, output_tokens=out, input_tokens=inp, goodput_tokens=good,
        cost_usd=gpu_hours * dep.gpu_hour_usd, reference_usd=reference,
    )


def _total(figures: Sequence[Figures], days: float) -> Figures:
    """The fleet's figures: sums, and the GPU-hour-weighted busy share and KV use."""
    gpu_hours = sum(f.gpu_hours for f in figures)

    def weighted(attr: str) -> float | None:
        pairs = [(getattr(f, attr), f.gpu_hours) for f in figures if getattr(f, attr) is not None and f.gpu_hours > 0]
        den = sum(w for _, w in pairs)
        return sum(v * w for v, w in pairs) / den if den else None

    refs = [f.reference_usd for f in figures]
    inputs = [f.input_tokens for f in figures]
    return Figures(
        window_days=days, gpu_hours=gpu_hours, busy_share=weighted("busy_share"), kv_use=weighted("kv_use"),
        output_tokens=sum(f.output_tokens for f in figures),
        input_tokens=None if all(i is None for i in inputs) else sum(i or 0.0 for i in inputs),
        goodput_tokens=sum(f.goodput_tokens for f in figures), cost_usd=sum(f.cost_usd for f in figures),
        reference_usd=None if any(r is None for r in refs) or not refs else sum(r or 0.0 for r in refs),
    )


def build_report(
    deployments: Sequence[Deployment],
    recorded: Mapping[tuple[str, str], Recorded],
    prices: Mapping[tuple[str, str], Price],
    fleet_price: Price | None,
    *,
    now: float,
    step_s: float,
    windows_days: Sequence[float] = (7.0, 30.0),
) -> FleetReport:
    """Figures for every deployment and the fleet, per window.

    Args:
        deployments: the LLMDeployments (a deployment without recorded series gets zeros).
        recorded: their series by ``(namespace, name)``.
        prices: per-deployment reference prices; others get ``fleet_price`` (or none).
        now: the end of every window, Unix seconds.
        step_s: the series' sample spacing (the range query's step), seconds.
        windows_days: the windows, days.
    """
    rows = []
    for dep in sorted(deployments, key=lambda d: d.key):
        rec = recorded.get(dep.key, Recorded(pools={}))
        price = prices.get(dep.key, fleet_price)
        figs = {d: window_figures(dep, rec, price, now=now, days=d, step_s=step_s) for d in windows_days}
        rows.append(Row(dep, price, figs, _busy_series(rec)))
    total = {d: _total([r.figures[d] for r in rows], d) for d in windows_days}
    return FleetReport(now=now, step_s=step_s, windows_days=tuple(windows_days), rows=tuple(rows), total=total)


def _busy_series(rec: Recorded) -> list[tuple[float, float]]:
    """Busy share over time, GPU-weighted over the pools (the utilisation plot)."""
    num: dict[float, float] = {}
    den: dict[float, float] = {}
    for metrics in rec.pools.values():
        weights = dict(metrics.get("gpus", ()))
        for t, v in metrics.get("busy_share", ()):
            w = weights.get(t, 0.0)
            if w > 0 and math.isfinite(v):
                num[t] = num.get(t, 0.0) + v * w
                den[t] = den.get(t, 0.0) + w
    return [(t, num[t] / den[t]) for t in sorted(den)]
