"""The fleet reader (``llmscale.controller.signals.fleet``) on its own, over a recording signal source:
one read for every registered pool, pods from the index at read time, ticks served the newest
snapshot or a fresh read, failures and timeouts as unknown snapshots, lapsed and forgotten pools
no longer read. Periods are tens of milliseconds so the cases run in well under a second each.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pytest

from llmscale.controller.signals.fleet import MINUTE_LAG_S, FleetReader
from llmscale.signals.minute import MinuteSample
from llmscale.signals.profiles import get_profile
from llmscale.signals.queries import PoolRequest, PoolTarget
from llmscale.signals.snapshot import SignalSnapshot

VLLM = get_profile("vllm")
CHAT = PoolTarget("serving", "chat", "interactive")
EMBED = PoolTarget("serving", "embed", "interactive")
NOW = 1_717_416_000.0


@dataclass
class RecordingSource:
    """Answers each pool with its queue depth = the number of its pods (unknown with none); records
    every read."""

    reads: list[list[PoolRequest]] = field(default_factory=list)
    fail: Exception | None = None
    delay_s: float = 0.0
    failed_groups: tuple[str, ...] = ()  # query groups that give no answer (the reader's snapshot says so)

    async def read_fleet(self, pools: Sequence[PoolRequest], now: float) -> Mapping[PoolTarget, SignalSnapshot]:
        self.reads.append(list(pools))
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        if self.fail is not None:
            raise self.fail
        if self.failed_groups:
            why = f"{', '.join(self.failed_groups)} query failed: timed out"
            return {r.target: SignalSnapshot(now, queue_depth=float(len(r.pods or ())), itl_p95_s=0.05,
                                             error=why, failed_queries=self.failed_groups,
                                             unknown={"ttft_p95_s": why})
                    for r in pools}
        return {r.target: SignalSnapshot(now, queue_depth=float(len(r.pods)), ttft_p95_s=0.3, itl_p95_s=0.02)
                if r.pods else SignalSnapshot(now, unknown={"queue_depth": f"no pod of {r.target} exports it"})
                for r in pools}


def fleet(source: RecordingSource, period_s: float = 0.05, timeout_s: float = 0.5) -> FleetReader:
    return FleetReader(source, period_s=period_s, timeout_s=timeout_s, clock=lambda: NOW)


def register(reader: FleetReader, target: PoolTarget, pods: set[str], keep_s: float = 60.0,
             wake: str | None = None) -> None:
    reader.register(target, VLLM, pods=lambda: frozenset(pods), wake_query=wake, keep_s=keep_s,
                    loop_now=asyncio.get_running_loop().time())


async def test_one_read_serves_every_pool_with_its_pods_at_read_time() -> None:
    source = RecordingSource()
    reader = fleet(source)
    chat_pods = {"chat-a"}
    register(reader, CHAT, chat_pods, wake="sum(q)")
    register(reader, EMBED, {"embed-a", "embed-b"})
    chat_pods.add("chat-b")  # a pod created after the registration is in the read
    await reader.read_once()
    assert len(source.reads) == 1
    assert {(r.target, r.pods, r.wake_query) for r in source.reads[0]} == {
        (CHAT, frozenset({"chat-a", "chat-b"}), "sum(q)"), (EMBED, frozenset({"embed-a", "embed-b"}), None),
    }
    assert (await reader.snapshot(CHAT)).queue_depth == 2.0
    assert (await reader.snapshot(EMBED)).queue_depth == 2.0
    assert len(source.reads) == 1, "a recent read serves the ticks without another"


async def test_a_new_pool_waits_for_a_read_that_includes_it() -> None:
    source = RecordingSource()
    reader = fleet(source, period_s=10.0)  # the period alone would make it wait 10 s
    reader.start()
    try:
        await asyncio.sleep(0.05)  # the first read, with no pool yet
        register(reader, CHAT, {"chat-a"})
        snap = await asyncio.wait_for(reader.snapshot(CHAT), 1.0)
    finally:
        await reader.stop()
    assert snap.queue_depth == 1.0 and snap.error is None
    assert [r.target for r in source.reads[-1]] == [CHAT]


async def _reader_after_a_failed_read() -> tuple[RecordingSource, FleetReader]:
    source = RecordingSource(fail=ConnectionRefusedError("Prometheus is down"))
    reader = fleet(source)
    register(reader, CHAT, {"chat-a"})
    register(reader, EMBED, {"embed-a"})
    await reader.read_once()
    return source, reader


async def test_a_failed_read_is_an_unknown_snapshot_per_pool() -> None:
    _, reader = await _reader_after_a_failed_read()
    for target in (CHAT, EMBED):
        snap = await reader.snapshot(target)
        assert snap.queue_depth is None and snap.error is not None and "Prometheus is down" in snap.error
        assert snap.observed_at == NOW


async def test_the_reader_goes_on_after_a_failed_read() -> None:
    source, reader = await _reader_after_a_failed_read()
    source.fail = None
    await reader.read_once()
    assert (await reader.snapshot(CHAT)).queue_depth == 1.0


async def test_a_read_slower_than_the_timeout_is_unknown_not_a_hung_tick() -> None:
    source = RecordingSource(delay_s=1.0)
    reader = fleet(source, timeout_s=0.1)
    register(reader, CHAT, {"chat-a"})
    await reader.read_once()
    snap = await reader.snapshot(CHAT)
    assert snap.queue_depth is None and snap.error is not None and "did not finish within 0.1 s" in snap.error


async def test_no_read_in_time_is_an_unknown_snapshot_that_says_so() -> None:
    reader = fleet(RecordingSource(), timeout_s=0.05)  # never started: nothing reads
    register(reader, CHAT, {"chat-a"})
    snap = await reader.snapshot(CHAT)
    assert snap.queue_depth is None and snap.error == f"no signal read of {CHAT} finished within 0.05 s"


async def _read_with_a_lapsed_pool() -> tuple[RecordingSource, FleetReader]:
    source = RecordingSource()
    reader = fleet(source)
    register(reader, CHAT, {"chat-a"}, keep_s=0.0)  # lapses at once: its object stopped ticking
    register(reader, EMBED, {"embed-a"})
    await asyncio.sleep(0.01)
    await reader.read_once()
    return source, reader


async def test_a_lapsed_pool_is_no_longer_read() -> None:
    source, reader = await _read_with_a_lapsed_pool()
    assert [r.target for r in source.reads[-1]] == [EMBED] and reader.pools == (EMBED,)


async def test_a_forgotten_pool_is_no_longer_read() -> None:
    source, reader = await _read_with_a_lapsed_pool()
    reader.forget("serving", "embed")
    await reader.read_once()
    assert reader.pools == () and len(source.reads) == 1, "no pool, no query"


async def test_a_pool_a_tick_waits_on_does_not_lapse_under_it() -> None:
    """A tick registers its pool, then waits for a read; when the reads are slow the wait outlives
    the registration (two ticks), and the pool must not be dropped with the read the tick waits for
    (the real-vLLM e2e scenario read MetricsMissing: "no signal read ... finished within 10 s")."""
    source = RecordingSource()
    reader = fleet(source, timeout_s=0.5)
    register(reader, CHAT, {"chat-a"}, keep_s=0.0)  # lapsed by the time the next read starts
    waiting = asyncio.create_task(reader.snapshot(CHAT))
    await asyncio.sleep(0.01)
    await reader.read_once()
    snap = await waiting
    assert snap.error is None and snap.queue_depth == 1.0, snap
    await asyncio.sleep(0.01)
    await reader.read_once()  # nobody waits now: the lapsed pool goes
    assert reader.pools == ()


async def test_a_pool_whose_tick_waited_longer_than_its_registration_does_not_lapse_before_the_next_tick() -> None:
    """A fresh-clone run under real vLLM: a tick that waited for a slow read past its registration's
    two ticks left the pool to lapse in the gap before its next tick, which found no snapshot at all
    and read as unknown. The registration's time now runs from the end of the wait."""
    source = RecordingSource(delay_s=0.3)
    reader = fleet(source, period_s=0.05, timeout_s=1.0)
    register(reader, CHAT, {"chat-a"}, keep_s=0.15)
    reader.start()
    try:
        snap = await reader.snapshot(CHAT)  # waits a whole read: 0.3 s, twice the registration
        assert snap.error is None and snap.queue_depth == 1.0, snap
        source.delay_s = 0.0
        await asyncio.sleep(0.1)  # the gap before the next tick: the reader reads on meanwhile
        assert reader.pools == (CHAT,), "the pool lapsed between two ticks"
    finally:
        await reader.stop()


