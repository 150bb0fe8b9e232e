"""Read a pool's signals from Prometheus: one batched instant query per pool per tick.

The imperative shell of :mod:`llmscale.signals`: it owns the HTTP client
(prometheus-api-client's :class:`~prometheus_api_client.PrometheusConnect`, which is synchronous,
built on ``requests``) and turns whatever Prometheus answers — or fails to answer — into a
:class:`~llmscale.signals.snapshot.SignalSnapshot`. Nothing here raises on a bad answer: every
failure becomes ``error`` on the snapshot, and every value that is not a measurement becomes
``None`` ("unknown is not zero").

Parsing rules (each is a named case in ``tests/signals/test_prometheus.py``):

======================================  =====================================================
Prometheus answers                       snapshot
======================================  =====================================================
no series for a signal (empty vector)    that signal ``None``; ``replicas_reporting`` 0
``NaN``, ``+Inf``, ``-Inf``              that signal ``None`` (``NaN`` is normal for latency
                                         quantiles over a minute with no requests)
a value that is not a number             that signal ``None``; ``error`` names it
a negative gauge, rate or count          that signal ``None``; ``error`` names it
several series for one signal            that signal ``None``; ``error`` names it (the query
                                         aggregates, so duplicates mean a proxy in front of
                                         Prometheus merged answers; summing them could double
                                         the queue, so they are rejected, not combined)
series without the signal label          ignored
HTTP error (400 bad query, 500, 503)     every signal ``None``; ``error`` says why
connection refused, timeout              every signal ``None``; ``error`` says why
200 without ``data.result``              every signal ``None``; ``error`` says why
======================================  =====================================================

Freshness: ``observed_at`` is the newest *sample* timestamp of the queue-depth metric
(``max(timestamp(...))``), not the evaluation time that an instant query stamps on every answer.
When a scrape fails Prometheus writes staleness markers at once, so a dead replica's series
vanish and ``replicas_reporting`` drops below the ready replicas; when scraping stops without a
marker (Prometheus restarted, a federated or remote-written source), the last sample is returned
for up to 5 minutes (the lookback delta) and its old timestamp shows the policy the data's age.
``up`` is not queried: the reporting count already says how many replicas were scraped.
Two consequences of ``rate()`` the policy should know (both seen against a real Prometheus in
``tests/signals/test_real_prometheus.py``): a dead replica leaves the gauges at once but its
samples stay in the rates and latency quantiles until they leave the rate window; and a
replica younger than the window reads a low rate, because ``rate()`` divides by the whole range.
Without any queue-depth sample, ``observed_at`` is Prometheus's evaluation time; when Prometheus
did not answer at all it is the caller's ``now``. The age assumes the operator's and Prometheus's
clocks agree (NTP).
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import requests
from prometheus_api_client import PrometheusConnect
from prometheus_api_client.exceptions import PrometheusApiClientException
from urllib3.exceptions import MaxRetryError
from urllib3.util.retry import Retry

from llmscale.signals.profiles.base import MetricProfile
from llmscale.signals.queries import SIGNAL_LABEL, SIGNALS, PoolTarget, SelectorLabels, batched_query
from llmscale.signals.snapshot import SignalSnapshot

__all__ = ["PrometheusSignalReader", "ReaderSettings", "parse_answer"]

_LOG = logging.getLogger(__name__)

# Signals that can never be negative (gauges of counts and fractions, rates of counters).
_NON_NEGATIVE = frozenset(SIGNALS) - {"newest_sample_s", "evaluated_at_s"}


@dataclass(frozen=True, slots=True)
class ReaderSettings:
    """How the reader queries Prometheus.

    Attributes:
        labels: names of the pool's selector labels in Prometheus (see
            :class:`~llmscale.signals.queries.SelectorLabels`).
        rate_window: ``rate()`` range, a PromQL duration. ``1m``: four samples at the usual 15 s
            scrape interval, the fewest that make ``rate()`` steady, and short enough that the
            leading signals lead.
        quantile: latency quantile, 0–1. 0.95 because the SLO (``spec.slo``) is stated at p95.
        timeout_s: HTTP timeout of one query, seconds. 5 s: a tick is typically 15 s, and a
            Prometheus that needs longer for nine small aggregations is in trouble anyway.
        retries: extra attempts on a refused connection or a 502/503/504 (proxies and restarts),
            without backoff. 1: the next tick is the real retry.
    """

    labels: SelectorLabels = field(default_factory=SelectorLabels)
    rate_window: str = "1m"
    quantile: float = 0.95
    timeout_s: float = 5.0
    retries: int = 1


def _value(sample: Any) -> tuple[float | None, str | None]:
    """Return ``(value, problem)`` for one ``[timestamp, "value"]`` pair of an instant vector."""
    if not isinstance(sample, list | tuple) or len(sample) != 2:
        return None, f"sample {sample!r} is not a [time, value] pair"
    try:
        float(sample[0])
    except (TypeError, ValueError):
        return None, f"time {sample[0]!r} is not a number"
    try:
        value = float(sample[1])
    except (TypeError, ValueError):
        return None, f"value {sample[1]!r} is not a number"
    if not math.isfinite(value):
        return None, None  # NaN/±Inf: unknown, and not a fault (e.g. no requests this minute)
    return value, None


def _describe(exc: requests.RequestException) -> str:
    """Return the root cause of a ``requests`` failure, without the (long) query URL."""
    cause: BaseException = exc
    if exc.args and isinstance(exc.args[0], MaxRetryError) and exc.args[0].reason is not None:
        cause = exc.args[0].reason
    text = str(cause)
    # urllib3 prefixes "HTTPConnectionPool(host=..., port=...): "; the URL is in the message already.
    _, sep, rest = text.partition("): ")
    return f"{type(cause).__name__}: {rest if sep else text}"


def parse_answer(result: Any, now: float) -> SignalSnapshot:
    """Turn the ``data.result`` of a :func:`~llmscale.signals.queries.batched_query` into a snapshot.

    Pure: no I/O, no clock.

    Args:
        result: the instant vector as decoded JSON, a list of ``{"metric": {...}, "value":
            [time_s, "value"]}``.
        now: the caller's time, seconds since the epoch; ``observed_at`` when the answer carries
            no timestamp at all.

    Returns:
        The snapshot; the rules are in this module's docstring. ``error`` lists every rejected
        value, ``; ``-separated, or is ``None``.
    """
    if not isinstance(result, list):
        return SignalSnapshot(
            observed_at=now, error=f"Prometheus answered {type(result).__name__}, not a vector"
        )
    if len(result) == 2 and isinstance(result[0], int | float) and isinstance(result[1], str):
        return SignalSnapshot(observed_at=now, error="Prometheus answered a scalar, not a vector")
    found: dict[str, list[float | None]] = {}
    problems: list[str] = []
    evaluated_at: float | None = None  # every sample of an instant vector carries it
    for item in result:
        if not isinstance(item, Mapping) or not isinstance(item.get("metric"), Mapping):
            problems.append(f"ignored malformed series {item!r:.80}")
            continue
        name = item["metric"].get(SIGNAL_LABEL)
        if name not in SIGNALS:
            continue  # not ours (or a label we do not know): harmless
        value, problem = _value(item.get("value"))
        if problem is None and evaluated_at is None:
            evaluated_at = float(item["value"][0])
        if problem:
            problems.append(f"{name}: {problem}")
        elif value is not None and value < 0 and name in _NON_NEGATIVE:
            problems.append(f"{name}: negative value {value}")
            value = None
        found.setdefault(name, []).append(value)

    values: dict[str, float | None] = {}
    for name, vals in found.items():
        if len(vals) > 1:
            problems.append(f"{name}: {len(vals)} series where one was expected; rejected")
            continue
        values[name] = vals[0]

    reporting = values.get("replicas_reporting")
    observed_at = values.get("newest_sample_s") or values.get("evaluated_at_s") or evaluated_at or now
    return SignalSnapshot(
        observed_at=observed_at,
        queue_depth=values.get("queue_depth"),
        running_requests=values.get("running_requests"),
        kv_cache_utilization=values.get("kv_cache_utilization"),
        preemption_rate=values.get("preemption_rate"),
        ttft_p95_s=values.get("ttft_p95_s"),
        itl_p95_s=values.get("itl_p95_s"),
        replicas_reporting=round(reporting) if reporting is not None else 0,
        error="; ".join(problems) or None,
    )


class PrometheusSignalReader:
    """Reads :class:`SignalSnapshot` objects of LLMDeployment pools from one Prometheus.

    Args:
        url: Prometheus base URL, e.g. ``http://prometheus.monitoring:9090`` (no ``/api/v1``).
        headers: extra HTTP headers, e.g. ``{"Authorization": "Bearer ..."}``.
        session: a ``requests.Session`` to use (TLS, proxies, client certificates); a new one
            when ``None``.
        settings: query and HTTP settings.

    Nothing is read from the environment. One reader may serve many pools; :meth:`read` runs
    the synchronous client in the default thread pool, and the underlying connection pool
    (urllib3) is thread-safe.
    """

    def __init__(
        self,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        session: requests.Session | None = None,
        settings: ReaderSettings | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.settings = settings or ReaderSettings()
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
            headers=dict(headers) if headers else None,
            session=session,
            retry=retry,
            timeout=self.settings.timeout_s,  # type: ignore[arg-type]  # annotated int, takes float
        )

    def query_for(self, profile: MetricProfile, target: PoolTarget) -> str:
        """Return the PromQL this reader sends for ``target`` (for logs, docs and ``--explain``)."""
        s = self.settings
        return batched_query(profile, target, s.labels, s.rate_window, s.quantile)

    def read_sync(self, profile: MetricProfile, target: PoolTarget, now: float) -> SignalSnapshot:
        """Query Prometheus once and return ``target``'s snapshot; blocks for up to the timeout.

        Args:
            profile: the engine's metric names.
            target: the pool.
            now: the caller's time, seconds since the epoch (``observed_at`` when Prometheus
                gave no timestamp).

        Never raises for Prometheus or network failures: they are returned as ``error``.
        """
        query = self.query_for(profile, target)
        try:
            result = self._client.custom_query(query)
        except requests.JSONDecodeError as exc:  # also a RequestException: caught first
            return self._failed(target, now, f"Prometheus at {self.url} answered something not JSON: {exc}")
        except requests.RequestException as exc:
            return self._failed(target, now, f"Prometheus at {self.url} did not answer: {_describe(exc)}")
        except PrometheusApiClientException as exc:
            return self._failed(target, now, f"Prometheus at {self.url} answered with an error: {exc}")
        except (KeyError, TypeError) as exc:
            # 200 whose JSON has no data.result, e.g. a status "error" body.
            return self._failed(
                target, now, f"Prometheus at {self.url} answered without data.result: {exc!r}"
            )
        snapshot = parse_answer(result, now)
        if snapshot.error:
            _LOG.warning("Rejected some signals of LLMDeployment %s: %s", target, snapshot.error)
        return snapshot

    async def read(self, profile: MetricProfile, target: PoolTarget, now: float) -> SignalSnapshot:
        """Async :meth:`read_sync`: runs it in the event loop's default executor (a thread)."""
        return await asyncio.to_thread(self.read_sync, profile, target, now)

    def close(self) -> None:
        """Close the HTTP session."""
        self._client.close()

    def _failed(self, target: PoolTarget, now: float, why: str) -> SignalSnapshot:
        why = why if len(why) <= 400 else why[:397] + "..."
        _LOG.warning("Failed to read signals of LLMDeployment %s: %s", target, why)
        return SignalSnapshot(observed_at=now, error=why)
