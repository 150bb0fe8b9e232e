"""Bytes of signal history the operator keeps per LLMDeployment (issue 14), before and after slimming.

    .venv/bin/python benchmarks/memory_per_object.py [--objects 1000] [--pods 1] [--unknown 0]
        [--tick 15] [--keep 900] [--cold-start 180]

Builds ``--objects`` histories the way the operator's tick does (one :class:`SignalSnapshot` per
tick, ``--tick`` seconds apart, ``record_snapshot`` with ``keep_s = max(--keep, --cold-start)``),
each snapshot shaped as the fleet reader's (``llmscale.signals.assemble``): ``--pods`` pods with
their per-pod signals and fresh name strings, a full workload mix, ``--unknown`` entries in
``unknown``, one rate window shared by the whole read. It runs long enough for the history to be
full, then measures the live bytes of the histories with :mod:`tracemalloc` for:

- ``whole``: every entry whole, each with its own ``unknown`` view (the rule before issue 14);
- ``slimmed``: entries older than the newest slimmed (:func:`llmscale.policy.history.slim_snapshot`,
  what ``record_snapshot`` does now), for the same ``keep_s``;
- ``slimmed, one cold start``: the same kept for ``--cold-start`` seconds only (what the policy reads).

Prints bytes per object, entries per object and the ratio against ``whole``.

Then the other per-pool state the tick keeps that grows with time, the service record
(:class:`llmscale.controller.state.servicerecord.ServiceRecord`, two per object: the interactive and
the batch pool), after a day of ticks: its buckets as a dict of one array per bucket (before issue
14) and as the ring it is now.

Last, the operator's own ``/metrics`` series of ``--objects`` objects: every per-object family of
:class:`llmscale.controller.metrics.OperatorMetrics` with each of its label values (both pools, both
latencies, every signal, window and result, one scale reason), as prometheus-client children
(before issue 26) and as :class:`~llmscale.controller.metrics.ObjectSeries` (now). Figures, not a test.
"""

from __future__ import annotations

import argparse
import gc
import math
import random
import tracemalloc
from array import array
from collections.abc import Callable, Sequence
from types import MappingProxyType
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge

from llmscale.controller.metrics import LATENCIES, SIGNALS, ObjectSeries, OperatorMetrics
from llmscale.controller.state.servicerecord import _FIELDS, ServiceRecord
from llmscale.policy.history import record_snapshot, trim_history
from llmscale.signals.minute import MinuteSample
from llmscale.signals.snapshot import PodSignals, RateWindow, SignalSnapshot, WorkloadMix

T0 = 1_790_000_000.0


def _whole(history: Sequence[SignalSnapshot], snapshot: SignalSnapshot, now: float, keep_s: float
           ) -> tuple[SignalSnapshot, ...]:
    """The rule before issue 14: append every new read whole, then trim."""
    # Each snapshot had its own read-only copy of its unknowns, empty or not.
    object.__setattr__(snapshot, "unknown", MappingProxyType(dict(snapshot.unknown)))
    if not history or snapshot.error is not None or snapshot.observed_at > history[-1].observed_at:
        history = (*history, snapshot)
    return trim_history(history, now, keep_s)


