"""The batch planner: which batch Jobs run now, how big the batch pool is, and why.

``plan_batch(spec, jobs, interactive, pool, replica_tok_s, now) -> BatchPlan``, pure (time passed
in). Every step and formula: ``docs/batch.md``, "The formulas". The non-obvious rule: a replica's
tokens/s rises with the requests on it (:class:`ReplicaRate`), so the pool is sized at the rate the
Jobs' clients reach, never the peak, and never larger than their requests in flight keep busy.
Tokens are prompt + output tokens; times are seconds since the Unix epoch.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum

from llmscale.api import BatchJobStatus, BatchStatus, LLMDeploymentSpec
from llmscale.model import ModelDoesNotFit, ReplicaModel
from llmscale.model.batch import batch_throughput
from llmscale.model.capacity import TRACE_MEAN_OUTPUT_TOKENS, TRACE_MEAN_PROMPT_TOKENS
from llmscale.policy.batch.jobs import BatchJob, JobState
from llmscale.policy.types import ConditionResult, Reason
from llmscale.policy.window_intervals import (
    WINDOW_HORIZON_S,
    open_intervals,
    open_seconds,
    time_to_open_seconds,
)
from llmscale.policy.windows import batch_window_open, describe_window

__all__ = [
    "DEADLINE_SAFETY",
    "FILL_FRACTION",
    "STATUS_JOBS",
    "BatchLimit",
    "BatchPlan",
    "BatchPoolState",
    "InteractiveState",
    "JobAction",
    "JobPlan",
    "ReplicaRate",
    "RunMode",
    "backlog_mix",
    "batch_replica_rate",
    "batch_replica_tok_s",
    "plan_batch",
]

#: Most Jobs listed in ``status.batch.jobs`` (earliest deadline first): enough for a night's
#: backlog, small enough that the status stays far below etcd's 1.5 MiB object limit.
STATUS_JOBS = 50

#: A replica is worth adding to the batch pool only while the requests in flight leave it at
#: least this share of its peak tokens/s (:attr:`ReplicaRate.fill`): the pool never grows past
#: ``floor(requests in flight / fill)`` replicas, what the released Jobs' clients can keep busy.
FILL_FRACTION = 0.5

#: Margin on a Job's projected run time when deciding whether it can wait and when sizing the pool:
#: it is planned to finish in ``1 / (1 + DEADLINE_SAFETY)`` of the time left, so the performance
#: model's error and the pool's start-up do not make it late.
DEADLINE_SAFETY = 0.25

# ceil() of a ratio that is an integer up to float rounding must not round up.
_EPS = 1e-9


class RunMode(StrEnum):
    """Why a Job should run now (``None`` on a :class:`JobPlan`: it should not)."""

    Deadline = "Deadline"
    """Its deadline (or that of a Job due after it) cannot wait for the windows."""
    Window = "Window"
    """A trough window is open."""
    IdleCapacity = "IdleCapacity"
    """Outside a window, on GPUs the interactive pool leaves idle."""


class JobAction(StrEnum):
    """What the operator does to a Job's ``spec.suspend`` (nothing else on a Job is ever changed)."""

    Release = "Release"
    """Set ``spec.suspend: false``."""
    Pause = "Pause"
    """Set ``spec.suspend: true``; its pods finish in-flight requests and exit."""
    Keep = "Keep"
    """Leave it as it is (running, waiting, draining or done)."""


class BatchLimit(StrEnum):
    """Which limit set the batch pool's size (:attr:`BatchPlan.limited_by`)."""

    WithinLimits = "WithinLimits"
    MinReplicas = "MinReplicas"
    MaxReplicas = "MaxReplicas"
    Draining = "Draining"
    IdleCapacity = "IdleCapacity"
    GPUsFree = "GPUsFree"
    InteractiveFirst = "InteractiveFirst"


@dataclass(frozen=True, slots=True)
class InteractiveState:
    """The interactive pool as the batch planner needs it (from :func:`llmscale.policy.decide`'s
    :class:`~llmscale.policy.Decision` and the pool state of the same tick).

    Attributes:
        desired_replicas: interactive replicas decided (``Decision.interactive_replicas``).
        ready_replicas: interactive pods Ready.
        starting_replicas: interactive pods scheduled, not Ready yet.
        unschedulable: interactive pods Pending because no node can take them.
        signals_valid: the decision had usable signals (``Decision.valid``).
        latency_within_slo: p95 TTFT and ITL within ``spec.slo`` (``None``: unknown, read as not safe).
    """

    desired_replicas: int
    ready_replicas: int
    starting_replicas: int = 0
    unschedulable: int = 0
    signals_valid: bool = True
    latency_within_slo: bool | None = None


@dataclass(frozen=True, slots=True)
class BatchPoolState:
    """The batch pool and the GPUs around it.

    Attributes:
        replicas: ``spec.replicas`` of the ``<name>-batch`` Deployment now (0 if none).
        ready: batch pods Ready.
        gpus_free: GPUs (``spec.resources.gpuResourceName``) allocatable on the nodes the pods may
            use and requested by no pod, so the batch pool could take them now; ``None``: unknown
            (then the pool is not bounded by GPUs, and nothing is released onto idle GPUs).
    """

    replicas: int
    ready: int = 0
    gpus_free: int | None = None


