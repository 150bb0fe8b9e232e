"""Inputs and outputs of the scaling policy. Pure: no I/O, no clock."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["ConditionResult", "Decision", "PolicyMemory", "PoolState"]


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
    """

    interactive_replicas: int
    interactive_ready: int
    interactive_starting: int = 0
    interactive_unschedulable: int = 0
    batch_replicas: int = 0
    batch_ready: int = 0


@dataclass(frozen=True, slots=True)
class PolicyMemory:
    """Policy state that must survive an operator restart (stored in ``status.policyState``).

    Attributes:
        recommendations: ``(time_s, replicas)`` pairs of past recommendations, oldest first, kept
            as long as the longest stabilisation window needs them.
        scale_events: ``(time_s, delta_replicas)`` of past changes to the interactive pool, kept
            for the rate-limit periods.
    """

    recommendations: tuple[tuple[float, int], ...] = ()
    scale_events: tuple[tuple[float, int], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-able dict for ``status.policyState``."""
        return {
            "recommendations": [[t, r] for t, r in self.recommendations],
            "scaleEvents": [[t, d] for t, d in self.scale_events],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> PolicyMemory:
        """Parse :meth:`to_dict`'s output; anything malformed yields an empty memory."""
        if not data:
            return cls()
        try:
            recs = tuple((float(t), int(r)) for t, r in data.get("recommendations", []))
            events = tuple((float(t), int(d)) for t, d in data.get("scaleEvents", []))
        except (TypeError, ValueError):
            return cls()
        return cls(recommendations=recs, scale_events=events)


@dataclass(frozen=True, slots=True)
class ConditionResult:
    """One condition as the policy sees it; the operator turns it into a ``metav1.Condition``.

    ``reason`` is CamelCase (e.g. ``ScaleUpLimit``); ``message`` is one human sentence.
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
        metrics_available / scaling_limited / batch_window_open: the conditions.
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
    scaling_limited: ConditionResult
    batch_window_open: ConditionResult
    memory: PolicyMemory = field(default_factory=PolicyMemory)
    valid: bool = True
