"""The ``Diagnosis`` condition: which signature the pool's latency shows, and the remedy the model computes.

A missed p95 has a few common causes, each with its own signature in the signals and its own fix:

- **preemption pressure** — the KV cache is full (≥ :data:`KV_FULL`) and requests are preempted:
  the running batch does not fit the cache. Remedy: an fp8 KV cache (twice the tokens, vLLM
  ``--kv-cache-dtype fp8``) or a ``--max-num-seqs`` the cache holds at the live context;
- **prefill interference** — ITL p95 over the SLO while the KV cache is far from full
  (< :data:`KV_FAR_FROM_FULL`) and the queue short: prompt chunks share steps with the decodes
  (chunked prefill), and a full chunk step takes longer than the ITL target. Remedy: the
  ``--max-num-batched-tokens`` whose full step fits the target, with the replicas the SLO needs with
  and without it (:func:`llmscale.model.capacity.fleet_need`);
- **queueing** — requests wait beyond ``queueDepthPerReplica``: the pool is short. Remedy: the
  replicas the load needs;
- anything else over the SLO is named as such (``LatencyAboveSLO``).

Pure: snapshot and model in, a condition out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from llmscale.api import LLMDeploymentSpec
from llmscale.model.capacity import EngineLimits, chunk_step_time, max_batched_tokens_for_itl
from llmscale.policy.load import Capacity
from llmscale.policy.types import ConditionResult, Reason
from llmscale.signals.snapshot import SignalSnapshot

__all__ = ["KV_FAR_FROM_FULL", "KV_FULL", "BudgetRemedy", "budget_remedy", "diagnose"]

#: KV-cache use at which the cache counts as full: 0.9. vLLM preempts when a step finds no free
#: block; with 16-token blocks and requests of a few thousand tokens that starts in the last tenth.
KV_FULL = 0.9

#: KV-cache use below which the cache cannot be what slows decodes: 0.5 (a decode step's KV reads
#: are then at most half of what a full cache costs, and no request is preempted).
KV_FAR_FROM_FULL = 0.5


def _value(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) and x >= 0 else None


def diagnose(
    spec: LLMDeploymentSpec,
    snap: SignalSnapshot | None,
    ready: int,
    cap: Capacity | None,
    rate_rps: float | None,
    need: int | None = None,
) -> ConditionResult:
    """Return the ``Diagnosis`` condition for the newest fresh snapshot (``None``: nothing to judge).

    Args:
        spec: the spec (SLO, targets, engine arguments).
        snap: the fresh snapshot, or ``None`` when the signals are stale or missing.
        ready: ready replicas.
        cap: the performance model of the live workload, or ``None`` (it cannot place the replicas).
        rate_rps: the arrival rate, requests/s, or ``None``.
        need: the replicas the load signal found that rate needs, when it did (saves asking again).
    """
    if snap is None:
        return ConditionResult("Unknown", Reason.DiagnosisUnknown, "no fresh signal snapshot: nothing to diagnose")
    kv, queue = _value(snap.kv_cache_utilization), _value(snap.queue_depth)
    preempt = _value(snap.preemption_rate)
    itl, ttft = _value(snap.itl_p95_s), _value(snap.ttft_p95_s)
    slo = spec.slo
    queue_ok = spec.scaling.targets.queue_depth_per_replica * max(ready, 1)

    if kv is not None and kv >= KV_FULL and preempt is not None and preempt > 0:
        return ConditionResult("True", Reason.PreemptionPressure, _preemption_remedy(spec, kv, preempt, cap))
    far_from_full = kv is None or kv < KV_FAR_FROM_FULL
    short_queue = queue is None or queue <= queue_ok
    if itl is not None and itl > slo.itl_p95_seconds and far_from_full and short_queue:
        return ConditionResult("True", Reason.PrefillInterference, _interference_remedy(spec, itl, cap, rate_rps))
    if queue is not None and queue > queue_ok:
        return ConditionResult("True", Reason.Queueing, _queueing_remedy(spec, queue, ready, cap, rate_rps, need))
    breaches = []
    if ttft is not None and ttft > slo.ttft_p95_seconds:
        breaches.append(f"TTFT p95 {ttft:.2f} s > SLO {slo.ttft_p95_seconds:.2f} s")
    if itl is not None and itl > slo.itl_p95_seconds:
        breaches.append(f"ITL p95 {itl * 1000:.0f} ms > SLO {slo.itl_p95_seconds * 1000:.0f} ms")
    if breaches:
        kv_text = f"KV cache {kv:.0%}" if kv is not None else "KV cache unknown"
        return ConditionResult(
            "True",
            Reason.LatencyAboveSLO,
            f"{' and '.join(breaches)} with {kv_text}, queue {queue if queue is not None else 'unknown'}: "
            "no known signature (long prompts' own prefill time sets TTFT when the queue is short)",
        )
    if ttft is None and itl is None:
        return ConditionResult("Unknown", Reason.DiagnosisUnknown, "no p95 latency in the window: nothing to diagnose")
    return ConditionResult("False", Reason.WithinSLO, "both p95s within the SLO, no signature of trouble")


def _preemption_remedy(spec: LLMDeploymentSpec, kv: float, preempt: float, cap: Capacity | None) -> str:
    head = f"KV cache {kv:.0%} full and {preempt:.2f} preemptions/s"
    if cap is None:
        return f"{head}: an fp8 KV cache (--kv-cache-dtype fp8) or a lower --max-num-seqs"
    model = cap.model
    tokens = model.kv_cache_capacity_tokens
    point = cap.need(0.0).point
    context = max(point.context_tokens, 1.0)
    fits = max(int(tokens // context), 1)
    parts = []
    if spec.model.kv_cache_dtype != "fp8":
        fp8 = model.with_changes(kv_dtype="fp8").kv_cache_capacity_tokens
        parts.append(f"--kv-cache-dtype fp8 holds {fp8:,} tokens instead of {tokens:,}")
    parts.append(
        f"--max-num-seqs ≤ {fits} keeps the batch within the cache at the live context of {context:,.0f} tokens"
    )
    return f"{head}: " + "; or ".join(parts)


@dataclass(frozen=True, slots=True)
class BudgetRemedy:
    """The prefill-interference remedy in numbers (:func:`budget_remedy`).

    Attributes:
        budget: the ``--max-num-batched-tokens`` in force, tokens.
        step_s: a full chunk step at it beside the running decodes, seconds.
        best: the largest budget whose full step fits the ITL target, tokens; 0 when even a
            decode-only step does not.
        with_replicas: replicas the SLO needs at the rate with ``best`` (``None``: no rate, or no best).
        without_replicas: replicas the SLO needs at the rate with ``budget`` (``None``: no rate).
    """

    budget: int
    step_s: float
    best: int
    with_replicas: int | None
    without_replicas: int | None


def budget_remedy(cap: Capacity, itl_target_s: float, rate_rps: float | None) -> BudgetRemedy:
    """The step budget whose full chunk step fits ``itl_target_s`` at the live mix's operating
    point for ``rate_rps``, and the replicas the SLO needs with and without it
    (:func:`llmscale.model.capacity.fleet_need`; ``benchmarks/diagnosis_check.py`` applies both in
    the simulator)."""
    limits = cap.limits
    budget = limits.max_num_batched_tokens
    point = cap.need(rate_rps or 0.0).point
    running, context = point.running, point.context_tokens
    step = chunk_step_time(cap.model, max(budget - running, 1.0), running, context)
    best = max_batched_tokens_for_itl(cap.model, itl_target_s, running, context)
    without = cap.need(rate_rps).replicas if rate_rps else None
    with_best = None
    if rate_rps and best > 0:
        fixed = replace(cap, limits=EngineLimits(best, min(limits.max_num_seqs, best), limits.context_limit_tokens))
        with_best = fixed.need(rate_rps).replicas
    return BudgetRemedy(budget, step, best, with_best, without)


def _interference_remedy(spec: LLMDeploymentSpec, itl: float, cap: Capacity | None, rate_rps: float | None) -> str:
    target = spec.slo.itl_p95_seconds
    head = f"ITL p95 {itl * 1000:.0f} ms > SLO {target * 1000:.0f} ms with the KV cache far from full and a short queue"
    if cap is None:
        return f"{head}: prompt chunks share steps with the decodes; a lower --max-num-batched-tokens shortens those steps"
    r = budget_remedy(cap, target, rate_rps)
    if r.step_s <= target:
        return (
            f"{head}: a full {r.budget:,}-token chunk step takes ~{r.step_s * 1000:.0f} ms ≤ {target * 1000:.0f} ms, so "
            "the chunks are short enough; they come too often: more replicas"
            + (f" ({r.without_replicas} for {rate_rps:.1f} requests/s)" if rate_rps else "")
        )
    if r.best <= 0:
        return f"{head}: even a decode-only step takes longer than the ITL target on this replica: more GPUs per replica"
    text = (
        f"{head}: a {r.budget:,}-token chunk step takes ~{r.step_s * 1000:.0f} ms > {target * 1000:.0f} ms: "
        f"set --max-num-batched-tokens ≤ {r.best:,}"
    )
    if rate_rps:
        text += (
            f" (the SLO needs {r.with_replicas} replicas with it, {r.without_replicas} without, "
            f"at {rate_rps:.1f} requests/s)"
        )
    return text


def _queueing_remedy(
    spec: LLMDeploymentSpec, queue: float, ready: int, cap: Capacity | None, rate_rps: float | None, need: int | None
) -> str:
    head = (
        f"{queue:.0f} requests wait on {ready} ready replicas, beyond "
        f"{spec.scaling.targets.queue_depth_per_replica:g} per replica"
    )
    if cap is not None and rate_rps is not None:
        replicas = need if need is not None else cap.need(rate_rps).replicas
        return f"{head}: plain queueing, the load of {rate_rps:.1f} requests/s needs {replicas} replicas"
    return f"{head}: plain queueing, more replicas"
