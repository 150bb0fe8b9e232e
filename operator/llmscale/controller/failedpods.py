"""Pods that will never serve: the startup budget a pod is judged against at each tick, the
``PodsHealthy`` condition and the ``FailedPod`` Warning Event that name each failed pod and why.

A pod is failed when :func:`~llmscale.controller.state.pods.pod_failure` says so (a crash loop, an image
pull back-off, a configuration error: read from the pod by the index), or when it has been
scheduled and not Ready for longer than the pool's **startup budget**: :data:`BUDGET_FACTOR` times
the slowest of the pool's own measured cold starts, and never less than :data:`BUDGET_FLOOR_S`. A
pool with no measured cold start has no budget (a first cold start of a new model can take any
time; only the reasons above make its pods failed). The budget counts from the pod's scheduling
(``PodScheduled`` became ``True``), so a pod that waited for a node Karpenter provisioned is not
charged for the wait. A Ready pod whose engine fails every request fast (the signals' ``failing_pods``:
errors rising, nothing answered while traffic reaches it) is failed too (:func:`judge_failing`): it
is not idle capacity. Pure except :func:`note_failed_pods`, which posts the Events.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import Any

import kopf

from llmscale.controller.events import clip
from llmscale.controller.indexes import IndexedPod, cold_starts_of
from llmscale.controller.memory import ObjectMemory
from llmscale.controller.state.pods import recent_cold_starts
from llmscale.policy.types import ConditionResult
from llmscale.signals.snapshot import SignalSnapshot

__all__ = [
    "BUDGET_FACTOR",
    "BUDGET_FLOOR_S",
    "PODS_HEALTHY",
    "PODS_HEALTHY_REASONS",
    "judge_failing",
    "judge_pods",
    "note_failed_pods",
    "pods_healthy_condition",
    "startup_budget_s",
]

#: The condition type.
PODS_HEALTHY = "PodsHealthy"
#: Its reasons (docs/troubleshooting.md has a row for each).
PODS_HEALTHY_REASONS = ("NoFailedPods", "FailedPods")

#: A pod still not Ready after this many times the pool's slowest measured cold start will not
#: become Ready: cold starts of one pool vary by the image pull (cached or not, 2×) and the weights'
#: read (local NVMe or network, 1.5×); 3× is past both together.
BUDGET_FACTOR = 3.0
#: The shortest budget, seconds: a pool of fast mock or small-model replicas (30 s starts) still
#: gives a pod on a new node ten minutes for its image.
BUDGET_FLOOR_S = 600.0


def startup_budget_s(cold_starts_s: Sequence[float]) -> float | None:
    """Return the startup budget (seconds) from a pool's measured cold starts, ``None`` without any.

    ``max(BUDGET_FACTOR × slowest, BUDGET_FLOOR_S)``; e.g. starts of 610, 700 and 900 s give 2,700 s.
    """
    if not cold_starts_s:
        return None
    return max(BUDGET_FACTOR * max(cold_starts_s), BUDGET_FLOOR_S)


def judge_pods(pods: Iterable[IndexedPod], now: float) -> tuple[IndexedPod, ...]:
    """Return the pool's pods with every starting pod past the startup budget turned ``failed``.

    Args:
        pods: the live pods of one pool (the pods index, or a ``scaleTargetRef`` workload's).
        now: seconds since the epoch.
    """
    pods = tuple(pods)
    measured = recent_cold_starts(cold_starts_of(pods))
    budget = startup_budget_s(measured)
    if budget is None:
        return pods
    out = []
    for pod in pods:
        since = pod.scheduled_s if pod.scheduled_s is not None else pod.created_s
        if pod.phase == "starting" and since is not None and now - since > budget:
            why = (f"not Ready {now - since:,.0f} s after it was scheduled, past the startup budget of "
                   f"{budget:,.0f} s ({BUDGET_FACTOR:g} × the slowest of the pool's {len(measured)} "
                   f"measured cold starts, {max(measured):,.0f} s)")
            pod = pod._replace(phase="failed", failure=why)
        out.append(pod)
    return tuple(out)


def judge_failing(pods: Iterable[IndexedPod], snapshot: SignalSnapshot) -> tuple[IndexedPod, ...]:
    """Return the pool's pods with every pod the snapshot found failing every request turned
    ``failed``, the failure naming its error rate (a pod already failed keeps its own reason)."""
    failing = {p.pod: p for p in snapshot.pods if p.failing and p.pod in snapshot.failing_pods}
    window = snapshot.window.promql if snapshot.window is not None else "rate"
    out = []
    for pod in pods:
        signals = failing.get(pod.name)
        if signals is not None and pod.phase != "failed":
            rate = signals.failed_request_rate or 0.0
            pod = pod._replace(phase="failed", failure=(
                f"its engine failed every request over the {window} window ({rate:.2f} requests/s ended in error, "
                "none answered with stop or length) while traffic reached it"))
        out.append(pod)
    return tuple(out)


def _failed(pods: Iterable[IndexedPod]) -> list[IndexedPod]:
    return sorted((p for p in pods if p.phase == "failed"), key=lambda p: p.name)


def pods_healthy_condition(pods: Iterable[IndexedPod]) -> ConditionResult:
    """Return the ``PodsHealthy`` condition of the interactive pool: ``True``/``NoFailedPods``, or
    ``False``/``FailedPods`` naming each failed pod and why (its last termination reason)."""
    failed = _failed(pods)
    if not failed:
        return ConditionResult("True", "NoFailedPods", "No pod of the interactive pool has failed")
    named = "; ".join(f"pod {p.name}: {p.failure or 'failed'}" for p in failed)
    return ConditionResult("False", "FailedPods", clip(
        f"{len(failed)} pods will never serve and are not counted as capacity ({named}): replacements asked for; "
        "delete a pod to have it rescheduled"))


def note_failed_pods(mem: ObjectMemory, body: kopf.Body, logger: logging.Logger | logging.LoggerAdapter[Any],
                     pods: Iterable[IndexedPod]) -> None:
    """Log and post a ``FailedPod`` Warning Event for each pod of the pool that failed since the last
    tick (once per pod while it stays failed); remembered in ``mem.failed_reported``."""
    meta = body.get("metadata", {})
    what = f"LLMDeployment {meta.get('namespace')}/{meta.get('name')}"
    failed = _failed(pods)
    for pod in failed:
        if pod.name in mem.failed_reported:
            continue
        message = (f"Found pod {meta.get('namespace')}/{pod.name} of {what} failed: {pod.failure or 'failed'}; "
                   "it is not counted as capacity and its replacement is asked for")
        logger.warning(message)
        kopf.warn(body, reason="FailedPod", message=clip(message))
    mem.failed_reported = frozenset(p.name for p in failed)