def _read(rng: random.Random, obj: int, now: float, pods: int, unknown: int, window: RateWindow) -> SignalSnapshot:
    """One read of one object's interactive pool, as the fleet reader assembles it."""
    observed = now - rng.uniform(0, 5)
    per_pod = tuple(
        PodSignals(
            pod=f"chat-{obj:05d}-interactive-7d9f8c6b5-{p:05d}",
            queue_depth=float(rng.randint(0, 8)),
            running_requests=float(rng.randint(0, 64)),
            kv_cache_utilization=rng.random(),
            preemption_rate=rng.random() * 0.1,
            generation_tokens_rate=rng.uniform(100, 3000),
            newest_sample_s=observed,
        )
        for p in range(pods)
    )
    return SignalSnapshot(
        observed_at=observed,
        queue_depth=sum(p.queue_depth or 0.0 for p in per_pod),
        running_requests=sum(p.running_requests or 0.0 for p in per_pod),
        kv_cache_utilization=sum(p.kv_cache_utilization or 0.0 for p in per_pod) / max(pods, 1),
        preemption_rate=sum(p.preemption_rate or 0.0 for p in per_pod),
        ttft_p95_s=rng.uniform(0.1, 2),
        itl_p95_s=rng.uniform(0.01, 0.1),
        replicas_reporting=pods,
        workload=WorkloadMix(
            request_rate=rng.uniform(1, 20), prompt_tokens_rate=rng.uniform(1e3, 2e4),
            generation_tokens_rate=rng.uniform(1e2, 4e3), prompt_tokens_mean=rng.uniform(500, 1500),
            prompt_tokens_p90=rng.uniform(1500, 3000), prompt_tokens_p95=rng.uniform(2000, 4000),
            generation_tokens_mean=rng.uniform(100, 300), generation_tokens_p90=rng.uniform(300, 600),
            generation_tokens_p95=rng.uniform(400, 800), prefix_cache_hit_rate=rng.random(),
        ),
        pods=per_pod,
        unknown={f"signal_{i}": f"unknown on pod chat-{obj:05d}-interactive-0 (see the error)" for i in range(unknown)},
        window=window,
    )


Record = Callable[[Sequence[SignalSnapshot], SignalSnapshot, float, float], tuple[SignalSnapshot, ...]]


