"""The scaling decision: ``decide(spec, history, state, memory, now) -> Decision``.

Pure: no I/O, no clock; the operator and the simulator call it on every tick with the same inputs.
Every step, in order, and every reason: ``docs/policy.md``, "The algorithm, step by step". The rules
a reader of this code needs first: unknown is not zero (with no leading signal known the pool holds
its size), and proposals are *totals* against replicas that already count the starting pods, so
capacity on the way is never asked for twice; failed pods are counted but are not capacity.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from llmscale.api import LLMDeploymentSpec
from llmscale.model.capacity import DEFAULT_SHAPE, WorkloadShape
from llmscale.policy.batch.pool import batch_pool
from llmscale.policy.clamps import (
    BOUNDS,
    LIMITS,
    WINDOWS,
    Normalization,
    able_to_scale_condition,
    chain,
    no_scale_down_on_partial,
    scaling_limited_condition,
)
from llmscale.policy.diagnosis import diagnose
from llmscale.policy.history import history_seconds, trim_history
from llmscale.policy.leadtime import lead_time
from llmscale.policy.load import Capacity, capacity_context, correct, factor_in_force, factor_needing
from llmscale.policy.mix import burstiness_of, live_shape, update_burstiness, update_mix
from llmscale.policy.proposals import (
    FALLBACK_KV_CACHE_TARGET,
    Load,
    Proposal,
    ceil_replicas,
    known_value,
    kv_cache_target,
    kv_proposal,
    length_buckets,
    load_proposal,
    preemption_proposal,
    queue_proposal,
    read_load,
)
from llmscale.policy.signal_health import (
    LATENCY_WINDOW_S,
    WAKE_SIGNAL,
    latency_guard_off,
    latency_window_s,
    partial_answer,
    why_unknown,
)
from llmscale.policy.types import (
    CapacityCorrection,
    Clamped,
    ConditionResult,
    Decision,
    PolicyMemory,
    PoolState,
    Reason,
)
from llmscale.policy.windows import describe_window, scheduled_minimum
from llmscale.policy.zero import release_when_idle, wake_proposal
from llmscale.signals.assemble import CLOCK_SKEW_S, SPECULATIVE_TOKENS_PER_SAMPLE
from llmscale.signals.buckets import judge_quantile
from llmscale.signals.snapshot import SignalSnapshot

__all__ = [
    "FALLBACK_KV_CACHE_TARGET",
    "LATENCY_WINDOW_S",
    "decide",
    "headroom_replicas",
    "kv_cache_target",
]

# Fewest per-minute means for a slope: two points are a difference, not a fit, and one burst would
# set it.
_MIN_TREND_POINTS = 3

# The headroom trend is fitted on per-minute means of the KV-cache need, not on the 15 s snapshots:
# on the Azure trace one long prompt moves a 70B replica's KV use by a third between two scrapes,
# and a slope fitted to that noise asked for warm replicas that were never needed (446 scale events
# a day against the oracle's 30). 60 s is Prometheus' usual rate() window and the SLO's minute.
_TREND_BIN_S = 60.0

def _kv_need(spec: LLMDeploymentSpec, snap: SignalSnapshot) -> float | None:
    """Replicas the snapshot's KV-cache load needs at target, or None when it cannot say."""
    kv = known_value(snap.kv_cache_utilization)
    if kv is None or snap.replicas_reporting <= 0:
        return None
    return snap.replicas_reporting * min(kv, 1e12) / kv_cache_target(spec)[0]


