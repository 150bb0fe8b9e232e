"""Inputs and outputs of the scaling policy. Pure: no I/O, no clock."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal, NamedTuple

from llmscale.model.fit import EfficiencyFit

__all__ = [
    "CapacityCorrection",
    "Clamped",
    "ConditionResult",
    "Decision",
    "MixSums",
    "PolicyMemory",
    "PoolState",
    "RateSeries",
    "Reason",
    "SeasonalHistory",
]


class Reason(StrEnum):
    """Every reason code the policy writes into a condition (``metav1.Condition.reason``).

    Members are named as they are spelt on the wire (CamelCase), so ``Reason.ScaleUpLimit ==
    "ScaleUpLimit"`` and ``str(Reason.ScaleUpLimit)`` is the wire value: conditions, Kubernetes
    Events, the ``reason`` label of ``llmscale_decisions_total`` and tests all use these members and
    never compare or parse message texts. The HPA's reasons keep the HPA's spelling
    (``pkg/controller/podautoscaler/horizontal.go``). ``docs/policy.md`` has one table row per
    member; a test checks that none is missing.
    """

    # MetricsAvailable
    MetricsFresh = "MetricsFresh"
    """True: every leading signal is known and fresh."""
    MetricsPartial = "MetricsPartial"
    PartialAnswer = "PartialAnswer"
    """True on MetricsAvailable: some leading signal unknown, scaling up only. Also a ScalingLimited
    reason: the no-scale-down-on-partial-signals floor changed the count."""
    MetricsStale = "MetricsStale"
    """False: the newest snapshot is older than ``spec.scaling.metricsMaxAgeSeconds``; held."""
    MetricsMissing = "MetricsMissing"
    """False: no snapshot yet, or every leading signal unknown; held."""
    # AbleToScale (stabilisation windows; always True, as the HPA's behaviour path sets it)
    ReadyForNewScale = "ReadyForNewScale"
    """No stabilisation window held the recommendation back."""
    ScaleUpStabilized = "ScaleUpStabilized"
    """The scale-up window's lowest recent recommendation held the count below this one."""
    ScaleDownStabilized = "ScaleDownStabilized"
    """The scale-down window's highest recent recommendation held the count above this one."""
    # ScalingLimited (limits; True when one changed the count)
    DesiredWithinRange = "DesiredWithinRange"
    """False: no limit changed the count."""
    ScaleUpLimit = "ScaleUpLimit"
    """``spec.scaling.scaleUp`` rate limit: at most ``maxReplicasPerPeriod`` added per period."""
    ScaleDownLimit = "ScaleDownLimit"
    """``spec.scaling.scaleDown`` rate limit: at most ``maxReplicasPerPeriod`` removed per period."""
    InsufficientCapacity = "InsufficientCapacity"
    """Interactive pods are unschedulable: no replica is added."""
    TooFewReplicas = "TooFewReplicas"
    """Raised to ``spec.replicas.min``."""
    TooManyReplicas = "TooManyReplicas"
    """Lowered to ``spec.replicas.max``."""
    ScheduledMinimum = "ScheduledMinimum"
    """Raised to the ``min`` of a ``spec.replicas.schedule`` window open now or one lead time ahead
    (a calendar floor)."""
    # BatchWindowOpen
    InsideTroughWindow = "InsideTroughWindow"
    """True: a trough window is open; the batch pool runs."""
    OutsideTroughWindows = "OutsideTroughWindows"
    """False: every trough window is closed; the batch pool has 0 replicas."""
    NoBatchPool = "NoBatchPool"
    """False: ``spec.batch`` is not set."""
    YieldedToInteractive = "YieldedToInteractive"
    """True: a trough window is open but the batch pool gave replicas up because interactive pods
    could not be scheduled (interactive first)."""
    # CapacityModel
    LiveWorkloadMix = "LiveWorkloadMix"
    """True: the performance model sizes the pool from the live workload mix (request and token rates,
    prompt and output lengths, prefix-cache hits read from the engines)."""
    DefaultWorkloadMix = "DefaultWorkloadMix"
    """False: the live mix is unknown (no length histograms or token counters); the model assumes the
    Azure LLM inference trace 2023's lengths, as before the mix was read."""
    # Diagnosis
    WithinSLO = "WithinSLO"
    """False: both p95s are within the SLO and no signature of trouble shows."""
    PrefillInterference = "PrefillInterference"
    """True: ITL p95 over the SLO while the KV cache is far from full and the queue short: prompt
    chunks share steps with the decodes; the message gives the ``--max-num-batched-tokens`` that
    keeps a chunk step within the ITL target and the replicas needed with and without it."""
    PreemptionPressure = "PreemptionPressure"
    """True: the KV cache is full and requests are preempted; the message gives the fp8 KV cache and
    ``--max-num-seqs`` that fit the batch."""
    Queueing = "Queueing"
    """True: requests wait beyond ``queueDepthPerReplica``: the pool is short of replicas; the message
    gives the replicas the load needs."""
    DiagnosisUnknown = "DiagnosisUnknown"
    """Unknown: no fresh snapshot or no p95 latency to judge."""
    LatencyAboveSLO = "LatencyAboveSLO"
    """True: a p95 is over the SLO with none of the signatures above (e.g. TTFT set by long prompts'
    prefill alone)."""
    # PolicyStateReadable
    PolicyStateRead = "PolicyStateRead"
    """True: the policy memory is complete."""
    PolicyStateUnreadable = "PolicyStateUnreadable"
    """False: part of ``status.policyState`` could not be read and was dropped (also the reason of
    the Warning Event the operator posts)."""
    # BatchBacklog (llmscale.policy.batch.plan; NoBatchPool above also serves it)
    BacklogEmpty = "BacklogEmpty"
    """False: no batch Job is outstanding; the batch pool has 0 replicas, even inside a window."""
    BacklogWaiting = "BacklogWaiting"
    """True: Jobs are outstanding and none runs: they wait for a window, idle GPUs or a Ready
    batch replica."""
    BacklogRunning = "BacklogRunning"
    """True: released Jobs are running on the batch pool."""
    BatchYieldedToInteractive = "BatchYieldedToInteractive"
    """True: Jobs should run but the batch pool gave its GPUs back to interactive pods that could
    not be scheduled (or to the interactive headroom); released Jobs are paused or slowed."""
    # DeadlineAtRisk
    DeadlinesOnTrack = "DeadlinesOnTrack"
    """False: every outstanding Job is projected to finish by its deadline (or none is outstanding)."""
    DeadlineProjectedLate = "DeadlineProjectedLate"
    """True: a Job is projected to finish after its deadline even at the pool's bound."""
    DeadlinePassed = "DeadlinePassed"
    """True: a Job is not done and its deadline has passed."""
    BatchSizeUnknown = "BatchSizeUnknown"
    """Unknown: no Job is late as far as can be told, but some outstanding Job declares no size, so
    its finish cannot be projected."""
    # MetricsAvailable (llmscale.policy.signal_health, llmscale.policy.zero)
    LatencyUnknown = "LatencyUnknown"
    """True: every leading signal is known and fresh, but TTFT or ITL p95 is unknown for a reason
    other than an idle window (no histogram, a failed query): the latency guard is off, and the
    message names each missing signal and why."""
    WakeQueryOnly = "WakeQueryOnly"
    """True: the pool is at zero replicas, so no engine reports; it scales on the wake query of
    ``spec.scaling.wake`` alone."""
    # EnginesStalled (llmscale.policy.signal_health); StalledPods is also a ScalingLimited reason
    StalledPods = "StalledPods"
    """True on EnginesStalled: a pod's engine hangs (running requests above 0, no token generated
    over the window); the message names each. On ScalingLimited: no replica is removed while one
    hangs."""
    NoStalledPods = "NoStalledPods"
    """False: the stall check ran and no reporting pod hangs."""
    StallCheckOff = "StallCheckOff"
    """Unknown: the stall check could not run (scrape interval unknown, window too short, no read)."""
    # RateWindowFits (llmscale.policy.signal_health)
    WindowFits = "WindowFits"
    """True: the rate window spans at least four scrape intervals."""
    WindowTooShort = "WindowTooShort"
    """False: the rate window spans fewer than two scrape intervals (or holds fewer than two samples
    of any series): every rate and latency quantile is unknown."""
    WindowBelowAdvice = "WindowBelowAdvice"
    """False: the rate window spans two to four scrape intervals: one missed scrape empties it."""
    ScrapeIntervalUnknown = "ScrapeIntervalUnknown"
    """Unknown: the scrape interval could not be read, so the window is unchecked."""


