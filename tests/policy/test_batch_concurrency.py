"""The batch planner against the requests the Jobs' clients keep in flight (issue 13's batch day).

The case that stood for the kind: the benchmark's day sized the batch pool from one replica's
tokens/s at its goodput batch (about 14,000 tokens/s for Llama-3.1-70B on 4 × H100), which 24 Jobs
keeping 64 requests in flight each cannot reach on 16 replicas; the pool cost seven times the
GPU-hours of serving batch alongside interactive traffic, and a Job that could not wait was released
at the last moment and finished late. These tests pin the kind: the pool never grows past what the
released Jobs' requests in flight keep busy, a Job is judged at the rate its own clients reach (with
the margin and the cold start), its projected finish is that rate's, and no backlog means no pool.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.policy.test_batch_plan import QUIET, SPEC, bjob, utc
from tests.strategies import BatchPlanInputs as Inputs
from tests.strategies import batch_plan_inputs, saturating_rate
from tests.strategies import most_batch_replicas as _most

from llmscale.api import LLMDeployment, LLMDeploymentSpec
from llmscale.batch.client import ClientSettings
from llmscale.model import ReplicaModel
from llmscale.model.batch import batch_throughput
from llmscale.policy.batch.jobs import DEFAULT_CLIENT_CONCURRENCY, BatchJob, JobState
from llmscale.policy.batch.plan import (
    DEADLINE_SAFETY,
    FILL_FRACTION,
    BatchPoolState,
    JobAction,
    ReplicaRate,
    RunMode,
    batch_replica_rate,
    plan_batch,
)
from llmscale.policy.window_intervals import open_intervals, open_seconds

EXAMPLES = settings(max_examples=200, deadline=None)
BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "chat-llama-70b-h100-batch.yaml"


def _rate(x: float | ReplicaRate) -> ReplicaRate:
    return x if isinstance(x, ReplicaRate) else ReplicaRate(x)


# --------------------------------------------------------------------------------------------
# Properties
# --------------------------------------------------------------------------------------------


@EXAMPLES
@given(batch_plan_inputs())
def test_the_pool_never_exceeds_what_the_running_jobs_keep_busy(args: Inputs) -> None:
    """From no pool (nothing draining to hold it), every Job sized and of known concurrency: the pool
    is at most ``floor(Q / fill)`` replicas for the ``Q`` requests in flight of the Jobs that run
    (at least 1, and ``spec.batch.minReplicas``)."""
    spec, jobs, interactive, _, tok_s, now = args
    jobs = [j for j in jobs if j.size_known and j.concurrency is not None and j.state is not JobState.Draining]
    rate = _rate(tok_s)
    plan = plan_batch(spec, jobs, interactive, BatchPoolState(0, 0, None), rate, now)
    running = [p.job for p in plan.jobs if p.mode is not None]
    if not running:
        assert plan.replicas == 0
        return
    in_flight = sum(j.concurrency or 0 for j in running)
    assert spec.batch is not None
    keep_busy = max(1, spec.batch.min_replicas, math.floor(in_flight / rate.fill + 1e-9))
    assert plan.replicas <= keep_busy, plan.reasons


@EXAMPLES
@given(batch_plan_inputs())
def test_zero_replicas_with_an_empty_backlog_whatever_the_rate(args: Inputs) -> None:
    spec, jobs, interactive, pool, tok_s, now = args
    done = [replace(j, state=JobState.Done) for j in jobs]
    plan = plan_batch(spec, done, interactive, replace(pool, replicas=0, ready=0), tok_s, now)
    assert (plan.replicas, plan.release, plan.pause) == (0, (), ())
    assert plan.batch_backlog.status == "False"


@EXAMPLES
@given(
    st.floats(1e6, 5e9),
    st.integers(1, 1024),
    st.floats(1_000, 50_000),
    st.integers(1, 256),
    st.floats(0, 20 * 3600),
)
def test_a_job_its_clients_cannot_finish_in_the_windows_runs_before_them(
    tokens: float, concurrency: int, peak: float, half_at: int, before_s: float
) -> None:
    """Outside a window, one Waiting Job: it is released now exactly when, at the rate its own
    clients reach on the most replicas they keep busy, its work with the margin does not fit the
    window time before its deadline less a cold start; and then its projected finish is that
    rate's."""
    rate = saturating_rate(peak, float(half_at))
    now = utc("2024-06-03T12:00")
    deadline = now + before_s + 3600.0
    job = replace(bjob("j", tokens=tokens, deadline=None, created="2024-06-03T11:00"),
                  deadline=deadline, concurrency=concurrency)
    pool = BatchPoolState(1, 1, None)
    plan = plan_batch(SPEC, [job], QUIET, pool, rate, now)
    [mine] = plan.jobs
    assert SPEC.batch is not None
    window_s = open_seconds(open_intervals(SPEC.batch.windows, now, now + 14 * 86_400), now, deadline)
    usable = max(0.0, window_s - SPEC.headroom.cold_start_seconds)
    replicas = rate.most_useful(concurrency, _most(SPEC))
    own = rate.job_tok_s(concurrency, concurrency, replicas)
    fits = tokens * (1 + DEADLINE_SAFETY) <= own * usable
    if math.isclose(tokens * (1 + DEADLINE_SAFETY), own * usable, rel_tol=1e-6):
        return  # on the edge either answer is right
    assert (mine.mode is RunMode.Deadline) == (not fits), plan.reasons
    if not fits:
        assert mine.action is JobAction.Release
        assert 1 <= plan.replicas <= replicas
        assert mine.projected_finish is not None
        at = rate.job_tok_s(concurrency, concurrency, plan.replicas)
        assert mine.projected_finish == pytest.approx(now + tokens / at, rel=1e-6)
        assert mine.at_risk is (mine.projected_finish > deadline)


