"""The goodput benchmark: every scaling policy over one simulated day of real traffic.

Runs ``llmscale simulate``'s engine for all policies on the Azure LLM inference trace 2023
(CC-BY 4.0; Patel et al., "Splitwise", ISCA 2024; shipped in the package, :mod:`llmscale.data`),
time-rescaled to a diurnal day, with the
LLMDeployment in ``benchmarks/chat-llama-70b-h100.yaml``, and writes:

- ``benchmarks/results/goodput.md``   — the Markdown table the README quotes, with the command;
- ``benchmarks/results/goodput.json`` — every figure of every policy (keys: docs/simulate.md);
- ``benchmarks/results/goodput.png``  — load, replicas per policy and p95 TTFT per minute.

Usage (from the repository root)::

    .venv/bin/python benchmarks/goodput.py [--peak-rps 50] [--seed 0] [--duration 24h]

Rules followed (one variable at a time): every policy gets the same requests, the same warm start,
the same cluster behaviour and the same calibrated capacity; the warm-up is excluded and stated;
TTFT and ITL are reported separately at p50/p95/p99; the load is a rate, not saturation.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import sys
import time
from pathlib import Path

import yaml
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from llmscale.api import LLMDeployment
from llmscale.commands.simulate import parse_duration
from llmscale.data import DEFAULT_TRACE, resolve_trace
from llmscale.sim.baselines import POLICY_NAMES
from llmscale.sim.plot import plot_day
from llmscale.sim.runner import Scenario, compare
from llmscale.sim.trace import TRACE_CITATION, DiurnalEnvelope, load_azure_csv, synthesize

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SPEC = HERE / "chat-llama-70b-h100.yaml"


def _merge(into: dict[str, object], patch: dict[str, object]) -> None:
    for key, value in patch.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)  # type: ignore[arg-type]
        else:
            into[key] = value


def _f(v: object, fmt: str) -> str:
    return "—" if v is None else format(v, fmt)


def markdown(scenario: dict[str, object], rows: list[dict[str, object]], command: str) -> str:
    """Return the results as a Markdown section (table + how it was made)."""
    lines = [
        "| policy | GPU-h | SLO attainment | minutes meeting SLO | TTFT p50 / p95 / p99 (s) "
        "| ITL p50 / p95 / p99 (ms) | goodput (tok/GPU-h) | $/M tok | replicas mean / peak "
        "| scale events |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for s in rows:
        ttft = " / ".join(_f(s[k], ".2f") for k in ("ttft_p50_s", "ttft_p95_s", "ttft_p99_s"))
        itl = " / ".join(
            _f(None if s[k] is None else 1000 * float(s[k]), ".0f")  # type: ignore[arg-type]
            for k in ("itl_p50_s", "itl_p95_s", "itl_p99_s")
        )
        lines.append(
            f"| {s['policy']} | {_f(s['gpu_hours'], ',.0f')} | {_f(s['slo_attainment'], '.2%')} "
            f"| {_f(s['minutes_meeting_slo_fraction'], '.2%')} | {ttft} | {itl} "
            f"| {_f(s['goodput_tokens_per_gpu_hour'], ',.0f')} | {_f(s['usd_per_million_tokens'], '.2f')} "
            f"| {_f(s['mean_replicas'], '.1f')} / {s['peak_replicas']} | {s['scale_events']} |"
        )
    sc = scenario
    head = (
        f"LLMDeployment `{sc['llmdeployment']}` (`benchmarks/chat-llama-70b-h100.yaml`: Llama-3.1-70B bf16 "
        f"on 4 × H100-SXM per replica, SLO p95 TTFT ≤ {sc['slo_ttft_s']} s and ITL ≤ {sc['slo_itl_s']} s, "
        f"cold start {sc['cold_start_s']:.0f} s, ${sc['gpu_hour_usd']}/GPU-h). "
        f"{sc['requests_total']:,} requests over {float(sc['duration_s']) / 3600:.0f} h "  # type: ignore[arg-type]
        f"({sc['trace']}); the first {float(sc['warmup_s']) / 60:.0f} minutes are warm-up, excluded. "  # type: ignore[arg-type]
        f"Calibrated capacity: {float(sc['capacity_rps_per_replica']):.2f} req/s per replica at "  # type: ignore[arg-type]
        f"{float(sc['capacity_concurrency_per_replica']):.1f} requests in flight "  # type: ignore[arg-type]
        f"(the oracle's and static-peak's sizing, hpa's and kpa's per-pod targets)."
    )
    return "\n".join(
        [
            head,
            "",
            *lines,
            "",
            f"Reproduce: `{command}` ({sc['wall_s']:.0f} s on this machine). "
            f"Trace: {TRACE_CITATION}.",
            "",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; return the exit status."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", default=str(SPEC))
    ap.add_argument("--trace", default=DEFAULT_TRACE,
                    help="trace CSV (Azure format) or a bundled trace's name (default %(default)s)")
    ap.add_argument("--peak-rps", type=float, default=50.0)
    ap.add_argument("--duration", type=parse_duration, default=86_400.0)
    ap.add_argument("--warmup", type=parse_duration, default=600.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--policies", default=",".join(POLICY_NAMES))
    ap.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="LABEL=JSON",
        help="an extra llmscale row with spec fields changed, e.g. "
        "'kv 0.14={\"scaling\": {\"targets\": {\"kvCacheUtilization\": 0.14}}}' (camelCase, merged "
        "into spec); one variable at a time",
    )
    ap.add_argument("--out", default=str(HERE / "results"))
    ap.add_argument(
        "--readme",
        default=None,
        help="Markdown file whose 'benchmark' generated block gets the table (default: the "
        "repository's README.md when --out is the checked-in results folder, else none)",
    )
    args = ap.parse_args(argv)

    t0 = time.perf_counter()
    doc = yaml.safe_load(Path(args.spec).read_text(encoding="utf-8"))
    spec = LLMDeployment.model_validate(doc).spec
    base = load_azure_csv(resolve_trace(args.trace))
    trace = synthesize(base, duration_s=args.duration, peak_rps=args.peak_rps, envelope=DiurnalEnvelope(),
                       seed=args.seed)
    names = [n.strip() for n in args.policies.split(",") if n.strip()]
    err = Console(stderr=True)
    progress = Progress(TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(), console=err,
                        transient=True)
    with progress:
        task = progress.add_task("calibrating", total=None)
        sc = Scenario.build(spec, trace, base, warmup_s=args.warmup, seed=args.seed)

        def tick(policy: str, t: float) -> None:
            progress.update(task, description=f"simulating {policy}", total=trace.duration_s,
                            completed=t - trace.start_s)

        results = compare(sc, names, tick)
        for variant in args.variant:
            label, _, patch = variant.partition("=")
            vdoc = json.loads(json.dumps(doc))
            _merge(vdoc["spec"], json.loads(patch))
            vsc = dataclasses.replace(sc, spec=LLMDeployment.model_validate(vdoc).spec)
            summary, series = compare(vsc, ["llmscale"], tick)[0]
            summary["policy"] = f"llmscale ({label.strip()})"
            results.insert(1, (summary, series))
    wall = time.perf_counter() - t0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = [s for s, _ in results]
    scenario = {
        "llmdeployment": (doc.get("metadata") or {}).get("name", "?"),
        "trace": trace.source,
        "trace_citation": TRACE_CITATION,
        "requests_total": len(trace),
        "duration_s": trace.duration_s,
        "warmup_s": args.warmup,
        "seed": args.seed,
        "peak_rps": args.peak_rps,
        "slo_ttft_s": spec.slo.ttft_p95_seconds,
        "slo_itl_s": spec.slo.itl_p95_seconds,
        "cold_start_s": spec.headroom.cold_start_seconds,
        "gpu_hour_usd": spec.cost.gpu_hour_usd,
        "capacity_rps_per_replica": sc.capacity.rate_rps,
        "capacity_concurrency_per_replica": sc.capacity.concurrency,
        "capacity_running_per_replica": sc.capacity.running,
        "wall_s": wall,
    }
    command = ".venv/bin/python benchmarks/goodput.py" + (
        f" --peak-rps {args.peak_rps:g}" if args.peak_rps != 50.0 else ""
    ) + (f" --seed {args.seed}" if args.seed else "") + "".join(
        f" --variant '{v}'" for v in args.variant
    )
    (out / "goodput.json").write_text(json.dumps({"scenario": scenario, "results": rows}, indent=2) + "\n")
    (out / "goodput.md").write_text(markdown(scenario, rows, command))
    plot_day(
        {str(s["policy"]): series for s, series in results},
        out / "goodput.png",
        ttft_slo_s=spec.slo.ttft_p95_seconds,
        title=f"{scenario['llmdeployment']}: {trace.source}",
        footnote=f"Trace: {TRACE_CITATION}",
        warmup_s=args.warmup,
    )
    readme = args.readme or (str(README) if out.resolve() == (HERE / "results").resolve() else None)
    if readme:
        update_readme(Path(readme), (out / "goodput.md").read_text())
    sys.stdout.write((out / "goodput.md").read_text())
    return 0


README = HERE.parent / "README.md"
_BLOCK = re.compile(
    r"(<!-- BEGIN GENERATED: benchmark[^>]*-->\n)(.*?)(<!-- END GENERATED: benchmark -->)", re.DOTALL
)


def update_readme(path: Path, table: str) -> None:
    """Replace the ``benchmark`` generated block of ``path`` with ``table``.

    Raises:
        ValueError: the file has no such block.
    """
    text = path.read_text(encoding="utf-8")
    if not _BLOCK.search(text):
        raise ValueError(f"{path} has no '<!-- BEGIN GENERATED: benchmark -->' block")
    path.write_text(_BLOCK.sub(lambda m: m.group(1) + table.strip() + "\n" + m.group(3), text), encoding="utf-8")


if __name__ == "__main__":
    raise SystemExit(main())
