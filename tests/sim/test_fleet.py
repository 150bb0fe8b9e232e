"""The fleet: conservation, cold starts, drains, signals with scrape delay, determinism."""

from __future__ import annotations

import numpy as np
import pytest
from tests.sim.scripted import MODEL, T0, Script, uniform_trace

from llmscale.sim.fleet import (
    FleetConfig,
    SimResult,
    SimulationAbandoned,
    simulate,
)
from llmscale.sim.latency import BIN_S, LatencyRecorder
from llmscale.sim.trace import Trace


def _scaled_up_and_down() -> tuple[Trace, SimResult]:
    trace = uniform_trace(20.0, 900.0, long_every=97)
    # 4 → 8 → 1 → 3 replicas: removals drain busy replicas, additions cold-start.
    auto = Script([(0, 4), (120, 8), (400, 1), (600, 3)])
    res = simulate(trace, auto, MODEL, fleet=FleetConfig(cold_start_s=60, initial_replicas=4),
                   context_limit_tokens=8192)
    return trace, res


def test_every_request_finishes_or_is_reported_through_every_scale_change() -> None:
    trace, res = _scaled_up_and_down()
    finish = np.array(res.requests.finish)
    assert res.rejected.sum() == len(range(0, len(trace), 97))
    assert np.all(finish[~res.rejected] > 0), "no accepted request is lost"
    assert np.all(finish[res.rejected] < 0)
    assert np.all(np.array(res.requests.first_token)[~res.rejected] >= trace.arrival_s[~res.rejected])


def test_a_replica_removed_while_busy_is_gone_only_once_drained() -> None:
    _, res = _scaled_up_and_down()
    finish = np.array(res.requests.finish)
    served_by = np.array(res.requests.replica)
    for k, rec in enumerate(res.replicas):
        mine = finish[served_by == k]
        if len(mine) and rec.removed_s < np.inf:
            assert rec.gone_s >= mine.max() - 1e-9
            assert rec.gone_s >= rec.removed_s


def test_replicas_in_their_cold_start_serve_nothing() -> None:
    trace = uniform_trace(10.0, 600.0)
    auto = Script([(0, 3)])
    res = simulate(trace, auto, MODEL, fleet=FleetConfig(cold_start_s=200, initial_replicas=1))
    served_by = np.array(res.requests.replica)
    arrival = trace.arrival_s
    for k, rec in enumerate(res.replicas):
        if k == 0:
            continue
        assert rec.ready_s == pytest.approx(rec.created_s + 200)
        assert np.all(arrival[served_by == k] >= rec.ready_s)
        assert np.any(served_by == k), "the new replica takes traffic once Ready"


def _seen_by_a_script() -> Script:
    trace = uniform_trace(10.0, 300.0)
    auto = Script([], tick_s=15.0)
    simulate(trace, auto, MODEL, fleet=FleetConfig(initial_replicas=2, scrape_interval_s=15, tick_offset_s=5))
    return auto


def test_signals_come_from_the_last_scrape() -> None:
    auto = _seen_by_a_script()
    first = auto.seen[0]
    assert first.snapshot.observed_at == first.scrape_time == T0  # the tick at +5 s sees the scrape at +0
    for obs in auto.seen:
        assert obs.now - obs.snapshot.observed_at == pytest.approx(5.0)
        assert obs.snapshot.replicas_reporting == 2 == len(obs.pods)
        assert obs.snapshot.queue_depth == sum(p.waiting for p in obs.pods)


def test_an_unknown_signal_is_none_not_zero() -> None:
    auto = _seen_by_a_script()
    # no latency known in the first minute's first scrape: None, not 0
    assert auto.seen[0].snapshot.ttft_p95_s is None
    assert any(o.snapshot.ttft_p95_s is not None for o in auto.seen[4:])


def _cold_fleet() -> tuple[Trace, Script, SimResult]:
    trace = uniform_trace(5.0, 400.0)
    auto = Script([(0, 1)])
    res = simulate(trace, auto, MODEL, fleet=FleetConfig(initial_replicas=0, cold_start_s=100))
    return trace, auto, res


def test_with_no_ready_replica_requests_wait_at_the_router() -> None:
    trace, _, res = _cold_fleet()
    first = np.array(res.requests.first_token)
    early = trace.arrival_s < T0 + 100
    assert np.all(first[early] >= T0 + 100)  # served once the first replica is Ready
    assert np.all(np.array(res.requests.finish) > 0)


def test_with_no_ready_replica_the_signals_are_unknown() -> None:
    _, auto, _ = _cold_fleet()
    assert auto.seen[0].snapshot.queue_depth is None and auto.seen[0].snapshot.error


