"""The scaling decision: ``decide(spec, history, state, memory, now) -> Decision``.

Pure: no I/O, no clock, no metrics recording. The operator and the simulator call it on every
tick with the same inputs and apply what it recommends. The steps, in order (each writes lines to
``Decision.reasons``):

0. **Memory.** When part of ``status.policyState`` could not be read (``memory.unreadable``), a line
   and ``PolicyStateReadable=False`` say so while the dropped entries could still have counted.
   Missing history is not "free to scale down": until the memory has seen a whole scale-down
   window (``memory.since``), the window counts the current size as recommended.
1. **Freshness.** The newest snapshot older than ``spec.scaling.metricsMaxAgeSeconds`` makes every
   signal unknown. Unknown is not zero: with no leading signal known the pool holds its size
   (``valid=False``, ``MetricsAvailable=False``).
2. **The workload and the model** (:mod:`llmscale.policy.mix`, :mod:`llmscale.model.capacity`): the
   live mix of the last minutes (prompt and output lengths, prefix-cache hits; unknown → the Azure
   trace's lengths, the behaviour before the mix was read, named in ``CapacityModel``), the arrival
   rate (finished + growth in the engines), the burstiness learnt from the rates, the capacity
   correction in force, and the **lead time** (:mod:`llmscale.policy.leadtime`: P90 of the measured
   cold starts, ``coldStartSeconds`` before any).
3. **Proposals**, each a replica count the pool needs now:

   - **load** (:mod:`llmscale.policy.load`): the model's replicas for the arrival rate plus the rate
     that drains the backlog beyond ``queueDepthPerReplica`` per ready replica within one lead time
     (bounded by what arrives in a lead time: no cascade while replicas start);
   - **queue depth** when the arrival rate is unknown: ``ceil(queue / queueDepthPerReplica)``, only
     up, and not again while replicas asked for are starting (they are the answer to that backlog);
   - **KV-cache utilisation** (a mean): ``ceil(ready × kv / target)``, the target from the spec or
     the model's KV use at the SLO's capacity for the live mix;
   - **preemption rate** (a sum, only up): ``ceil(rate / preemptionsPerSecondPerReplica)``.

   Within ``±tolerance`` of the current demand (current replicas less headroom) a signal *holds*
   the current demand: it neither drops out nor moves it. The largest proposal is the demand.
4. **Headroom** ``H = max(spec.headroom.replicas, need(forecast) − need(now))``: the replicas the
   arrival rate forecast one lead time ahead (:mod:`llmscale.policy.forecast`: the growth seen a
   day and a week ago over the same stretch, and the trend when ``growthFactor`` > 0) needs beyond
   today's. Without an arrival rate, the old KV-trend headroom.
5. **Latency guard and correction.** When p95 TTFT or ITL breaches ``spec.slo`` while the leading
   signals ask for no more than the current demand, nothing starts and the last scale-up is older
   than the p95's window: with the load signal known, a capacity correction is learnt
   (:func:`llmscale.policy.load.learn`: the model over-estimated what these replicas carry) and the
   load asks again; without it, demand + 1.
6. **Recommendation** ``demand + H``; on partial data floored at the current size (``MetricsPartial``).
7. **Clamps** (:mod:`llmscale.policy.clamps`), the HPA's chain: the stabilisation windows
   (``AbleToScale``), then the limits (``ScalingLimited``): rate limits, no adding while pods are
   unschedulable, the calendar floor (``spec.replicas.schedule``), ``spec.replicas.min``/``max``.
8. **Batch pool**: ``spec.batch.replicas`` inside a trough window, 0 outside; while interactive
   pods cannot be scheduled, batch gives its replicas up to them first.
9. **Diagnosis** (:mod:`llmscale.policy.diagnosis`): the signature of any trouble and its remedy.

Pods in their cold start are capacity on the way, never asked for twice: proposals are *totals*
compared with ``state.interactive_replicas``, which already counts the starting pods.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np

from llmscale.api import LLMDeploymentSpec
from llmscale.model.capacity import (
    DEFAULT_SHAPE,
    LengthDistribution,
    WorkloadShape,
    capacity_per_replica,
    vllm_length_buckets,
)
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
from llmscale.policy.diagnosis import KV_FULL, diagnose
from llmscale.policy.forecast import forecast_rate
from llmscale.policy.leadtime import LeadTime, lead_time
from llmscale.policy.load import Capacity, capacity_context, correct, factor_in_force
from llmscale.policy.mix import (
    Arrivals,
    arrival_rate,
    burstiness_of,
    live_shape,
    update_burstiness,
    update_mix,
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
from llmscale.policy.windows import batch_window_open, describe_window, local_time, scheduled_minimum
from llmscale.signals.snapshot import SignalSnapshot

__all__ = [
    "FALLBACK_KV_CACHE_TARGET",
    "LATENCY_WINDOW_S",
    "decide",
    "headroom_replicas",
    "kv_cache_target",
]

#: Seconds of traffic the lagging p95 latencies summarise: the signals' histogram ``rate()`` window
#: (``llmscale.signals.queries`` ``rate_window="1m"``; the simulator's p95 looks back 60 s too). A
#: replica added less than this long ago cannot show in the p95 yet, so the latency guard waits.
LATENCY_WINDOW_S = 60.0

# ceil() of a ratio that is an integer up to float rounding (4 × 0.75 / 0.75) must not round up.
_EPS = 1e-9

# Any replica count is clamped to spec.replicas.max in the end; a proposal beyond this is "all of
# them" (a garbage float like 1e308 must still give a decision, not an OverflowError).
_MAX_PROPOSAL = 1_000_000_000

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


def _round2(x: float) -> float:
    """``x`` to two significant figures: the mix and the burstiness as cache keys."""
    if not math.isfinite(x) or x <= 0:
        return 0.0
    return float(f"{x:.2g}")


def _coarse(shape: WorkloadShape) -> WorkloadShape:
    def dist(d: LengthDistribution) -> LengthDistribution:
        return LengthDistribution(_round2(d.median), round(d.sigma, 2))

    return WorkloadShape(dist(shape.prompt), dist(shape.output), round(shape.prefix_cache_hit_rate, 2), "")


@lru_cache(maxsize=512)
def _kv_at_capacity(cap: Capacity, replicas: int) -> tuple[float, float, str]:
    """``(KV use per replica, requests/s per replica, what binds)`` at the SLO's capacity of a pool of
    ``replicas`` (rounded to a power of two) for ``cap``'s (coarsened) shape."""
    per, point, bound = capacity_per_replica(
        cap.model, cap.shape, cap.limits, cap.itl_s, cap.ttft_s, replicas=replicas, burstiness=cap.burstiness
    )
    return point.kv_cache_utilization, per, bound


