"""One scaling tick of one LLMDeployment: gather → decide → apply → record.

1. **gather**: the pools' state from the Kopf indexes (no API read), the interactive pool's
   newest snapshot from the fleet reader (:mod:`llmscale.controller.signals.fleet`: every pool read
   together once per base period; a failure or timeout is an *unknown* snapshot, never zeros),
   the signal history
   (:func:`llmscale.policy.history.record_snapshot`) and the policy memory (this process's, else
   ``status.policyState``);
2. **decide**: ``deps.decide(spec, history, state, memory, now)``, pure; then the batch step
   (:func:`llmscale.policy.batch.step.batch_step`, pure) plans the labelled Jobs from the Jobs index
   and sizes the batch pool from their backlog, bounded by the GPUs free from the shared node read
   (:mod:`llmscale.controller.gpusfree`);
3. **apply** (``spec.mode: Active`` only): the pods' deletion costs
   (written by :mod:`llmscale.controller.costwriter`, computed by
   :mod:`llmscale.controller.state.deletioncost`), then each pool whose replicas change gets its
   Deployment server-side applied — or, with ``spec.scaleTargetRef``, its workload's ``/scale`` —
   on its own: one pool's refusal never stops or undoes the other's; a pool that another autoscaler
   targets is left alone (:mod:`llmscale.controller.autoscalers`); then the placeholder pods of the
   node headroom (``spec.headroom.warmNodes``) follow the decision's headroom; then the Jobs the
   plan releases or pauses get their ``spec.suspend`` (:mod:`llmscale.controller.batch`);
4. **record**: the policy memory that matches what was applied (:func:`memory_after`), an Event and
   a log line per applied scale (and per refusal; per new advice in ``Advisory`` mode), a Warning
   Event when a pod starts to hang, the metrics, and ``status`` when it changed.

With ``spec.scaleTargetRef`` the pools' state is read from the workloads' ``/scale`` and their
pods (by the selector ``/scale`` reports) instead of the indexes, and the signals are read for
those pods by name (:mod:`llmscale.controller.scaletarget`).

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
import dataclasses
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import kopf

from llmscale.api import LLMDeploymentSpec
from llmscale.controller.applyfailure import CHILDREN_APPLIED, applied_condition, children_error, note_apply
from llmscale.controller.autoscalers import SOLE_AUTOSCALER, note_other_autoscalers, sole_autoscaler_condition
from llmscale.controller.batch import apply_job_actions, read_jobs
from llmscale.controller.costwriter import write_deletion_costs
from llmscale.controller.deps import Dependencies
from llmscale.controller.disruption import release_ready_pods
from llmscale.controller.ensure import ensure_children
from llmscale.controller.events import (
    advised_message,
    conclusion_first,
    post_advised,
    post_policy_state_unreadable,
    post_scaled,
    post_stalled,
    post_wake_refused,
    scaled_message,
)
from llmscale.controller.failedpods import (
    PODS_HEALTHY,
    judge_failing,
    judge_pods,
    note_failed_pods,
    pods_healthy_condition,
)
from llmscale.controller.indexes import (
    IndexedPod,
    cold_starts_of,
    deployment_replicas,
    indexed_pods,
    other_autoscalers,
    pod_costs,
    pod_names,
    pod_phases,
    rollout_progress,
)
from llmscale.controller.invalid import report_invalid
from llmscale.controller.jobowners import (
    SOLE_JOB_MANAGER,
    note_job_managers,
    sole_job_manager_condition,
    split_jobs,
)
from llmscale.controller.livefit import ENGINE_CALIBRATED, live_calibration, note_live_calibration
from llmscale.controller.manifests.children import deployment_manifest
from llmscale.controller.manifests.merge import merge_template
from llmscale.controller.manifests.names import (
    BATCH,
    INTERACTIVE,
    POOLS,
    Pool,
    deployment_name,
    owner_reference,
)
from llmscale.controller.manifests.podtemplate import pod_template
from llmscale.controller.memory import SCALE_ECHO_S, ObjectMemory, memory_after
from llmscale.controller.placeholders import placeholder_state, sync_placeholders
from llmscale.controller.report import PoolReports, observe_pools, record_metrics
from llmscale.controller.rollout import ROLLOUT_PROGRESSING, note_rollout, rollout_condition, rollout_fits
from llmscale.controller.routing import follow_routing, routing_due
from llmscale.controller.scaletarget import (
    FAILED_GET_SCALE,
    FAILED_UPDATE_SCALE,
    ScaleTargetError,
    TargetPods,
    read_target,
)
from llmscale.controller.signals.seasonal import spec_timezone
from llmscale.controller.slimbodies import status_of
from llmscale.controller.slobuckets import SLO_TARGETS_ON_BUCKETS, slo_buckets_condition
from llmscale.controller.spec import InvalidSpec, read_spec
from llmscale.controller.state.pods import pool_state
from llmscale.controller.status.build import build_status
from llmscale.controller.status.conditions import BATCH_BACKLOG, DEADLINE_AT_RISK
from llmscale.controller.status.mode import (
    ACTIVE,
    ADVISORY,
    memory_without_scaling,
    mode_condition,
    writes_workload,
)
from llmscale.controller.targeterror import report_target_error
from llmscale.controller.writer import ApplyRefused, apply_manifests
from llmscale.policy.batch.jobs import BatchJob
from llmscale.policy.batch.step import BatchStep, batch_step
from llmscale.policy.history import history_seconds, record_snapshot
from llmscale.policy.types import ConditionResult, Decision, PolicyMemory, PoolState
from llmscale.signals.profiles import get_profile
from llmscale.signals.queries import PoolTarget
from llmscale.signals.snapshot import SignalSnapshot

__all__ = ["CHILDREN_GRACE_S", "REGISTRATION_MIN_S", "Applied", "Gathered", "Observed", "PoolChange", "tick"]

_Logger = logging.Logger | logging.LoggerAdapter[Any]

#: A Deployment we applied shows up in the index within milliseconds (the watch event), and a new
#: object's children are applied by the create handler within a second; one still missing after
#: this many loop seconds of ticks was deleted by someone, or never applied (a restored object whose
#: Kopf annotations say "handled"), and is applied again.
CHILDREN_GRACE_S = 10.0

#: The shortest time a pool's registration with the fleet reader lasts without renewal, seconds. A
#: lapse drops the pool's snapshots, and the tick after it waits for a read that starts after it
#: asked: a tick held up by a slow API server lost its pool for two fast ticks' time (4 s at
#: ``tickSeconds: 1``), then waited past the signal timeout on a slow Prometheus (a fresh-clone
#: CI run: MetricsAvailable=False under real vLLM). Reading a pool a minute longer costs no query.
REGISTRATION_MIN_S = 60.0


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


@dataclass(frozen=True, slots=True)
class Observed:
    """The pools as a tick found them.

    Attributes:
        state: replicas and pod phases of both pools.
        batch_exists: whether the batch workload exists.
        signal_pods: the interactive pods to read signals of by name (a workload llmscale did not
            create: its pods carry none of llmscale's labels); ``None`` to select by labels.
        target_pods: the pods of each pool's ``scaleTargetRef`` workload, found by its selector
            (the pool figures come from them); ``None``: llmscale's own, from the pods index.
    """

    state: PoolState
    batch_exists: bool
    signal_pods: tuple[str, ...] | None = None
    target_pods: Mapping[Pool, tuple[IndexedPod, ...]] | None = None


def _direction(old: int, new: int) -> str:
    return "up" if new > old else "down" if new < old else "hold"


async def _read_signals(
    deps: Dependencies, spec: LLMDeploymentSpec, namespace: str, name: str, pods: Any, loop_now: float,
    signal_pods: tuple[str, ...] | None = None,
) -> SignalSnapshot:
    """Register the interactive pool with the fleet reader (its profile, its wake query and its
    pods: from the live pod index, or ``signal_pods`` selected by name, see :class:`Observed`) and
    return its newest snapshot; an incomplete one is counted."""
    target = PoolTarget(namespace, name, INTERACTIVE, pods=signal_pods)
    key = (namespace, name, INTERACTIVE)
    deps.fleet.register(
        target,
        get_profile(spec.engine.profile()),
        pods=(lambda: pod_names(pods, key)) if signal_pods is None else (lambda: signal_pods),
        wake_query=spec.scaling.wake.query if spec.scaling.wake is not None else None,
        # Two of the object's ticks, a minute at least: a deleted or no longer watched object stops
        # being read soon, a slow tick keeps its pool's snapshots.
        keep_s=max(2 * (spec.scaling.tick_seconds + deps.settings.tick_base_seconds), REGISTRATION_MIN_S),
        loop_now=loop_now,
        timezone=spec_timezone(spec),
    )
    snapshot = await deps.fleet.snapshot(target)
    if snapshot.error is not None and snapshot.carried is None:
        # The fleet reader and the Prometheus reader log their failures; count every incomplete read.
        # A carried snapshot's failure is counted by the reader, once per read (its ``on_carried``).
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


def _report_wake_refused(mem: ObjectMemory, body: kopf.Body, namespace: str, name: str,
                         snapshot: SignalSnapshot, logger: _Logger) -> None:
    """Post a Warning Event and log a warning when the wake query starts to be refused unsent
    (:func:`llmscale.signals.scope.scoped_query`), once per refusal."""
    why = snapshot.unknown.get("wake_demand")
    refused = why if why is not None and why.startswith("spec.scaling.wake.query refused") else None
    if refused is not None and refused != mem.wake_refused:
        message = f"Refused the wake query of LLMDeployment {namespace}/{name}, not sent: {refused}"
        logger.warning(message)
        post_wake_refused(body, message)
        mem.wake_refused = refused
    elif snapshot.wake_demand is not None:
        # Forgotten only once the query was sent and answered: a read that failed for another
        # reason (Prometheus down, the first tick's missing snapshot) must not post it again.
        mem.wake_refused = None


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


def _target_ref(spec: LLMDeploymentSpec, pool: Pool) -> Any:
    """The ``scaleTargetRef`` of ``pool`` (``None``: a Deployment llmscale creates)."""
    if pool == INTERACTIVE:
        return spec.scale_target_ref
    return spec.batch.scale_target_ref if spec.batch is not None else None


def _workload(spec: LLMDeploymentSpec, name: str, pool: Pool) -> str | None:
    """The name of the pool's Deployment that other autoscalers may target (the HPA and
    ScaledObject indexes know Deployments only): llmscale's, or an ``apps`` Deployment of
    ``scaleTargetRef``; ``None`` for a workload of another kind."""
    ref = _target_ref(spec, pool)
    if ref is None:
        return deployment_name(name, pool)
    return str(ref.name) if ref.kind == "Deployment" and ref.api_version.startswith("apps/") else None


async def _fit_rollout(
    deps: Dependencies, mem: ObjectMemory, g: Gathered, decision: Decision, changes: list[PoolChange], *,
    body: kopf.Body, namespace: str, name: str, logger: _Logger,
) -> None:
    """Make a rollout that can never finish fit (``maxSurge: 0, maxUnavailable: 1``) while the warm
    headroom covers demand, and give the surge back once it completed
    (:func:`~llmscale.controller.rollout.rollout_fits`): the interactive Deployment applied again
    with its replicas as they are."""
    replicas = next((c.new for c in changes if c.pool == INTERACTIVE and c.applied), g.state.interactive_replicas)
    want = rollout_fits(replicas, g.live[INTERACTIVE], g.progressing, decision.demand_replicas, mem.rollout_fit)
    if want == mem.rollout_fit:
        return
    manifest = deployment_manifest(name, namespace, g.spec, INTERACTIVE, replicas, owner_reference(body),
                                   deps.priority_classes, fit_rollout=want)
    try:
        await apply_manifests(deps.writer, [manifest], deps.metrics)
    except ApplyRefused as exc:
        logger.error(f"Failed to change the rollout strategy of LLMDeployment {namespace}/{name}: {exc}")
        return
    mem.rollout_fit = want
    if want:
        message = (f"Made the rollout of LLMDeployment {namespace}/{name} fit: no node has the GPUs free for a "
                   f"surge pod and the warm headroom covers demand {decision.demand_replicas}, so Ready pods are "
                   "replaced one at a time (maxSurge 0, maxUnavailable 1) until it completes")
        logger.warning(message)
        kopf.event(body, type="Normal", reason="RolloutFitted", message=message)
    else:
        logger.info(f"Restored the surge rollout of LLMDeployment {namespace}/{name} (maxSurge 1, maxUnavailable 0): "
                    "the rollout completed")


async def _apply(
    deps: Dependencies, body: kopf.Body, spec: LLMDeploymentSpec, namespace: str, name: str,
    changes: list[tuple[Pool, int, int]], logger: _Logger, fit_rollout: bool = False,
) -> tuple[list[PoolChange], ScaleTargetError | None]:
    """Apply each pool's Deployment (or write its workload's ``/scale``) on its own; a refusal is
    logged and recorded, never raised. Returns the changes and the last ``/scale`` refusal."""
    owner = owner_reference(body)
    done: list[PoolChange] = []
    refused: ScaleTargetError | None = None
    for pool, old, new in changes:
        ref = _target_ref(spec, pool)
        try:
            if ref is not None:
                if deps.scales is None:
                    raise ScaleTargetError(FAILED_UPDATE_SCALE, "this operator has no /scale client")
                await deps.scales.write(namespace, ref, new)
            else:
                manifest = deployment_manifest(name, namespace, spec, pool, new, owner, deps.priority_classes,
                                               fit_rollout=fit_rollout and pool == INTERACTIVE)
                await apply_manifests(deps.writer, [manifest], deps.metrics)
        except ApplyRefused as exc:
            logger.error(f"Failed to scale {pool} pool of LLMDeployment {namespace}/{name} to {new}: {exc}")
            done.append(PoolChange(pool, old, new, applied=False, error=str(exc)))
        except ScaleTargetError as exc:
            deps.metrics.apply_errors.labels("Scale").inc()
            logger.error(f"Failed to scale {pool} pool of LLMDeployment {namespace}/{name} to {new}: {exc.message}")
            done.append(PoolChange(pool, old, new, applied=False))
            refused = exc
        else:
            done.append(PoolChange(pool, old, new, applied=True))
    return done, refused


async def _observe_targets(deps: Dependencies, spec: LLMDeploymentSpec, namespace: str) -> Observed:
    """The pools of a spec with ``scaleTargetRef``: each workload's ``/scale`` and its pods.

    Raises:
        ScaleTargetError: a workload or its pods could not be read.
    """
    assert spec.scale_target_ref is not None
    if deps.scales is None:
        raise ScaleTargetError(FAILED_GET_SCALE, "this operator has no /scale client")
    reading, pods = await read_target(deps.scales, namespace, spec.scale_target_ref)
    batch_replicas, batch_pods = 0, TargetPods()
    batch_ref = spec.batch.scale_target_ref if spec.batch is not None else None
    if batch_ref is not None:
        batch_reading, batch_pods = await read_target(deps.scales, namespace, batch_ref)
        batch_replicas = batch_reading.replicas
    state = pool_state(reading.replicas, batch_replicas, pods.phases, batch_pods.phases,
                       cold_starts_of(pods.pods), cold_starts_of(batch_pods.pods))
    return Observed(state, batch_exists=batch_ref is not None, signal_pods=pods.names,
                    target_pods={INTERACTIVE: pods.pods, BATCH: batch_pods.pods})


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
    placeholder_deployments: Any = None,
    placeholder_pods: Any = None,
    jobs: Any = None,
    rollouts: Any = None,
) -> None:
    """Run one tick of the LLMDeployment ``body`` if its ``spec.scaling.tickSeconds`` is due.

    Never raises for a bad spec (reported as ``InvalidSpec``), a failed signal read (an unknown
    snapshot) or a refused apply (logged, counted, and left out of the memory and status): the
    next tick tries again.

    Args:
        deps: the injected dependencies.
        mem: the object's memory; updated in place.
        body / namespace / name / patch / logger: Kopf's handler arguments.
        deployments / pods / costs / hpas / scaled_objects / jobs / rollouts: the Kopf indexes
            (:mod:`llmscale.controller.indexes`).
        placeholder_deployments / placeholder_pods: the placeholder indexes
            (:mod:`llmscale.controller.placeholders`).
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
    g = await _gather(deps, mem, spec, body=body, namespace=namespace, name=name, patch=patch, logger=logger,
                      deployments=deployments, pods=pods, rollouts=rollouts, started_loop_s=started_loop_s)
    if g is None:
        return
    step, raw_jobs, jobs_elsewhere = _decide(deps, mem, g, body, namespace, name, logger, jobs)
    done = await _apply_decision(deps, mem, g, step, raw_jobs, body=body, namespace=namespace, name=name,
                                 logger=logger, costs=costs, hpas=hpas, scaled_objects=scaled_objects,
                                 placeholder_deployments=placeholder_deployments, placeholder_pods=placeholder_pods)
    _record(deps, mem, g, step, done, jobs_elsewhere, body=body, namespace=namespace, name=name, patch=patch,
            logger=logger, started_loop_s=started_loop_s)


