"""Capacity planner: the capacity note of one replica, built on :mod:`llmscale.model`.

Given a :class:`~llmscale.model.ReplicaModel` and a workload (mean context, context limit, a
per-user decode-speed floor, a GPU price), :func:`plan` says whether the model fits, how many
sequences fit at the context limit, where the knee and the compute ridge are, the goodput peak
(the largest batch whose every sequence still decodes at least at the floor, and its throughput),
the ``--max-num-seqs`` to run with, the cost per million tokens, and what an fp8 KV cache or a
shorter context limit would change. ``llmscale plan`` prints it (:mod:`llmscale.commands.plan`).

Pure module: no clock, no I/O.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from llmscale.model import ModelDoesNotFit, ReplicaModel, max_batched_tokens_for_itl

__all__ = [
    "DEFAULT_CONTEXT_LIMIT_TOKENS",
    "DEFAULT_GPU_HOUR_USD",
    "DEFAULT_MEAN_CONTEXT_TOKENS",
    "DEFAULT_MIN_TOK_S_PER_USER",
    "DEFAULT_UTILISATION",
    "CapacityPlan",
    "CurvePoint",
    "WhatIf",
    "check_fits",
    "plan",
    "usd_per_million_tokens",
]

#: Mean context (prompt + tokens generated so far) of a sequence in a decode step: 1,226 tokens is
#: the decode-step-weighted mean ``Σ(g·p + g(g−1)/2) / Σg`` over the requests of the Azure LLM
#: inference trace 2023, conversation (CC-BY 4.0; Patel et al., "Splitwise", ISCA 2024), where
#: ``p`` is ContextTokens and ``g`` GeneratedTokens (mean prompt 1,155, mean output 211).
DEFAULT_MEAN_CONTEXT_TOKENS = 1226

#: vLLM ``--max-model-len`` the plan assumes: the default of ``spec.model.contextLimitTokens``.
DEFAULT_CONTEXT_LIMIT_TOKENS = 8192

#: Per-user decode floor, tokens/s: 10 = 1 / 0.1 s, the default ITL p95 of ``spec.slo``.
DEFAULT_MIN_TOK_S_PER_USER = 10.0

#: Price of one GPU-hour, USD: the default of ``spec.cost.gpuHourUsd``.
DEFAULT_GPU_HOUR_USD = 2.5

#: Share of the hour a replica delivers its goodput peak. An interactive fleet sized for the daily
#: peak averages about half of it over a day; within the busiest hour of the Azure conversation
#: trace the mean is already 0.77 of the peak minute. 0.5 is a planning value: state your own.
DEFAULT_UTILISATION = 0.5


@dataclass(frozen=True)
class CurvePoint:
    """One batch size of the decode curve.

    Attributes:
        batch: running sequences.
        step_time_s: decode step time = ITL every sequence sees, seconds.
        per_user_tok_s: decode speed of each sequence, tokens/s.
        throughput_tok_s: decode tokens/s of the replica.
        kv_read_fraction: share of the step's bytes read from the KV cache, 0–1.
        bound: ``"memory"`` or ``"compute"``: which side of the roofline sets the step time.
    """

    batch: int
    step_time_s: float
    per_user_tok_s: float
    throughput_tok_s: float
    kv_read_fraction: float
    bound: str


@dataclass(frozen=True)
class WhatIf:
    """The headline figures under one change to the deployment.

    Attributes:
        change: the change, e.g. ``"kv_dtype=fp8"`` or ``"context_limit_tokens=4096"``.
        kv_bytes_per_token: KV bytes of one token after the change, bytes.
        max_concurrent_sequences: sequences at the context limit after the change.
        memory_knee_batch: the knee after the change, sequences.
        goodput_peak_batch: goodput-peak batch after the change, sequences.
        goodput_peak_tok_s: goodput-peak throughput after the change, tokens/s.
        usd_per_million_tokens: cost after the change, USD per 10⁶ tokens (None: no batch meets
            the floor).
    """

    change: str
    kv_bytes_per_token: int
    max_concurrent_sequences: int
    memory_knee_batch: float
    goodput_peak_batch: int
    goodput_peak_tok_s: float
    usd_per_million_tokens: float | None


@dataclass(frozen=True)
class CapacityPlan:
    """The capacity note of one replica; :meth:`to_json` gives the ``llmscale plan`` JSON (every key
    is documented with its unit in ``docs/plan.md``)."""

    model: str
    gpu: str
    gpus: int
    weight_dtype: str
    kv_dtype: str
    mean_context_tokens: int
    context_limit_tokens: int
    min_tokens_per_second_per_user: float
    gpu_hour_usd: float
    utilisation: float
    bandwidth_efficiency: float
    compute_efficiency: float
    kv_bytes_per_token: int
    weight_bytes: int
    usable_memory_bytes: int
    kv_cache_bytes: int
    kv_cache_capacity_tokens: int
    kv_bytes_per_sequence_at_limit: int
    max_concurrent_sequences: int
    sequences_at_mean_context: int
    memory_knee_batch: float
    compute_ridge_batch: float
    throughput_asymptote_tok_s: float
    batch_one_itl_s: float
    batch_one_tok_s: float
    prefill_tok_s: float
    latency_floor_batch: int
    goodput_peak_batch: int
    goodput_peak_tok_s: float
    goodput_peak_itl_s: float | None
    goodput_peak_limited_by: str
    recommended_max_num_seqs: int
    recommended_max_num_batched_tokens: int | None
    usd_per_million_tokens: float | None
    curve: list[CurvePoint] = field(default_factory=list)
    what_if: list[WhatIf] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """Return the plan as JSON-ready data (snake_case keys, units in the names or docs)."""
        return asdict(self)


def usd_per_million_tokens(gpu_hour_usd: float, gpus: int, tok_s: float, utilisation: float) -> float | None:
    """Cost of a million tokens: ``gpu_hour_usd × gpus / (tok_s × 3600 × utilisation) × 10⁶``, USD.

    Returns None (unknown, not free) when ``tok_s`` or ``utilisation`` is 0.
    """
    tokens_per_hour = tok_s * 3600.0 * utilisation
    if tokens_per_hour <= 0:
        return None
    return gpu_hour_usd * gpus / tokens_per_hour * 1e6


def check_fits(model: ReplicaModel, context_limit_tokens: int) -> None:
    """Raise :class:`~llmscale.model.ModelDoesNotFit` when vLLM would refuse to start: the weights
    leave no KV cache, or not one sequence of ``context_limit_tokens`` fits in it. The message
    gives the numbers and what to change."""
    gib = float(1 << 30)
    where = f"{model.arch.name} on {model.gpus}× {model.gpu.name}"
    if not model.fits:
        raise ModelDoesNotFit(
            f"{where} does not fit: weights take {model.weight_bytes / gib:.1f} GiB of "
            f"{model.usable_memory_bytes / gib:.1f} GiB usable "
            f"({model.gpu_memory_utilization:.0%} of {model.gpus} × {model.gpu.memory_bytes / gib:.0f} GiB); "
            "use more GPUs, a larger GPU or fp8 weights"
        )
    if model.max_concurrent_sequences(context_limit_tokens) < 1:
        raise ModelDoesNotFit(
            f"{where}: one sequence of {context_limit_tokens} tokens needs "
            f"{context_limit_tokens * model.kv_bytes_per_token / gib:.2f} GiB of KV cache but only "
            f"{model.kv_cache_bytes / gib:.2f} GiB is left after the weights; lower the context "
            "limit, use an fp8 KV cache or more GPUs"
        )


def _curve_batches(limit: int, extra: tuple[int, ...]) -> list[int]:
    batches = {1}
    b = 2
    while b <= limit:
        batches.add(b)
        b *= 2
    batches.update(x for x in (limit, *extra) if 1 <= x <= limit)
    return sorted(batches)


def _goodput(model: ReplicaModel, mean_context: int, floor: float) -> tuple[int, int, int, str]:
    """Return (latency-floor batch, sequences at mean context, goodput-peak batch, limited by)."""
    by_speed = model.max_batch_at_speed(floor, mean_context)
    fit = model.kv_cache_capacity_tokens // mean_context
    if by_speed <= fit:
        return by_speed, fit, by_speed, "latency floor"
    return by_speed, fit, fit, "kv cache"


def _chunk_budget(model: ReplicaModel, context: int, floor: float, max_num_seqs: int) -> int | None:
    """The step budget for the ITL target ``1 / floor`` with ``max_num_seqs`` decodes (``None``: none)."""
    budget = max_batched_tokens_for_itl(model, 1.0 / floor, running=max_num_seqs, context_tokens=context)
    return max(budget, max_num_seqs) if budget > 0 else None


def plan(
    model: ReplicaModel,
    *,
    mean_context_tokens: int = DEFAULT_MEAN_CONTEXT_TOKENS,
    context_limit_tokens: int = DEFAULT_CONTEXT_LIMIT_TOKENS,
    min_tokens_per_second_per_user: float = DEFAULT_MIN_TOK_S_PER_USER,
    gpu_hour_usd: float = DEFAULT_GPU_HOUR_USD,
    utilisation: float = DEFAULT_UTILISATION,
    what_if: bool = True,
) -> CapacityPlan:
    """Work out the capacity note of ``model`` under a workload.

    The goodput peak is the largest batch B with ``per_user_tok_s(B) ≥ floor`` (the latency-floor
    batch) that also fits in the KV cache at the mean context (``capacity_tokens // C``; beyond it
    vLLM preempts); its throughput is ``B / step_time(B)``. The recommended ``--max-num-seqs`` is
    that batch (at least 1): a larger cap only admits sequences that slow everyone below the floor
    or get preempted. The recommended ``--max-num-batched-tokens`` is the largest step budget (a
    multiple of 256) whose full step — the B decodes and a prompt chunk filling the rest — still
    takes at most ``1 / floor``, the ITL target: with chunked prefill every running sequence waits
    for the steps that carry prompt chunks (:func:`llmscale.model.max_batched_tokens_for_itl`); at
    least ``--max-num-seqs`` (vLLM's own lower bound), ``None`` when even the decodes alone miss the
    target. Cost per million tokens is priced at the goodput peak and ``utilisation``.

    Args:
        model: the replica.
        mean_context_tokens: mean context of a decoding sequence, tokens.
        context_limit_tokens: longest context a request may have (vLLM ``--max-model-len``), tokens.
        min_tokens_per_second_per_user: per-user decode floor, tokens/s.
        gpu_hour_usd: price of one GPU-hour, USD.
        utilisation: share of the hour spent at the goodput peak, 0–1.
        what_if: also work out an fp8 KV cache and a halved context limit.

    Raises:
        ModelDoesNotFit: the model or one sequence at the limit does not fit.
        ValueError: a workload figure out of range.
    """
    if mean_context_tokens < 1 or context_limit_tokens < 1:
        raise ValueError("context figures must be at least 1 token")
    if min_tokens_per_second_per_user <= 0:
        raise ValueError("min_tokens_per_second_per_user must be positive")
    if not 0 < utilisation <= 1:
        raise ValueError("utilisation must be in (0, 1]")
    if gpu_hour_usd < 0:
        raise ValueError("gpu_hour_usd must not be negative")
    check_fits(model, context_limit_tokens)

    c = mean_context_tokens
    by_speed, fit, peak_batch, limited_by = _goodput(model, c, min_tokens_per_second_per_user)
    peak_tok_s = model.throughput_tok_s(peak_batch, c) if peak_batch > 0 else 0.0
    knee = model.memory_knee_batch(c)
    ridge = model.compute_ridge_batch()

    curve = []
    for b in _curve_batches(max(fit, 1), (peak_batch, round(knee))):
        t = model.decode_step_time(b, c)
        compute = model.flops_per_token * b / model.effective_flops
        memory = (model.weight_bytes + b * c * model.kv_bytes_per_token) / model.effective_bandwidth_bytes_s
        curve.append(
            CurvePoint(
                batch=b,
                step_time_s=t,
                per_user_tok_s=1.0 / t,
                throughput_tok_s=b / t,
                kv_read_fraction=model.kv_read_fraction(b, c),
                bound="compute" if compute > memory else "memory",
            )
        )

    changes: list[WhatIf] = []
    if what_if:
        variants: list[tuple[str, ReplicaModel, int]] = []
        if model.kv_dtype not in ("fp8", "fp8_e4m3", "fp8_e5m2"):
            variants.append(("kv_dtype=fp8", model.with_changes(kv_dtype="fp8"), context_limit_tokens))
        if context_limit_tokens // 2 >= 256:
            variants.append(
                (f"context_limit_tokens={context_limit_tokens // 2}", model, context_limit_tokens // 2)
            )
        for name, variant, limit in variants:
            _, _, vb, _ = _goodput(variant, c, min_tokens_per_second_per_user)
            vtok = variant.throughput_tok_s(vb, c) if vb > 0 else 0.0
            changes.append(
                WhatIf(
                    change=name,
                    kv_bytes_per_token=variant.kv_bytes_per_token,
                    max_concurrent_sequences=variant.max_concurrent_sequences(limit),
                    memory_knee_batch=variant.memory_knee_batch(c),
                    goodput_peak_batch=vb,
                    goodput_peak_tok_s=vtok,
                    usd_per_million_tokens=usd_per_million_tokens(
                        gpu_hour_usd, variant.gpus, vtok, utilisation
                    ),
                )
            )

    return CapacityPlan(
        model=model.arch.name,
        gpu=model.gpu.name,
        gpus=model.gpus,
        weight_dtype=model.weight_dtype,
        kv_dtype=model.kv_dtype,
        mean_context_tokens=c,
        context_limit_tokens=context_limit_tokens,
        min_tokens_per_second_per_user=min_tokens_per_second_per_user,
        gpu_hour_usd=gpu_hour_usd,
        utilisation=utilisation,
        bandwidth_efficiency=model.bandwidth_efficiency,
        compute_efficiency=model.compute_efficiency,
        kv_bytes_per_token=model.kv_bytes_per_token,
        weight_bytes=model.weight_bytes,
        usable_memory_bytes=model.usable_memory_bytes,
        kv_cache_bytes=model.kv_cache_bytes,
        kv_cache_capacity_tokens=model.kv_cache_capacity_tokens,
        kv_bytes_per_sequence_at_limit=model.kv_bytes_per_token * context_limit_tokens,
        max_concurrent_sequences=model.max_concurrent_sequences(context_limit_tokens),
        sequences_at_mean_context=fit,
        memory_knee_batch=knee,
        compute_ridge_batch=ridge,
        throughput_asymptote_tok_s=model.throughput_asymptote_tok_s(c),
        batch_one_itl_s=model.decode_step_time(1, c),
        batch_one_tok_s=model.per_user_tok_s(1, c),
        prefill_tok_s=c / model.prefill_time(c),
        latency_floor_batch=by_speed,
        goodput_peak_batch=peak_batch,
        goodput_peak_tok_s=peak_tok_s,
        goodput_peak_itl_s=model.decode_step_time(peak_batch, c) if peak_batch > 0 else None,
        goodput_peak_limited_by=limited_by if peak_batch > 0 else "latency floor",
        recommended_max_num_seqs=max(peak_batch, 1),
        recommended_max_num_batched_tokens=_chunk_budget(model, c, min_tokens_per_second_per_user, max(peak_batch, 1)),
        usd_per_million_tokens=usd_per_million_tokens(gpu_hour_usd, model.gpus, peak_tok_s, utilisation),
        curve=curve,
        what_if=changes,
    )
