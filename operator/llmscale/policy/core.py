"""The scaling decision: ``decide(spec, history, state, memory, now) -> Decision``.

Pure: no I/O, no clock, no metrics recording. The operator and the simulator call it on every
tick with the same inputs and apply what it recommends. The steps, in order (each writes a line to
``Decision.reasons``):

0. **Memory.** When part of ``status.policyState`` could not be read (``memory.unreadable``, set
   by :meth:`PolicyMemory.from_dict`), a line and ``PolicyStateReadable=False`` say so for as long
   as the dropped entries could still have counted; the decision goes on with what was kept.
1. **Freshness.** The newest snapshot older than ``spec.scaling.metricsMaxAgeSeconds`` makes every
   signal unknown. Unknown is not zero: with no leading signal known the pool holds its size
   (``valid=False``, ``MetricsAvailable=False``).
2. **Headroom** ``H = max(spec.headroom.replicas, ceil(growthFactor × slope × coldStartSeconds))``,
   where ``slope`` is the least-squares slope (replicas/s) of the per-minute mean KV-cache need over
   the last cold start of history. A replica asked for now is Ready one cold start later, so the
   warm spare must cover the growth in that time (``growthFactor`` is 0, off, by default).
3. **Proposals.** Each leading signal proposes a replica count the way the HPA does per metric
   (``pkg/controller/podautoscaler/replica_calculator.go``): ``ceil(ready × observed_per_replica /
   target)``. Queue depth and preemptions are sums over the pool, so this is ``ceil(total /
   target)``; KV-cache utilisation is a mean, so ``ceil(ready × mean / target)``, with the target
   from the spec or, unset, from the performance model and the ITL SLO (:func:`kv_cache_target`).
   Within ``±tolerance`` of the *current demand* (current replicas less ``H``) a signal proposes no
   change. The HPA compares the per-replica ratio with 1 instead; we cannot, because our ready
   replicas include warm headroom that runs below target by design. The two *backlog* signals
   (queue depth, preemptions) only push up: at or below the current demand they propose nothing
   (an empty queue says "not short", not "needs zero"). Above it their total is compared with
   replicas that include the starting ones, so each starting replica absorbs one replica's worth
   (``target``) of the backlog, not all of it. The largest proposal is the demand. At zero replicas
   the wake query (``spec.scaling.wake``) proposes too (:mod:`llmscale.policy.zero`).
4. **Latency guard.** When p95 TTFT or ITL breaches ``spec.slo`` while the leading signals ask for no
   more than the current demand and no replica is starting, demand is the current demand + 1 (the
   lagging signal says the leading targets are too loose for this traffic). One replica per cold
   start at most: while it starts the guard is quiet; and not again until the last scale-up is
   older than the window the p95 is computed over (the snapshot's rate window; :data:`LATENCY_WINDOW_S`
   when it does not say), since a younger replica cannot show in it yet.
5. **Recommendation** ``demand + H``; 0 when a ``min: 0`` pool is idle (:func:`release_when_idle`).
   On partial data (some leading signal unknown) it is floored at
   the current size (``MetricsPartial``, the first clamp): scale up on what is known, never down.
6. **Clamps** (:mod:`llmscale.policy.clamps`), chained the way the HPA's
   ``normalizeDesiredReplicasWithBehaviors`` chains its helpers, each a small function returning
   ``(replicas, reason, message)``: the stabilisation windows over ``memory.recommendations``
   (lowest in the scale-up window, highest in the scale-down window), reported in ``AbleToScale``;
   then the limits, reported in ``ScalingLimited``: rate limits over ``memory.scale_events``
   (``maxReplicasPerPeriod`` within ``periodSeconds``), no removing while an engine hangs, no adding
   while pods are unschedulable, ``spec.replicas.min``/``max``. Scale-down is one rate-limited step at a time; Kubernetes drains
   the removed pod (in-flight requests finish within its termination grace period), the policy
   never kills work.
7. **Batch pool**: ``spec.batch.replicas`` inside a trough window, 0 outside
   (:func:`llmscale.policy.windows.batch_window_open`).

Pods in their cold start are capacity on the way, never asked for twice: proposals are *totals*
(replicas the load needs) compared with ``state.interactive_replicas``, which already counts the
starting pods; only the per-replica arithmetic uses the ready count.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from llmscale.api import LLMDeploymentSpec, ModelSpec, ResourcesSpec
from llmscale.model import ModelDoesNotFit, ReplicaModel
from llmscale.model.slo import slo_operating_point
from llmscale.policy.clamps import (
    LIMITS,
    WINDOWS,
    Normalization,
    able_to_scale_condition,
    chain,
    no_scale_down_on_partial,
    replica_bounds,
    scaling_limited_condition,
)
from llmscale.policy.signal_health import (
    LATENCY_WINDOW_S,
    WAKE_SIGNAL,
    latency_guard_off,
    latency_window_s,
    why_unknown,
)
from llmscale.policy.types import Clamped, ConditionResult, Decision, PolicyMemory, PoolState, Reason
from llmscale.policy.windows import batch_window_open, describe_window, local_time
from llmscale.policy.zero import release_when_idle, wake_proposal
from llmscale.signals.snapshot import SignalSnapshot

__all__ = [
    "FALLBACK_KV_CACHE_TARGET",
    "LATENCY_WINDOW_S",
    "decide",
    "headroom_replicas",
    "kv_cache_target",
]

# ceil() of a ratio that is an integer up to float rounding (4 × 0.75 / 0.75) must not round up.
_EPS = 1e-9

# Fewest per-minute means for a slope: two points are a difference, not a fit, and one burst would
# set it.
_MIN_TREND_POINTS = 3

# The headroom trend is fitted on per-minute means of the KV-cache need, not on the 15 s snapshots:
# on the Azure trace one long prompt moves a 70B replica's KV use by a third between two scrapes,
# and a slope fitted to that noise asked for warm replicas that were never needed (446 scale events
# a day against the oracle's 30). 60 s is Prometheus' usual rate() window and the SLO's minute.
_TREND_BIN_S = 60.0

#: KV-cache target when ``spec.scaling.targets.kvCacheUtilization`` is unset and the performance
#: model cannot give one (the model does not fit its GPUs): vLLM's cache is then the only bound
#: known, and 0.75 leaves a quarter of it for bursts.
FALLBACK_KV_CACHE_TARGET = 0.75


@lru_cache(maxsize=64)
def _auto_kv_target(model: ModelSpec, resources: ResourcesSpec, itl_p95_s: float) -> tuple[float, str]:
    try:
        replica = ReplicaModel.from_spec(LLMDeploymentSpec(model=model, resources=resources))
        point = slo_operating_point(replica, itl_p95_s)
    except (ModelDoesNotFit, ValueError) as exc:
        return FALLBACK_KV_CACHE_TARGET, f"auto: the performance model gives none ({exc}), fallback"
    return point.kv_cache_utilization, (
        f"auto: {point.running:.0f} running × {point.context_tokens:.0f} tokens at "
        f"{point.rate_rps:.1f} requests/s, where the modelled mean ITL is {point.mean_itl_s * 1000:.0f} ms "
        f"(ITL p95 SLO {itl_p95_s * 1000:.0f} ms)"
    )


def kv_cache_target(spec: LLMDeploymentSpec) -> tuple[float, str]:
    """Return the KV-cache utilisation target (fraction 0–1) and where it came from.

    ``spec.scaling.targets.kvCacheUtilization`` when set (``"spec"``); unset, the KV-cache use of
    one replica at the edge of its ITL SLO, from the roofline model under chunked prefill
    (:func:`llmscale.model.slo.slo_operating_point` with ``spec.slo.itlP95Seconds`` and the Azure
    LLM inference trace 2023's mean prompt and output; CC-BY 4.0, Patel et al., Splitwise, ISCA
    2024): 0.114 for Llama-3.1-70B bf16 on 4 × H100-SXM at 100 ms. When the model cannot give one,
    :data:`FALLBACK_KV_CACHE_TARGET`. Cached per (model, resources, SLO).
    """
    explicit = spec.scaling.targets.kv_cache_utilization
    if explicit is not None:
        return explicit, "spec"
    return _auto_kv_target(spec.model, spec.resources, spec.slo.itl_p95_seconds)


def _ceil(x: float) -> int:
    return max(0, math.ceil(x - _EPS))


def _known(value: float | None) -> float | None:
    # The snapshot already turns NaN/Inf into None; a negative gauge or rate (a counter reset seen
    # by rate(), a broken exporter) is not a measurement either.
    if value is None or value < 0:
        return None
    return value


@dataclass(frozen=True, slots=True)
class _Proposal:
    signal: str
    replicas: int | None  # None: proposes nothing (unknown, or a backlog signal that is not short)
    line: str
    known: bool = True


def _compare(per_replica: float, target: float, tolerance: float) -> str:
    if per_replica > target * (1 + tolerance):
        return ">"
    if per_replica < target * (1 - tolerance):
        return "<"
    return "≈"


@dataclass(frozen=True, slots=True)
class _Settled:
    """One signal's replica count after the tolerance band around the current demand.

    Attributes:
        replicas: ``reference`` when ``within``, else ``ceil(raw)``.
        within: ``raw`` is within ``±tolerance`` of ``reference`` (and ``reference > 0``): no change.
        tolerance: ``spec.scaling.tolerance`` (fraction).
        reference: the current demand, replicas.
    """

    replicas: int
    within: bool
    tolerance: float
    reference: int

    def phrase(self) -> str:
        """Return the end of the signal's reason line, e.g. ``proposes 5``."""
        if self.within:
            return (
                f"within {self.tolerance:.0%} of current demand {self.reference}: "
                f"proposes {self.reference} (no change)"
            )
        return f"proposes {self.replicas}"


