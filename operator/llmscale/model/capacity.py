"""Replicas a workload needs at its SLO: the live mix, chunked prefill and per-token p95 latency.

The derivation, step by step: ``docs/policy.md``, "The load signal". The non-obvious rules: the SLO
is judged as the operator reads it, per minute, ``histogram_quantile(0.95, …)`` over vLLM's TTFT
(one sample per request) and ITL (one per output token) histograms, and the pool is sized so that
:data:`MINUTE_ATTAINMENT` of minutes meet both; one replica follows vLLM V1's scheduler
(``vllm/v1/core/sched/scheduler.py``: the running decodes plus a chunk of the waiting prompt per
step), TTFT is an M/G/1 prefill queue (Pollaczek–Khinchine), and a minute's slow steps are a
compound count over its prompts at the live dispersion, so small pools and bursty traffic need more
than the mean says. Pure: numbers in, numbers out.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from statistics import NormalDist
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
from numpy.typing import NDArray

from llmscale.model.vllm_defaults import ITL_BUCKETS_S, TTFT_BUCKETS_S

if TYPE_CHECKING:  # pragma: no cover
    from llmscale.api import LLMDeploymentSpec

__all__ = [
    "DEFAULT_SHAPE",
    "ITL_BUCKETS_S",
    "LATENCY_QUANTILE",
    "MINUTE_ATTAINMENT",
    "POISSON",
    "QUADRATURE_POINTS",
    "TRACE_MEAN_OUTPUT_TOKENS",
    "TRACE_MEAN_PROMPT_TOKENS",
    "TTFT_BUCKETS_S",
    "Burstiness",
    "EngineLimits",
    "FleetNeed",
    "LengthDistribution",
    "ReplicaPoint",
    "StepModel",
    "WorkloadShape",
    "bucket_weights",
    "capacity_per_replica",
    "chunk_step_time",
    "engine_limits",
    "fleet_need",
    "interpolated_quantile",
    "max_batched_tokens_for_itl",
    "replica_point",
    "vllm_length_buckets",
]

#: The quantile of the SLO's latencies (``spec.slo.*P95Seconds``): 0.95.
LATENCY_QUANTILE = 0.95

#: Share of minutes whose p95s the pool is sized to keep within the SLO: 0.99, the attainment the
#: benchmark's goal asks for (issue 15: "≥ 99 % of minutes meet both p95s"). Its one-sided normal
#: quantile (2.33) sets the margin for a minute's fluctuations.
MINUTE_ATTAINMENT = 0.99

#: Equal-probability points of each length distribution the expectations are taken over.
QUADRATURE_POINTS = 48

class StepModel(Protocol):
    """What the capacity model needs of a replica (:class:`~llmscale.model.ReplicaModel` has it)."""

    @property
    def kv_cache_capacity_tokens(self) -> int:
        """Tokens the paged KV cache holds."""
        ...

    def step_time(self, decode_seqs: Any, kv_tokens_read: Any, prefill_tokens: Any = 0, prefill_pairs: Any = None) -> Any:
        """Seconds of one engine step (floats, or arrays broadcast together; ``prefill_pairs`` as
        :meth:`~llmscale.model.ReplicaModel.step_time` takes it)."""
        ...


_SQRT2 = math.sqrt(2.0)
_Z_P95 = NormalDist().inv_cdf(0.95)
_Z_P90 = NormalDist().inv_cdf(0.90)


@dataclass(frozen=True, slots=True)
class LengthDistribution:
    """A log-normal distribution of token counts, fitted to a mean and an upper quantile.

    Attributes:
        median: ``exp(μ)``, tokens.
        sigma: ``σ`` of the log, ≥ 0.
    """

    median: float
    sigma: float

    @classmethod
    def fit(
        cls,
        mean: float,
        p95: float | None = None,
        p90: float | None = None,
        buckets: Sequence[float] | None = None,
    ) -> LengthDistribution:
        """Fit ``mean`` (tokens, > 0) and ``p95`` (else ``p90``; neither: σ = 0, every request the mean).

        With ``x_q`` the quantile and ``z_q`` its normal quantile, ``ln x_q = μ + z_q·σ`` and
        ``ln mean = μ + σ²/2`` give ``σ = z_q − sqrt(z_q² − 2·ln(x_q / mean))`` (the smaller root).
        A quantile at or below the mean gives σ = 0; one so far above it that no log-normal fits
        (``x_q / mean > exp(z_q²/2)``: 3.87 for the p95) gives σ = z_q, the widest that keeps the mean.

        With ``buckets`` (the histogram's finite upper bounds, e.g. vLLM's 1-2-5 token buckets) the
        quantile is read as Prometheus' ``histogram_quantile`` reports it — linearly interpolated
        inside its bucket — and σ is the one whose log-normal would be reported so
        (:func:`interpolated_quantile`, a bracketed root search: the σ a 50-step bisection finds).
        On Mooncake's prompts the 20,000–50,000 bucket turns the true p95 of 39,550 into 46,352:
        read as exact it fits σ = 1.55, read through the buckets σ = 1.17 (the log-lengths' own
        spread is 1.20).

        Raises:
            ValueError: ``mean`` not positive and finite.
        """
        if not (math.isfinite(mean) and mean > 0):
            raise ValueError(f"mean must be positive, got {mean}")
        quantile, q, z = (p95, 0.95, _Z_P95) if p95 is not None and math.isfinite(p95) and p95 > 0 else (p90, 0.90, _Z_P90)
        if quantile is None or not math.isfinite(quantile) or quantile <= mean:
            return cls(mean, 0.0)
        if buckets:
            bounds = tuple(float(b) for b in buckets)
            # histogram_quantile never reports more than the last finite bound (the +Inf bucket
            # reads as it): an average of such reports can only pass it by float rounding.
            quantile = min(quantile, bounds[-1])

            def reported(sigma: float) -> float:
                return interpolated_quantile(q, cls(mean * math.exp(-sigma * sigma / 2.0), sigma), bounds)

            if reported(z) < quantile * (1 - 1e-9):
                return cls(mean * math.exp(-z * z / 2.0), z)
            sigma = _root(lambda s: reported(s) - quantile, 0.0, z)
            return cls(mean * math.exp(-sigma * sigma / 2.0), sigma)
        disc = z * z - 2.0 * math.log(quantile / mean)
        sigma = z - math.sqrt(disc) if disc > 0 else z
        return cls(mean * math.exp(-sigma * sigma / 2.0), sigma)

    def cdf(self, x: float) -> float:
        """``P(X ≤ x)``."""
        if x <= 0:
            return 0.0
        if self.median <= 0:
            return 1.0
        if self.sigma <= 0:
            return 1.0 if x >= self.median else 0.0
        # NormalDist().cdf's own formula (statistics, μ = 0, σ = 1), without an object per call.
        return 0.5 * (1.0 + math.erf(math.log(x / self.median) / self.sigma / _SQRT2))

    @property
    def mean(self) -> float:
        """``median × exp(σ²/2)``, tokens (before clipping)."""
        return self.median * math.exp(self.sigma**2 / 2.0)

    def quantile(self, q: float) -> float:
        """The ``q`` quantile (0 < q < 1), tokens (before clipping)."""
        return self.median * math.exp(self.sigma * NormalDist().inv_cdf(q))

    def points(self, limit: float | None = None, n: int = QUADRATURE_POINTS) -> NDArray[np.float64]:
        """Equal-probability points (the quantiles at ``(i + ½)/n``), clipped to ``[1, limit]``; shape ``(n,)``."""
        x = self.median * np.exp(self.sigma * _normal_points(n))
        return np.clip(x, 1.0, limit if limit is not None else np.inf)


def _root(f: Callable[[float], float], lo: float, hi: float, width: float = 1e-12) -> float:
    """The ``x`` in ``[lo, hi]`` where ``f`` turns from negative to non-negative that a 50-step
    bisection (``f(mid) < 0``: go up) finds, within ``width``: with one crossing, or a plateau at 0
    (a report capped at the last bucket), the lowest such ``x``. ``f`` is continuous and
    ``f(hi) ≥ 0`` (a caller may pass an ``hi`` a hair below 0: the result is then ``hi`` within
    ``width``). Regula falsi with the Illinois modification (Dowell & Jarratt, BIT 11, 1971: the
    retained end's value halved when the same end is kept twice), bisecting where a secant cannot
    step inside the bracket (a plateau at 0): superlinear on a smooth ``f``. At most 200 steps,
    then the bracket's middle."""
    f_lo, f_hi = f(lo), f(hi)
    if f_lo >= 0:
        # Not a bracket (a histogram's report dips below its value at ``lo`` before it rises):
        # the bisection itself, so that the crossing is the one it finds.
        for _ in range(50):
            mid = (lo + hi) / 2.0
            if f(mid) < 0:
                lo = mid
            else:
                hi = mid
        return (lo + hi) / 2.0
    kept = 0
    for _ in range(200):
        if hi - lo <= width:
            break
        x = hi - f_hi * (hi - lo) / (f_hi - f_lo) if f_hi > f_lo else (lo + hi) / 2.0
        if not lo + width / 4 < x < hi - width / 4:
            x = (lo + hi) / 2.0
        fx = f(x)
        if fx < 0:
            lo, f_lo = x, fx
            if kept == -1:
                f_hi /= 2.0
            kept = -1
        else:
            hi, f_hi = x, fx
            if kept == 1:
                f_lo /= 2.0
            kept = 1
    return (lo + hi) / 2.0


@lru_cache(maxsize=8)
def _normal_points(n: int) -> NDArray[np.float64]:
    """The standard normal's quantiles at ``(i + ½)/n``, shape ``(n,)`` (read-only: shared)."""
    z = np.array([NormalDist().inv_cdf((i + 0.5) / n) for i in range(n)])
    z.flags.writeable = False
    return z


def _mean(x: NDArray[np.float64]) -> float:
    """``x.mean()`` of a non-empty float array, the same sum and division without its dispatch."""
    return float(np.add.reduce(x, axis=None)) / x.size


def interpolated_quantile(q: float, dist: LengthDistribution, bounds: Sequence[float]) -> float:
    """What Prometheus' ``histogram_quantile(q, …)`` reports for ``dist`` observed into buckets with
    finite upper bounds ``bounds`` (``promql/quantile.go``: linear inside the bucket holding the rank,
    0 as the first bucket's lower bound, the highest finite bound for the ``+Inf`` bucket)."""
    lower, below = 0.0, 0.0
    median, sigma = dist.median, dist.sigma
    plain = median > 0 and sigma > 0  # LengthDistribution.cdf's own formula inline (the hot path of a fit)
    for bound in bounds:
        at = (0.5 * (1.0 + math.erf(math.log(bound / median) / sigma / _SQRT2)) if plain and bound > 0
              else dist.cdf(bound))
        if at >= q:
            return lower + (bound - lower) * (q - below) / (at - below) if at > below else bound
        lower, below = bound, at
    return float(bounds[-1]) if bounds else dist.quantile(q)


def vllm_length_buckets(max_model_len: int) -> tuple[float, ...]:
    """vLLM's token-count histogram buckets (``vllm:request_prompt_tokens``,
    ``vllm:request_generation_tokens``): 1, 2, 5, 10, 20, 50, … up to ``max_model_len``
    (``build_1_2_5_buckets`` in ``vllm/v1/metrics/loggers.py``); a ``+Inf`` bucket follows."""
    out: list[float] = []
    exp = 0
    while True:
        for m in (1, 2, 5):
            v = m * 10**exp
            if v > max_model_len:
                return tuple(out)
            out.append(float(v))
        exp += 1


@dataclass(frozen=True, slots=True)
class WorkloadShape:
    """What one request asks of a replica, as distributions.

    Attributes:
        prompt: prompt tokens per request.
        output: generated tokens per request.
        prefix_cache_hit_rate: share of prompt tokens served from the prefix cache (not computed), 0–1.
        source: where the shape came from, in words (``"live mix"``, ``"Azure LLM inference trace
            2023 means (no live mix)"``), for reason lines.
    """

    prompt: LengthDistribution
    output: LengthDistribution
    prefix_cache_hit_rate: float = 0.0
    source: str = "given"


#: Mean prompt (``ContextTokens``) of the Azure LLM inference trace 2023, conversation, tokens
#: (CC-BY 4.0; Patel et al., "Splitwise", ISCA 2024).
TRACE_MEAN_PROMPT_TOKENS = 1155

#: Mean output (``GeneratedTokens``) of the same trace, tokens.
TRACE_MEAN_OUTPUT_TOKENS = 211

#: The shape assumed when the live mix is unknown: the Azure LLM inference trace 2023,
#: conversation (CC-BY 4.0; Patel et al., "Splitwise", ISCA 2024): prompt mean 1,155 and p95 4,083
#: tokens, output mean 211 and p95 451 tokens, no prefix reuse. The derived KV-cache target used
#: these means before the live mix was read.
DEFAULT_SHAPE = WorkloadShape(
    prompt=LengthDistribution.fit(float(TRACE_MEAN_PROMPT_TOKENS), p95=4083.0),
    output=LengthDistribution.fit(float(TRACE_MEAN_OUTPUT_TOKENS), p95=451.0),
    prefix_cache_hit_rate=0.0,
    source="the Azure LLM inference trace 2023's lengths (no live mix)",
)


@dataclass(frozen=True, slots=True)
class EngineLimits:
    """The scheduler limits of one replica (vLLM's engine arguments).

    Attributes:
        max_num_batched_tokens: token budget of one step (decodes + prefill chunk), tokens.
        max_num_seqs: most running requests.
        context_limit_tokens: ``--max-model-len``, tokens (lengths are clipped to it).
    """

    max_num_batched_tokens: int
    max_num_seqs: int
    context_limit_tokens: int


def _flag(args: Sequence[str], name: str) -> int | None:
    value: int | None = None
    for i, arg in enumerate(args):
        head, eq, tail = arg.partition("=")
        if head != name:
            continue
        text = tail if eq else (args[i + 1] if i + 1 < len(args) else "")
        try:
            number = int(text)
        except ValueError:
            continue
        if number > 0:
            value = number  # the last occurrence wins, as with argparse
    return value


def engine_limits(spec: LLMDeploymentSpec) -> EngineLimits:
    """The :class:`EngineLimits` a replica of ``spec`` runs with.

    ``--max-num-batched-tokens`` and ``--max-num-seqs`` from ``spec.engine.args`` (``--flag N`` or
    ``--flag=N``; an unreadable value is ignored here — the engine would refuse it); else vLLM's
    OpenAI-server defaults for the GPU (``EngineArgs.get_batch_defaults``, ``vllm/engine/arg_utils.py``,
    vLLM 0.10–0.11): 8,192 tokens and 1,024 sequences on GPUs with ≥ 70 GiB other than the A100,
    2,048 and 256 elsewhere; ``max_num_seqs`` capped at the token budget as vLLM caps it.
    """
    from llmscale.model.presets import gpu_of

    gpu = gpu_of(spec.resources)
    large = gpu.memory_bytes >= 70 * 2**30 and "a100" not in gpu.name
    tokens = _flag(spec.engine.args, "--max-num-batched-tokens") or (8192 if large else 2048)
    seqs = _flag(spec.engine.args, "--max-num-seqs") or (1024 if large else 256)
    return EngineLimits(tokens, min(seqs, tokens), spec.model.context_limit_tokens)


def chunk_step_time(model: StepModel, chunk_tokens: float, running: float, context_tokens: float) -> float:
    """Seconds of one step carrying ``chunk_tokens`` of prompt beside ``running`` decodes at
    ``context_tokens`` each: ``model.step_time(running, running × context, chunk)``."""
    return float(model.step_time(running, running * context_tokens, chunk_tokens))


def max_batched_tokens_for_itl(
    model: StepModel, itl_s: float, running: float, context_tokens: float, *, multiple: int = 256
) -> int:
    """The largest ``--max-num-batched-tokens`` whose full chunk step stays within ``itl_s``.

    A full step carries ``T − B`` prompt tokens beside ``B`` decodes: ``(B + (T − B))·c = T·c`` of
    compute, so ``T ≤ itl / c`` where the step is compute-bound; rounded down to a multiple of
    ``multiple`` tokens (CUDA-graph and kernel tile sizes favour round budgets). E.g. Llama-3.1-70B
    bf16 on 4 × H100-SXM at 100 ms: ``c`` = 71 µs per token, ``T`` ≤ 1,402, 1,280 rounded.

    Returns:
        Tokens; 0 when even a decode-only step of ``running`` sequences takes longer than ``itl_s``.
    """
    if model.step_time(running, running * context_tokens, 0) > itl_s:
        return 0
    lo, hi = int(max(running, 1)), 1 << 22
    if chunk_step_time(model, lo - running, running, context_tokens) > itl_s:
        return 0
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if chunk_step_time(model, mid - running, running, context_tokens) <= itl_s:
            lo = mid
        else:
            hi = mid
    return max(multiple, lo // multiple * multiple) if lo >= multiple else lo


@dataclass(frozen=True, slots=True)
class _Grid:
    """The shape on its quadrature points, prepared once per (shape, limits)."""

    prompt: NDArray[np.float64]  # tokens in the KV cache per prompt
    computed: NDArray[np.float64]  # tokens computed (after prefix hits) per prompt
    output_mean: float
    context: float  # decode-weighted mean context, tokens
    output: NDArray[np.float64]  # output tokens per request, equal-probability points


@lru_cache(maxsize=256)
def _grid(shape: WorkloadShape, limit: int) -> _Grid:
    prompt = shape.prompt.points(limit - 1)
    output = shape.output.points(limit)
    hit = min(max(shape.prefix_cache_hit_rate, 0.0), 1.0)
    computed = np.maximum(prompt * (1.0 - hit), 1.0)
    g_mean = float(output.mean())
    # Decode-weighted mean context: a sequence decoding its g-th token holds P + g tokens; over a
    # request's outputs that averages P + (G + 1)/2, weighted by G: E[P] + E[G² + G] / (2 E[G]).
    context = float(prompt.mean() + (np.mean(output**2) + g_mean) / (2.0 * g_mean))
    return _Grid(prompt, computed, g_mean, context, output)


@dataclass(frozen=True, slots=True)
class ReplicaPoint:
    """One replica in steady state at ``rate_rps`` (the model: ``docs/policy.md``, "The load signal").

    Attributes:
        rate_rps: arrivals per second.
        running: mean running decodes ``B``.
        steps_per_s: engine steps per second ``S``.
        decode_step_s: a pure decode step ``t_d``, seconds.
        prefill_busy: ``ρ = λ·E[t_pf]``, share of time in steps that carry prompt tokens, 0–1
            (≥ 1: the replica cannot prefill that fast).
        slow_steps_per_prompt: mean chunk steps per prompt longer than the ITL target.
        slow_steps_sq_per_prompt: mean of their square (for the variance).
        slow_step_share: slow steps over all steps, the share of ITL samples over the target.
        ttft_miss: probability that a request's TTFT exceeds the target.
        kv_cache_utilization: KV cache in use, ``running × context / capacity`` plus the prompts being
            prefilled, fraction.
        context_tokens: the decode-weighted mean context, tokens.
        chunk_tokens: prompt tokens a full chunk step carries, ``T − B``.
        chunk_step_s: a full chunk step, seconds.
    """

    rate_rps: float
    running: float
    steps_per_s: float
    decode_step_s: float
    prefill_busy: float
    slow_steps_per_prompt: float
    slow_steps_sq_per_prompt: float
    slow_step_share: float
    ttft_miss: float
    kv_cache_utilization: float
    context_tokens: float
    chunk_tokens: float
    chunk_step_s: float

    @property
    def feasible(self) -> bool:
        """The replica keeps up at all: prefill busy below 1 and a decode step of finite length."""
        return self.prefill_busy < 1.0 and math.isfinite(self.steps_per_s)


def bucket_weights(target_s: float, bounds: Sequence[float]) -> tuple[float, float, float]:
    """How ``histogram_quantile`` judges ``target_s``: ``(lo, hi, w)`` such that the interpolated
    quantile exceeds the target exactly when ``w·P(X > lo) + (1 − w)·P(X > hi)`` exceeds ``1 − q``.

    Prometheus (``promql/quantile.go``) interpolates linearly inside the bucket ``(lo, hi]`` holding
    the rank, so the quantile passes ``target`` when the interpolated CDF at ``target``,
    ``F(lo) + (F(hi) − F(lo))·(target − lo)/(hi − lo)``, is below ``q``. E.g. a 2 s TTFT target lies
    in vLLM's (1, 2.5] bucket: ``w`` = 1/3, so a minute fails when ``P(>1 s)/3 + 2·P(>2.5 s)/3``
    exceeds 5 %. A target on a bound (ITL 100 ms) gives ``lo = hi = target``, ``w = 1``.
    """
    lo = 0.0
    for hi in bounds:
        if target_s <= hi:
            if target_s >= hi:
                return hi, hi, 1.0
            return lo, hi, (hi - target_s) / (hi - lo)
        lo = hi
    return lo, lo, 1.0  # beyond the last finite bound: histogram_quantile answers that bound


def _prefill(
    model: StepModel,
    grid: _Grid,
    running: float,
    budget: int,
    itl: tuple[float, float, float] | None,
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64] | None, float, float]:
    """Per prompt of ``grid``: chunk steps, their total time and their slow count (the
    bucket-weighted count of steps over the ITL target, :func:`bucket_weights`; ``None`` without
    ``itl``); and the full chunk's size and mean time. Each chunk rides beside ``running`` decodes
    at the grid's context and attends to the tokens of its prompt before it (a cached prefix, the
    earlier chunks): full chunk ``k`` to ``cached + k·room`` of them, so a prompt's attention is
    its whole length's, however it is chunked."""
    computed = grid.computed
    room = max(float(budget) - running, 1.0)
    full = np.floor(computed / room)
    rest = computed - full * room
    kv = running * grid.context
    has_rest = rest > 1e-9
    steps = full + has_rest
    t_alone = chunk_step_time(model, room, running, grid.context)  # a full chunk with nothing before it
    t_full: NDArray[np.float64] | float
    if model.step_time(running, kv, room, 0.0) == t_alone:
        # No attention term (the planning model): where a chunk sits in its prompt changes nothing.
        t_full = t_full_mean = t_alone
        t_rest = np.asarray(model.step_time(running, kv, rest), dtype=np.float64)
    else:
        cached = grid.prompt - computed
        # The full chunks' mean earlier tokens, cached + (full − 1)·room/2: attention is linear in them.
        earlier = cached + np.maximum(full - 1.0, 0.0) * room / 2.0
        t_full = np.asarray(model.step_time(running, kv, room, room * room / 2.0 + room * earlier), dtype=np.float64)
        t_rest = np.asarray(
            model.step_time(running, kv, rest, rest * rest / 2.0 + rest * (cached + full * room)), dtype=np.float64
        )
        chunks = float(full.sum())
        t_full_mean = float((full * t_full).sum() / chunks) if chunks > 0 else t_alone
    time = full * t_full + np.where(has_rest, t_rest, 0.0)
    if itl is None:
        return steps, time, None, room, t_full_mean
    lo, hi, w = itl

    def over(bound: float) -> NDArray[np.float64]:
        return (full * (t_full > bound) + (has_rest & (t_rest > bound))).astype(np.float64)

    slow = w * over(lo) + (1.0 - w) * over(hi)
    return steps, time, slow, room, t_full_mean


def replica_point(
    model: StepModel,
    shape: WorkloadShape,
    limits: EngineLimits,
    itl_s: float,
    ttft_s: float,
    rate_rps: float,
) -> ReplicaPoint:
    """Return one replica's steady state at ``rate_rps`` arrivals/s (≥ 0).

    Raises:
        ValueError: a negative or non-finite rate, or non-positive targets.
    """
    if not (math.isfinite(rate_rps) and rate_rps >= 0):
        raise ValueError(f"rate_rps must be finite and ≥ 0, got {rate_rps}")
    if itl_s <= 0 or ttft_s <= 0:
        raise ValueError("itl_s and ttft_s must be positive")
    grid = _grid(shape, limits.context_limit_tokens)
    itl = bucket_weights(itl_s, ITL_BUCKETS_S)
    lam = rate_rps
    ctx = grid.context
    budget = limits.max_num_batched_tokens
    g_minus_1 = max(grid.output_mean - 1.0, 0.0)

    seen: dict[float, float] = {}  # the bracketing asks for its ends again

    def excess(b: float) -> float:
        """``λ(E[G] − 1)/S(B) − B``: zero at the running batch Little's law gives."""
        if (known := seen.get(b)) is not None:
            return known
        steps, time, _, _, _ = _prefill(model, grid, b, budget, None)
        t_d = model.step_time(b, b * ctx, 0)
        busy = lam * _mean(time)
        s_rate = lam * _mean(steps) / busy if busy >= 1.0 else lam * _mean(steps) + (1.0 - busy) / t_d
        seen[b] = value = (lam * g_minus_1 / s_rate if s_rate > 0 else 0.0) - b
        return value

    # excess(B) falls as B grows (steps slow down, but never enough to shrink B·S): bracket the root
    # below max_num_seqs (vLLM runs no more; the rest would wait), then bisect on a secant guess.
    cap = float(limits.max_num_seqs)
    lo, hi = 0.0, min(max(1.0, lam * g_minus_1 * model.step_time(1, ctx, 0)), cap)
    while excess(hi) > 0 and hi < cap:
        lo, hi = hi, min(hi * 2.0, cap)
    f_lo, f_hi = excess(lo), excess(hi)
    running = lo
    if f_hi > 0:  # even max_num_seqs running cannot keep up: the batch is full
        running, f_lo = cap, 0.0
    for _ in range(40):
        if f_lo <= 0 or hi - lo <= 1e-4 * max(hi, 1.0):
            running = running if f_hi > 0 else (lo if f_lo <= 0 else (lo + hi) / 2)
            break
        guess = lo + (hi - lo) * f_lo / (f_lo - f_hi) if f_lo != f_hi else (lo + hi) / 2
        mid = min(max(guess, lo + 0.05 * (hi - lo)), hi - 0.05 * (hi - lo))
        f_mid = excess(mid)
        if f_mid > 0:
            lo, f_lo = mid, f_mid
        else:
            hi, f_hi = mid, f_mid
        running = (lo + hi) / 2
    steps, time, slow, room, t_full = _prefill(model, grid, running, budget, itl)
    assert slow is not None
    t_d = model.step_time(running, running * ctx, 0)
    busy = lam * _mean(time)
    s_rate = lam * _mean(steps) + max(1.0 - busy, 0.0) / t_d
    slow_steps = _mean(slow)
    lo, hi, w = itl
    decode_slow = w * (t_d > lo) + (1.0 - w) * (t_d > hi)
    # The decode batch alone missing the target makes (nearly) every step slow.
    share = 1.0 if decode_slow > 0 else (lam * slow_steps / s_rate if s_rate > 0 else 0.0)
    # TTFT: M/G/1 prefill queue (docs/policy.md, "The load signal"), judged at the target's bucket bounds.
    if busy >= 1.0:
        miss = 1.0
    else:
        mean_wait = lam * float(np.mean(time**2)) / (2.0 * (1.0 - busy))

        def over(bound: float) -> float:
            after = bound - time
            if busy <= 0 or mean_wait <= 0:
                tail = np.zeros_like(after)
            else:
                tail = busy * np.exp(-np.maximum(after, 0.0) * busy / mean_wait)
            return float(np.mean(np.where(after <= 0, 1.0, tail)))

        t_lo, t_hi, t_w = bucket_weights(ttft_s, TTFT_BUCKETS_S)
        miss = t_w * over(t_lo) + (1.0 - t_w) * over(t_hi)
    in_prefill = busy * float(np.mean(grid.prompt)) / 2.0  # a prompt half prefilled, on average
    kv = (running * ctx + in_prefill) / max(model.kv_cache_capacity_tokens, 1)
    return ReplicaPoint(
        rate_rps=lam,
        running=running,
        steps_per_s=s_rate,
        decode_step_s=t_d,
        prefill_busy=busy,
        slow_steps_per_prompt=slow_steps,
        slow_steps_sq_per_prompt=float(np.mean(slow**2)),
        slow_step_share=share,
        ttft_miss=miss,
        kv_cache_utilization=kv,
        context_tokens=ctx,
        chunk_tokens=room,
        chunk_step_s=t_full,
    )


@dataclass(frozen=True, slots=True)
class Burstiness:
    """How much a minute's load varies beyond Poisson arrivals (1 = Poisson).

    Attributes:
        requests: variance / mean of the requests arriving in a minute (index of dispersion).
        prompt_tokens: variance of the prompt tokens arriving in a minute over its compound-Poisson
            value ``60·Λ·E[P²]``: above 1 when long prompts come in clusters (one conversation's
            turns, a batch job's documents). 18–27 on the Azure conversation trace, ~1.4 on Mooncake.
    """

    requests: float = 1.0
    prompt_tokens: float = 1.0

    def clamped(self) -> Burstiness:
        """Each figure at least 1 (finite): a quieter-than-Poisson estimate is noise, not a promise."""

        def one(x: float) -> float:
            return max(float(x), 1.0) if math.isfinite(x) else 1.0

        return Burstiness(one(self.requests), one(self.prompt_tokens))


POISSON = Burstiness()


@dataclass(frozen=True, slots=True)
class FleetNeed:
    """The replicas an arrival rate needs at the SLO, and why that many.

    Attributes:
        replicas: the fewest replicas that meet both p95s in :data:`MINUTE_ATTAINMENT` of minutes
            (``limit`` when even that many do not).
        arrival_rps: the pool's arrival rate judged, requests/s.
        point: one replica at ``arrival_rps / replicas``.
        bound_by: what sets the count: ``"ITL"`` (chunk steps of long prompts), ``"TTFT"``
            (the prefill queue), ``"KV cache"``, ``"max-num-seqs"`` or ``"none"`` (no load).
        within: whether ``replicas`` meets the SLO (``False`` only when capped at ``limit``).
    """

    replicas: int
    arrival_rps: float
    point: ReplicaPoint
    bound_by: str
    within: bool


def _misses(
    point: ReplicaPoint,
    replicas: int,
    arrival_rps: float,
    burst: Burstiness,
    z: float,
    q: float,
    limits: EngineLimits,
    ttft_s: float,
) -> str | None:
    """What the pool of ``replicas`` at ``point`` misses in the attainment's share of minutes, or ``None``."""
    if not point.feasible:
        return "TTFT"
    per_min = 60.0 * arrival_rps
    # ITL: slow steps in a minute over the pool's steps in it.
    mean = per_min * point.slow_steps_per_prompt
    var = burst.prompt_tokens * per_min * point.slow_steps_sq_per_prompt
    steps = 60.0 * replicas * point.steps_per_s
    if point.slow_step_share >= 1.0 or mean + z * math.sqrt(max(var, 0.0)) > (1.0 - q) * steps:
        return "ITL"
    # TTFT: requests over the target among the minute's requests.
    # Misses come in clumps: the requests that reach a replica while a long prompt blocks it wait
    # behind it together, about 1 + λ·target of them.
    m = per_min * point.ttft_miss
    clump = 1.0 + point.rate_rps * ttft_s
    if m + z * math.sqrt(max(burst.requests * clump * m, 0.0)) > (1.0 - q) * per_min:
        return "TTFT"
    # Running requests: the Poisson-ish spread of the batch must fit the cache and max-num-seqs.
    high = point.running + z * math.sqrt(max(burst.requests * point.running, 0.0))
    if high > limits.max_num_seqs:
        return "max-num-seqs"
    if point.running > 0 and point.kv_cache_utilization * high / point.running > 1.0:
        return "KV cache"
    return None


def fleet_need(
    model: StepModel,
    shape: WorkloadShape,
    limits: EngineLimits,
    itl_s: float,
    ttft_s: float,
    arrival_rps: float,
    *,
    burstiness: Burstiness = POISSON,
    capacity_factor: float = 1.0,
    limit: int = 10_000,
    hint: int | None = None,
    attainment: float = MINUTE_ATTAINMENT,
    quantile: float = LATENCY_QUANTILE,
) -> FleetNeed:
    """Return the fewest replicas that carry ``arrival_rps`` within both p95 targets.

    The pool of ``N`` meets the SLO when, at ``arrival_rps / N`` per replica (``replica_point``),
    the minute's slow steps and TTFT misses stay under ``1 − quantile`` of the minute's samples at
    the ``attainment`` quantile of their fluctuation, and the running batch fits the KV cache and
    ``max_num_seqs`` (``docs/policy.md``, "The load signal"). ``capacity_factor`` (> 0) scales what one replica carries
    (the policy's learnt correction, :data:`llmscale.policy.load.CAPACITY_FACTOR_MIN` to
    :data:`~llmscale.policy.load.CAPACITY_FACTOR_MAX`): the pool is sized for
    ``arrival_rps / capacity_factor``.

    E.g. (tests/model/test_capacity.py) Llama-3.1-70B bf16 on 4 × H100-SXM, 8,192-token budget,
    ITL 100 ms, TTFT 2 s, the Azure trace's lengths, 30 requests/s, Poisson: 6 replicas, bound by ITL.

    Args:
        arrival_rps: requests/s arriving at the pool, ≥ 0.
        burstiness: how much a minute's requests and prompt tokens vary beyond Poisson.
        limit: the most replicas to consider.
        hint: where to start looking (the pool's size now); only speeds the search up.

    Raises:
        ValueError: a negative or non-finite rate, or a factor that is not finite and > 0.
    """
    if not (math.isfinite(arrival_rps) and arrival_rps >= 0):
        raise ValueError(f"arrival_rps must be finite and ≥ 0, got {arrival_rps}")
    if not (math.isfinite(capacity_factor) and capacity_factor > 0):
        raise ValueError(f"capacity_factor must be finite and > 0, got {capacity_factor}")
    z = NormalDist().inv_cdf(attainment)
    burst = burstiness.clamped()
    rate = arrival_rps / capacity_factor
    if rate <= 0:
        point = replica_point(model, shape, limits, itl_s, ttft_s, 0.0)
        return FleetNeed(0, arrival_rps, point, "none", True)

    def judge(n: int) -> tuple[ReplicaPoint, str | None]:
        point = replica_point(model, shape, limits, itl_s, ttft_s, rate / n)
        return point, _misses(point, n, rate, burst, z, quantile, limits, ttft_s)

    # Search from the hint (the pool's size now: most ticks change nothing), widening by doubling,
    # then bisecting: the misses fall as N grows (each replica carries less).
    start = min(max(int(hint), 1), limit) if hint else 1
    point, miss = judge(start)
    if miss is None:
        hi, best, bound = start, point, "none"
        lo = 0
        step = 1
        while True:
            cand = hi - step
            if cand < 1:
                lo = 0
                break
            p_c, m_c = judge(cand)
            if m_c is not None:
                lo, bound = cand, m_c
                break
            hi, best = cand, p_c
            step *= 2
    else:
        lo, bound = start, miss
        hi = start
        step = 1
        while True:
            if hi >= limit:
                return FleetNeed(limit, arrival_rps, point, bound, False)
            hi = min(hi + step, limit)
            point, miss = judge(hi)
            if miss is None:
                best = point
                break
            lo, bound = hi, miss
            step *= 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        p_mid, m_mid = judge(mid)
        if m_mid is None:
            hi, best = mid, p_mid
        else:
            lo, bound = mid, m_mid
    return FleetNeed(hi, arrival_rps, best, bound, True)


def capacity_per_replica(
    model: StepModel,
    shape: WorkloadShape,
    limits: EngineLimits,
    itl_s: float,
    ttft_s: float,
    *,
    replicas: int = 1,
    burstiness: Burstiness = POISSON,
    attainment: float = MINUTE_ATTAINMENT,
) -> tuple[float, ReplicaPoint, str]:
    """The highest arrival rate per replica that a pool of ``replicas`` carries within the SLO.

    Returns:
        ``(requests/s per replica, the replica there, what binds next)``; rate 0 when not even a
        trickle meets the SLO.
    """
    z = NormalDist().inv_cdf(attainment)

    def ok(lam: float) -> tuple[ReplicaPoint, str | None]:
        point = replica_point(model, shape, limits, itl_s, ttft_s, lam)
        return point, _misses(point, replicas, lam * replicas, burstiness.clamped(), z, LATENCY_QUANTILE, limits, ttft_s)

    hi = 1.0
    while ok(hi)[1] is None and hi < 1e6:
        hi *= 2.0
    lo = 0.0
    bound = ok(hi)[1] or "none"
    for _ in range(50):
        mid = (lo + hi) / 2.0
        _, miss = ok(mid)
        if miss is None:
            lo = mid
        else:
            hi, bound = mid, miss
    return lo, ok(lo)[0], bound