@dataclass(frozen=True, slots=True)
class ReplicaRate:
    """One batch replica's tokens/s (prompt + output) as a function of the requests in flight on it.

    A replica reaches its peak only with about its goodput batch of requests in flight; the Jobs'
    clients keep a fixed number in flight (:attr:`BatchJob.concurrency`), spread over the pool's
    replicas, so the pool's throughput is ``n × tok_s(Q / n)`` for ``Q`` requests in flight over
    ``n`` replicas, and one request advances at ``tok_s(q) / q`` tokens/s (``q`` per replica).

    Attributes:
        peak_tok_s: tokens/s with enough requests in flight (> 0).
        curve: tokens/s at ``q ≥ 1`` requests in flight per replica, non-decreasing in ``q``
            (:func:`batch_replica_rate`: the performance model); ``None``: the peak at any ``q``.
        fill: the fewest requests in flight per replica at which it does :data:`FILL_FRACTION` of
            its peak (1 for a flat rate).
    """

    peak_tok_s: float
    curve: Callable[[float], float] | None = None
    fill: float = 1.0

    def tok_s(self, in_flight: float) -> float:
        """Tokens/s of one replica with ``in_flight`` requests on it (``inf``: the peak)."""
        if self.curve is None or math.isinf(in_flight):
            return self.peak_tok_s
        return min(self.peak_tok_s, self.curve(max(in_flight, 1.0)))

    def pool_tok_s(self, in_flight: float, replicas: int) -> float:
        """Tokens/s of ``replicas`` replicas sharing ``in_flight`` requests (``inf``: clients that
        fill any pool); replicas beyond the requests in flight get none and add nothing."""
        if replicas <= 0 or in_flight <= 0:
            return 0.0
        busy = replicas if math.isinf(in_flight) else min(replicas, max(1, math.floor(in_flight)))
        return busy * self.tok_s(in_flight / busy)

    def job_tok_s(self, concurrency: int | None, in_flight: float, replicas: int) -> float:
        """Tokens/s of one Job keeping ``concurrency`` of the ``in_flight`` requests in flight on
        ``replicas`` replicas: its share ``concurrency / in_flight`` of the pool (``None``
        concurrency, or ``inf`` in flight: the whole pool)."""
        pool = self.pool_tok_s(in_flight, replicas)
        if concurrency is None or math.isinf(in_flight):
            return pool
        return pool * min(1.0, concurrency / in_flight)

    def most_useful(self, in_flight: float, bound: int) -> int:
        """The most replicas ``in_flight`` requests keep busy: ``floor(in_flight / fill)``, at
        least 1 and at most ``bound``."""
        if bound <= 0:
            return 0
        if math.isinf(in_flight):
            return bound
        return min(bound, max(1, math.floor(in_flight / self.fill + _EPS)))


def _in_flight(jobs: Sequence[BatchJob]) -> float:
    """Requests the Jobs' clients keep in flight together (``inf`` when one is not known)."""
    if any(j.concurrency is None for j in jobs):
        return math.inf
    return float(sum(j.concurrency or 0 for j in jobs))


@dataclass(frozen=True, slots=True)
class JobPlan:
    """The plan for one Job.

    Attributes:
        job: the Job as parsed.
        mode: why it should run now (``None``: it should not).
        action: what to do to its ``spec.suspend``.
        message: one sentence: why this action.
        projected_finish: when its work is expected done, seconds since the epoch (``None``: size
            unknown, or not within :data:`~llmscale.policy.window_intervals.WINDOW_HORIZON_S`).
        at_risk: projected after its deadline, or the deadline passed (``None``: cannot tell).
    """

    job: BatchJob
    mode: RunMode | None
    action: JobAction
    message: str
    projected_finish: float | None = None
    at_risk: bool | None = False

    @property
    def running_after(self) -> bool:
        """Whether the Job runs once the action is applied."""
        if self.action is JobAction.Release:
            return True
        return self.action is JobAction.Keep and self.job.state is JobState.Running


@dataclass(frozen=True, slots=True)
class BatchPlan:
    """What the batch planner recommends; the caller applies it.

    Attributes:
        replicas: desired replicas of the ``<name>-batch`` Deployment.
        jobs: one plan per Job given, outstanding ones first in EDF order, then the done ones.
        limited_by: the last limit that changed the pool's size.
        window_open: a trough window is open now.
        next_window_open / next_window_close: seconds since the epoch (``None``: open now /
            beyond the horizon).
        batch_backlog / deadline_at_risk: the ``BatchBacklog`` and ``DeadlineAtRisk`` conditions.
        reasons: one line per step.
    """

    replicas: int
    jobs: tuple[JobPlan, ...]
    limited_by: BatchLimit
    window_open: bool
    next_window_open: float | None
    next_window_close: float | None
    batch_backlog: ConditionResult
    deadline_at_risk: ConditionResult
    reasons: tuple[str, ...] = field(default_factory=tuple)

    @property
    def release(self) -> tuple[str, ...]:
        """Names of the Jobs to unsuspend."""
        return tuple(p.job.name for p in self.jobs if p.action is JobAction.Release)

    @property
    def pause(self) -> tuple[str, ...]:
        """Names of the Jobs to suspend."""
        return tuple(p.job.name for p in self.jobs if p.action is JobAction.Pause)

    def status(self) -> BatchStatus:
        """Return ``status.batch``: counts, tokens outstanding, the next window, and up to
        :data:`STATUS_JOBS` outstanding Jobs with their deadline and projected finish."""
        outstanding = [p for p in self.jobs if p.job.state is not JobState.Done]
        known = [p.job.outstanding_tokens for p in outstanding]
        listed = [
            BatchJobStatus(
                name=p.job.name,
                state=p.job.state.value,
                deadline=_rfc3339(p.job.deadline),
                projected_finish=_rfc3339(p.projected_finish),
                at_risk=p.at_risk,
                outstanding_tokens=None if (t := p.job.outstanding_tokens) is None else round(t),
            )
            for p in outstanding[:STATUS_JOBS]
        ]
        return BatchStatus(
            jobs_waiting=sum(p.job.state in (JobState.Waiting, JobState.Draining) for p in outstanding),
            jobs_running=sum(p.job.state is JobState.Running for p in outstanding),
            jobs_done=sum(p.job.state is JobState.Done and not p.job.failed for p in self.jobs),
            tokens_outstanding=round(sum(t for t in known if t is not None)),
            jobs_unknown_size=sum(t is None for t in known),
            next_window_open=_rfc3339(self.next_window_open),
            next_window_close=_rfc3339(self.next_window_close),
            jobs=listed,
        )


# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------


def _rfc3339(t: float | None) -> str | None:
    if t is None:
        return None
    return datetime.fromtimestamp(t, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _clock(t: float | None) -> str:
    return "never" if t is None else datetime.fromtimestamp(t, tz=UTC).strftime("%a %H:%M UTC")


def _tokens(n: float) -> str:
    if n >= 1e9:
        return f"{n / 1e9:.2f} G tokens"
    if n >= 1e6:
        return f"{n / 1e6:.2f} M tokens"
    if n >= 1e3:
        return f"{n / 1e3:.1f} k tokens"
    return f"{n:.0f} tokens"


def _ceil(x: float) -> int:
    return max(0, math.ceil(x - _EPS))


def _edf_key(job: BatchJob) -> tuple[float, float, str]:
    return (
        job.deadline if job.deadline is not None else math.inf,
        job.created_at if job.created_at is not None else math.inf,
        job.name,
    )


def _requests(n: float) -> str:
    return "unknown requests" if math.isinf(n) else f"{n:,.0f} requests"


def _names(jobs: Sequence[BatchJob], most: int = 3) -> str:
    shown = ", ".join(j.name for j in jobs[:most])
    return shown + (f" and {len(jobs) - most} more" if len(jobs) > most else "")


def backlog_mix(jobs: Sequence[BatchJob]) -> tuple[float, float] | None:
    """Return the mean ``(prompt, output)`` tokens per request of the outstanding Jobs that declare
    their size, weighted by their outstanding requests; ``None`` when none does."""
    requests = prompt = output = 0.0
    for job in jobs:
        left = job.outstanding_requests
        if job.state is JobState.Done or not job.size_known or not left:
            continue
        assert job.requests and job.input_tokens is not None and job.output_tokens is not None
        requests += left
        prompt += left * job.input_tokens / job.requests
        output += left * job.output_tokens / job.requests
    if requests <= 0:
        return None
    return prompt / requests, max(output / requests, 1.0)


def batch_replica_tok_s(spec: LLMDeploymentSpec, jobs: Sequence[BatchJob]) -> float:
    """Return one batch replica's tokens/s (prompt + output) on the backlog's mix.

    :func:`llmscale.model.batch.batch_throughput` for the replica ``spec`` describes, at the mix of
    :func:`backlog_mix` (the Azure LLM inference trace 2023's means, 1,155 prompt and 211 output
    tokens, when no Job declares its size; CC-BY 4.0, Patel et al., Splitwise, ISCA 2024) and the
    per-user floor ``1 / spec.slo.itlP95Seconds``.

    Raises:
        ModelDoesNotFit: the model, or one sequence of the mix, does not fit the replica.
    """
    model, mix, floor = _replica_and_mix(spec, jobs)
    return batch_throughput(model, prompt_tokens=mix[0], output_tokens=mix[1], min_tok_s_per_user=floor).tokens_per_s


def _replica_and_mix(spec: LLMDeploymentSpec, jobs: Sequence[BatchJob]) -> tuple[ReplicaModel, tuple[float, float], float]:
    """The replica model, the backlog's ``(prompt, output)`` mean tokens (the trace's means when no
    Job declares its size) and the per-user floor ``1 / spec.slo.itlP95Seconds`` (tokens/s) that
    :func:`batch_replica_tok_s` and :func:`batch_replica_rate` evaluate the model at.

    Raises:
        ModelDoesNotFit: the weights leave no room for a KV cache.
    """
    mix = backlog_mix(jobs) or (float(TRACE_MEAN_PROMPT_TOKENS), float(TRACE_MEAN_OUTPUT_TOKENS))
    model = ReplicaModel.from_spec(spec)
    if not model.fits:
        raise ModelDoesNotFit(f"{spec.model.name}: the weights leave no room for a KV cache")
    return model, mix, 1.0 / spec.slo.itl_p95_seconds


def batch_replica_rate(spec: LLMDeploymentSpec, jobs: Sequence[BatchJob]) -> ReplicaRate:
    """Return one batch replica's tokens/s on the backlog's mix as a function of the requests in
    flight on it: :func:`llmscale.model.batch.batch_throughput` with ``in_flight`` (the mix and the
    floor as in :func:`batch_replica_tok_s`, which is its peak).

    Raises:
        ModelDoesNotFit: the model, or one sequence of the mix, does not fit the replica.
    """
    model, mix, floor = _replica_and_mix(spec, jobs)
    peak = batch_throughput(model, prompt_tokens=mix[0], output_tokens=mix[1], min_tok_s_per_user=floor)

    def curve(in_flight: float) -> float:
        return batch_throughput(
            model, prompt_tokens=mix[0], output_tokens=mix[1], min_tok_s_per_user=floor, in_flight=in_flight
        ).tokens_per_s

    # The fewest in flight reaching FILL_FRACTION of the peak (the curve rises with in_flight).
    lo, hi = 1, max(1, math.ceil(peak.running))
    while lo < hi:
        mid = (lo + hi) // 2
        if curve(mid) >= FILL_FRACTION * peak.tokens_per_s:
            hi = mid
        else:
            lo = mid + 1
    return ReplicaRate(peak.tokens_per_s, curve, float(lo))


# --------------------------------------------------------------------------------------------
# the plan
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Idle:
    """Idle interactive GPUs, in batch replicas (step 4)."""

    replicas: int | None  # floor(gpus_free / gpr) − reserve; None when the GPUs free are unknown
    safe: bool  # the interactive SLO is safe enough to take new GPUs
    message: str

    def release(self, pool: int) -> bool:
        # The batch pool's own GPUs count as batch's: once it has grown onto idle GPUs, they are no
        # longer free, and the Job it grew for must still be released on the next tick.
        return self.safe and self.replicas is not None and pool + self.replicas >= 1

    def keep(self, pool: int, unschedulable: int) -> bool:
        return self.replicas is not None and pool + self.replicas >= 1 and unschedulable == 0


def _idle(spec: LLMDeploymentSpec, interactive: InteractiveState, pool: BatchPoolState) -> _Idle:
    assert spec.batch is not None
    if not spec.batch.release_on_idle_capacity:
        return _Idle(None, False, "release onto idle GPUs is off (spec.batch.releaseOnIdleCapacity)")
    if pool.gpus_free is None:
        return _Idle(None, False, "GPUs free unknown: nothing is released onto idle GPUs")
    gpr = spec.resources.gpus_per_replica
    reserve = min(max(spec.headroom.replicas, 1), max(0, spec.replicas.max - interactive.desired_replicas))
    idle = pool.gpus_free // gpr - reserve
    unsafe: list[str] = []
    if not interactive.signals_valid:
        unsafe.append("interactive signals unusable")
    if interactive.latency_within_slo is not True:
        unsafe.append(
            "interactive latency unknown"
            if interactive.latency_within_slo is None
            else "interactive SLO breached"
        )
    if interactive.unschedulable:
        unsafe.append(f"{interactive.unschedulable} interactive pods unschedulable")
    if interactive.starting_replicas or interactive.ready_replicas < interactive.desired_replicas:
        unsafe.append("interactive pool still scaling up")
    head = (
        f"{pool.gpus_free} GPUs free = {pool.gpus_free // gpr} replicas, less {reserve} kept for interactive "
        f"growth = {idle} idle"
    )
    if unsafe:
        return _Idle(idle, False, f"{head}; not safe to take more: {', '.join(unsafe)}")
    return _Idle(idle, True, f"{head}; interactive SLO safe")


@dataclass(frozen=True, slots=True)
class _Sized:
    raw: float  # replicas the running Jobs need (fractional), math.inf for "as many as useful"
    message: str
    top: int  # the most replicas worth running (the bound, or what the requests in flight keep busy)


def _time_left(job: BatchJob, mode: RunMode, now: float, intervals: Sequence[tuple[float, float]]) -> float:
    if mode is RunMode.Deadline:
        return (job.deadline - now) if job.deadline is not None else math.inf
    if job.deadline is not None:
        return open_seconds(intervals, now, job.deadline)
    # No deadline: finish within the current (or next) window.
    return (intervals[0][1] - max(intervals[0][0], now)) if intervals else 0.0


def _size(
    running: Sequence[tuple[BatchJob, RunMode]],
    rate: ReplicaRate,
    now: float,
    intervals: Sequence[tuple[float, float]],
    most: int,
    cold: float,
) -> _Sized:
    """Step 5: the fewest replicas, up to what the running Jobs' requests in flight keep busy
    (:meth:`ReplicaRate.most_useful`), at which every Job's EDF prefix fits the pool's rate and
    every Job its own clients' rate, in its time left (for a Job run for its deadline, less ``cold``
    and over ``1 + DEADLINE_SAFETY``)."""
    unknown = [job for job, _ in running if job.outstanding_tokens is None]
    if unknown:
        return _Sized(math.inf, f"{_names(unknown)} declare no size: the pool runs at its bound", most)
    in_flight = _in_flight([job for job, _ in running])
    top = rate.most_useful(in_flight, most)
    due: list[tuple[BatchJob, float, float]] = []  # (job, EDF prefix, usable seconds)
    prefix = 0.0
    for job, mode in running:
        prefix += job.outstanding_tokens or 0.0
        # A Job run for its deadline is sized with the margin its release was judged with; the
        # others have the windows' time before their deadlines, which that judgement kept free.
        urgent = mode is RunMode.Deadline
        left = _time_left(job, mode, now, intervals) - (cold if urgent else 0.0)
        if left <= 0:
            return _Sized(math.inf, f"no time left for {job.name}: the pool runs at {top} replicas, what "
                                    f"the {_requests(in_flight)} in flight keep busy", top)
        due.append((job, prefix, left / (1 + DEADLINE_SAFETY) if urgent else left))

    def need(n: int) -> float:
        """The largest share of its time left a Job (or an EDF prefix) needs at ``n`` replicas."""
        pool = rate.pool_tok_s(in_flight, n)
        worst = 0.0
        for job, p, t in due:
            own = rate.job_tok_s(job.concurrency, in_flight, n)
            if pool <= 0 or own <= 0:
                return math.inf
            worst = max(worst, p / (pool * t), (job.outstanding_tokens or 0.0) / (own * t))
        return worst

    where = f"{_requests(in_flight)} in flight"
    if need(top) > 1 + _EPS:
        return _Sized(math.inf, f"the Jobs due cannot all finish in time even on {top} replicas (the most "
                                f"the {where} keep busy)", top)
    lo, hi = 1, top
    while lo < hi:  # the pool's and each Job's rate rise with the replicas
        mid = (lo + hi) // 2
        if need(mid) <= 1 + _EPS:
            hi = mid
        else:
            lo = mid + 1
    # Fractional replicas for the hysteresis: exact when the rate is the same at any in flight.
    raw = max(lo * need(lo), lo - 1.0)
    return _Sized(raw, (
        f"{_tokens(prefix)} due; {lo} replicas at {rate.tok_s(in_flight / lo):,.0f} tokens/s each for the "
        f"{where} finish every Job in time (at most {top} kept busy)"
    ), top)


def _target(raw: float, current: int, tolerance: float, most: int) -> tuple[int, str]:
    """Step 5's hysteresis: grow to ``ceil(raw)`` at once, shrink only past the tolerance
    (``raw`` infinite: ``most``, the most replicas worth running)."""
    if math.isinf(raw):
        return most, f"needs the most worth running, {most}"
    want = _ceil(raw)
    if want >= current:
        return want, f"needs {want}"
    loose = _ceil(raw * (1 + tolerance))
    if loose < current:
        return loose, f"needs {want}; shrinks to {loose} (within {tolerance:.0%} tolerance)"
    return current, f"needs {want}, within {tolerance:.0%} of {current}: stays at {current}"


def plan_batch(
    spec: LLMDeploymentSpec,
    jobs: Sequence[BatchJob],
    interactive: InteractiveState,
    pool: BatchPoolState,
    replica_tok_s: float | ReplicaRate,
    now: float,
) -> BatchPlan:
    """Decide which batch Jobs run, the batch pool's size and the batch conditions (the steps
    and their formulas: ``docs/batch.md``, "The formulas").

    Pure and deterministic. Jobs of other deployments must be filtered out by the caller (by the
    :data:`~llmscale.policy.batch.jobs.LABEL_DEPLOYMENT` label, in the LLMDeployment's namespace).

    Args:
        spec: the LLMDeployment spec; without ``spec.batch`` nothing is released or paused and the
            pool is 0 (``NoBatchPool``).
        jobs: the labelled Jobs, parsed by :func:`~llmscale.policy.batch.jobs.parse_job`.
        interactive: the interactive pool this tick.
        pool: the batch pool and the GPUs free.
        replica_tok_s: one batch replica's tokens/s on the backlog's mix as a function of the
            requests in flight on it (:func:`batch_replica_rate`), or a number (> 0): the same
            tokens/s at any number in flight.
        now: seconds since the Unix epoch.

    Returns:
        The :class:`BatchPlan`; ``replicas`` is within ``[0, spec.batch`` bound ``]`` and 0 when no
        Job is outstanding and none is draining.

    Raises:
        ValueError: ``replica_tok_s`` is not a positive finite number.
        zoneinfo.ZoneInfoNotFoundError: a window names an unknown time zone.
    """
    rate = replica_tok_s if isinstance(replica_tok_s, ReplicaRate) else ReplicaRate(float(replica_tok_s))
    if not (math.isfinite(rate.peak_tok_s) and rate.peak_tok_s > 0):
        raise ValueError(f"replica_tok_s must be positive and finite, got {rate.peak_tok_s}")
    ordered = sorted((j for j in jobs if j.state is not JobState.Done), key=_edf_key)
    finished = sorted((j for j in jobs if j.state is JobState.Done), key=lambda j: j.name)
    if spec.batch is None:
        return _no_batch_pool(ordered, finished)
    batch = spec.batch
    most = batch.most_replicas()
    reasons: list[str] = []

    # 1. Backlog and windows.
    intervals = open_intervals(batch.windows, now, now + WINDOW_HORIZON_S)
    window = batch_window_open(batch.windows, now)
    window_open = window is not None
    next_open = None if window_open or not intervals else intervals[0][0]
    next_close = intervals[0][1] if intervals and intervals[0][1] < now + WINDOW_HORIZON_S else None
    known = [t for j in ordered if (t := j.outstanding_tokens) is not None]
    reasons.append(
        f"backlog: {len(ordered)} Jobs outstanding ({_tokens(sum(known))}"
        + (f", {len(ordered) - len(known)} of unknown size" if len(known) < len(ordered) else "")
        + f"), {len(finished)} done"
    )
    for job in ordered:
        for problem in job.problems:
            reasons.append(f"Job {job.name}: {problem}")
    if window is not None:
        reasons.append(f"trough window {describe_window(window)} is open until {_clock(next_close)}")
    else:
        reasons.append(f"no trough window open; the next opens {_clock(next_open)}")

    # 2. Deadlines that cannot wait: the EDF prefix against the pool's window time at the bound,
    # and each Job alone at the rate its own clients reach there, both with the safety margin and
    # the pool's cold start.
    in_flight_all = _in_flight(ordered)
    window_pool = rate.most_useful(in_flight_all, most)
    rate_max = rate.pool_tok_s(in_flight_all, window_pool)
    # Every replica added for a Job starts cold: its time left is counted from after a cold start
    # (whether or not the pool has replicas now, so the judgement does not flip once they start).
    cold = float(spec.headroom.cold_start_seconds)
    last_urgent = -1  # the EDF prefix up to here cannot wait
    urgent: set[int] = set()  # these cannot wait at their own clients' rate
    prefix = 0.0
    for i, job in enumerate(ordered):
        work = job.outstanding_tokens
        prefix += work or 0.0
        if job.deadline is None:
            continue
        if job.deadline <= now:
            last_urgent = i
            continue
        if work is None:
            if not window_open and (next_open is None or next_open >= job.deadline):
                last_urgent = i
            continue
        # A Job already running keeps running on a wider margin, so it does not flap at the edge.
        safety = 1 + DEADLINE_SAFETY * (2 if job.state is JobState.Running and not window_open else 1)
        usable = max(0.0, open_seconds(intervals, now, job.deadline) - cold)
        if prefix * safety > rate_max * usable * (1 + _EPS):
            last_urgent = i
        own = rate.job_tok_s(job.concurrency, in_flight_all, window_pool)
        if work * safety > own * usable * (1 + _EPS):
            urgent.add(i)
    if last_urgent >= 0 and most > 0:
        urgent.update(range(last_urgent + 1))
    if urgent and most > 0:
        late = [ordered[i] for i in sorted(urgent)]
        reasons.append(
            f"{_names(late)} cannot meet their deadlines by waiting for the windows (at "
            f"{rate_max:,.0f} tokens/s for the backlog's {_requests(in_flight_all)} in flight on at most "
            f"{window_pool} replicas, {DEADLINE_SAFETY:.0%} margin and {cold:.0f} s cold start): they run now"
        )

    # 3–4. Modes.
    idle = _idle(spec, interactive, pool)
    idle_running = (
        any(j.state is JobState.Running for i, j in enumerate(ordered) if i not in urgent) and not window_open
    )
    modes: list[RunMode | None] = []
    for i, job in enumerate(ordered):
        if most == 0:
            modes.append(None)
        elif i in urgent:
            modes.append(RunMode.Deadline)
        elif window_open:
            modes.append(RunMode.Window)
        elif (job.state is JobState.Running and idle.keep(pool.replicas, interactive.unschedulable)) or (
            job.state is not JobState.Running
            and (
                idle.release(pool.replicas)
                or (idle_running and idle.keep(pool.replicas, interactive.unschedulable))
            )
        ):
            modes.append(RunMode.IdleCapacity)
        else:
            modes.append(None)
    if not window_open and ordered:
        reasons.append(f"idle GPUs: {idle.message}")

    running = [(j, m) for j, m in zip(ordered, modes, strict=True) if m is not None]
    # Paused Jobs finish their in-flight requests on the pool (the client's grace period): the pool
    # keeps its replicas for the Jobs paused on this tick and those whose pods still terminate.
    draining = [
        j
        for j, m in zip(ordered, modes, strict=True)
        if j.state is JobState.Draining or (j.state is JobState.Running and m is None)
    ]

    # 5. Size.
    current = pool.replicas
    unbounded = False
    if most == 0:
        desired, line = 0, "batch pool bound is 0 (spec.batch.maxReplicas, or replicas): nothing runs"
    elif running:
        sized = _size(running, rate, now, intervals, most, cold)
        unbounded = math.isinf(sized.raw)
        desired, verdict = _target(sized.raw, current, spec.scaling.tolerance, sized.top)
        line = f"size: {sized.message}; {verdict}"
    else:
        desired, line = 0, "size: no Job runs now: 0 replicas"
    reasons.append(line)

    # 6. Limits, in order; the last that changed the count is reported. A backlog that asks for
    # "the bound" (unknown size, no time left) is limited by it.
    limited_by = (
        BatchLimit.MaxReplicas
        if running and most > 0 and desired == most and unbounded
        else (BatchLimit.WithinLimits)
    )
    steps: list[tuple[BatchLimit, int, str]] = []

    def limit(kind: BatchLimit, value: int, why: str) -> None:
        nonlocal desired, limited_by
        if value != desired:
            steps.append((kind, value, f"{why}: {desired} → {value}"))
            desired, limited_by = value, kind

    if running and most > 0:
        least = max(batch.min_replicas, 1)
        if desired < least:
            limit(
                BatchLimit.MinReplicas, least, f"at least {least} while a Job runs (spec.batch.minReplicas)"
            )
        if desired > most:
            limit(BatchLimit.MaxReplicas, most, f"at most {most} (spec.batch.maxReplicas, or replicas)")
    # Interactive first: while interactive pods wait for GPUs the pool does not hold replicas for
    # draining Jobs (holding them could leave more batch replicas than running them would); the
    # batch engines drain themselves on scale-down (their preStop hook waits until their running
    # requests reach 0), so the paused Jobs' in-flight requests still finish.
    yielded_to_drain = False
    if draining and desired < min(current, most):
        if interactive.unschedulable > 0:
            steps.append((
                BatchLimit.InteractiveFirst,
                desired,
                f"{_names(draining)} paused; {interactive.unschedulable} interactive pods unschedulable: "
                f"the pool does not wait for the drain, {desired} replicas",
            ))
            limited_by, yielded_to_drain = BatchLimit.InteractiveFirst, True
        else:
            limit(
                BatchLimit.Draining,
                min(current, most),
                f"{_names(draining)} paused, finishing in-flight requests: the pool keeps its replicas",
            )
    if running and all(m is RunMode.IdleCapacity for _, m in running) and idle.replicas is not None:
        bound = (
            max(0, current + idle.replicas) if idle.safe else max(0, min(current, current + idle.replicas))
        )
        if desired > bound:
            limit(BatchLimit.IdleCapacity, bound, f"idle GPUs allow {bound} batch replicas")
    if pool.gpus_free is not None:
        bound = current + pool.gpus_free // spec.resources.gpus_per_replica
        if desired > bound:
            limit(BatchLimit.GPUsFree, bound, f"{pool.gpus_free} GPUs free allow {bound} batch replicas")
    yielded = yielded_to_drain
    if interactive.unschedulable > 0:
        bound = max(0, current - interactive.unschedulable)
        if desired > bound:
            limit(
                BatchLimit.InteractiveFirst,
                bound,
                f"{interactive.unschedulable} interactive pods unschedulable: batch gives their GPUs back first",
            )
            yielded = True
    reasons.extend(message for _, _, message in steps)
    if desired == current:
        reasons.append(f"batch pool stays at {current} replicas")
    else:
        reasons.append(f"batch pool {current} → {desired} replicas")

    # 7. Actions.
    plans: list[JobPlan] = []
    projections = _project(ordered, modes, rate, desired, most, now, intervals, cold if pool.ready < 1 else 0.0)
    for job, mode, (finish, at_risk) in zip(ordered, modes, projections, strict=True):
        action, message = _action(job, mode, desired, limited_by, pool, interactive, window_open, next_open)
        plans.append(JobPlan(job, mode, action, message, finish, at_risk))
        reasons.append(f"Job {job.name}: {message}")
    plans.extend(JobPlan(job, None, JobAction.Keep, "done") for job in finished)
    # Batch gave GPUs back to interactive: the interactive-first limit bit, or the idle-GPU bound
    # (interactive took the reserve) left the pool with nothing.
    yielded = yielded or (bool(running) and desired == 0 and limited_by is BatchLimit.IdleCapacity)

    return BatchPlan(
        replicas=desired,
        jobs=tuple(plans),
        limited_by=limited_by,
        window_open=window_open,
        next_window_open=next_open,
        next_window_close=next_close,
        batch_backlog=_backlog_condition(plans, finished, desired, yielded, next_open),
        deadline_at_risk=_deadline_condition(plans, now),
        reasons=tuple(reasons),
    )


_NO_REPLICA = {
    BatchLimit.InteractiveFirst: "interactive pods need the GPUs",
    BatchLimit.IdleCapacity: "interactive needs its idle GPUs back",
    BatchLimit.GPUsFree: "no GPU is free",
    BatchLimit.MaxReplicas: "its bound is 0",
    BatchLimit.MinReplicas: "its bound is 0",
    BatchLimit.Draining: "paused Jobs still drain",
    BatchLimit.WithinLimits: "its bound is 0",
}


def _action(
    job: BatchJob,
    mode: RunMode | None,
    replicas: int,
    limited_by: BatchLimit,
    pool: BatchPoolState,
    interactive: InteractiveState,
    window_open: bool,
    next_open: float | None,
) -> tuple[JobAction, str]:
    why = {
        RunMode.Deadline: "its deadline cannot wait for the windows",
        RunMode.Window: "a trough window is open",
        RunMode.IdleCapacity: "the interactive pool leaves GPUs idle",
    }
    if mode is not None and replicas == 0:
        if job.state is JobState.Running:
            return JobAction.Pause, f"paused: the batch pool has no replica left ({_NO_REPLICA[limited_by]})"
        return JobAction.Keep, f"waits: the batch pool has no replica ({_NO_REPLICA[limited_by]})"
    if job.state is JobState.Running:
        if mode is not None:
            return JobAction.Keep, f"keeps running: {why[mode]}"
        if window_open:  # only when the bound is 0
            return JobAction.Pause, "paused: the batch pool's bound is 0"
        return JobAction.Pause, (
            "paused: no trough window is open, its deadline can wait and idle GPUs do not allow it; "
            "it resumes from its checkpoint later"
        )
    if job.state is JobState.Draining:
        return JobAction.Keep, "draining: waits until its pods have finished before it may run again"
    if mode is None:
        return JobAction.Keep, f"waits for the next trough window ({_clock(next_open)})"
    if interactive.unschedulable > 0:
        return JobAction.Keep, "waits: interactive pods are unschedulable"
    if pool.ready < 1:
        return JobAction.Keep, f"waits for a Ready batch replica ({why[mode]}; pool asked for {replicas})"
    return JobAction.Release, f"released: {why[mode]}"


def _project(
    ordered: Sequence[BatchJob],
    modes: Sequence[RunMode | None],
    rate: ReplicaRate,
    replicas: int,
    most: int,
    now: float,
    intervals: Sequence[tuple[float, float]],
    cold: float,
) -> list[tuple[float | None, bool | None]]:
    """Step 8: ``(projected finish, at risk)`` per Job. The Jobs that run now share the pool of
    ``replicas`` (the most their requests in flight keep busy while it has none), each at its own
    clients' share (:meth:`ReplicaRate.job_tok_s`) and no faster than their EDF prefix at the
    pool's rate: wall-clock time for Jobs that run outside a window, window time for the rest. The
    others run in the windows with the whole backlog, on the most replicas its requests keep busy.
    Each first waits ``cold`` seconds (the caller's: the cold start while no batch replica is Ready)."""
    now_jobs = [j for j, m in zip(ordered, modes, strict=True) if m is not None]
    in_now = _in_flight(now_jobs)
    n_now = replicas if replicas > 0 else rate.most_useful(in_now, most)
    in_all = _in_flight(ordered)
    n_all = rate.most_useful(in_all, most)
    lead = cold
    out: list[tuple[float | None, bool | None]] = []
    prefix_now = prefix_all = 0.0
    for job, mode in zip(ordered, modes, strict=True):
        work = job.outstanding_tokens
        passed = job.deadline is not None and job.deadline <= now
        if work is None:
            out.append((None, True if passed else None))
            continue
        prefix_all += work
        if mode is not None:
            prefix_now += work
            pool, own, prefix = (rate.pool_tok_s(in_now, n_now), rate.job_tok_s(job.concurrency, in_now, n_now),
                                 prefix_now)
        else:
            pool, own, prefix = (rate.pool_tok_s(in_all, n_all), rate.job_tok_s(job.concurrency, in_all, n_all),
                                 prefix_all)
        seconds = max(prefix / pool, work / own) + lead if pool > 0 and own > 0 else math.inf
        finish: float | None
        if math.isinf(seconds):
            finish = None
        elif mode in (RunMode.Deadline, RunMode.IdleCapacity):
            finish = now + seconds
        else:
            finish = time_to_open_seconds(intervals, now, seconds)
        if job.deadline is None:
            at_risk: bool | None = False
        elif passed:
            at_risk = True
        elif finish is None:
            at_risk = job.deadline < now + WINDOW_HORIZON_S
        else:
            at_risk = finish > job.deadline
        out.append((finish, at_risk))
    return out


def _backlog_condition(
    plans: Sequence[JobPlan],
    finished: Sequence[BatchJob],
    replicas: int,
    yielded: bool,
    next_open: float | None,
) -> ConditionResult:
    outstanding = [p for p in plans if p.job.state is not JobState.Done]
    if not outstanding:
        return ConditionResult(
            "False",
            Reason.BacklogEmpty,
            f"no batch Job outstanding ({len(finished)} done): batch pool 0 replicas",
        )
    tokens = sum(t for p in outstanding if (t := p.job.outstanding_tokens) is not None)
    running = sum(p.running_after for p in outstanding)
    waiting = len(outstanding) - running
    counts = f"{running} Jobs running, {waiting} waiting, {len(finished)} done; {_tokens(tokens)} outstanding"
    if yielded:
        return ConditionResult(
            "True",
            Reason.BatchYieldedToInteractive,
            f"{counts}; interactive pods need the GPUs: batch pool {replicas} replicas",
        )
    if running:
        return ConditionResult("True", Reason.BacklogRunning, f"{counts}; batch pool {replicas} replicas")
    should_run = any(p.mode is not None for p in outstanding)
    if not should_run:
        where = f"for the next trough window ({_clock(next_open)})"
    else:
        where = "for a Ready batch replica" if replicas > 0 else "for a GPU for the batch pool"
    return ConditionResult("True", Reason.BacklogWaiting, f"{counts}; waiting {where}")


def _deadline_condition(plans: Sequence[JobPlan], now: float) -> ConditionResult:
    outstanding = [p for p in plans if p.job.state is not JobState.Done]
    passed = [p.job for p in outstanding if p.job.deadline is not None and p.job.deadline <= now]
    if passed:
        return ConditionResult(
            "True",
            Reason.DeadlinePassed,
            f"{_names(passed)}: deadline passed ({_clock(passed[0].deadline)}) with work outstanding",
        )
    late = [p for p in outstanding if p.at_risk]
    if late:
        first = late[0]
        finish = (
            "beyond the 14-day horizon" if first.projected_finish is None else _clock(first.projected_finish)
        )
        return ConditionResult(
            "True",
            Reason.DeadlineProjectedLate,
            f"{_names([p.job for p in late])}: projected to finish {finish}, after the deadline "
            f"{_clock(first.job.deadline)}",
        )
    unknown = [p.job for p in outstanding if p.at_risk is None]
    if unknown:
        return ConditionResult(
            "Unknown",
            Reason.BatchSizeUnknown,
            f"{_names(unknown)} declare no size (llmscale.dev/batch-requests, -input-tokens, -output-tokens): "
            "their finish cannot be projected",
        )
    with_deadline = [p for p in outstanding if p.job.deadline is not None]
    if not with_deadline:
        return ConditionResult("False", Reason.DeadlinesOnTrack, "no outstanding Job has a deadline")
    first = with_deadline[0]
    return ConditionResult(
        "False",
        Reason.DeadlinesOnTrack,
        f"{len(with_deadline)} Jobs on track; the earliest deadline, {first.job.name} at "
        f"{_clock(first.job.deadline)}, is projected to finish {_clock(first.projected_finish)}",
    )


def _no_batch_pool(ordered: Sequence[BatchJob], finished: Sequence[BatchJob]) -> BatchPlan:
    message = "no batch pool (spec.batch is not set): labelled Jobs are left alone"
    plans = tuple(JobPlan(j, None, JobAction.Keep, message, None, None) for j in (*ordered, *finished))
    return BatchPlan(
        replicas=0,
        jobs=plans,
        limited_by=BatchLimit.WithinLimits,
        window_open=False,
        next_window_open=None,
        next_window_close=None,
        batch_backlog=ConditionResult("False", Reason.NoBatchPool, message),
        deadline_at_risk=ConditionResult("False", Reason.DeadlinesOnTrack, message),
        reasons=(message,),
    )
