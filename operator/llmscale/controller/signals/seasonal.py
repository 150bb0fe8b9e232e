"""The seasonal history of each pool: its request rate around the same time a day and a week ago.

The policy's forecast (:mod:`llmscale.policy.forecast`) grows today's rate as it grew over the same
stretch one period ago; :class:`~llmscale.policy.types.PoolState` carries the rates as a
:class:`~llmscale.policy.types.SeasonalHistory`. This module reads them for every registered pool of
the fleet reader (:mod:`llmscale.controller.signals.fleet`) and caches them:

- **what**: one range query per engine profile and distinct offset
  (:meth:`llmscale.signals.prometheus.PrometheusSignalReader.read_past_rates`), over
  ``[now − offset − SEASONAL_BEFORE_S, now − offset + SEASONAL_AFTER_S]`` at
  :data:`SEASONAL_STEP_S` — the forecast's 5 min smoothing before "the same time" and the longest
  lead time considered after it, as the simulator hands them (``llmscale.sim.counters``). Usually two
  queries per profile (a day, a week ago) whatever the number of pools;
- **offsets**: 86,400 s and 604,800 s, or — when the spec names a time zone (its calendar floors',
  else its trough windows') — the wall-clock day and week there, 23 or 25 hours across a DST change;
- **when**: at most once every :data:`SEASONAL_REFRESH_S` (the history moves slowly), in a task of
  its own, so a slow Prometheus never delays a signal read or a tick;
- **failure**: any failed query drops every pool's history (``seasonal=None``: the forecast uses
  the trend alone), logged once when it starts failing and once when it recovers; a cached history
  older than :data:`SEASONAL_MAX_AGE_S` is not handed out.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol, runtime_checkable
from zoneinfo import ZoneInfo

from llmscale.api import LLMDeploymentSpec
from llmscale.policy.types import RateSeries, SeasonalHistory
from llmscale.signals.pastrates import PastRates
from llmscale.signals.queries import PoolRequest, PoolTarget

__all__ = [
    "SEASONAL_AFTER_S",
    "SEASONAL_BEFORE_S",
    "SEASONAL_MAX_AGE_S",
    "SEASONAL_REFRESH_S",
    "SEASONAL_STEP_S",
    "PastRateSource",
    "SeasonalReader",
    "period_offsets",
    "spec_timezone",
]

_LOG = logging.getLogger(__name__)

#: Seconds of history before "the same time a period ago": the forecast's smoothing (300 s) and a
#: refresh interval's slack, as the simulator's ``_SEASONAL_BEFORE_S``.
SEASONAL_BEFORE_S = 600.0
#: Seconds after it: the longest lead time (cold start) considered, as the simulator's.
SEASONAL_AFTER_S = 1800.0
#: Seconds between values of a series (the simulator's per-minute counts).
SEASONAL_STEP_S = 60.0
#: Fewest seconds between two seasonal reads.
SEASONAL_REFRESH_S = 60.0
#: Oldest cached history handed to a tick, seconds (five missed refreshes).
SEASONAL_MAX_AGE_S = 300.0

_DAY_S = 86_400.0
_WEEK_S = 604_800.0


@runtime_checkable
class PastRateSource(Protocol):
    """A signal source that can read past request rates (the Prometheus reader can)."""

    async def read_past_rates(
        self, pools: Sequence[PoolRequest], start_s: float, end_s: float, step_s: float = 60.0, *, now: float
    ) -> Mapping[PoolTarget, PastRates]:
        """Return each pool's request rate over ``[start_s, end_s]`` at ``step_s`` (``now``: the
        wall clock, seconds since the epoch); raise on failure."""
        ...


def spec_timezone(spec: LLMDeploymentSpec) -> str | None:
    """The IANA time zone the spec's calendar is in: its first calendar floor's
    (``spec.replicas.schedule``), else its first trough window's (``spec.batch.windows``); ``None``
    when it has neither (offsets are then fixed 24 h and 7 days)."""
    if spec.replicas.schedule:
        return str(spec.replicas.schedule[0].timezone)
    if spec.batch is not None and spec.batch.windows:
        return str(spec.batch.windows[0].timezone)
    return None


def period_offsets(now: float, timezone: str | None) -> tuple[float, float]:
    """Return how long ago, in seconds, the same wall-clock time was a day and a week before ``now``.

    Args:
        now: seconds since the epoch.
        timezone: an IANA time zone, or ``None`` for fixed 86,400 s and 604,800 s.

    Returns:
        ``(day_offset_s, week_offset_s)``: e.g. 82,800 s for the day after the spring-forward
        change in Europe/London (that day had 23 hours), 90,000 s after the autumn one.
        Arithmetic on an aware ``datetime`` is wall-clock arithmetic (Python ``datetime`` docs,
        "Aware and Naive Objects"); ``timestamp()`` resolves the result through the zone's rules.

    Raises:
        zoneinfo.ZoneInfoNotFoundError: ``timezone`` is not a known zone (the API validates it).
    """
    if timezone is None:
        return _DAY_S, _WEEK_S
    local = datetime.fromtimestamp(now, ZoneInfo(timezone))
    day = now - (local - timedelta(days=1)).timestamp()
    week = now - (local - timedelta(days=7)).timestamp()
    return day, week


def _series(rates: PastRates | None) -> RateSeries | None:
    if rates is None or not any(v is not None for v in rates.rates_rps):
        return None
    return RateSeries(rates.start_s, rates.step_s, rates.rates_rps)


@dataclass(frozen=True, slots=True)
class _Cached:
    history: SeasonalHistory
    read_loop_s: float


class SeasonalReader:
    """Reads and caches the seasonal history of pools (module docstring).

    Args:
        source: the signal source; one that is not a :class:`PastRateSource` gives no history.
        timeout_s: longest wait for one seasonal read, seconds.

    Attributes:
        reads: seasonal reads finished (answered or failed) since the start.
    """

    def __init__(self, source: object, *, timeout_s: float) -> None:
        self._source = source if isinstance(source, PastRateSource) else None
        self._timeout_s = timeout_s
        self._cache: dict[PoolTarget, _Cached] = {}
        self._last_start_loop_s: float | None = None
        self._task: asyncio.Task[None] | None = None
        self._failing = False
        self.reads = 0

    def get(self, target: PoolTarget, loop_now: float) -> SeasonalHistory | None:
        """The cached history of ``target`` if read at most :data:`SEASONAL_MAX_AGE_S` ago, else ``None``."""
        cached = self._cache.get(target)
        if cached is None or loop_now - cached.read_loop_s > SEASONAL_MAX_AGE_S:
            return None
        return cached.history

    def forget(self, targets: Sequence[PoolTarget]) -> None:
        """Drop the cached history of ``targets``."""
        for target in targets:
            self._cache.pop(target, None)

    def start_if_due(self, pools: Sequence[tuple[PoolRequest, str | None]], now: float, loop_now: float) -> None:
        """Start a read of ``pools`` (each with its time zone) in a task of its own, unless one ran in
        the last :data:`SEASONAL_REFRESH_S` or is still running; never waits for it."""
        if self._source is None or not pools:
            return
        if self._task is not None and not self._task.done():
            return
        if self._last_start_loop_s is not None and loop_now - self._last_start_loop_s < SEASONAL_REFRESH_S:
            return
        self._last_start_loop_s = loop_now
        self._task = asyncio.get_running_loop().create_task(
            self.read(list(pools), now, loop_now), name="llmscale-seasonal-reader"
        )

    async def stop(self) -> None:
        """Cancel a read in flight and wait for it to end."""
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def read(self, pools: Sequence[tuple[PoolRequest, str | None]], now: float, loop_now: float) -> None:
        """Read the history of ``pools`` (each with its time zone) at wall-clock ``now`` and cache it;
        never raises (a failure drops every pool's history, see the module docstring)."""
        source = self._source
        if source is None:
            return
        # A pool selected by pod name (scaleTargetRef): its pods of a day ago are not known.
        wanted = [r for r, _ in pools if r.target.pods is None]
        offsets = {r.target: period_offsets(now, tz) for r, tz in pools if r.target.pods is None}
        by_offset: dict[float, list[PoolRequest]] = {}
        for r in wanted:
            for offset in offsets[r.target]:
                by_offset.setdefault(offset, []).append(r)
        got: dict[float, Mapping[PoolTarget, PastRates]] = {}
        error: str | None = None
        for offset, requests in sorted(by_offset.items()):
            # Whole minutes, so that the grid of every read lines up with the last one.
            start = math.floor((now - offset - SEASONAL_BEFORE_S) / SEASONAL_STEP_S) * SEASONAL_STEP_S
            end = math.ceil((now - offset + SEASONAL_AFTER_S) / SEASONAL_STEP_S) * SEASONAL_STEP_S
            try:
                got[offset] = await asyncio.wait_for(
                    source.read_past_rates(requests, start, end, SEASONAL_STEP_S, now=now), self._timeout_s
                )
            except TimeoutError:
                error = f"did not finish within {self._timeout_s:g} s"
                break
            except Exception as exc:
                error = str(getattr(exc, "why", None) or repr(exc))
                break
        self.reads += 1
        if error is not None:
            self._cache.clear()
            if not self._failing:
                _LOG.warning(
                    f"Failed to read the request rates a day and a week ago of {len(wanted)} pools "
                    f"(forecasting from the trend only until it succeeds): {error}"
                )
            self._failing = True
            return
        if self._failing:
            _LOG.info(f"Read the request rates a day and a week ago of {len(wanted)} pools again")
        self._failing = False
        self._cache.clear()
        for r in wanted:
            day_s, week_s = offsets[r.target]
            day = _series(got[day_s].get(r.target))
            week = _series(got[week_s].get(r.target))
            if day is not None or week is not None:
                self._cache[r.target] = _Cached(SeasonalHistory(day, week, day_s, week_s), loop_now)
