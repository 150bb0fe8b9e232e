"""Carry a pool's last good snapshot through a read that failed, for a short, bounded time.

Pure: the fleet reader hands in the read start times and the failed read's wall-clock time. Why and
the rules: ``docs/operator.md``, "The fleet reader" (tests/operator/test_carry.py). The non-obvious
ones: only a *failed* read is carried (a whole read failed or timed out, or a query group gave no
usable answer: ``SignalSnapshot.failed_queries``), never a genuine unknown; the snapshot is carried
whole with its own ``observed_at``, so the policy judges its true age; and only while its good read
started at most :data:`CARRY_PERIODS` base periods before the failed one, the same bound within
which a tick takes a snapshot without waiting, so a real outage is reported within three reads.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from llmscale.signals.snapshot import CarriedRead, SignalSnapshot

__all__ = ["CARRY_PERIODS", "GoodRead", "carry", "query_failure"]

#: Base periods the last good read may have started before a failed read for its snapshot to be
#: carried through it: the fleet reader's own freshness rule (a tick takes a snapshot whose read
#: started at most two periods ago), so at most two failed reads in a row are carried.
CARRY_PERIODS = 2


@dataclass(frozen=True, slots=True)
class GoodRead:
    """A pool's last snapshot read without a failure.

    Attributes:
        snapshot: the snapshot as read.
        started_s: the event loop's time the read started, seconds.
        failed_reads: failed reads since, each carried through.
    """

    snapshot: SignalSnapshot
    started_s: float
    failed_reads: int = 0


def query_failure(snapshot: SignalSnapshot) -> str | None:
    """Return why ``snapshot``'s read failed for its pool (some query group gave no usable answer),
    or ``None`` when every group answered (unknown values then are genuine answers)."""
    if not snapshot.failed_queries:
        return None
    groups = ", ".join(snapshot.failed_queries)
    return snapshot.error or f"{groups} {'query' if len(snapshot.failed_queries) == 1 else 'queries'} failed"


def carry(
    fresh: SignalSnapshot,
    failure: str | None,
    last: GoodRead | None,
    *,
    started_s: float,
    bound_s: float,
    failed_at: float,
) -> tuple[SignalSnapshot, GoodRead | None]:
    """Return the snapshot to publish for one pool after a read, and the pool's last good read.

    Args:
        fresh: the read's snapshot of the pool (the unknown one, with the reason, when it failed).
        failure: why the read failed for the pool (:func:`query_failure`, or the whole read's
            failure), or ``None`` when it did not.
        last: the pool's last good read before this one, or ``None``.
        started_s: the event loop's time this read started, seconds.
        bound_s: longest time between the start of the last good read and ``started_s`` for its
            snapshot to be carried, seconds (:data:`CARRY_PERIODS` base periods).
        failed_at: this read's time, seconds since the epoch (``CarriedRead.failed_at``).

    Returns:
        ``(published, last good read)``: after a good read, ``fresh`` and the new good read; after
        a failed one within the bound, the last good snapshot with ``carried`` set (its
        ``observed_at`` unchanged) and the good read with one more failure; past the bound or with
        no good read, ``fresh`` and ``None``.
    """
    if failure is None:
        return fresh, GoodRead(fresh, started_s)
    if last is None or not started_s - last.started_s <= bound_s:
        return fresh, None
    failed_reads = last.failed_reads + 1
    carried = dataclasses.replace(
        last.snapshot, carried=CarriedRead(failure=failure, failed_reads=failed_reads, failed_at=failed_at)
    )
    return carried, dataclasses.replace(last, failed_reads=failed_reads)