class Clamped(NamedTuple):
    """What one clamp of :func:`~llmscale.policy.decide` returns, the shape of the HPA's helpers
    (``stabilizeRecommendationWithBehaviors``, ``convertDesiredReplicasWithBehaviorRate``):
    ``(value, reason, message)``.

    Attributes:
        replicas: the interactive replicas after the clamp; equal to its input when it did not bite.
        reason: why (e.g. :attr:`Reason.ScaleUpLimit`); the clamp's "did not bite" reason
            (:attr:`Reason.ReadyForNewScale`, :attr:`Reason.DesiredWithinRange`) when it did not.
        message: one human sentence with the numbers; ``""`` when the clamp did not bite.
    """

    replicas: int
    reason: Reason
    message: str


@dataclass(frozen=True, slots=True)
class PoolState:
    """What the cluster looks like now, gathered by the caller (operator or simulator).

    Attributes:
        interactive_replicas: ``spec.replicas`` currently set on the interactive Deployment.
        interactive_ready: interactive pods Ready now.
        interactive_starting: interactive pods scheduled but not Ready yet (in their cold start);
            they already count towards capacity being added, so they are not asked for twice.
        interactive_unschedulable: interactive pods Pending because no node can take them
            (e.g. not enough GPUs); the policy stops adding replicas while any exist.
        interactive_failed: interactive pods that will never serve by waiting (a crash loop, an
            image pull back-off, not Ready long past the pool's cold starts): counted in
            ``interactive_replicas`` but not capacity, so the policy asks for their replacements.
        interactive_surge: pods beyond ``interactive_replicas``, a rollout's surge: the Deployment
            controller's, never asked for by the policy, and left out of the counts above except
            Ready.
        batch_replicas: ``spec.replicas`` currently set on the batch Deployment (0 if none).
        batch_ready: batch pods Ready now.
        interactive_cold_starts_s: measured cold starts of recent interactive pods, seconds from the
            pod's creation to its Ready condition, oldest first (the shell keeps the last
            :data:`~llmscale.policy.leadtime.COLD_START_SAMPLES`); empty: none measured yet.
        batch_cold_starts_s: the same for the batch pool.
        seasonal: the pool's arrival rate a day and a week ago around this time of day (Prometheus
            ``offset`` or range queries); ``None``: not read, the forecast uses the trend alone.
        live_fit: the model's efficiencies fitted to the engines' own histograms
            (:mod:`llmscale.policy.livefit`), applied over the prior when sizing the pool; ``None``:
            the prior as it is.
    """

    interactive_replicas: int
    interactive_ready: int
    interactive_starting: int = 0
    interactive_unschedulable: int = 0
    interactive_failed: int = 0
    interactive_surge: int = 0
    batch_replicas: int = 0
    batch_ready: int = 0
    interactive_cold_starts_s: tuple[float, ...] = ()
    batch_cold_starts_s: tuple[float, ...] = ()
    seasonal: SeasonalHistory | None = None
    live_fit: EfficiencyFit | None = None


