"""Shared Hypothesis strategies: specs, trough windows, signal snapshots, pool states, memories.

Import as ``from tests.strategies import specs, snapshots`` (pytest puts the repository root on
``sys.path``). Every strategy draws only values the API accepts, plus the unknowns a real signal
reader produces (``None``, NaN, ±Inf, negative after a counter reset).
"""

from __future__ import annotations

import math

from hypothesis import strategies as st

from llmscale.api import (
    DAYS_OF_WEEK,
    BatchSpec,
    HeadroomSpec,
    LLMDeploymentSpec,
    ModelSpec,
    ReplicasSpec,
    ScaleDownBehavior,
    ScalingBehavior,
    ScalingSpec,
    ScalingTargets,
    TroughWindow,
    WakeSpec,
)
from llmscale.policy import CapacityCorrection, PolicyMemory, PoolState
from llmscale.signals.snapshot import RateWindow, SignalSnapshot, WorkloadMix

__all__ = [
    "DST_FREE_ZONES",
    "T0",
    "ZONES",
    "batch_specs",
    "behaviors",
    "decide_inputs",
    "hhmm",
    "instants",
    "maybe_value",
    "memories",
    "pool_states",
    "snapshots",
    "specs",
    "trough_windows",
    "workload_mixes",
]

#: 2024-03-01T00:00:00Z: a fixed epoch near both 2024 DST changes, so instants cover them.
T0 = 1_709_251_200.0

#: Time zones with DST changes, a half-hour offset and none, for trough windows.
ZONES = ("UTC", "Europe/London", "America/New_York", "Asia/Kolkata", "Australia/Sydney", "Asia/Tokyo")
#: Zones whose wall clock never jumps (oracles that convert local times to instants are exact here).
DST_FREE_ZONES = ("UTC", "Asia/Kolkata", "Asia/Tokyo")


def hhmm() -> st.SearchStrategy[str]:
    """``HH:MM`` strings, 00:00–23:59."""
    return st.builds(lambda h, m: f"{h:02d}:{m:02d}", st.integers(0, 23), st.integers(0, 59))


def instants(days: float = 400) -> st.SearchStrategy[float]:
    """Seconds since the epoch from :data:`T0` to ``days`` later (covers two DST springs and falls)."""
    return st.floats(T0, T0 + days * 86_400, allow_nan=False, allow_infinity=False)


@st.composite
def trough_windows(draw: st.DrawFn, zones: tuple[str, ...] = ZONES) -> TroughWindow:
    """A valid :class:`TroughWindow` (start ≠ end) in one of ``zones`` on a non-empty set of days."""
    start = draw(hhmm())
    end = draw(hhmm().filter(lambda e: e != start))
    days = draw(st.lists(st.sampled_from(DAYS_OF_WEEK), min_size=1, max_size=7, unique=True))
    return TroughWindow(start=start, end=end, timezone=draw(st.sampled_from(zones)), days=days)


def batch_specs(zones: tuple[str, ...] = ZONES) -> st.SearchStrategy[BatchSpec]:
    """A :class:`BatchSpec` with 1–3 windows and 0–8 replicas."""
    return st.builds(
        BatchSpec,
        windows=st.lists(trough_windows(zones), min_size=1, max_size=3),
        replicas=st.integers(0, 8),
    )


def behaviors(
    max_window_s: int = 600, cls: type[ScalingBehavior] = ScalingBehavior
) -> st.SearchStrategy[ScalingBehavior]:
    """A ``cls`` (scale-up or scale-down behaviour): window 0–``max_window_s`` s, 1–6 replicas per
    15–300 s."""
    return st.builds(
        cls,
        stabilization_window_seconds=st.integers(0, max_window_s),
        max_replicas_per_period=st.integers(1, 6),
        period_seconds=st.integers(15, 300),
    )