def _pow2(n: int) -> int:
    return 1 << max(0, min(int(n), 4096) - 1).bit_length() if n > 1 else 1


def _coarse_capacity(cap: Capacity) -> Capacity:
    b = cap.burstiness
    return replace(
        cap,
        shape=_coarse(cap.shape),
        burstiness=type(b)(_round2(b.requests) or 1.0, _round2(b.prompt_tokens) or 1.0),
        factor=1.0,
        max_replicas=0,
    )


def kv_cache_target(spec: LLMDeploymentSpec, ready: int = 4, *, load_known: bool = False) -> tuple[float, str]:
    """Return the KV-cache utilisation target (fraction 0–1) and where it came from.

    ``spec.scaling.targets.kvCacheUtilization`` when set (``"spec"``). Unset:

    - with the load signal known (``load_known``), :data:`~llmscale.policy.diagnosis.KV_FULL`: the load
      signal sizes the pool from the live mix, and the KV cache guards only its own limit (a fuller
      cache preempts);
    - without it, the KV-cache use of one replica at the SLO's capacity
      (:func:`llmscale.model.capacity.capacity_per_replica`, for a pool of ``ready`` replicas rounded
      up to a power of two) for the Azure LLM inference trace 2023's lengths (CC-BY 4.0; Patel et
      al., Splitwise, ISCA 2024) — how the KV-cache signal sized the pool before the live mix was read;
    - when the model cannot place the deployment, :data:`FALLBACK_KV_CACHE_TARGET`.
    """
    explicit = spec.scaling.targets.kv_cache_utilization
    if explicit is not None:
        return explicit, "spec"
    if load_known:
        return KV_FULL, "auto: cache guard, the load signal sizes the pool"
    cap = capacity_context(spec, DEFAULT_SHAPE, False, burstiness_of(None), 1.0)
    if cap is None:
        return FALLBACK_KV_CACHE_TARGET, "auto: the performance model cannot place this deployment, fallback"
    n = _pow2(max(ready, 1))
    kv, per, bound = _kv_at_capacity(_coarse_capacity(cap), n)
    if kv <= 0 or not math.isfinite(kv):
        return FALLBACK_KV_CACHE_TARGET, "auto: the model gives no KV use at capacity, fallback"
    return kv, (
        f"auto: KV use at the SLO's capacity for the Azure trace's lengths, {per:.2f} requests/s per replica "
        f"of {n}, bound by {bound}"
    )


