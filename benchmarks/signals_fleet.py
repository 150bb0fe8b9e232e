"""How much Python one fleet-wide signal read costs, against reading pool by pool.

The reader sends seven instant queries per engine profile per tick and splits the answers per
pool and pod in Python (docs/signals.md). This script builds the answers Prometheus would give
for a fleet of ``--deployments`` LLMDeployments (two pools each, ``--pods`` pods a pool), as JSON
text, and times what the operator then does each tick: decode, split per pool and pod
(``parse_group``) and build every pool's snapshot (``assemble``). The baseline, in the same
process, is the same work done pool by pool: one set of answers per pool, decoded and assembled
separately (what a per-pool read costs in Python, before its 7 × pools round trips).
Prometheus's own evaluation time is not measured here.

Usage: ``.venv/bin/python benchmarks/signals_fleet.py [--deployments 1000] [--pods 4] [--repeat 3]``
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from llmscale.signals import PoolTarget, RateWindow, get_profile
from llmscale.signals.answer import FleetAnswer, parse_group
from llmscale.signals.assemble import assemble
from llmscale.signals.queries import GROUP_OF, GROUPS, POOL_GROUP, SIGNAL_LABEL, SelectorLabels

PROFILE = get_profile("vllm")
LABELS = SelectorLabels()
WINDOW = RateWindow(window_s=60.0, promql="60s", scrape_interval_s=15.0, interval_source="targets", auto=True)
EVAL = 1_700_000_000.0
POD_VALUES = {
    "queue_depth": 3.0,
    "running_requests": 40.0,
    "kv_cache_utilization": 0.6,
    "newest_sample_s": EVAL - 5,
    "samples_in_window": 5.0,
    "running_min": 30.0,
}
RATE_VALUES = {signal: 1.5 for signal in GROUPS["rates"] if signal != "prefix_cache_hit_rate_gauge"}
POOL_VALUES = {signal: 0.4 for signal in POOL_GROUP}


def answers(pools: list[PoolTarget], pods: int) -> dict[str, str]:
    """The JSON bodies' ``data.result`` of the query groups for ``pools``, as JSON text (every metric
    exported, so the ``absent`` group answers no series)."""
    out: dict[str, list[Any]] = {group: [] for group in GROUPS}

    def series(pool: PoolTarget, signal: str, value: float, **extra: str) -> dict[str, Any]:
        metric = {
            LABELS.namespace: pool.namespace,
            LABELS.deployment: pool.deployment,
            LABELS.pool: pool.pool,
            SIGNAL_LABEL: signal,
            **extra,
        }
        return {"metric": metric, "value": [EVAL, f"{value:g}"]}

    for pool in pools:
        for i in range(pods):
            pod = f"{pool.deployment}-{pool.pool}-{i}"
            out["pods"] += [series(pool, s, v, pod=pod) for s, v in POD_VALUES.items()]
            out["rates"] += [series(pool, s, v, pod=pod) for s, v in RATE_VALUES.items()]
        for s, v in POOL_VALUES.items():
            out[GROUP_OF[s]].append(series(pool, s, v))
    return {group: json.dumps(result) for group, result in out.items()}


def read(bodies: dict[str, str], pools: list[PoolTarget], live: dict[PoolTarget, frozenset[str]]) -> int:
    """Decode, split and assemble; return the number of snapshots with a known queue."""
    answer = FleetAnswer()
    for group, body in bodies.items():
        parse_group(answer, group, json.loads(body), LABELS)
    known = 0
    for pool in pools:
        snap = assemble(pool, PROFILE, answer, WINDOW, EVAL, LABELS, live[pool])
        known += snap.queue_depth is not None
    return known


def best_of(repeat: int, fn: Any) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Run the benchmark and print its figures; return them (for the test)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--deployments", type=int, default=1000)
    ap.add_argument("--pods", type=int, default=4, help="pods per pool")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    pools = [PoolTarget("ml", f"d{i}", p) for i in range(args.deployments) for p in ("interactive", "batch")]
    live = {pool: frozenset(f"{pool.deployment}-{pool.pool}-{i}" for i in range(args.pods)) for pool in pools}
    fleet = answers(pools, args.pods)
    per_pool = [(pool, answers([pool], args.pods)) for pool in pools]

    def fleet_read() -> None:
        assert read(fleet, pools, live) == len(pools)

    def pool_reads() -> None:
        assert sum(read(bodies, [pool], live) for pool, bodies in per_pool) == len(pools)

    fleet_s = best_of(args.repeat, fleet_read)
    pools_s = best_of(args.repeat, pool_reads)
    size = sum(len(b) for b in fleet.values())
    series = sum(len(json.loads(b)) for b in fleet.values())
    figures = {
        "pools": float(len(pools)),
        "answer_series": float(series),
        "answer_mib": size / 2**20,
        "fleet_read_s": fleet_s,
        "per_pool_reads_s": pools_s,
        "ratio": pools_s / fleet_s,
    }
    print(f"{args.deployments} LLMDeployments, {len(pools)} pools, {args.pods} pods a pool")
    print(
        f"answers: {series} series, {size / 2**20:.1f} MiB of JSON in {len(GROUPS)} queries (per-pool reads: {len(GROUPS) * len(pools)} queries)"
    )
    print(
        f"fleet read, decode + split + assemble: {fleet_s * 1000:.0f} ms a tick ({fleet_s / len(pools) * 1e6:.0f} µs a pool)"
    )
    print(
        f"pool by pool, same work:               {pools_s * 1000:.0f} ms a tick ({pools_s / fleet_s:.2f}× the fleet read)"
    )
    return figures


if __name__ == "__main__":
    main()