@dataclass(frozen=True, slots=True)
class RateSeries:
    """A request rate at past instants, one value per step (a Prometheus range query's answer).

    Attributes:
        start_s: seconds since the epoch of the first value.
        step_s: seconds between values (> 0).
        rates_rps: requests/s at ``start_s + i × step_s``; ``None`` where Prometheus had no sample.
    """

    start_s: float
    step_s: float
    rates_rps: tuple[float | None, ...]

    def mean(self, t0: float, t1: float) -> float | None:
        """Mean of the known, finite, non-negative values at instants within ``[t0, t1]``; ``None`` if none."""
        if not (self.step_s > 0 and math.isfinite(self.step_s)):
            return None
        values = [
            v
            for i, v in enumerate(self.rates_rps)
            if v is not None and math.isfinite(v) and v >= 0 and t0 <= self.start_s + i * self.step_s <= t1
        ]
        return sum(values) / len(values) if values else None


@dataclass(frozen=True, slots=True)
class SeasonalHistory:
    """The pool's request rate one period ago, around the same time, for the seasonal forecast.

    Each series must cover ``[now − offset − 5 min, now − offset + lead]`` for the forecast to use it
    (the lead time is the measured cold start, a few minutes); the operator queries
    ``sum by (pool) (rate(vllm:request_success_total{…}[<rate window>]))`` over
    ``[now − offset − 10 min, now − offset + 30 min]`` at a 60 s step
    (:mod:`llmscale.controller.signals.seasonal`).

    Attributes:
        day: the rate around the same time yesterday, or ``None``.
        week: the rate around the same time a week ago, or ``None``.
        day_offset_s / week_offset_s: how long ago "the same time" was, seconds: 86,400 and 604,800,
            or the wall-clock day and week of the deployment's time zone across a DST change (23 or 25
            hours), which the shell knows and the policy does not.
    """

    day: RateSeries | None = None
    week: RateSeries | None = None
    day_offset_s: float = 86_400.0
    week_offset_s: float = 604_800.0


