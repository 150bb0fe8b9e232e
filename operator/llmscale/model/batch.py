"""Throughput of one replica on batch work, from the roofline model. Pure: numbers in, numbers out.

The batch planner (:mod:`llmscale.policy.batch.plan`) sizes the batch pool as outstanding tokens ÷ one
replica's tokens/s ÷ the time left; this module gives that tokens/s for a mix of requests with a
mean prompt ``P`` and a mean output ``G`` (tokens).

One replica runs ``B`` sequences at once, ``B`` the goodput peak of :mod:`llmscale.planner`: the
largest batch whose every sequence still decodes at ``min_tok_s_per_user`` (``1 / spec.slo.itlP95Seconds``:
the batch pool runs the same engine flags as the interactive one) that also fits the KV cache at the
mix's mean decode context ``C = P + G/2``. Each request costs the replica

    ``s = prefill_time(P) + G × decode_step_time(B, C) / B``   seconds,

its prefill (compute-bound above a few hundred tokens, so it holds the whole replica) plus its share
of ``G`` decode steps of ``B`` sequences. Requests per second are ``1 / s`` and tokens per second
``(P + G) / s``. Serialising prefill and decode this way is conservative: vLLM's chunked prefill
overlaps a prompt's chunks with the decodes' weight reads (``vllm/v1/core/sched/scheduler.py``), so
a real replica is somewhat faster and the pool finishes early rather than late.

E.g. Llama-3.1-70B bf16 on 4 × H100-SXM, the Azure LLM inference trace 2023's means (P 1,155, G 211;
CC-BY 4.0, Patel et al., Splitwise, ISCA 2024), ITL 100 ms: 407 sequences fit the KV cache; a request costs
82 ms of prefill and 15 ms of compute-bound decode: 10.3 requests/s, 14,000 tokens/s
(``tests/model/test_batch_throughput.py`` works it through).
"""

from __future__ import annotations

from dataclasses import dataclass

from llmscale.model.roofline import ModelDoesNotFit, ReplicaModel

__all__ = ["BatchThroughput", "batch_throughput"]


@dataclass(frozen=True, slots=True)
class BatchThroughput:
    """One replica working through batch requests of one mix.

    Attributes:
        tokens_per_s: prompt + output tokens completed per second.
        requests_per_s: requests completed per second.
        running: sequences decoding at once (the goodput-peak batch; ``in_flight`` when fewer).
        seconds_per_request: replica time one request costs, seconds (``1 / requests_per_s``).
        prompt_tokens: mean prompt of the mix, tokens.
        output_tokens: mean output of the mix, tokens.
    """

    tokens_per_s: float
    requests_per_s: float
    running: float
    seconds_per_request: float
    prompt_tokens: float
    output_tokens: float


def batch_throughput(
    model: ReplicaModel,
    *,
    prompt_tokens: float,
    output_tokens: float,
    min_tok_s_per_user: float,
    in_flight: float | None = None,
) -> BatchThroughput:
    """Return one replica's throughput on requests of mean prompt ``prompt_tokens`` and mean output
    ``output_tokens`` (module docstring: the formula and why it is conservative).

    Args:
        model: the replica (``ReplicaModel.from_spec(spec)``).
        prompt_tokens: mean prompt per request, tokens (> 0).
        output_tokens: mean output per request, tokens (≥ 1).
        min_tok_s_per_user: per-sequence decode floor, tokens/s (> 0); ``1 / spec.slo.itlP95Seconds``.
        in_flight: requests the clients keep in flight on this replica (≥ 1; ``None``: enough to
            fill it). The replica then runs ``B = min(in_flight, goodput batch)`` sequences: a
            closed-loop client with ``in_flight`` requests outstanding never gives it more, and
            the formula above holds with that ``B`` (below the goodput batch the decode steps are
            shared by fewer sequences, so each request costs more replica time).

    Raises:
        ValueError: a token count, the floor or ``in_flight`` out of range.
        ModelDoesNotFit: not one sequence of the mix's mean context fits the KV cache.
    """
    if prompt_tokens <= 0 or output_tokens < 1:
        raise ValueError("prompt_tokens must be positive and output_tokens at least 1")
    if min_tok_s_per_user <= 0:
        raise ValueError("min_tok_s_per_user must be positive")
    if in_flight is not None and not in_flight >= 1:
        raise ValueError(f"in_flight must be at least 1, got {in_flight}")
    context = prompt_tokens + output_tokens / 2
    fit = int(model.kv_cache_capacity_tokens // context)
    if fit < 1:
        raise ModelDoesNotFit(
            f"not one sequence of {context:,.0f} tokens fits the {model.kv_cache_capacity_tokens:,}-token KV cache"
        )
    # Below the floor even at batch 1, the replica still works, one sequence at a time.
    running: float = max(1, min(model.max_batch_at_speed(min_tok_s_per_user, context), fit))
    if in_flight is not None:
        running = min(running, in_flight)
    decode_share_s = output_tokens * model.decode_step_time(running, context) / running
    seconds = model.prefill_time(prompt_tokens) + decode_share_s
    return BatchThroughput(
        tokens_per_s=(prompt_tokens + output_tokens) / seconds,
        requests_per_s=1.0 / seconds,
        running=running,
        seconds_per_request=seconds,
        prompt_tokens=prompt_tokens,
        output_tokens=output_tokens,
    )
