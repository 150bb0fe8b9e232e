"""A rollout of the interactive Deployment, told apart from capacity llmscale asked for: the
``RolloutProgressing`` condition and the ``RolloutStuck`` Warning Event.

Pods beyond ``spec.replicas`` are a rollout's surge (``maxSurge: 1, maxUnavailable: 0``,
:mod:`llmscale.controller.manifests.children`): :func:`~llmscale.controller.state.pods.pool_state` leaves them out of
the pods the policy counts as on their way, so an SLO breach is answered and the
InsufficientCapacity clamp counts only the replicas llmscale asked for. A surge pod that cannot be
placed (no free GPU) or fails (a broken new image) can never finish the rollout: that is
reported at once, before the Deployment's own ``Progressing`` condition turns ``False`` with
``ProgressDeadlineExceeded`` (which is read and reported too). Where the surge pod cannot be placed
and the warm headroom covers demand (a Ready replica can go without demand going unserved), the
rollout is made to fit (:func:`rollout_fits`): one Ready pod replaced at a time (``maxSurge: 0,
maxUnavailable: 1``) until the Deployment reports the new ReplicaSet available. Pure except
:func:`note_rollout`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import kopf

from llmscale.controller.events import clip
from llmscale.controller.indexes import IndexedPod
from llmscale.controller.memory import ObjectMemory
from llmscale.policy.types import ConditionResult

__all__ = [
    "ROLLOUT_PROGRESSING",
    "ROLLOUT_REASONS",
    "note_rollout",
    "rollout_condition",
    "rollout_fits",
]

#: The condition type.
ROLLOUT_PROGRESSING = "RolloutProgressing"
#: Its reasons (docs/troubleshooting.md has a row for each).
ROLLOUT_REASONS = ("RolloutComplete", "RollingOut", "RollingOutInPlace", "RolloutBlocked", "RolloutStuck")
#: The Deployment's ``Progressing`` reason once its new ReplicaSet is available: the rollout is done.
_COMPLETE = "NewReplicaSetAvailable"


def _blocked(replicas: int, pods: Iterable[IndexedPod]) -> tuple[int, int, int]:
    """``(surge, failed surge, unschedulable surge)``, the way :func:`pool_state` assigns them."""
    pods = list(pods)
    surge = max(0, len(pods) - replicas)
    failed = min(surge, sum(p.phase == "failed" for p in pods))
    unschedulable = min(surge - failed, sum(p.phase == "unschedulable" for p in pods))
    return surge, failed, unschedulable


def rollout_fits(replicas: int, pods: Iterable[IndexedPod], progressing: tuple[str, str, str] | None,
                 demand: int, fitted: bool) -> bool:
    """Whether the interactive Deployment's rollout should replace Ready pods in place.

    Kept once set until the Deployment reports its new ReplicaSet available (``Progressing`` reason
    ``NewReplicaSetAvailable``). Set when a surge pod cannot be placed (no node has the GPUs free:
    the rollout can never finish) and the warm headroom covers demand: ``ready − 1 ≥ demand``.
    E.g. 8 replicas of 2 GPUs filling two 8-GPU nodes, demand 6: one pod at a time goes and its
    replacement takes its GPUs; demand 8: not fitted (reported only, ``RolloutBlocked``).

    Args:
        replicas: the Deployment's ``spec.replicas``.
        pods: its live pods (failed ones judged).
        progressing: its ``Progressing`` condition, ``(status, reason, message)``, or ``None``.
        demand: the replicas the policy says the load needs now (``Decision.demand_replicas``).
        fitted: whether the rollout was made to fit at the last tick.
    """
    pods = list(pods)
    if progressing is not None and progressing[1] == _COMPLETE and not max(0, len(pods) - replicas):
        return False
    if fitted:
        return True
    _, _, unschedulable = _blocked(replicas, pods)
    ready = sum(p.phase == "ready" for p in pods)
    return unschedulable > 0 and ready - 1 >= demand


def rollout_condition(deployment: str, replicas: int, pods: Iterable[IndexedPod],
                      progressing: tuple[str, str, str] | None, fitted: bool = False) -> ConditionResult:
    """Return the ``RolloutProgressing`` condition of the interactive pool.

    - ``False``/``RolloutStuck``: the Deployment's ``Progressing`` is ``False`` (reason
      ``ProgressDeadlineExceeded``: no progress within ``progressDeadlineSeconds``).
    - ``False``/``RolloutBlocked``: a surge pod cannot be placed or has failed, so the rollout
      cannot finish; the replicas llmscale asked for are judged apart from it.
    - ``True``/``RollingOutInPlace``: made to fit (``fitted``): Ready pods replaced one at a time.
    - ``True``/``RollingOut``: surge pods are starting (not counted as capacity).
    - ``True``/``RolloutComplete``: no rollout under way.

    Args:
        deployment: the Deployment's name, for the message.
        replicas: its ``spec.replicas``.
        pods: its live pods (with the failed ones judged).
        progressing: its ``Progressing`` condition (the rollouts index,
            :func:`~llmscale.controller.indexes.index_rollouts`).
    """
    surge, failed, unschedulable = _blocked(replicas, pods)
    if progressing is not None and progressing[0] == "False":
        return ConditionResult("False", "RolloutStuck", clip(
            f"Deployment {deployment} reports Progressing=False ({progressing[1]}: {progressing[2]}); "
            f"{surge} surge pods are not counted as capacity"))
    if fitted and not (progressing is not None and progressing[1] == _COMPLETE and not surge):
        return ConditionResult("True", "RollingOutInPlace", clip(
            f"Deployment {deployment} is rolling out one Ready pod at a time (maxSurge 0, maxUnavailable 1): "
            "no node had the GPUs free for a surge pod and the warm headroom covers demand"))
    if unschedulable or failed:
        why = []
        if unschedulable:
            why.append(f"{unschedulable} cannot be placed (no node has the GPUs free)")
        if failed:
            why.append(f"{failed} failed (see PodsHealthy)")
        return ConditionResult("False", "RolloutBlocked", clip(
            f"The rollout of Deployment {deployment} cannot finish: of its {surge} surge pods, {' and '.join(why)}; "
            "they are not replicas llmscale asked for and do not stop a scale-up. Free a GPU (lower "
            "spec.replicas.min, or add a node) or roll back spec.engine.image / spec.template"))
    if surge:
        return ConditionResult("True", "RollingOut", (
            f"Deployment {deployment} is rolling out: {surge} surge pods starting, not counted as capacity"))
    return ConditionResult("True", "RolloutComplete", f"No rollout of Deployment {deployment} under way")


def note_rollout(mem: ObjectMemory, body: kopf.Body, logger: logging.Logger | logging.LoggerAdapter[Any],
                 condition: ConditionResult) -> None:
    """Log and post a ``RolloutStuck`` Warning Event when the rollout turns blocked or stuck (once per
    reason); log when it recovers. Remembered in ``mem.rollout_reported``."""
    bad = condition.reason if condition.status == "False" else None
    if bad == mem.rollout_reported:
        return
    meta = body.get("metadata", {})
    what = f"LLMDeployment {meta.get('namespace')}/{meta.get('name')}"
    if bad is not None:
        message = f"Found the rollout of {what} unable to finish: {condition.message}"
        logger.warning(message)
        kopf.warn(body, reason="RolloutStuck", message=clip(message))
    elif mem.rollout_reported is not None:
        logger.info(f"Found the rollout of {what} progressing again: {condition.message}")
    mem.rollout_reported = bad