def _length_buckets(spec: LLMDeploymentSpec) -> tuple[float, ...] | None:
    """The engine's length-histogram buckets: vLLM's 1-2-5 buckets up to ``--max-model-len`` for the
    vLLM profiles (the mock engine speaks vLLM); unknown for SGLang (its quantiles are read as exact)."""
    if spec.engine.profile() in ("vllm", "vllm-legacy"):
        return vllm_length_buckets(spec.model.context_limit_tokens)
    return None


def _ceil(x: float) -> int:
    if not x > 0:  # also NaN
        return 0
    if x >= _MAX_PROPOSAL:
        return _MAX_PROPOSAL
    return max(0, math.ceil(x - _EPS))


def _known(value: float | None) -> float | None:
    # The snapshot already turns NaN/Inf into None; a negative gauge or rate (a counter reset seen
    # by rate(), a broken exporter) is not a measurement either.
    if value is None or not math.isfinite(value) or value < 0:
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
        within: ``raw`` is within ``±tolerance`` of ``reference`` (and ``reference > 0``): it holds.
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
            return f"within {self.tolerance:.0%} of current demand {self.reference}: holds {self.reference}"
        return f"proposes {self.replicas}"


def _settle(raw: float, reference: int, tolerance: float) -> _Settled:
    """Return ``reference`` when ``raw`` (replicas) is within tolerance of it, else ``ceil(raw)``."""
    if reference > 0 and math.isfinite(raw) and abs(raw / reference - 1) <= tolerance:
        return _Settled(reference, True, tolerance, reference)
    return _Settled(_ceil(raw), False, tolerance, reference)


def _backlog(settled: _Settled, starting: int, *, hold_while_starting: bool) -> tuple[int | None, str]:
    """A backlog signal (queue depth, preemptions) says "short", never "needs fewer".

    An empty queue means the ready replicas keep up, not that the pool needs none: below the band a
    backlog signal proposes nothing. Within it the signal *holds* the current demand (issue 11's
    101 → 100 with 324 requests waiting: a signal that dropped out in the band let the others pull
    the pool down). Above it the proposal is a total compared with replicas that include the
    starting ones; a queue (``hold_while_starting``) is not asked for again while replicas asked for
    it start: they are its answer, and the backlog that builds up meanwhile is the same backlog.

    Returns:
        ``(proposal, phrase)``: ``None`` when the signal proposes nothing.
    """
    reference = settled.reference
    if settled.within:
        return reference, settled.phrase()
    if settled.replicas <= reference:
        return None, f"{settled.replicas} ≤ current demand {reference}: not short, proposes nothing"
    if starting > 0 and hold_while_starting:
        return reference, (
            f"{settled.replicas} > current demand {reference}, but {starting} replicas are starting: "
            f"not asked again for the same backlog, holds {reference}"
        )
    if starting > 0:
        return settled.replicas, f"{settled.phrase()} ({starting} starting replicas count as {starting} of them)"
    return settled.replicas, settled.phrase()


@dataclass(frozen=True, slots=True)
class _Load:
    """What the load signal found this tick (``None`` fields: unknown).

    Attributes:
        need: replicas the arrival rate (plus the backlog's drain) needs.
        need_high: replicas ``(1 + tolerance) ×`` that rate needs: a fall is proposed only when
            even that needs fewer than the current demand (hysteresis: a rate that wobbles around
            one replica's worth holds the pool).
    """

    arrivals: Arrivals
    drain_rps: float
    need: int | None
    need_high: int | None
    bound_by: str
    forecast_need: int | None
    forecast_line: str