@st.composite
def specs(draw: st.DrawFn, with_batch: bool | None = None) -> LLMDeploymentSpec:
    """An :class:`LLMDeploymentSpec` with random bounds, targets, behaviour, headroom and batch.

    Args:
        with_batch: ``True``/``False`` force a batch pool on/off; ``None`` draws it.
    """
    lo = draw(st.integers(0, 6))
    hi = draw(st.integers(max(lo, 1), 24))
    targets = ScalingTargets(
        queue_depth_per_replica=draw(st.floats(0.5, 16)),
        kv_cache_utilization=draw(st.floats(0.3, 0.95)),
        preemptions_per_second_per_replica=draw(st.floats(0.01, 1.0)),
    )
    scaling = ScalingSpec(
        targets=targets,
        scale_up=draw(behaviors(120)),
        scale_down=draw(behaviors(cls=ScaleDownBehavior)),
        tolerance=draw(st.floats(0, 0.3)),
        tick_seconds=draw(st.sampled_from([5.0, 15.0, 30.0])),
        metrics_max_age_seconds=draw(st.floats(30, 180)),
        # min 0 needs a wake query; with min above 0 one may be set all the same.
        wake=WakeSpec(query="sum(gateway_pending)", threshold=draw(st.sampled_from([0.0, 1.0])))
        if lo == 0 or draw(st.booleans()) else None,
    )
    headroom = HeadroomSpec(
        replicas=draw(st.integers(0, 3)),
        cold_start_seconds=draw(st.sampled_from([0.0, 60.0, 180.0, 600.0])),
        growth_factor=draw(st.sampled_from([0.0, 1.0, 2.0])),
    )
    batch_on = draw(st.booleans()) if with_batch is None else with_batch
    return LLMDeploymentSpec(
        model=ModelSpec(name="chat", preset="llama-3.1-8b"),
        replicas=ReplicasSpec(min=lo, max=hi),
        scaling=scaling,
        headroom=headroom,
        batch=draw(batch_specs()) if batch_on else None,
    )


def maybe_value(max_value: float) -> st.SearchStrategy[float | None]:
    """A signal value in 0–``max_value``, or an unknown: ``None``, NaN, ±Inf or a negative number,
    or any float at all (issue 11: a preemption rate of 1e307 or a KV use of 1e308 must decide too)."""
    return st.one_of(
        st.floats(0, max_value),
        st.none(),
        st.sampled_from([math.nan, math.inf, -math.inf, -1.0, 1e307, 1e308, 5e-324]),
        st.floats(),
    )


@st.composite
def workload_mixes(draw: st.DrawFn, known: bool = False) -> WorkloadMix:
    """A :class:`WorkloadMix` of plausible values, or (``known=False``) any floats and unknowns."""

    def value(low: float, high: float) -> st.SearchStrategy[float | None]:
        return st.floats(low, high) if known else st.one_of(st.floats(low, high), maybe_value(high))

    return WorkloadMix(
        request_rate=draw(value(0, 200)),
        prompt_tokens_rate=draw(value(0, 1e6)),
        generation_tokens_rate=draw(value(0, 1e5)),
        prompt_tokens_mean=draw(value(1, 50_000)),
        prompt_tokens_p90=draw(value(1, 100_000)),
        prompt_tokens_p95=draw(value(1, 100_000)),
        generation_tokens_mean=draw(value(1, 4_000)),
        generation_tokens_p90=draw(value(1, 8_000)),
        generation_tokens_p95=draw(value(1, 8_000)),
        prefix_cache_hit_rate=draw(value(0, 1)),
    )


#: Rate windows a snapshot may carry: none (not from Prometheus), fitting, too short, below the
#: advised four intervals, and with the interval unknown.
WINDOWS: tuple[RateWindow | None, ...] = (
    None,
    RateWindow(60.0, "60s", 15.0, "targets", auto=True),
    RateWindow(240.0, "240s", 60.0, "targets", auto=True),
    RateWindow(60.0, "1m", 60.0, "set", too_short=True, problem="rate window 1m is shorter than two scrape intervals"),
    RateWindow(60.0, "1m", 20.0, "targets", problem="rate window 1m spans fewer than 4 scrape intervals"),
    RateWindow(60.0, "60s", None, "unknown", auto=True),
)