@dataclass(frozen=True, slots=True)
class Gathered:
    """What a tick found, the policy's input.

    Attributes:
        spec: the object's spec, read.
        active: whether llmscale writes the workloads (``spec.mode: Active``).
        observed: the pools as found before the signal read.
        snapshot: the interactive pool's newest signal snapshot.
        state: the pools when the policy decides (after the read).
        reports: the pools' judged minutes and GPU ledger (``status.pools``).
        memory: the policy memory (this process's, else restored from status).
        now: wall-clock seconds since the epoch (``deps.clock()``), the policy's time.
        live: each pool's pods, judged (a starting pod past its startup budget is failed).
        rollout: the interactive pool's ``RolloutProgressing`` condition.
        calibrated: the ``EngineCalibrated`` condition (the live calibration).
        progressing: the interactive Deployment's own ``Progressing`` condition, or ``None``.
        status: the object's ``status`` as the API server has it
            (:func:`~llmscale.controller.slimbodies.status_of`), read once after the signal read.
    """

    spec: LLMDeploymentSpec
    active: bool
    observed: Observed
    snapshot: SignalSnapshot
    state: PoolState
    reports: PoolReports
    memory: PolicyMemory
    now: float
    live: Mapping[Pool, tuple[IndexedPod, ...]]
    rollout: ConditionResult
    calibrated: ConditionResult
    progressing: tuple[str, str, str] | None = None
    status: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Applied:
    """What a tick applied: the pools' changes, the last ``/scale`` refusal, the other autoscalers
    found on each pool's workload, and the placeholder pods (``None`` when not synced)."""

    changes: list[PoolChange]
    refused: ScaleTargetError | None
    others: dict[Pool, tuple[str, ...]]
    workloads: dict[Pool, str | None]
    placeholders: int | None
    placeholders_running: int | None