def _queue_proposal(
    spec: LLMDeploymentSpec, queue: float | None, ready: int, reference: int, starting: int, load_known: bool
) -> _Proposal:
    target = spec.scaling.targets.queue_depth_per_replica
    if queue is None:
        return _Proposal("queue depth", None, "queue depth unknown: proposes nothing", known=False)
    head = (
        f"queue depth {queue:.1f} over {ready} ready replicas = {queue / ready:.1f} per replica "
        f"{_compare(queue / ready, target, spec.scaling.tolerance)} target {target:.1f}"
        if ready > 0
        else f"queue depth {queue:.1f} with no ready replica, target {target:.1f}"
    )
    if load_known:
        excess = max(queue - target * ready, 0.0)
        tail = f"{excess:.0f} beyond target drained in the load signal" if excess else "within target"
        return _Proposal("queue depth", None, f"{head}: {tail}")
    proposal, suffix = _backlog(
        _settle(queue / target, reference, spec.scaling.tolerance), starting, hold_while_starting=True
    )
    return _Proposal("queue depth", proposal, f"{head}: {suffix}")


def _kv_proposal(spec: LLMDeploymentSpec, kv: float | None, ready: int, reference: int, load_known: bool) -> _Proposal:
    if kv is None:
        return _Proposal("KV-cache utilisation", None, "KV-cache utilisation unknown: proposes nothing", known=False)
    if ready == 0:
        return _Proposal(
            "KV-cache utilisation",
            None,
            "KV-cache utilisation is a mean over no ready replica: proposes nothing",
            known=False,
        )
    kv_target, origin = kv_cache_target(spec, ready, load_known=load_known)
    raw = ready * min(kv, 1e12) / kv_target
    settled = _settle(raw, reference, spec.scaling.tolerance)
    named = f"target {kv_target:.2f}" if origin == "spec" else f"target {kv_target:.3f} ({origin})"
    line = (
        f"KV-cache utilisation {kv:.2f} mean over {ready} ready replicas {_compare(kv, kv_target, spec.scaling.tolerance)} "
        f"{named} ({raw:.2f} replicas at target): {settled.phrase()}"
    )
    return _Proposal("KV-cache utilisation", settled.replicas, line)


def _preemption_proposal(
    spec: LLMDeploymentSpec, rate: float | None, ready: int, reference: int, starting: int
) -> _Proposal:
    if rate is None:
        return _Proposal("preemption rate", None, "preemption rate unknown: proposes nothing", known=False)
    target = spec.scaling.targets.preemptions_per_second_per_replica
    proposal, suffix = _backlog(
        _settle(min(rate, 1e12) / target, reference, spec.scaling.tolerance), starting, hold_while_starting=False
    )
    if ready > 0:
        per = rate / ready
        line = (
            f"preemption rate {rate:.3f}/s over {ready} ready replicas = {per:.3f}/s per replica "
            f"{_compare(per, target, spec.scaling.tolerance)} target {target:.3f}/s: {suffix}"
        )
    else:
        line = f"preemption rate {rate:.3f}/s with no ready replica, target {target:.3f}/s: {suffix}"
    return _Proposal("preemption rate", proposal, line)


def _load(
    spec: LLMDeploymentSpec,
    cap: Capacity | None,
    history: Sequence[SignalSnapshot],
    snap: SignalSnapshot,
    state: PoolState,
    ready: int,
    lead: LeadTime,
    now: float,
    hint: int,
) -> _Load:
    """The load signal and the forecast's need (both ``None`` when the arrival rate or the model is
    unknown)."""
    arrivals = arrival_rate(history, snap)
    queue = _known(snap.queue_depth)
    excess = max((queue or 0.0) - spec.scaling.targets.queue_depth_per_replica * ready, 0.0)
    drain = excess / max(lead.seconds, LATENCY_WINDOW_S)
    if cap is None or arrivals.rate_rps is None:
        return _Load(arrivals, drain, None, None, "unknown", None, "")
    now_need = cap.need(arrivals.rate_rps + drain, hint=hint)
    high = cap.need((arrivals.rate_rps + drain) * (1 + spec.scaling.tolerance), hint=now_need.replicas).replicas
    fc = forecast_rate(
        arrivals.rate_rps, history, state.seasonal, now, lead.seconds, spec.headroom.growth_factor
    )
    ahead = cap.need(fc.rate_rps + drain, hint=now_need.replicas) if fc.rate_rps > arrivals.rate_rps else now_need
    return _Load(arrivals, drain, now_need.replicas, high, now_need.bound_by, ahead.replicas, fc.line)