@st.composite
def snapshots(draw: st.DrawFn, now: float, max_age_s: float = 300.0, known: bool = False) -> SignalSnapshot:
    """A :class:`SignalSnapshot` observed 0–``max_age_s`` s before ``now``.

    Args:
        known: ``True`` draws every signal as a finite value; ``False`` lets any be unknown.
    """

    def value(max_value: float) -> st.SearchStrategy[float | None]:
        return st.floats(0, max_value) if known else maybe_value(max_value)

    return SignalSnapshot(
        observed_at=now - draw(st.floats(0, max_age_s)),
        queue_depth=draw(value(200)),
        running_requests=draw(value(2000)),
        kv_cache_utilization=draw(value(1.0)),
        preemption_rate=draw(value(5.0)),
        ttft_p95_s=draw(value(20.0)),
        itl_p95_s=draw(value(1.0)),
        replicas_reporting=draw(st.integers(0, 24)),
        workload=draw(st.one_of(st.just(WorkloadMix()), workload_mixes(known))),
        wake_demand=draw(value(10.0)),
        stalled_pods=draw(st.sampled_from([(), ("chat-hung",)])),
        window=draw(st.sampled_from(WINDOWS)),
    )


@st.composite
def pool_states(draw: st.DrawFn, lo: int = 0, hi: int = 24) -> PoolState:
    """A :class:`PoolState` with ``lo``–``hi`` interactive replicas split into ready/starting/pending."""
    replicas = draw(st.integers(lo, hi))
    ready = draw(st.integers(0, replicas))
    starting = draw(st.integers(0, replicas - ready))
    pending = replicas - ready - starting
    return PoolState(
        interactive_replicas=replicas,
        interactive_ready=ready,
        interactive_starting=starting,
        interactive_unschedulable=pending,
        batch_replicas=draw(st.integers(0, 8)),
        batch_ready=draw(st.integers(0, 8)),
        interactive_cold_starts_s=tuple(draw(st.lists(st.one_of(st.floats(0, 1200), st.floats()), max_size=25))),
    )


@st.composite
def memories(draw: st.DrawFn, now: float, span_s: float = 600.0) -> PolicyMemory:
    """A :class:`PolicyMemory` with recommendations and scale events in the ``span_s`` before ``now``."""
    times = st.floats(now - span_s, now - 1)
    recs = draw(st.lists(st.tuples(times, st.integers(0, 30)), max_size=12))
    events = draw(st.lists(st.tuples(times, st.integers(-4, 4).filter(bool)), max_size=6))
    since = draw(st.one_of(st.none(), st.floats(now - 2 * span_s, now)))
    correction = draw(
        st.one_of(st.none(), st.builds(CapacityCorrection, st.floats(0.5, 2.0), times, st.sampled_from(["", "ITL"])))
    )
    burst = draw(st.one_of(st.none(), st.tuples(st.floats(0, 50), st.floats(0, 50), st.integers(0, 100), times)))
    batch_yield = draw(st.one_of(st.none(), st.tuples(st.integers(0, 8), st.integers(0, 30))))
    replicas = draw(st.one_of(st.none(), st.integers(0, 30)))
    return PolicyMemory(
        recommendations=tuple(sorted(recs)),
        scale_events=tuple(sorted(events)),
        since=since,
        correction=correction,
        burstiness=burst,
        batch_yield=batch_yield,
        replicas=replicas,
    )


@st.composite
def decide_inputs(draw: st.DrawFn) -> tuple[LLMDeploymentSpec, list[SignalSnapshot], PoolState, PolicyMemory, float]:
    """The arguments of :func:`llmscale.policy.decide`: a spec, up to 6 snapshots (oldest first), a
    pool state, a memory and the instant."""
    spec = draw(specs())
    now = draw(instants())
    history = sorted(draw(st.lists(snapshots(now), max_size=6)), key=lambda s: s.observed_at)
    state = draw(pool_states())
    memory = draw(memories(now))
    return spec, history, state, memory, now


# --------------------------------------------------------------------------------------------
# The batch planner (llmscale.policy.batch.plan)
# --------------------------------------------------------------------------------------------

from llmscale.api import ResourcesSpec  # noqa: E402
from llmscale.policy.batch.jobs import BatchJob, JobState  # noqa: E402
from llmscale.policy.batch.plan import BatchPoolState, InteractiveState, ReplicaRate  # noqa: E402