@EXAMPLES
@given(batch_plan_inputs())
def test_the_projection_is_at_the_rate_the_clients_reach(args: Inputs) -> None:
    """A projected finish is never earlier than the Job's work at its own clients' best rate (all
    the replicas their requests keep busy) allows."""
    spec, jobs, _, _, tok_s, now = args
    rate = _rate(tok_s)
    plan = plan_batch(*args)
    in_flight = sum(j.concurrency or 0 for j in jobs if j.state is not JobState.Done)
    for p in plan.jobs:
        work, c = p.job.outstanding_tokens, p.job.concurrency
        if p.projected_finish is None or work is None or c is None or p.job.state is JobState.Done:
            continue
        if any(j.concurrency is None for j in jobs if j.state is not JobState.Done):
            continue
        best = rate.job_tok_s(c, c, _most(spec)) if in_flight else math.inf
        assert p.projected_finish >= now + work / best * (1 - 1e-9) - 1e-6, p


# --------------------------------------------------------------------------------------------
# The performance model's curve
# --------------------------------------------------------------------------------------------


def _bench_spec() -> LLMDeploymentSpec:
    return LLMDeployment.model_validate(yaml.safe_load(BENCH.read_text(encoding="utf-8"))).spec


def test_the_model_rate_rises_with_the_requests_in_flight_to_its_peak() -> None:
    """Llama-3.1-70B on 4 × H100, the Azure mix: 64 requests in flight on one replica do about 73 %
    of its goodput-batch peak, 4 (64 over 16 replicas) about an eighth; the fill is where half the
    peak is reached."""
    spec = _bench_spec()
    rate = batch_replica_rate(spec, [])
    model = ReplicaModel.from_spec(spec)
    peak = batch_throughput(model, prompt_tokens=1155, output_tokens=211, min_tok_s_per_user=10.0)
    assert rate.peak_tok_s == pytest.approx(peak.tokens_per_s)
    values = [rate.tok_s(q) for q in (1, 4, 16, 64, 256, peak.running, 10 * peak.running)]
    assert values == sorted(values)
    assert values[-1] == pytest.approx(rate.peak_tok_s) and values[-2] == pytest.approx(rate.peak_tok_s)
    assert 0.65 < rate.tok_s(64) / rate.peak_tok_s < 0.8
    assert rate.tok_s(4) / rate.peak_tok_s < 0.15
    assert rate.tok_s(rate.fill) >= FILL_FRACTION * rate.peak_tok_s > rate.tok_s(rate.fill - 1)


def test_in_flight_below_one_is_refused() -> None:
    model = ReplicaModel.from_spec(_bench_spec())
    with pytest.raises(ValueError, match="in_flight"):
        batch_throughput(model, prompt_tokens=1155, output_tokens=211, min_tok_s_per_user=10.0, in_flight=0.5)


def test_the_default_concurrency_is_the_clients() -> None:
    assert ClientSettings(url="http://x").concurrency == DEFAULT_CLIENT_CONCURRENCY


# --------------------------------------------------------------------------------------------
# The benchmark's case
# --------------------------------------------------------------------------------------------


def _job(name: str, requests: int, created: float, deadline: float, concurrency: int = 64,
         state: JobState = JobState.Waiting) -> BatchJob:
    return BatchJob(name=name, deployment="chat", state=state, created_at=created, deadline=deadline,
                    deadline_source="annotation", requests=requests, input_tokens=1155 * requests,
                    output_tokens=211 * requests, concurrency=concurrency)


