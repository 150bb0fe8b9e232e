"""Issue 21, Jobs with two owners: a Job another manager suspends is left out of the plan and named
in the ``SoleJobManager`` condition."""

from __future__ import annotations

from llmscale.controller.jobowners import sole_job_manager_condition, split_jobs
from llmscale.policy.batch.jobs import BatchJob, JobState


def batch_job(name: str, managed_by: str | None = None) -> BatchJob:
    return BatchJob(name=name, deployment="chat", state=JobState.Waiting, created_at=None, deadline=None,
                    deadline_source="none", managed_by=managed_by)


def _jobs_of_two_managers() -> list[BatchJob]:
    return [batch_job("a"), batch_job("b", "Kueue (label kueue.x-k8s.io/queue-name=team-a)")]


def test_jobs_of_another_manager_are_split_off() -> None:
    ours, elsewhere = split_jobs(_jobs_of_two_managers())
    assert [j.name for j in ours] == ["a"] and [j.name for j in elsewhere] == ["b"]


def test_jobs_of_another_manager_are_named_in_the_condition() -> None:
    _, elsewhere = split_jobs(_jobs_of_two_managers())
    cond = sole_job_manager_condition(elsewhere)
    assert (cond.status, cond.reason) == ("False", "OtherJobManager") and "Job b: Kueue" in cond.message
    assert sole_job_manager_condition([]).reason == "NoOtherJobManager"