async def _gather(
    deps: Dependencies, mem: ObjectMemory, spec: LLMDeploymentSpec, *, body: kopf.Body, namespace: str, name: str,
    patch: kopf.Patch, logger: _Logger, deployments: Any, pods: Any, rollouts: Any, started_loop_s: float,
) -> Gathered | None:
    """The pools, the signals and the policy memory; ``None`` when the tick ends here (a scale
    target that could not be read, or children missing: applied again after the grace)."""
    loop = asyncio.get_running_loop()
    active = writes_workload(spec)
    key_i, key_b = (namespace, name, INTERACTIVE), (namespace, name, BATCH)
    echo_s = max(SCALE_ECHO_S, 2 * spec.scaling.tick_seconds)
    current_i = mem.replicas_seen(INTERACTIVE, deployment_replicas(deployments, key_i), loop.time(), echo_s)
    current_b = mem.replicas_seen(BATCH, deployment_replicas(deployments, key_b), loop.time(), echo_s)
    just_applied = (mem.children_applied_loop_s is not None
                    and loop.time() - mem.children_applied_loop_s < CHILDREN_GRACE_S)
    if (spec.scale_target_ref is None and active and current_i is None and just_applied
            and mem.applied_interactive is not None):
        # The create handler applied the children a moment ago and the watch has not brought the
        # Deployment into the index yet: decide on what was applied, so that the first status
        # lands on the first tick rather than one tick later.
        current_i = mem.applied_interactive
        if current_b is None and spec.batch is not None:
            current_b = mem.applied_batch
    if spec.scale_target_ref is not None:
        try:
            observed = await _observe_targets(deps, spec, namespace)
        except ScaleTargetError as exc:
            report_target_error(deps, mem, body, patch, logger, exc.reason, exc.message)
            return None
    elif current_i is None and active:
        # No interactive Deployment in the index. Right after create/resume that is the watch
        # catching up with our own apply (milliseconds); after CHILDREN_GRACE_S of ticks, someone
        # deleted it or nobody applied it: apply the children again. The tick decides once the
        # Deployment is back in the index.
        now_loop = loop.time()
        if mem.children_missing_since_loop_s is None:
            mem.children_missing_since_loop_s = now_loop
        applied = mem.children_applied_loop_s
        # Not while an apply is in flight: in a creation burst the create handlers' applies queue
        # behind each other for longer than a tick, and applying again would only lengthen the
        # queue (issue 14: 1,000 objects got their Services applied 1,800 times, their
        # Deployments 45 times, in the first three minutes).
        if (now_loop - mem.children_missing_since_loop_s >= CHILDREN_GRACE_S and not mem.children_applying
                and (applied is None or now_loop - applied >= CHILDREN_GRACE_S)):
            # Once per failure: while the apply keeps failing, ApplyFailed says it (once per answer).
            log = logger.debug if mem.apply_error is not None else logger.warning
            log(f"Found Deployment {namespace}/{name} missing: applying the children again")
            with contextlib.suppress(kopf.TemporaryError, kopf.PermanentError):  # reported, retried next tick
                await ensure_children(deps, mem, body=body, namespace=namespace, name=name, patch=patch,
                                      logger=logger, deployments=deployments)
        return None
    else:
        # (Advisory or Paused without a Deployment — never created: llmscale writes nothing in
        # those modes — reads as 0 replicas, and is reported as such.)
        observed = Observed(pool_state(current_i, current_b, pod_phases(pods, key_i), pod_phases(pods, key_b)),
                            batch_exists=current_b is not None)
    mem.children_missing_since_loop_s = None
    mem.last_target_error = None
    if active and spec.scale_target_ref is None and await routing_due(deps, mem):
        await follow_routing(deps, mem, body, spec, namespace=namespace, name=name, logger=logger)
    snapshot = await _read_signals(deps, spec, namespace, name, pods, started_loop_s, observed.signal_pods)
    status = status_of(body)
    # After the read, which may have waited: the pools as they are when the policy decides (the
    # indexes are live; a scale target's were read from its /scale just before), each pod not Ready
    # past the pool's startup budget judged failed (:mod:`llmscale.controller.failedpods`).
    wall_now = deps.clock()
    if observed.target_pods is not None:
        live = {pool: judge_pods(observed.target_pods.get(pool, ()), wall_now) for pool in POOLS}
        replicas_i, replicas_b = observed.state.interactive_replicas, observed.state.batch_replicas
    else:
        live = {INTERACTIVE: judge_pods(indexed_pods(pods, key_i), wall_now),
                BATCH: judge_pods(indexed_pods(pods, key_b), wall_now)}
        replicas_i, replicas_b = current_i or 0, current_b or 0
    # A Ready engine that fails every request fast is not idle capacity: failed, named, replaced.
    live[INTERACTIVE] = judge_failing(live[INTERACTIVE], snapshot)
    state = pool_state(replicas_i, replicas_b, [p.phase for p in live[INTERACTIVE]], [p.phase for p in live[BATCH]],
                       cold_starts_of(live[INTERACTIVE]), cold_starts_of(live[BATCH]))
    # The rates a day and a week ago (the seasonal forecast), from the fleet reader's last seasonal
    # read; None (the forecast uses the trend alone) when not read yet, failed or too old.
    state = dataclasses.replace(state, seasonal=deps.fleet.seasonal(PoolTarget(namespace, name, INTERACTIVE)))
    reports = observe_pools(
        mem, spec=spec, status=status,
        pods=live,
        snapshot=snapshot,
        minutes={pool: deps.fleet.minutes(PoolTarget(namespace, name, pool)) for pool in POOLS},
        now=wall_now, max_gap_s=2 * (spec.scaling.tick_seconds + deps.settings.tick_base_seconds),
    )
    _report_stalls(mem, body, namespace, name, snapshot, logger)
    _report_wake_refused(mem, body, namespace, name, snapshot, logger)
    note_failed_pods(mem, body, logger, live[INTERACTIVE])
    progressing = rollout_progress(rollouts, key_i) if spec.scale_target_ref is None else None
    rollout = rollout_condition(
        str(spec.scale_target_ref.name) if spec.scale_target_ref is not None else deployment_name(name, INTERACTIVE),
        replicas_i, live[INTERACTIVE], progressing, fitted=mem.rollout_fit)
    note_rollout(mem, body, logger, rollout)
    # The model's efficiencies fitted to the engines' own histograms, from the judged minutes (not
    # those of a rollout, whose pods run two engines).
    calibrated, live_fit = live_calibration(mem, spec, deps.fleet.minutes(PoolTarget(namespace, name, INTERACTIVE)),
                                            wall_now, rolling_out=rollout.reason != "RolloutComplete")
    note_live_calibration(mem, body, logger, calibrated)
    state = dataclasses.replace(state, live_fit=live_fit)
    keep_s = max(deps.settings.signal_history_seconds, history_seconds(spec))
    mem.history = record_snapshot(mem.history, snapshot, wall_now, keep_s)
    restoring = mem.policy_memory is None
    memory = mem.restored_policy_memory(status, wall_now,
                                        state.interactive_replicas if active else None)
    if restoring and memory.unreadable is not None:
        # Once per start: the policy reports it in PolicyStateReadable while it matters.
        dropped = (f"Dropped unreadable part of status.policyState of LLMDeployment {namespace}/{name}: "
                   f"{memory.unreadable}")
        logger.warning(dropped)
        post_policy_state_unreadable(body, dropped)
    return Gathered(spec, active, observed, snapshot, state, reports, memory, wall_now, live, rollout, calibrated,
                    progressing, status)


