"""The signal history :func:`llmscale.policy.decide` reads: which snapshots join it and how long
they stay. Pure: no I/O, no clock; the operator and the simulator both keep their history with
:func:`record_snapshot`, so the policy sees the same kind of history in both.

``decide`` reads the newest snapshot (the one it judges) and the snapshots of the last cold start
(``spec.headroom.coldStartSeconds``), which feed the arrival rate, the burstiness, the live mix and
the trends; it trims what it is given to :func:`history_seconds` itself, so a caller that keeps more
(the operator) decides exactly as one that keeps that much (the simulator). Everything older is dead
weight.
"""

from __future__ import annotations

from collections.abc import Sequence

from llmscale.api import LLMDeploymentSpec
from llmscale.signals.snapshot import SignalSnapshot

__all__ = ["append_snapshot", "history_seconds", "record_snapshot", "trim_history"]


def history_seconds(spec: LLMDeploymentSpec) -> float:
    """Return how far back :func:`~llmscale.policy.decide` reads the history, in seconds.

    One cold start, ``spec.headroom.coldStartSeconds`` (180 s by default): the headroom trend fits
    the snapshots observed in ``[now - coldStart, now]``; the other steps read only the newest
    snapshot. A caller may keep more (the operator keeps at least its
    ``signal_history_seconds``), never less.
    """
    return float(spec.headroom.cold_start_seconds)


def append_snapshot(history: Sequence[SignalSnapshot], snapshot: SignalSnapshot) -> tuple[SignalSnapshot, ...]:
    """Return ``history`` with ``snapshot`` appended when it is news, else ``history`` unchanged.

    A snapshot is news when the history is empty, when its samples are newer than the newest
    entry's (``observed_at`` greater), or when it carries an ``error``: a failed or partial read
    must reach the policy as the newest entry even if Prometheus's newest sample did not move,
    so that the policy judges what was just read. A clean read of samples already in the history
    (Prometheus has not scraped since) adds nothing: one entry per scrape keeps the per-minute
    means of the headroom trend unweighted by how often the caller asks.

    Args:
        history: snapshots, oldest first.
        snapshot: the read just made.

    Returns:
        The new history, oldest first, as a tuple.
    """
    if not history or snapshot.error is not None or snapshot.observed_at > history[-1].observed_at:
        return (*history, snapshot)
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
