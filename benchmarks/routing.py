"""The routing benchmark: what routing by prefix saves on the prefix-reuse workload (issue 23).

The Mooncake conversation trace (Kimi's production requests with their prompt blocks' hashes:
equal ids are equal prefixes) served by the long-context spec
(``benchmarks/long-context-llama-70b-h100x8.yaml``) through the simulated fleet
(:mod:`llmscale.sim.fleet`) under each of the router's policies (``FleetConfig.routing``):
``random`` (kube-proxy spreading a Service's connections), ``least-loaded`` and ``prefix-aware``
(an endpoint picker scoring cached prefix within a load slack). For each, the fewest replicas of a
fixed pool that meet the spec's SLO in every measured minute (doubling, then bisection: more
replicas never serve the same requests worse), and at that size the GPU-hours of the run, the
prefix-cache hit rate, TTFT and ITL p95 — GPU-hours at the same SLO. The first
``--warmup-minutes`` are warm-up (excluded from the figures). Prints a Markdown table and writes
``benchmarks/results/routing.md`` (and ``routing-<spec>.json`` per spec).

Usage (from the repository root; the trace is the bundled one by default)::

    .venv/bin/python benchmarks/routing.py [--trace FILE.jsonl] [--minutes 60] [--warmup-minutes 5]
        [--spec SPEC.yaml ...] [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from llmscale.api import LLMDeploymentSpec
from llmscale.model import ReplicaModel
from llmscale.sim.baselines import StaticReplicas
from llmscale.sim.engine_args import engine_config
from llmscale.sim.fleet import ROUTINGS, FleetConfig, simulate
from llmscale.sim.report import summarize
from llmscale.sim.trace import MOONCAKE_CITATION, Trace, load_mooncake_jsonl

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT / "operator" / "llmscale" / "data" / "traces" / "mooncake-conversation-trace.jsonl"
SPECS = [ROOT / "benchmarks" / "long-context-llama-70b-h100x8.yaml", ROOT / "benchmarks" / "long-context-llama-8b-h100.yaml"]


def first_minutes(trace: Trace, minutes: float) -> Trace:
    """The requests of the trace's first ``minutes``."""
    end = trace.start_s + minutes * 60.0
    idx = np.nonzero(trace.arrival_s < end)[0].astype(np.int64)
    return trace.select(idx, start_s=trace.start_s, duration_s=min(trace.duration_s, minutes * 60.0))


def run(spec: LLMDeploymentSpec, trace: Trace, routing: str, n: int, warmup_s: float) -> dict[str, Any]:
    """One run of a fixed pool of ``n`` replicas under ``routing``; the simulator's summary."""
    res = simulate(trace, StaticReplicas(n), ReplicaModel.from_spec(spec), engine=engine_config(spec),
                   fleet=FleetConfig(cold_start_s=spec.headroom.cold_start_seconds, initial_replicas=n,
                                     min_replicas=n, max_replicas=n, gpus_per_replica=spec.resources.gpus_per_replica,
                                     routing=routing),
                   context_limit_tokens=spec.model.context_limit_tokens, itl_slo_s=spec.slo.itl_p95_seconds)
    out = summarize(res, spec.slo, spec.cost.gpu_hour_usd, warmup_s)
    q, h = res.prefix_cache_queries_tokens, res.prefix_cache_hits_tokens
    out["prefix_hit_rate"] = h / q if q else None
    out["replicas"] = n
    return out


