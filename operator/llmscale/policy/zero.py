"""Scale to zero and back, for a pool with ``spec.replicas.min: 0`` and a wake query
(``spec.scaling.wake``). Pure: no I/O, no clock.

At zero replicas no engine runs, so no engine reports: the leading signals are unknown, and
"unknown is not zero" would hold the pool at zero for ever. The wake query is the one demand
signal that exists there (a gateway's or router's queue or request rate for the pool, read by
:mod:`llmscale.signals` into ``SignalSnapshot.wake_demand``). Two rules, applied by
:func:`~llmscale.policy.decide`:

1. **Wake** (:func:`wake_proposal`): at zero replicas the wake query proposes one replica of demand
   when its value is above ``spec.scaling.wake.threshold``, nothing at or below it. The warm
   headroom is added as always, and the scale-up stabilisation window does not hold a pool at
   zero (:func:`llmscale.policy.clamps.scale_up_window`): with nothing serving, every request
   waits for the cold start already. Once the new pods report, the leading signals take over.
2. **Release** (:func:`release_when_idle`): with ``min: 0``, when nothing runs, waits or arrives —
   demand 0, the engines' queue and running requests both known and 0 (or no engine at all), and
   the wake query known and at or below the threshold — the recommendation is 0: the warm
   headroom goes too. The scale-down stabilisation window (the highest recommendation of the
   last ``scaleDown.stabilizationWindowSeconds``) and the scale-down rate limit then decide when
   the pool reaches zero, as for any scale-down. Any unknown among these keeps the headroom.
"""

from __future__ import annotations

from dataclasses import dataclass

from llmscale.api import LLMDeploymentSpec
from llmscale.signals.snapshot import SignalSnapshot

__all__ = ["WakeProposal", "release_when_idle", "wake_proposal"]


@dataclass(frozen=True, slots=True)
class WakeProposal:
    """What the wake query proposes at zero replicas.

    Attributes:
        replicas: 1 (wake), or ``None`` (proposes nothing: at or below the threshold, or unknown).
        line: the reason line.
        known: whether the wake query's value is known.
    """

    replicas: int | None
    line: str
    known: bool


def wake_proposal(spec: LLMDeploymentSpec, snap: SignalSnapshot | None, current: int) -> WakeProposal | None:
    """Return the wake query's proposal, or ``None`` when the pool is not at zero or has no wake query.

    Args:
        spec: the LLMDeployment spec (``scaling.wake``).
        snap: the fresh snapshot (``None`` when stale or missing: the value is then unknown).
        current: the interactive pool's replicas now.
    """
    wake = spec.scaling.wake
    if wake is None or current > 0:
        return None
    value = snap.wake_demand if snap is not None else None
    if value is None:
        why = snap.unknown.get("wake_demand", "no value") if snap is not None else "no fresh snapshot"
        return WakeProposal(None, f"wake query unknown at 0 replicas ({why}): proposes nothing", known=False)
    if value > wake.threshold:
        return WakeProposal(
            1, f"wake query reads {value:g} > threshold {wake.threshold:g} at 0 replicas: proposes 1", known=True
        )
    return WakeProposal(
        None,
        f"wake query reads {value:g} ≤ threshold {wake.threshold:g} at 0 replicas: proposes nothing",
        known=True,
    )


def release_when_idle(
    spec: LLMDeploymentSpec, snap: SignalSnapshot | None, current: int, demand: int, recommendation: int
) -> tuple[int, str | None]:
    """Return the recommendation after the idle release, and its reason line (``None``: unchanged).

    Args:
        spec: the LLMDeployment spec (``replicas.min``, ``scaling.wake``).
        snap: the fresh snapshot.
        current: the interactive pool's replicas now.
        demand: the demand the signals ask for, replicas.
        recommendation: demand plus the warm headroom, replicas.

    Returns:
        ``(0, line)`` when the pool may go to zero (rule 2 of this module), else
        ``(recommendation, None)``.
    """
    wake = spec.scaling.wake
    if wake is None or spec.replicas.min > 0 or snap is None or demand > 0 or recommendation == 0:
        return recommendation, None
    value = snap.wake_demand
    if value is None or value > wake.threshold:
        return recommendation, None
    if current > 0 and not (snap.queue_depth == 0 and snap.running_requests == 0):
        return recommendation, None  # a request waits or runs, or the engines cannot say
    engines = "no engine runs" if current == 0 else "no request runs or waits on the engines"
    return 0, (
        f"idle: {engines} and the wake query reads {value:g} ≤ threshold {wake.threshold:g}: "
        "recommends 0 (spec.replicas.min 0: the warm headroom is released too)"
    )