def measure(record: Record, args: argparse.Namespace, keep_s: float) -> tuple[float, float]:
    """Return (bytes per object, entries per object) of ``--objects`` histories built with ``record``."""
    rng = random.Random(14)
    window = RateWindow(60.0, "60s", 15.0, "targets", auto=True)
    ticks = int(max(args.keep, args.cold_start) // args.tick) + 5
    gc.collect()
    tracemalloc.start()
    histories: list[tuple[SignalSnapshot, ...]] = [() for _ in range(args.objects)]
    base = tracemalloc.get_traced_memory()[0]
    for tick in range(ticks):
        now = T0 + tick * args.tick
        for obj in range(args.objects):
            histories[obj] = record(histories[obj], _read(rng, obj, now, args.pods, args.unknown, window), now, keep_s)
    gc.collect()
    used = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    entries = sum(len(h) for h in histories) / args.objects
    return used / args.objects, entries


class DictBuckets:
    """The service record's buckets before issue 14: one array per bucket start in a dict, older
    buckets dropped when a new one is created. The "before" of this benchmark, and the reference
    the ring is checked against (tests/operator/test_servicerecord_buckets.py)."""

    def __init__(self, width_s: float, count: int) -> None:
        self.width_s, self.count = width_s, count
        self.data: dict[int, array[float]] = {}

    def add(self, t: float, index: int, value: float) -> None:
        key = int(math.floor(t / self.width_s) * self.width_s)
        bucket = self.data.get(key)
        if bucket is None:
            bucket = self.data[key] = array("d", bytes(8 * _FIELDS))
            oldest = key - (self.count - 1) * self.width_s
            for old in [k for k in self.data if k < oldest]:
                del self.data[old]
        bucket[index] += value

    def sums(self, now: float) -> list[float]:
        """Each field summed over the buckets of the window ending at ``now``."""
        oldest = math.floor(now / self.width_s) * self.width_s - (self.count - 1) * self.width_s
        total = [0.0] * _FIELDS
        for key, bucket in self.data.items():
            if oldest <= key <= now:
                for i in range(_FIELDS):
                    total[i] += bucket[i]
        return total


def measure_record(args: argparse.Namespace, dict_buckets: bool) -> float:
    """Return the bytes of one pool's service record after a day of ticks, one minute a minute."""
    rng = random.Random(14)
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    records = [ServiceRecord() for _ in range(args.records)]
    if dict_buckets:
        for r in records:
            fake: Any = r
            fake.minutes, fake.hours = DictBuckets(60.0, 60), DictBuckets(3600.0, 24)
    for tick in range(int(86_400 / args.tick)):
        now = T0 + tick * args.tick
        for r in records:
            r.add_tick(now, 1.0, None, 2 * args.tick)
            if now % 60 < args.tick:
                r.add_minute(MinuteSample(end_s=math.floor(now / 60) * 60, ttft_p95_s=rng.random(), itl_p95_s=0.03,
                                          ttft_observations=100.0, generation_tokens=5000.0, queue_min=0.0), True)
    gc.collect()
    used = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    return float(used / args.records)


#: The values each label beyond ``namespace`` and ``name`` takes on one object (at most).
_LABEL_VALUES: dict[str, tuple[str, ...]] = {
    "pool": ("interactive", "batch"), "latency": LATENCIES, "signal": SIGNALS, "window": ("1h", "24h", "total"),
    "result": ("met", "missed"), "direction": ("up",), "reason": ("DesiredWithinRange",),
}


def _series_keys(labelnames: Sequence[str], namespace: str, name: str) -> list[tuple[str, ...]]:
    keys: list[tuple[str, ...]] = [(namespace, name)]
    for label in labelnames[2:]:
        keys = [(*k, v) for k in keys for v in _LABEL_VALUES[label]]
    return keys


def measure_metrics(objects: int, client_children: bool) -> tuple[float, int]:
    """Return (bytes a object, series a object) of the operator's per-object ``/metrics`` families."""
    families = [f for f in vars(OperatorMetrics()).values() if isinstance(f, ObjectSeries)]
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    registry = CollectorRegistry()
    built: list[Any] = []
    for f in families:
        if client_children:
            kind = Gauge if f.kind == "gauge" else Counter
            built.append(kind(f.name, f.documentation, f.labelnames, registry=registry))
        else:
            built.append(ObjectSeries(f.kind, f.name, f.documentation, f.labelnames, registry))
    series = 0
    for i in range(objects):
        for family, f in zip(built, families, strict=True):
            for key in _series_keys(f.labelnames, f"ns-{i % 10}", f"chat-{i}"):
                child = family.labels(*key)
                if f.kind == "gauge":
                    child.set(1.0)
                else:
                    child.inc()
                series += 1
    gc.collect()
    used = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    return used / objects, series // objects


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--objects", type=int, default=1000, help="LLMDeployments (default 1000)")
    parser.add_argument("--pods", type=int, default=1, help="reporting pods per pool (default 1)")
    parser.add_argument("--unknown", type=int, default=0, help="entries in each snapshot's unknown (default 0)")
    parser.add_argument("--tick", type=float, default=15.0, help="seconds between reads (default 15)")
    parser.add_argument("--keep", type=float, default=900.0, help="seconds kept by the whole and slimmed rows: the old --signal-history-seconds (default 900)")
    parser.add_argument("--records", type=int, default=50, help="service records built for the second table (default 50)")
    parser.add_argument("--cold-start", type=float, default=180.0, help="spec.headroom.coldStartSeconds (default 180)")
    args = parser.parse_args()
    keep_s = max(args.keep, args.cold_start)
    print(f"{args.objects} objects, {args.pods} pod(s) a pool, {args.unknown} unknown(s) a snapshot, "
          f"a read every {args.tick:g} s")
    rows = [
        (f"whole, kept {keep_s:g} s", measure(_whole, args, keep_s)),
        (f"slimmed, kept {keep_s:g} s", measure(record_snapshot, args, keep_s)),
        (f"slimmed, kept one cold start ({args.cold_start:g} s)", measure(record_snapshot, args, args.cold_start)),
    ]
    baseline = rows[0][1][0]
    for label, (per_object, entries) in rows:
        print(f"{label:<44} {per_object:>9,.0f} bytes/object  {entries:5.1f} entries  "
              f"{per_object / baseline:5.2f} × whole  ({per_object * args.objects / 2**20:6.1f} MiB in all)")
    before, after = measure_record(args, True), measure_record(args, False)
    print(f"service record of one pool after a day (two pools an object): dict of buckets {before:,.0f} bytes, "
          f"ring {after:,.0f} bytes ({after / before:.2f} ×; {2 * (before - after) * args.objects / 2**20:.1f} MiB "
          f"less at {args.objects} objects)")
    (before_m, n), (after_m, _) = measure_metrics(args.objects, True), measure_metrics(args.objects, False)
    print(f"/metrics series of one object ({n} series): prometheus-client children {before_m:,.0f} bytes, "
          f"ObjectSeries {after_m:,.0f} bytes ({after_m / before_m:.2f} ×; {(before_m - after_m) * args.objects / 2**20:.1f} "
          f"MiB less at {args.objects} objects)")


if __name__ == "__main__":
    main()
