"""Latency quantiles the capacity model predicts for one replica at a steady arrival rate.

:func:`~llmscale.model.capacity.replica_point` judges a load against targets; a benchmark
comparing the model with an engine needs the figures themselves. From the same steady state:

- **ITL p95**: each step gives its duration as the gap of every running decode. Steps that carry
  a prompt chunk are a share ``λ·E[n]/S`` of all steps (``n`` chunk steps per prompt, ``S`` steps
  per second); when that share is over 5 % the p95 is the chunk step's time, else the pure decode
  step's.
- **TTFT p95**: the M/G/1 prefill queue of :mod:`~llmscale.model.capacity` (Pollaczek–Khinchine
  mean wait, exponential tail ``P(W > t) = ρ·exp(−t·ρ/E[W])``) plus the request's own chunk
  steps; the quantile of ``W + t_pf(P)`` over the prompt distribution, found by bisection.

Pure module.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from llmscale.model.capacity import (
    EngineLimits,
    StepModel,
    WorkloadShape,
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
        ValueError: a negative or non-finite rate.
    """
    # The targets only shape the slow-step counts, which are not used here.
    point = replica_point(model, shape, limits, 1.0, 1.0, rate_rps)
    grid = _grid(shape, limits.context_limit_tokens)
    _, time, _, _, _ = _prefill(model, grid, point.running, limits.max_num_batched_tokens, None)
    t_d = point.decode_step_s
    lam = rate_rps
    busy = point.prefill_busy
    s = point.steps_per_s
    chunk_share = (s - max(1.0 - busy, 0.0) / t_d) / s if s > 0 else 0.0
    itl = max(point.chunk_step_s, t_d) if chunk_share > 1.0 - quantile else t_d
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
