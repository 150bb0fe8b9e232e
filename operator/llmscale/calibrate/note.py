"""From measurements to a calibration: the fit's observations, the measured capacity note beside
the roofline's (before and after calibration), and the simulator at the same load points.

Pure: numbers in, numbers out (the simulator runs in simulated time).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from llmscale.calibrate.sweep import DecodePoint, PrefillPoint, RatePoint
from llmscale.model import LengthDistribution, ReplicaModel, WorkloadShape
from llmscale.model.capacity import EngineLimits
from llmscale.model.fit import EfficiencyFit, StepObservation, fit_efficiencies, lone_prompt_steps
from llmscale.model.predict import predict_latency
from llmscale.sim.fleet import FleetConfig, Observation, ScaleDecision, simulate
from llmscale.sim.latency import histogram_quantile
from llmscale.sim.replica import EngineConfig
from llmscale.sim.trace import Trace

__all__ = [
    "Figure",
    "Measurement",
    "fit_measurement",
    "itl_spread",
    "knee_batch",
    "lone_prompt_steps",
    "note_figures",
    "observations",
    "shape_of",
    "simulated_latency",
]

#: Bucket bounds the simulator column is read with: 200 log-spaced bounds from 0.1 ms to 100 s
#: (vLLM's own start at 10 ms for ITL: a CPU engine's whole ITL would fall in the first bucket).
FINE_BOUNDS_S: tuple[float, ...] = tuple(float(x) for x in np.logspace(-4, 2, 200))


@dataclass(frozen=True)
class Measurement:
    """Everything ``llmscale calibrate`` measured on one engine.

    Attributes:
        url: the engine.
        model: the served model name.
        max_model_len: its context limit, tokens.
        max_num_batched_tokens: the step token budget assumed (chunked prefill), tokens.
        max_num_seqs: most running requests assumed.
        prefill / decode / rates: the three sweeps (:mod:`llmscale.calibrate.sweep`).
        lengths: the ``(prompt, output)`` pairs the rate points drew from, tokens.
        mix: where those lengths came from, in words.
    """

    url: str
    model: str
    max_model_len: int
    max_num_batched_tokens: int
    max_num_seqs: int
    prefill: list[PrefillPoint]
    decode: list[DecodePoint]
    rates: list[RatePoint] = field(default_factory=list)
    lengths: list[tuple[int, int]] = field(default_factory=list)
    mix: str = ""


def observations(m: Measurement) -> list[StepObservation]:
    """The step times the fit explains: each decode point's median ITL is one decode step of its
    running batch; each lone prompt's median TTFT is its chunk steps (:func:`lone_prompt_steps`)
    and the per-request cost once."""
    out: list[StepObservation] = []
    for d in m.decode:
        if d.itl.samples and math.isfinite(d.itl.p50_s) and d.itl.p50_s > 0:
            b = max(d.running, 1.0)
            out.append(StepObservation(b, b * d.context_tokens, 0.0, d.itl.p50_s))
    for p in m.prefill:
        if p.ttft.samples and math.isfinite(p.ttft.p50_s) and p.ttft.p50_s > 0:
            n, c, pairs = lone_prompt_steps(p.prompt_tokens, m.max_num_batched_tokens)
            out.append(StepObservation(0.0, 0.0, c, p.ttft.p50_s / n, prefill_pairs=pairs, request_share=1.0 / n))
    return out


def fit_measurement(prior: ReplicaModel, m: Measurement) -> EfficiencyFit:
    """Fit ``prior``'s efficiencies and overhead to ``m`` (:func:`observations`).

    Raises:
        ValueError: fewer than two usable points.
    """
    return fit_efficiencies(prior, observations(m))


def itl_spread(m: Measurement, batch: float) -> float:
    """How far a steady batch's ITL p95 lies above its median on this engine, at a running batch of
    ``batch``: the decode sweep's p95 / p50 (the batch sweep, at its one context), linearly
    interpolated in the running batch and held at the ends; 1 without a usable point.

    The model and the simulator time a step as a constant; a real engine's steps at one batch
    scatter (the scheduler, sampling, streaming, the host's other work: on a 2-core CPU host the
    load generator too), and an ITL p95 is read from that scatter. Measured, not modelled: the
    calibrated model's ITL p95 is its step times this ratio.
    """
    ctx = m.decode[0].context_tokens if m.decode else 0.0
    pts = sorted(
        (max(d.running, 1.0), d.itl.p95_s / d.itl.p50_s)
        for d in m.decode
        if d.context_tokens == ctx and d.itl.samples and d.itl.p50_s > 0 and math.isfinite(d.itl.p95_s)
    )
    if not pts:
        return 1.0
    return max(float(np.interp(batch, [b for b, _ in pts], [r for _, r in pts])), 1.0)


def shape_of(lengths: Sequence[tuple[int, int]], source: str) -> WorkloadShape:
    """The log-normal shape (mean and p95 of each length) of ``lengths``."""
    p = np.array([a for a, _ in lengths], dtype=np.float64)
    g = np.array([b for _, b in lengths], dtype=np.float64)
    return WorkloadShape(
        prompt=LengthDistribution.fit(float(p.mean()), p95=float(np.quantile(p, 0.95))),
        output=LengthDistribution.fit(float(g.mean()), p95=float(np.quantile(g, 0.95))),
        source=source,
    )


def knee_batch(batches: Sequence[float], itl_s: Sequence[float]) -> float | None:
    """The measured knee: the running batch at which ITL reaches twice its value at the smallest
    batch (the roofline's memory knee, where KV reads equal the weight read, doubles the step
    time), linearly interpolated; ``None`` when the sweep never got there."""
    pairs = sorted((float(b), float(t)) for b, t in zip(batches, itl_s, strict=True) if math.isfinite(t))
    if len(pairs) < 2:
        return None
    target = 2.0 * pairs[0][1]
    for (b0, t0), (b1, t1) in itertools.pairwise(pairs):
        if t1 >= target:
            return b0 + (b1 - b0) * (target - t0) / (t1 - t0) if t1 > t0 else b1
    return None


def _model_knee(model: ReplicaModel, context: float, limit: float = 65536.0) -> float | None:
    base = model.step_time(1, context, 0)
    b = 1.0
    while b < limit:
        if model.step_time(2 * b, 2 * b * context, 0) >= 2 * base:
            lo, hi = b, 2 * b
            for _ in range(40):
                mid = (lo + hi) / 2
                if model.step_time(mid, mid * context, 0) >= 2 * base:
                    hi = mid
                else:
                    lo = mid
            return hi
        b *= 2
    return None


@dataclass(frozen=True, slots=True)
class Figure:
    """One figure of the capacity note, measured and as each model predicts it.

    Attributes:
        name: what it is.
        unit: ``"ms"``, ``"tok/s"`` or ``"seqs"``.
        measured: on the engine.
        roofline: the model before calibration (the planning efficiencies).
        calibrated: the model after calibration.
        simulated: the simulator with the calibrated model (rate points only).
        fitted: whether the figure was fitted (else it is out of sample: the rate points).
    """

    name: str
    unit: str
    measured: float | None
    roofline: float | None
    calibrated: float | None
    simulated: float | None = None
    fitted: bool = True

    @staticmethod
    def error(model: float | None, measured: float | None) -> float | None:
        """``(model − measured) / measured``, or ``None`` when either is missing."""
        if model is None or measured is None or not math.isfinite(model) or not measured:
            return None
        return (model - measured) / measured


def _limits(m: Measurement) -> EngineLimits:
    return EngineLimits(m.max_num_batched_tokens, m.max_num_seqs, m.max_model_len)


class _Fixed:
    name = "fixed"
    tick_s = 15.0

    def decide(self, obs: Observation) -> ScaleDecision:
        return ScaleDecision(1)


def simulated_latency(
    model: ReplicaModel,
    lengths: Sequence[tuple[int, int]],
    rate_rps: float,
    limits: EngineLimits,
    *,
    seconds: float = 600.0,
    warmup_s: float = 60.0,
    seed: int = 0,
    arrivals: Sequence[tuple[float, int, int]] = (),
) -> tuple[float, float]:
    """``(ITL p95, TTFT p95)`` of one simulated replica, seconds, read from fine histograms
    (:data:`FINE_BOUNDS_S`): under ``arrivals`` when given (``(seconds, prompt, output)`` of each
    request: the very requests an engine got, so that the comparison carries no sampling noise of
    its own), else under Poisson arrivals at ``rate_rps`` for ``seconds`` with lengths drawn from
    ``lengths``. Latencies of the first ``warmup_s`` (in 15 s windows) are not counted."""
    if arrivals:
        arrival = np.array([a for a, _, _ in arrivals], dtype=np.float64)
        prompt = np.array([p for _, p, _ in arrivals], dtype=np.int64)
        output = np.array([g for _, _, g in arrivals], dtype=np.int64)
        seconds = float(arrival.max()) + 1e-3
    else:
        rng = np.random.default_rng(seed)
        n = max(1, int(rng.poisson(rate_rps * seconds)))
        arrival = np.sort(rng.uniform(0.0, seconds, n))
        pick = rng.integers(len(lengths), size=n)
        prompt = np.array([lengths[i][0] for i in pick], dtype=np.int64)
        output = np.array([lengths[i][1] for i in pick], dtype=np.int64)
    n = len(arrival)
    trace = Trace(arrival, prompt, output, np.zeros(n, dtype=bool), 0.0, seconds, source="calibration rate point")
    engine = EngineConfig(
        max_num_seqs=limits.max_num_seqs,
        max_num_batched_tokens=max(limits.max_num_batched_tokens, limits.max_num_seqs),
        enable_prefix_caching=False,
    )
    fleet = FleetConfig(initial_replicas=1, min_replicas=1, max_replicas=1, drain_cap_s=600)
    res = simulate(
        trace, _Fixed(), model, engine=engine, fleet=fleet, context_limit_tokens=limits.context_limit_tokens,
        latency_bounds_s=(FINE_BOUNDS_S, FINE_BOUNDS_S),
    )
    rec = res.latency
    assert rec is not None
    first = int(warmup_s // 15.0)
    out = []
    for kind in ("itl", "ttft"):
        counts = rec.counts(kind)[first:].sum(axis=0)
        out.append(float(histogram_quantile(0.95, FINE_BOUNDS_S, counts)))
    return out[0], out[1]


def note_figures(
    m: Measurement,
    prior: ReplicaModel,
    fitted: ReplicaModel,
    *,
    simulate_rates: bool = True,
    request_s: float = 0.0,
) -> list[Figure]:
    """The capacity note's figures, measured beside the roofline before and after calibration:
    ITL at each measured batch, each lone prompt's TTFT, the knee, the peak decode throughput
    (all fitted), and at each fixed rate the ITL and TTFT p95 (out of sample; with the simulator
    when ``simulate_rates``; the calibrated model's and the simulator's ITL p95 times the engine's
    measured spread, :func:`itl_spread`). ``request_s``: the fit's per-request cost
    (:attr:`~llmscale.model.fit.EfficiencyFit.request_overhead_s`), seconds, added to every TTFT
    the calibrated model and the simulator give (a constant shifts a quantile by itself)."""
    figs: list[Figure] = []
    for d in m.decode:
        b = max(d.running, 1.0)
        figs.append(
            Figure(
                f"ITL p50 at batch {b:.1f}, context {d.context_tokens:,.0f}",
                "ms",
                d.itl.p50_s * 1e3,
                prior.step_time(b, b * d.context_tokens, 0) * 1e3,
                fitted.step_time(b, b * d.context_tokens, 0) * 1e3,
            )
        )
    for p in m.prefill:
        n, c, pairs = lone_prompt_steps(p.prompt_tokens, m.max_num_batched_tokens)
        figs.append(
            Figure(
                f"TTFT of a lone {p.prompt_tokens:,}-token prompt",
                "ms",
                p.ttft.p50_s * 1e3,
                n * prior.step_time(0, 0, c, pairs) * 1e3,
                (n * fitted.step_time(0, 0, c, pairs) + request_s) * 1e3,
            )
        )
    if m.decode:
        ctx = m.decode[0].context_tokens
        sweep = [d for d in m.decode if d.context_tokens == ctx]  # the batch sweep, one context
        measured_knee = knee_batch([max(d.running, 1.0) for d in sweep], [d.itl.p50_s for d in sweep])
        figs.append(Figure("knee (ITL twice batch 1's), batch", "seqs", measured_knee, _model_knee(prior, ctx),
                           _model_knee(fitted, ctx)))
        top = max(m.decode, key=lambda d: d.tokens_per_s)
        b = max(top.running, 1.0)
        figs.append(
            Figure(
                f"decode throughput at batch {b:.1f}",
                "tok/s",
                top.tokens_per_s,
                b / prior.step_time(b, b * top.context_tokens, 0),
                b / fitted.step_time(b, b * top.context_tokens, 0),
            )
        )
    if m.rates and m.lengths:
        shape = shape_of(m.lengths, m.mix)
        limits = _limits(m)
        for r in m.rates:
            before = predict_latency(prior, shape, limits, r.rate_rps)
            after = predict_latency(fitted, shape, limits, r.rate_rps)
            sim = (
                simulated_latency(fitted, m.lengths, r.rate_rps, limits, warmup_s=r.warmup_s, arrivals=r.arrivals)
                if simulate_rates
                else (None, None)
            )
            spread = itl_spread(m, after.running)
            figs.append(Figure(f"ITL p95 at {r.rate_rps:.2f} req/s", "ms", r.itl.p95_s * 1e3, before.itl_p95_s * 1e3,
                               after.itl_p95_s * spread * 1e3, None if sim[0] is None else sim[0] * spread * 1e3,
                               fitted=False))
            figs.append(Figure(f"TTFT p95 at {r.rate_rps:.2f} req/s", "ms", r.ttft.p95_s * 1e3,
                               before.ttft_p95_s * 1e3, (after.ttft_p95_s + request_s) * 1e3,
                               None if sim[1] is None else (sim[1] + request_s) * 1e3, fitted=False))
    return figs