# Longest excerpt of an unreadable entry quoted in PolicyMemory.unreadable: enough to recognise it,
# short enough for a condition message (the API server cuts an Event's message past 1 KiB).
_QUOTE_CHARS = 60


def _number(value: object) -> float | None:
    # bool is an int subclass, but `true` is not a time or a replica count.
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def _read_pairs(
    data: Mapping[str, Any], key: str, what: str, *, non_negative: bool, problems: list[str]
) -> tuple[tuple[float, int], ...]:
    """Read ``data[key]``, a list of ``[seconds, integer]`` pairs; append a sentence per problem.

    Each pair is judged on its own, so one bad entry does not lose the others.
    """
    raw = data.get(key, [])
    if not isinstance(raw, list):
        problems.append(f"{key} is a {type(raw).__name__}, not a list: dropped")
        return ()
    kept: list[tuple[float, int]] = []
    bad: list[int] = []
    for i, entry in enumerate(raw):
        t = v = None
        if isinstance(entry, list | tuple) and len(entry) == 2:
            t, v = _number(entry[0]), _number(entry[1])
        if t is None or v is None or not v.is_integer() or (non_negative and v < 0):
            bad.append(i)
            continue
        kept.append((t, int(v)))
    if bad:
        first = repr(raw[bad[0]])
        if len(first) > _QUOTE_CHARS:
            first = first[: _QUOTE_CHARS - 1] + "…"
        problems.append(
            f"{len(bad)} of {len(raw)} {key} are not [seconds, {what}] pairs "
            f"(first: {key}[{bad[0]}] = {first}): dropped"
        )
    return tuple(kept)


@dataclass(frozen=True, slots=True)
class CapacityCorrection:
    """A learnt correction of the performance model's capacity (closed loop, step 6 of ``decide``).

    Attributes:
        factor: what the pool really carries over what the model says, within
            ``[CAPACITY_FACTOR_MIN, CAPACITY_FACTOR_MAX]`` (0.02–50, :mod:`llmscale.policy.load`).
        updated_at: ``observed_at`` of the last minute counted, seconds since the epoch (a minute is
            counted once).
        breach: the last breach that lowered it, in words (``"ITL p95 0.134 s > SLO 0.100 s at 31.2
            requests/s on 6 ready replicas"``); ``""`` when none has.
        streak: counted minutes in a row that breached (0 after a good one): the step doubles with it.
    """

    factor: float
    updated_at: float
    breach: str = ""
    streak: int = 0


_MIX_FIELDS = (
    "weight",
    "prompt_mean",
    "prompt_p95_weight",
    "prompt_p95",
    "output_mean",
    "output_p95_weight",
    "output_p95",
    "hit_weight",
    "hit",
)


