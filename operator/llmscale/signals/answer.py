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

__all__ = [
    "BRIDGE_INTERVALS",
    "FAILED_FAST_S",
    "INSTANT_SIGNALS",
    "FleetAnswer",
    "GaugeMemory",
    "KeptGauges",
    "bridge_missed_scrapes",
    "parse_group",
    "parse_wake",
]

#: A problem that could not be tied to a pool.
UNATTRIBUTED = PoolTarget("", "", "")

#: Scrape intervals after a live pod's last sample for which its last gauges stand in for failed
#: scrapes (:func:`bridge_missed_scrapes`): two failed scrapes in a row, and a slow third whose
#: samples (stamped with its start) are in only when it ends, up to a timeout later.
BRIDGE_INTERVALS = 4.0
#: A scrape that failed in less than this (``scrape_duration_seconds``, seconds) failed fast: the
#: connection was refused or reset, so the engine is down, not slow, and its pod is not bridged. A
#: slow ``/metrics`` fails at the scrape timeout (1 s and up in practice).
FAILED_FAST_S = 0.5
#: The per-pod signals read from the newest sample only (an instant selector): the ones a failed
#: scrape's staleness markers empty. Range reads (rates, ``samples_in_window``, ``running_min``)
#: still hold the earlier samples.
INSTANT_SIGNALS = (
    "queue_depth",
    "running_requests",
    "kv_cache_utilization",
    "newest_sample_s",
    "asleep",
    "prefix_cache_hit_rate_gauge",
)


@dataclass(frozen=True, slots=True)
class KeptGauges:
    """A pod's last instant signals (:data:`INSTANT_SIGNALS`, with ``newest_sample_s``) and the
    metrics it lacked then (the ``absent`` group, itself an instant read)."""

    row: dict[str, float | None]
    absent: frozenset[str] = frozenset()


#: ``pool -> pod -> the pod's last good read``, kept by the reader between reads.
GaugeMemory = dict[PoolTarget, dict[str, KeptGauges]]


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
        bridged: ``pool -> pods`` whose instant signals are their last samples, their newest
            scrapes having failed (:func:`bridge_missed_scrapes`).
    """

    evaluated_at: float | None = None
    pods: dict[PoolTarget, dict[str, dict[str, float | None]]] = field(default_factory=dict)
    pools: dict[PoolTarget, dict[str, float | None]] = field(default_factory=dict)
    absent: dict[PoolTarget, dict[str, set[str]]] = field(default_factory=dict)
    problems: dict[PoolTarget, list[str]] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    asked: frozenset[str] = frozenset()
    warnings: list[str] = field(default_factory=list)
    bridged: dict[PoolTarget, list[str]] = field(default_factory=dict)

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
    """Fill the instant signals of live pods whose last scrapes failed slowly from their last samples.

    A failed scrape (a ``/metrics`` slower than the scrape timeout on a busy engine) is an empty
    scrape to Prometheus: it writes staleness markers, and an instant query returns nothing for
    the pod until a scrape succeeds, a whole scrape interval later. Without a bridge every such
    miss read as "no pod reports" for that interval, at the moments of heaviest load. A pod still
    in the API server whose newest queue-depth sample is at most ``bound_s`` old (Prometheus's
    clock, ``answer.evaluated_at``) keeps those samples, with their own timestamp, and the metrics
    it lacked then. Not bridged: a pod whose last scrape failed fast (``last_scrape_s`` below
    :data:`FAILED_FAST_S`: refused, the engine is down), one whose sample is older, one out of the
    API server, and every pod of a pool read without its live pods. The memory is filled only from
    pods that reported a queue depth in a read, never from a bridged row, so a bridge always ends
    ``bound_s`` after the last real sample.

    Args:
        answer: this read's parsed answer; ``answer.pods`` and ``answer.absent`` are updated in
            place, and ``answer.bridged`` is set.
        memory: the reader's memory of earlier reads, updated in place: a pod's entry is replaced
            only by a newer sample, and entries older than ``bound_s`` or of pods out of the API
            server are forgotten (of every pool, read now or not).
        live: ``pool -> names of its pods in the API server`` for the pools of this read; ``None``
            for a pool read without them.
        bound_s: the oldest sample bridged, seconds before the evaluation time
            (:data:`BRIDGE_INTERVALS` x the scrape interval); ``0`` bridges nothing.

    Returns:
        ``pool -> pods bridged`` for the pools where any was (also in ``answer.bridged``).
    """
    if "pods" in answer.failed or answer.evaluated_at is None:
        return {}  # nothing read: the fleet reader's carry handles a failed read
    now = answer.evaluated_at
    for pool, pods in live.items():
        kept = memory.setdefault(pool, {})
        lacking = answer.absent.get(pool, {})
        for pod, row in answer.pods.get(pool, {}).items():
            newest = row.get("newest_sample_s")
            if row.get("queue_depth") is None or newest is None:
                continue
            old = kept.get(pod)
            if old is not None and (old.row.get("newest_sample_s") or 0.0) > newest:
                continue  # a read that finished late: keep the newer sample
            absent = old.absent if "absent" in answer.failed and old is not None else frozenset(lacking.get(pod, ()))
            kept[pod] = KeptGauges({k: row[k] for k in INSTANT_SIGNALS if k in row}, absent)
        if pods is None or bound_s <= 0:
            continue
        for pod in sorted(kept.keys() & set(pods)):
            entry = kept[pod]
            row = answer.pods.get(pool, {}).get(pod, {})
            if "queue_depth" in row or now - (entry.row.get("newest_sample_s") or 0.0) > bound_s:
                continue
            last_scrape = row.get("last_scrape_s")
            if last_scrape is not None and last_scrape < FAILED_FAST_S:
                continue  # refused: the engine is down, not slow
            answer.pods.setdefault(pool, {}).setdefault(pod, {}).update(entry.row)
            if entry.absent and "absent" not in answer.failed:
                answer.absent.setdefault(pool, {}).setdefault(pod, set()).update(entry.absent)
            answer.bridged.setdefault(pool, []).append(pod)
    for pool in list(memory):
        pods = live.get(pool)
        kept = memory[pool]
        for pod in list(kept):
            newest = kept[pod].row.get("newest_sample_s") or 0.0
            if now - newest > bound_s or (pods is not None and pod not in pods):
                del kept[pod]
        if not kept:
            del memory[pool]
    return dict(answer.bridged)