def _decide(deps: Dependencies, mem: ObjectMemory, g: Gathered, body: kopf.Body, namespace: str, name: str,
            logger: _Logger, jobs: Any) -> tuple[BatchStep, list[dict[str, Any]], list[BatchJob]]:
    """The policy, once a tick: the decision, then the batch step planned after it (its
    ``decision`` is the tick's); with the labelled Jobs as stored and those another manager
    (Kueue) keeps."""
    spec, state, wall_now = g.spec, g.state, g.now
    decision = deps.decide(spec, mem.history, state, g.memory, wall_now)
    # The batch pool's size comes from the backlog of labelled Jobs, planned after the decision.
    raw_jobs, labelled_jobs = read_jobs(jobs, namespace, name, spec)
    # A Job another manager suspends (Kueue) is left to it: never released, never counted.
    batch_jobs, jobs_elsewhere = split_jobs(labelled_jobs)
    if spec.batch is not None:
        note_job_managers(mem, body, logger, jobs_elsewhere)
    # The GPUs free around the pools, from the shared node read (None while unknown: nothing is
    # released onto idle GPUs and the pool is not bounded by them); the interactive pool counted
    # at this decision when it grows, since interactive demand always wins.
    gpus_free = (deps.gpus.free(spec, namespace, name, max(decision.interactive_replicas, state.interactive_replicas),
                                state.batch_replicas)
                 if deps.gpus is not None and spec.batch is not None else None)
    return batch_step(spec, batch_jobs, decision, state, g.snapshot, wall_now, gpus_free), raw_jobs, jobs_elsewhere


