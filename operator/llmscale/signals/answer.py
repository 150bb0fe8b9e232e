"""Split Prometheus answers to the fleet queries per pool and per pod, rejecting what is not data.

Pure module: decoded JSON in, :class:`FleetAnswer` out; no I/O, no clock. Nothing here raises on a
bad answer: every rejected value becomes ``None`` and a line in ``problems``.

Parsing rules (each is a named case in ``tests/signals/test_prometheus.py``):

======================================  =====================================================
Prometheus answers                       the value
======================================  =====================================================
no series for a signal                   absent (what that means is decided per signal in
                                         :mod:`llmscale.signals.assemble`)
``NaN``, ``+Inf``, ``-Inf``              ``None`` (``NaN`` is normal for latency quantiles over
                                         a window with no requests), no problem
a value that is not a number             ``None``; a problem names it
a negative value                         ``None``; a problem names it (every signal is a count,
                                         a fraction, a rate or a timestamp)
several series for one signal of one     ``None``; a problem names it (the queries aggregate,
pod (or pool)                            so duplicates mean a proxy in front of Prometheus
                                         merged answers; summing them could double the queue)
series without the signal label, or      ignored
with a signal this group does not ask
a series that is not ``{metric, value}``  ignored; a problem names it
a result that is not a vector            the whole group fails (``failed``)
======================================  =====================================================
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from llmscale.signals.queries import (
    ALL_GROUPS,
    METRIC_LABEL,
    PER_POD,
    SIGNAL_LABEL,
    PoolTarget,
    SelectorLabels,
)

__all__ = ["BRIDGE_INTERVALS", "INSTANT_SIGNALS", "FleetAnswer", "GaugeMemory", "bridge_missed_scrapes", "parse_group", "parse_wake"]

#: A problem that could not be tied to a pool.
UNATTRIBUTED = PoolTarget("", "", "")

#: Scrape intervals for which a live pod's last gauges stand in for scrapes that failed
#: (:func:`bridge_missed_scrapes`): two failed scrapes in a row are bridged, a third is not.
BRIDGE_INTERVALS = 3.0
#: The per-pod signals read from the newest sample only (an instant selector): the ones a failed
#: scrape's staleness markers empty. Range reads (rates, ``samples_in_window``, ``running_min``)
#: still hold the earlier samples.
INSTANT_SIGNALS = ("queue_depth", "running_requests", "kv_cache_utilization", "newest_sample_s", "asleep")

#: ``pool -> pod -> the pod's last instant signals`` (with their ``newest_sample_s``), kept by the
#: reader between reads.
GaugeMemory = dict[PoolTarget, dict[str, dict[str, float | None]]]


@dataclass
class FleetAnswer:
    """The parsed answers of one read, split per pool and per pod.

    Attributes:
        evaluated_at: Prometheus's evaluation time of the answers, seconds since the epoch, or
            ``None`` when no answer carried one.
        pods: ``pool -> pod -> signal -> value`` for per-pod signals (``None``: rejected or NaN).
        pools: ``pool -> signal -> value`` for per-pool signals.
        absent: ``pool -> pod -> metric names`` a reporting pod lacks (the ``absent`` signal).
        problems: ``pool -> lines`` of rejected values (:data:`UNATTRIBUTED` for series without
            pool labels).
        failed: ``group -> why`` for every query group that gave no usable answer.
        asked: the query groups sent (a profile without a histogram sends no query for it).
        warnings: the ``warnings`` of HTTP 200 answers (Thanos or Mimir with partial response on:
            ``store B unavailable``): the series may miss pods; prometheus-api-client drops them, so
            the reader reads them off the HTTP answer itself.
    """

    evaluated_at: float | None = None
    pods: dict[PoolTarget, dict[str, dict[str, float | None]]] = field(default_factory=dict)
    pools: dict[PoolTarget, dict[str, float | None]] = field(default_factory=dict)
    absent: dict[PoolTarget, dict[str, set[str]]] = field(default_factory=dict)
    problems: dict[PoolTarget, list[str]] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    asked: frozenset[str] = frozenset()
    warnings: list[str] = field(default_factory=list)

    def problem(self, pool: PoolTarget, line: str) -> None:
        """Record a rejected value of ``pool``."""
        self.problems.setdefault(pool, []).append(line)


def _value(sample: Any) -> tuple[float | None, float | None, str | None]:
    """Return ``(time, value, problem)`` for one ``[time, "value"]`` pair of an instant vector."""
    if not isinstance(sample, list | tuple) or len(sample) != 2:
        return None, None, f"sample {sample!r:.60} is not a [time, value] pair"
    try:
        t = float(sample[0])
    except (TypeError, ValueError):
        return None, None, f"time {sample[0]!r:.40} is not a number"
    try:
        value = float(sample[1])
    except (TypeError, ValueError):
        return t, None, f"value {sample[1]!r:.40} is not a number"
    if not math.isfinite(value):
        return t, None, None  # NaN/±Inf: unknown, and not a fault (e.g. no requests this window)
    return t, value, None


def parse_group(answer: FleetAnswer, group: str, result: Any, labels: SelectorLabels) -> None:
    """Fold the ``data.result`` of one :func:`~llmscale.signals.queries.fleet_queries` group into ``answer``.

    Args:
        answer: the read's answer so far; updated in place.
        group: the group's name (a key of :data:`~llmscale.signals.queries.GROUPS`).
        result: the instant vector as decoded JSON, a list of ``{"metric": {...}, "value":
            [time_s, "value"]}``.
        labels: the selector label names, to split series per pool and pod.

    A result that is not a vector is recorded in ``answer.failed[group]``; every other fault is a
    line in ``answer.problems`` (rules in this module's docstring).
    """
    if not isinstance(result, list):
        answer.failed[group] = f"Prometheus answered {type(result).__name__}, not a vector"
        return
    if len(result) == 2 and isinstance(result[0], int | float) and isinstance(result[1], str):
        answer.failed[group] = "Prometheus answered a scalar, not a vector"
        return
    wanted = set(ALL_GROUPS[group])
    ns_label, dep_label, pool_label, pod_label = labels.namespace, labels.deployment, labels.pool, labels.pod
    targets: dict[tuple[str, str, str], PoolTarget] = {}  # one PoolTarget per pool, not per series
    for item in result:
        if not isinstance(item, Mapping) or not isinstance(item.get("metric"), Mapping):
            answer.problem(UNATTRIBUTED, f"ignored malformed series {item!r:.80}")
            continue
        metric = item["metric"]
        signal = metric.get(SIGNAL_LABEL)
        if signal not in wanted:
            continue  # not ours (or a label we do not know): harmless
        key = (str(metric.get(ns_label, "")), str(metric.get(dep_label, "")), str(metric.get(pool_label, "")))
        pool = targets.get(key)
        if pool is None:
            pool = targets[key] = PoolTarget(*key)
        per_pod = signal in PER_POD
        pod = str(metric.get(pod_label, "")) if per_pod else ""
        t, value, problem = _value(item.get("value"))
        if t is not None and answer.evaluated_at is None:
            answer.evaluated_at = t
        if problem:
            answer.problem(pool, f"{_where(signal, pod, per_pod)}: {problem}")
        elif value is not None and value < 0:
            answer.problem(pool, f"{_where(signal, pod, per_pod)}: negative value {value}")
            value = None
        if signal == "absent":
            answer.absent.setdefault(pool, {}).setdefault(pod, set()).add(str(metric.get(METRIC_LABEL, "")))
            continue
        row = (
            answer.pods.setdefault(pool, {}).setdefault(pod, {})
            if per_pod
            else answer.pools.setdefault(pool, {})
        )
        if signal in row:
            answer.problem(
                pool, f"{_where(signal, pod, per_pod)}: several series where one was expected; rejected"
            )
            value = None
        row[signal] = value


def _where(signal: str, pod: str, per_pod: bool) -> str:
    return f"{signal} of pod {pod!r}" if per_pod else signal


def parse_wake(result: Any) -> tuple[float | None, str | None, str | None]:
    """Read the answer to one :func:`~llmscale.signals.queries.wake_query`.

    Args:
        result: the instant vector as decoded JSON (``sum(...)``: one series at most).

    Returns:
        ``(value, problem, failed)``: the value (``None`` when there was no series, or it was not
        a finite, non-negative number, or there were several series), why the value is ``None``
        (``None`` when there was no series: the caller words that), and why the whole answer was
        unusable (``None`` when it was a vector).
    """
    if not isinstance(result, list):
        return None, None, f"Prometheus answered {type(result).__name__}, not a vector"
    items = [item for item in result if isinstance(item, Mapping)]
    if not items:
        return None, None, None
    if len(items) > 1:
        return None, "several series where one was expected; rejected", None
    _, value, problem = _value(items[0].get("value"))
    if problem is None and value is not None and value < 0:
        problem, value = f"negative value {value}", None
    if problem is None and value is None:
        problem = "its value is NaN or infinite"
    return value, problem, None


def bridge_missed_scrapes(
    answer: FleetAnswer,
    memory: GaugeMemory,
    live: Mapping[PoolTarget, Collection[str] | None],
    bound_s: float,
) -> dict[PoolTarget, list[str]]:
    """Fill the instant signals of live pods whose last scrapes failed from their last samples.

    A failed scrape (a ``/metrics`` slower than the scrape timeout on a busy engine) is an empty
    scrape to Prometheus: it writes staleness markers, and an instant query returns nothing for
    the pod until a scrape succeeds, a whole scrape interval later. Without a bridge every such
    miss read as "no pod reports" for that interval, at the moments of heaviest load. A pod still
    in the API server whose newest queue-depth sample is at most ``bound_s`` old (Prometheus's
    clock, ``answer.evaluated_at``) keeps those samples, with their own timestamp, so the
    snapshot's age stays true; a pod dead longer drops out as before (``silent_pods``).

    Args:
        answer: this read's parsed answer; ``answer.pods`` is updated in place.
        memory: the reader's memory of earlier reads, updated in place (forgets pods that left the
            API server or grew older than ``bound_s``).
        live: ``pool -> names of its pods in the API server`` for the pools of this read; ``None``
            (series not filtered by live pods) disables the bridge for that pool, since a deleted
            pod could not be told from a slow one.
        bound_s: the oldest sample bridged, seconds before the evaluation time
            (:data:`BRIDGE_INTERVALS` x the scrape interval); ``0`` bridges nothing.

    Returns:
        ``pool -> pods bridged`` for the pools where any was.
    """
    bridged: dict[PoolTarget, list[str]] = {}
    if "pods" in answer.failed or answer.evaluated_at is None:
        return bridged  # nothing read: the fleet reader's carry handles a failed read
    now = answer.evaluated_at
    for pool, pods in live.items():
        rows = answer.pods.get(pool, {})
        kept = memory.setdefault(pool, {})
        for pod, row in rows.items():
            if "queue_depth" in row and row.get("newest_sample_s") is not None:
                kept[pod] = {k: row[k] for k in INSTANT_SIGNALS if k in row}
        if pods is None or bound_s <= 0:
            memory.pop(pool, None)
            continue
        for pod in list(kept):
            newest = kept[pod].get("newest_sample_s")
            if pod not in pods or newest is None or now - newest > bound_s:
                del kept[pod]
            elif "queue_depth" not in rows.get(pod, {}):
                answer.pods.setdefault(pool, {}).setdefault(pod, {}).update(kept[pod])
                bridged.setdefault(pool, []).append(pod)
        if not kept:
            memory.pop(pool, None)
    return bridged