def fewest(spec: LLMDeploymentSpec, trace: Trace, routing: str, warmup_s: float, most: int = 64) -> dict[str, Any]:
    """The run at the fewest replicas whose every measured minute meets the SLO."""
    runs: dict[int, dict[str, Any]] = {}

    def meets(n: int) -> bool:
        runs[n] = run(spec, trace, routing, n, warmup_s)
        met = runs[n]["minutes_meeting_slo_fraction"]
        return met is not None and float(met) >= 1.0 and not runs[n]["rejected_requests"]

    low, high = 0, 1
    while not meets(high):
        if high >= most:
            raise SystemExit(f"{routing}: {most} replicas do not meet the SLO")
        low, high = high, min(2 * high, most)
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (low, mid) if meets(mid) else (mid, high)
    best = runs[high]
    best["below"] = runs.get(high - 1)  # the size under it, when tried: the proof it is the fewest
    return best


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", type=Path, default=TRACE, help="a Mooncake-format trace (default: the bundled one)")
    ap.add_argument("--minutes", type=float, default=60.0, help="trace minutes to serve (default 60)")
    ap.add_argument("--warmup-minutes", type=float, default=5.0)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    ap.add_argument("--spec", type=Path, nargs="+", default=SPECS, help="LLMDeployment YAMLs (default both)")
    args = ap.parse_args(argv)
    blocks = [table(path, args) for path in args.spec]
    cmd = f".venv/bin/python benchmarks/routing.py --minutes {args.minutes:g} --warmup-minutes {args.warmup_minutes:g}"
    cite = f"Trace: {MOONCAKE_CITATION}" if args.trace.resolve() == TRACE.resolve() else f"Trace: {args.trace.name}"
    text = "\n".join([*blocks, f"Command: `{cmd}`", "", cite, ""])
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "routing.md").write_text(text)
    return 0


def table(path: Path, args: argparse.Namespace) -> str:
    """The Markdown block of one spec (and its JSON beside the results)."""
    spec = LLMDeploymentSpec.model_validate(yaml.safe_load(path.read_text())["spec"])
    path = path.resolve()
    trace = first_minutes(load_mooncake_jsonl(args.trace), args.minutes)
    warmup_s = args.warmup_minutes * 60.0
    rows = []
    for routing in ROUTINGS:
        t0 = time.perf_counter()
        best = fewest(spec, trace, routing, warmup_s)
        best["cpu_s"] = round(time.perf_counter() - t0, 1)
        rows.append((routing, best))
        print(f"{routing}: {best['replicas']} replicas, {best['cpu_s']} s", file=sys.stderr)
    base = dict(rows)["random"]["gpu_hours"]
    lines = [
        f"### {path.stem}", "",
        f"`{path.relative_to(ROOT)}` on the first {args.minutes:g} minutes of the Mooncake conversation trace "
        f"({len(trace):,} requests, mean prompt {trace.prompt_tokens.mean():,.0f} tokens, block hashes: prefix reuse); "
        f"a fixed pool, the fewest replicas meeting the SLO (TTFT p95 ≤ {spec.slo.ttft_p95_seconds:g} s, ITL p95 ≤ "
        f"{spec.slo.itl_p95_seconds * 1000:g} ms) in every minute after {args.warmup_minutes:g} minutes of warm-up.",
        "",
        "| routing | replicas | GPU-h | × random | prefix hit rate | TTFT p95 (s) | ITL p95 (ms) | minutes meeting SLO "
        "| one replica fewer: minutes meeting SLO |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for routing, r in rows:
        below = r["below"]
        lines.append(
            f"| {routing} | {r['replicas']} | {r['gpu_hours']:,.1f} | {r['gpu_hours'] / base:.2f} | "
            f"{(r['prefix_hit_rate'] or 0):.1%} | {r['ttft_p95_s']:.2f} | {r['itl_p95_s'] * 1000:.0f} | "
            f"{r['minutes_meeting_slo_fraction']:.1%} | "
            + (f"{below['minutes_meeting_slo_fraction']:.1%}" if below else "—") + " |")
    lines.append("")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"routing-{path.stem}.json").write_text(json.dumps(
        {"spec": str(path.relative_to(ROOT)), "minutes": args.minutes,
         "rows": [{"routing": k, **{a: b for a, b in v.items() if a != "below"}} for k, v in rows]},
        indent=2, default=str) + "\n")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