def headroom_replicas(
    spec: LLMDeploymentSpec, history: Sequence[SignalSnapshot], now: float, lead_s: float | None = None
) -> tuple[int, str]:
    """Return the warm headroom in replicas and the reason line, when the arrival rate is unknown.

    ``H = max(floor, ceil(growthFactor × slope × lead))`` where ``floor`` is
    ``spec.headroom.replicas``, ``lead`` the lead time (``coldStartSeconds`` when not given) and
    ``slope`` (replicas/s) the least-squares fit (:func:`numpy.polyfit`, degree 1) of the KV-cache
    need, ``replicasReporting × kv / target``, averaged per minute, over the snapshots of the last
    lead time. A negative slope gives no adaptive part: shrinking is the stabilisation window's
    business. Needs at least 3 per-minute means spanning half a lead time. With an arrival rate the
    forecast sizes the headroom instead (:func:`decide`, step 5).

    Args:
        spec: the LLMDeployment spec (``headroom``, ``scaling.targets``).
        history: snapshots oldest first; ``replicas_reporting`` must be set for the trend.
        now: seconds since the Unix epoch.
        lead_s: the lead time, seconds.

    Returns:
        ``(replicas, reason)``.
    """
    floor = spec.headroom.replicas
    window = spec.headroom.cold_start_seconds if lead_s is None else lead_s
    factor = spec.headroom.growth_factor
    if factor <= 0 or window <= 0:
        return floor, f"headroom {floor} warm replicas (spec.headroom.replicas; adaptive part off)"
    points = [
        (s.observed_at, need)
        for s in history
        if now - window <= s.observed_at <= now and (need := _kv_need(spec, s)) is not None
    ]
    bins: dict[int, list[tuple[float, float]]] = {}
    for t_s, need in points:
        bins.setdefault(int((now - t_s) // _TREND_BIN_S), []).append((t_s, need))
    means = sorted((sum(p[0] for p in b) / len(b), sum(p[1] for p in b) / len(b)) for b in bins.values())
    if len(means) < _MIN_TREND_POINTS or means[-1][0] - means[0][0] < window / 2:
        return floor, (
            f"headroom {floor} warm replicas (spec.headroom.replicas; too little KV-cache history "
            f"in the last {window:.0f} s for a trend)"
        )
    t = np.array([m[0] - means[0][0] for m in means], dtype=float)
    y = np.array([m[1] for m in means], dtype=float)
    slope = float(np.polyfit(t, y, 1)[0]) if np.all(np.isfinite(y)) else 0.0
    growth = factor * slope * window
    adaptive = ceil_replicas(growth) if math.isfinite(growth) and growth > 0 else 0
    head = max(floor, adaptive)
    return head, (
        f"headroom {head} warm replicas = max(floor {floor}, ceil({factor:g} × demand growth "
        f"{slope * window:+.2f} replicas over the {window:.0f} s lead time) = {adaptive})"
    )


def _metrics_condition(
    snap: SignalSnapshot | None,
    now: float,
    max_age: float,
    unknown: list[str],
    known: list[str],
    current: int,
) -> tuple[ConditionResult, str | None]:
    """Return the MetricsAvailable condition and, when nothing is usable, the hold line."""
    if snap is None:
        msg = f"no signal snapshot yet: held {current} replicas"
        return ConditionResult("False", Reason.MetricsMissing, msg), msg
    age = max(0.0, snap.age(now))
    if not age <= max_age:
        msg = f"newest signal snapshot is {age:.0f} s old (max {max_age:.0f} s): held {current} replicas"
        return ConditionResult("False", Reason.MetricsStale, msg), msg
    if not known:
        msg = f"all leading signals unknown ({why_unknown(snap, unknown)}), snapshot {age:.0f} s old: held {current} replicas"
        return ConditionResult("False", Reason.MetricsMissing, msg), msg
    if known == [WAKE_SIGNAL]:
        msg = (f"0 replicas, so no engine reports: scaling on the wake query (spec.scaling.wake) alone, "
               f"which reads {snap.wake_demand:g}")
        return ConditionResult("True", Reason.WakeQueryOnly, msg), None
    guard_off = latency_guard_off(snap)
    if unknown:
        msg = f"{why_unknown(snap, unknown)}: scaling up only, on {', '.join(known)}"
        return ConditionResult("True", Reason.MetricsPartial, msg + (f"; {guard_off}" if guard_off else "")), None
    msg = f"queue depth, KV-cache utilisation and preemption rate known, newest sample {age:.0f} s old"
    if snap.bridged_pods:
        msg += (f" ({len(snap.bridged_pods)} pod(s) read from their last sample, their newest scrapes "
                f"timed out: {', '.join(snap.bridged_pods[:5])})")
    if guard_off:
        return ConditionResult("True", Reason.LatencyUnknown, f"{msg}; {guard_off}"), None
    return ConditionResult("True", Reason.MetricsFresh, msg), None


def _breaches(spec: LLMDeploymentSpec, snap: SignalSnapshot, *, certain: bool = False) -> list[str]:
    """The p95s over the SLO, in words; with ``certain``, only those above the histogram bucket
    holding the target (:func:`llmscale.signals.buckets.judge_quantile`): a p95 inside that bucket
    is within the interpolation error and may truly meet the target."""
    out = []
    ttft, itl = known_value(snap.ttft_p95_s), known_value(snap.itl_p95_s)
    ttft_slo, itl_slo = spec.slo.ttft_p95_seconds, spec.slo.itl_p95_seconds
    if certain:
        ttft = ttft if ttft is not None and judge_quantile(ttft, ttft_slo, snap.ttft_buckets_s) == "missed" else None
        itl = itl if itl is not None and judge_quantile(itl, itl_slo, snap.itl_buckets_s) == "missed" else None
    if ttft is not None and ttft > spec.slo.ttft_p95_seconds:
        out.append(f"TTFT p95 {ttft:.2f} s > SLO {spec.slo.ttft_p95_seconds:.2f} s")
    if itl is not None and itl > spec.slo.itl_p95_seconds:
        per = snap.itl_tokens_per_sample
        note = (f" (per token: {per:.1f} tokens a sample, speculative decoding)"
                if per is not None and per >= SPECULATIVE_TOKENS_PER_SAMPLE else "")
        out.append(f"ITL p95 {itl:.3f} s{note} > SLO {spec.slo.itl_p95_seconds:.3f} s")
    return out


def _sustained_breach(spec: LLMDeploymentSpec, history: Sequence[SignalSnapshot], snap: SignalSnapshot | None) -> str:
    """What broke in the newest p95 window and in the one a window before it, or ``""``."""
    if snap is None:
        return ""
    now_breaches = _breaches(spec, snap)
    if not now_breaches:
        return ""
    window = latency_window_s(snap)
    before = [s for s in history if s.observed_at <= snap.observed_at - window]
    if not before or not _breaches(spec, before[-1]):
        return ""
    return " and ".join(now_breaches) + f", and in the {window:.0f} s window before"


def _near_capacity(cap: Capacity, rate_rps: float, held: int, tolerance: float) -> bool:
    """Whether ``held`` replicas carrying ``rate_rps`` (requests/s) are near what the model says
    they carry at the SLO: the rate is at least ``max((held − 1) / (held · (1 + tolerance)), ½)`` of
    it (``tolerance``: ``spec.scaling.tolerance``), so a pool the load signal's band holds one above
    its strict need is near, and a pool of one is near when half loaded. Only such a pool's good
    minutes say the capacity may be higher (docs/policy.md, "The closed loop")."""
    if held <= 0 or rate_rps <= 0:
        return False
    share = max((held - 1) / (held * (1.0 + tolerance)), 0.5)
    # The need is reported at most spec.replicas.max: lifted past ``held`` so that it can say more.
    unbounded = replace(cap, max_replicas=max(cap.max_replicas, held + 1))
    return unbounded.need(rate_rps / share, hint=held).replicas > held


def _served_whole(history: Sequence[SignalSnapshot], snap: SignalSnapshot, ready: int, queue_target: float) -> bool:
    """Whether the pool that breached served ``snap``'s p95 window whole, so its p95s are about it:
    an earlier snapshot falls inside the window (none after a restart: nothing shows), no replica
    became ready inside it (the fewest reporting in the window, and the ``ready`` replicas not yet
    in the snapshot's sums), and no queue beyond ``queue_target`` requests per reporting replica
    stood in it (the TTFT is then the wait a smaller pool built)."""
    window = latency_window_s(snap)
    earlier = [s for s in history if snap.observed_at - window <= s.observed_at < snap.observed_at]
    if not earlier or ready > snap.replicas_reporting:
        return False
    if min(s.replicas_reporting for s in earlier) < snap.replicas_reporting:
        return False
    return not any(
        (q := known_value(s.queue_depth)) is not None and q > queue_target * max(s.replicas_reporting, 1)
        for s in [*earlier, snap]
    )


@dataclass(frozen=True, slots=True)
class _Guard:
    demand: int
    line: str | None
    correction: CapacityCorrection | None
    learnt: bool


def _latency_guard(
    spec: LLMDeploymentSpec,
    snap: SignalSnapshot,
    demand: int,
    reference: int,
    state: PoolState,
    ready: int,
    memory: PolicyMemory,
    cap: Capacity | None,
    load: Load,
    now: float,
    whole: bool = False,
) -> _Guard:
    """Step 5: the demand after the latency guard, its line and the correction to keep.

    With the load signal known, every p95 window in which the pool was sized as the model says (the
    leading signals ask for no more than the current demand, nothing is starting, no scale-up within
    the p95's window) is counted by the capacity correction (:func:`llmscale.policy.load.correct`);
    a breach lowers it and the load asks again at the corrected capacity (at least one more than the
    current demand). A breach in a window the pool served ``whole`` (:func:`_served_whole`), near
    the model's capacity (:func:`_near_capacity`) or the second counted breach in a row, lowers it
    at least until the model asks for one more replica (:func:`llmscale.policy.load.factor_needing`).
    Without the load signal the guard adds one replica, as it always did. It waits while a replica
    starts and until the last scale-up is older than the p95's window (the snapshot's rate window,
    :data:`LATENCY_WINDOW_S` when it does not say).
    """
    # Only a breach beyond the bucket holding the target is learnt from or answered: vLLM's TTFT
    # bucket (1, 2.5] around a 2 s SLO reads 80 requests at 0.8 s and 20 at 1.2 s as p95 2.125 s
    # (truly 1.2 s), and 30 such minutes would push the correction down and the pool up.
    breaches = _breaches(spec, snap, certain=True)
    breached = " and ".join(breaches)
    inside = [b for b in _breaches(spec, snap) if b not in breaches]
    if inside and not breaches:
        return _Guard(
            demand,
            f"{' and '.join(inside)}, but inside the histogram bucket holding the target (within the "
            "interpolation error, see SLOTargetsOnBuckets): neither learnt from nor answered",
            memory.correction,
            False,
        )
    last_up = max((t for t, d in memory.scale_events if d > 0), default=None)
    window_s = latency_window_s(snap)
    recent_up = last_up is not None and now - last_up < window_s
    starting = state.interactive_starting
    rate = load.arrivals.rate_rps
    judged = known_value(snap.ttft_p95_s) is not None or known_value(snap.itl_p95_s) is not None
    new_minute = memory.correction is None or snap.observed_at - memory.correction.updated_at >= window_s
    # A window in which the pool was sized as the model says: what its p95s say counts.
    sized_by_model = cap is not None and rate is not None and ready > 0 and demand <= reference
    if sized_by_model and judged and new_minute and not recent_up and starting == 0:
        assert cap is not None and rate is not None
        what = f"{breached} at {rate:.2f} requests/s on {ready} ready replicas" if breaches else None
        near = _near_capacity(cap, rate, reference, spec.scaling.tolerance)
        if what is None and not near:
            # A pool held well above the model's ask (a floor, a trough, a scale-down window) meets
            # the SLO whatever the capacity: its good minutes would raise the factor without end.
            # They still end a streak of breaches.
            kept = memory.correction
            return _Guard(demand, None, replace(kept, streak=0) if kept is not None else None, False)
        corr = correct(memory.correction, what, snap.observed_at)
        if what is None:
            return _Guard(demand, None, corr, False)
        # The breach is a fact about the pool: its replicas did not carry the rate. The factor goes
        # at least as far as the model then asks for one more, so the next scale-down does not
        # return to the size that broke (a 5 % step alone was learnt once per scale-down cycle).
        # Only a window the pool served whole says so: none joined, no backlog stood in it (its
        # TTFT is then the wait the smaller pool built). On a pool the model holds far from its
        # limit (a floor at a trickle: one slow request among a few) only a second breach in a row
        # does; any other window takes the 5 % step alone.
        if whole and (near or corr.streak >= 2):
            bound = factor_needing(cap.with_factor(corr.factor), rate, min(reference, ready) + 1)
            if bound < corr.factor:
                corr = replace(corr, factor=bound)
        relearnt = cap.with_factor(corr.factor)
        need = relearnt.need(rate + load.drain_rps, hint=ready + 1).replicas
        asked = max(need, reference + 1)
        return _Guard(
            asked,
            f"{what} while the leading signals ask for no more than current demand {reference}: "
            f"capacity correction {cap.factor:.2f} → {corr.factor:.2f}, the load now needs {asked}",
            corr,
            True,
        )
    if not breaches or demand > reference:
        return _Guard(demand, None, memory.correction, False)
    if recent_up:
        assert last_up is not None
        return _Guard(
            demand,
            f"{breached}, but the last scale-up was {now - last_up:.0f} s ago, inside the "
            f"{window_s:.0f} s window the p95 is computed over: latency guard waits",
            memory.correction,
            False,
        )
    if starting > 0:
        return _Guard(
            demand,
            f"{breached}, but {starting} replicas are starting: latency guard waits for them",
            memory.correction,
            False,
        )
    if cap is not None and rate is not None:
        return _Guard(
            demand,
            f"{breached}, already counted in this {window_s:.0f} s p95 window: latency guard waits",
            memory.correction,
            False,
        )
    return _Guard(
        reference + 1,
        f"{breached} while leading signals ask for no more than current demand "
        f"{reference}: latency guard proposes {reference + 1}",
        memory.correction,
        False,
    )


def _replacements(state: PoolState, recommendation: int, current: int) -> tuple[int, str | None]:
    """Return the recommendation with the failed pods' replacements, and its line.

    A failed pod stays in ``spec.replicas`` (its ReplicaSet keeps it) but will never serve, so the
    pool needs one more replica for each: ``recommendation + failed``. A scale-down later removes the
    failed pods first (a ReplicaSet deletes pods that are not Ready before Ready ones). While more
    pods failed than are Ready the failure looks like the template's or the cluster's, not one GPU's
    (a bad image, every node's driver): more pods would fail too, so nothing is added for them and
    the recommendation is not raised above ``current``.
    E.g. 3 Ready + 1 crash-looping, demand 4 and headroom 1: 5 + 1 = 6.
    """
    failed = state.interactive_failed
    if failed <= 0:
        return recommendation, None
    if failed > state.interactive_ready:
        capped = min(recommendation, current)
        return capped, (
            f"{failed} failed pods (more than the {state.interactive_ready} Ready): not replaced, the failure "
            f"looks like the template's or the cluster's rather than one node's; no replica added ({capped})"
        )
    return recommendation + failed, (
        f"{failed} failed pods will never serve: their replacements are asked for at once, "
        f"{recommendation} + {failed} = {recommendation + failed}"
    )


def _policy_state(
    memory: PolicyMemory, now: float, horizon_s: float
) -> tuple[ConditionResult, str | None, float | None]:
    """Return the PolicyStateReadable condition and the ``(unreadable, unreadable_since)`` to carry
    into the next memory (``None, None`` once nothing is left to report).

    A memory that :meth:`PolicyMemory.from_dict` could not read in full is reported from the first
    decision on it until ``horizon_s`` later: after that every entry the stabilisation windows, rate
    limits and latency guard read was recorded since, so nothing dropped can count any more.
    """
    since = memory.unreadable_since if memory.unreadable_since is not None else now
    if memory.unreadable is None or now - since >= horizon_s:
        return ConditionResult("True", Reason.PolicyStateRead, "the policy memory is complete"), None, None
    msg = (
        f"part of status.policyState could not be read: {memory.unreadable}; the stabilisation windows and "
        f"rate limits miss what was dropped for up to {horizon_s:.0f} s"
    )
    return ConditionResult("False", Reason.PolicyStateUnreadable, msg), memory.unreadable, since


def _prune(pairs: Sequence[tuple[float, int]], now: float, keep_s: float) -> tuple[tuple[float, int], ...]:
    return tuple((t, v) for t, v in pairs if t > now - keep_s)


def _model_condition(cap: Capacity | None, shape: WorkloadShape, live: bool, factor: float) -> ConditionResult:
    p, g = shape.prompt, shape.output
    mix = (
        f"prompt mean {p.mean:,.0f} tokens (p95 {p.quantile(0.95):,.0f}), output mean {g.mean:,.0f} "
        f"(p95 {g.quantile(0.95):,.0f}), prefix-cache hits {shape.prefix_cache_hit_rate:.0%}"
    )
    corr = f"; capacity correction × {factor:.2f} learnt from the p95s" if abs(factor - 1) >= 0.005 else ""
    if cap is not None and cap.calibrated_live:
        corr += "; the engines' own histograms say they are faster than the model, and it is sized so (EngineCalibrated)"
    if cap is None:
        return ConditionResult(
            "False", Reason.DefaultWorkloadMix, "the performance model cannot place this deployment: no load signal"
        )
    if live:
        return ConditionResult("True", Reason.LiveWorkloadMix, f"{shape.source}: {mix}{corr}")
    return ConditionResult(
        "False",
        Reason.DefaultWorkloadMix,
        f"no live mix (the engines report no length histograms or token counters): {shape.source}, {mix}{corr}",
    )


def decide(
    spec: LLMDeploymentSpec,
    history: Sequence[SignalSnapshot],
    state: PoolState,
    memory: PolicyMemory,
    now: float,
) -> Decision:
    """Recommend the replicas of the interactive and batch pools, with a reason for every step.

    Pure and deterministic: the same arguments give the same Decision. The caller applies it and
    persists ``Decision.memory`` (``status.policyState``) for the next call; the scale events in it
    assume the recommendation is applied.

    Args:
        spec: the LLMDeployment spec.
        history: signal snapshots of the interactive pool, oldest first (one per tick); the newest
            is the one judged, older ones feed the arrival rate, the mix, the trend and the
            burstiness (up to a lead time back; 15 minutes is plenty).
        state: replica counts now, measured cold starts and the seasonal history;
            ``interactive_replicas`` counts starting pods, which are capacity on the way and not
            requested again.
        memory: recommendations, scale events, the learnt correction and burstiness from earlier
            calls; when ``memory.unreadable`` is set the ``PolicyStateReadable`` condition says so.
        now: seconds since the Unix epoch (the caller's clock; the simulator's simulated time).

    Returns:
        The :class:`~llmscale.policy.types.Decision`; ``valid=False`` when no leading signal was
        usable and the current size was held (``spec.replicas`` bounds and calendar floors still apply).

    Raises:
        zoneinfo.ZoneInfoNotFoundError: a trough window names an unknown time zone (the API model
            rejects such specs).
    """
    scaling = spec.scaling
    current = state.interactive_replicas
    reasons: list[str] = []
    # What decide reads is the last history_seconds(spec) and the newest snapshot, whatever the
    # caller keeps: the operator (which keeps more) and the simulator decide alike.
    history = trim_history(history, now, history_seconds(spec))

    keep_recs = max(scaling.scale_up.stabilization_window_seconds, scaling.scale_down.stabilization_window_seconds)
    keep_events = max(scaling.scale_up.period_seconds, scaling.scale_down.period_seconds,
                      latency_window_s(history[-1] if history else None))
    memory_cond, unreadable, unreadable_since = _policy_state(memory, now, max(keep_recs, keep_events))
    if memory_cond.status == "False":
        reasons.append(f"policy memory incomplete: {memory_cond.message}")
    # Missing history means "recently at the current size": from the first decision on this memory
    # (or on what was left of an unreadable one) until a whole window has been seen.
    since = memory.since if memory.since is not None else now
    if memory.unreadable is not None:
        since = max(since, unreadable_since if unreadable_since is not None else now)

    snap = history[-1] if history else None
    fresh = snap if snap is not None and snap.age(now) <= scaling.metrics_max_age_seconds else None
    usable = [s for s in history if s.age(now) <= scaling.metrics_max_age_seconds + 900.0]

    lead = lead_time(state.interactive_cold_starts_s, spec.headroom.cold_start_seconds)
    buckets = length_buckets(spec)
    mix = update_mix(memory.mix, usable, buckets)
    shape, live = live_shape(mix, now, buckets) if fresh is not None else (DEFAULT_SHAPE, False)
    burst = update_burstiness(memory.burstiness, usable, shape) if fresh is not None else memory.burstiness
    factor = factor_in_force(memory.correction)
    cap = capacity_context(spec, shape, live, burstiness_of(burst), factor, state.live_fit)

    ready = (
        fresh.replicas_reporting if fresh is not None and fresh.replicas_reporting > 0 else state.interactive_ready
    )
    starting = state.interactive_starting

    # Headroom first: the current demand (the reference of the tolerance band) is what the pool
    # holds beyond it.
    load = (
        read_load(spec, cap, usable, fresh, state, ready, lead, now, max(current - spec.headroom.replicas, 0))
        if fresh is not None
        else None
    )
    if load is not None and load.need is not None and load.forecast_need is not None:
        extra = max(load.forecast_need - load.need, 0)
        head = max(spec.headroom.replicas, extra)
        head_line = (
            f"headroom {head} warm replicas = max(spec.headroom.replicas {spec.headroom.replicas}, "
            f"{load.forecast_line} needs {load.forecast_need} − {load.need} = {extra}); {lead.describe()}"
        )
    else:
        head, head_line = headroom_replicas(spec, history, now, lead.seconds)
        head_line += f"; {lead.describe()}"
    # Failed pods hold a place in spec.replicas but serve nothing: the demand held now leaves them out.
    reference = max(current - state.interactive_failed - head, 0)

    model_cond = _model_condition(cap, shape, live, factor)
    workload_line = f"workload: {model_cond.message}" if fresh is not None else None
    proposals: list[Proposal] = []
    load_known = load is not None and load.need is not None
    if fresh is not None:
        assert load is not None
        proposals.append(load_proposal(spec, load, cap, reference))
        proposals.append(queue_proposal(spec, known_value(fresh.queue_depth), ready, reference, starting, load_known))
        proposals.append(kv_proposal(spec, known_value(fresh.kv_cache_utilization), ready, reference, load_known))
        proposals.append(
            preemption_proposal(spec, known_value(fresh.preemption_rate), ready, reference, starting, load_known)
        )
    wake = wake_proposal(spec, fresh, current)
    if wake is not None:  # at zero replicas: the one demand signal there is
        proposals.append(Proposal(WAKE_SIGNAL, wake.replicas, wake.line, known=wake.known))
    leading = [p for p in proposals if p.signal != "load"]
    known = [p for p in leading if p.known]
    unknown_names = [p.signal for p in leading if not p.known] if fresh is not None else []
    metrics_cond, hold_line = _metrics_condition(
        snap, now, scaling.metrics_max_age_seconds, unknown_names, [p.signal for p in known], current
    )
    skew = fresh.clock_skew_s if fresh is not None else None
    if skew is not None and abs(skew) > CLOCK_SKEW_S:
        metrics_cond = replace(metrics_cond, message=(
            f"{metrics_cond.message}; Prometheus's clock is {abs(skew):.0f} s "
            f"{'ahead of' if skew > 0 else 'behind'} the operator's: ages are measured in Prometheus's clock"))
    # A partial answer (warnings, or Ready pods missing from the sums) never scales down.
    partial_why = partial_answer(fresh, state.interactive_ready) if fresh is not None else None
    if partial_why is not None and metrics_cond.status == "True":
        metrics_cond = ConditionResult("True", Reason.PartialAnswer,
                                       f"{partial_why}: the sums may miss pods, so no scale-down; {metrics_cond.message}")
    floor, floor_window = scheduled_minimum(spec.replicas.schedule, now, lead.seconds)
    clamp_memory = replace(memory, since=since)
    arg = Normalization(
        spec=spec,
        current=current,
        unschedulable=state.interactive_unschedulable,
        unknown=tuple(unknown_names) + ((f"a complete answer ({partial_why})",) if partial_why is not None else ()),
        memory=clamp_memory,
        now=now,
        floor=floor,
        floor_window=describe_window(floor_window) if floor_window is not None else "",
        stalled=fresh.stalled_pods if fresh is not None else (),
        sustained_breach=_sustained_breach(spec, usable, fresh),
    )

    recommendation: int | None = None
    windows: list[Clamped] = []
    limits: list[Clamped] = []
    correction = memory.correction
    if hold_line is not None:
        # Unknown is not zero: hold, and do not record a recommendation (it would be a guess).
        # Only the bounds (spec.replicas.min/max, the calendar floor) still apply.
        reasons.append(hold_line)
        if workload_line is not None:
            reasons.append(workload_line)
        reasons.append(head_line)
        demand = max(current - head, 0)
        desired, limits = chain(current, arg, BOUNDS)
        steps = limits
    else:
        assert fresh is not None and load is not None  # hold_line is None only with a fresh snapshot
        proposing = [p for p in proposals if p.known and p.replicas is not None]
        best = max(proposing, key=lambda p: p.replicas or 0) if proposing else None
        demand = (best.replicas or 0) if best is not None else 0
        demand_from = best.signal if best is not None and demand > 0 else "no load"
        # The proposal that sets the demand first (a Scaled Event's message leads with it, before
        # the clip), then the others, then the workload they were judged on.
        first = [best] if best is not None and demand > 0 else []
        reasons.extend(p.line for p in first + [p for p in proposals if p is not best or not first])
        if workload_line is not None:
            reasons.append(workload_line)

        whole = _served_whole(usable, fresh, state.interactive_ready, spec.scaling.targets.queue_depth_per_replica)
        guard = _latency_guard(spec, fresh, demand, reference, state, ready, memory, cap, load, now, whole)
        if guard.line is not None:
            reasons.append(guard.line)
        correction = guard.correction
        if guard.demand != demand:
            demand, demand_from = guard.demand, ("capacity correction" if guard.learnt else "latency guard")
        reasons.append(f"demand {demand} replicas ({demand_from})")
        reasons.append(head_line)
        recommendation = demand + head
        reasons.append(f"recommends {recommendation} = demand {demand} + headroom {head}")
        recommendation, idle_line = release_when_idle(spec, fresh, current, demand, recommendation)
        if idle_line is not None:
            reasons.append(idle_line)
        if recommendation > 0:
            recommendation, replaced_line = _replacements(state, recommendation, current)
            if replaced_line is not None:
                reasons.append(replaced_line)

        # The partial-signals floor changes the recommendation itself: the floored value is the
        # one the windows judge and the memory keeps.
        recommendation, partial = chain(recommendation, arg, (no_scale_down_on_partial,))
        stabilised, windows = chain(recommendation, arg, WINDOWS)
        desired, limited = chain(stabilised, arg, LIMITS)
        limits = partial + limited
        steps = partial + windows + limited
    reasons.extend(step.message for step in steps)

    if desired == current:
        reasons.append(f"interactive pool stays at {current} replicas")
    else:
        reasons.append(f"interactive pool {current} → {desired} replicas")

    batch, batch_cond, batch_line, batch_yield = batch_pool(spec, state, memory, desired, now)
    reasons.append(batch_line)

    if correction is not memory.correction:
        model_cond = _model_condition(cap, shape, live, factor_in_force(correction))
    diagnosis = diagnose(
        spec,
        fresh,
        ready,
        cap,
        load.arrivals.rate_rps if load is not None else None,
        load.need if load is not None else None,
    )

    recs = memory.recommendations + (((now, recommendation),) if recommendation is not None else ())
    events = memory.scale_events + (((now, desired - current),) if desired != current else ())
    new_memory = PolicyMemory(
        recommendations=_prune(recs, now, keep_recs),
        scale_events=_prune(events, now, keep_events),
        since=since,
        correction=correction,
        burstiness=burst,
        batch_yield=batch_yield,
        mix=mix,
        replicas=desired,
        unreadable=unreadable,
        unreadable_since=unreadable_since,
    )
    return Decision(
        interactive_replicas=desired,
        batch_replicas=batch,
        demand_replicas=demand,
        headroom_replicas=max(0, desired - demand - state.interactive_failed),
        reasons=tuple(reasons),
        metrics_available=metrics_cond,
        able_to_scale=able_to_scale_condition(windows, recommendation),
        scaling_limited=scaling_limited_condition(limits, desired),
        batch_window_open=batch_cond,
        policy_state_readable=memory_cond,
        capacity_model=model_cond,
        diagnosis=diagnosis,
        lead_time_s=lead.seconds,
        clamped_by=steps[-1].reason if steps else Reason.DesiredWithinRange,
        memory=new_memory,
        valid=hold_line is None,
    )
