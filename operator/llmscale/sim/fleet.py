"""The simulated fleet: pools of replicas, a router, cold starts, drains and the time loop.

One :func:`simulate` call replays a :class:`~llmscale.sim.trace.Trace` through an interactive pool
(and a batch pool when the trace has batch requests) whose size an :class:`Autoscaler` sets on its
tick, in simulated time (seconds since the Unix epoch, so trough windows fall on real wall-clock
hours). The autoscaler sees what it would see on a cluster:

- **Prometheus** scrapes every replica every ``scrape_interval_s`` (15 s by default, the
  kube-prometheus-stack ServiceMonitor interval); a tick sees the gauges of the *last* scrape
  as a :class:`~llmscale.signals.SignalSnapshot` — the type the operator builds from Prometheus —
  whose ``observed_at`` is the scrape time, so the signals are up to one interval old. Only Ready,
  not draining replicas are scrape targets (the Service's endpoints). Preemption rate is the pool's
  counter increase over the last 60 s divided by 60 (``rate(...[1m])``); TTFT and ITL p95 are
  ``histogram_quantile(0.95, …)`` over the pool's vLLM histograms of the 60 s before the scrape
  (:mod:`llmscale.sim.latency`: one TTFT per first token, one ITL per later output token).
- **Kubernetes** creates replicas that bill GPU time at once but serve nothing until
  ``cold_start_s`` later; scaling down removes not-yet-ready replicas first (as the ReplicaSet
  controller does: unready pods before ready ones), then the newest ready ones, which **drain** —
  they take no new request and finish every request they hold; GPU time counts until they are
  empty. In-flight work is never killed.
- The **router** (the Service / gateway) sends each interactive request to a ready replica by
  ``FleetConfig.routing``: ``least-loaded`` (the default) the one with the fewest outstanding
  requests (ties: the oldest replica); ``random`` one at random (kube-proxy spreading a Service's
  connections; seeded by ``routing_seed``); ``prefix-aware`` (the Gateway API Inference
  Extension's endpoint picker, simplified) among the replicas within :data:`PREFIX_LOAD_SLACK`
  outstanding requests of the least loaded, the one holding the longest cached prefix of the
  request's prompt blocks (ties: fewest outstanding, then the oldest). With no ready replica the
  request waits at the router. Batch requests queue for the batch pool, which takes at most
  ``2 × max_num_seqs`` outstanding requests per replica (a bounded-concurrency batch client) —
  or, with a :class:`BatchSource` (``FleetConfig.batch_source``, the batch Jobs of
  :mod:`llmscale.sim.batchday`), wait in it until it hands them out: to the batch pool within the
  same per-replica room, each to the ready batch replica with the fewest outstanding requests (the
  ``<name>-batch`` Service spreads the clients' connections), or to the interactive router
  (``to_interactive``), whose engines then count them in the interactive pool's request counters
  and length histograms as vLLM does (the TTFT the autoscaler reads stays the interactive
  requests', one recorder serving both it and the score; the ITL was always every sequence's).

Fast by construction: replicas advance in event-driven leaps (:mod:`llmscale.sim.replica`), the
loop merges three sorted sources (arrivals, replica wake-ups, controller ticks) with ``heapq``.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
from numpy.typing import NDArray

from llmscale.policy.types import PoolState
from llmscale.pools import BATCH, INTERACTIVE
from llmscale.signals.minute import MinuteSample
from llmscale.signals.snapshot import SignalSnapshot, WorkloadMix
from llmscale.sim.counters import RequestCounters, cold_starts
from llmscale.sim.latency import BIN_S, LatencyRecorder
from llmscale.sim.replica import EngineConfig, ReplicaEngine, RequestTable, StepCostModel
from llmscale.sim.trace import Trace

__all__ = [
    "Autoscaler",
    "BatchSource",
    "FleetConfig",
    "Observation",
    "PodSample",
    "ReplicaRecord",
    "ScaleDecision",
    "SimResult",
    "SimulationAbandoned",
    "simulate",
]


class SimulationAbandoned(Exception):
    """:func:`simulate` ended early because its ``give_up`` said so; ``at_s`` is the simulated
    time it stopped at (seconds since the epoch). No result exists for such a run."""

    def __init__(self, at_s: float) -> None:
        super().__init__(f"the run was given up at {at_s:.0f} s")
        self.at_s = at_s


@dataclass(frozen=True, slots=True)
class PodSample:
    """Gauges of one scrape target (a Ready interactive replica) at the last scrape.

    Attributes:
        waiting: ``vllm:num_requests_waiting``. running: ``vllm:num_requests_running``.
        kv_cache_utilization: ``vllm:kv_cache_usage_perc``, 0–1.
    """

    waiting: int
    running: int
    kv_cache_utilization: float


@dataclass(frozen=True, slots=True)
class Observation:
    """Everything an autoscaler may look at on its tick.

    Attributes:
        now: the tick's time, seconds since the epoch.
        snapshot: the interactive pool's signals at the last scrape (aggregated as the operator's
            PromQL aggregates them); values are ``None`` when no replica was scraped.
        pods: per-pod gauges of the last scrape (what a Prometheus adapter serves the HPA).
        state: replica counts of both pools now.
        inflight_integral: ∫ of in-flight interactive requests over time up to ``now``,
            request·seconds — what Knative's queue-proxies report as average concurrency when
            differenced over a window.
        scrape_time: time of the last scrape, seconds since the epoch (−inf before the first).
        minutes: the interactive pool's last two whole minutes as the operator's minute query reads
            them (what its live calibration folds), oldest first.
    """

    now: float
    snapshot: SignalSnapshot
    pods: tuple[PodSample, ...]
    state: PoolState
    inflight_integral: float
    scrape_time: float
    minutes: tuple[MinuteSample, ...] = ()


@dataclass(frozen=True, slots=True)
class ScaleDecision:
    """An autoscaler's answer: desired interactive replicas, and batch replicas (``None`` = follow
    ``spec.batch`` windows as a fixed schedule, what a baseline without trough logic gets)."""

    interactive: int
    batch: int | None = None
    reason: str = ""


class Autoscaler(Protocol):
    """A scaling policy under test: ``decide`` is called every ``tick_s`` seconds of simulated time."""

    name: str
    tick_s: float

    def decide(self, obs: Observation) -> ScaleDecision:
        """Return the desired replicas at ``obs.now``."""
        ...


class BatchSource(Protocol):
    """Where batch requests wait until a client sends them (the batch Jobs of
    :mod:`llmscale.sim.batchday`): the fleet hands it each batch request as it arrives, takes the
    next one to send whenever a batch replica has room (or, ``to_interactive``, at once through the
    interactive router), and reports each one finished."""

    to_interactive: bool

    def arrived(self, req: int, t: float) -> None:
        """Batch request ``req`` (trace index) arrived at ``t`` (seconds since the epoch)."""
        ...

    def take(self, t: float) -> int | None:
        """Return the next batch request a client sends at ``t``, or ``None``: none may be sent now."""
        ...

    def finished(self, req: int, t: float) -> None:
        """Batch request ``req`` finished at ``t``."""
        ...


#: The interactive router's policies (module docstring).
ROUTINGS: tuple[str, ...] = ("least-loaded", "random", "prefix-aware")
#: prefix-aware: replicas with at most this many outstanding requests above the least loaded's
#: compete on their cached prefix (a load guard: a hot prefix does not pile onto one replica).
PREFIX_LOAD_SLACK = 4


@dataclass(frozen=True)
class FleetConfig:
    """How the simulated cluster behaves.

    Attributes:
        cold_start_s: pod creation to Ready, seconds (``spec.headroom.cold_start_seconds``).
        initial_replicas: Ready interactive replicas at the start (a warm pool; the warm-up
            excludes the transient anyway).
        min_replicas / max_replicas: bounds applied to every decision (``spec.replicas``); batch
            decisions are bounded by ``batch_max_replicas``.
        gpus_per_replica: GPUs billed per replica.
        scrape_interval_s: Prometheus scrape interval, seconds (15 s: kube-prometheus-stack's
            ServiceMonitor default).
        tick_offset_s: phase of the autoscaler's ticks after each scrape, seconds: the signals a
            tick sees are this old at least.
        drain_cap_s: after the trace ends, keep serving in-flight interactive requests for at
            most this long, seconds; anything left is reported unfinished.
        batch_max_replicas: upper bound of the batch pool.
        batch_schedule: desired batch replicas at a time when the autoscaler leaves it to the
            schedule (``None`` = no batch pool).
        hold_initial_s: for this long from the start, seconds, the interactive pool is not scaled
            below its initial size (scale-ups apply). The run starts with empty replicas, so the
            first scrapes show a fleet that is still filling up; a controller acting on them would
            shrink the warm pool and leave a backlog that outlasts the warm-up. Every policy gets
            the same hold; it belongs inside the excluded warm-up.
        batch_source: holds batch requests until its clients send them (``None``: each goes to the
            batch pool's queue as it arrives).
    """

    cold_start_s: float = 180.0
    initial_replicas: int = 1
    min_replicas: int = 0
    max_replicas: int = 10_000
    gpus_per_replica: int = 1
    scrape_interval_s: float = 15.0
    tick_offset_s: float = 5.0
    drain_cap_s: float = 3600.0
    batch_max_replicas: int = 10_000
    batch_schedule: Callable[[float], int] | None = None
    hold_initial_s: float = 0.0
    batch_source: BatchSource | None = None
    routing: str = "least-loaded"
    routing_seed: int = 0

    def __post_init__(self) -> None:
        if self.routing not in ROUTINGS:
            raise ValueError(f"routing must be one of {', '.join(ROUTINGS)}, got {self.routing!r}")


@dataclass(slots=True)
class ReplicaRecord:
    """Life of one replica: created, Ready, removal ordered, and gone (drained), seconds since the
    epoch (``inf`` when it never happened within the run)."""

    pool: str
    created_s: float
    ready_s: float = math.inf
    removed_s: float = math.inf
    gone_s: float = math.inf


@dataclass
class SimResult:
    """What one run produced; :mod:`llmscale.sim.report` turns it into the figures.

    Attributes:
        policy: the autoscaler's name.
        start_s / end_s: the simulated interval, seconds since the epoch.
        requests: the :class:`RequestTable` (arrival, first token, finish, …).
        is_batch / rejected: per-request flags, numpy bool arrays.
        replicas: every replica's :class:`ReplicaRecord`.
        interactive_changes / batch_changes: ``(time_s, replicas_before, replicas_after)`` of every
            change of a pool's desired size (a scale event).
        preemptions: total preemptions over both pools.
        gpus_per_replica: GPUs per replica (for GPU-hours).
        wall_s: wall-clock seconds the run took (measured by the caller, 0 if not).
        latency: the interactive pool's TTFT and per-token ITL histograms
            (:class:`~llmscale.sim.latency.LatencyRecorder`), what every minute is scored on.
        itl_slo_s: the ITL target the per-request slow-gap counts were taken against, seconds.
        prefix_cache_queries_tokens / prefix_cache_hits_tokens: the interactive pool's
            ``vllm:prefix_cache_queries_total`` / ``vllm:prefix_cache_hits_total``, tokens.
    """

    policy: str
    start_s: float
    end_s: float
    requests: RequestTable
    is_batch: NDArray[np.bool_]
    rejected: NDArray[np.bool_]
    replicas: list[ReplicaRecord]
    interactive_changes: list[tuple[float, int, int]] = field(default_factory=list)
    batch_changes: list[tuple[float, int, int]] = field(default_factory=list)
    initial_replicas: int = 0
    preemptions: int = 0
    gpus_per_replica: int = 1
    wall_s: float = 0.0
    latency: LatencyRecorder | None = None
    itl_slo_s: float = math.inf
    prefix_cache_queries_tokens: int = 0
    prefix_cache_hits_tokens: int = 0


class _Replica:
    """A replica in a pool: its engine plus lifecycle."""

    __slots__ = ("engine", "record", "state", "version")

    def __init__(self, engine: ReplicaEngine, record: ReplicaRecord) -> None:
        self.engine = engine
        self.record = record
        self.state = "starting"
        self.version = 0


class _Pool:
    """Replicas of one pool with the router's view of them."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.starting: list[_Replica] = []
        self.ready: list[_Replica] = []
        self.draining: list[_Replica] = []
        self.preemptions = 0

    @property
    def size(self) -> int:
        return len(self.starting) + len(self.ready)


def simulate(
    trace: Trace,
    autoscaler: Autoscaler,
    cost: StepCostModel,
    *,
    engine: EngineConfig | None = None,
    fleet: FleetConfig | None = None,
    context_limit_tokens: int | None = None,
    itl_slo_s: float = math.inf,
    progress: Callable[[float], None] | None = None,
    latency_bounds_s: tuple[Sequence[float], Sequence[float]] | None = None,
    give_up: Callable[[LatencyRecorder, float], bool] | None = None,
) -> SimResult:
    """Replay ``trace`` through a fleet sized by ``autoscaler``; return every request's fate.

    Args:
        trace: the requests (interactive and batch).
        autoscaler: the policy under test, called every ``autoscaler.tick_s``.
        cost: the performance model of one replica (``ReplicaModel``).
        engine: scheduler limits of each replica.
        fleet: cluster behaviour (cold start, scrape interval, bounds, batch schedule).
        context_limit_tokens: ``--max-model-len``: a prompt at or over it is rejected (reported in
            ``SimResult.rejected``, as vLLM answers HTTP 400), a longer output is cut to fit.
        itl_slo_s: the ITL target, seconds: each request's inter-token gaps longer than it are
            counted (``SimResult.requests.slow_gaps``).
        progress: called now and then with the simulated time reached (seconds since the epoch).
        latency_bounds_s: ``(itl, ttft)`` histogram bucket bounds, seconds (default vLLM's): finer
            ones let a benchmark read quantiles of a fast engine (a CPU's few-millisecond ITL).
        give_up: called after each tick with the run's latency histograms so far and the time
            before which they are final (the tick's, or the start of a decode leap still in flight,
            whose steps are recorded when it ends); ``True`` ends the run there: a search that
            already knows the run fails its test need not finish it.

    Returns:
        A :class:`SimResult`.

    Raises:
        ValueError: the model's KV cache cannot hold one request at the context limit.
        SimulationAbandoned: ``give_up`` returned ``True``.
    """
    engine = engine or EngineConfig()
    fleet = fleet or FleetConfig()
    capacity = int(engine.kv_capacity_tokens or cost.kv_cache_capacity_tokens)
    limit = int(context_limit_tokens) if context_limit_tokens else capacity
    if limit > capacity:
        raise ValueError(
            f"The context limit ({limit} tokens) is larger than the KV cache ({capacity} tokens): "
            "vLLM would refuse to start"
        )
    n = len(trace)
    prompt = trace.prompt_tokens.astype(np.int64)
    output = np.maximum(trace.output_tokens.astype(np.int64), 1)
    rejected = prompt >= limit
    output = np.where(rejected, output, np.minimum(output, limit - prompt))
    table = RequestTable(
        trace.arrival_s.tolist(),
        prompt.tolist(),
        output.tolist(),
        hash_offsets=trace.hash_offsets.tolist() if trace.hash_offsets is not None else None,
        hash_ids=trace.hash_ids,
        block_tokens=trace.block_tokens,
    )
    is_batch_arr = trace.is_batch.copy()
    is_batch = is_batch_arr.tolist()
    rejected_l = rejected.tolist()
    arrival = table.arrival

    start, end = trace.start_s, trace.end_s
    pools = {INTERACTIVE: _Pool(INTERACTIVE), BATCH: _Pool(BATCH)}
    inter, batchp = pools[INTERACTIVE], pools[BATCH]
    records: list[ReplicaRecord] = []
    heap: list[tuple[float, int, int, _Replica]] = []  # (time, seq, version, replica)
    seq = 0
    pending: deque[int] = deque()  # interactive requests waiting at the router (no ready replica)
    routing = fleet.routing
    route_rng = np.random.default_rng(fleet.routing_seed)
    has_hashes = trace.hash_ids is not None
    backlog: deque[int] = deque()  # batch requests not yet handed to a batch replica
    batch_cap = 2 * engine.max_num_seqs
    if latency_bounds_s is None:
        latency = LatencyRecorder(start, end)
    else:
        latency = LatencyRecorder(start, end, itl_bounds=latency_bounds_s[0], ttft_bounds=latency_bounds_s[1])
    counters = RequestCounters(start, limit)  # what Prometheus holds of the pool's counters
    inflight = 0
    inflight_integral = 0.0
    inflight_t = start
    inter_changes: list[tuple[float, int, int]] = []
    batch_changes: list[tuple[float, int, int]] = []
    unfinished_interactive = int(np.count_nonzero(~is_batch_arr & ~rejected))
    source = fleet.batch_source

    def push(rep: _Replica, t: float) -> None:
        nonlocal seq
        rep.version += 1
        seq += 1
        heapq.heappush(heap, (t, seq, rep.version, rep))

    lat_ttft, lat_bounds, lat_w, lat_bins = latency.ttft, latency.ttft_bounds, latency.ttft_width, latency.bins

    def on_first(req: int, t: float) -> None:
        # LatencyRecorder.add_ttft, inlined (once per request)
        if not is_batch[req] and t < end:
            k = int((t - start) // BIN_S)
            if 0 <= k < lat_bins:
                lat_ttft[k * lat_w + bisect_left(lat_bounds, t - arrival[req])] += 1

    def on_finish(eng: ReplicaEngine, req: int, t: float) -> None:
        nonlocal inflight, inflight_integral, inflight_t, unfinished_interactive
        rep = by_engine[eng.index]
        if not is_batch[req]:
            inflight_integral += inflight * (t - inflight_t)
            inflight_t = t
            inflight -= 1
            unfinished_interactive -= 1
        if not is_batch[req] or rep.record.pool == INTERACTIVE:
            # The pool's counters are its engines' own: a batch request sent to the interactive
            # Service (the alongside mode) is counted as vLLM counts it, in the rate and the mix.
            first = table.first_token[req]
            counters.finished(t, table.prompt[req], table.output[req], t - first,
                              first - table.scheduled[req] if table.scheduled[req] >= 0 else None)
        if source is not None and is_batch[req]:
            source.finished(req, t)
        if rep.state == "draining" and eng.outstanding == 0:
            rep.state = "gone"
            rep.record.gone_s = t
            (batchp if rep.record.pool == BATCH else inter).draining.remove(rep)
        elif rep.state == "ready" and rep.record.pool == BATCH and backlog:
            dispatch_batch(t)
        if source is not None and is_batch[req]:
            dispatch_batch(t)

    by_engine: list[_Replica] = []

    def new_replica(pool: _Pool, t: float, ready_at: float) -> _Replica:
        rec = ReplicaRecord(pool=pool.name, created_s=t, ready_s=ready_at)
        records.append(rec)
        eng = ReplicaEngine(
            len(by_engine), table, cost, engine, on_finish, on_first,
            latency=latency if pool is inter else None, itl_slo_s=itl_slo_s,
        )
        rep = _Replica(eng, rec)
        by_engine.append(rep)
        return rep

    def route(req: int, t: float) -> None:
        nonlocal inflight, inflight_integral, inflight_t
        inflight_integral += inflight * (t - inflight_t)
        inflight_t = t
        inflight += 1
        send(req, t)

    def send(req: int, t: float) -> None:
        ready = inter.ready
        if not ready:
            pending.append(req)
            return
        if routing == "random":
            best = ready[int(route_rng.integers(len(ready)))]
        elif routing == "prefix-aware" and has_hashes:
            low = min(rep.engine.outstanding for rep in ready)
            best = max((rep for rep in ready if rep.engine.outstanding <= low + PREFIX_LOAD_SLACK),
                       key=lambda rep: (rep.engine.cached_prefix_blocks(req), -rep.engine.outstanding))
        else:
            best = ready[0]
            low = best.engine.outstanding
            if low:
                for rep in ready:
                    o = rep.engine.outstanding
                    if o < low:
                        best, low = rep, o
                        if not o:
                            break
        table.replica[req] = best.engine.index
        wake = best.engine.add(req, t)
        if wake is not None:
            push(best, wake)

    def dispatch_batch(t: float) -> None:
        if source is not None:
            pump(t)
            return
        for rep in batchp.ready:
            eng = rep.engine
            while backlog and eng.outstanding < batch_cap:
                req = backlog.popleft()
                table.replica[req] = eng.index
                wake = eng.add(req, t)
                if wake is not None:
                    push(rep, wake)
            if not backlog:
                return

    def pump(t: float) -> None:
        """Send what the batch source hands out now (module docstring)."""
        assert source is not None
        if source.to_interactive:
            while (req := source.take(t)) is not None:
                send(req, t)
            return
        # The <name>-batch Service spreads the clients' requests over the ready batch replicas (the
        # client's connections land on endpoints at random): each goes to the one with the fewest
        # outstanding (ties: the oldest), within the per-replica room.
        while batchp.ready:
            rep = min(batchp.ready, key=lambda r: r.engine.outstanding)
            eng = rep.engine
            if eng.outstanding >= batch_cap:
                return
            req = source.take(t)
            if req is None:
                return
            table.replica[req] = eng.index
            wake = eng.add(req, t)
            if wake is not None:
                push(rep, wake)

    def make_ready(rep: _Replica, t: float) -> None:
        pool = batchp if rep.record.pool == BATCH else inter
        if rep.state != "starting":
            return
        pool.starting.remove(rep)
        rep.state = "ready"
        pool.ready.append(rep)
        if pool is inter:
            while pending:
                send(pending.popleft(), t)
        elif backlog or source is not None:
            dispatch_batch(t)

    ready_heap: list[tuple[float, int, _Replica]] = []

    def resize(pool: _Pool, desired: int, t: float) -> None:
        nonlocal seq
        cur = pool.size
        if desired > cur:
            for _ in range(desired - cur):
                rep = new_replica(pool, t, t + fleet.cold_start_s)
                pool.starting.append(rep)
                seq += 1
                heapq.heappush(ready_heap, (rep.record.ready_s, seq, rep))
        elif desired < cur:
            drop = cur - desired
            while drop and pool.starting:
                rep = pool.starting.pop()  # newest not-ready first
                rep.state = "gone"
                rep.record.removed_s = rep.record.gone_s = t
                drop -= 1
            while drop and pool.ready:
                rep = pool.ready.pop()  # newest ready next
                rep.record.removed_s = t
                if rep.engine.outstanding == 0:
                    rep.state = "gone"
                    rep.record.gone_s = t
                else:
                    rep.state = "draining"
                    pool.draining.append(rep)
                drop -= 1

    # Warm start: the initial interactive replicas are Ready at the start.
    initial_size = max(fleet.initial_replicas, fleet.min_replicas)
    hold_until = start + fleet.hold_initial_s
    for _ in range(initial_size):
        rep = new_replica(inter, start - fleet.cold_start_s, start)
        rep.record.created_s = start  # billed from the start of the run only
        rep.state = "ready"
        inter.ready.append(rep)

    # Scrapes: the last one's pod gauges and aggregate snapshot.
    last_pods: tuple[PodSample, ...] = ()
    last_snapshot = SignalSnapshot(observed_at=start - fleet.scrape_interval_s, error="no scrape yet")
    last_scrape_t = -math.inf
    preempt_hist: deque[tuple[float, int]] = deque()

    def scrape(t: float) -> None:
        nonlocal last_pods, last_snapshot, last_scrape_t
        pods = tuple(
            PodSample(r.engine.num_waiting, r.engine.num_running, r.engine.kv_usage(t)) for r in inter.ready
        )
        total_pre = sum(r.engine.preemptions for r in by_engine if r.record.pool == INTERACTIVE)
        preempt_hist.append((t, total_pre))
        while preempt_hist and preempt_hist[0][0] < t - 60.0 - 1e-9:
            preempt_hist.popleft()
        t0, p0 = preempt_hist[0]
        rate = (total_pre - p0) / (t - t0) if t > t0 else None
        last_scrape_t = t
        last_pods = pods
        if pods:
            counters.running(t, sum(p.running for p in pods) / len(pods))
            ttft, itl = latency.window_p95(t)
            last_snapshot = SignalSnapshot(
                observed_at=t,
                queue_depth=float(sum(p.waiting for p in pods)),
                running_requests=float(sum(p.running for p in pods)),
                kv_cache_utilization=sum(p.kv_cache_utilization for p in pods) / len(pods),
                preemption_rate=rate,
                ttft_p95_s=ttft,
                itl_p95_s=itl,
                replicas_reporting=len(pods),
                workload=_scrape_counters(counters, [r for r in by_engine if r.record.pool == INTERACTIVE], t),
                # No request in the last minute: no p95 to measure, as the reader says of a quiet window.
                quiet=tuple(f for f, v in (("itl_p95_s", itl), ("ttft_p95_s", ttft)) if v is None),
            )
        else:
            last_snapshot = SignalSnapshot(observed_at=t, replicas_reporting=0, error="no ready replica")

    def tick(t: float) -> None:
        nonlocal inflight_integral, inflight_t
        inflight_integral += inflight * (t - inflight_t)
        inflight_t = t
        state = PoolState(
            interactive_replicas=inter.size,
            interactive_ready=len(inter.ready),
            interactive_starting=len(inter.starting),
            batch_replicas=batchp.size,
            batch_ready=len(batchp.ready),
            interactive_cold_starts_s=cold_starts(((r.created_s, r.ready_s) for r in records if r.pool == INTERACTIVE), t),
            seasonal=counters.seasonal(t),
        )
        obs = Observation(t, last_snapshot, last_pods, state, inflight_integral, last_scrape_t,
                          counters.minutes(t))
        d = autoscaler.decide(obs)
        want = min(max(int(d.interactive), fleet.min_replicas), fleet.max_replicas)
        if t < hold_until and want < initial_size:
            want = initial_size
        if d.batch is not None:
            want_b = d.batch
        elif fleet.batch_schedule is not None:
            want_b = fleet.batch_schedule(t)
        else:
            want_b = 0
        want_b = min(max(int(want_b), 0), fleet.batch_max_replicas)
        if want != inter.size:
            inter_changes.append((t, inter.size, want))
            resize(inter, want, t)
        if want_b != batchp.size:
            batch_changes.append((t, batchp.size, want_b))
            resize(batchp, want_b, t)
        if source is not None:  # the autoscaler may have released Jobs
            dispatch_batch(t)

    # ---------------------------------------------------------------- the loop
    inf = math.inf
    i = 0
    next_scrape = start
    next_tick = start + fleet.tick_offset_s
    next_progress = start
    controls_on = True
    hard_stop = end + fleet.drain_cap_s
    tick_s = autoscaler.tick_s
    scrape_s = fleet.scrape_interval_s
    heappop = heapq.heappop
    while True:
        # The next control event (scrape, tick, a replica turning Ready) — rarely changes.
        tc = (next_scrape if next_scrape < next_tick else next_tick) if controls_on else inf
        if ready_heap and ready_heap[0][0] < tc:
            tc = ready_heap[0][0]
        ta = arrival[i] if i < n else inf
        te = heap[0][0] if heap else inf
        if te <= ta and te <= tc:
            if te == inf or te > hard_stop:
                break
            _, _, ver, rep = heappop(heap)
            if ver != rep.version:
                continue
            wake = rep.engine.on_event()
            if wake is not None:
                push(rep, wake)
            if not controls_on and i >= n and unfinished_interactive <= 0:
                break
            continue
        if ta <= tc:
            if ta > hard_stop:
                break
            req = i
            i += 1
            if rejected_l[req]:
                continue
            if is_batch[req]:
                if source is not None:
                    source.arrived(req, ta)
                    dispatch_batch(ta)
                    continue
                backlog.append(req)
                if batchp.ready:
                    dispatch_batch(ta)
            else:
                route(req, ta)
            continue
        t = tc
        if t == inf or t > hard_stop:
            break
        if ready_heap and ready_heap[0][0] == t:
            _, _, rep = heappop(ready_heap)
            make_ready(rep, t)
            continue
        # controller tick or scrape
        if t >= end:
            controls_on = False
            if i >= n and unfinished_interactive <= 0:
                break
            continue
        if next_scrape == t:
            scrape(t)
            next_scrape += scrape_s
        if next_tick == t:
            tick(t)
            next_tick += tick_s
            if give_up is not None:
                settled = min([t, *(r.engine.recorded_before for r in by_engine)])
                if give_up(latency, settled):
                    raise SimulationAbandoned(t)
        if progress is not None and t >= next_progress:
            progress(t)
            next_progress = t + 600.0

    total_pre = queries = hits = 0
    for rep in by_engine:
        total_pre += rep.engine.preemptions
        if rep.record.pool == INTERACTIVE:
            queries += rep.engine.prefix_queries
            hits += rep.engine.prefix_hits
    return SimResult(
        policy=autoscaler.name,
        start_s=start,
        end_s=end,
        requests=table,
        is_batch=is_batch_arr,
        rejected=rejected,
        replicas=records,
        interactive_changes=inter_changes,
        batch_changes=batch_changes,
        initial_replicas=max(fleet.initial_replicas, fleet.min_replicas),
        preemptions=total_pre,
        gpus_per_replica=fleet.gpus_per_replica,
        latency=latency,
        itl_slo_s=itl_slo_s,
        prefix_cache_queries_tokens=queries,
        prefix_cache_hits_tokens=hits,
    )


def replicas_over_time(
    records: Sequence[ReplicaRecord], grid_s: NDArray[np.float64], pool: str = INTERACTIVE
) -> NDArray[np.float64]:
    """Mean billed replicas of ``pool`` in each interval ``[grid[k], grid[k+1])``; shape ``(len(grid)-1,)``.

    A replica is billed from creation until it is gone (drained or deleted).
    """
    out = np.zeros(len(grid_s) - 1, dtype=np.float64)
    widths = np.diff(grid_s)
    for rec in records:
        if rec.pool != pool:
            continue
        a, b = rec.created_s, min(rec.gone_s, grid_s[-1])
        if b <= a:
            continue
        lo = np.clip(a, grid_s[:-1], grid_s[1:])
        hi = np.clip(b, grid_s[:-1], grid_s[1:])
        out += (hi - lo) / widths
    return out


def _scrape_counters(counters: RequestCounters, ready: Sequence[_Replica], t: float) -> WorkloadMix:
    """The pool's workload mix at a scrape at ``t``; the prefix-cache counters of the engines that
    keep them (``prefix_queries``/``prefix_hits``, tokens) are folded in first."""
    queries = hits = 0.0
    seen = False
    for rep in ready:
        q = getattr(rep.engine, "prefix_queries", None)
        h = getattr(rep.engine, "prefix_hits", None)
        if q is not None and h is not None:
            queries, hits, seen = queries + q, hits + h, True
    if seen:
        counters.prefix_cache(t, queries, hits)
    return counters.workload(t)
