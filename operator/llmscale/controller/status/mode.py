"""``spec.mode``: whether a tick writes what it decides, and the ``ScalingActive`` condition that
says so. Pure.

- ``Active`` (default): the decided replicas are written to the workload.
- ``Advisory``: everything is decided and reported — status (``replicas.desired`` is the advice,
  ``replicas.current`` what the workload has), ``AdvisedScaleUp``/``AdvisedScaleDown`` Events,
  the metrics — and nothing is written to the workload: no Deployment, Service, PDB or placeholder
  is applied, no ``/scale`` written. Made to run beside KEDA or an HPA and compare.
- ``Paused``: the workload is held as it is (nothing written either) and the status reports the
  signals and what the policy would do.

In both non-active modes the policy memory keeps the recommendations (so the stabilisation
windows are warm when the mode goes back to ``Active``) but no scale event: none happened, and a
recorded one would make the rate limits hold the next advice back.
"""

from __future__ import annotations

import dataclasses

from llmscale.api import LLMDeploymentSpec
from llmscale.policy.types import ConditionResult, Decision, PolicyMemory

__all__ = [
    "ACTIVE",
    "ADVISORY",
    "PAUSED",
    "SCALING_ACTIVE_REASONS",
    "memory_without_scaling",
    "mode_condition",
    "writes_workload",
]

ACTIVE, ADVISORY, PAUSED = "Active", "Advisory", "Paused"

#: Every reason of the ``ScalingActive`` condition (docs/troubleshooting.md has a row for each).
SCALING_ACTIVE_REASONS: tuple[str, ...] = (ACTIVE, ADVISORY, PAUSED, "FailedGetScale", "FailedUpdateScale")


def writes_workload(spec: LLMDeploymentSpec) -> bool:
    """Whether llmscale writes to the workload (children, ``/scale``, placeholders): ``Active`` only."""
    return bool(spec.mode == ACTIVE)


def mode_condition(spec: LLMDeploymentSpec, current: int, decided: int) -> ConditionResult:
    """Return the ``ScalingActive`` condition of a tick that read the workload.

    Args:
        spec: the spec (``mode``, ``scaleTargetRef``).
        current: the workload's interactive replicas now.
        decided: the interactive replicas the policy decided.
    """
    target = f"{spec.scale_target_ref}" if spec.scale_target_ref is not None else "the Deployment llmscale created"
    if spec.mode == ADVISORY:
        return ConditionResult(
            "False", ADVISORY,
            f"spec.mode is Advisory: the policy advises {decided} replicas; {target} has {current} and "
            "llmscale writes nothing to it")
    if spec.mode == PAUSED:
        return ConditionResult(
            "False", PAUSED,
            f"spec.mode is Paused: {target} is held at {current} replicas (the policy would set {decided})")
    return ConditionResult("True", ACTIVE, f"llmscale scales {target}")


def memory_without_scaling(decision: Decision, now: float) -> PolicyMemory:
    """Return ``decision.memory`` without the scale event of this decision (at ``now``): what to keep
    when the decision is not written (Advisory, Paused)."""
    memory = decision.memory
    return dataclasses.replace(memory, scale_events=tuple(e for e in memory.scale_events if e[0] != now))