def _settle(raw: float, reference: int, tolerance: float) -> _Settled:
    """Return ``reference`` when ``raw`` (replicas) is within tolerance of it, else ``ceil(raw)``."""
    if reference > 0 and abs(raw / reference - 1) <= tolerance:
        return _Settled(reference, True, tolerance, reference)
    return _Settled(_ceil(raw), False, tolerance, reference)


def _only_up(settled: _Settled, starting: int) -> tuple[int | None, str]:
    """A backlog signal (queue depth, preemptions) says "short", never "needs fewer".

    An empty queue means the ready replicas keep up, not that the pool needs none: below the current
    demand a backlog signal proposes nothing, so it can only raise the demand the others set (the
    HPA's per-metric ``ceil(queue / target)`` would otherwise ask for the minimum whenever no
    request waits, and the largest-wins rule would let it do so when the KV-cache signal is quiet).
    Above it, the proposal is a total compared with replicas that include the starting ones, so each
    starting replica absorbs one replica's worth (``target``) of the backlog, not all of it.

    Returns:
        ``(proposal, phrase)``: ``None`` when the signal proposes nothing.
    """
    reference = settled.reference
    if settled.replicas <= reference:
        if settled.within:
            return None, f"within {settled.tolerance:.0%} of current demand {reference}: not short, proposes nothing"
        return None, f"{settled.replicas} ≤ current demand {reference}: not short, proposes nothing"
    if starting > 0:
        return settled.replicas, f"{settled.phrase()} ({starting} starting replicas count as {starting} of them)"
    return settled.replicas, settled.phrase()


