"""A day with batch Jobs: interactive traffic plus batch Jobs that arrive through the day with
deadlines, run through the operator's own batch planner, against serving the same Jobs alongside
interactive traffic as they arrive.

:func:`batch_day` builds the day: the interactive trace (:func:`~llmscale.sim.trace.synthesize`
on a diurnal envelope) and ``jobs`` batch Jobs created between ``arrive_from_h`` and
``arrive_to_h`` (UTC) whose requests are drawn from the same real trace, sized so that batch is
``batch_token_fraction`` of the day's prompt + output tokens. Most Jobs take the default deadline,
creation + ``spec.batch.completionWindowSeconds`` (24 h); ``short_deadline_fraction`` of them carry
an explicit deadline ``short_deadline_s`` after creation, which no trough window can meet. Every
request of a Job arrives at the Job's creation (the Job is created with its whole input).

Three ways to run it, on the same requests (:func:`run_batch_day`):

- ``trough``: the interactive pool by the simulator's llmscale
  (:class:`~llmscale.sim.baselines.LlmscalePolicy`: :func:`llmscale.policy.decide` with the live
  calibration folded from the judged minutes, as the operator's tick runs it), then the batch step
  (:func:`llmscale.policy.batch.step.batch_step`, what the operator runs) on the Jobs as the
  simulated cluster shows them; its releases and pauses are applied to the Jobs, its size to the
  batch pool; released Jobs' clients send to the batch pool;
- ``alongside``: every Job is released when it is created and its client sends to the interactive
  Service, whose pool the same :func:`~llmscale.policy.decide` sizes (no batch pool): batch served
  alongside interactive traffic, at the peak when that is when it arrives;
- ``interactive-only``: the interactive traffic alone, the reference for the interactive SLO.

Each Job's client is ``llmscale batch run`` at its default ``--concurrency`` (64 requests in
flight); a paused Job's client sends nothing new and its requests in flight finish (the client's
grace period).

The cluster's size: with ``cluster_gpus`` given, the planner is told the GPUs free each tick, as
the operator reads them from the nodes (:mod:`llmscale.controller.gpusfree`): the cluster's GPUs
less ``gpusPerReplica`` × the replicas of both pools (the interactive pool at this tick's decision
when it grows), never below 0. Jobs are then also released onto idle GPUs before the window
(``spec.batch.releaseOnIdleCapacity``) and the batch pool never grows past the GPUs free.
Simplifications: the interactive pool itself is not bounded by the cluster (the simulated fleet
has no scheduler: a decision above the cluster just leaves no GPU free), and replicas draining
after a scale-down are not counted. Without ``cluster_gpus`` the GPUs free are unknown (an operator
without the node read): windows and deadlines alone release Jobs.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray

from llmscale.api import LLMDeploymentSpec
from llmscale.policy.batch.jobs import BatchJob, JobState
from llmscale.policy.batch.plan import BatchPlan
from llmscale.policy.batch.step import batch_step
from llmscale.sim.baselines import LlmscalePolicy
from llmscale.sim.fleet import Observation, ScaleDecision, SimResult, simulate
from llmscale.sim.report import summarize
from llmscale.sim.runner import Scenario
from llmscale.sim.trace import DiurnalEnvelope, Trace, synthesize

__all__ = [
    "CLIENT_CONCURRENCY",
    "MODES",
    "BatchDay",
    "BatchDayPolicy",
    "JobGate",
    "SimJob",
    "batch_day",
    "job_outcomes",
    "run_batch_day",
]

#: Requests in flight per Job: ``llmscale batch run``'s default ``--concurrency``.
CLIENT_CONCURRENCY = 64

Mode = Literal["trough", "alongside", "interactive-only"]
#: The ways :func:`run_batch_day` runs a day, in report order.
MODES: tuple[Mode, ...] = ("trough", "alongside", "interactive-only")

_DAY_S = 86_400.0


@dataclass(frozen=True)
class SimJob:
    """One batch Job of the day.

    Attributes:
        name: the Job's name.
        created_s: creation, seconds since the epoch (its requests all arrive then).
        deadline_s: deadline, seconds since the epoch.
        deadline_source: ``completionWindow`` (creation + the spec's completion window) or
            ``annotation`` (an explicit ``llmscale.dev/deadline``).
        requests: trace indices of its requests, shape ``(n,)``.
        prompt_tokens / output_tokens: totals over its requests (its size annotations), tokens.
    """

    name: str
    created_s: float
    deadline_s: float
    deadline_source: Literal["annotation", "completionWindow"]
    requests: NDArray[np.int64]
    prompt_tokens: int
    output_tokens: int


@dataclass(frozen=True)
class BatchDay:
    """The day: every request (interactive and batch) and the Jobs.

    Attributes:
        trace: interactive and batch requests, sorted by arrival; ``is_batch`` marks the Jobs'.
        jobs: the Jobs, by creation.
        batch_token_fraction: batch prompt + output tokens over all tokens of the first 24 h.
        source: how the day was made.
    """

    trace: Trace
    jobs: tuple[SimJob, ...]
    batch_token_fraction: float
    source: str

    def interactive_only(self) -> Trace:
        """The same interactive requests without the batch ones."""
        keep = ~self.trace.is_batch
        t = self.trace
        return Trace(t.arrival_s[keep], t.prompt_tokens[keep], t.output_tokens[keep], t.is_batch[keep],
                     t.start_s, t.duration_s, t.source)


def batch_day(
    base: Trace,
    spec: LLMDeploymentSpec,
    *,
    duration_s: float = 32 * 3600.0,
    peak_rps: float = 50.0,
    seed: int = 0,
    batch_token_fraction: float = 0.3,
    jobs: int = 24,
    arrive_from_h: float = 6.0,
    arrive_to_h: float = 20.0,
    short_deadline_fraction: float = 0.125,
    short_deadline_s: float = 4 * 3600.0,
) -> BatchDay:
    """Build a day of interactive traffic and batch Jobs (module docstring).

    Args:
        base: the real trace whose arrivals shape the interactive day and whose requests the batch
            Jobs are drawn from.
        spec: the LLMDeployment (its ``spec.batch.completionWindowSeconds`` and
            ``spec.model.contextLimitTokens``: batch requests whose prompt does not fit are not drawn).
        duration_s: the simulated interval from 00:00 UTC of the first day, seconds (32 h: the day
            and the night after it, in which the day's backlog drains).
        peak_rps: interactive arrivals at the diurnal peak (15:00 UTC), requests/s.
        seed: seeds the interactive rescaling, the Jobs' requests, sizes, times and deadlines.
        batch_token_fraction: batch tokens / all tokens of the first 24 h (0–1, exclusive).
        jobs: Jobs in the day.
        arrive_from_h / arrive_to_h: hours (UTC) between which the Jobs are created.
        short_deadline_fraction: share of the Jobs with an explicit deadline ``short_deadline_s``
            after creation.

    Raises:
        ValueError: a fraction out of range, fewer than one Job, or an empty arrival span.
    """
    if not 0 < batch_token_fraction < 1 or not 0 <= short_deadline_fraction <= 1:
        raise ValueError("batch_token_fraction must be within (0, 1) and short_deadline_fraction within [0, 1]")
    if jobs < 1 or not 0 <= arrive_from_h < arrive_to_h <= 24:
        raise ValueError("need at least one Job and 0 <= arrive_from_h < arrive_to_h <= 24")
    window_s = float(spec.batch.completion_window_seconds) if spec.batch is not None else _DAY_S
    limit = spec.model.context_limit_tokens
    rng = np.random.default_rng(seed + 1_000_003)
    inter = synthesize(base, duration_s=duration_s, peak_rps=peak_rps, envelope=DiurnalEnvelope(), seed=seed)
    day_end = inter.start_s + _DAY_S
    in_day = inter.arrival_s < day_end
    inter_tokens = float((inter.prompt_tokens[in_day] + inter.output_tokens[in_day]).sum())
    want = inter_tokens * batch_token_fraction / (1.0 - batch_token_fraction)

    # Requests drawn from the real trace (prompts that fit the context limit, outputs cut to fit, as
    # the engine does) until the batch tokens are reached.
    fits = np.flatnonzero(base.prompt_tokens < limit - 1)
    mean = float((base.prompt_tokens[fits] + np.minimum(base.output_tokens[fits], limit - base.prompt_tokens[fits])).mean())
    n_batch = max(jobs, math.ceil(want / mean))
    pick = fits[rng.integers(0, len(fits), n_batch)]
    prompt = base.prompt_tokens[pick].astype(np.int64)
    output = np.maximum(1, np.minimum(base.output_tokens[pick], limit - prompt)).astype(np.int64)
    # Job sizes: log-normal shares (a few large Jobs, many small), at least one request each.
    shares = rng.lognormal(0.0, 1.0, jobs)
    counts = np.maximum(1, np.floor(shares / shares.sum() * n_batch).astype(np.int64))
    counts[-1] = max(1, n_batch - int(counts[:-1].sum()))
    created = np.sort(inter.start_s + 3600.0 * rng.uniform(arrive_from_h, arrive_to_h, jobs))
    short = rng.random(jobs) < short_deadline_fraction

    arrival = np.concatenate([inter.arrival_s, np.repeat(created, counts)])
    prompts = np.concatenate([inter.prompt_tokens, prompt[: int(counts.sum())]])
    outputs = np.concatenate([inter.output_tokens, output[: int(counts.sum())]])
    is_batch = np.concatenate([np.zeros(len(inter), np.bool_), np.ones(int(counts.sum()), np.bool_)])
    order = np.argsort(arrival, kind="stable")
    where = np.empty_like(order)
    where[order] = np.arange(len(order))  # original position -> sorted position
    trace = Trace(arrival[order], prompts[order].astype(np.int64), outputs[order].astype(np.int64), is_batch[order],
                  inter.start_s, inter.duration_s,
                  f"{inter.source}; {jobs} batch Jobs created {arrive_from_h:g}h–{arrive_to_h:g}h UTC")
    out: list[SimJob] = []
    first = len(inter)
    for j in range(jobs):
        idx = np.sort(where[first: first + int(counts[j])])
        first += int(counts[j])
        if short[j]:
            deadline, kind = float(created[j] + short_deadline_s), "annotation"
        else:
            deadline, kind = float(created[j] + window_s), "completionWindow"
        out.append(SimJob(f"job-{j:02d}", float(created[j]), deadline, kind,  # type: ignore[arg-type]
                          idx.astype(np.int64), int(trace.prompt_tokens[idx].sum()), int(trace.output_tokens[idx].sum())))
    batch_tokens = float(sum(j.prompt_tokens + j.output_tokens for j in out))
    return BatchDay(trace, tuple(out), batch_tokens / (batch_tokens + inter_tokens),
                    f"{trace.source}, {batch_tokens / 1e9:.2f} G batch tokens")


@dataclass
class _JobRun:
    job: SimJob
    pending: deque[int] = field(default_factory=deque)
    arrived: int = 0
    in_flight: int = 0
    done: int = 0
    released: bool = False
    last_finish_s: float = -math.inf


class JobGate:
    """The Jobs' batch clients in the simulated cluster: the fleet's
    :class:`~llmscale.sim.fleet.BatchSource`.

    A released Job's client keeps up to ``concurrency`` requests in flight; a paused one sends
    nothing new (its requests in flight finish). ``to_interactive``: every Job is released as it is
    created and sends to the interactive router (the ``alongside`` mode); otherwise Jobs are
    released and paused by :meth:`apply` (the planner's actions) and send to the batch pool,
    released Jobs in deadline order.

    Args:
        jobs: the day's Jobs.
        to_interactive: send through the interactive router, every Job released at creation.
        concurrency: requests in flight per Job's client.
    """

    def __init__(self, jobs: Sequence[SimJob], *, to_interactive: bool, concurrency: int = CLIENT_CONCURRENCY) -> None:
        self.to_interactive = to_interactive
        self.concurrency = concurrency
        self.runs = [_JobRun(j, released=to_interactive) for j in jobs]
        self._job_of: dict[int, _JobRun] = {int(r): run for run in self.runs for r in run.job.requests}
        self._edf = sorted(self.runs, key=lambda run: (run.job.deadline_s, run.job.created_s, run.job.name))
        self.actions: list[tuple[float, str, str]] = []

    def arrived(self, req: int, t: float) -> None:
        """A request of a Job arrived: it waits in that Job's client."""
        run = self._job_of[req]
        run.pending.append(req)
        run.arrived += 1

    def take(self, t: float) -> int | None:
        """The next request a released Job's client sends (deadline order), or ``None``."""
        for run in self._edf:
            if run.released and run.pending and run.in_flight < self.concurrency:
                run.in_flight += 1
                return run.pending.popleft()
        return None

    def finished(self, req: int, t: float) -> None:
        """A request got its result."""
        run = self._job_of[req]
        run.in_flight -= 1
        run.done += 1
        run.last_finish_s = t

    def batch_jobs(self) -> list[BatchJob]:
        """The Jobs created so far as the operator parses them: state from the release, the requests
        in flight and the results; progress from the client's count of results."""
        out: list[BatchJob] = []
        for run in self.runs:
            if run.arrived == 0:
                continue
            n = len(run.job.requests)
            if run.done >= n:
                state = JobState.Done
            elif run.released:
                state = JobState.Running
            elif run.in_flight > 0:
                state = JobState.Draining
            else:
                state = JobState.Waiting
            job = run.job
            out.append(BatchJob(
                name=job.name, deployment="day", state=state, created_at=job.created_s, deadline=job.deadline_s,
                deadline_source=job.deadline_source, active_pods=int(run.in_flight > 0), requests=n,
                input_tokens=job.prompt_tokens, output_tokens=job.output_tokens, concurrency=self.concurrency,
                requests_done=float(run.done),
                progress_source="client",
            ))
        return out

    def apply(self, plan: BatchPlan, t: float) -> None:
        """Apply the plan's releases and pauses (``spec.suspend``)."""
        by_name = {run.job.name: run for run in self.runs}
        for name in plan.pause:
            by_name[name].released = False
            self.actions.append((t, "pause", name))
        for name in plan.release:
            by_name[name].released = True
            self.actions.append((t, "release", name))


class BatchDayPolicy:
    """The operator's tick in the simulator: :meth:`LlmscalePolicy.tick
    <llmscale.sim.baselines.LlmscalePolicy.tick>` for the interactive pool, then (``gate`` given)
    the batch step on the gate's Jobs, whose actions go to the gate and whose size goes to the batch
    pool; without a gate the batch pool is 0.

    Args:
        spec: the LLMDeployment spec.
        gate: the Jobs (the ``trough`` mode), or ``None``.
        name: the policy name in reports.
        cluster_gpus: the cluster's GPUs (module docstring), or ``None``: the GPUs free unknown.

    Attributes:
        gpus: per tick with a gate, ``(t, GPUs free told the planner (None: unknown), interactive
            replicas decided, batch replicas before, batch replicas decided)``.
    """

    def __init__(self, spec: LLMDeploymentSpec, gate: JobGate | None, name: str,
                 cluster_gpus: int | None = None) -> None:
        if cluster_gpus is not None and cluster_gpus < 0:
            raise ValueError(f"cluster_gpus must be >= 0, not {cluster_gpus}")
        self.spec = spec
        self.gate = gate
        self.name = name
        self.cluster_gpus = cluster_gpus
        self.gpus: list[tuple[float, int | None, int, int, int]] = []
        self.tick_s = float(spec.scaling.tick_seconds)
        # The interactive pool's policy as the simulator's llmscale runs it: the history, the
        # live calibration folded from the judged minutes, the memory carried.
        self.core = LlmscalePolicy(spec)
        self.backlog: list[tuple[float, float, int]] = []  # (t, tokens outstanding, batch replicas)

    def decide(self, obs: Observation) -> ScaleDecision:
        """One tick: decide, then plan the Jobs (module docstring)."""
        d, state = self.core.tick(obs)
        if self.gate is None:
            return ScaleDecision(d.interactive_replicas, 0)
        free = None
        if self.cluster_gpus is not None:
            held = max(d.interactive_replicas, state.interactive_replicas) + state.batch_replicas
            free = max(0, self.cluster_gpus - self.spec.resources.gpus_per_replica * held)
        step = batch_step(self.spec, self.gate.batch_jobs(), d, state, obs.snapshot, obs.now, free)
        self.gpus.append((obs.now, free, d.interactive_replicas, state.batch_replicas,
                          step.decision.batch_replicas))
        if step.plan is not None:
            self.gate.apply(step.plan, obs.now)
        tokens = step.status.tokens_outstanding if step.status is not None else 0
        self.backlog.append((obs.now, float(tokens or 0), step.decision.batch_replicas))
        return ScaleDecision(d.interactive_replicas, step.decision.batch_replicas, reason="; ".join(step.decision.reasons))


def job_outcomes(gate: JobGate) -> list[dict[str, Any]]:
    """Per Job: name, created, deadline, finished (seconds since the epoch; ``None`` if not all its
    requests finished), requests done of requests, and whether the deadline was met."""
    out = []
    for run in gate.runs:
        n = len(run.job.requests)
        finished = run.last_finish_s if run.done >= n else None
        out.append({
            "name": run.job.name, "created_s": run.job.created_s, "deadline_s": run.job.deadline_s,
            "deadline_source": run.job.deadline_source, "finished_s": finished, "requests": n, "done": run.done,
            "met": finished is not None and finished <= run.job.deadline_s,
        })
    return out


def _peak_gpus(result: SimResult, a: float, b: float) -> int:
    events: list[tuple[float, int]] = []
    for rec in result.replicas:
        lo, hi = max(rec.created_s, a), min(rec.gone_s, b)
        if hi > lo:
            events += [(lo, 1), (hi, -1)]
    level = peak = 0
    for _, d in sorted(events, key=lambda e: (e[0], e[1])):
        level += d
        peak = max(peak, level)
    return peak * result.gpus_per_replica


def run_batch_day(
    sc: Scenario,
    day: BatchDay,
    mode: Mode,
    progress: Callable[[float], None] | None = None,
    *,
    concurrency: int = CLIENT_CONCURRENCY,
    cluster_gpus: int | None = None,
    policy_out: list[BatchDayPolicy] | None = None,
) -> tuple[dict[str, Any], list[dict[str, Any]], list[tuple[float, float, int]]]:
    """Run ``day`` one way (module docstring) on the scenario's model, engine and fleet, each Job's
    client keeping up to ``concurrency`` requests in flight (``llmscale batch run --concurrency``),
    on a cluster of ``cluster_gpus`` GPUs (``None``: the GPUs free unknown to the planner; only the
    ``trough`` mode reads it). ``policy_out``, when given, receives the run's
    :class:`BatchDayPolicy` (its per-tick :attr:`~BatchDayPolicy.gpus`).

    Returns:
        ``(summary, jobs, backlog)``: :func:`~llmscale.sim.report.summarize`'s figures plus
        ``peak_gpus`` (both pools at once), ``jobs_met`` / ``jobs`` / ``batch_tokens_done`` (batch
        requests' prompt + output tokens finished), ``mode`` and ``cluster_gpus``; :func:`job_outcomes`; and the
        planner's ``(t, tokens outstanding, batch replicas)`` per tick (``trough`` only).

    Raises:
        ValueError: an unknown mode, or ``cluster_gpus`` < 0.
    """
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; known: {', '.join(MODES)}")
    gate = (None if mode == "interactive-only"
            else JobGate(day.jobs, to_interactive=mode == "alongside", concurrency=concurrency))
    trace = day.interactive_only() if mode == "interactive-only" else day.trace
    policy = BatchDayPolicy(sc.spec, gate if mode == "trough" else None, f"llmscale, batch {mode}", cluster_gpus)
    if policy_out is not None:
        policy_out.append(policy)
    fleet = replace(sc.fleet_config(sc.oracle().desired_at(trace.start_s)), batch_source=gate,
                    batch_max_replicas=sc.spec.batch.most_replicas() if sc.spec.batch is not None else 0)
    t0 = time.perf_counter()
    result = simulate(trace, policy, sc.model, engine=sc.engine, fleet=fleet,
                      context_limit_tokens=sc.spec.model.context_limit_tokens, itl_slo_s=sc.spec.slo.itl_p95_seconds,
                      progress=progress)
    result.wall_s = time.perf_counter() - t0
    summary = summarize(result, sc.spec.slo, sc.spec.cost.gpu_hour_usd, sc.warmup_s)
    jobs = job_outcomes(gate) if gate is not None else []
    finished = np.asarray(result.requests.finish) >= 0
    batch = result.is_batch & finished
    summary.update({
        "mode": mode,
        "cluster_gpus": cluster_gpus,
        "client_concurrency": concurrency if gate is not None else None,
        "peak_gpus": _peak_gpus(result, result.start_s + sc.warmup_s, result.end_s),
        "jobs": len(jobs),
        "jobs_met": sum(1 for j in jobs if j["met"]),
        "batch_tokens_done": int((trace.prompt_tokens[batch] + trace.output_tokens[batch]).sum()),
    })
    return summary, jobs, policy.backlog