async def test_stop_ends_the_reader() -> None:
    reader = fleet(RecordingSource())
    reader.start()
    reader.start()  # idempotent
    await reader.stop()
    await reader.stop()


async def test_a_renewed_registration_carries_the_targets_newest_fields() -> None:
    """A pool that turns into one selected by name (spec.scaleTargetRef added), or back, is read as
    the newest registration says: the target is re-keyed, not only its registration updated."""
    source = RecordingSource()
    reader = fleet(source)
    register(reader, CHAT, {"chat-a"})
    register(reader, PoolTarget("serving", "chat", "interactive", pods=("vllm-a",)), {"vllm-a"})
    await reader.read_once()
    (request,) = source.reads[0]
    assert request.target.pods == ("vllm-a",) and request.pods == frozenset({"vllm-a"})
    register(reader, CHAT, {"chat-a"})
    await reader.read_once()
    assert source.reads[1][0].target.pods is None


class Clock:
    """A wall clock the test moves (the ``now`` of each read)."""

    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> float:
        return self.now


async def test_a_failed_read_right_after_a_good_one_keeps_the_good_snapshot_until_two_periods() -> None:
    """Issue 14: one read that fails (Prometheus refused, or the whole read timed out) right after a
    good one republishes the good snapshot with its own observed_at, marked carried; once the good
    read is more than two periods older than the failed one, the failure is published."""
    source = RecordingSource()
    clock = Clock()
    counted: list[PoolTarget] = []
    reader = FleetReader(source, period_s=0.05, timeout_s=0.5, clock=clock, on_carried=counted.append)
    register(reader, CHAT, {"chat-a", "chat-b"})
    await reader.read_once()
    source.fail = ConnectionRefusedError("Prometheus is down")
    clock.now = NOW + 5
    await reader.read_once()
    snap = await reader.snapshot(CHAT)
    assert snap.queue_depth == 2.0 and snap.ttft_p95_s == 0.3 and snap.error is None
    assert snap.observed_at == NOW, "the good read's time, not the failed one's"
    assert snap.carried is not None and "Prometheus is down" in snap.carried.failure
    assert (snap.carried.failed_reads, snap.carried.failed_at) == (1, NOW + 5)
    assert counted == [CHAT], "a carried failure is still counted, once per read"
    await asyncio.sleep(0.11)  # more than two periods since the good read started
    clock.now = NOW + 15
    await reader.read_once()
    snap = await reader.snapshot(CHAT)
    assert snap.queue_depth is None and snap.carried is None and snap.error is not None
    assert "Prometheus is down" in snap.error and snap.observed_at == NOW + 15
    assert counted == [CHAT], "past the bound the tick counts the unknown snapshot it gets, as before"