def _proposals(
    spec: LLMDeploymentSpec, snap: SignalSnapshot | None, ready: int, reference: int, starting: int
) -> list[_Proposal]:
    targets = spec.scaling.targets
    tol = spec.scaling.tolerance
    out: list[_Proposal] = []

    queue = _known(snap.queue_depth) if snap else None
    if queue is None:
        out.append(_Proposal("queue depth", None, "queue depth unknown: proposes nothing", known=False))
    else:
        raw = queue / targets.queue_depth_per_replica
        queue_proposal, suffix = _only_up(_settle(raw, reference, tol), starting)
        if ready > 0:
            per = queue / ready
            cmp = _compare(per, targets.queue_depth_per_replica, tol)
            line = (
                f"queue depth {queue:.1f} over {ready} ready replicas = {per:.1f} per replica "
                f"{cmp} target {targets.queue_depth_per_replica:.1f}: {suffix}"
            )
        else:
            line = f"queue depth {queue:.1f} with no ready replica, target {targets.queue_depth_per_replica:.1f}: {suffix}"
        out.append(_Proposal("queue depth", queue_proposal, line))

    kv = _known(snap.kv_cache_utilization) if snap else None
    if kv is None:
        out.append(
            _Proposal("KV-cache utilisation", None, "KV-cache utilisation unknown: proposes nothing", known=False)
        )
    elif ready == 0:
        out.append(
            _Proposal(
                "KV-cache utilisation",
                None,
                "KV-cache utilisation is a mean over no ready replica: proposes nothing",
                known=False,
            )
        )
    else:
        kv_target, origin = kv_cache_target(spec)
        raw = ready * kv / kv_target
        settled = _settle(raw, reference, tol)
        kv_proposal, kv_suffix = settled.replicas, settled.phrase()
        cmp = _compare(kv, kv_target, tol)
        named = f"target {kv_target:.2f}" if origin == "spec" else f"target {kv_target:.3f} ({origin})"
        line = (
            f"KV-cache utilisation {kv:.2f} mean over {ready} ready replicas {cmp} {named} "
            f"({raw:.2f} replicas at target): {kv_suffix}"
        )
        out.append(_Proposal("KV-cache utilisation", kv_proposal, line))

    rate = _known(snap.preemption_rate) if snap else None
    if rate is None:
        out.append(_Proposal("preemption rate", None, "preemption rate unknown: proposes nothing", known=False))
    else:
        target = targets.preemptions_per_second_per_replica
        raw = rate / target
        rate_proposal, suffix = _only_up(_settle(raw, reference, tol), starting)
        if ready > 0:
            per = rate / ready
            line = (
                f"preemption rate {rate:.3f}/s over {ready} ready replicas = {per:.3f}/s per replica "
                f"{_compare(per, target, tol)} target {target:.3f}/s: {suffix}"
            )
        else:
            line = f"preemption rate {rate:.3f}/s with no ready replica, target {target:.3f}/s: {suffix}"
        out.append(_Proposal("preemption rate", rate_proposal, line))
    return out