async def _apply_decision(
    deps: Dependencies, mem: ObjectMemory, g: Gathered, step: BatchStep, raw_jobs: list[dict[str, Any]], *,
    body: kopf.Body, namespace: str, name: str, logger: _Logger, costs: Any, hpas: Any, scaled_objects: Any,
    placeholder_deployments: Any, placeholder_pods: Any,
) -> Applied:
    """Write what the decision changes (``Active`` only): deletion costs, each pool's workload, the
    Jobs' suspension, the placeholder pods."""
    spec, state, snapshot, active, decision = g.spec, g.state, g.snapshot, g.active, step.decision
    key_i = (namespace, name, INTERACTIVE)
    # Another autoscaler on a pool's Deployment: leave that pool's replicas to it. (Advisory and
    # Paused write nothing anyway: the condition says who scales, without a Warning Event.)
    workloads = {pool: _workload(spec, name, pool) for pool in POOLS}
    others = {pool: other_autoscalers((hpas, scaled_objects), (namespace, workload)) if workload else ()
              for pool, workload in workloads.items()}
    if active:
        note_other_autoscalers(mem, body, logger, others, workloads)
    wanted = [c for c in _changes(spec, state, g.observed.batch_exists, decision) if not others[c[0]]]
    changes: list[PoolChange] = []
    refused: ScaleTargetError | None = None
    if active:
        # The pods' deletion costs first, so that a scale-down removes the least-loaded pods (only
        # of the pods llmscale creates: a scaleTargetRef workload's pods are not written).
        if not others[INTERACTIVE] and spec.scale_target_ref is None:
            await write_deletion_costs(deps, namespace, pod_costs(costs, key_i), snapshot,
                                       scaling_down=decision.interactive_replicas < state.interactive_replicas,
                                       logger=logger)
        if spec.scale_target_ref is None:
            # Pods past their cold start give node autoscalers their nodes back.
            await release_ready_pods(deps, namespace, [*g.live[INTERACTIVE], *g.live[BATCH]], spec, logger)
        changes, refused = await _apply(deps, body, spec, namespace, name, wanted, logger, mem.rollout_fit)
        if spec.scale_target_ref is None and not others[INTERACTIVE]:
            await _fit_rollout(deps, mem, g, decision, changes, body=body, namespace=namespace, name=name,
                               logger=logger)
        if step.plan is not None and spec.batch is not None:
            await apply_job_actions(deps, mem, namespace, name, step.plan, raw_jobs, logger)
    errors = [c.error for c in changes if c.error is not None]
    if errors or (changes and mem.apply_error is not None):
        note_apply(mem, body, logger, "; ".join(errors) or None)
    placeholders: int | None = None
    placeholders_running: int | None = None
    if active and spec.scale_target_ref is None:
        template = (merge_template(pod_template(name, spec, INTERACTIVE, deps.priority_classes.of(INTERACTIVE)),
                                   spec.template, spec.resources.gpu_resource_name)
                    if spec.headroom.warm_nodes else None)
        held = placeholder_state(placeholder_deployments, placeholder_pods, (namespace, name))
        placeholders = await sync_placeholders(
            deps, body, spec, namespace=namespace, name=name, replica_template=template,
            wanted=decision.headroom_replicas, state=held, logger=logger)
        placeholders_running = held.running if placeholders is not None else None
    return Applied(changes, refused, others, workloads, placeholders, placeholders_running)