async def test_a_read_past_its_timeout_after_a_good_one_is_carried() -> None:
    source = RecordingSource()
    reader = fleet(source, period_s=1.0, timeout_s=0.05)
    register(reader, CHAT, {"chat-a"})
    await reader.read_once()
    source.delay_s = 0.2
    await reader.read_once()
    snap = await reader.snapshot(CHAT)
    assert snap.queue_depth == 1.0 and snap.carried is not None
    assert "did not finish within 0.05 s" in snap.carried.failure


async def _snapshots_after_a_failed_ttft_query() -> tuple[SignalSnapshot, SignalSnapshot]:
    """The TTFT quantile query timed out: chat was read well before, embed registered since."""
    source = RecordingSource()
    reader = fleet(source, period_s=1.0)
    register(reader, CHAT, {"chat-a"})
    await reader.read_once()
    source.failed_groups = ("ttft",)
    register(reader, EMBED, {"embed-a", "embed-b"})
    await reader.read_once()
    return await reader.snapshot(CHAT), await reader.snapshot(EMBED)


async def test_a_failed_query_group_carries_the_last_good_snapshot() -> None:
    """The pool read well before keeps its whole last good snapshot (not the fresh ITL: one
    consistent read)."""
    chat, _ = await _snapshots_after_a_failed_ttft_query()
    assert chat.carried is not None and chat.carried.failure == "ttft query failed: timed out"
    assert (chat.ttft_p95_s, chat.itl_p95_s, chat.error) == (0.3, 0.02, None)