def _kv_need(spec: LLMDeploymentSpec, snap: SignalSnapshot) -> float | None:
    """Replicas the snapshot's KV-cache load needs at target, or None when it cannot say."""
    kv = _known(snap.kv_cache_utilization)
    if kv is None or snap.replicas_reporting <= 0:
        return None
    return snap.replicas_reporting * kv / kv_cache_target(spec)[0]


def headroom_replicas(
    spec: LLMDeploymentSpec, history: Sequence[SignalSnapshot], now: float
) -> tuple[int, str]:
    """Return the warm headroom in replicas and the reason line.

    ``H = max(floor, ceil(growthFactor × slope × coldStart))`` where ``floor`` is
    ``spec.headroom.replicas`` and ``slope`` (replicas/s) is the least-squares fit
    (:func:`numpy.polyfit`, degree 1) of the KV-cache need, ``replicasReporting × kv / target``,
    averaged per minute, over the snapshots of the last ``coldStartSeconds``. The KV-cache need is the pool's concurrency
    (tokens held), the smoothest leading signal; queue depth is a backlog that spikes in bursts and
    already has its own proposal. A negative slope gives no adaptive part: shrinking is the
    stabilisation window's business. Needs at least 3 per-minute means spanning half a cold start;
    fitting the 15 s snapshots themselves chased the noise of single long prompts.

    Args:
        spec: the LLMDeployment spec (``headroom``, ``scaling.targets``).
        history: snapshots oldest first; ``replicas_reporting`` must be set for the trend.
        now: seconds since the Unix epoch.

    Returns:
        ``(replicas, reason)``.
    """
    floor = spec.headroom.replicas
    window = spec.headroom.cold_start_seconds
    factor = spec.headroom.growth_factor
    if factor <= 0 or window <= 0:
        return floor, f"headroom {floor} warm replicas (spec.headroom.replicas; adaptive part off)"
    points = [
        (s.observed_at, need)
        for s in history
        if now - window <= s.observed_at <= now and (need := _kv_need(spec, s)) is not None
    ]
    # Per-minute means (bins counted back from now) before the fit: see _TREND_BIN_S.
    bins: dict[int, list[tuple[float, float]]] = {}
    for t_s, need in points:
        bins.setdefault(int((now - t_s) // _TREND_BIN_S), []).append((t_s, need))
    means = sorted(
        (sum(p[0] for p in b) / len(b), sum(p[1] for p in b) / len(b)) for b in bins.values()
    )
    if len(means) < _MIN_TREND_POINTS or means[-1][0] - means[0][0] < window / 2:
        return floor, (
            f"headroom {floor} warm replicas (spec.headroom.replicas; too little KV-cache history "
            f"in the last {window:.0f} s cold start for a trend)"
        )
    t = np.array([m[0] - means[0][0] for m in means], dtype=float)
    y = np.array([m[1] for m in means], dtype=float)
    slope = float(np.polyfit(t, y, 1)[0])
    growth = factor * slope * window
    adaptive = _ceil(growth) if growth > 0 else 0
    head = max(floor, adaptive)
    return head, (
        f"headroom {head} warm replicas = max(floor {floor}, ceil({factor:g} × demand growth "
        f"{slope * window:+.2f} replicas over the {window:.0f} s cold start) = {adaptive})"
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
    if age > max_age:
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
    if guard_off:
        return ConditionResult("True", Reason.LatencyUnknown, f"{msg}; {guard_off}"), None
    return ConditionResult("True", Reason.MetricsFresh, msg), None


def _latency_guard(
    spec: LLMDeploymentSpec,
    snap: SignalSnapshot,
    demand: int,
    reference: int,
    starting: int,
    memory: PolicyMemory,
    now: float,
) -> tuple[int, str | None]:
    """Step 4: return the demand after the latency guard and its reason line (``None``: no breach,
    or the leading signals already ask for more than the current demand ``reference``).

    The guard raises the demand to ``reference + 1`` when p95 TTFT or ITL breaches ``spec.slo``, no
    replica is starting and the last scale-up is at least the p95's window old (the snapshot's rate
    window, :data:`LATENCY_WINDOW_S` when it does not say); otherwise it waits and says why.
    """
    breaches = []
    if snap.ttft_p95_s is not None and snap.ttft_p95_s > spec.slo.ttft_p95_seconds:
        breaches.append(f"TTFT p95 {snap.ttft_p95_s:.2f} s > SLO {spec.slo.ttft_p95_seconds:.2f} s")
    if snap.itl_p95_s is not None and snap.itl_p95_s > spec.slo.itl_p95_seconds:
        breaches.append(f"ITL p95 {snap.itl_p95_s:.3f} s > SLO {spec.slo.itl_p95_seconds:.3f} s")
    if not breaches or demand > reference:
        return demand, None
    breached = " and ".join(breaches)
    last_up = max((t for t, d in memory.scale_events if d > 0), default=None)
    window_s = latency_window_s(snap)
    if last_up is not None and now - last_up < window_s:
        return demand, (
            f"{breached}, but the last scale-up was {now - last_up:.0f} s ago, inside "
            f"the {window_s:.0f} s window the p95 is computed over: latency guard waits"
        )
    if starting > 0:
        return demand, f"{breached}, but {starting} replicas are starting: latency guard waits for them"
    return reference + 1, (
        f"{breached} while leading signals ask for no more than current demand "
        f"{reference}: latency guard proposes {reference + 1}"
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


def _batch(spec: LLMDeploymentSpec, now: float) -> tuple[int, ConditionResult, str]:
    if spec.batch is None:
        msg = "no batch pool (spec.batch is not set)"
        return 0, ConditionResult("False", Reason.NoBatchPool, msg), msg
    window = batch_window_open(spec.batch.windows, now)
    if window is not None:
        local = local_time(now, window.timezone)
        msg = (
            f"trough window {describe_window(window)} is open (local {local:%a %H:%M %Z}): "
            f"batch pool {spec.batch.replicas} replicas"
        )
        return spec.batch.replicas, ConditionResult("True", Reason.InsideTroughWindow, msg), msg
    first = spec.batch.windows[0]
    local = local_time(now, first.timezone)
    listed = "; ".join(describe_window(w) for w in spec.batch.windows)
    msg = f"no trough window open (local {local:%a %H:%M %Z}; windows: {listed}): batch pool 0 replicas"
    return 0, ConditionResult("False", Reason.OutsideTroughWindows, msg), msg


def _prune(pairs: Sequence[tuple[float, int]], now: float, keep_s: float) -> tuple[tuple[float, int], ...]:
    return tuple((t, v) for t, v in pairs if t > now - keep_s)


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
            is the one judged, older ones feed the headroom trend (up to one cold start back).
        state: replica counts now; ``interactive_replicas`` counts starting pods, which are
            capacity on the way and not requested again.
        memory: recommendations and scale events from earlier calls; when ``memory.unreadable`` is
            set (part of ``status.policyState`` was dropped) the ``PolicyStateReadable`` condition
            says so.
        now: seconds since the Unix epoch (the caller's clock; the simulator's simulated time).

    Returns:
        The :class:`~llmscale.policy.types.Decision`; ``valid=False`` when no leading signal was
        usable and the current size was held (``spec.replicas`` bounds still apply).

    Raises:
        zoneinfo.ZoneInfoNotFoundError: a trough window names an unknown time zone (the API model
            rejects such specs).
    """
    scaling = spec.scaling
    current = state.interactive_replicas
    reasons: list[str] = []

    keep_recs = max(scaling.scale_up.stabilization_window_seconds, scaling.scale_down.stabilization_window_seconds)
    keep_events = max(scaling.scale_up.period_seconds, scaling.scale_down.period_seconds,
                      latency_window_s(history[-1] if history else None))
    memory_cond, unreadable, unreadable_since = _policy_state(memory, now, max(keep_recs, keep_events))
    if memory_cond.status == "False":
        reasons.append(f"policy memory incomplete: {memory_cond.message}")

    snap = history[-1] if history else None
    fresh = snap if snap is not None and snap.age(now) <= scaling.metrics_max_age_seconds else None

    head, head_line = headroom_replicas(spec, history, now)
    reference = max(current - head, 0)
    ready = (
        fresh.replicas_reporting
        if fresh is not None and fresh.replicas_reporting > 0
        else state.interactive_ready
    )
    proposals = _proposals(spec, fresh, ready, reference, state.interactive_starting)
    wake = wake_proposal(spec, fresh, current)
    if wake is not None:  # at zero replicas: the one demand signal there is
        proposals.append(_Proposal(WAKE_SIGNAL, wake.replicas, wake.line, known=wake.known))
    known = [p for p in proposals if p.known]
    unknown_names = [p.signal for p in proposals if not p.known]
    metrics_cond, hold_line = _metrics_condition(
        snap, now, scaling.metrics_max_age_seconds, unknown_names, [p.signal for p in known], current
    )
    arg = Normalization(
        spec=spec,
        current=current,
        unschedulable=state.interactive_unschedulable,
        unknown=tuple(unknown_names),
        memory=memory,
        now=now,
        stalled=fresh.stalled_pods if fresh is not None else (),
    )

    # The clamp steps that changed the value, in order: the stabilisation windows (AbleToScale) and
    # the limits (ScalingLimited).
    recommendation: int | None = None
    windows: list[Clamped] = []
    limits: list[Clamped] = []
    if hold_line is not None:
        # Unknown is not zero: hold, and do not record a recommendation (it would be a guess).
        # Only spec.replicas.min/max still apply.
        reasons.append(hold_line)
        demand = max(current - head, 0)
        desired, limits = chain(current, arg, (replica_bounds,))
        steps = limits
    else:
        assert fresh is not None  # hold_line is None only with a fresh snapshot
        reasons.extend(p.line for p in proposals)
        proposing = [p for p in known if p.replicas is not None]
        best = max(proposing, key=lambda p: p.replicas or 0) if proposing else None
        demand = (best.replicas or 0) if best is not None else 0
        demand_from = best.signal if best is not None and demand > 0 else "no load"

        guarded, guard_line = _latency_guard(
            spec, fresh, demand, reference, state.interactive_starting, memory, now
        )
        if guard_line is not None:
            reasons.append(guard_line)
        if guarded != demand:
            demand, demand_from = guarded, "latency guard"
        reasons.append(f"demand {demand} replicas ({demand_from})")
        reasons.append(head_line)
        recommendation = demand + head
        reasons.append(f"recommends {recommendation} = demand {demand} + headroom {head}")
        recommendation, idle_line = release_when_idle(spec, fresh, current, demand, recommendation)
        if idle_line is not None:
            reasons.append(idle_line)

        # The partial-signals floor changes the recommendation itself: the floored value is the
        # one the windows judge and the memory keeps.
        recommendation, floor = chain(recommendation, arg, (no_scale_down_on_partial,))
        stabilised, windows = chain(recommendation, arg, WINDOWS)
        desired, limited = chain(stabilised, arg, LIMITS)
        limits = floor + limited
        steps = floor + windows + limited
    reasons.extend(step.message for step in steps)

    if desired == current:
        reasons.append(f"interactive pool stays at {current} replicas")
    else:
        reasons.append(f"interactive pool {current} → {desired} replicas")

    batch, batch_cond, batch_line = _batch(spec, now)
    reasons.append(batch_line)

    recs = memory.recommendations + (((now, recommendation),) if recommendation is not None else ())
    events = memory.scale_events + (((now, desired - current),) if desired != current else ())
    new_memory = PolicyMemory(
        recommendations=_prune(recs, now, keep_recs),
        scale_events=_prune(events, now, keep_events),
        unreadable=unreadable,
        unreadable_since=unreadable_since,
    )
    return Decision(
        interactive_replicas=desired,
        batch_replicas=batch,
        demand_replicas=demand,
        headroom_replicas=max(0, desired - demand),
        reasons=tuple(reasons),
        metrics_available=metrics_cond,
        able_to_scale=able_to_scale_condition(windows, recommendation),
        scaling_limited=scaling_limited_condition(limits, desired),
        batch_window_open=batch_cond,
        policy_state_readable=memory_cond,
        clamped_by=steps[-1].reason if steps else Reason.DesiredWithinRange,
        memory=new_memory,
        valid=hold_line is None,
    )