def _load_proposal(spec: LLMDeploymentSpec, load: _Load, cap: Capacity | None, reference: int) -> _Proposal:
    if cap is None:
        return _Proposal("load", None, "load signal off: the performance model cannot place this deployment")
    if load.need is None:
        return _Proposal("load", None, f"load signal unknown: {load.arrivals.line}")
    tol = spec.scaling.tolerance
    drain = f" + {load.drain_rps:.2f}/s to drain the backlog" if load.drain_rps > 0 else ""
    if load.need > reference or reference <= 0:
        proposal, phrase = load.need, f"proposes {load.need}"
    elif load.need_high is not None and load.need_high < reference:
        proposal, phrase = load.need_high, f"{1 + tol:g} × the rate needs {load.need_high}: proposes {load.need_high}"
    else:
        proposal, phrase = reference, (
            f"{1 + tol:g} × the rate needs {load.need_high}, within {tol:.0%} of current demand {reference}: "
            f"holds {reference}"
        )
    factor = f", capacity correction × {cap.factor:.2f}" if abs(cap.factor - 1) >= 0.005 else ""
    b = cap.burstiness
    line = (
        f"load: {load.arrivals.line}{drain} needs {load.need} replicas at the SLO (bound by {load.bound_by}; "
        f"burstiness ×{b.requests:.1f} requests, ×{b.prompt_tokens:.1f} prompt tokens{factor}): {phrase}"
    )
    return _Proposal("load", proposal, line)


def _kv_need(spec: LLMDeploymentSpec, snap: SignalSnapshot) -> float | None:
    """Replicas the snapshot's KV-cache load needs at target, or None when it cannot say."""
    kv = _known(snap.kv_cache_utilization)
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
    forecast sizes the headroom instead (:func:`decide`, step 4).

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
    adaptive = _ceil(growth) if math.isfinite(growth) and growth > 0 else 0
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
    err = f" ({snap.error})" if snap.error else ""
    if not known:
        msg = f"all leading signals unknown{err}, snapshot {age:.0f} s old: held {current} replicas"
        return ConditionResult("False", Reason.MetricsMissing, msg), msg
    if unknown:
        msg = f"{', '.join(unknown)} unknown{err}: scaling up only, on {', '.join(known)}"
        return ConditionResult("True", Reason.MetricsPartial, msg), None
    msg = f"queue depth, KV-cache utilisation and preemption rate known, newest sample {age:.0f} s old"
    return ConditionResult("True", Reason.MetricsFresh, msg), None


def _breaches(spec: LLMDeploymentSpec, snap: SignalSnapshot) -> list[str]:
    out = []
    ttft, itl = _known(snap.ttft_p95_s), _known(snap.itl_p95_s)
    if ttft is not None and ttft > spec.slo.ttft_p95_seconds:
        out.append(f"TTFT p95 {ttft:.2f} s > SLO {spec.slo.ttft_p95_seconds:.2f} s")
    if itl is not None and itl > spec.slo.itl_p95_seconds:
        out.append(f"ITL p95 {itl:.3f} s > SLO {spec.slo.itl_p95_seconds:.3f} s")
    return out


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
    load: _Load,
    now: float,
) -> _Guard:
    """Step 5: the demand after the latency guard, its line and the correction to keep.

    With the load signal known, every minute in which the pool was sized as the model says (the
    leading signals ask for no more than the current demand, nothing is starting, no scale-up within
    the p95's window) is counted by the capacity correction (:func:`llmscale.policy.load.correct`);
    a breach lowers it and the load asks again at the corrected capacity (at least one more than the
    current demand). Without the load signal the guard adds one replica, as it always did. It waits
    while a replica starts and until the last scale-up is older than :data:`LATENCY_WINDOW_S`.
    """
    breaches = _breaches(spec, snap)
    breached = " and ".join(breaches)
    last_up = max((t for t, d in memory.scale_events if d > 0), default=None)
    recent_up = last_up is not None and now - last_up < LATENCY_WINDOW_S
    starting = state.interactive_starting
    rate = load.arrivals.rate_rps
    judged = _known(snap.ttft_p95_s) is not None or _known(snap.itl_p95_s) is not None
    new_minute = memory.correction is None or snap.observed_at - memory.correction.updated_at >= LATENCY_WINDOW_S
    # A minute in which the pool was sized as the model says: what its p95s say counts.
    sized_by_model = cap is not None and rate is not None and ready > 0 and demand <= reference
    if sized_by_model and judged and new_minute and not recent_up and starting == 0:
        assert cap is not None and rate is not None
        what = f"{breached} at {rate:.2f} requests/s on {ready} ready replicas" if breaches else None
        corr = correct(memory.correction, what, snap.observed_at)
        if what is None:
            return _Guard(demand, None, corr, False)
        relearnt = replace(cap, factor=corr.factor)
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
            f"{LATENCY_WINDOW_S:.0f} s window the p95 is computed over: latency guard waits",
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
            f"{breached}, already counted in this {LATENCY_WINDOW_S:.0f} s p95 window: latency guard waits",
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


