"""The batch Jobs of one tick: read from the Jobs index and parsed, then the plan's releases and
pauses written to them (``spec.suspend``, by server-side apply, nothing else) with an Event and a
log line each.

The plan itself is pure (:func:`llmscale.policy.batch.step.batch_step`); this module is its I/O.
A refused write is logged and posted once per distinct answer (a ``JobSuspendFailed`` Warning Event
on the Job) and tried again on the next tick, whose plan still asks for it; a Job deleted meanwhile
(404) is simply gone.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any, cast

import kopf
import urllib3
from kubernetes.client.exceptions import ApiException

from llmscale.api import LLMDeploymentSpec
from llmscale.controller.deps import Dependencies
from llmscale.controller.events import clip
from llmscale.controller.indexes import deployment_jobs
from llmscale.controller.memory import ObjectMemory
from llmscale.policy.batch.jobs import BatchJob, parse_job
from llmscale.policy.batch.plan import BatchPlan, JobAction

__all__ = ["EVENT_PAUSED", "EVENT_RELEASED", "EVENT_SUSPEND_FAILED", "apply_job_actions", "read_jobs"]

_Logger = logging.Logger | logging.LoggerAdapter[Any]

#: Event reasons on a Job: released (``spec.suspend: false``), paused (``true``), and a refused write.
EVENT_RELEASED = "BatchJobReleased"
EVENT_PAUSED = "BatchJobPaused"
EVENT_SUSPEND_FAILED = "JobSuspendFailed"

#: ``completionWindowSeconds`` of a spec without ``spec.batch``: the parse needs one, the plan then
#: touches no Job (``NoBatchPool``), so it only shows in nothing but the parse.
_DEFAULT_WINDOW_S = 86_400.0


def read_jobs(index: Any, namespace: str, name: str, spec: LLMDeploymentSpec) -> tuple[list[dict[str, Any]], list[BatchJob]]:
    """Return the Jobs labelled ``llmscale.dev/deployment: <name>`` in ``namespace`` from the Jobs
    index, as stored and parsed with ``spec.batch.completionWindowSeconds`` (sorted by name)."""
    raw = deployment_jobs(index, (namespace, name))
    window = float(spec.batch.completion_window_seconds) if spec.batch is not None else _DEFAULT_WINDOW_S
    return raw, [parse_job(job, completion_window_s=window) for job in raw]


async def apply_job_actions(
    deps: Dependencies,
    mem: ObjectMemory,
    namespace: str,
    name: str,
    plan: BatchPlan,
    raw_jobs: Sequence[Mapping[str, Any]],
    logger: _Logger,
) -> list[str]:
    """Write each release and pause of ``plan`` to its Job; return the names of the Jobs written.

    Pauses go first: a paused Job's client stops sending before a released one starts. Each write
    posts a ``BatchJobReleased`` or ``BatchJobPaused`` Event on the Job with the plan's sentence and
    logs a line naming the Job and the LLMDeployment. Never raises.
    """
    bodies = {str(j["metadata"]["name"]): j for j in raw_jobs}
    done: list[str] = []
    order = sorted((p for p in plan.jobs if p.action is not JobAction.Keep),
                   key=lambda p: (p.action is not JobAction.Pause, p.job.name))
    for job_plan in order:
        job = job_plan.job.name
        suspend = job_plan.action is JobAction.Pause
        verb = "Paused" if suspend else "Released"
        try:
            await deps.writer.suspend_job(namespace, job, suspend)
        except ApiException as exc:
            if exc.status == 404:
                continue
            _failed(deps, mem, bodies.get(job), namespace, name, job, f"{exc.status} {exc.reason}", logger)
            continue
        except (OSError, urllib3.exceptions.HTTPError) as exc:
            _failed(deps, mem, bodies.get(job), namespace, name, job, f"no answer: {exc!r}", logger)
            continue
        mem.job_errors.pop(job, None)
        message = f"{verb} Job {namespace}/{job} for LLMDeployment {namespace}/{name}: {job_plan.message}"
        logger.info(message)
        body = bodies.get(job)
        if body is not None:
            kopf.info(kopf.Body(cast("kopf.RawBody", dict(body))), reason=EVENT_PAUSED if suspend else EVENT_RELEASED, message=clip(message))
        done.append(job)
    return done


def _failed(
    deps: Dependencies, mem: ObjectMemory, body: Mapping[str, Any] | None, namespace: str, name: str, job: str,
    error: str, logger: _Logger,
) -> None:
    deps.metrics.apply_errors.labels("Job").inc()
    if mem.job_errors.get(job) == error:
        return
    mem.job_errors[job] = error
    message = f"Failed to set spec.suspend of Job {namespace}/{job} for LLMDeployment {namespace}/{name}: {error}"
    logger.error(message)
    if body is not None:
        kopf.warn(kopf.Body(cast("kopf.RawBody", dict(body))), reason=EVENT_SUSPEND_FAILED, message=clip(message))