def _record(
    deps: Dependencies, mem: ObjectMemory, g: Gathered, step: BatchStep, done: Applied, jobs_elsewhere: list[BatchJob], *,
    body: kopf.Body,
    namespace: str, name: str, patch: kopf.Patch, logger: _Logger, started_loop_s: float,
) -> None:
    """The policy memory that matches what was applied, Events and log lines, metrics, and status
    when it changed."""
    spec, state, snapshot, active, decision, wall_now = g.spec, g.state, g.snapshot, g.active, step.decision, g.now
    memory, reports, changes, refused = g.memory, g.reports, done.changes, done.refused
    placeholders, placeholders_running = done.placeholders, done.placeholders_running
    loop = asyncio.get_running_loop()
    applied_i, applied_b = state.interactive_replicas, state.batch_replicas
    for change in changes:
        if not change.applied:
            continue
        if spec.scale_target_ref is None and change.old != change.new:
            mem.note_scaled(change.pool, change.old, change.new, loop.time())
        if change.pool == INTERACTIVE:
            applied_i = change.new
        else:
            applied_b = change.new
    if active:
        mem.policy_memory = memory_after(memory, decision,
                                         interactive_applied=applied_i == decision.interactive_replicas)
    else:
        mem.policy_memory = memory_without_scaling(decision, wall_now)
    reasons = "; ".join(conclusion_first(decision.reasons)) or "no reason given"
    for change in changes:
        if change.applied and change.old != change.new:
            message = scaled_message(namespace, name, change.pool, change.old, change.new, reasons)
            logger.info(message)
            post_scaled(body, change.old, change.new, message)
            deps.metrics.scales.labels(namespace, name, change.pool, _direction(change.old, change.new),
                                       decision.clamped_by).inc()
    # What the status and the metrics call "desired": what llmscale set (Active), the advice
    # (Advisory), or the held count (Paused).
    desired_i = applied_i if spec.mode != ADVISORY else decision.interactive_replicas
    desired_b = applied_b if spec.mode != ADVISORY else decision.batch_replicas
    if spec.mode == ADVISORY:
        advice = (decision.interactive_replicas, decision.batch_replicas)
        if advice != mem.last_advice and advice != (state.interactive_replicas, state.batch_replicas):
            message = advised_message(namespace, name, state.interactive_replicas, decision.interactive_replicas,
                                      reasons)
            logger.info(message)
            post_advised(body, state.interactive_replicas, decision.interactive_replicas, message)
        mem.last_advice = advice

    deps.metrics.decisions.labels(_direction(state.interactive_replicas, desired_i), decision.clamped_by).inc()
    record_metrics(deps.metrics, namespace=namespace, name=name, spec=spec, state=state, decision=decision,
                   applied={INTERACTIVE: desired_i, BATCH: desired_b}, snapshot=snapshot, reports=reports,
                   now=wall_now)
    if placeholders is not None:
        deps.metrics.placeholders.labels(namespace, name).set(placeholders)

    scaling_active = mode_condition(spec, state.interactive_replicas, decision.interactive_replicas)
    if refused is not None:
        scaling_active = ConditionResult("False", refused.reason, refused.message)
    previous = dict(g.status or {})
    desired = build_status(
        decision=decision, snapshot=snapshot, state=state, applied_interactive=desired_i,
        applied_batch=desired_b, generation=body.get("metadata", {}).get("generation"),
        previous=previous, now=wall_now, memory=mem.policy_memory,
        batch=step.status,
        extra_conditions={BATCH_BACKLOG: step.batch_backlog, DEADLINE_AT_RISK: step.deadline_at_risk,
                          CHILDREN_APPLIED: applied_condition(children_error(mem)),
                          SOLE_AUTOSCALER: sole_autoscaler_condition(name, done.others, done.workloads),
                          PODS_HEALTHY: pods_healthy_condition(g.live[INTERACTIVE]),
                          ROLLOUT_PROGRESSING: g.rollout,
                          SLO_TARGETS_ON_BUCKETS: slo_buckets_condition(spec, get_profile(spec.engine.profile())),
                          ENGINE_CALIBRATED: g.calibrated,
                          **({SOLE_JOB_MANAGER: sole_job_manager_condition(jobs_elsewhere)} if spec.batch is not None
                             else {})},
        current_interactive=applied_i if spec.mode == ACTIVE else state.interactive_replicas,
        scaling_active=scaling_active, placeholders=placeholders, placeholders_running=placeholders_running,
        pools=reports.pools, usage_ledger=reports.ledger,
    )
    if mem.write_status(patch.status, previous, desired, refresh_seconds=deps.settings.status_refresh_seconds):
        deps.metrics.status_writes.inc()
    mem.last_invalid = None
    deps.metrics.tick_duration.observe(loop.time() - started_loop_s)
    deps.metrics.last_tick.set(wall_now)
    logger.debug(f"Ticked LLMDeployment {namespace}/{name} ({spec.mode}): {desired_i} interactive, "
                 f"{desired_b} batch; {reasons}")
