"""A simulated day with batch Jobs (llmscale.sim.batchday): the day's make-up, the Jobs held until
the trough window by the operator's own batch step, a short deadline released before it, every
batch request finished once, and the interactive SLO as without batch. Small: 3 rps at the peak,
six Jobs; the full-size figures are benchmarks/batch_day.py's. The trace: Azure LLM inference trace
2023 (CC-BY 4.0; Patel et al., Splitwise, ISCA 2024)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from tests.benchscripts import load_benchmark
from tests.sim.batchday_spec import TROUGH_CURVE, WINDOW_OPENS_H, trough_spec

from llmscale.api import LLMDeploymentSpec
from llmscale.data import trace_path
from llmscale.sim.batchday import MODES, BatchDay, JobGate, batch_day, run_batch_day
from llmscale.sim.runner import Scenario
from llmscale.sim.trace import Trace, load_azure_csv

#: The module's fixture simulates three 32-hour days (about 100 s of CPU): on a shared machine that
#: can pass the suite's 300 s per-test limit, which counts a module fixture's setup in its first test.
pytestmark = pytest.mark.timeout(900)


def _spec() -> LLMDeploymentSpec:
    return trough_spec(8)


@pytest.fixture(scope="module")
def base() -> Trace:
    return load_azure_csv(trace_path("azure-llm-2023-conv"))


@pytest.fixture(scope="module")
def day(base: Trace) -> BatchDay:
    # Seed 3 gives one of the six Jobs a 4-hour deadline (the test below checks that it does).
    return batch_day(base, _spec(), peak_rps=3.0, jobs=6, seed=3, short_deadline_fraction=0.2)


@pytest.fixture(scope="module")
def runs(base: Trace, day: BatchDay) -> dict[str, tuple[dict[str, Any], list[dict[str, Any]], Any]]:
    sc = Scenario.build(_spec(), day.trace, base, warmup_s=600, capacity_curve=TROUGH_CURVE)
    return {mode: run_batch_day(sc, day, mode) for mode in MODES}


def test_the_day_is_thirty_percent_batch_in_jobs_that_partition_the_batch_requests(day: BatchDay) -> None:
    assert day.batch_token_fraction == pytest.approx(0.3, abs=0.02)
    requests = np.concatenate([j.requests for j in day.jobs])
    assert len(np.unique(requests)) == len(requests) == int(day.trace.is_batch.sum())
    assert day.trace.is_batch[requests].all()
    for job in day.jobs:
        assert (day.trace.arrival_s[job.requests] == job.created_s).all()
        assert 6.0 <= (job.created_s - day.trace.start_s) / 3600.0 <= 20.0
        assert job.output_tokens == int(day.trace.output_tokens[job.requests].sum())
    short = [j for j in day.jobs if j.deadline_source == "annotation"]
    assert short and all(j.deadline_s - j.created_s == pytest.approx(4 * 3600.0) for j in short)
    assert all(j.deadline_s - j.created_s == pytest.approx(86_400.0) for j in day.jobs if j not in short)


Runs = dict[str, tuple[dict[str, Any], list[dict[str, Any]], Any]]


def test_every_job_finishes_within_its_deadline_in_the_trough_mode(day: BatchDay, runs: Runs) -> None:
    summary, jobs, _ = runs["trough"]
    assert summary["jobs"] == len(day.jobs) and summary["jobs_met"] == len(day.jobs)
    for job in jobs:
        assert job["done"] == job["requests"] and job["met"]


def test_jobs_wait_for_the_window(day: BatchDay, runs: Runs) -> None:
    _, jobs, _ = runs["trough"]
    opens = day.trace.start_s + WINDOW_OPENS_H * 3600.0
    for job in jobs:
        if job["deadline_source"] == "completionWindow":
            assert job["finished_s"] >= opens, job  # held back until the trough


def test_a_short_deadline_goes_before_the_window(day: BatchDay, runs: Runs) -> None:
    _, jobs, _ = runs["trough"]
    opens = day.trace.start_s + WINDOW_OPENS_H * 3600.0
    for job in jobs:
        if job["deadline_source"] != "completionWindow":
            assert job["finished_s"] < opens, job  # its deadline cannot wait for the window


def test_the_batch_pool_is_empty_once_the_backlog_is(runs: Runs) -> None:
    # The batch pool is 0 outside the window unless a short-deadline Job is outstanding, and 0
    # again once the backlog is empty, inside the window too.
    _, _, backlog = runs["trough"]
    assert backlog[-1][1] == 0 and backlog[-1][2] == 0
    assert max(n for _, _, n in backlog) > 0


def test_every_batch_token_is_served(runs: Runs) -> None:
    trough, alongside, alone = (runs[m][0] for m in MODES)
    assert trough["batch_tokens_done"] == alongside["batch_tokens_done"] > 0
    assert alone["batch_tokens_done"] == 0


def test_the_interactive_slo_holds_with_batch_in_the_trough(runs: Runs) -> None:
    trough, alongside, alone = (runs[m][0] for m in MODES)
    assert trough["slo_attainment"] >= alone["slo_attainment"] - 0.005
    # Served alongside, the same batch comes at the interactive peak; in the trough it does not
    # raise the peak above what interactive traffic plus the alongside run needed.
    assert trough["peak_gpus"] <= alongside["peak_gpus"]


def _plan(release: tuple[str, ...] = (), pause: tuple[str, ...] = ()) -> Any:
    """What JobGate.apply reads of a BatchPlan: the names to release and to pause."""
    return SimpleNamespace(release=release, pause=pause)


def _paused_with_two_in_flight(day: BatchDay) -> tuple[JobGate, Any, int, int]:
    """A Job released, two of its requests taken (concurrency 2), then paused."""
    gate = JobGate(day.jobs[:1], to_interactive=False, concurrency=2)
    job = day.jobs[0]
    for r in job.requests:
        gate.arrived(int(r), job.created_s)
    assert gate.take(job.created_s) is None  # created suspended
    gate.apply(_plan(release=(job.name,)), job.created_s)
    first, second = gate.take(job.created_s), gate.take(job.created_s)
    assert first is not None and second is not None and gate.take(job.created_s) is None  # concurrency 2
    gate.apply(_plan(pause=(job.name,)), job.created_s + 1)
    return gate, job, first, second


def test_a_paused_job_sends_nothing_new(day: BatchDay) -> None:
    gate, job, first, _ = _paused_with_two_in_flight(day)
    assert gate.batch_jobs()[0].state.value == "Draining"
    gate.finished(first, job.created_s + 2)
    assert gate.take(job.created_s + 2) is None


def test_a_paused_jobs_requests_in_flight_finish(day: BatchDay) -> None:
    gate, job, first, second = _paused_with_two_in_flight(day)
    gate.finished(first, job.created_s + 2)
    gate.finished(second, job.created_s + 3)
    assert gate.batch_jobs()[0].state.value == ("Waiting" if len(job.requests) > 2 else "Done")


def test_bad_days_are_refused_naming_the_argument(base: Trace) -> None:
    with pytest.raises(ValueError, match="batch_token_fraction"):
        batch_day(base, _spec(), batch_token_fraction=1.0)
    with pytest.raises(ValueError, match="arrive_from_h"):
        batch_day(base, _spec(), arrive_from_h=20.0, arrive_to_h=6.0)


def test_the_benchmark_script_runs_on_a_small_day(tmp_path: Path) -> None:
    bench = load_benchmark("batch_day")
    readme = tmp_path / "README.md"
    readme.write_text("x\n<!-- BEGIN GENERATED: batch-day (benchmarks/batch_day.py) -->\n"
                      "<!-- END GENERATED: batch-day -->\ny\n", encoding="utf-8")
    out = tmp_path / "results"
    assert bench.main(["--peak-rps", "0.3", "--jobs", "3", "--hours", "30", "--concurrency", "64", "--cluster-gpus", "64",
                       "--out", str(out), "--readme", str(readme)]) == 0
    doc = json.loads((out / "batch-day.json").read_text())
    assert [r["mode"] for r in doc["results"]] == ["trough", *MODES]
    assert [r["cluster_gpus"] for r in doc["results"]] == [None, 64, None, None]
    assert 0.25 < doc["scenario"]["batch_token_fraction"] < 0.35
    assert len(doc["jobs"]["trough, --concurrency 64"]) == 3
    # 30 hours reach the next night's window (00:00–06:00 UTC) after Jobs created 06:00–20:00:
    # the trough row serves its Jobs there, not only a short deadline's before it.
    trough = doc["results"][0]
    assert trough["jobs_met"] == trough["jobs"] == 3, trough
    table = (out / "batch-day.md").read_text()
    assert "| trough, --concurrency 64 |" in table and "| trough, --concurrency 64, idle GPUs of a 64-GPU cluster |" in table
    assert "--peak-rps 0.3 --jobs 3 --concurrency 64 --hours 30 --cluster-gpus 64" in table
    assert bench.main(["--cluster-gpus", "0", "--out", str(out)]) == 2
    assert table.strip() in readme.read_text() and readme.read_text().endswith("-->\ny\n")