__all__ += ["batch_jobs", "batch_plan_inputs", "batch_pool_states", "interactive_states", "planner_specs"]


@st.composite
def planner_specs(draw: st.DrawFn) -> LLMDeploymentSpec:
    """A spec with a batch pool: 1–3 windows, bounds 0–8 (``maxReplicas`` or the old ``replicas``),
    ``minReplicas`` within them, idle release on or off, 1–4 GPUs per replica."""
    most = draw(st.integers(0, 8))
    use_max = draw(st.booleans())
    batch = BatchSpec(
        windows=draw(st.lists(trough_windows(), min_size=1, max_size=3)),
        replicas=most if not use_max else draw(st.integers(0, 8)),
        max_replicas=most if use_max else None,
        min_replicas=draw(st.integers(0, most)),
        release_on_idle_capacity=draw(st.booleans()),
    )
    lo = draw(st.integers(0, 4))
    wake = WakeSpec(query="sum(gateway_pending)") if lo == 0 else None
    return LLMDeploymentSpec(
        model=ModelSpec(name="chat", preset="llama-3.1-8b"),
        replicas=ReplicasSpec(min=lo, max=draw(st.integers(max(lo, 1), 16))),
        headroom=HeadroomSpec(replicas=draw(st.integers(0, 3))),
        resources=ResourcesSpec(gpus_per_replica=draw(st.sampled_from([1, 2, 4]))),
        scaling=ScalingSpec(tolerance=draw(st.floats(0, 0.3)), wake=wake),
        batch=batch,
    )


@st.composite
def batch_jobs(draw: st.DrawFn, now: float, name: str) -> BatchJob:
    """A :class:`BatchJob` created up to 2 days before ``now``, due from a day before ``now`` to
    5 days after (or without a deadline), of known (up to 5 G tokens) or unknown size, whose
    clients keep 1–1,024 requests in flight (or an unknown number)."""
    state = draw(st.sampled_from(list(JobState)))
    sized = draw(st.booleans())
    requests = draw(st.integers(1, 100_000)) if sized else None
    return BatchJob(
        name=name,
        deployment="chat",
        state=state,
        created_at=now - draw(st.floats(0, 2 * 86_400)),
        deadline=draw(st.none() | st.floats(now - 86_400, now + 5 * 86_400)),
        deadline_source="annotation",
        active_pods=draw(st.integers(1, 3)) if state is JobState.Draining else draw(st.integers(0, 3)),
        requests=requests,
        input_tokens=draw(st.integers(0, 4_000_000_000)) if sized else None,
        output_tokens=draw(st.integers(1, 1_000_000_000)) if sized else None,
        concurrency=draw(st.none() | st.integers(1, 1024)),
        requests_done=draw(st.floats(0, requests)) if requests else 0.0,
    )


def saturating_rate(peak_tok_s: float, half_at: float) -> ReplicaRate:
    """A :class:`ReplicaRate` that rises as ``peak × q / (q + half_at)`` with ``q`` requests in
    flight per replica (half the peak at ``half_at``, its :attr:`~ReplicaRate.fill`): the shape of
    :func:`llmscale.model.batch.batch_throughput` against ``in_flight``."""
    return ReplicaRate(peak_tok_s, lambda q: peak_tok_s * q / (q + half_at), half_at)


@st.composite
def replica_rates(draw: st.DrawFn) -> float | ReplicaRate:
    """One batch replica's tokens/s (100–50,000), flat or rising with the requests in flight."""
    peak = draw(st.floats(100, 50_000))
    if draw(st.booleans()):
        return peak
    return saturating_rate(peak, float(draw(st.integers(1, 256))))


@st.composite
def interactive_states(draw: st.DrawFn) -> InteractiveState:
    """An :class:`InteractiveState`: 0–16 desired, any ready/starting/unschedulable, latency known or not."""
    desired = draw(st.integers(0, 16))
    return InteractiveState(
        desired_replicas=desired,
        ready_replicas=draw(st.integers(0, desired + 1)),
        starting_replicas=draw(st.integers(0, 2)),
        unschedulable=draw(st.sampled_from([0, 0, 0, 1, 2, 5])),
        signals_valid=draw(st.booleans()),
        latency_within_slo=draw(st.sampled_from([True, True, False, None])),
    )


