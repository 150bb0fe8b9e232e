"""Batch work, pure: the Job contract (:mod:`.jobs`), the trough pool of ``decide`` (:mod:`.pool`),
the planner that sizes the batch pool from the Jobs (:mod:`.plan`) and the tick's batch step that
runs it after ``decide`` (:mod:`.step`). The algorithm: ``docs/batch.md``, "The batch planner".

Modules import one another explicitly (``step`` → ``plan`` → ``jobs``; ``pool`` imports none of
them), and none imports ``llmscale.policy`` itself: :mod:`llmscale.policy.core` imports :mod:`.pool`
while ``llmscale.policy`` is still loading, which loads this package and all four modules.
"""

from llmscale.policy.batch.jobs import BatchJob, JobState, parse_job
from llmscale.policy.batch.plan import BatchPlan, JobAction, plan_batch
from llmscale.policy.batch.pool import batch_pool
from llmscale.policy.batch.step import BatchStep, batch_step

__all__ = [
    "BatchJob",
    "BatchPlan",
    "BatchStep",
    "JobAction",
    "JobState",
    "batch_pool",
    "batch_step",
    "parse_job",
    "plan_batch",
]
