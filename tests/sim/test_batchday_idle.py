"""The simulated batch day on a cluster of a given size (llmscale.sim.batchday, ``cluster_gpus``):
told the GPUs free, the planner releases Jobs onto idle GPUs before the trough window and never grows
the batch pool past the GPUs free; on a cluster the interactive pool fills, Jobs wait for the window.
Small: 1 request/s at the peak, three Jobs, 32 h. The trace: Azure LLM inference trace 2023
(CC-BY 4.0; Patel et al., Splitwise, ISCA 2024)."""

from __future__ import annotations

from typing import Any

import pytest
from tests.sim.batchday_spec import TROUGH_CURVE, WINDOW_OPENS_H, trough_spec

from llmscale.api import LLMDeploymentSpec
from llmscale.data import trace_path
from llmscale.sim.batchday import BatchDay, BatchDayPolicy, batch_day, run_batch_day
from llmscale.sim.runner import Scenario
from llmscale.sim.trace import load_azure_csv

pytestmark = pytest.mark.timeout(600)


def _spec() -> LLMDeploymentSpec:
    return trough_spec(4)


@pytest.fixture(scope="module")
def small() -> tuple[Scenario, BatchDay]:
    base = load_azure_csv(trace_path("azure-llm-2023-conv"))
    # No short deadline: only the window or idle GPUs can release a Job.
    day = batch_day(base, _spec(), duration_s=32 * 3600.0, peak_rps=1.0, jobs=3, seed=1, short_deadline_fraction=0.0)
    return Scenario.build(_spec(), day.trace, base, warmup_s=600, capacity_curve=TROUGH_CURVE), day


def _run(small: tuple[Scenario, BatchDay], gpus: int) -> tuple[dict[str, Any], list[dict[str, Any]], BatchDayPolicy]:
    sc, day = small
    out: list[BatchDayPolicy] = []
    summary, jobs, _ = run_batch_day(sc, day, "trough", cluster_gpus=gpus, policy_out=out)
    return summary, jobs, out[0]


@pytest.fixture(scope="module")
def idle_run(small: tuple[Scenario, BatchDay]) -> tuple[int, dict[str, Any], list[dict[str, Any]], BatchDayPolicy]:
    """The small day on a cluster with GPUs to spare: its size, and the run's summary, Jobs and policy."""
    sc, _ = small
    cluster = sc.spec.resources.gpus_per_replica * (sc.spec.replicas.max + 4)
    return (cluster, *_run(small, cluster))


def test_jobs_run_early_on_idle_gpus(
    small: tuple[Scenario, BatchDay], idle_run: tuple[int, dict[str, Any], list[dict[str, Any]], BatchDayPolicy]
) -> None:
    _, day = small
    cluster, summary, jobs, _ = idle_run
    opens = day.trace.start_s + WINDOW_OPENS_H * 3600.0
    assert summary["cluster_gpus"] == cluster and summary["jobs_met"] == summary["jobs"] == 3
    assert any(j["finished_s"] < opens for j in jobs), jobs  # idle GPUs, before the window


def test_the_batch_pool_stays_within_the_gpus_free(
    small: tuple[Scenario, BatchDay], idle_run: tuple[int, dict[str, Any], list[dict[str, Any]], BatchDayPolicy]
) -> None:
    sc, _ = small
    gpr = sc.spec.resources.gpus_per_replica
    cluster, _, _, policy = idle_run
    assert all(free is not None for _, free, *_ in policy.gpus)
    for t, free, interactive, before, after in policy.gpus:
        assert free is not None
        assert after <= before + free // gpr, (t, free, before, after)
        if after > before:  # it grew only into GPUs the cluster had left
            assert gpr * (interactive + after) <= cluster, (t, free, interactive, after)


def test_on_a_cluster_without_idle_gpus_jobs_wait_for_the_window(small: tuple[Scenario, BatchDay]) -> None:
    """A cluster with no GPU beyond the interactive pool (0: the simulated interactive pool is not
    bounded by the cluster, so it always leaves 0 free): nothing is released before the window (no
    Job has a deadline that cannot wait), and in the window the batch pool cannot grow either; the
    Jobs are then late, never squeezed in past the GPUs free."""
    _, day = small
    summary, jobs, policy = _run(small, 0)
    opens = day.trace.start_s + WINDOW_OPENS_H * 3600.0
    assert all(free == 0 for _, free, *_ in policy.gpus)
    assert all(after <= before for _, _, _, before, after in policy.gpus)
    assert all(j["finished_s"] is None or j["finished_s"] >= opens for j in jobs), jobs
    assert summary["batch_tokens_done"] == 0


def test_a_negative_cluster_is_refused(small: tuple[Scenario, BatchDay]) -> None:
    sc, day = small
    with pytest.raises(ValueError, match="cluster_gpus"):
        run_batch_day(sc, day, "trough", cluster_gpus=-1)