def _batch(
    spec: LLMDeploymentSpec, state: PoolState, memory: PolicyMemory, desired_interactive: int, now: float
) -> tuple[int, ConditionResult, str, tuple[int, int] | None]:
    """Step 8: batch replicas, the BatchWindowOpen condition, its line and the yield to remember.

    Interactive first: while a trough window is open and interactive pods cannot be scheduled, the
    batch pool gives up as many replicas as are unschedulable — once for the same pods (the yield
    is remembered with the interactive size it was made for, and grows only when that size does).
    It takes them back as the interactive pool shrinks below that size, and all of them when the
    window closes.
    """
    if spec.batch is None:
        msg = "no batch pool (spec.batch is not set)"
        return 0, ConditionResult("False", Reason.NoBatchPool, msg), msg, None
    window = batch_window_open(spec.batch.windows, now)
    if window is None:
        first = spec.batch.windows[0]
        local = local_time(now, first.timezone)
        listed = "; ".join(describe_window(w) for w in spec.batch.windows)
        msg = f"no trough window open (local {local:%a %H:%M %Z}; windows: {listed}): batch pool 0 replicas"
        return 0, ConditionResult("False", Reason.OutsideTroughWindows, msg), msg, None
    local = local_time(now, window.timezone)
    given, at = memory.batch_yield or (0, 0)
    current = state.interactive_replicas
    if given and current < at:  # the interactive pool shrank: take back what it no longer holds
        given = max(given - (at - current), 0)
        at = current
    pending = state.interactive_unschedulable
    if pending > 0 and (given == 0 or current > at):
        given, at = given + pending, max(current, desired_interactive)
    given = min(given, spec.batch.replicas)
    replicas = spec.batch.replicas - given
    opened = f"trough window {describe_window(window)} is open (local {local:%a %H:%M %Z})"
    if given:
        msg = (
            f"{opened}, but {given} of its {spec.batch.replicas} replicas are given to the interactive pool "
            f"({pending} interactive pods unschedulable): batch pool {replicas} replicas"
        )
        return replicas, ConditionResult("True", Reason.YieldedToInteractive, msg), msg, (given, at)
    msg = f"{opened}: batch pool {replicas} replicas"
    return replicas, ConditionResult("True", Reason.InsideTroughWindow, msg), msg, None


def _prune(pairs: Sequence[tuple[float, int]], now: float, keep_s: float) -> tuple[tuple[float, int], ...]:
    return tuple((t, v) for t, v in pairs if t > now - keep_s)


