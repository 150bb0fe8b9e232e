"""Latency quantiles the capacity model predicts for one replica at a steady arrival rate.

:func:`~llmscale.model.capacity.replica_point` judges a load against targets; a benchmark
comparing the model with an engine needs the figures themselves. From the same steady state:

- **ITL p95**: each step gives its duration as the gap of every running decode, so the quantile
  is over tokens: a share ``w = λ·E[n]/S`` of gaps are chunk steps (``n`` chunk steps per prompt,
  ``S`` steps per second; each prompt's own chunks, full and the rest), the rest decode steps. A token's decode step holds its own sequence at
  its context (a prompt, plus a uniform position in an output; tokens weighted by output length)
  beside ``k`` others at the mean context, ``k`` Poisson at the mean batch (the running decodes
  seen from one of them, M/G/∞). The quantile of that mixture (docs/calibrate.md, "How it
  fits").
- **TTFT p95**: the M/G/1 prefill queue of :mod:`~llmscale.model.capacity` (Pollaczek–Khinchine
  mean wait, exponential tail ``P(W > t) = ρ·exp(−t·ρ/E[W])``) plus the request's own chunk
  steps; the quantile of ``W + t_pf(P)`` over the prompt distribution, found by bisection.

Pure module.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from llmscale.model.capacity import (
    EngineLimits,
    StepModel,
    WorkloadShape,
    _Grid,
    _grid,
    _prefill,
    replica_point,
)

__all__ = ["PredictedLatency", "predict_latency"]


@dataclass(frozen=True, slots=True)
class PredictedLatency:
    """What the model predicts at one arrival rate.

    Attributes:
        rate_rps: arrivals per second.
        running: mean running decodes.
        itl_p95_s / ttft_p95_s: the 95th percentiles, seconds (``inf`` when the replica cannot keep
            up with the prefills: ``ρ ≥ 1``).
        decode_step_s: a pure decode step at that batch, seconds.
    """

    rate_rps: float
    running: float
    itl_p95_s: float
    ttft_p95_s: float
    decode_step_s: float


def predict_latency(
    model: StepModel, shape: WorkloadShape, limits: EngineLimits, rate_rps: float, quantile: float = 0.95
) -> PredictedLatency:
    """Return the ITL and TTFT ``quantile`` (0.95) one replica shows at ``rate_rps`` (module
    docstring: the model).

    Raises:
        ValueError: a negative or non-finite rate, or a quantile outside (0, 1).
    """
    if not 0.0 < quantile < 1.0:
        raise ValueError(f"quantile must be in (0, 1), got {quantile}")
    # The targets only shape the slow-step counts, which are not used here.
    point = replica_point(model, shape, limits, 1.0, 1.0, rate_rps)
    grid = _grid(shape, limits.context_limit_tokens)
    _, time, _, _, _ = _prefill(model, grid, point.running, limits.max_num_batched_tokens, None)
    t_d = point.decode_step_s
    lam = rate_rps
    busy = point.prefill_busy
    s = point.steps_per_s
    chunk_share = (s - max(1.0 - busy, 0.0) / t_d) / s if s > 0 else 0.0
    chunks = np.maximum(_chunk_steps(model, grid, point.running, limits.max_num_batched_tokens), t_d)
    itl = _itl_quantile(model, grid, limits, point.running, min(max(chunk_share, 0.0), 1.0), chunks, quantile)
    if busy >= 1.0:
        return PredictedLatency(lam, point.running, itl, math.inf, t_d)
    mean_wait = lam * float(np.mean(time**2)) / (2.0 * (1.0 - busy)) if lam > 0 else 0.0

    def miss(t: float) -> float:
        after = t - time
        if busy <= 0 or mean_wait <= 0:
            tail = np.zeros_like(after)
        else:
            tail = busy * np.exp(-np.maximum(after, 0.0) * busy / mean_wait)
        return float(np.mean(np.where(after <= 0, 1.0, tail)))

    lo, hi = 0.0, float(time.max()) + 1e-9
    while miss(hi) > 1.0 - quantile:
        hi *= 2.0
    for _ in range(60):
        mid = (lo + hi) / 2.0
        if miss(mid) > 1.0 - quantile:
            lo = mid
        else:
            hi = mid
    return PredictedLatency(lam, point.running, itl, hi, t_d)


#: Positions within an output a token's context is taken at (the midpoints of ``OUTPUT_POSITIONS``
#: equal parts of it).
OUTPUT_POSITIONS = 4

#: Own contexts kept for the mixture (weighted quantile points of the own-context distribution).
CONTEXT_NODES = 64


def _chunk_steps(model: StepModel, grid: _Grid, running: float, budget: int) -> NDArray[np.float64]:
    """Every chunk step of the grid's prompts, seconds, one entry a step (a prompt of ``n`` chunks
    gives ``n``; the grid's prompts are equally likely): full chunks of ``budget − running`` tokens
    and the rest, each beside ``running`` decodes at the grid's context, attending to the tokens of
    its prompt before it (as :func:`~llmscale.model.capacity._prefill`)."""
    room = max(float(budget) - running, 1.0)
    computed = grid.computed
    cached = grid.prompt - computed
    full = np.floor(computed / room)
    rest = computed - full * room
    kv = running * grid.context
    k = np.arange(int(full.max()) if len(full) else 0, dtype=np.float64)
    earlier = cached[:, None] + k[None, :] * room
    t_full = np.asarray(model.step_time(running, kv, room, room * earlier + room * room / 2.0), dtype=np.float64)
    times = np.broadcast_to(t_full, earlier.shape)[k[None, :] < full[:, None]]
    last = rest > 1e-9
    before = cached[last] + full[last] * room
    t_rest = np.asarray(model.step_time(running, kv, rest[last], rest[last] * before + rest[last] ** 2 / 2.0),
                        dtype=np.float64)
    return np.concatenate([times.ravel(), np.broadcast_to(t_rest, before.shape).ravel()])


def _itl_quantile(
    model: StepModel, grid: _Grid, limits: EngineLimits, running: float, chunk_share: float,
    chunk_steps_s: NDArray[np.float64], quantile: float,
) -> float:
    """The ``quantile`` of the token gaps (module docstring), seconds: a share ``chunk_share`` of
    them the chunk steps ``chunk_steps_s`` (equally likely), the rest decode steps over the own
    context and the Poisson batch."""
    prompt, output = grid.prompt, grid.output
    u = (np.arange(OUTPUT_POSITIONS) + 0.5) / OUTPUT_POSITIONS
    own = (prompt[:, None, None] + u[None, None, :] * output[None, :, None]).ravel()
    weight = np.broadcast_to(output[None, :, None], (len(prompt), len(output), OUTPUT_POSITIONS)).ravel()
    order = np.argsort(own)
    own, weight = own[order], weight[order] / weight.sum()
    # Weighted quantile points of the own context: CONTEXT_NODES of equal weight.
    edges = np.cumsum(weight) - weight / 2.0
    own = np.interp((np.arange(CONTEXT_NODES) + 0.5) / CONTEXT_NODES, edges, own)
    k, pk = _poisson(running, max(limits.max_num_seqs - 1, 0))
    gaps = model.step_time(1.0 + k[:, None], own[None, :] + k[:, None] * grid.context, 0.0)
    gaps = np.asarray(gaps, dtype=np.float64).ravel()
    p = np.broadcast_to(pk[:, None] / CONTEXT_NODES, (len(k), CONTEXT_NODES)).ravel() * (1.0 - chunk_share)
    if len(chunk_steps_s):
        gaps = np.concatenate([gaps, chunk_steps_s])
        p = np.concatenate([p, np.full(len(chunk_steps_s), chunk_share / len(chunk_steps_s))])
    order = np.argsort(gaps)
    gaps, p = gaps[order], np.cumsum(p[order])
    return float(gaps[min(int(np.searchsorted(p, quantile * p[-1])), len(gaps) - 1)])


def _poisson(mean: float, most: int) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """``(k, P(k))`` of a Poisson count of mean ``mean`` over ``0 … most`` (the tail folded into
    ``most``), dropping the ends below 1e-9."""
    mean = max(float(mean), 0.0)
    top = min(most, math.ceil(mean + 10.0 * math.sqrt(mean) + 10.0))
    k = np.arange(top + 1, dtype=np.float64)
    log_p = k * math.log(mean) - mean - np.array([math.lgamma(x + 1.0) for x in k]) if mean > 0 else None
    pk = np.exp(log_p) if log_p is not None else (k == 0).astype(np.float64)
    pk[-1] += max(1.0 - float(pk.sum()), 0.0)
    keep = pk > 1e-9
    return k[keep], pk[keep]
