"""Where one replica still meets its ITL SLO under continuous batching with chunked prefill.

On a large model the decode step alone is fast (Llama-3.1-70B bf16 on 4 × H100-SXM: 15 ms at 50
running sequences), but every arriving prompt is prefilled in steps the decodes share (vLLM V1's
scheduler puts the running decodes and up to ``max_num_batched_tokens`` of prompt into one step,
``vllm/v1/core/sched/scheduler.py``). A step carrying a 1,155-token prompt is compute-bound and
takes ~85 ms; one carrying a full 8,192-token chunk ~0.58 s. Every running sequence waits for those
steps, so the inter-token latency (ITL) is set by the *arrival rate of prompt tokens* long before
the KV cache fills: on that deployment the SLO's capacity is ~50 running sequences, ~12 % of the
513,000-token cache.

:func:`slo_operating_point` finds that capacity from the roofline model:

- pure decode step of ``B`` sequences at context ``C``: ``t_d = step_time(B, B·C, 0)``;
- per arriving prompt of ``P`` tokens, ``n = ceil(P / (budget − B))`` chunk steps taking
  ``t_p = max(n·t_d, step_time(n·B, n·B·C, P))`` in all (each chunk step also advances every decode);
- at ``λ`` arrivals/s, steps per second ``S = λ·n + (1 − λ·t_p) / t_d`` and the mean ITL is ``1/S``;
- Little's law on the decode phase: ``B = λ · G · ITL`` for ``G`` output tokens.

The mean ITL is not the p95: short outputs that share their few steps with a long prompt, and the
bursts of a real trace, put the per-minute p95 at about three times the mean.
:data:`ITL_MEAN_SHARE_OF_SLO` (0.31) is that ratio, *measured* in llmscale's simulator (the vLLM V1
scheduler rules, ``llmscale.sim.replica``) on the Azure LLM inference trace 2023: at the calibrated
capacity of the benchmark deployment (7.32 requests/s per replica, 99 % of minutes within p95 ITL
100 ms) this model gives a mean ITL of 31 ms. The operating point is where the modelled mean ITL
reaches ``ITL_MEAN_SHARE_OF_SLO × itl_p95_s``.

Pure module: numbers in, numbers out; no clock, no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from llmscale.model.roofline import ReplicaModel

__all__ = [
    "DEFAULT_MAX_NUM_BATCHED_TOKENS",
    "ITL_MEAN_SHARE_OF_SLO",
    "TRACE_MEAN_CONTEXT_TOKENS",
    "TRACE_MEAN_OUTPUT_TOKENS",
    "TRACE_MEAN_PROMPT_TOKENS",
    "SloOperatingPoint",
    "mean_itl_s",
    "slo_operating_point",
]

#: Mean prompt (``ContextTokens``) of the Azure LLM inference trace 2023, conversation, tokens
#: (CC-BY 4.0; Patel et al., "Splitwise", ISCA 2024).
TRACE_MEAN_PROMPT_TOKENS = 1155

#: Mean output (``GeneratedTokens``) of the same trace, tokens.
TRACE_MEAN_OUTPUT_TOKENS = 211

#: Decode-step-weighted mean context of a running sequence in the same trace,
#: ``Σ(g·p + g(g−1)/2) / Σg`` tokens (the planner's ``DEFAULT_MEAN_CONTEXT_TOKENS``).
TRACE_MEAN_CONTEXT_TOKENS = 1226

#: vLLM's per-step token budget (``max_num_batched_tokens``) on GPUs with ≥ 70 GiB other than the
#: A100 (``EngineArgs.get_batch_defaults`` in ``vllm/engine/arg_utils.py``; see
#: ``llmscale.engine.main.vllm_batch_defaults``), tokens. The simulator runs with it too.
DEFAULT_MAX_NUM_BATCHED_TOKENS = 8192

#: Modelled mean ITL ÷ ITL p95 SLO at the edge of the SLO. Measured, not derived: in llmscale's
#: simulator on the Azure LLM inference trace 2023 (CC-BY 4.0; Patel et al., Splitwise, ISCA 2024),
#: Llama-3.1-70B bf16 on 4 × H100-SXM meets p95 ITL ≤ 100 ms in 99 % of minutes up to 7.32
#: requests/s per replica, where :func:`mean_itl_s` gives 31 ms.
ITL_MEAN_SHARE_OF_SLO = 0.31


def _steps_per_second(
    model: ReplicaModel, rate_rps: float, running: float, prompt: float, context: float, budget: int
) -> float:
    t_d = model.step_time(running, running * context, 0)
    room = max(budget - running, 1.0)
    n = math.ceil(prompt / room)
    t_p = max(n * t_d, model.step_time(n * running, n * running * context, prompt))
    busy = rate_rps * t_p
    if busy >= 1:
        return rate_rps * n * (1 / busy)  # prefill alone fills the time: only chunk steps run
    return rate_rps * n + (1 - busy) / t_d


def mean_itl_s(
    model: ReplicaModel,
    rate_rps: float,
    *,
    prompt_tokens: float = TRACE_MEAN_PROMPT_TOKENS,
    output_tokens: float = TRACE_MEAN_OUTPUT_TOKENS,
    context_tokens: float = TRACE_MEAN_CONTEXT_TOKENS,
    max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS,
) -> tuple[float, float]:
    """Return ``(mean ITL in seconds, running sequences)`` of one replica at ``rate_rps`` arrivals.

    Solves ``ITL = 1 / S(B)`` with ``B = rate × output × ITL`` (module docstring) by bisection on
    the ITL; ``inf`` ITL when prefill alone needs all the time (``rate × t_p ≥ 1``).

    Raises:
        ValueError: a negative rate or non-positive token counts.
    """
    if rate_rps < 0 or prompt_tokens <= 0 or output_tokens <= 0 or context_tokens <= 0:
        raise ValueError("rate must be ≥ 0 and token counts positive")
    lo, hi = 0.0, 1.0
    while True:  # widen until S(B(hi)) says hi is too long an ITL
        b = rate_rps * output_tokens * hi
        if 1 / _steps_per_second(model, rate_rps, b, prompt_tokens, context_tokens, max_num_batched_tokens) <= hi:
            break
        hi *= 2
        if hi > 1e6:
            return math.inf, math.inf
    for _ in range(80):
        mid = (lo + hi) / 2
        b = rate_rps * output_tokens * mid
        s = _steps_per_second(model, rate_rps, b, prompt_tokens, context_tokens, max_num_batched_tokens)
        if 1 / s > mid:
            lo = mid
        else:
            hi = mid
    busy_check = rate_rps * model.prefill_time(prompt_tokens)
    if busy_check >= 1:
        return math.inf, math.inf
    return hi, rate_rps * output_tokens * hi


@dataclass(frozen=True, slots=True)
class SloOperatingPoint:
    """One replica at the edge of its ITL SLO (the module docstring gives the model).

    Attributes:
        rate_rps: arrivals per second per replica.
        running: running sequences per replica (``vllm:num_requests_running``).
        mean_itl_s: modelled mean ITL there, seconds (``ITL_MEAN_SHARE_OF_SLO × itl_p95_s``, or the
            decode step at batch 1 when even that misses).
        kv_cache_utilization: KV cache in use, ``running × context / capacity``, fraction 0–1.
        prefill_busy_fraction: share of the time spent in steps that carry prefill, 0–1.
        context_tokens: the mean context per running sequence assumed, tokens.
    """

    rate_rps: float
    running: float
    mean_itl_s: float
    kv_cache_utilization: float
    prefill_busy_fraction: float
    context_tokens: float


def slo_operating_point(
    model: ReplicaModel,
    itl_p95_s: float,
    *,
    prompt_tokens: float = TRACE_MEAN_PROMPT_TOKENS,
    output_tokens: float = TRACE_MEAN_OUTPUT_TOKENS,
    context_tokens: float = TRACE_MEAN_CONTEXT_TOKENS,
    max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS,
    mean_share: float = ITL_MEAN_SHARE_OF_SLO,
) -> SloOperatingPoint:
    """Return the arrival rate, running sequences and KV-cache utilisation of one replica whose
    modelled mean ITL is ``mean_share × itl_p95_s``: what one replica carries within the SLO.

    E.g. Llama-3.1-70B bf16 on 4 × H100-SXM, ITL p95 0.1 s, the Azure trace's means: mean ITL 30 ms
    at ~7.2 requests/s and ~46 running sequences, KV cache ~0.11 in use.

    Raises:
        ValueError: ``itl_p95_s`` or ``mean_share`` not positive, or the model does not fit.
    """
    if itl_p95_s <= 0 or mean_share <= 0:
        raise ValueError("itl_p95_s and mean_share must be positive")
    capacity = model.kv_cache_capacity_tokens
    if capacity <= 0:
        raise ValueError("the model leaves no room for a KV cache")
    target = mean_share * itl_p95_s
    kw: dict[str, Any] = {
        "prompt_tokens": prompt_tokens,
        "output_tokens": output_tokens,
        "context_tokens": context_tokens,
        "max_num_batched_tokens": max_num_batched_tokens,
    }
    # Mean ITL rises with the rate; the rate cannot exceed prefill throughput (busy fraction 1).
    hi = 1.0 / model.prefill_time(prompt_tokens)
    lo = 0.0
    if mean_itl_s(model, 0.0, **kw)[0] > target:
        hi = 0.0
    for _ in range(80):
        mid = (lo + hi) / 2
        if mean_itl_s(model, mid, **kw)[0] <= target:
            lo = mid
        else:
            hi = mid
    rate = lo
    itl, running = mean_itl_s(model, rate, **kw)
    if rate == 0.0:
        running = 1.0
        itl = model.decode_step_time(1, context_tokens)
    busy = min(1.0, rate * model.prefill_time(prompt_tokens))
    kv = min(1.0, running * context_tokens / capacity)
    return SloOperatingPoint(rate, running, itl, kv, busy, context_tokens)
