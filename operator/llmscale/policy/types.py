"""Inputs and outputs of the scaling policy. Pure: no I/O, no clock."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal, NamedTuple

__all__ = ["Clamped", "ConditionResult", "Decision", "PolicyMemory", "PoolState", "Reason"]


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
    # BatchWindowOpen
    InsideTroughWindow = "InsideTroughWindow"
    """True: a trough window is open; the batch pool runs."""
    OutsideTroughWindows = "OutsideTroughWindows"
    """False: every trough window is closed; the batch pool has 0 replicas."""
    NoBatchPool = "NoBatchPool"
    """False: ``spec.batch`` is not set."""
    # PolicyStateReadable
    PolicyStateRead = "PolicyStateRead"
    """True: the policy memory is complete."""
    PolicyStateUnreadable = "PolicyStateUnreadable"
    """False: part of ``status.policyState`` could not be read and was dropped (also the reason of
    the Warning Event the operator posts)."""
    # BatchBacklog (llmscale.policy.batch; NoBatchPool above also serves it)
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
        batch_replicas: ``spec.replicas`` currently set on the batch Deployment (0 if none).
        batch_ready: batch pods Ready now.
        measured_cold_start_s: the interactive pool's measured cold start, seconds: pod creation to
            Ready, the P90 of its recent starts (``llmscale.controller.coldstart``); ``None`` until a
            start has been seen. The policy may use it as its lead time in place of
            ``spec.headroom.coldStartSeconds``.
    """

    interactive_replicas: int
    interactive_ready: int
    interactive_starting: int = 0
    interactive_unschedulable: int = 0
    batch_replicas: int = 0
    batch_ready: int = 0
    measured_cold_start_s: float | None = None


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
class PolicyMemory:
    """Policy state that must survive an operator restart (stored in ``status.policyState``).

    Attributes:
        recommendations: ``(time_s, replicas)`` pairs of past recommendations, oldest first, kept
            as long as the longest stabilisation window needs them.
        scale_events: ``(time_s, delta_replicas)`` of past changes to the interactive pool, kept
            for the rate-limit periods.
        unreadable: what :meth:`from_dict` could not read and dropped, in words (``None``: all of it
            was read). Not persisted: :func:`~llmscale.policy.decide` reports it in the
            ``PolicyStateReadable`` condition and carries it while the dropped part could still
            have counted (see ``unreadable_since``).
        unreadable_since: seconds since the epoch of the first decision that worked from the
            incomplete memory (set by :func:`~llmscale.policy.decide`; ``None`` before it).
    """

    recommendations: tuple[tuple[float, int], ...] = ()
    scale_events: tuple[tuple[float, int], ...] = ()
    unreadable: str | None = None
    unreadable_since: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-able dict for ``status.policyState``."""
        return {
            "recommendations": [[t, r] for t, r in self.recommendations],
            "scaleEvents": [[t, d] for t, d in self.scale_events],
        }

    @classmethod
    def from_dict(cls, data: object) -> PolicyMemory:
        """Parse :meth:`to_dict`'s output (``status.policyState`` as read from the API server).

        Never raises and never resets silently: every entry that is a well-formed pair is kept;
        what cannot be read (not an object, a key that is not a list, an entry that is not a pair
        of finite numbers with an integer second element, a negative recommendation, an unknown
        key) is dropped and described in :attr:`unreadable`, which the policy turns into
        ``PolicyStateReadable=False/PolicyStateUnreadable``.

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
        unknown = sorted(str(k) for k in data if k not in ("recommendations", "scaleEvents"))
        if unknown:
            problems.append(f"unknown keys {', '.join(unknown)}: ignored")
        return cls(
            recommendations=recs, scale_events=events, unreadable="; ".join(problems) if problems else None
        )


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
            policy_state_readable: the conditions (``MetricsAvailable``, ``AbleToScale``,
            ``ScalingLimited``, ``BatchWindowOpen``, ``PolicyStateReadable``; docs/policy.md).
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
    clamped_by: Reason = Reason.DesiredWithinRange
    memory: PolicyMemory = field(default_factory=PolicyMemory)
    valid: bool = True