def test_batch_requests_run_only_on_the_batch_pool() -> None:
    trace = uniform_trace(6.0, 600.0, batch=0.3)
    auto = Script([], batch=0)
    res = simulate(trace, auto, MODEL, fleet=FleetConfig(initial_replicas=2))
    finish = np.array(res.requests.finish)
    assert np.all(finish[res.is_batch] < 0), "no batch pool, no batch work"
    assert np.all(finish[~res.is_batch] > 0)
    auto2 = Script([(300, 2)], batch=1)
    res2 = simulate(trace, auto2, MODEL, fleet=FleetConfig(initial_replicas=2))
    batch_replicas = {k for k, r in enumerate(res2.replicas) if r.pool == "batch"}
    served = np.array(res2.requests.replica)
    assert batch_replicas and set(served[res2.is_batch & (np.array(res2.requests.finish) > 0)]) <= batch_replicas
    assert not set(served[~res2.is_batch]) & batch_replicas


class _ToInteractive:
    """A batch source whose client sends each batch request through the interactive router as it
    arrives (the batch day's alongside mode, without its Jobs)."""

    to_interactive = True

    def __init__(self) -> None:
        self.waiting: list[int] = []
        self.done = 0

    def arrived(self, req: int, t: float) -> None:
        self.waiting.append(req)

    def take(self, t: float) -> int | None:
        return self.waiting.pop(0) if self.waiting else None

    def finished(self, req: int, t: float) -> None:
        self.done += 1


@pytest.mark.parametrize("share", [0.0, 0.3, 0.7])
def test_batch_requests_sent_to_the_interactive_pool_are_in_its_counters(share: float) -> None:
    # vLLM counts every request its engine serves: batch requests sent to the interactive Service
    # are in the pool's request rate and length means, as the operator reads them. The simulator
    # once counted interactive requests alone there (while its running gauge and ITL held every
    # sequence), and its llmscale took the batch day's alongside load for a capacity 4x too small.
    trace = uniform_trace(8.0, 900.0, seed=2, batch=share)
    source = _ToInteractive()
    auto = Script([(0, 4)])
    res = simulate(trace, auto, MODEL, fleet=FleetConfig(initial_replicas=4, batch_source=source),
                   context_limit_tokens=8192)
    assert source.done >= 0.99 * int(res.is_batch.sum())  # a few may be in flight when the run ends
    rates = [o.snapshot.workload.request_rate for o in auto.seen if 300 < o.now - T0 < 900]
    assert all(r is not None for r in rates)
    mean = float(np.mean([r for r in rates if r is not None]))
    assert mean == pytest.approx(8.0, rel=0.15), (share, mean)


def test_batch_requests_served_by_the_batch_pool_stay_out_of_the_interactive_counters() -> None:
    # The neighbour: with a batch pool, its engines count the batch requests, not the interactive
    # pool's; the interactive pool's rate and prompt mean are its own requests'.
    trace = uniform_trace(8.0, 900.0, seed=2, batch=0.5)
    auto = Script([(0, 4)], batch=2)
    res = simulate(trace, auto, MODEL, fleet=FleetConfig(initial_replicas=4), context_limit_tokens=8192)
    assert (np.array(res.requests.finish)[res.is_batch] > 0).mean() > 0.9  # the batch pool served them
    rates = [o.snapshot.workload.request_rate for o in auto.seen if 300 < o.now - T0 < 900]
    mean = float(np.mean([r for r in rates if r is not None]))
    assert mean == pytest.approx(4.0, rel=0.15), mean


def test_the_same_inputs_give_the_same_run() -> None:
    trace = uniform_trace(15.0, 600.0, seed=4)
    runs = [
        simulate(trace, Script([(0, 2), (200, 5), (400, 2)]), MODEL, fleet=FleetConfig(cold_start_s=60))
        for _ in range(2)
    ]
    assert runs[0].requests.finish == runs[1].requests.finish
    assert runs[0].requests.first_token == runs[1].requests.first_token
    assert runs[0].interactive_changes == runs[1].interactive_changes


def test_the_policy_inputs_reach_the_autoscaler() -> None:
    # The operator reads the workload mix from the engines' counters and measures each pod's
    # creation -> Ready; the simulator hands the same to the autoscaler.
    trace = uniform_trace(10.0, 900.0)
    auto = Script([(0, 1), (60, 2)])
    simulate(trace, auto, MODEL, fleet=FleetConfig(cold_start_s=120, initial_replicas=1), context_limit_tokens=8192)
    late = [o for o in auto.seen if o.now - T0 > 300]
    mix = late[-1].snapshot.workload
    assert mix.request_rate is not None and 5.0 < mix.request_rate < 15.0
    assert mix.prompt_tokens_mean is not None and 500 < mix.prompt_tokens_mean < 2500
    assert mix.prompt_tokens_p95 is not None and mix.prompt_tokens_p95 > mix.prompt_tokens_mean
    # The replica asked for at 60 s was Ready 120 s later: one measured cold start.
    assert late[-1].state.interactive_cold_starts_s == pytest.approx((120.0,), abs=15.0)
    assert auto.seen[0].state.interactive_cold_starts_s == ()
    assert late[-1].state.seasonal is None  # the run does not reach back a day