async def test_a_failed_query_group_leaves_a_pool_without_a_good_read_unknown() -> None:
    """A pool registered since, with no good read, gets the read as it came, its TTFT unknown
    because of the failure."""
    _, embed = await _snapshots_after_a_failed_ttft_query()
    assert embed.carried is None and embed.ttft_p95_s is None and embed.error == "ttft query failed: timed out"
    assert embed.failed_queries == ("ttft",) and (embed.queue_depth, embed.itl_p95_s) == (2.0, 0.05)


async def test_a_genuine_unknown_is_published_not_papered_over() -> None:
    """Every query answered and the pool has no pod: that is the answer, not a failure to carry over."""
    source = RecordingSource()
    reader = fleet(source, period_s=1.0)
    pods = {"chat-a"}
    register(reader, CHAT, pods)
    await reader.read_once()
    pods.clear()
    await reader.read_once()
    snap = await reader.snapshot(CHAT)
    assert snap.carried is None and snap.queue_depth is None and "no pod" in snap.unknown["queue_depth"]


async def test_a_pool_forgotten_while_its_read_is_in_flight_gets_nothing_published_or_counted() -> None:
    """Review of issue 14: a read takes seconds at 1,000 pools; an object deleted meanwhile had its
    metric series dropped, and a carried failure counted for it brought its error counter back."""
    source = RecordingSource()
    counted: list[PoolTarget] = []
    reader = FleetReader(source, period_s=0.05, timeout_s=0.5, clock=Clock(), on_carried=counted.append)
    register(reader, CHAT, {"chat-a"})
    register(reader, EMBED, {"embed-a"})
    await reader.read_once()
    source.fail, source.delay_s = ConnectionRefusedError("Prometheus is down"), 0.05
    in_flight = asyncio.create_task(reader.read_once())
    await asyncio.sleep(0.01)
    reader.forget("serving", "chat")
    await in_flight
    assert counted == [EMBED], "only the pool still registered is counted"
    assert CHAT not in reader._results and CHAT not in reader._good
    assert (await reader.snapshot(EMBED)).carried is not None


@dataclass
class MinuteSource(RecordingSource):
    """Also judges minutes: every pool asked gets one sample, after ``minute_delay_s``."""

    minute_delay_s: float = 0.0

    async def read_minutes(self, pools: Sequence[PoolRequest], end_s: float) -> Mapping[PoolTarget, MinuteSample]:
        await asyncio.sleep(self.minute_delay_s)
        return {r.target: MinuteSample(end_s, 0.3, 0.02, 10, 500, 0) for r in pools}


async def test_minutes_read_for_a_pool_forgotten_meanwhile_are_not_kept() -> None:
    """Review of issue 14: a minute read in flight when its object was deleted left the samples
    behind, for ever, and a recreated object of the same name inherited them."""
    source = MinuteSource(minute_delay_s=0.05)
    reader = FleetReader(source, period_s=0.05, timeout_s=0.5, clock=lambda: NOW + 30)
    register(reader, CHAT, {"chat-a"})
    register(reader, EMBED, {"embed-a"})
    in_flight = asyncio.create_task(reader.read_minutes_due())
    await asyncio.sleep(0.01)
    reader.forget("serving", "chat")
    assert await in_flight == 1
    assert reader.minutes(CHAT) == () and reader.minutes(PoolTarget("serving", "chat", "batch")) == ()
    assert [m.end_s for m in reader.minutes(EMBED)] == [NOW]


