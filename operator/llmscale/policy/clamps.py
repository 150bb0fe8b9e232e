"""The clamps of :func:`~llmscale.policy.decide` (step 8): small pure functions, chained.

Shaped like the HPA's ``normalizeDesiredReplicasWithBehaviors`` and its helpers
(``pkg/controller/podautoscaler/horizontal.go``): each clamp takes the value to clamp and one
argument bundle (:class:`Normalization`, the HPA's ``NormalizationArg``) and returns
:class:`~llmscale.policy.types.Clamped` ``(replicas, reason, message)``; a clamp that does not bite
returns its input with its "no change" reason and an empty message. :func:`chain` applies a
sequence and keeps the steps that changed the value. ``decide`` runs, in order:

1. :func:`no_scale_down_on_partial` on the recommendation (``MetricsPartial``);
2. :data:`WINDOWS`, the stabilisation windows (``ScaleUpStabilized``, ``ScaleDownStabilized``),
   reported in ``AbleToScale`` by :func:`able_to_scale_condition`;
3. :data:`LIMITS`, the rate limits, stalled engines, unschedulable pods, the calendar floor and
   ``spec.replicas.min``/``max`` (``ScaleUpLimit``, ``ScaleDownLimit``, ``StalledPods``,
   ``InsufficientCapacity``, ``ScheduledMinimum``, ``TooFewReplicas``, ``TooManyReplicas``),
   reported with step 1 in ``ScalingLimited`` by :func:`scaling_limited_condition`. :data:`BOUNDS`
   (the last two) also apply when the policy holds on unknown signals.

The HPA computes both windows in one function (``stabilizeRecommendationWithBehaviors``: the
current size raised to the scale-up window's lowest recommendation, then lowered to the scale-down
window's highest). Both windows include this recommendation, so the lowest is at most it and the
highest at least it: only the window of the direction the recommendation moves can bite, and the
two halves here give the HPA's value. Likewise at most one rate limit bites (the up limit is at
least the current size, the down limit at most).

Pure: no I/O, no clock (``now`` is an argument).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from llmscale.api import LLMDeploymentSpec
from llmscale.policy.types import Clamped, ConditionResult, PolicyMemory, Reason

__all__ = [
    "BOUNDS",
    "LIMITS",
    "WINDOWS",
    "Clamp",
    "Normalization",
    "able_to_scale_condition",
    "calendar_floor",
    "chain",
    "insufficient_capacity",
    "no_scale_down_on_partial",
    "no_scale_down_while_stalled",
    "replica_bounds",
    "scale_down_limit",
    "scale_down_window",
    "scale_up_limit",
    "scale_up_window",
    "scaling_limited_condition",
]


@dataclass(frozen=True, slots=True)
class Normalization:
    """What the clamps read besides the value they clamp (the HPA's ``NormalizationArg``).

    Attributes:
        spec: the LLMDeployment spec (``scaling.scaleUp``/``scaleDown``, ``replicas``).
        current: the interactive pool's ``spec.replicas`` now, starting pods included.
        unschedulable: interactive pods Pending with no node.
        unknown: names of the leading signals unknown this tick (e.g. ``("KV-cache utilisation",)``).
        memory: past recommendations and scale events; ``memory.since`` is when its history
            starts (before it, missing history).
        now: seconds since the Unix epoch.
        floor: the calendar floor in force (``spec.replicas.schedule``), replicas; 0 without one.
        floor_window: the window that sets it, in words.
        stalled: pods whose engine hangs (``SignalSnapshot.stalled_pods``).
        sustained_breach: what broke in this p95 window and the one before it, in words; ``""``
            when the SLO held in either. The scale-up window does not hold through it.
    """

    spec: LLMDeploymentSpec
    current: int
    unschedulable: int
    unknown: tuple[str, ...]
    memory: PolicyMemory
    now: float
    floor: int = 0
    floor_window: str = ""
    stalled: tuple[str, ...] = ()
    sustained_breach: str = ""


#: A clamp: ``(replicas, arg) -> Clamped``.
Clamp = Callable[[int, Normalization], Clamped]


def no_scale_down_on_partial(recommendation: int, arg: Normalization) -> Clamped:
    """Floor the recommendation at the current size while a leading signal is unknown: scale up
    on what is known, never down (:attr:`Reason.MetricsPartial`)."""
    if arg.unknown and recommendation < arg.current:
        return Clamped(
            arg.current,
            Reason.MetricsPartial,
            f"{', '.join(arg.unknown)} unknown: no scale-down on partial signals, holds {arg.current}",
        )
    return Clamped(recommendation, Reason.DesiredWithinRange, "")


def scale_up_window(recommendation: int, arg: Normalization) -> Clamped:
    """Scale-up stabilisation: a rise goes only as far as the lowest recommendation of the last
    ``scaleUp.stabilizationWindowSeconds`` (this one included), never below the current size
    (:attr:`Reason.ScaleUpStabilized`; the HPA's ``stabilizeRecommendationWithBehaviors``).

    Not at zero replicas: the window keeps a blip from paying for a cold start, but with nothing
    serving every request already waits for one (scale from zero, :mod:`llmscale.policy.zero`).
    Not while the SLO breaks in two consecutive p95 windows (``arg.sustained_breach``)."""
    if recommendation <= arg.current or arg.current == 0:
        return Clamped(recommendation, Reason.ReadyForNewScale, "")
    if arg.sustained_breach:
        # The SLO is the ground truth (issue 27): a window that keeps a blip from paying for a cold
        # start must not hold the pool while minute after minute breaks (a prefill-heavy pool held
        # at 9 for hours by "lowest recommendation in the last 120 s", its rate estimate swinging
        # 5–14 requests/s on microbursts). The HPA's own default scale-up window is 0 s.
        return Clamped(recommendation, Reason.ReadyForNewScale, "")
    window = arg.spec.scaling.scale_up.stabilization_window_seconds
    lowest = min([r for t, r in arg.memory.recommendations if t > arg.now - window] + [recommendation])
    stabilised = max(arg.current, lowest)
    if stabilised == recommendation:
        return Clamped(recommendation, Reason.ReadyForNewScale, "")
    return Clamped(
        stabilised,
        Reason.ScaleUpStabilized,
        f"scale-up stabilised: lowest recommendation in the last {window} s is {lowest}, goes to {stabilised}",
    )


def scale_down_window(recommendation: int, arg: Normalization) -> Clamped:
    """Scale-down stabilisation: a fall goes only as far as the highest recommendation of the last
    ``scaleDown.stabilizationWindowSeconds`` (this one included), never above the current size
    (:attr:`Reason.ScaleDownStabilized`; the HPA's ``stabilizeRecommendationWithBehaviors``).

    Missing history is not "free to scale down": while the memory has not seen the whole window
    (``memory.since`` is younger than it: a new object, or one whose policy state was lost) the
    current size counts as recommended in it — the pool was, as far as anyone knows, recently at it.
    """
    if recommendation >= arg.current:
        return Clamped(recommendation, Reason.ReadyForNewScale, "")
    window = arg.spec.scaling.scale_down.stabilization_window_seconds
    recent = [r for t, r in arg.memory.recommendations if t > arg.now - window]
    since = arg.memory.since if arg.memory.since is not None else arg.now
    missing = window > 0 and arg.now - since < window
    highest = max(recent + [recommendation] + ([arg.current] if missing else []))
    stabilised = min(arg.current, highest)
    if stabilised == recommendation:
        return Clamped(recommendation, Reason.ReadyForNewScale, "")
    if missing and highest == arg.current and all(r < arg.current for r in recent):
        return Clamped(
            stabilised,
            Reason.ScaleDownStabilized,
            f"scale-down stabilised: the policy memory covers {max(arg.now - since, 0):.0f} s of the {window} s "
            f"window; missing history counts as the current size, keeps {stabilised}",
        )
    return Clamped(
        stabilised,
        Reason.ScaleDownStabilized,
        f"scale-down stabilised: highest recommendation in the last {window} s is {highest}, keeps {stabilised}",
    )


def scale_up_limit(desired: int, arg: Normalization) -> Clamped:
    """Scale-up rate limit: at most ``scaleUp.maxReplicasPerPeriod`` added within
    ``scaleUp.periodSeconds``, counted from the replicas at the period's start, and never below the
    current size (:attr:`Reason.ScaleUpLimit`; the HPA's ``calculateScaleUpLimitWithScalingRules``
    with one Pods policy). E.g. 6 now, 4 added 45 s ago, 4 per 60 s: limit 6 - 4 + 4 = 6."""
    up = arg.spec.scaling.scale_up
    added = sum(d for t, d in arg.memory.scale_events if d > 0 and t > arg.now - up.period_seconds)
    limit = max(arg.current - added + up.max_replicas_per_period, arg.current)
    if desired <= limit:
        return Clamped(desired, Reason.DesiredWithinRange, "")
    return Clamped(
        limit,
        Reason.ScaleUpLimit,
        f"scale-up limited to {up.max_replicas_per_period} replicas per {up.period_seconds} s "
        f"({added} added in this period): {desired} → {limit}",
    )


def scale_down_limit(desired: int, arg: Normalization) -> Clamped:
    """Scale-down rate limit: at most ``scaleDown.maxReplicasPerPeriod`` removed within
    ``scaleDown.periodSeconds``, and never above the current size (:attr:`Reason.ScaleDownLimit`;
    the HPA's ``calculateScaleDownLimitWithBehaviors`` with one Pods policy)."""
    down = arg.spec.scaling.scale_down
    removed = -sum(d for t, d in arg.memory.scale_events if d < 0 and t > arg.now - down.period_seconds)
    limit = min(arg.current + removed - down.max_replicas_per_period, arg.current)
    if desired >= limit:
        return Clamped(desired, Reason.DesiredWithinRange, "")
    return Clamped(
        limit,
        Reason.ScaleDownLimit,
        f"scale-down limited to {down.max_replicas_per_period} replicas per {down.period_seconds} s "
        f"({removed} removed in this period): {desired} → {limit}",
    )


def no_scale_down_while_stalled(desired: int, arg: Normalization) -> Clamped:
    """No removing while an engine hangs (:attr:`Reason.StalledPods`): the hung pod still looks Ready
    to Kubernetes, which would as likely remove a healthy pod and keep the hung one; the stalled
    pod's signals are left out, so the pool's headroom is thinner than it looks. Adding is allowed."""
    if not arg.stalled or desired >= arg.current:
        return Clamped(desired, Reason.DesiredWithinRange, "")
    return Clamped(
        arg.current,
        Reason.StalledPods,
        f"pod {', '.join(arg.stalled)} stalled: no scale-down while an engine hangs, holds {arg.current} "
        f"(wanted {desired})",
    )


def insufficient_capacity(desired: int, arg: Normalization) -> Clamped:
    """No adding while interactive pods are unschedulable: a new pod would wait for GPUs too
    (:attr:`Reason.InsufficientCapacity`). Removing is still allowed."""
    if arg.unschedulable <= 0 or desired <= arg.current:
        return Clamped(desired, Reason.DesiredWithinRange, "")
    return Clamped(
        arg.current,
        Reason.InsufficientCapacity,
        f"{arg.unschedulable} interactive pods are unschedulable (PodsUnschedulable): "
        f"not adding replicas beyond {arg.current} (wanted {desired})",
    )


def calendar_floor(desired: int, arg: Normalization) -> Clamped:
    """The calendar floor (:attr:`Reason.ScheduledMinimum`): at least the ``min`` of a
    ``spec.replicas.schedule`` window open now or one lead time ahead (``arg.floor``). After the
    rate limits, like ``spec.replicas.min``: a floor is a promise for a time, not a recommendation."""
    if desired >= arg.floor:
        return Clamped(desired, Reason.DesiredWithinRange, "")
    return Clamped(
        arg.floor,
        Reason.ScheduledMinimum,
        f"below the calendar floor {arg.floor} of spec.replicas.schedule window {arg.floor_window}: {desired} → {arg.floor}",
    )


def replica_bounds(desired: int, arg: Normalization) -> Clamped:
    """``spec.replicas.min``/``max`` (:attr:`Reason.TooFewReplicas`, :attr:`Reason.TooManyReplicas`):
    the last clamp, so they win over every other one and over a hold on unknown signals."""
    lo, hi = arg.spec.replicas.min, arg.spec.replicas.max
    if desired < lo:
        return Clamped(lo, Reason.TooFewReplicas, f"below spec.replicas.min {lo}: {desired} → {lo}")
    if desired > hi:
        return Clamped(hi, Reason.TooManyReplicas, f"above spec.replicas.max {hi}: {desired} → {hi}")
    return Clamped(desired, Reason.DesiredWithinRange, "")


#: The stabilisation windows, in order; reported in ``AbleToScale``.
WINDOWS: tuple[Clamp, ...] = (scale_up_window, scale_down_window)
#: The limits after the windows, in order; reported in ``ScalingLimited``.
LIMITS: tuple[Clamp, ...] = (
    scale_up_limit,
    scale_down_limit,
    no_scale_down_while_stalled,
    insufficient_capacity,
    calendar_floor,
    replica_bounds,
)
#: The bounds that apply even while the policy holds on unknown signals (the last of :data:`LIMITS`).
BOUNDS: tuple[Clamp, ...] = (calendar_floor, replica_bounds)


def chain(value: int, arg: Normalization, clamps: Sequence[Clamp]) -> tuple[int, list[Clamped]]:
    """Apply ``clamps`` to ``value`` (replicas) in order.

    Returns:
        ``(replicas, steps)``: the final value and, in order, the steps that changed it.
    """
    bit: list[Clamped] = []
    for clamp in clamps:
        step = clamp(value, arg)
        if step.replicas != value:
            bit.append(step)
            value = step.replicas
    return value, bit


def able_to_scale_condition(windows: Sequence[Clamped], recommendation: int | None) -> ConditionResult:
    """Return the ``AbleToScale`` condition from the window steps that changed the value.

    The HPA's convention (``normalizeDesiredReplicasWithBehaviors``): the status stays ``True``;
    the reason is ``ScaleUpStabilized``/``ScaleDownStabilized`` with the window's message when the
    stabilised value differs from the recommendation, else ``ReadyForNewScale``. (The HPA sets
    ``AbleToScale=False`` only when it cannot get or update the target's scale subresource, which
    the policy never does.)

    Args:
        windows: the steps of :data:`WINDOWS` that changed the value (at most one bites).
        recommendation: this tick's recommendation, replicas; ``None`` when the policy held.
    """
    if windows:
        step = windows[-1]
        return ConditionResult("True", step.reason, step.message)
    if recommendation is None:
        return ConditionResult(
            "True", Reason.ReadyForNewScale, "no recommendation this tick (no usable signal): no window applies"
        )
    return ConditionResult(
        "True", Reason.ReadyForNewScale, f"no stabilisation window held back the recommendation of {recommendation}"
    )


def scaling_limited_condition(limits: Sequence[Clamped], desired: int) -> ConditionResult:
    """Return the ``ScalingLimited`` condition from the limit steps that changed the value.

    The HPA's convention: ``True`` with the limit's reason and message when a limit changed the
    value, else ``False``/``DesiredWithinRange``. When several bite, the last one set the final
    value and is the one named.

    Args:
        limits: the limit steps that changed the value, in order.
        desired: the final interactive replicas.
    """
    if limits:
        step = limits[-1]
        return ConditionResult("True", step.reason, step.message)
    return ConditionResult("False", Reason.DesiredWithinRange, f"the desired count {desired} is within every limit")