def test_the_warm_pool_is_not_shrunk_while_it_is_still_filling_up() -> None:
    # The run starts with empty replicas: a scale-down asked for in the first hold_initial_s is not
    # applied (a scale-up is), and applies once the hold is over.
    trace = uniform_trace(10.0, 600.0)
    auto = Script([(0, 1), (30, 6), (60, 1)])
    res = simulate(trace, auto, MODEL, fleet=FleetConfig(initial_replicas=4, cold_start_s=20, hold_initial_s=120))
    changes = [(round(t - T0), before, after) for t, before, after in res.interactive_changes]
    assert changes[0] == (35, 4, 6)  # the scale-up went through during the hold
    assert changes[1] == (65, 6, 4)  # the scale-down stopped at the initial size
    assert changes[2] == (125, 4, 1)  # and completed once the hold was over


class _Client:
    """A batch source: one client keeping ``concurrency`` requests in flight, released from the start."""

    to_interactive = False

    def __init__(self, concurrency: int) -> None:
        self.concurrency = concurrency
        self.pending: list[int] = []
        self.in_flight = 0
        self.most_per_replica: list[int] = []

    def arrived(self, req: int, t: float) -> None:
        self.pending.append(req)

    def take(self, t: float) -> int | None:
        if not self.pending or self.in_flight >= self.concurrency:
            return None
        self.in_flight += 1
        return self.pending.pop(0)

    def finished(self, req: int, t: float) -> None:
        self.in_flight -= 1


def test_a_batch_clients_requests_are_spread_over_the_batch_replicas() -> None:
    """The <name>-batch Service spreads a client's requests: 64 in flight on 4 Ready batch replicas
    run 16 on each (not 64 on the first while three idle), so each batch replica serves a share."""
    n = 2000
    trace = Trace(np.full(n, T0 + 1.0), np.full(n, 1000), np.full(n, 200), np.ones(n, dtype=bool), T0, 3600.0)
    client = _Client(64)
    res = simulate(trace, Script([], batch=4), MODEL,
                   fleet=FleetConfig(initial_replicas=1, cold_start_s=10, batch_source=client))
    served = np.array(res.requests.replica)
    finished = np.array(res.requests.finish) > 0
    batch_replicas = [k for k, r in enumerate(res.replicas) if r.pool == "batch"]
    assert len(batch_replicas) == 4 and finished.all()
    counts = [int(np.sum(served == k)) for k in batch_replicas]
    assert min(counts) > 0.15 * n, counts  # an even share is 25 %


def test_latency_bins_before_the_settled_time_never_change() -> None:
    # give_up's promise: what it is shown before its settled time is final (decode leaps in flight
    # are recorded when they end, so "settled" trails the tick while one spans a minute's end).
    # Few arrivals and long outputs: decode leaps of tens of seconds, across bins and ticks.
    rng = np.random.default_rng(1)
    n = 60
    arrival = T0 + np.sort(rng.uniform(0, 600, n))
    trace = Trace(arrival, rng.integers(50, 500, n), rng.integers(1000, 4000, n), np.zeros(n, bool), T0, 600.0)
    seen: list[tuple[int, np.ndarray, np.ndarray]] = []

    def watch(rec: LatencyRecorder, settled_s: float) -> bool:
        k = max(0, int((settled_s - rec.start_s) // BIN_S))
        seen.append((k, rec.counts("ttft")[:k].copy(), rec.counts("itl")[:k].copy()))
        return False

    res = simulate(trace, Script([(0, 2)]), MODEL, context_limit_tokens=8192, give_up=watch)
    assert res.latency is not None
    ttft, itl = res.latency.counts("ttft"), res.latency.counts("itl")
    assert any(k for k, _, _ in seen)
    for k, tt, it in seen:
        assert (tt == ttft[:k]).all() and (it == itl[:k]).all(), k


def test_a_run_given_up_raises_at_the_tick_it_was_given_up() -> None:
    trace = uniform_trace(20.0, 900.0)
    with pytest.raises(SimulationAbandoned) as info:
        simulate(trace, Script([(0, 4)]), MODEL, context_limit_tokens=8192,
                 give_up=lambda rec, settled_s: settled_s >= T0 + 300.0)
    assert T0 + 300.0 <= info.value.at_s < T0 + 330.0
