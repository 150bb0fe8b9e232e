"""Batch Jobs with two owners: a Job another manager suspends (Kueue, a ``spec.managedBy``
controller, or any field manager that takes ``spec.suspend`` back after llmscale released it,
:attr:`~llmscale.policy.batch.jobs.BatchJob.managed_by`) is left to that manager. Releasing it
again every tick would create and kill a pod each time, and sizing the batch pool for it would pay
for GPUs it never uses; so the planner never sees it, and the ``SoleJobManager`` condition and an
``OtherJobManager`` Warning Event (once per Job) name it. Pure except :func:`note_job_managers`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import Any

import kopf

from llmscale.controller.events import clip
from llmscale.controller.memory import ObjectMemory
from llmscale.policy.batch.jobs import BatchJob
from llmscale.policy.types import ConditionResult

__all__ = ["SOLE_JOB_MANAGER", "SOLE_JOB_MANAGER_REASONS", "note_job_managers", "sole_job_manager_condition",
           "split_jobs"]

#: The condition type.
SOLE_JOB_MANAGER = "SoleJobManager"
#: Its reasons (docs/troubleshooting.md has a row for each).
SOLE_JOB_MANAGER_REASONS = ("NoOtherJobManager", "OtherJobManager")


def split_jobs(jobs: Iterable[BatchJob]) -> tuple[list[BatchJob], list[BatchJob]]:
    """Return ``(llmscale's, another manager's)`` of the labelled Jobs."""
    jobs = list(jobs)
    return [j for j in jobs if j.managed_by is None], [j for j in jobs if j.managed_by is not None]


def sole_job_manager_condition(elsewhere: Sequence[BatchJob]) -> ConditionResult:
    """``True``/``NoOtherJobManager``, or ``False``/``OtherJobManager`` naming each Job and its manager."""
    if not elsewhere:
        return ConditionResult("True", "NoOtherJobManager", "No labelled Job is suspended by another manager")
    named = "; ".join(f"Job {j.name}: {j.managed_by}" for j in sorted(elsewhere, key=lambda j: j.name))
    return ConditionResult("False", "OtherJobManager", clip(
        f"{len(elsewhere)} labelled Jobs are managed by another controller ({named}): llmscale neither releases "
        "them nor sizes the batch pool for them"))


def note_job_managers(mem: ObjectMemory, body: kopf.Body, logger: logging.Logger | logging.LoggerAdapter[Any],
                      elsewhere: Sequence[BatchJob]) -> None:
    """Log and post an ``OtherJobManager`` Warning Event once per Job newly found managed by
    another controller; remembered in ``mem.jobs_elsewhere``."""
    meta = body.get("metadata", {})
    names = frozenset(j.name for j in elsewhere)
    for job in sorted(elsewhere, key=lambda j: j.name):
        if job.name in mem.jobs_elsewhere:
            continue
        message = (f"Left Job {meta.get('namespace')}/{job.name} of LLMDeployment {meta.get('namespace')}/"
                   f"{meta.get('name')} to {job.managed_by}: it is neither released nor counted in the batch pool")
        logger.warning(message)
        kopf.warn(body, reason="OtherJobManager", message=clip(message))
    mem.jobs_elsewhere = names
