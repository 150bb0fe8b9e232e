"""The batch benchmark: a day where about 30 % of the tokens are batch Jobs with deadlines, run
three ways on the same requests (:mod:`llmscale.sim.batchday`).

- ``trough``: the Jobs are created suspended; the operator's own batch step
  (:func:`llmscale.policy.batch.step.batch_step`) releases them in the 00:00–06:00 UTC trough
  window (earlier for a deadline that cannot wait) onto a batch pool sized from their backlog;
- ``alongside``: each Job runs as it is created, through the interactive Service, whose pool
  llmscale's :func:`~llmscale.policy.decide` sizes: batch served alongside interactive traffic;
- ``interactive-only``: the interactive traffic alone, the reference for the interactive SLO.

The day: the Azure LLM inference trace 2023 (CC-BY 4.0; Patel et al., "Splitwise", ISCA 2024;
shipped in the package) time-rescaled to the ``azure-day`` workload's diurnal day (peak 50 requests/s at
15:00 UTC), plus 24 Jobs created between 06:00 and 20:00 UTC whose requests are drawn from the same
trace; each has a 4-hour deadline annotation with probability 1/8, else the spec's 24 h completion
window.
Each Job's client keeps ``--concurrency`` requests in flight: the trough and alongside modes run
once at ``llmscale batch run``'s default, 64, and once at 512 (the planner reads each Job's
requests in flight and sizes the pool to what they keep busy). Simulated for 48 h (the day, and the next one, by whose end every Job is due) with the LLMDeployment in
``benchmarks/chat-llama-70b-h100-batch.yaml``. With ``--cluster-gpus N`` each trough row is run a
second time on a cluster of N GPUs, whose GPUs free the planner is told each tick (as the operator
reads them from the nodes): Jobs are then also released onto idle GPUs before the window. Writes:

- ``benchmarks/results/batch-day.md``   — the Markdown table docs/benchmarks.md quotes, with the command;
- ``benchmarks/results/batch-day.json`` — every figure of every mode and every Job's outcome.

Usage (from the repository root)::

    .venv/bin/python benchmarks/batch_day.py [--peak-rps 50] [--seed 0] [--jobs 24] [--cluster-gpus N]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from llmscale.api import LLMDeployment
from llmscale.crd import replace_block
from llmscale.data import DEFAULT_TRACE, resolve_trace
from llmscale.sim.batchday import MODES, batch_day, run_batch_day
from llmscale.sim.runner import Scenario
from llmscale.sim.trace import TRACE_CITATION, load_azure_csv

HERE = Path(__file__).resolve().parent
SPEC = HERE / "chat-llama-70b-h100-batch.yaml"
README = HERE.parent / "docs" / "benchmarks.md"


def _pct(v: object) -> str:
    return "—" if v is None else f"{float(v):.2%}"  # type: ignore[arg-type]


def markdown(scenario: dict[str, Any], rows: list[dict[str, Any]], command: str) -> str:
    """The table of the modes (GPU-hours of both pools, peak GPUs, the interactive SLO, the Jobs
    that met their deadline, batch tokens served) with the scenario and the command that
    reproduces it."""
    by = {r["mode"]: r for r in rows}
    alone = by.get("interactive-only", {}).get("gpu_hours")
    lines = [
        f"LLMDeployment `chat` (`benchmarks/chat-llama-70b-h100-batch.yaml`): the azure-day workload's "
        f"deployment with a batch pool of at most {scenario['batch_max_replicas']} replicas, trough window "
        f"{scenario['window']}. {scenario['trace']}; {scenario['jobs']} Jobs, "
        f"{scenario['batch_token_fraction']:.1%} of the first day's prompt + output tokens are batch; "
        f"{scenario['short_deadline_jobs']} Jobs due 4 h after creation, the rest 24 h. Simulated "
        f"{scenario['duration_s'] / 3600:g} h; the first {scenario['warmup_s'] / 60:g} minutes are warm-up, excluded.",
        "",
        "| mode, Jobs' clients | GPU-h (both pools) | GPU-h for batch | peak GPUs | interactive SLO attainment | minutes meeting SLO "
        "| interactive TTFT p95 (s) | Jobs meeting deadline | batch tokens served |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        extra = "—" if alone is None or r["mode"] == "interactive-only" else f"{r['gpu_hours'] - alone:,.0f}"
        jobs = "—" if not r["jobs"] else f"{r['jobs_met']} / {r['jobs']}"
        lines.append(
            f"| {r['row']} | {r['gpu_hours']:,.0f} | {extra} | {r['peak_gpus']} | {_pct(r['slo_attainment'])} "
            f"| {_pct(r['minutes_meeting_slo_fraction'])} | {r['ttft_p95_s']:.2f} | {jobs} "
            f"| {r['batch_tokens_done']:,} |"
        )
    lines += ["", f"Reproduce: `{command}` ({scenario['wall_s']:.0f} s on this machine). Trace: {TRACE_CITATION}.", ""]
    return "\n".join(lines)


def update_readme(path: Path, table: str) -> None:
    """Replace the ``batch-day`` generated block of ``path`` with ``table``.

    Raises:
        ValueError: the file has no such block.
    """
    path.write_text(replace_block(path.read_text(encoding="utf-8"), "batch-day", table), encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; return the exit status."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", default=str(SPEC))
    ap.add_argument("--trace", default=DEFAULT_TRACE,
                    help="trace CSV (Azure format) or a bundled trace's name (default %(default)s)")
    ap.add_argument("--peak-rps", type=float, default=50.0)
    ap.add_argument("--jobs", type=int, default=24)
    ap.add_argument("--hours", type=float, default=48.0,
                    help="hours simulated from 00:00 UTC of the first day; 48 covers every Job's deadline "
                    "(the last created at 20:00, due 24 h later)")
    ap.add_argument("--batch-fraction", type=float, default=0.3)
    ap.add_argument("--concurrency", default="64,512",
                    help="each Job client's requests in flight (llmscale batch run --concurrency), one row "
                    "per value for the trough and alongside modes (default %(default)s: the client's default "
                    "and one that fills the batch pool)")
    ap.add_argument("--cluster-gpus", type=int, default=None,
                    help="also run each trough row on a cluster of this many GPUs, the planner told the GPUs "
                    "free (cluster less both pools) each tick, so Jobs also run early on idle GPUs "
                    "(default: none; the GPUs free unknown, as an operator without the node read)")
    ap.add_argument("--warmup", type=float, default=600.0, help="seconds excluded from the figures")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(HERE / "results"))
    ap.add_argument("--readme", default=None,
                    help="Markdown file whose 'batch-day' generated block gets the table (default: the "
                    "repository's docs/benchmarks.md when --out is the checked-in results folder, else none)")
    args = ap.parse_args(argv)

    concurrencies = [int(c) for c in args.concurrency.split(",") if c.strip()]
    if not concurrencies or min(concurrencies) < 1:
        print("batch_day.py: --concurrency takes positive integers, comma-separated", file=sys.stderr)
        return 2
    if args.cluster_gpus is not None and args.cluster_gpus < 1:
        print("batch_day.py: --cluster-gpus takes a positive integer", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    doc = yaml.safe_load(Path(args.spec).read_text(encoding="utf-8"))
    spec = LLMDeployment.model_validate(doc).spec
    if spec.batch is None:
        print(f"batch_day.py: {args.spec} has no spec.batch", file=sys.stderr)
        return 2
    base = load_azure_csv(resolve_trace(args.trace))
    day = batch_day(base, spec, duration_s=args.hours * 3600.0, peak_rps=args.peak_rps, seed=args.seed, jobs=args.jobs,
                    batch_token_fraction=args.batch_fraction)
    sc = Scenario.build(spec, day.trace, base, warmup_s=args.warmup, seed=args.seed)
    rows: list[dict[str, Any]] = []
    jobs: dict[str, list[dict[str, Any]]] = {}
    clusters: list[int | None] = [None] if args.cluster_gpus is None else [None, args.cluster_gpus]
    runs = [(mode, c, g) for mode in MODES if mode != "interactive-only" for c in concurrencies
            for g in (clusters if mode == "trough" else [None])]
    for mode, c, gpus in [*runs, ("interactive-only", concurrencies[0], None)]:
        summary, outcomes, _ = run_batch_day(sc, day, mode, concurrency=c, cluster_gpus=gpus)
        label = mode if mode == "interactive-only" else f"{mode}, --concurrency {c}"
        if gpus is not None:
            label += f", idle GPUs of a {gpus}-GPU cluster"
        summary["row"] = label
        rows.append(summary)
        jobs[label] = outcomes
        print(f"batch_day.py: {label}: {summary['gpu_hours']:,.0f} GPU-h, peak {summary['peak_gpus']} GPUs, "
              f"SLO {_pct(summary['slo_attainment'])}, Jobs met {summary['jobs_met']}/{summary['jobs']}",
              file=sys.stderr, flush=True)
    wall = time.perf_counter() - t0
    w = spec.batch.windows[0]
    scenario = {
        "trace": day.source,
        "trace_citation": TRACE_CITATION,
        "requests_total": len(day.trace),
        "duration_s": day.trace.duration_s,
        "warmup_s": args.warmup,
        "seed": args.seed,
        "peak_rps": args.peak_rps,
        "jobs": len(day.jobs),
        "short_deadline_jobs": sum(1 for j in day.jobs if j.deadline_source == "annotation"),
        "batch_token_fraction": day.batch_token_fraction,
        "batch_max_replicas": spec.batch.most_replicas(),
        "window": f"{w.start}–{w.end} {w.timezone}",
        "capacity_rps_per_replica": sc.capacity.rate_rps,
        "wall_s": wall,
    }
    command = ".venv/bin/python benchmarks/batch_day.py" + (
        f" --peak-rps {args.peak_rps:g}" if args.peak_rps != 50.0 else "") + (
        f" --seed {args.seed}" if args.seed else "") + (f" --jobs {args.jobs}" if args.jobs != 24 else "") + (
        f" --concurrency {args.concurrency}" if args.concurrency != "64,512" else "") + (
        f" --hours {args.hours:g}" if args.hours != 48.0 else "") + (
        f" --cluster-gpus {args.cluster_gpus}" if args.cluster_gpus is not None else "")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "batch-day.json").write_text(json.dumps({"scenario": scenario, "results": rows, "jobs": jobs}, indent=2)
                                        + "\n")
    table = markdown(scenario, rows, command)
    (out / "batch-day.md").write_text(table)
    readme = args.readme or (str(README) if out.resolve() == (HERE / "results").resolve() else None)
    if readme:
        update_readme(Path(readme), table)
    sys.stdout.write(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
