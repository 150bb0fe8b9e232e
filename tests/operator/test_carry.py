"""Carrying a pool's last good snapshot through a failed read (``llmscale.controller.signals.carry``), pure:
read start times are plain numbers. Issue 14: at 1,000 LLMDeployments one slow quantile query made
every pool unknown, so every object's MetricsAvailable flipped and its status was written each read.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import example, given
from hypothesis import strategies as st

from llmscale.controller.signals.carry import CARRY_PERIODS, GoodRead, carry, query_failure
from llmscale.signals.snapshot import SignalSnapshot

PERIOD_S = 5.0
BOUND_S = CARRY_PERIODS * PERIOD_S
NOW = 1_717_416_000.0
TTFT_FAILED = "ttft query failed: the query did not finish within 5 s"


def good(at: float, queue: float = 3.0) -> SignalSnapshot:
    return SignalSnapshot(at, queue_depth=queue, kv_cache_utilization=0.4, preemption_rate=0.0,
                          ttft_p95_s=0.3, itl_p95_s=0.02)


def quantiles_failed(at: float) -> SignalSnapshot:
    """A read whose gauges and ITL came back and whose TTFT quantile query did not."""
    return SignalSnapshot(at, queue_depth=9.0, kv_cache_utilization=0.9, preemption_rate=0.0, itl_p95_s=0.05,
                          error=TTFT_FAILED, failed_queries=("ttft",), unknown={"ttft_p95_s": TTFT_FAILED})


def whole_read_failed(at: float) -> SignalSnapshot:
    return SignalSnapshot(at, error="signal read of 1000 pools did not finish within 5 s")


def test_a_failed_read_right_after_a_good_one_carries_the_good_snapshot_unchanged() -> None:
    first, last = carry(good(NOW), None, None, started_s=0.0, bound_s=BOUND_S, failed_at=NOW)
    assert first == good(NOW) and last == GoodRead(good(NOW), 0.0)
    failed = whole_read_failed(NOW + 5)
    published, last = carry(failed, failed.error, last, started_s=5.0, bound_s=BOUND_S, failed_at=NOW + 5)
    assert published.queue_depth == 3.0 and published.ttft_p95_s == 0.3
    assert published.error is None, "not a failure to the policy: MetricsAvailable stays as it was"
    assert published.observed_at == NOW, "the carried values keep their own age"
    assert published.carried is not None
    assert (published.carried.failure, published.carried.failed_reads, published.carried.failed_at) == (
        failed.error, 1, NOW + 5)
    assert last is not None and last.failed_reads == 1 and last.started_s == 0.0


def test_a_failed_quantile_query_carries_the_whole_last_good_snapshot_not_a_mix() -> None:
    """Per snapshot: the fresh gauges and ITL of the partly failed read are not mixed with an old
    TTFT, which would then look as fresh as they are."""
    fresh = quantiles_failed(NOW + 5)
    assert query_failure(fresh) == TTFT_FAILED
    _, last = carry(good(NOW), None, None, started_s=0.0, bound_s=BOUND_S, failed_at=NOW)
    published, _ = carry(fresh, query_failure(fresh), last, started_s=5.0, bound_s=BOUND_S, failed_at=NOW + 5)
    assert published.carried is not None and published.carried.failure == TTFT_FAILED
    assert (published.queue_depth, published.kv_cache_utilization, published.ttft_p95_s, published.itl_p95_s) == (
        3.0, 0.4, 0.3, 0.02)
    assert published.observed_at == NOW and not published.unknown


def test_failures_past_two_periods_are_reported_as_read() -> None:
    _, last = carry(good(NOW), None, None, started_s=0.0, bound_s=BOUND_S, failed_at=NOW)
    published = []
    for n in (1, 2, 3, 4):
        failed = whole_read_failed(NOW + 5 * n)
        snap, last = carry(failed, failed.error, last, started_s=5.0 * n, bound_s=BOUND_S, failed_at=NOW + 5 * n)
        published.append(snap)
    assert [s.carried.failed_reads if s.carried else None for s in published] == [1, 2, None, None]
    assert published[2] == whole_read_failed(NOW + 15) and published[2].queue_depth is None
    assert published[3].error is not None and last is None


def test_one_late_read_after_a_good_one_is_past_the_bound() -> None:
    """The bound is the good read's age, not a count: a failed read 11 s after the good one (the
    reader itself was late) is reported."""
    _, last = carry(good(NOW), None, None, started_s=0.0, bound_s=BOUND_S, failed_at=NOW)
    failed = whole_read_failed(NOW + 11)
    snap, last = carry(failed, failed.error, last, started_s=11.0, bound_s=BOUND_S, failed_at=NOW + 11)
    assert snap is failed and last is None


def test_a_pool_with_no_good_read_yet_gets_the_unknown_snapshot() -> None:
    failed = whole_read_failed(NOW)
    snap, last = carry(failed, failed.error, None, started_s=0.0, bound_s=BOUND_S, failed_at=NOW)
    assert snap is failed and snap.carried is None and last is None


def _genuine_unknowns() -> tuple[SignalSnapshot, ...]:
    """No pod exports the gauge, a rejected value, a quiet window: every query answered."""
    no_pod = SignalSnapshot(NOW + 5, error=None,
                            unknown={"queue_depth": "no pod of serving/chat pool interactive exports it"})
    rejected = SignalSnapshot(NOW + 5, queue_depth=None, error="rejected queue depth -1 on pod chat-a",
                              unknown={"queue_depth": "unknown on pod chat-a (see the error)"})
    quiet = SignalSnapshot(NOW + 5, queue_depth=0.0, kv_cache_utilization=0.0, preemption_rate=0.0,
                           quiet=("itl_p95_s", "ttft_p95_s"),
                           unknown={"ttft_p95_s": "no request", "itl_p95_s": "no request"})
    return no_pod, rejected, quiet


def test_a_genuine_unknown_is_not_a_failure() -> None:
    for fresh in _genuine_unknowns():
        assert query_failure(fresh) is None


def test_a_genuine_unknown_is_published_as_read() -> None:
    """The read is good and its unknowns stand (replaced the last good read, never papered over)."""
    for fresh in _genuine_unknowns():
        _, last = carry(good(NOW), None, None, started_s=0.0, bound_s=BOUND_S, failed_at=NOW)
        snap, last = carry(fresh, query_failure(fresh), last, started_s=5.0, bound_s=BOUND_S, failed_at=NOW + 5)
        assert snap is fresh and snap.carried is None and last == GoodRead(fresh, 5.0)


def test_a_good_read_after_carried_ones_starts_over() -> None:
    _, last = carry(good(NOW), None, None, started_s=0.0, bound_s=BOUND_S, failed_at=NOW)
    failed = whole_read_failed(NOW + 5)
    _, last = carry(failed, failed.error, last, started_s=5.0, bound_s=BOUND_S, failed_at=NOW + 5)
    snap, last = carry(good(NOW + 10, queue=4.0), None, last, started_s=10.0, bound_s=BOUND_S, failed_at=NOW + 10)
    assert snap.carried is None and snap.queue_depth == 4.0 and last == GoodRead(good(NOW + 10, 4.0), 10.0)


@dataclass(frozen=True)
class _Published:
    """One read of a sequence: whether it was good, its own snapshot, what was published, when
    it started, and the last good read (start, snapshot) within the bound before it, if any."""

    ok: bool
    fresh: SignalSnapshot
    snap: SignalSnapshot
    at: float
    started: float
    last_good: tuple[float, SignalSnapshot] | None


def _publish(reads: list[tuple[bool, float]]) -> list[_Published]:
    """Carry a sequence of good and failed reads at the given spacing."""
    last: GoodRead | None = None
    started = 0.0
    last_good: tuple[float, SignalSnapshot] | None = None
    published = []
    for n, (ok, gap_s) in enumerate(reads):
        started += gap_s
        at = NOW + started
        fresh = good(at, queue=float(n)) if ok else quantiles_failed(at)
        snap, last = carry(fresh, query_failure(fresh), last, started_s=started, bound_s=BOUND_S, failed_at=at)
        published.append(_Published(ok, fresh, snap, at, started, last_good))
        if ok:
            last_good = (started, fresh)
        elif last_good is None or started - last_good[0] > BOUND_S:
            last_good = None  # past the bound: nothing is carried until a good read
    return published


READ_SEQUENCES = given(st.lists(st.tuples(st.booleans(), st.floats(0.5, 12.0)), min_size=1, max_size=40))
AN_EDGE = example(reads=[(False, 1.6138525160458723), (True, 1.0), (False, 10.0)])


@AN_EDGE
@READ_SEQUENCES
def test_property_carried_values_are_never_older_than_the_bound(reads: list[tuple[bool, float]]) -> None:
    """Over any sequence of good and failed reads at any spacing: a published snapshot is either the
    read's own, or the last good read's snapshot from at most the bound before, marked carried."""
    for p in _publish(reads):
        if p.ok:
            assert p.snap is p.fresh
        elif p.last_good is not None and p.started - p.last_good[0] <= BOUND_S:
            assert p.snap.carried is not None and p.snap.carried.failed_at == p.at
            assert p.snap.observed_at == p.last_good[1].observed_at and p.snap.queue_depth == p.last_good[1].queue_depth
        # observed_at is NOW + the good read's start, and at 1.7e9 s that sum rounds by up to
        # 2.4e-7 s: compare within a microsecond (reads 10 s apart once read 10.000000000000002).
        assert p.snap.carried is None or p.started - (p.snap.observed_at - NOW) <= BOUND_S + 1e-6


@AN_EDGE
@READ_SEQUENCES
def test_property_past_the_bound_every_failure_is_reported(reads: list[tuple[bool, float]]) -> None:
    """Every failed read past the bound (or before any good read) is published as read."""
    for p in _publish(reads):
        if not p.ok and (p.last_good is None or p.started - p.last_good[0] > BOUND_S):
            assert p.snap is p.fresh and p.snap.carried is None and p.snap.error == TTFT_FAILED
