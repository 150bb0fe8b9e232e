"""The proposals of :func:`~llmscale.policy.decide` (step 3): each signal's replica count now.

- the **load** signal: the replicas the arrival rate (and the drain of a backlog within one lead
  time) needs at the SLO for the live mix (:mod:`llmscale.policy.load`, :mod:`llmscale.model.capacity`),
  with a tolerance hysteresis on the rate;
- **queue depth** (only without an arrival rate): ``ceil(queue / queueDepthPerReplica)``, only up,
  and not asked for again while the replicas asked for it start;
- **KV-cache utilisation**: ``ceil(ready × kv / target)`` (:func:`kv_cache_target`);
- **preemption rate**: ``ceil(rate / preemptionsPerSecondPerReplica)``, only up.

Inside ``±tolerance`` of the current demand a signal holds it. Pure: no I/O, no clock.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import lru_cache

from llmscale.api import LLMDeploymentSpec
from llmscale.model.capacity import (
    DEFAULT_SHAPE,
    LengthDistribution,
    WorkloadShape,
    capacity_per_replica,
    vllm_length_buckets,
)
from llmscale.policy.diagnosis import KV_FULL
from llmscale.policy.forecast import forecast_rate
from llmscale.policy.leadtime import LeadTime
from llmscale.policy.load import LATENCY_WINDOW_S, Capacity, capacity_context
from llmscale.policy.mix import RATE_WINDOW_S, Arrivals, burstiness_of, steady_arrival_rate
from llmscale.policy.types import PoolState
from llmscale.signals.snapshot import SignalSnapshot

__all__ = [
    "DRAIN_SHARE_MAX",
    "FALLBACK_KV_CACHE_TARGET",
    "Load",
    "Proposal",
    "backlog_drain",
    "ceil_replicas",
    "known_value",
    "kv_cache_target",
    "kv_proposal",
    "length_buckets",
    "load_proposal",
    "preemption_proposal",
    "queue_proposal",
    "read_load",
    "standing_queue_need",
]

# ceil() of a ratio that is an integer up to float rounding (4 × 0.75 / 0.75) must not round up.
_EPS = 1e-9

# Any replica count is clamped to spec.replicas.max in the end; a proposal beyond this is "all of
# them" (a garbage float like 1e308 must still give a decision, not an OverflowError).
_MAX_PROPOSAL = 1_000_000_000

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


def length_buckets(spec: LLMDeploymentSpec) -> tuple[float, ...] | None:
    """The engine's length-histogram buckets: vLLM's 1-2-5 buckets up to ``--max-model-len`` for the
    vLLM profiles (the mock engine speaks vLLM); unknown for SGLang (its quantiles are read as exact)."""
    if spec.engine.profile() in ("vllm", "vllm-legacy"):
        return vllm_length_buckets(spec.model.context_limit_tokens)
    return None


def ceil_replicas(x: float) -> int:
    if not x > 0:  # also NaN
        return 0
    if x >= _MAX_PROPOSAL:
        return _MAX_PROPOSAL
    return max(0, math.ceil(x - _EPS))


def known_value(value: float | None) -> float | None:
    # The snapshot already turns NaN/Inf into None; a negative gauge or rate (a counter reset seen
    # by rate(), a broken exporter) is not a measurement either.
    if value is None or not math.isfinite(value) or value < 0:
        return None
    return value


@dataclass(frozen=True, slots=True)
class Proposal:
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
    return _Settled(ceil_replicas(raw), False, tolerance, reference)


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
class Load:
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
    standing: str = ""


def queue_proposal(
    spec: LLMDeploymentSpec, queue: float | None, ready: int, reference: int, starting: int, load_known: bool
) -> Proposal:
    target = spec.scaling.targets.queue_depth_per_replica
    if queue is None:
        return Proposal("queue depth", None, "queue depth unknown: proposes nothing", known=False)
    head = (
        f"queue depth {queue:.1f} over {ready} ready replicas = {queue / ready:.1f} per replica "
        f"{_compare(queue / ready, target, spec.scaling.tolerance)} target {target:.1f}"
        if ready > 0
        else f"queue depth {queue:.1f} with no ready replica, target {target:.1f}"
    )
    if load_known:
        excess = max(queue - target * ready, 0.0)
        tail = f"{excess:.0f} beyond target drained in the load signal" if excess else "within target"
        return Proposal("queue depth", None, f"{head}: {tail}")
    proposal, suffix = _backlog(
        _settle(queue / target, reference, spec.scaling.tolerance), starting, hold_while_starting=True
    )
    return Proposal("queue depth", proposal, f"{head}: {suffix}")


def kv_proposal(spec: LLMDeploymentSpec, kv: float | None, ready: int, reference: int, load_known: bool) -> Proposal:
    if kv is None:
        return Proposal("KV-cache utilisation", None, "KV-cache utilisation unknown: proposes nothing", known=False)
    if ready == 0:
        return Proposal(
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
    return Proposal("KV-cache utilisation", settled.replicas, line)


def preemption_proposal(
    spec: LLMDeploymentSpec, rate: float | None, ready: int, reference: int, starting: int, load_known: bool = False
) -> Proposal:
    """The preemption rate's proposal: ``ceil(rate / preemptionsPerSecondPerReplica)`` without the
    load signal; with it, a symptom only (issue 27): preemptions say *that* the pool is short, never
    *how* short — under thrashing they grow far faster than the shortfall (3 overloaded 8B replicas
    at 0.6–1 preemption/s each asked for 26–126 replicas where 8 were needed). Above target it then
    asks for one replica more than the current demand, and nothing while replicas start (they are
    the capacity already asked for); how many more the load signal and the latency guard say."""
    if rate is None:
        return Proposal("preemption rate", None, "preemption rate unknown: proposes nothing", known=False)
    target = spec.scaling.targets.preemptions_per_second_per_replica
    settled = _settle(min(rate, 1e12) / target, reference, spec.scaling.tolerance)
    if load_known and not settled.within and settled.replicas > reference + 1:
        settled = replace(settled, replicas=reference + 1)
        symptom = True
    else:
        symptom = False
    proposal, suffix = _backlog(settled, starting, hold_while_starting=load_known)
    if symptom and proposal == reference + 1:
        suffix = (f"short (a symptom: how short is the load signal's to say), proposes one more than current "
                  f"demand {reference}: {proposal}")
    if ready > 0:
        per = rate / ready
        line = (
            f"preemption rate {rate:.3f}/s over {ready} ready replicas = {per:.3f}/s per replica "
            f"{_compare(per, target, spec.scaling.tolerance)} target {target:.3f}/s: {suffix}"
        )
    else:
        line = f"preemption rate {rate:.3f}/s with no ready replica, target {target:.3f}/s: {suffix}"
    return Proposal("preemption rate", proposal, line)


#: The most a backlog's drain adds to the arrival rate, as a share of it: 0.2. A backlog that needs
#: more to drain within a lead time is drained over longer: replicas asked for it land a lead time
#: later, when the spare capacity already asked for has drained much of it, and then sit through the
#: scale-down window (issue 27's flash crowd: 60 requests/s of drain on 90 arriving asked for 12
#: replicas where 8 carry the step). A fifth keeps a sustained step's peak within a quarter of its
#: need while still draining a lead time's backlog of a 20 % shortfall within one more.
DRAIN_SHARE_MAX = 0.2


def backlog_drain(excess: float, arrivals: Arrivals, lead_s: float, asked: int, replicas: int = 1) -> float:
    """Requests/s the load signal adds to the arrival rate to drain ``excess`` waiting requests.

    ``min(excess / lead − already, DRAIN_SHARE_MAX × rate)``, 0 while ``asked`` replicas (starting,
    or asked for and not created yet) are not Ready: capacity already asked for is subtracted from
    the ask until it lands. ``already`` is the rate at which the
    requests in the engines fall now (the ready replicas' spare, ``−growth``): a backlog that falls
    by itself within a lead time needs nobody new. Replicas that are starting were asked for with
    the backlog in view, and the backlog that builds while they start is the same backlog.

    The share is at least one replica's: ``max(DRAIN_SHARE_MAX × rate, rate / replicas)``, with
    ``replicas`` the pool's size for the arrivals alone. A pool grows by whole replicas, and a fifth
    of a one-replica pool's arrivals is a fifth of the smallest step it can take: a queue ten times
    the target on one replica at 0.5 requests/s would never be drained by a new replica.

    E.g. 18,000 requests waiting, lead 300 s, in-flight falling 14/s, 90 arriving on 6 replicas:
    ``min(60 − 14, max(18, 15))`` = 18 requests/s. 20 waiting beyond target on one replica at 0.5/s,
    lead 60 s: ``min(0.33, max(0.1, 0.5))`` = 0.33.
    """
    if excess <= 0 or asked > 0:
        return 0.0
    already = max(-arrivals.growth_rps, 0.0)
    drain = max(excess / max(lead_s, LATENCY_WINDOW_S) - already, 0.0)
    rate = arrivals.rate_rps
    if rate is not None and math.isfinite(rate):
        rate = max(rate, 1.0 / LATENCY_WINDOW_S)
        drain = min(drain, max(DRAIN_SHARE_MAX * rate, rate / max(replicas, 1)))
    return drain


def standing_queue_need(
    queue: float | None, target: float, ready: int, arrivals: Arrivals, drain_rps: float, asked: int, window_s: float,
    tolerance: float = 0.1, thrashing: bool = False,
) -> tuple[int | None, str]:
    """The replicas a standing queue asks for, whatever the model says: ``None`` when it does not stand.

    A queue stands when it is beyond ``target`` per ready replica, did not fall over the rate window
    (``growth ≥ 0``) and nothing is asked for (``asked == 0``: capacity on the way is its answer).
    The ready replicas are then saturated, and what they finish is what they carry: the pool needs
    ``ceil(ready × (rate + drain) / finished)`` of them, more than ``ready`` whenever the backlog is
    drained. That is measured, not modelled: when the model's capacity is wrong (a CPU replica read
    as a GPU, the Azure trace's short answers read for 1,900-token ones) the load signal alone holds
    the pool while the queue stands for as long as the load lasts (issue 27's real-vLLM case: 0
    finished in the window, 3 waiting on one replica at target 2, "holds 1"). It is at most the
    queue's own ask, ``ceil(queue / target)``, which stands alone when fewer requests finished in
    the window than one (the requests outlive the window: the finished counter has not seen them).

    E.g. 3 waiting on 1 replica at target 2, nothing finished: ``ceil(3 / 2)`` = 2. 90 waiting on 40
    replicas at target 2 finishing 100/s, arrivals 100/s, drain 0.03/s: ``ceil(40 × 100.03 / 100)``
    = 41 (one more, asked again only once it is Ready).

    Args:
        queue: requests waiting over the pool, or ``None`` (unknown: no ask).
        target: ``spec.scaling.targets.queueDepthPerReplica``.
        ready: replicas reporting.
        arrivals: the load signal's arrival rate.
        drain_rps: the backlog's drain (:func:`backlog_drain`).
        asked: replicas asked for and not Ready.
        window_s: the rate window, seconds.
        tolerance: ``spec.scaling.tolerance``: a queue within it of the target does not stand (the
            queue proposal's own band), so a queue hovering at its target never asks.
        thrashing: preemptions per ready replica above their target: the finished rate then
            collapses far faster than the shortfall grows (the preemptions' own cascade), so it is no
            measure: the standing queue asks for one replica more than are ready, a symptom.

    Returns:
        ``(replicas, phrase)``.
    """
    if (queue is None or ready <= 0 or asked > 0 or target <= 0 or queue <= target * ready * (1 + tolerance)
            or arrivals.growth_rps < 0):
        return None, ""
    own = ceil_replicas(queue / target)
    finished = arrivals.finished_rps
    rate = arrivals.rate_rps
    if finished is None or rate is None or finished * window_s < 1.0:
        if thrashing and own > ready + 1:
            own = ready + 1  # nothing finishing under preemptions: a symptom, one more
        return own, (
            f"queue {queue:.1f} stands beyond target {target:g} per ready replica with "
            f"{(finished or 0.0) * window_s:.1f} requests finished in the {window_s:.0f} s window (the requests "
            f"outlive it): its own ask {own}"
        )
    measured = ceil_replicas(ready * (rate + drain_rps) / finished)
    if thrashing and measured > ready + 1:
        return ready + 1, (
            f"queue {queue:.1f} stands beyond target {target:g} per ready replica while the replicas preempt "
            f"above target (their finished rate is no measure): one more than the {ready} ready, {ready + 1}"
        )
    need = min(measured, own)
    return need, (
        f"queue {queue:.1f} stands beyond target {target:g} per ready replica: the {ready} saturated replicas "
        f"finish {finished:.2f}/s of the {rate + drain_rps:.2f}/s asked, {ready} × {rate + drain_rps:.2f} / "
        f"{finished:.2f} needs {measured}" + (f", at most the queue's own {own}" if own < measured else "")
    )


def read_load(
    spec: LLMDeploymentSpec,
    cap: Capacity | None,
    history: Sequence[SignalSnapshot],
    snap: SignalSnapshot,
    state: PoolState,
    ready: int,
    lead: LeadTime,
    now: float,
    hint: int,
) -> Load:
    """The load signal and the forecast's need (both ``None`` when the arrival rate or the model is
    unknown)."""
    arrivals = steady_arrival_rate(history, snap, cap.burstiness.requests if cap is not None else 1.0)
    queue = known_value(snap.queue_depth)
    excess = max((queue or 0.0) - spec.scaling.targets.queue_depth_per_replica * ready, 0.0)
    # Asked for and not Ready: starting pods, and pods the Deployment has not created yet. Not the
    # Ready pods left out of the signals (asleep, stalled) nor the failed ones: no capacity is coming
    # for them, and counting them would switch the backlog's drain off for the whole pool.
    asked = max(state.interactive_starting,
                state.interactive_replicas - state.interactive_ready - state.interactive_failed)
    base = cap.need(arrivals.rate_rps, hint=hint) if cap is not None and arrivals.rate_rps is not None else None
    drain = backlog_drain(excess, arrivals, lead.seconds, asked, base.replicas if base is not None else 1)
    if cap is None or arrivals.rate_rps is None or base is None:
        return Load(arrivals, drain, None, None, "unknown", None, "")
    rate = arrivals.rate_rps + drain
    # No backlog to drain (most ticks): the need is the one just found (fleet_need is pure; the
    # sign test keeps it the very same float: -0.0 + 0.0 is 0.0).
    same = drain == 0 and math.copysign(1.0, rate) == math.copysign(1.0, arrivals.rate_rps)
    now_need = base if same else cap.need(rate, hint=hint)
    high = cap.need(rate * (1 + spec.scaling.tolerance), hint=now_need.replicas).replicas
    fc = forecast_rate(
        arrivals.rate_rps, history, state.seasonal, now, lead.seconds, spec.headroom.growth_factor
    )
    ahead = cap.need(fc.rate_rps + drain, hint=now_need.replicas) if fc.rate_rps > arrivals.rate_rps else now_need
    window = snap.window.window_s if snap.window is not None and snap.window.window_s > 0 else RATE_WINDOW_S
    preemptions = known_value(snap.preemption_rate)
    thrashing = (preemptions is not None and ready > 0
                 and preemptions / ready > spec.scaling.targets.preemptions_per_second_per_replica)
    floor, standing = standing_queue_need(
        queue, spec.scaling.targets.queue_depth_per_replica, ready, arrivals, drain, asked, window,
        spec.scaling.tolerance, thrashing,
    )
    need, bound_by, high_need, ahead_need = now_need.replicas, now_need.bound_by, high, ahead.replicas
    if floor is not None and floor > need:
        need, bound_by = floor, "the standing queue"
        high_need, ahead_need = max(high_need, floor), max(ahead_need, floor)
    else:
        standing = ""
    return Load(arrivals, drain, need, high_need, bound_by, ahead_need, fc.line, standing)


def load_proposal(spec: LLMDeploymentSpec, load: Load, cap: Capacity | None, reference: int) -> Proposal:
    if cap is None:
        return Proposal("load", None, "load signal off: the performance model cannot place this deployment")
    if load.need is None:
        return Proposal("load", None, f"load signal unknown: {load.arrivals.line}")
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
    standing = f", {load.standing}," if load.standing else ""
    line = (
        f"load: {load.arrivals.line}{drain}{standing} needs {load.need} replicas at the SLO (bound by {load.bound_by}, "
        f"burstiness ×{b.requests:.1f} requests, ×{b.prompt_tokens:.1f} prompt tokens{factor}): {phrase}"
    )
    return Proposal("load", proposal, line)


