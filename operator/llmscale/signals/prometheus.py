"""Read the signals of every LLMDeployment pool from Prometheus: a constant number of queries a tick.

The imperative shell of :mod:`llmscale.signals`: it owns the HTTP client (prometheus-api-client's
:class:`~prometheus_api_client.PrometheusConnect`, synchronous, on ``requests``) and a small
thread pool of its own, sends the fleet queries of :func:`~llmscale.signals.queries.fleet_queries`
(seven per engine profile in use, whatever the number of pools), and hands the answers to the pure
:mod:`.answer` and :mod:`.assemble`. Nothing here raises on a bad answer or a failed request:
every failure becomes ``error`` and a reason in ``unknown`` on the snapshots, and every value that
is not a measurement becomes ``None`` ("unknown is not zero").

The rate window is chosen once per read (:mod:`.window`): the one set, or ``max(1m, 4 × scrape
interval)`` with the interval read from ``/api/v1/targets`` (``scrapeInterval`` of the engine
targets) or, where that API is missing (Thanos, Mimir), from the sample spacing; the interval is
read again every ``interval_refresh_s``.

Freshness: ``observed_at`` is the newest *sample* timestamp of the queue-depth gauge among the
contributing pods, not the evaluation time that an instant query stamps on every answer. When a
scrape fails Prometheus writes staleness markers at once; a pod still in the API server whose
scrape failed slowly (timed out) keeps its last gauges, with their own timestamps, for up to four
scrape intervals after its last sample (``bridged_pods``), so that a slow ``/metrics`` is not "no
signals"; a refused scrape (the engine is down) is not bridged and the pod drops out at once; when
scraping stops without a marker (Prometheus restarted, a federated or remote-written source), the
last sample is returned for up to 5 minutes (the lookback delta): give the reader the pool's live
pods and such series are ignored. A dead replica's samples stay in rates and latency quantiles
until they leave the window, and a replica younger than the window reads a low rate, because
``rate()`` divides by the whole range. The age assumes the operator's and Prometheus's clocks agree.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import logging
import re
import threading
import time
from collections.abc import Collection, Iterable, Mapping, Sequence
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor
from datetime import UTC, datetime
from functools import partial
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import requests
from prometheus_api_client import PrometheusConnect
from prometheus_api_client.exceptions import PrometheusApiClientException
from requests.adapters import HTTPAdapter
from urllib3.exceptions import MaxRetryError
from urllib3.util.retry import Retry

from llmscale.signals.answer import (
    BRIDGE_INTERVALS,
    FleetAnswer,
    GaugeMemory,
    bridge_missed_scrapes,
    parse_group,
    parse_wake,
)
from llmscale.signals.assemble import assemble
from llmscale.signals.auth import CredentialsUnreadable, build_http
from llmscale.signals.config import ReaderSettings
from llmscale.signals.minute import MinuteSample, minute_samples
from llmscale.signals.pastrates import PastRates, PastRatesUnread, past_rates
from llmscale.signals.profiles.base import MetricProfile
from llmscale.signals.queries import (
    GROUPS,
    PoolRequest,
    PoolTarget,
    fleet_queries,
    interval_probe_query,
    minute_query,
    parse_duration,
    past_rate_query,
    samples_query,
    wake_expression,
    wake_query,
)
from llmscale.signals.scope import UnscopedQuery, scoped_query
from llmscale.signals.snapshot import RateWindow, SignalSnapshot
from llmscale.signals.window import check_samples, choose_window, interval_from_samples, interval_from_targets

__all__ = ["PoolRequest", "PrometheusSignalReader", "ReaderSettings"]

_LOG = logging.getLogger(__name__)
#: Query timeouts a read's two steps share (:meth:`PrometheusSignalReader._ask`): short of the two
#: that ``signal_timeout_seconds`` (10 s) covers, leaving a tenth of those to parse the answers.
READ_BUDGET_TIMEOUTS = 1.8

#: Seconds before a failed reading of the scrape interval is tried again.
_INTERVAL_RETRY_S = 60.0
_STATUS = re.compile(r"HTTP Status Code (\d{3})")


class _Failed(Exception):
    """A request got no usable answer.

    ``fatal`` when the next query would fail alike (stop the read); ``transport`` when Prometheus
    was not reached or refused us at all (no point trying another endpoint).
    """

    def __init__(self, why: str, fatal: bool, transport: bool = False) -> None:
        super().__init__(why)
        self.why = why
        self.fatal = fatal
        self.transport = transport


def _describe(exc: requests.RequestException) -> str:
    """Return the root cause of a ``requests`` failure, without the (long) query URL."""
    cause: BaseException = exc
    if exc.args and isinstance(exc.args[0], MaxRetryError) and exc.args[0].reason is not None:
        cause = exc.args[0].reason
    text = str(cause)
    # urllib3 prefixes "HTTPConnectionPool(host=..., port=...): "; the URL is in the message already.
    _, sep, rest = text.partition("): ")
    return f"{type(cause).__name__}: {rest if sep else text}"


def _scopes(
    by_profile: Iterable[list[PoolRequest]], scope: PoolTarget | None
) -> list[tuple[list[PoolRequest], PoolTarget | None]]:
    """The pools of each profile grouped by the queries that read them: those selected by
    llmscale's labels together (in ``scope``), and each pool selected by pod name
    (``target.pods``: a ``spec.scaleTargetRef`` workload, whose pods carry none of llmscale's
    labels) on its own, with its live pods (``request.pods``) as the names when known."""
    out: list[tuple[list[PoolRequest], PoolTarget | None]] = []
    for requests_ in by_profile:
        if scope is not None:
            out.append((requests_, scope))
            continue
        labelled = [r for r in requests_ if r.target.pods is None]
        if labelled:
            out.append((labelled, None))
        for r in requests_:
            if r.target.pods is not None:
                names = r.pods if r.pods is not None else r.target.pods
                out.append(([r], dataclasses.replace(r.target, pods=tuple(sorted(names)))))
    return out


class PrometheusSignalReader:
    """Reads :class:`SignalSnapshot` objects of LLMDeployment pools from one Prometheus.

    Args:
        url: Prometheus base URL, e.g. ``http://prometheus.monitoring:9090`` (no ``/api/v1``);
            ``https://`` for TLS.
        headers: extra HTTP headers, added to ``settings.auth.headers``.
        session: a ``requests.Session`` to use (proxies); TLS and credentials come from
            ``settings.auth``. A new one when ``None``.
        settings: query, HTTP and authentication settings.
        namespaces: the namespaces whose pools are read (an operator shard's, by exact name); the
            fleet-wide queries select only their series. Empty: every namespace.

    Nothing is read from the environment. One reader serves every pool: :meth:`read_fleet` reads
    them all with seven queries per engine profile; :meth:`read` is the same for one pool. The
    async forms run on the reader's own thread pool, so reads never wait behind other blocking
    work; the connection pool (urllib3) is thread-safe.
    """

    def __init__(
        self,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        session: requests.Session | None = None,
        settings: ReaderSettings | None = None,
        namespaces: Collection[str] = (),
    ) -> None:
        self.url = url.rstrip("/")
        self.namespaces = tuple(sorted(set(namespaces)))
        self.settings = settings or ReaderSettings()
        http, auth, extra = build_http(self.settings.auth, session)
        retry = Retry(
            total=self.settings.retries,
            read=0,  # a query that timed out is not retried: it would time out again
            backoff_factor=0,
            status_forcelist=(502, 503, 504),
            allowed_methods=frozenset({"GET", "POST"}),
            raise_on_status=False,  # hand back the last answer, so the error names its status
        )
        self._client = PrometheusConnect(
            url=self.url,
            headers={**extra, **(headers or {})} or None,
            session=http,
            retry=retry,
            method="POST",  # the query in the body (_FormBody): a shard's queries pass 8 KB
            auth=auth,  # type: ignore[arg-type]  # annotated tuple, takes any requests auth
            timeout=self.settings.timeout_s,  # type: ignore[arg-type]  # annotated int, takes float
        )
        # prometheus-api-client mounts an adapter of urllib3's default 10 connections; a read sends
        # up to one query per group at once, and a timed-out read's queries may still be running
        # beside the next read's: room for two reads of every read thread, so none is dropped.
        http.mount(self.url, _FormBody(max_retries=retry, pool_maxsize=2 * self.settings.max_workers * len(GROUPS)))
        self._executor = ThreadPoolExecutor(self.settings.max_workers, thread_name_prefix="llmscale-signals")
        # The minute and seasonal reads on two threads of their own: they run beside the fleet reads
        # (each in a task of its own) and wait up to 1.8 timeouts a query, so on the fleet reads'
        # threads a slow one held a thread a fleet read, on which the ticks wait, queued behind.
        self._background = ThreadPoolExecutor(2, thread_name_prefix="llmscale-signals-background")
        # The queries of one read sent together (:meth:`_ask`): a pool apart from the reads' own
        # threads, which wait on them; six per read thread, so reads in parallel never queue.
        self._queries = ThreadPoolExecutor(
            self.settings.max_workers * (len(GROUPS) - 1), thread_name_prefix="llmscale-queries"
        )
        self._lock = threading.Lock()
        self._tenants: dict[str, PrometheusConnect] = {}  # the client of each namespace's own queries
        self._interval: tuple[float | None, str, float] | None = None  # (seconds, source, read at)
        self._gauges: GaugeMemory = {}  # each live pod's last gauges, to bridge a failed scrape

    # -- the rate window ------------------------------------------------------------------------

    def window(self, profiles: Iterable[MetricProfile], now: float) -> RateWindow:
        """Return the rate window of a read at ``now`` (reads the scrape interval when due).

        Args:
            profiles: the engine profiles of the read (their queue-depth gauge is the sample
                spacing probe where ``/api/v1/targets`` is missing).
            now: seconds since the epoch; the interval is read again ``interval_refresh_s`` after
                the last reading.
        """
        s = self.settings
        if s.scrape_interval is not None:
            interval: float | None = parse_duration(s.scrape_interval)
            source = "set"
        else:
            interval, source = self._scrape_interval(list(profiles), now)
        return choose_window(s.rate_window, parse_duration(s.min_rate_window), interval, source)

    def _scrape_interval(self, profiles: list[MetricProfile], now: float) -> tuple[float | None, str]:
        with self._lock:
            cached = self._interval
        if cached is not None:
            value, source, at = cached
            due = self.settings.interval_refresh_s if value is not None else _INTERVAL_RETRY_S
            if now - at < due:
                return value, source
        value, source = self._read_interval(profiles)
        with self._lock:
            self._interval = (value, source, now)
        if value is not None and (cached is None or cached[0] != value):
            _LOG.info(
                "Read scrape interval %g s of the engine targets from %s at %s", value, source, self.url
            )
        return value, source

    def _read_interval(self, profiles: list[MetricProfile]) -> tuple[float | None, str]:
        try:
            data = self._call(lambda: self._client.get_targets(state="active"))
        except _Failed as exc:
            if exc.transport:
                _LOG.warning("Failed to read the scrape interval from %s: %s", self.url, exc.why)
                return None, "unknown"
        else:
            interval = interval_from_targets(data, self.settings.labels)
            if interval is not None:
                return interval, "targets"
        # No targets API (Thanos, Mimir, Cortex) or no engine target there: the sample spacing
        # of the best-covered queue-depth series of each profile.
        probe = self.settings.interval_probe
        best: float | None = None
        for profile in profiles:
            query = interval_probe_query(profile, self.settings.labels, None, probe, self.namespaces)
            try:
                found = self._call(lambda q=query: self._client.custom_query(q))  # type: ignore[misc]
                if (
                    not found
                    or not isinstance(found[0], Mapping)
                    or not isinstance(found[0].get("metric"), Mapping)
                ):
                    continue
                query = samples_query(profile.waiting, found[0]["metric"], probe)
                matrix = self._call(lambda q=query: self._client.custom_query(q))  # type: ignore[misc]
                times = [float(v[0]) for v in matrix[0]["values"]] if matrix else []
            except (_Failed, KeyError, IndexError, TypeError, ValueError):
                continue
            interval = interval_from_samples(times)
            if interval is not None:
                best = interval if best is None else max(best, interval)
        return (best, "samples") if best is not None else (None, "unknown")

    # -- reads ----------------------------------------------------------------------------------

    def queries_for(self, profile: MetricProfile, target: PoolTarget | None, window: str) -> dict[str, str]:
        """Return the queries a read sends, by group (for logs, docs and ``--explain``).

        ``target`` ``None`` gives the fleet-wide queries; a pool narrows the selector to it.
        """
        s = self.settings
        return fleet_queries(profile, s.labels, window, s.quantile, target, s.copy_labels, self.namespaces)

    def read_fleet_sync(self, pools: Sequence[PoolRequest], now: float) -> dict[PoolTarget, SignalSnapshot]:
        """Read every pool of ``pools``; blocks for up to a few timeouts.

        Sends the seven fleet queries once per engine profile in ``pools``, plus one query per
        LLMDeployment with a wake query, scoped to its namespace and never joined with another's
        (:func:`~llmscale.signals.queries.wake_query`), and
        splits the answers per pool and pod. Never raises for Prometheus or network failures: they are returned as
        ``error`` and ``unknown`` on the snapshots.

        Args:
            pools: the pools to read, each with its profile and (ideally) its live pods.
            now: the caller's time, seconds since the epoch (``observed_at`` when Prometheus gave
                no timestamp; the interval cache's clock).

        Returns:
            One snapshot per pool of ``pools``, keyed by its target.
        """
        return self._read(pools, now, scope=None)

    async def read_fleet(self, pools: Sequence[PoolRequest], now: float) -> dict[PoolTarget, SignalSnapshot]:
        """Async :meth:`read_fleet_sync`, on the reader's own thread pool."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, partial(self.read_fleet_sync, pools, now))

    def read_sync(
        self,
        profile: MetricProfile,
        target: PoolTarget,
        now: float,
        pods: Collection[str] | None = None,
    ) -> SignalSnapshot:
        """Read one pool (the fleet queries narrowed to it); see :meth:`read_fleet_sync`.

        Args:
            profile: the engine's metric names.
            target: the pool.
            now: the caller's time, seconds since the epoch.
            pods: the pool's pods in the API server, or ``None`` to trust the series (or to take
                ``target.pods``, the pods of a workload selected by name).
        """
        if pods is None and target.pods is not None:
            pods = target.pods
        request = PoolRequest(target, profile, frozenset(pods) if pods is not None else None)
        return self._read([request], now, scope=target)[target]

    async def read(
        self,
        profile: MetricProfile,
        target: PoolTarget,
        now: float,
        pods: Collection[str] | None = None,
    ) -> SignalSnapshot:
        """Async :meth:`read_sync`, on the reader's own thread pool."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, partial(self.read_sync, profile, target, now, pods))

    def read_minutes_sync(self, pools: Sequence[PoolRequest], end_s: float) -> dict[PoolTarget, MinuteSample]:
        """Judge-ready figures of the minute ending at ``end_s`` for every pool of ``pools``: one
        instant query per engine profile (:func:`~llmscale.signals.queries.minute_query`) evaluated
        at ``end_s``, whatever the number of pools.

        Each query waits up to :data:`READ_BUDGET_TIMEOUTS` query timeouts, as a fleet read's dear
        queries do: the minute read holds back no tick (it runs in a task of its own), and at 1,000
        pools a fixed 5 s left a minute unjudged every two or three minutes.

        Returns:
            One :class:`MinuteSample` per pool whose profile's query was answered; the pools of a
            query that failed are left out (their minute is not judged) and the failure is logged.
        """
        by_profile: dict[str, list[PoolRequest]] = {}
        for request in pools:
            by_profile.setdefault(request.profile.name, []).append(request)
        s = self.settings
        out: dict[PoolTarget, MinuteSample] = {}
        for requests_ in by_profile.values():
            profile = requests_[0].profile
            query = minute_query(profile, s.labels, s.quantile, s.copy_labels, self.namespaces)
            try:
                result = self._call(lambda q=query: self._client.custom_query(  # type: ignore[misc]
                    q, params={"time": end_s}, timeout=READ_BUDGET_TIMEOUTS * s.timeout_s))
            except _Failed as exc:
                _LOG.warning("Failed to read the minute ending %s of %d pool(s) from Prometheus at %s: %s",
                             end_s, len(requests_), self.url, exc.why)
                continue
            answer = FleetAnswer()
            parse_group(answer, "minute", result, s.labels)
            if "minute" in answer.failed:
                _LOG.warning("Failed to read the minute ending %s from Prometheus at %s: %s",
                             end_s, self.url, answer.failed["minute"])
                continue
            out.update(minute_samples(answer, end_s, [r.target for r in requests_],
                                      profile.ttft_buckets_s, profile.itl_buckets_s))
        return out

    async def read_minutes(self, pools: Sequence[PoolRequest], end_s: float) -> dict[PoolTarget, MinuteSample]:
        """Async :meth:`read_minutes_sync`, on the reader's own thread pool."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._background, partial(self.read_minutes_sync, pools, end_s))

    def read_past_rates_sync(
        self, pools: Sequence[PoolRequest], start_s: float, end_s: float, step_s: float = 60.0, *, now: float
    ) -> dict[PoolTarget, PastRates]:
        """Every pool's finished-request rate over ``[start_s, end_s]`` (a stretch a day or a week
        back) at ``step_s``: one range query per engine profile
        (:func:`~llmscale.signals.queries.past_rate_query`), whatever the number of pools. The
        rate window is the read's (:meth:`window`), as for the live ``request_rate``.

        Args:
            pools: the pools to read (pools selected by pod name are skipped: their pods of a day
                ago are not known).
            start_s / end_s: the stretch, seconds since the epoch (``start_s`` < ``end_s``).
            step_s: seconds between values (> 0).
            now: the caller's time, seconds since the epoch (the scrape interval cache's clock).

        Returns:
            One :class:`PastRates` per pool Prometheus had a series of.

        Raises:
            PastRatesUnread: a query failed or its answer was not a matrix (the caller then has no
                past rates at all rather than some pools' only).
        """
        by_profile: dict[str, list[PoolRequest]] = {}
        for request in pools:
            if request.target.pods is None:
                by_profile.setdefault(request.profile.name, []).append(request)
        if not by_profile:
            return {}
        s = self.settings
        profiles = [requests_[0].profile for requests_ in by_profile.values()]
        window = self.window(profiles, now).promql
        out: dict[PoolTarget, PastRates] = {}
        for requests_ in by_profile.values():
            query = past_rate_query(requests_[0].profile, s.labels, window, s.copy_labels, self.namespaces)
            if query is None:
                continue
            params = {"query": query, "start": start_s, "end": end_s, "step": step_s}
            try:
                result = self._call(lambda p=params: self._query_range(p))  # type: ignore[misc]
            except _Failed as exc:
                raise PastRatesUnread(exc.why) from None
            out.update(past_rates(result, s.labels, [r.target for r in requests_], start_s, end_s, step_s))
        return out

    async def read_past_rates(
        self, pools: Sequence[PoolRequest], start_s: float, end_s: float, step_s: float = 60.0, *, now: float
    ) -> dict[PoolTarget, PastRates]:
        """Async :meth:`read_past_rates_sync`, on the reader's own thread pool."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self._background, partial(self.read_past_rates_sync, pools, start_s, end_s, step_s, now=now)
        )

    def _query_range(self, params: Mapping[str, Any]) -> Any:
        """``/api/v1/query_range`` of ``params`` (``query``, ``start``, ``end``, ``step``).

        prometheus-api-client's ``custom_query_range`` rounds ``start``/``end`` to whole seconds;
        the exact ones are passed again in ``params``, which it lets override them.
        """
        start, end = float(params["start"]), float(params["end"])
        return self._client.custom_query_range(
            str(params["query"]),
            start_time=_utc(start),
            end_time=_utc(end),
            step=f"{float(params['step']):g}",
            params={"start": f"{start:.3f}", "end": f"{end:.3f}"},
        )

    def close(self) -> None:
        """Close the HTTP session and stop the reader's threads."""
        self._executor.shutdown(wait=False, cancel_futures=True)
        self._background.shutdown(wait=False, cancel_futures=True)
        self._queries.shutdown(wait=False, cancel_futures=True)
        self._client.close()

    def _read(
        self, pools: Sequence[PoolRequest], now: float, scope: PoolTarget | None
    ) -> dict[PoolTarget, SignalSnapshot]:
        by_profile: dict[str, list[PoolRequest]] = {}
        for request in pools:
            by_profile.setdefault(request.profile.name, []).append(request)
        profiles = [requests_[0].profile for requests_ in by_profile.values()]
        window = self.window(profiles, now) if profiles else None
        out: dict[PoolTarget, SignalSnapshot] = {}
        labels = self.settings.labels
        fatal: str | None = None
        for requests_, asked in _scopes(by_profile.values(), scope):
            assert window is not None
            profile = requests_[0].profile
            answer = self._ask(profile, window, asked)
            checked = check_samples(window, _most_samples(answer, requests_))
            interval = window.scrape_interval_s
            with self._lock:
                bridged = bridge_missed_scrapes(
                    answer, self._gauges, {r.target: r.pods for r in requests_},
                    BRIDGE_INTERVALS * interval if interval else 0.0,
                )
            for target, names in bridged.items():
                _LOG.info("Read pod(s) %s of %s from their last samples: their newest scrapes failed",
                          ", ".join(names), target)
            for r in requests_:
                snap = assemble(r.target, profile, answer, checked, now, labels, r.pods)
                out[r.target] = snap
                if snap.error and not answer.failed:
                    _LOG.warning("Rejected some signals of LLMDeployment %s: %s", r.target, snap.error)
            if answer.failed:
                why = "; ".join(dict.fromkeys(answer.failed.values()))
                if answer.asked and answer.failed.keys() >= answer.asked and len(set(answer.failed.values())) == 1:
                    fatal = why  # every query failed alike: the wake query would too
                _LOG.warning(
                    "Failed to read signals of %d pool(s) with profile %s from Prometheus at %s: %s",
                    len(requests_),
                    profile.name,
                    self.url,
                    why,
                )
        waking = [r for r in pools if r.wake_query is not None]
        if waking:
            for target, (value, unread) in self._wake(waking, fatal).items():
                snap = out[target]
                unknown = dict(snap.unknown)
                if unread is not None:
                    unknown["wake_demand"] = unread
                out[target] = dataclasses.replace(snap, wake_demand=value, unknown=unknown)
        return out

    def _wake(
        self, pools: Sequence[PoolRequest], fatal: str | None
    ) -> dict[PoolTarget, tuple[float | None, str | None]]:
        """Read the wake query of every pool in ``pools``; ``(value, why unknown)`` per pool.

        One query per LLMDeployment (its pools share ``spec.scaling.wake.query``), sent together
        on the query threads and never joined with another LLMDeployment's: issue 22's wake query
        ``vector(0)), "llmscale_wake", "evil", …`` closed the joined query's parentheses and added a
        series under another tenant's key. Each is first scoped to its own namespace
        (:func:`~llmscale.signals.scope.scoped_query`); one that reads outside it is not sent.
        """
        label = self.settings.labels.namespace
        sent: dict[tuple[str, str], Future[tuple[float | None, str | None]] | str] = {}
        for r in pools:
            key = (r.target.namespace, r.target.deployment)
            if key in sent:
                continue
            expr = wake_expression(r.wake_query or "", *key)
            try:
                scoped_query(expr, r.target.namespace, label)
            except UnscopedQuery as exc:
                sent[key] = f"spec.scaling.wake.query refused: {exc}"
                continue
            if fatal is None:
                sent[key] = self._queries.submit(self._ask_wake, expr, r.target.namespace)
        out: dict[PoolTarget, tuple[float | None, str | None]] = {}
        for r in pools:
            answer = sent.get((r.target.namespace, r.target.deployment))
            if answer is None:
                out[r.target] = (None, f"wake query not sent: {fatal}")
                continue
            if isinstance(answer, str):
                out[r.target] = (None, answer)
                _LOG.warning("Refused the wake query of LLMDeployment %s: %s", r.target, answer)
                continue
            try:
                out[r.target] = answer.result()
            except _Failed as exc:
                out[r.target] = (None, f"wake query failed: {exc.why}")
            except CancelledError:  # close() cancelled it: the operator is stopping
                out[r.target] = (None, "wake query not sent: the reader is closing")
            if out[r.target][1] is not None:
                _LOG.warning("Failed to read the wake query of LLMDeployment %s: %s", r.target, out[r.target][1])
        return out

    def _tenant(self, namespace: str) -> PrometheusConnect:
        """The client of ``namespace``'s own queries: the reader's, plus ``settings.tenant_headers``
        for that namespace (a copy sharing its session, so its connection pool and adapters)."""
        if not self.settings.tenant_headers:
            return self._client
        with self._lock:
            client = self._tenants.get(namespace)
            if client is None:
                client = copy.copy(self._client)
                client.headers = {
                    **(self._client.headers or {}),
                    **{k: v.replace("{namespace}", namespace) for k, v in self.settings.tenant_headers.items()},
                }
                self._tenants[namespace] = client
            return client

    def _ask_wake(self, expression: str, namespace: str) -> tuple[float | None, str | None]:
        """Send one LLMDeployment's wake query, with its namespace's tenant headers; raise
        :class:`_Failed` when it gets no usable answer."""
        query = wake_query(expression)
        client = self._tenant(namespace)
        result = self._call(lambda: client.custom_query(query))
        value, problem, failed = parse_wake(result)
        if failed is not None:
            raise _Failed(failed, fatal=False)
        if value is None and problem is None:
            problem = "wake query returned no series (add `or vector(0)` if no series means no demand)"
        return value, problem

    def _ask(self, profile: MetricProfile, window: RateWindow, scope: PoolTarget | None) -> FleetAnswer:
        """Send the profile's queries and parse the answers: the first alone, the rest together.

        The first query (the per-pod gauges, the cheapest) goes alone: a failure that would repeat
        for the rest (``_Failed.fatal``: Prometheus unreachable, credentials refused or unreadable,
        an answer that is not JSON) stops the read there, one request spent. The others are then
        sent at once on the reader's query threads, so a read takes the first query plus the
        slowest of the rest rather than the sum: with 1,000 pods on a busy Prometheus the four
        fleet queries took 0.6, 1.8, 2.8 and 6.5 s one after the other, 11.9 s in all — more than
        the 10 s a tick waits (``signal_timeout_seconds``), so every pool read as unknown — and
        5.3 s all sent together (issue 14's scale benchmark, ``benchmarks/scale.py``). The 6.5 s
        one joined the quantiles of four histograms; each is now a query of its own
        (:data:`~llmscale.signals.queries.POOL_GROUPS`).

        The two steps share a budget of :data:`READ_BUDGET_TIMEOUTS` query timeouts (``timeout_s``):
        the first gets one, the rest get what is left, never less than one. A read takes no longer
        than before, but the dear queries get the time the cheap first one did not use: at 1,000
        pods Prometheus evaluated them in 3.2 s at p50 and 5.7 s at p99, and a fixed 5 s failed
        whole reads of up to every pool (docs/operator.md, "Scale"). The budget ends short of two
        timeouts, the fleet reader's wait (``signal_timeout_seconds``), so that a read of one engine
        profile whose dear queries time out still returns the first one's answer before the wait
        ends. A read of several profiles (or of ``scaleTargetRef`` pools, each its own scope), and
        the wake queries sent after them, can still pass that wait: it is then unknown for every
        pool, and carried.
        """
        queries = list(self.queries_for(profile, scope, window.promql).items())
        answer = FleetAnswer(asked=frozenset(group for group, _ in queries))
        (first, query), rest = queries[0], queries[1:]
        started = time.monotonic()
        try:
            result, warnings = self._call_warned(lambda: self._client.custom_query(query))
            answer.warnings.extend(warnings)
            parse_group(answer, first, result, self.settings.labels)
        except _Failed as exc:
            answer.failed[first] = exc.why
            if exc.fatal:
                answer.failed.update((group, exc.why) for group, _ in rest)
                return answer
        budget_s = READ_BUDGET_TIMEOUTS * self.settings.timeout_s
        timeout = max(budget_s - (time.monotonic() - started), self.settings.timeout_s)
        sent = [
            (group, self._queries.submit(
                self._call_warned, lambda q=q: self._client.custom_query(q, timeout=timeout)))  # type: ignore[misc]
            for group, q in rest
        ]
        fatal: str | None = None
        for group, future in sent:
            try:
                result, warnings = future.result()
            except _Failed as exc:
                answer.failed[group] = exc.why
                fatal = fatal or (exc.why if exc.fatal else None)
                continue
            except CancelledError:  # close() cancelled it: the operator is stopping
                answer.failed[group] = "the reader was closed before the query was sent"
                continue
            answer.warnings.extend(warnings)
            parse_group(answer, group, result, self.settings.labels)
        if fatal is not None:  # the same cause, told alike (the wake query is then not sent)
            answer.failed.update((group, fatal) for group, _ in sent if group in answer.failed)
        return answer

    def _call_warned(self, send: Any) -> tuple[Any, list[str]]:
        """:meth:`_call`, and the ``warnings`` of the answer (on this thread: see :data:`_ANSWER_WARNINGS`)."""
        _ANSWER_WARNINGS.found = []
        result = self._call(send)
        return result, list(getattr(_ANSWER_WARNINGS, "found", []))

    def _call(self, send: Any) -> Any:
        """Run one prometheus-api-client call; raise :class:`_Failed` with a readable reason."""
        try:
            return send()
        except CredentialsUnreadable as exc:
            raise _Failed(
                f"credentials for Prometheus at {self.url}: {exc}", fatal=True, transport=True
            ) from None
        except requests.JSONDecodeError as exc:  # also a RequestException: caught first
            raise _Failed(
                f"Prometheus at {self.url} answered something not JSON: {exc}", fatal=True
            ) from None
        except requests.exceptions.SSLError as exc:
            raise _Failed(
                f"Prometheus at {self.url} failed the TLS handshake (check auth.ca_file and the client "
                f"certificate): {_describe(exc)}",
                fatal=True,
                transport=True,
            ) from None
        except requests.RequestException as exc:
            raise _Failed(
                f"Prometheus at {self.url} did not answer: {_describe(exc)}", fatal=True, transport=True
            ) from None
        except PrometheusApiClientException as exc:
            text = str(exc)
            text = text if len(text) <= 400 else text[:397] + "..."
            m = _STATUS.search(text)
            status = int(m.group(1)) if m else 0
            if status in (401, 403):
                raise _Failed(
                    f"Prometheus at {self.url} refused the credentials (HTTP {status}): check the "
                    f"basic-auth user and password or the bearer token; {text}",
                    fatal=True,
                    transport=True,
                ) from None
            # 400 (bad query) and 422 (execution: too many samples...) belong to one query.
            raise _Failed(
                f"Prometheus at {self.url} answered with an error: {text}", fatal=status not in (400, 422)
            ) from None
        except (KeyError, TypeError) as exc:
            # 200 whose JSON has no data.result, e.g. a status "error" body.
            raise _Failed(
                f"Prometheus at {self.url} answered without data.result: {exc!r}", fatal=True
            ) from None


#: The ``warnings`` of the last answer each reader thread received (:class:`_FormBody` sets it,
#: :meth:`PrometheusReader._call_warned` reads it): prometheus-api-client returns ``data.result``
#: alone, so an answer's warnings are read off the HTTP response on its way through.
_ANSWER_WARNINGS = threading.local()

#: Bytes at the end of an answer searched for ``"warnings"``: Prometheus (and Thanos, Mimir) write
#: it after ``data`` (Go's field order of the API's response struct), so a large answer is parsed
#: a second time only when it has some.
_WARNINGS_TAIL = 64 * 1024


def _answer_warnings(response: requests.Response) -> list[str]:
    """The ``warnings`` of a Prometheus HTTP API answer (``[]`` for none, or for a body that is not
    JSON: the client reports that)."""
    try:
        if b'"warnings"' not in response.content[-_WARNINGS_TAIL:]:
            return []
        found = response.json().get("warnings")
    except (ValueError, AttributeError):
        return []
    return [str(w) for w in found] if isinstance(found, list) else []


class _FormBody(HTTPAdapter):
    """An adapter that sends a ``POST``'s parameters as a form-encoded body, not in the URL.

    prometheus-api-client sends a POST query's parameters in the URL (``params=``), so a long
    query still meets a proxy's request-line limit (nginx: 8 KB by default). The fleet queries are
    up to 6.6 KB for the vllm profile, and a shard's namespace matcher, repeated in every selector,
    adds about 1.4 KB for one namespace and 0.5 KB for each more (18-character names). Prometheus, Thanos, Mimir and VictoriaMetrics take the parameters of
    ``/api/v1/query`` and ``/api/v1/query_range`` as ``application/x-www-form-urlencoded`` POST
    bodies for this reason (Prometheus docs, "HTTP API — Instant queries": "useful when specifying
    a large query that may breach server-side URL character limits"). ``GET`` is left alone.
    """

    def send(self, request: requests.PreparedRequest, *args: Any, **kwargs: Any) -> requests.Response:
        if request.method == "POST" and not request.body and request.url:
            url = urlsplit(request.url)
            if url.query:
                request.url = urlunsplit(url._replace(query=""))
                request.body = url.query
                request.headers["Content-Type"] = "application/x-www-form-urlencoded"
                request.headers["Content-Length"] = str(len(url.query))
        response = super().send(request, *args, **kwargs)
        _ANSWER_WARNINGS.found = _answer_warnings(response)
        return response


def _utc(seconds: float) -> datetime:
    """``seconds`` since the epoch as an aware UTC ``datetime``."""
    return datetime.fromtimestamp(seconds, tz=UTC)


def _most_samples(answer: FleetAnswer, pools: Sequence[PoolRequest]) -> float | None:
    """The most samples in the window of any requested pool's pod (``None``: no pod answered)."""
    counts = [
        value
        for r in pools
        for pod, row in answer.pods.get(r.target, {}).items()
        if (r.pods is None or pod in r.pods) and (value := row.get("samples_in_window")) is not None
    ]
    return max(counts, default=None)
