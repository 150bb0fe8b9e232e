"""The fleet signal reader: every known pool read together, once per base period, on the signal
source's own threads; each object's tick takes the newest snapshot of its pool.

How pools join, when a tick waits, what a failed read carries, the minute and seasonal reads:
``docs/operator.md``, "The fleet reader". The non-obvious rules: the queries per period do not grow
with the LLMDeployments (seven per engine profile in use; only a ``scaleTargetRef`` pool's own
seven and a wake query are per object), and they never run in the event loop's
default executor, where the Kubernetes writes run; a tick decides on metrics at most one read old,
and a failed read republishes the last good snapshot unchanged (:mod:`.carry`), never zeros.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections import Counter, deque
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from llmscale.controller.signals.carry import CARRY_PERIODS, GoodRead, carry, query_failure
from llmscale.controller.signals.seasonal import SeasonalReader
from llmscale.policy.types import SeasonalHistory
from llmscale.pools import BATCH, INTERACTIVE
from llmscale.signals.assemble import CLOCK_SKEW_S
from llmscale.signals.minute import MinuteSample
from llmscale.signals.profiles import MetricProfile
from llmscale.signals.queries import PoolRequest, PoolTarget
from llmscale.signals.snapshot import SignalSnapshot

__all__ = ["MINUTES_CAUGHT_UP", "MINUTE_LAG_S", "FleetReader", "MinuteSource", "SignalSource"]

_LOG = logging.getLogger(__name__)

#: Seconds after a whole minute before it is read: the scrape that ends the minute is in by then
#: (a scrape's samples carry its start time, and Prometheus stores them as it receives them).
MINUTE_LAG_S = 5.0
#: Most minutes read after a gap (an outage of Prometheus or of the reader); older ones stay unjudged.
MINUTES_CAUGHT_UP = 3
#: Minute samples kept per pool for the ticks to fold in (a tick folds each once).
_MINUTES_KEPT = 5


@runtime_checkable
class MinuteSource(Protocol):
    """A signal source that can also judge minutes (the Prometheus reader can; a canned one may not)."""

    async def read_minutes(self, pools: Sequence[PoolRequest], end_s: float) -> Mapping[PoolTarget, MinuteSample]:
        """Return the minute ending at ``end_s`` of each pool of ``pools`` that Prometheus answered."""
        ...


class SignalSource(Protocol):
    """What the fleet reader reads from: in production
    :class:`llmscale.signals.prometheus.PrometheusSignalReader`."""

    async def read_fleet(self, pools: Sequence[PoolRequest], now: float) -> Mapping[PoolTarget, SignalSnapshot]:
        """Return one snapshot per pool of ``pools``; unknown values are ``None``, never zero.

        Args:
            pools: every pool to read, with its profile, live pods and wake query.
            now: seconds since the epoch.

        Raises:
            Exception: any failure to read; every pool then gets an unknown snapshot with the
                reason (the Prometheus reader itself returns such snapshots rather than raising).
        """
        ...


@dataclass
class _Registration:
    profile: MetricProfile
    wake_query: str | None
    pods: Callable[[], Collection[str]]
    expires_loop_s: float
    timezone: str | None = None
    keep_s: float = 0.0


@dataclass(frozen=True, slots=True)
class _Result:
    snapshot: SignalSnapshot
    started_loop_s: float


class FleetReader:
    """Reads every registered pool together once per ``period_s`` and keeps the newest snapshots.

    Args:
        source: where the signals come from (:class:`SignalSource`).
        period_s: seconds between the starts of two reads (the operator's base tick).
        timeout_s: longest wait for one read, and for a tick waiting for one, seconds.
        clock: wall-clock seconds since the epoch (the ``now`` of each read).
        on_carried: called with the pool once per read that failed for it and through which its
            last good snapshot was carried (the operator counts it in
            ``llmscale_signal_read_errors_total``: a tick sees an unknown snapshot and counts it,
            but a carried one looks good and may be replaced before any tick takes it).

    Attributes:
        reads: reads done since the start (a test's and a benchmark's counter).
    """

    def __init__(
        self, source: SignalSource, *, period_s: float, timeout_s: float, clock: Callable[[], float],
        on_carried: Callable[[PoolTarget], None] | None = None,
    ) -> None:
        self._source = source
        self._on_carried = on_carried
        self._period_s = period_s
        self._timeout_s = timeout_s
        self._clock = clock
        self._pools: dict[PoolTarget, _Registration] = {}
        self._results: dict[PoolTarget, _Result] = {}
        #: Pools a tick waits on in :meth:`snapshot`: never lapsed under it (a tick that waits for a
        #: slow read outlives its own registration, and dropping the pool then dropped the read it waits for).
        self._waiting: Counter[PoolTarget] = Counter()
        self._good: dict[PoolTarget, GoodRead | None] = {}
        self._wake = asyncio.Event()
        self._done = asyncio.Condition()
        self._task: asyncio.Task[None] | None = None
        self._minute_task: asyncio.Task[None] | None = None
        self._minutes: dict[PoolTarget, deque[MinuteSample]] = {}
        self._last_minute_end: float | None = None
        #: Prometheus's clock less the operator's, from the last read that measured it (0 within
        #: CLOCK_SKEW_S): the minute judged is Prometheus's own (issue 21).
        self.clock_skew_s = 0.0
        self._seasonal = SeasonalReader(source, timeout_s=timeout_s)
        self.reads = 0
        self.minute_reads = 0

    # -- registrations ------------------------------------------------------------------------

    def register(
        self,
        target: PoolTarget,
        profile: MetricProfile,
        *,
        pods: Callable[[], Collection[str]],
        wake_query: str | None,
        keep_s: float,
        loop_now: float,
        timezone: str | None = None,
    ) -> None:
        """Add or renew one pool; it is read from the next read on, until ``keep_s`` after ``loop_now``.

        Args:
            target: the pool.
            profile: its engine's metric names.
            pods: returns the names of the pool's pods in the API server when called (at read time).
            wake_query: ``spec.scaling.wake.query``, or ``None``.
            keep_s: loop seconds the registration lasts without renewal (two of the object's ticks).
            loop_now: the event loop's time now.
            timezone: the IANA time zone of the spec's calendar
                (:func:`llmscale.controller.signals.seasonal.spec_timezone`), for the wall-clock day and week
                of the seasonal history; ``None``: fixed 24 h and 7 days.
        """
        # Re-keyed, not updated: the target's own fields beyond its identity (the pod names of a
        # pool selected by name) are the newest.
        self._pools.pop(target, None)
        self._pools[target] = _Registration(profile, wake_query, pods, loop_now + keep_s, timezone, keep_s)

    def forget(self, namespace: str, name: str) -> None:
        """Stop reading every pool of the LLMDeployment ``namespace/name`` and drop its snapshots."""
        for target in [t for t in self._pools if (t.namespace, t.deployment) == (namespace, name)]:
            del self._pools[target]
        for target in [t for t in self._results if (t.namespace, t.deployment) == (namespace, name)]:
            del self._results[target]
        for target in [t for t in self._good if (t.namespace, t.deployment) == (namespace, name)]:
            del self._good[target]
        for target in [t for t in self._minutes if (t.namespace, t.deployment) == (namespace, name)]:
            del self._minutes[target]
        self._seasonal.forget([PoolTarget(namespace, name, pool) for pool in (INTERACTIVE, BATCH)])

    @property
    def pools(self) -> tuple[PoolTarget, ...]:
        """The pools read now."""
        return tuple(self._pools)

    # -- snapshots for the ticks ---------------------------------------------------------------

    async def snapshot(self, target: PoolTarget) -> SignalSnapshot:
        """Return the newest snapshot of ``target`` (registered first), waiting for a read if the
        newest is older than two periods or there is none; never raises (``docs/operator.md``, "The fleet reader")."""
        loop = asyncio.get_running_loop()
        asked = loop.time()
        result = self._results.get(target)
        if result is not None and asked - result.started_loop_s <= 2 * self._period_s:
            return result.snapshot
        self._wake.set()

        def newer() -> bool:
            got = self._results.get(target)
            return got is not None and got.started_loop_s >= asked

        async def wait() -> None:
            async with self._done:
                await self._done.wait_for(newer)

        self._waiting[target] += 1
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wait(), self._timeout_s)
        finally:
            self._waiting[target] -= 1
            if self._waiting[target] <= 0:
                del self._waiting[target]
            # The registration's time runs from the end of the wait, not from the tick's start: a
            # tick that waited longer than it (slow reads) left its pool to lapse before its next
            # tick, which then found no snapshot and waited for a whole new read (a fresh-clone run:
            # MetricsAvailable=False "no signal read … finished within 10 s" under real vLLM).
            reg = self._pools.get(target)
            if reg is not None:
                reg.expires_loop_s = max(reg.expires_loop_s, loop.time() + reg.keep_s)
        result = self._results.get(target)
        if result is not None:
            return result.snapshot
        return SignalSnapshot(
            observed_at=self._clock(),
            error=f"no signal read of {target} finished within {self._timeout_s:g} s",
        )

    def seasonal(self, target: PoolTarget) -> SeasonalHistory | None:
        """The request rate of ``target`` around the same time a day and a week ago, from the last
        seasonal read (at most a few minutes old); ``None`` when not read, failed, or too old. Never
        waits."""
        return self._seasonal.get(target, asyncio.get_running_loop().time())

    def start_seasonal_read(self) -> None:
        """Start a seasonal read of every registered pool in a task of its own, if one is due
        (:meth:`llmscale.controller.signals.seasonal.SeasonalReader.start_if_due`)."""
        pools = [(PoolRequest(t, r.profile), r.timezone) for t, r in self._pools.items()]
        self._seasonal.start_if_due(pools, self._clock(), asyncio.get_running_loop().time())

    @property
    def seasonal_reads(self) -> int:
        """Seasonal reads finished since the start (a test's counter)."""
        return self._seasonal.reads

    def minutes(self, target: PoolTarget) -> tuple[MinuteSample, ...]:
        """The newest minute samples of ``target``, oldest first (a tick folds in the ones it has not)."""
        return tuple(self._minutes.get(target, ()))

    async def read_minutes_due(self) -> int:
        """Read the whole minutes that ended at least :data:`MINUTE_LAG_S` ago and were not read yet
        (at most :data:`MINUTES_CAUGHT_UP`), for every registered pool and its batch pool; return
        how many minutes were read. A source that cannot judge minutes reads none."""
        if not isinstance(self._source, MinuteSource) or not self._pools:
            return 0
        # The minute is Prometheus's own: with the operator's clock 120 s ahead, the operator's minute
        # lies in Prometheus's future and would be judged on nothing; 120 s behind, on an old one.
        newest = math.floor((self._clock() + self.clock_skew_s - MINUTE_LAG_S) / 60.0) * 60.0
        first = newest if self._last_minute_end is None else self._last_minute_end + 60.0
        first = max(first, newest - 60.0 * (MINUTES_CAUGHT_UP - 1))
        requests: dict[PoolTarget, PoolRequest] = {}
        for target, reg in self._pools.items():
            for pool in (INTERACTIVE, BATCH):
                twin = PoolTarget(target.namespace, target.deployment, pool)
                requests.setdefault(twin, PoolRequest(twin, reg.profile))
        done = 0
        end = first
        # One query per engine profile, one after another, each up to 1.8 query timeouts: the wait
        # grows with them (it holds no tick back), so that a slow second profile does not throw the
        # first one's samples away with the minute.
        wait_s = self._timeout_s * max(1, len({r.profile.name for r in requests.values()}))
        while end <= newest:
            try:
                samples = await asyncio.wait_for(self._source.read_minutes(list(requests.values()), end), wait_s)
            except Exception as exc:  # the minute stays unjudged; the next read tries the next one
                _LOG.warning(f"Failed to read the minute ending at {end:.0f} of {len(requests)} pools: {exc!r}")
                samples = {}
            served = {(t.namespace, t.deployment) for t in self._pools}
            for target, sample in samples.items():
                if (target.namespace, target.deployment) not in served:
                    continue  # forgotten while the read was in flight: a recreated object starts clean
                self._minutes.setdefault(target, deque(maxlen=_MINUTES_KEPT)).append(sample)
            self._last_minute_end = end
            self.minute_reads += 1
            done += 1
            end += 60.0
        return done

    # -- the reader ------------------------------------------------------------------------------

    async def read_once(self) -> None:
        """Read every registered pool once (after dropping lapsed registrations) and publish the
        snapshots; where the read failed or timed out for a pool, publish its last good snapshot
        if that read started at most :data:`~llmscale.controller.signals.carry.CARRY_PERIODS` periods ago
        (:func:`llmscale.controller.signals.carry.carry`), else an unknown snapshot with the reason."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        for target in [t for t, r in self._pools.items() if r.expires_loop_s < started and t not in self._waiting]:
            del self._pools[target]
            self._results.pop(target, None)
            self._good.pop(target, None)
            for pool in (INTERACTIVE, BATCH):
                self._minutes.pop(PoolTarget(target.namespace, target.deployment, pool), None)
            self._seasonal.forget([target])
        requests = []
        for target, reg in self._pools.items():
            try:
                pods: frozenset[str] | None = frozenset(reg.pods())
            except Exception as exc:  # an index the operator cannot read: trust the series
                _LOG.warning(f"Failed to list the pods of {target} from the pod index: {exc!r}")
                pods = None
            requests.append(PoolRequest(target, reg.profile, pods, reg.wake_query))
        if not requests:
            return
        now = self._clock()
        error: str | None = None
        snapshots: Mapping[PoolTarget, SignalSnapshot] = {}
        try:
            snapshots = await asyncio.wait_for(self._source.read_fleet(requests, now), self._timeout_s)
        except TimeoutError:
            error = f"signal read of {len(requests)} pools did not finish within {self._timeout_s:g} s"
        except Exception as exc:  # any failure of the source is "unknown", never zero
            error = f"signal read failed: {exc!r}"
        if error is not None:
            _LOG.warning(f"Failed to read the signals of {len(requests)} pools: {error}")
        self._note_skew(snapshots.values())
        bound_s = CARRY_PERIODS * self._period_s
        carried = 0
        for r in requests:
            if r.target not in self._pools:
                # Forgotten while the read was in flight (the object was deleted, :meth:`forget`):
                # nothing is published or counted for it, so its metric series stay dropped.
                continue
            snap = snapshots.get(r.target)
            failure = query_failure(snap) if snap is not None else None
            if snap is None:
                failure = error or "the signal source returned no snapshot"
                snap = SignalSnapshot(observed_at=now, error=failure)
            snap, self._good[r.target] = carry(
                snap, failure, self._good.get(r.target), started_s=started, bound_s=bound_s, failed_at=now
            )
            if snap.carried is not None:
                carried += 1
                if self._on_carried is not None:
                    self._on_carried(r.target)
            self._results[r.target] = _Result(snap, started)
        if carried:
            _LOG.info(f"Kept the last good signals of {carried} of {len(requests)} pools through a failed read "
                      f"(read at most {bound_s:g} s before it)")
        self.reads += 1
        async with self._done:
            self._done.notify_all()

    def _note_skew(self, snapshots: Collection[SignalSnapshot]) -> None:
        """Keep the clock skew the read measured (the median over its answered pools; past
        :data:`~llmscale.signals.assemble.CLOCK_SKEW_S` only, the bound within which ages are not
        corrected either); a read that measured none keeps the last."""
        skews = sorted(s.clock_skew_s for s in snapshots if s.clock_skew_s is not None and s.carried is None)
        if not skews:
            return
        skew = skews[len(skews) // 2]
        self.clock_skew_s = skew if abs(skew) > CLOCK_SKEW_S else 0.0

    async def run(self) -> None:
        """Read every ``period_s`` until cancelled; a tick that needs a newer read wakes it early."""
        loop = asyncio.get_running_loop()
        while True:
            self._wake.clear()
            started = loop.time()
            try:
                await self.read_once()
                self.start_seasonal_read()
                self._start_minute_read()
            except Exception:  # never let one bad read stop the reader
                _LOG.exception("Failed a signal read round")
            rest = max(0.0, self._period_s - (loop.time() - started))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), rest)

    def _start_minute_read(self) -> None:
        """Start :meth:`read_minutes_due` in a task of its own unless one is still running: a minute
        read (up to :data:`MINUTES_CAUGHT_UP` minutes, each up to ``timeout_s`` per engine profile)
        never holds back the next fleet read, on which the ticks wait."""
        if self._minute_task is not None and not self._minute_task.done():
            return

        async def minutes() -> None:
            try:
                await self.read_minutes_due()
            except Exception:  # the minutes stay unjudged; the next round tries again
                _LOG.exception("Failed a minute read")

        self._minute_task = asyncio.get_running_loop().create_task(minutes(), name="llmscale-minute-reader")

    def start(self) -> None:
        """Start :meth:`run` as a task of the running loop (no-op when running)."""
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self.run(), name="llmscale-fleet-reader")
            _LOG.info(f"Started the fleet signal reader: every {self._period_s:g} s")

    async def stop(self) -> None:
        """Cancel :meth:`run` and a minute read in flight, and wait for them to end."""
        task, self._task = self._task, None
        # The read loop first: it starts the seasonal and minute reads, so none starts after theirs stop.
        for t in (task, self._minute_task):
            if t is not None:
                t.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await t
        self._minute_task = None
        await self._seasonal.stop()
        if task is not None:
            _LOG.info("Stopped the fleet signal reader")