def test_the_benchmark_day_backlog_gets_the_pool_its_clients_keep_busy() -> None:
    """The night of the benchmark day: 18 Jobs of 20,000 requests (27 M tokens each), 64 in flight
    each, due at the window's end. Sized from the peak the pool would be 16 replicas at 72 requests
    each; at the clients' rate it is the fewest that finish every Job in time, well under the 1,152
    requests' ÷ fill, and every Job is projected on time."""
    spec = _bench_spec()
    now = utc("2024-06-04T00:00")
    jobs = [_job(f"job-{i:02d}", 20_000, now - 10 * 3600, utc("2024-06-04T06:00"), state=JobState.Running)
            for i in range(18)]
    rate = batch_replica_rate(spec, jobs)
    plan = plan_batch(spec, jobs, QUIET, BatchPoolState(0, 0), rate, now)
    in_flight = 18 * 64
    assert 1 <= plan.replicas <= math.floor(in_flight / rate.fill)
    # The smallest pool that does it: one fewer replica would not finish a Job in time.
    work = jobs[0].outstanding_tokens
    assert work is not None
    assert work <= rate.job_tok_s(64, in_flight, plan.replicas) * 6 * 3600
    assert work > rate.job_tok_s(64, in_flight, plan.replicas - 1) * 6 * 3600
    assert all(p.mode is RunMode.Window and p.at_risk is False for p in plan.jobs), plan.reasons
    assert plan.deadline_at_risk.status == "False"


def test_a_four_hour_job_is_released_at_creation_with_the_margin() -> None:
    """The benchmark's job-05: 70,094 requests (95.8 M tokens) created 10:00 UTC, due 14:00, 64 in
    flight. On one replica its clients reach ~10,200 tokens/s: 2.6 h of work, 3.3 h with the margin,
    3.4 h with the cold start — it cannot wait for the 00:00 window, runs now, and is projected to
    finish before its deadline on the pool sized for it."""
    spec = _bench_spec()
    created = utc("2024-06-03T10:00")
    job = _job("job-05", 70_094, created, created + 4 * 3600)
    rate = batch_replica_rate(spec, [job])
    plan = plan_batch(spec, [job], QUIET, BatchPoolState(0, 0), rate, created)
    [mine] = plan.jobs
    assert mine.mode is RunMode.Deadline
    assert mine.action is JobAction.Keep  # waits for a Ready replica of the pool it asked for
    assert plan.replicas >= 1
    ready = plan_batch(spec, [job], QUIET, BatchPoolState(plan.replicas, plan.replicas), rate, created + 300)
    assert ready.release == ("job-05",)
    [mine] = ready.jobs
    assert mine.projected_finish is not None and mine.at_risk is False
    assert mine.projected_finish < job.deadline - DEADLINE_SAFETY * 0.5 * 3600  # type: ignore[operator]


def test_a_running_job_is_not_paused_at_the_margin_it_was_released_on() -> None:
    """Released for its deadline and running: an hour later, its work left would just fit the
    window with the release margin, but a running Job is held to twice the margin outside a window,
    so it keeps running instead of flapping."""
    spec = _bench_spec()
    assert spec.batch is not None
    now = utc("2024-06-03T18:00")
    deadline = utc("2024-06-04T06:00")  # the window 00:00–06:00 is 6 h before it
    rate = batch_replica_rate(spec, [])
    own = rate.job_tok_s(64, 64, rate.most_useful(64, spec.batch.most_replicas()))
    usable = 6 * 3600 - spec.headroom.cold_start_seconds
    tokens = own * usable / (1 + DEADLINE_SAFETY) * 0.99  # fits at the release margin
    requests = round(tokens / 1366)
    waiting = _job("j", requests, now - 3600, deadline)
    running = replace(waiting, state=JobState.Running)
    assert plan_batch(spec, [waiting], QUIET, BatchPoolState(1, 1), rate, now).jobs[0].mode is None
    assert plan_batch(spec, [running], QUIET, BatchPoolState(1, 1), rate, now).jobs[0].mode is RunMode.Deadline


def test_jobs_of_unknown_concurrency_keep_the_old_sizing() -> None:
    """A Job built without a concurrency (the planner cannot tell) is taken to fill any pool: the
    pool is its tokens ÷ the peak ÷ the time left, as before."""
    job = bjob("j", tokens=720e6, deadline="2024-06-04T05:00", state=JobState.Running)
    assert job.concurrency is None
    plan = plan_batch(SPEC, [job], QUIET, BatchPoolState(0, 0), 10_000.0, utc("2024-06-03T21:00"))
    assert plan.replicas == 3  # 720 M ÷ 10,000 tokens/s ÷ 28,800 s = 2.5