@dataclass(frozen=True, slots=True)
class MixSums:
    """Running sums of the live workload mix, exponentially discounted (``llmscale.policy.mix``).

    Every ``*_weight`` is a discounted count of requests (or prompt tokens, for the hit rate); the
    matching field is the discounted sum of the value times its weight, so value = sum / weight.

    Attributes:
        weight: requests behind the means.
        prompt_mean / output_mean: weighted sums of the prompt and output means, tokens.
        prompt_p95_weight / prompt_p95: requests behind the prompt p95, and its weighted sum.
        output_p95_weight / output_p95: the same for the output p95.
        hit_weight / hit: prompt tokens behind the prefix-cache hit rate, and its weighted sum.
        from_p90: a p90 stood in for a missing p95 in the recent sums.
        observed_at: ``observed_at`` of the newest snapshot folded in, seconds since the epoch.
    """

    weight: float = 0.0
    prompt_mean: float = 0.0
    prompt_p95_weight: float = 0.0
    prompt_p95: float = 0.0
    output_mean: float = 0.0
    output_p95_weight: float = 0.0
    output_p95: float = 0.0
    hit_weight: float = 0.0
    hit: float = 0.0
    from_p90: bool = False
    observed_at: float = 0.0

    def to_list(self) -> list[float | bool]:
        """The sums as a JSON list (``status.policyState.mix``)."""
        return [*(getattr(self, f) for f in _MIX_FIELDS), self.from_p90, self.observed_at]

    @classmethod
    def from_list(cls, raw: object) -> MixSums | None:
        """Read :meth:`to_list`'s output; ``None`` when it is not one."""
        if not isinstance(raw, list | tuple) or len(raw) != len(_MIX_FIELDS) + 2:
            return None
        numbers = [_number(x) for x in raw[: len(_MIX_FIELDS)]]
        at = _number(raw[-1])
        if at is None or not isinstance(raw[-2], bool) or any(x is None or x < 0 for x in numbers):
            return None
        values = {name: float(x) for name, x in zip(_MIX_FIELDS, numbers, strict=True) if x is not None}
        return cls(**values, from_p90=raw[-2], observed_at=at)


