"""One scaling tick of one LLMDeployment: gather → decide → apply → record.

1. **gather**: the pools' state from the Kopf indexes (no API read), the interactive pool's
   newest snapshot from the fleet reader (:mod:`llmscale.controller.fleet`: every pool read
   together once per base period; a failure or timeout is an *unknown* snapshot, never zeros),
   the signal history
   (:func:`llmscale.policy.history.record_snapshot`) and the policy memory (this process's, else
   ``status.policyState``);
2. **decide**: ``deps.decide(spec, history, state, memory, now)``, pure;
3. **apply**: the pods' deletion costs (:mod:`llmscale.controller.deletioncost`), then each pool
   whose replicas change gets its Deployment server-side applied, on its own: one pool's refusal
   never stops or undoes the other's; a pool that another autoscaler targets is left alone
   (:mod:`llmscale.controller.autoscalers`);
4. **record**: the policy memory that matches what was applied (:func:`memory_after`), an Event and
   a log line per applied scale (and per refusal), a Warning Event when a pod starts to hang, the
   metrics, and ``status`` when it changed.

A tick also puts back children that are missing — deleted by someone, or never applied because
Kopf's bookkeeping annotations say the object was handled (an object restored from a backup with
its annotations): a Deployment missing for :data:`CHILDREN_GRACE_S` is applied again.

Two clocks, never mixed: the event loop's (monotonic seconds, ``asyncio`` ``loop.time()``) decides
*when* — whether the tick is due, the grace before re-applying missing children, the status
write throttle, the tick's duration; the wall clock (``deps.clock()``, seconds since the epoch)
is *what time it is* for the policy and the times written in status.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from typing import Any

import kopf

from llmscale.api import LLMDeploymentSpec
from llmscale.controller.applyfailure import CHILDREN_APPLIED, applied_condition, note_apply
from llmscale.controller.autoscalers import SOLE_AUTOSCALER, note_other_autoscalers, sole_autoscaler_condition
from llmscale.controller.children import deployment_manifest
from llmscale.controller.costwriter import write_deletion_costs
from llmscale.controller.deps import Dependencies
from llmscale.controller.ensure import ensure_children
from llmscale.controller.events import post_policy_state_unreadable, post_scaled, post_stalled, scaled_message
from llmscale.controller.indexes import (
    deployment_replicas,
    other_autoscalers,
    pod_cold_starts,
    pod_costs,
    pod_names,
    pod_phases,
)
from llmscale.controller.invalid import report_invalid
from llmscale.controller.memory import ObjectMemory, memory_after
from llmscale.controller.names import BATCH, INTERACTIVE, POOLS, Pool, deployment_name, owner_reference
from llmscale.controller.pods import pool_state
from llmscale.controller.spec import InvalidSpec, read_spec
from llmscale.controller.status import build_status
from llmscale.controller.statuspatch import status_patch
from llmscale.controller.writer import ApplyRefused, apply_manifests
from llmscale.policy.history import history_seconds, record_snapshot
from llmscale.policy.types import Decision, PoolState
from llmscale.signals.profiles import get_profile
from llmscale.signals.queries import PoolTarget
from llmscale.signals.snapshot import SignalSnapshot

__all__ = ["CHILDREN_GRACE_S", "PoolChange", "tick"]

_Logger = logging.Logger | logging.LoggerAdapter[Any]

#: A Deployment we applied shows up in the index within milliseconds (the watch event), and a new
#: object's children are applied by the create handler within a second; one still missing after
#: this many loop seconds of ticks was deleted by someone, or never applied (a restored object whose
#: Kopf annotations say "handled"), and is applied again.
CHILDREN_GRACE_S = 10.0


@dataclass(frozen=True, slots=True)
class PoolChange:
    """One pool's Deployment to apply in a tick, and how it went.

    Attributes:
        pool: ``interactive`` or ``batch``.
        old: replicas before the tick (0 for a batch Deployment that does not exist yet).
        new: replicas decided.
        applied: whether the API server accepted the apply.
        error: the refusal's message when it did not.
    """

    pool: Pool
    old: int
    new: int
    applied: bool
    error: str | None = None


def _direction(old: int, new: int) -> str:
    return "up" if new > old else "down" if new < old else "hold"


async def _read_signals(
    deps: Dependencies, spec: LLMDeploymentSpec, namespace: str, name: str, pods: Any, loop_now: float
) -> SignalSnapshot:
    """Register the interactive pool with the fleet reader (its profile, its wake query and its
    pods from the live pod index) and return its newest snapshot; an incomplete one is counted."""
    target = PoolTarget(namespace, name, INTERACTIVE)
    key = (namespace, name, INTERACTIVE)
    deps.fleet.register(
        target,
        get_profile(spec.engine.profile()),
        pods=lambda: pod_names(pods, key),
        wake_query=spec.scaling.wake.query if spec.scaling.wake is not None else None,
        # Two of the object's ticks: a deleted or no longer watched object stops being read soon.
        keep_s=2 * (spec.scaling.tick_seconds + deps.settings.tick_base_seconds),
        loop_now=loop_now,
    )
    snapshot = await deps.fleet.snapshot(target)
    if snapshot.error is not None:
        # The fleet reader and the Prometheus reader log their failures; count every incomplete read.
        deps.metrics.signal_errors.labels(namespace, name).inc()
    return snapshot


def _report_stalls(mem: ObjectMemory, body: kopf.Body, namespace: str, name: str, snapshot: SignalSnapshot,
                   logger: _Logger) -> None:
    """Post a Warning Event and log a warning for each pod that started to hang since the last tick."""
    stalled = frozenset(snapshot.stalled_pods)
    for pod in sorted(stalled - mem.stalled_reported):
        window = snapshot.window.promql if snapshot.window is not None else "rate"
        message = (f"Found pod {namespace}/{pod} of LLMDeployment {namespace}/{name} stalled: running requests "
                   f"stayed above 0 through the {window} window while no token was generated; its signals "
                   "are left out and no replica is removed while it hangs")
        logger.warning(message)
        post_stalled(body, message)
    mem.stalled_reported = stalled


def _changes(spec: LLMDeploymentSpec, state: PoolState, batch_exists: bool, decision: Decision) -> list[tuple[Pool, int, int]]:
    """Return ``(pool, old, new)`` of each Deployment to apply.

    An invalid decision (no signal known) holds the current size, but ``spec.replicas.min``/``max``
    still apply (``decide``'s contract): a raised min must scale up even while Prometheus is down.
    Anything else an invalid decision returns is the current size, so comparing is enough. The
    batch Deployment is applied when its size changes or when it does not exist yet.
    """
    changes: list[tuple[Pool, int, int]] = []
    if decision.interactive_replicas != state.interactive_replicas:
        changes.append((INTERACTIVE, state.interactive_replicas, decision.interactive_replicas))
    if spec.batch is not None and (not batch_exists or decision.batch_replicas != state.batch_replicas):
        changes.append((BATCH, state.batch_replicas, decision.batch_replicas))
    return changes


async def _apply(
    deps: Dependencies, body: kopf.Body, spec: LLMDeploymentSpec, namespace: str, name: str,
    changes: list[tuple[Pool, int, int]], logger: _Logger,
) -> list[PoolChange]:
    """Apply each pool's Deployment on its own; a refusal is logged and recorded, never raised."""
    owner = owner_reference(body)
    done: list[PoolChange] = []
    for pool, old, new in changes:
        try:
            manifest = deployment_manifest(name, namespace, spec, pool, new, owner, deps.priority_classes)
            await apply_manifests(deps.writer, [manifest], deps.metrics)
        except ApplyRefused as exc:
            logger.error(f"Failed to scale {pool} pool of LLMDeployment {namespace}/{name} to {new}: {exc}")
            done.append(PoolChange(pool, old, new, applied=False, error=str(exc)))
        else:
            done.append(PoolChange(pool, old, new, applied=True))
    return done


async def tick(
    deps: Dependencies,
    mem: ObjectMemory,
    *,
    body: kopf.Body,
    namespace: str,
    name: str,
    patch: kopf.Patch,
    logger: _Logger,
    deployments: Any,
    pods: Any,
    costs: Any = None,
    hpas: Any = None,
    scaled_objects: Any = None,
) -> None:
    """Run one tick of the LLMDeployment ``body`` if its ``spec.scaling.tickSeconds`` is due.

    Never raises for a bad spec (reported as ``InvalidSpec``), a failed signal read (an unknown
    snapshot) or a refused apply (logged, counted, and left out of the memory and status): the
    next tick tries again.

    Args:
        deps: the injected dependencies.
        mem: the object's memory; updated in place.
        body / namespace / name / patch / logger: Kopf's handler arguments.
        deployments / pods / costs / hpas / scaled_objects: the Kopf indexes
            (:mod:`llmscale.controller.indexes`).
    """
    loop = asyncio.get_running_loop()
    started_loop_s = loop.time()
    if started_loop_s < mem.next_tick_loop_s:
        return
    try:
        spec = read_spec(body)
    except InvalidSpec as exc:
        mem.next_tick_loop_s = started_loop_s + deps.settings.tick_base_seconds
        report_invalid(deps, mem, body, patch, logger, str(exc))
        return
    mem.next_tick_loop_s = started_loop_s + spec.scaling.tick_seconds

    # --- gather -----------------------------------------------------------------------------
    key_i, key_b = (namespace, name, INTERACTIVE), (namespace, name, BATCH)
    current_i = deployment_replicas(deployments, key_i)
    current_b = deployment_replicas(deployments, key_b)
    if current_i is None:
        # No interactive Deployment in the index. Right after create/resume that is the watch
        # catching up with our own apply (milliseconds); after CHILDREN_GRACE_S of ticks, someone
        # deleted it or nobody applied it: apply the children again. The tick decides once the
        # Deployment is back in the index.
        now_loop = loop.time()
        if mem.children_missing_since_loop_s is None:
            mem.children_missing_since_loop_s = now_loop
        applied = mem.children_applied_loop_s
        if (now_loop - mem.children_missing_since_loop_s >= CHILDREN_GRACE_S
                and (applied is None or now_loop - applied >= CHILDREN_GRACE_S)):
            # Once per failure: while the apply keeps failing, ApplyFailed says it (once per answer).
            log = logger.debug if mem.apply_error is not None else logger.warning
            log(f"Found Deployment {namespace}/{name} missing: applying the children again")
            with contextlib.suppress(kopf.TemporaryError, kopf.PermanentError):  # reported, retried next tick
                await ensure_children(deps, mem, body=body, namespace=namespace, name=name, patch=patch,
                                      logger=logger, deployments=deployments)
        return
    mem.children_missing_since_loop_s = None
    snapshot = await _read_signals(deps, spec, namespace, name, pods, started_loop_s)
    # After the read, which may have waited: the pools as they are when the policy decides.
    state = pool_state(current_i, current_b, pod_phases(pods, key_i), pod_phases(pods, key_b),
                       pod_cold_starts(pods, key_i), pod_cold_starts(pods, key_b))
    wall_now = deps.clock()
    _report_stalls(mem, body, namespace, name, snapshot, logger)
    keep_s = max(deps.settings.signal_history_seconds, history_seconds(spec))
    mem.history = record_snapshot(mem.history, snapshot, wall_now, keep_s)
    restoring = mem.policy_memory is None
    memory = mem.restored_policy_memory(body.get("status"))
    if restoring and memory.unreadable is not None:
        # Once per start: the policy reports it in PolicyStateReadable while it matters.
        dropped = (f"Dropped unreadable part of status.policyState of LLMDeployment {namespace}/{name}: "
                   f"{memory.unreadable}")
        logger.warning(dropped)
        post_policy_state_unreadable(body, dropped)

    # --- decide -----------------------------------------------------------------------------
    decision = deps.decide(spec, mem.history, state, memory, wall_now)

    # --- apply ------------------------------------------------------------------------------
    # Another autoscaler on a pool's Deployment: leave that pool's replicas to it.
    others = {pool: other_autoscalers((hpas, scaled_objects), (namespace, deployment_name(name, pool)))
              for pool in POOLS}
    note_other_autoscalers(mem, body, logger, others)
    wanted = [c for c in _changes(spec, state, current_b is not None, decision) if not others[c[0]]]
    # The pods' deletion costs first, so that a scale-down removes the least-loaded pods.
    if not others[INTERACTIVE]:
        await write_deletion_costs(deps, namespace, pod_costs(costs, key_i), snapshot,
                                   scaling_down=decision.interactive_replicas < state.interactive_replicas,
                                   logger=logger)
    changes = await _apply(deps, body, spec, namespace, name, wanted, logger)
    errors = [c.error for c in changes if c.error is not None]
    if errors or (changes and mem.apply_error is not None):
        note_apply(mem, body, logger, "; ".join(errors) or None)

    # --- record -----------------------------------------------------------------------------
    applied_i, applied_b = state.interactive_replicas, state.batch_replicas
    for change in changes:
        if not change.applied:
            continue
        if change.pool == INTERACTIVE:
            applied_i = change.new
        else:
            applied_b = change.new
    mem.policy_memory = memory_after(memory, decision, interactive_applied=applied_i == decision.interactive_replicas)
    reasons = "; ".join(decision.reasons) or "no reason given"
    for change in changes:
        if change.applied and change.old != change.new:
            message = scaled_message(namespace, name, change.pool, change.old, change.new, reasons)
            logger.info(message)
            post_scaled(body, change.old, change.new, message)

    deps.metrics.decisions.labels(_direction(state.interactive_replicas, applied_i), decision.clamped_by).inc()
    deps.metrics.desired.labels(namespace, name, INTERACTIVE).set(applied_i)
    deps.metrics.ready.labels(namespace, name, INTERACTIVE).set(state.interactive_ready)
    deps.metrics.desired.labels(namespace, name, BATCH).set(applied_b)
    deps.metrics.ready.labels(namespace, name, BATCH).set(state.batch_ready)

    previous = dict(body.get("status") or {})
    desired = build_status(
        decision=decision, snapshot=snapshot, state=state, applied_interactive=applied_i,
        applied_batch=applied_b, generation=body.get("metadata", {}).get("generation"),
        previous=previous, now=wall_now, memory=mem.policy_memory,
        extra_conditions={CHILDREN_APPLIED: applied_condition(mem.apply_error),
                          SOLE_AUTOSCALER: sole_autoscaler_condition(name, others)},
    )
    written_loop_s = loop.time()
    update = status_patch(previous, desired, now=written_loop_s, last_written_at=mem.last_status_write_loop_s,
                          refresh_seconds=deps.settings.status_refresh_seconds)
    if update:
        patch.status.update(update)
        mem.last_status_write_loop_s = written_loop_s
    mem.last_invalid = None
    deps.metrics.tick_duration.observe(loop.time() - started_loop_s)
    logger.debug(f"Ticked LLMDeployment {namespace}/{name}: {applied_i} interactive, {applied_b} batch; {reasons}")
