"""Carry a pool's last good snapshot through a read that failed, for a short, bounded time.

Pure module: no I/O, no clock (the fleet reader hands in the event loop's read start times and the
wall-clock time of the failed read).

Why: at 1,000 LLMDeployments one of the fleet queries (the per-pool latency quantiles, the dearest)
sometimes passes its timeout, or the whole read does. Each such read made every pool's snapshot
unknown, so every object's ``MetricsAvailable`` flipped to ``False`` and back a read later, and
each flip was a status write (22 writes a second at 1,000 objects in a steady hold; docs/operator.md,
"Scale"). A pool whose last good read is recent now keeps that snapshot through the failure.

Rules (tests/operator/test_carry.py):

- A read *failed* for a pool when the whole read failed or timed out, the source gave no snapshot
  for the pool, or some query group gave no usable answer (``SignalSnapshot.failed_queries``).
  A value that is unknown for any other reason — no pod exports the gauge, a rejected value, a
  window without requests — is a genuine answer and is published as read, never papered over.
- Per snapshot, not per field: the last good snapshot is published whole and unchanged, its
  ``observed_at`` included, so the policy judges its age honestly (``observed_at`` is the newest
  sample's time; merging carried latencies into fresh gauges would make them look as fresh as the
  gauges), and its fields stay one consistent read. The price: when only the quantile query
  failed, the fresh gauges of that read are not used — for at most the bound below.
- The bound, :data:`CARRY_PERIODS` base periods: a snapshot is carried only while the good read
  that made it started at most ``CARRY_PERIODS × period_s`` before the failed read. With one read
  per period that tolerates two failed reads in a row (10 s at the 5 s base period). It is the
  same two periods within which a tick takes the newest snapshot without waiting for a read
  (:meth:`llmscale.controller.fleet.FleetReader.snapshot`: one period between reads, plus one read),
  so a carried snapshot is never older than a snapshot the tick would take from a reader on time.
  Past it, every failure is published as today: the unknown snapshot with the reason, so replicas
  hold and ``MetricsAvailable`` turns ``False`` — a real outage is reported within three reads.
- A carried snapshot has ``carried`` set (:class:`llmscale.signals.snapshot.CarriedRead`: the
  failure, how many failed reads in a row, when); the fleet reader still counts the failed read in
  ``llmscale_signal_read_errors_total`` (its ``on_carried``), and the readers still log it.
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