@dataclass(frozen=True, slots=True)
class PolicyMemory:
    """Policy state that must survive an operator restart (stored in ``status.policyState``).

    Attributes:
        recommendations: ``(time_s, replicas)`` pairs of past recommendations, oldest first, kept
            as long as the longest stabilisation window needs them.
        scale_events: ``(time_s, delta_replicas)`` of past changes to the interactive pool, kept
            for the rate-limit periods.
        since: seconds since the epoch of the first decision this memory has seen; before it the
            history is missing, and missing history means "recently at the current size" (the
            scale-down window holds the current size until it has seen a whole window). ``None``: a
            new memory (the first decision sets it).
        correction: the learnt capacity correction, or ``None`` (the model as it is).
        burstiness: ``(requests, prompt_tokens, samples, observed_at)``: the running estimates of how
            much a minute's requests and prompt tokens vary beyond Poisson
            (:class:`~llmscale.model.capacity.Burstiness`), how many minute pairs they average and the
            ``observed_at`` of the snapshot last folded in; ``None`` before the first.
        batch_yield: ``(replicas, interactive_replicas)``: batch replicas given up to unschedulable
            interactive pods, and the interactive pool's size when they were; ``None``: none.
        mix: the live workload mix's running sums (:class:`MixSums`); ``None`` before the first.
        replicas: the interactive pool's size once the decision this memory came from is applied
            (the newest scale event ends there); ``None`` in a memory saved before the key existed.
            A restart that finds the pool at another size counts the difference as a scale event
            (:meth:`~llmscale.controller.memory.ObjectMemory.restored_policy_memory`).
        unreadable: what :meth:`from_dict` could not read and dropped, in words (``None``: all of it
            was read). Not persisted: :func:`~llmscale.policy.decide` reports it in the
            ``PolicyStateReadable`` condition and carries it while the dropped part could still
            have counted (see ``unreadable_since``).
        unreadable_since: seconds since the epoch of the first decision that worked from the
            incomplete memory (set by :func:`~llmscale.policy.decide`; ``None`` before it).
    """

    recommendations: tuple[tuple[float, int], ...] = ()
    scale_events: tuple[tuple[float, int], ...] = ()
    since: float | None = None
    correction: CapacityCorrection | None = None
    burstiness: tuple[float, float, int, float] | None = None
    batch_yield: tuple[int, int] | None = None
    mix: MixSums | None = None
    replicas: int | None = None
    unreadable: str | None = None
    unreadable_since: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-able dict for ``status.policyState``."""
        out: dict[str, Any] = {
            "recommendations": [[t, r] for t, r in self.recommendations],
            "scaleEvents": [[t, d] for t, d in self.scale_events],
        }
        if self.since is not None:
            out["since"] = self.since
        if self.correction is not None:
            c = self.correction
            out["capacityCorrection"] = {"factor": c.factor, "updatedAt": c.updated_at, "breach": c.breach}
            if c.streak:
                out["capacityCorrection"]["streak"] = c.streak
        if self.burstiness is not None:
            out["burstiness"] = list(self.burstiness)
        if self.batch_yield is not None:
            out["batchYield"] = list(self.batch_yield)
        if self.mix is not None:
            out["mix"] = self.mix.to_list()
        if self.replicas is not None:
            out["replicas"] = self.replicas
        return out

    @classmethod
    def from_dict(cls, data: object) -> PolicyMemory:
        """Parse :meth:`to_dict`'s output (``status.policyState`` as read from the API server).

        Never raises and never resets silently: every entry that is a well-formed pair is kept;
        what cannot be read (not an object, a key that is not a list, an entry that is not a pair
        of finite numbers with an integer second element, a negative recommendation, a correction
        outside ``(0, 1]``, an unknown key) is dropped and described in :attr:`unreadable`, which the
        policy turns into ``PolicyStateReadable=False/PolicyStateUnreadable``. A memory written
        before a key existed simply lacks it (not a problem).

        Args:
            data: the ``status.policyState`` value; ``None`` or ``{}`` is an empty memory (a new
                object), not a problem.

        Returns:
            The memory; ``unreadable`` is ``None`` when everything was read.
        """
        if data is None or (isinstance(data, Mapping) and not data):
            return cls()
        if not isinstance(data, Mapping):
            return cls(unreadable=f"status.policyState is a {type(data).__name__}, not an object: dropped")
        problems: list[str] = []
        recs = _read_pairs(data, "recommendations", "replicas", non_negative=True, problems=problems)
        events = _read_pairs(data, "scaleEvents", "delta replicas", non_negative=False, problems=problems)
        since = _read_since(data, problems)
        correction = _read_correction(data, problems)
        burst = _read_burstiness(data, problems)
        batch_yield = _read_yield(data, problems)
        mix = None
        if "mix" in data:
            mix = MixSums.from_list(data["mix"])
            if mix is None:
                problems.append(f"mix = {_quote(data['mix'])} is not the live mix's sums: dropped (read again)")
        replicas = _read_replicas(data, problems)
        unknown = sorted(str(k) for k in data if k not in _KEYS)
        if unknown:
            problems.append(f"unknown keys {', '.join(unknown)}: ignored")
        return cls(
            recommendations=recs,
            scale_events=events,
            since=since,
            correction=correction,
            burstiness=burst,
            batch_yield=batch_yield,
            mix=mix,
            replicas=replicas,
            unreadable="; ".join(problems) if problems else None,
        )


_KEYS = ("recommendations", "scaleEvents", "since", "capacityCorrection", "burstiness", "batchYield", "mix",
         "replicas")


def _quote(value: object) -> str:
    text = repr(value)
    return text if len(text) <= _QUOTE_CHARS else text[: _QUOTE_CHARS - 1] + "…"


def _read_since(data: Mapping[str, Any], problems: list[str]) -> float | None:
    if "since" not in data:
        return None
    value = _number(data["since"])
    if value is None:
        problems.append(f"since = {_quote(data['since'])} is not a time in seconds: dropped")
    return value


def _read_correction(data: Mapping[str, Any], problems: list[str]) -> CapacityCorrection | None:
    if "capacityCorrection" not in data:
        return None
    raw = data["capacityCorrection"]
    if isinstance(raw, Mapping):
        factor, at = _number(raw.get("factor")), _number(raw.get("updatedAt"))
        breach = raw.get("breach", "")
        streak = raw.get("streak", 0)
        if (
            factor is not None and at is not None and 0 < factor <= 100 and isinstance(breach, str)
            and isinstance(streak, int) and not isinstance(streak, bool) and streak >= 0
        ):
            return CapacityCorrection(factor, at, breach, streak)
    problems.append(
        f"capacityCorrection = {_quote(raw)} is not {{factor in (0, 100], updatedAt: seconds, breach: text, "
        "streak: count}: "
        "dropped (the model's capacity is used uncorrected)"
    )
    return None


def _read_burstiness(data: Mapping[str, Any], problems: list[str]) -> tuple[float, float, int, float] | None:
    if "burstiness" not in data:
        return None
    raw = data["burstiness"]
    if isinstance(raw, list | tuple) and len(raw) == 4:
        a, b, n, t = (_number(x) for x in raw)
        if a is not None and b is not None and n is not None and t is not None and min(a, b, n) >= 0 and n.is_integer():
            return a, b, int(n), t
    problems.append(
        f"burstiness = {_quote(raw)} is not [requests, prompt tokens, samples, observed at]: dropped (learnt again)"
    )
    return None


def _read_replicas(data: Mapping[str, Any], problems: list[str]) -> int | None:
    if "replicas" not in data:
        return None
    value = _number(data["replicas"])
    if value is None or value < 0 or not value.is_integer():
        problems.append(f"replicas = {_quote(data['replicas'])} is not a replica count: dropped")
        return None
    return int(value)


def _read_yield(data: Mapping[str, Any], problems: list[str]) -> tuple[int, int] | None:
    if "batchYield" not in data:
        return None
    raw = data["batchYield"]
    if isinstance(raw, list | tuple) and len(raw) == 2:
        a, b = (_number(x) for x in raw)
        if a is not None and b is not None and a >= 0 and b >= 0 and a.is_integer() and b.is_integer():
            return int(a), int(b)
    problems.append(f"batchYield = {_quote(raw)} is not [replicas, interactive replicas]: dropped")
    return None


@dataclass(frozen=True, slots=True)
class ConditionResult:
    """One condition as the policy sees it; the operator turns it into a ``metav1.Condition``.

    ``reason`` is CamelCase: a :class:`Reason` member when the policy sets it (the operator's own
    ``Ready`` condition has its own reasons); ``message`` is one human sentence.
    """

    status: Literal["True", "False", "Unknown"]
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class Decision:
    """What the policy recommends. The caller applies it; the policy never acts.

    Attributes:
        interactive_replicas: desired replicas of the interactive pool (headroom included).
        batch_replicas: desired replicas of the batch pool (0 outside trough windows).
        demand_replicas: replicas the signals ask for before headroom and clamps.
        headroom_replicas: warm replicas added above demand in ``interactive_replicas``.
        reasons: one line per step, in order (proposals, headroom, clamps, windows, holds).
        metrics_available / able_to_scale / scaling_limited / batch_window_open /
            policy_state_readable / capacity_model / diagnosis: the conditions
            (``MetricsAvailable``, ``AbleToScale``, ``ScalingLimited``, ``BatchWindowOpen``,
            ``PolicyStateReadable``, ``CapacityModel``, ``Diagnosis``; docs/policy.md).
        lead_time_s: the lead time the headroom and the forecast were sized with: the P90 of the
            measured cold starts, or ``spec.headroom.coldStartSeconds`` before any (seconds).
        clamped_by: the last clamp that changed the interactive count, a stabilisation window or a
            limit (:attr:`Reason.DesiredWithinRange` when none did); the ``reason`` label of the
            operator's ``llmscale_decisions_total``.
        memory: the updated policy memory to persist.
        valid: ``False`` when the policy could not decide (e.g. no signal at all) and held the
            current size; ``interactive_replicas`` then equals the current replicas.
    """

    interactive_replicas: int
    batch_replicas: int
    demand_replicas: int
    headroom_replicas: int
    reasons: tuple[str, ...]
    metrics_available: ConditionResult
    able_to_scale: ConditionResult
    scaling_limited: ConditionResult
    batch_window_open: ConditionResult
    policy_state_readable: ConditionResult
    capacity_model: ConditionResult = ConditionResult("False", Reason.DefaultWorkloadMix, "not judged")
    diagnosis: ConditionResult = ConditionResult("False", Reason.WithinSLO, "not judged")
    lead_time_s: float = 0.0
    clamped_by: Reason = Reason.DesiredWithinRange
    memory: PolicyMemory = field(default_factory=PolicyMemory)
    valid: bool = True
