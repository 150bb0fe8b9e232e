"""The signal history :func:`llmscale.policy.decide` reads: which snapshots join it and how long
they stay. Pure: no I/O, no clock; the operator and the simulator both keep their history with
:func:`record_snapshot`, so the policy sees the same kind of history in both.

``decide`` reads the newest snapshot (the one it judges) and the snapshots of the last cold start
(``spec.headroom.coldStartSeconds``), which feed the arrival rate, the burstiness, the live mix and
the trends; it trims what it is given to :func:`history_seconds` itself, so a caller that keeps more
(the operator) decides exactly as one that keeps that much (the simulator). Everything older is dead
weight.

Of the entries before the newest, ``decide`` reads only the pool's aggregates (``observed_at``, the
six signals, ``replicas_reporting``, ``workload``, ``window``): the per-pod detail (``pods``, the
stalled, ignored and silent pod names, ``absent_counters``, ``unknown``, ``quiet``) is read of the
newest alone. :func:`append_snapshot` therefore keeps an entry whole only while it is the newest and
slims it (:func:`slim_snapshot`) when a newer one arrives: per object, the history then costs a
fraction of the memory (issue 14; ``benchmarks/memory_per_object.py`` measures it).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from llmscale.api import LLMDeploymentSpec
from llmscale.policy.mix import RATE_FLOOR_WINDOWS, RATE_WINDOW_S
from llmscale.signals.snapshot import SignalSnapshot

__all__ = ["RATE_HISTORY_S", "append_snapshot", "history_seconds", "record_snapshot", "slim_snapshot", "trim_history"]


#: How far back the arrival rate reads: :data:`~llmscale.policy.mix.RATE_FLOOR_WINDOWS` rate windows
#: (of the default 60 s) and the quarter window a snapshot one window before may be off by, 195 s.
#: With a cold start shorter than a rate window (the real-vLLM scenarios' 40 s) a history of one cold
#: start held no snapshot a window back: the in-flight growth read 0 and a load whose requests had not
#: finished yet read as no arrivals at all (issue 27).
RATE_HISTORY_S = (RATE_FLOOR_WINDOWS + 0.25) * RATE_WINDOW_S


def history_seconds(spec: LLMDeploymentSpec) -> float:
    """Return how far back :func:`~llmscale.policy.decide` reads the history, in seconds.

    One cold start, ``spec.headroom.coldStartSeconds`` (180 s by default), and at least
    :data:`RATE_HISTORY_S`: the headroom trend fits the snapshots observed in ``[now - coldStart,
    now]``; the arrival rate reads the snapshots one, two and three rate windows back; the other
    steps read only the newest snapshot. A caller may keep more (the operator keeps at least its
    ``signal_history_seconds``), never less.
    """
    return max(float(spec.headroom.cold_start_seconds), RATE_HISTORY_S)


def slim_snapshot(snapshot: SignalSnapshot) -> SignalSnapshot:
    """Return ``snapshot`` without the per-pod detail ``decide`` reads only of the newest entry.

    Kept: ``observed_at``, the pool's signals (queue depth, running requests, KV-cache use,
    preemption rate, TTFT and ITL p95, wake demand), ``replicas_reporting``, ``error``, ``workload``
    and ``window``: what the arrival rate, the live mix, the burstiness and the trends read of older
    snapshots. Emptied: ``pods``, ``stalled_pods``, ``sleeping_pods``, ``failing_pods``, ``ignored_pods``, ``silent_pods``,
    ``bridged_pods``, ``absent_counters``, ``unknown`` and ``quiet`` (per pod, they grow with the pool). Returns
    ``snapshot`` itself when it has nothing to drop. Decisions on a history whose older entries are
    slimmed equal those on the whole snapshots (tests/policy/test_history.py).
    """
    if not (snapshot.pods or snapshot.stalled_pods or snapshot.sleeping_pods or snapshot.failing_pods
            or snapshot.ignored_pods or snapshot.silent_pods or snapshot.bridged_pods or snapshot.absent_counters or snapshot.unknown or snapshot.quiet):
        return snapshot
    return dataclasses.replace(snapshot, pods=(), stalled_pods=(), sleeping_pods=(), failing_pods=(), ignored_pods=(),
                               silent_pods=(), bridged_pods=(), absent_counters=(), unknown={}, quiet=())


def append_snapshot(history: Sequence[SignalSnapshot], snapshot: SignalSnapshot) -> tuple[SignalSnapshot, ...]:
    """Return ``history`` with ``snapshot`` appended when it is news, else ``history`` unchanged.

    A snapshot is news when the history is empty, when its samples are newer than the newest
    entry's (``observed_at`` greater), or when it carries an ``error``: a failed or partial read
    must reach the policy as the newest entry even if Prometheus's newest sample did not move,
    so that the policy judges what was just read. A carried snapshot (``carried`` set: the last
    good read published again through a failed one) is news only when its samples are newer. A clean read of samples already in the history
    (Prometheus has not scraped since) adds nothing: one entry per scrape keeps the per-minute
    means of the headroom trend unweighted by how often the caller asks. The entry that stops being
    the newest is kept slimmed (:func:`slim_snapshot`).

    Args:
        history: snapshots, oldest first.
        snapshot: the read just made.

    Returns:
        The new history, oldest first, as a tuple.
    """
    if not history:
        return (snapshot,)
    # A carried snapshot (the last good read published again through a failed one) is news only
    # if its samples are newer: with an ``error`` of its own it would otherwise join every tick.
    if (snapshot.error is not None and snapshot.carried is None) or snapshot.observed_at > history[-1].observed_at:
        return (*history[:-1], slim_snapshot(history[-1]), snapshot)
    return tuple(history)


def trim_history(history: Sequence[SignalSnapshot], now: float, keep_s: float) -> tuple[SignalSnapshot, ...]:
    """Return the snapshots observed at or after ``now - keep_s``, oldest first; never drops the newest.

    The newest entry stays however old it is: ``decide`` must see a stale snapshot to say
    ``MetricsStale`` (an empty history would read as "no snapshot yet").

    Args:
        history: snapshots, oldest first.
        now: seconds since the Unix epoch (the caller's clock, the simulator's simulated time).
        keep_s: how long to keep snapshots, seconds; at least :func:`history_seconds` for ``decide``
            to see everything it reads.

    Raises:
        ValueError: ``keep_s`` is negative.
    """
    if keep_s < 0:
        raise ValueError(f"keep_s must be >= 0, got {keep_s}")
    if not history:
        return ()
    cutoff = now - keep_s
    kept = [s for s in history[:-1] if s.observed_at >= cutoff]
    return (*kept, history[-1])


def record_snapshot(
    history: Sequence[SignalSnapshot], snapshot: SignalSnapshot, now: float, keep_s: float
) -> tuple[SignalSnapshot, ...]:
    """Return the history after one read: :func:`append_snapshot`, then :func:`trim_history`.

    What the operator's tick and the simulator's llmscale policy both do with each snapshot
    before calling ``decide(spec, history, ...)``.

    Args:
        history: snapshots, oldest first.
        snapshot: the read just made.
        now: seconds since the Unix epoch.
        keep_s: how long to keep snapshots, seconds (see :func:`trim_history`).

    Raises:
        ValueError: ``keep_s`` is negative.
    """
    return trim_history(append_snapshot(history, snapshot), now, keep_s)
