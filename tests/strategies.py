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
)
from llmscale.policy import CapacityCorrection, PolicyMemory, PoolState
from llmscale.signals.snapshot import SignalSnapshot, WorkloadMix

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
    return PolicyMemory(
        recommendations=tuple(sorted(recs)),
        scale_events=tuple(sorted(events)),
        since=since,
        correction=correction,
        burstiness=burst,
        batch_yield=batch_yield,
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