async def test_a_slow_minute_read_does_not_hold_back_the_fleet_reads() -> None:
    """Issue 26: at 1,000 pools a minute read took seconds, and the next fleet read waited for it,
    so the ticks found their snapshots older than two periods and waited too. Here the minute read
    takes 8 periods: the fleet reads go on at their period meanwhile."""
    source = MinuteSource(minute_delay_s=0.4)
    reader = FleetReader(source, period_s=0.05, timeout_s=0.5, clock=lambda: NOW + 30)
    register(reader, CHAT, {"chat-a"})
    reader.start()
    try:
        await asyncio.sleep(0.3)
        assert reader.reads >= 4, f"{reader.reads} fleet reads in 6 periods beside a minute read"
        assert reader.minute_reads == 0, "the minute read is still in flight"
    finally:
        await reader.stop()


async def test_a_minute_read_of_two_engine_profiles_waits_for_both() -> None:
    """Review of the minute read's 1.8 timeouts a query: one query per profile, one after another,
    inside one wait of ``timeout_s`` threw a slow second profile's minute away with the first's."""
    source = MinuteSource(minute_delay_s=0.3)  # both profiles' queries: 1.5 × timeout_s
    reader = FleetReader(source, period_s=0.05, timeout_s=0.2, clock=lambda: NOW + 30)
    register(reader, CHAT, {"chat-a"})
    reader.register(EMBED, get_profile("sglang"), pods=lambda: frozenset({"embed-a"}), wake_query=None,
                    keep_s=60.0, loop_now=asyncio.get_running_loop().time())
    assert await reader.read_minutes_due() == 1
    assert [m.end_s for m in reader.minutes(CHAT)] == [NOW] and [m.end_s for m in reader.minutes(EMBED)] == [NOW]


@dataclass
class SkewedSource(MinuteSource):
    """Prometheus's clock ``skew_s`` off the operator's: each answer's evaluation time says so
    (``SignalSnapshot.clock_skew_s``); records the minute ends asked for."""

    skew_s: float = 0.0
    asked: list[float] = field(default_factory=list)

    async def read_fleet(self, pools: Sequence[PoolRequest], now: float) -> Mapping[PoolTarget, SignalSnapshot]:
        return {r.target: SignalSnapshot(now, queue_depth=1.0, clock_skew_s=self.skew_s) for r in pools}

    async def read_minutes(self, pools: Sequence[PoolRequest], end_s: float) -> Mapping[PoolTarget, MinuteSample]:
        self.asked.append(end_s)
        return await super().read_minutes(pools, end_s)


@pytest.mark.parametrize(
    ("skew_s", "asked"),
    [
        pytest.param(-120.0, NOW - 120, id="operator-120s-ahead-asks-prometheus-minute-not-its-future"),
        pytest.param(120.0, NOW + 120, id="operator-120s-behind-asks-the-newest-minute"),
        pytest.param(-3.0, NOW, id="within-5s-the-operators-minute"),
    ],
)
async def test_the_minute_asked_is_prometheus_own_under_clock_skew(skew_s: float, asked: float) -> None:
    """Issue 21: with the operator's node 120 s ahead, the minute ending at its clock lies in
    Prometheus's future and is judged on nothing: the minute asked is Prometheus's own."""
    source = SkewedSource(skew_s=skew_s)
    reader = FleetReader(source, period_s=0.05, timeout_s=0.5, clock=lambda: NOW + 30)
    register(reader, CHAT, {"chat-a"})
    await reader.read_once()
    assert await reader.read_minutes_due() == 1
    assert source.asked == [asked]


@pytest.mark.parametrize("skew_s", [-600.0, -121.0, -61.0, -7.0, 6.0, 59.0, 300.0])
async def test_no_minute_asked_ends_in_prometheus_future(skew_s: float) -> None:
    """Property over skews past 5 s: every minute asked ended at least the lag before Prometheus's now."""
    source = SkewedSource(skew_s=skew_s)
    clock = NOW + 17
    reader = FleetReader(source, period_s=0.05, timeout_s=0.5, clock=lambda: clock)
    register(reader, CHAT, {"chat-a"})
    await reader.read_once()
    await reader.read_minutes_due()
    assert source.asked and all(end <= clock + skew_s - MINUTE_LAG_S for end in source.asked)
    assert all(end % 60 == 0 for end in source.asked)