@st.composite
def batch_pool_states(draw: st.DrawFn) -> BatchPoolState:
    """A :class:`BatchPoolState`: 0–10 replicas, some Ready, GPUs free 0–16 or unknown."""
    replicas = draw(st.integers(0, 10))
    return BatchPoolState(
        replicas=replicas,
        ready=draw(st.integers(0, replicas)),
        gpus_free=draw(st.none() | st.integers(0, 16)),
    )


#: The arguments :func:`batch_plan_inputs` draws, as the batch planner's property tests unpack them.
BatchPlanInputs = tuple[LLMDeploymentSpec, list[BatchJob], InteractiveState, BatchPoolState, float | ReplicaRate, float]


def most_batch_replicas(spec: LLMDeploymentSpec) -> int:
    """``spec.batch``'s upper bound on batch replicas (the spec must have a batch pool)."""
    assert spec.batch is not None
    return spec.batch.most_replicas()


@st.composite
def batch_plan_inputs(
    draw: st.DrawFn,
) -> tuple[LLMDeploymentSpec, list[BatchJob], InteractiveState, BatchPoolState, float, float]:
    """The arguments of :func:`llmscale.policy.batch.plan.plan_batch`: spec, 0–6 Jobs, interactive
    state, batch pool, one replica's tokens/s (100–50,000; :func:`replica_rates`) and the instant."""
    now = draw(instants())
    jobs = [draw(batch_jobs(now, f"job-{i}")) for i in range(draw(st.integers(0, 6)))]
    return (
        draw(planner_specs()),
        jobs,
        draw(interactive_states()),
        draw(batch_pool_states()),
        draw(replica_rates()),
        now,
    )


#: A user's PromQL as a tree whose selectors each name a namespace (or none): ``(text, namespaces)``.
PromQLTree = tuple[str, tuple[str | None, ...]]


def _promql_selectors(namespaces: tuple[str, ...]) -> st.SearchStrategy[PromQLTree]:
    """One selector: a metric with ``namespace="<ns>"``, ``namespace=~"<ns>"``, or none."""
    def build(metric: str, ns: str | None, regex: bool) -> PromQLTree:
        if ns is None:
            return f'{metric}{{job="gw"}}', (None,)
        op = "=~" if regex else "="
        return f'{metric}{{namespace{op}"{ns}", job="gw"}}', (f"~{ns}" if regex else ns,)
    return st.builds(build, st.sampled_from(["gw_pending", "kube_secret_info", "up"]),
                     st.sampled_from((*namespaces, None)), st.booleans())


@st.composite
def promql_trees(draw: st.DrawFn, namespaces: tuple[str, ...] = ("team-a", "team-b"),
                 depth: int = 3) -> PromQLTree:
    """An instant-vector PromQL expression built from selectors with functions, aggregations,
    ``rate`` over ranges, ``offset``, subqueries and ``or``/``and``/``+`` joins, with the namespace
    each selector names (``"~ns"`` for a regex matcher, ``None`` for none): the neighbours of issue
    22's wake queries."""
    if depth == 0:
        return draw(_promql_selectors(namespaces))
    kind = draw(st.sampled_from(["leaf", "rate", "sum", "offset", "subquery", "join", "abs"]))
    if kind == "leaf":
        return draw(_promql_selectors(namespaces))
    if kind == "rate":
        text, ns = draw(_promql_selectors(namespaces))
        return f"rate({text}[1m])", ns
    text, ns = draw(promql_trees(namespaces, depth - 1))
    if kind == "sum":
        return f"sum by (job) ({text})", ns
    if kind == "abs":
        return f"abs({text})", ns
    if kind == "offset":
        inner, inner_ns = draw(_promql_selectors(namespaces))
        return f"({text}) + on () group_left sum({inner} offset 5m)", ns + inner_ns
    if kind == "subquery":
        return f"max_over_time(({text})[5m:1m])", ns
    other, other_ns = draw(promql_trees(namespaces, depth - 1))
    op = draw(st.sampled_from(["or", "and", "unless"]))
    return f"({text}) {op} ({other})", ns + other_ns