def _model_condition(cap: Capacity | None, shape: WorkloadShape, live: bool, factor: float) -> ConditionResult:
    p, g = shape.prompt, shape.output
    mix = (
        f"prompt mean {p.mean:,.0f} tokens (p95 {p.quantile(0.95):,.0f}), output mean {g.mean:,.0f} "
        f"(p95 {g.quantile(0.95):,.0f}), prefix-cache hits {shape.prefix_cache_hit_rate:.0%}"
    )
    corr = f"; capacity correction × {factor:.2f} learnt from the p95s" if abs(factor - 1) >= 0.005 else ""
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

    keep_recs = max(scaling.scale_up.stabilization_window_seconds, scaling.scale_down.stabilization_window_seconds)
    keep_events = max(scaling.scale_up.period_seconds, scaling.scale_down.period_seconds, LATENCY_WINDOW_S)
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
    buckets = _length_buckets(spec)
    mix = update_mix(memory.mix, usable, buckets)
    shape, live = live_shape(mix, now, buckets) if fresh is not None else (DEFAULT_SHAPE, False)
    burst = update_burstiness(memory.burstiness, usable, shape) if fresh is not None else memory.burstiness
    factor = factor_in_force(memory.correction)
    cap = capacity_context(spec, shape, live, burstiness_of(burst), factor)

    ready = (
        fresh.replicas_reporting if fresh is not None and fresh.replicas_reporting > 0 else state.interactive_ready
    )
    starting = state.interactive_starting

    # Headroom first: the current demand (the reference of the tolerance band) is what the pool
    # holds beyond it.
    load = (
        _load(spec, cap, usable, fresh, state, ready, lead, now, max(current - spec.headroom.replicas, 0))
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
    reference = max(current - head, 0)

    model_cond = _model_condition(cap, shape, live, factor)
    if fresh is not None:
        reasons.append(f"workload: {model_cond.message}")
    proposals: list[_Proposal] = []
    load_known = load is not None and load.need is not None
    if fresh is not None:
        assert load is not None
        proposals.append(_load_proposal(spec, load, cap, reference))
        proposals.append(_queue_proposal(spec, _known(fresh.queue_depth), ready, reference, starting, load_known))
        proposals.append(_kv_proposal(spec, _known(fresh.kv_cache_utilization), ready, reference, load_known))
        proposals.append(_preemption_proposal(spec, _known(fresh.preemption_rate), ready, reference, starting))
    leading = [p for p in proposals if p.signal != "load"]
    known = [p for p in leading if p.known]
    unknown_names = [p.signal for p in leading if not p.known] if fresh is not None else []
    metrics_cond, hold_line = _metrics_condition(
        snap, now, scaling.metrics_max_age_seconds, unknown_names, [p.signal for p in known], current
    )
    floor, floor_window = scheduled_minimum(spec.replicas.schedule, now, lead.seconds)
    clamp_memory = replace(memory, since=since)
    arg = Normalization(
        spec=spec,
        current=current,
        unschedulable=state.interactive_unschedulable,
        unknown=tuple(unknown_names),
        memory=clamp_memory,
        now=now,
        floor=floor,
        floor_window=describe_window(floor_window) if floor_window is not None else "",
    )

    recommendation: int | None = None
    windows: list[Clamped] = []
    limits: list[Clamped] = []
    correction = memory.correction
    if hold_line is not None:
        # Unknown is not zero: hold, and do not record a recommendation (it would be a guess).
        # Only the bounds (spec.replicas.min/max, the calendar floor) still apply.
        reasons.append(hold_line)
        reasons.append(head_line)
        demand = max(current - head, 0)
        desired, limits = chain(current, arg, BOUNDS)
        steps = limits
    else:
        assert fresh is not None and load is not None  # hold_line is None only with a fresh snapshot
        reasons.extend(p.line for p in proposals)
        proposing = [p for p in proposals if p.known and p.replicas is not None]
        best = max(proposing, key=lambda p: p.replicas or 0) if proposing else None
        demand = (best.replicas or 0) if best is not None else 0
        demand_from = best.signal if best is not None and demand > 0 else "no load"

        guard = _latency_guard(spec, fresh, demand, reference, state, ready, memory, cap, load, now)
        if guard.line is not None:
            reasons.append(guard.line)
        correction = guard.correction
        if guard.demand != demand:
            demand, demand_from = guard.demand, ("capacity correction" if guard.learnt else "latency guard")
        reasons.append(f"demand {demand} replicas ({demand_from})")
        reasons.append(head_line)
        recommendation = demand + head
        reasons.append(f"recommends {recommendation} = demand {demand} + headroom {head}")

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

    batch, batch_cond, batch_line, batch_yield = _batch(spec, state, memory, desired, now)
    reasons.append(batch_line)

    if correction is not memory.correction:
        model_cond = _model_condition(cap, shape, live, factor_in_force(correction))
    diagnosis = diagnose(spec, fresh, ready, cap, load.arrivals.rate_rps if load is not None else None)

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
        capacity_model=model_cond,
        diagnosis=diagnosis,
        lead_time_s=lead.seconds,
        clamped_by=steps[-1].reason if steps else Reason.DesiredWithinRange,
        memory=new_memory,
        valid=hold_line is None,
    )
