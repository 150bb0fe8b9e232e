"""``llmscale simulate``: replay a trace through a simulated fleet under each scaling policy.

Reads an LLMDeployment manifest (the file a user applies) and a trace — the Azure LLM inference
trace CSV or the Mooncake JSONL, by default the Azure LLM inference trace 2023 that ships with the
package (:mod:`llmscale.data`) — optionally shapes a day or a week from it, calibrates one
replica's capacity at the spec's SLO, runs the chosen policies and prints a table, JSON or YAML
(keys in docs/cli.md).
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import sys
from pathlib import Path
from typing import Any

import yaml
from rich.markup import escape

__all__ = ["add_arguments", "main", "parse_duration"]

def parse_duration(text: str) -> float:
    """An argparse ``type``: llmscale's one duration grammar (:mod:`llmscale.durations`: ``90``,
    ``90s``, ``1.5m``, ``1h30m``, ``1d``, ``1w``) in seconds; zero allowed (``--warmup 0``).

    Raises:
        argparse.ArgumentTypeError: not a duration.
    """
    from llmscale.durations import parse_duration as parse

    try:
        return parse(text, allow_zero=True)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the verb's arguments."""
    from llmscale.commands.output import add_output_argument
    from llmscale.data import DEFAULT_TRACE
    from llmscale.sim.baselines import POLICY_NAMES

    parser.add_argument("--spec", required=True, help="LLMDeployment manifest (YAML), the file you apply")
    parser.add_argument(
        "--trace", default=None, metavar="PATH|NAME",
        help="trace file — Azure CSV (TIMESTAMP,ContextTokens,GeneratedTokens[,Class]) or Mooncake JSONL "
        "(timestamp, input_length, output_length, hash_ids) — or a bundled trace's name; "
        f"default {DEFAULT_TRACE}: the Azure LLM inference trace 2023 (CC-BY 4.0), shipped with llmscale",
    )
    parser.add_argument(
        "--shape",
        choices=("none", "diurnal", "weekly"),
        default="none",
        help="none: replay the trace (looped to --duration, flat rate --peak-rps); "
        "diurnal: a day shaped by a daily envelope; weekly: days from Monday 00:00 UTC with quieter "
        "weekends (default: none)",
    )
    parser.add_argument("--duration", type=parse_duration, default=None,
                        help="simulated time, e.g. 24h (default: the trace's length; 24h for diurnal, 7d for weekly)")
    parser.add_argument("--peak-rps", type=float, default=None,
                        help="requests/s at the peak (diurnal) or throughout (none); default: the trace's mean rate")
    parser.add_argument("--peak-hour", type=float, default=15.0, help="UTC hour of the diurnal peak (default 15)")
    parser.add_argument("--trough-fraction", type=float, default=0.25,
                        help="overnight rate as a fraction of the peak (default 0.25)")
    parser.add_argument("--weekend-fraction", type=float, default=0.5,
                        help="weekly: weekend rate as a fraction of the weekday rate (default 0.5)")
    parser.add_argument("--batch-fraction", type=float, default=0.0,
                        help="fraction of requests marked batch, for the batch pool (default 0)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the synthesis and the calibration (default 0)")
    parser.add_argument("--policy", choices=(*POLICY_NAMES, "all"), default="all",
                        help="policy to run, or all (default)")
    parser.add_argument("--setting", action="append", default=[], metavar="POLICY=VALUE",
                        help="a baseline's setting instead of its default, e.g. keda-queue=3 or hpa=20 "
                        "(repeatable; what each setting is: docs/simulate.md)")
    parser.add_argument("--autoscaler", action="append", default=[], metavar="FILE",
                        help="your own KEDA ScaledObject or autoscaling/v2 HorizontalPodAutoscaler manifest "
                        "(YAML, repeatable; a file may hold several): simulated beside the policies as "
                        "'yours: <Kind>/<name>'")
    parser.add_argument("--warmup", type=parse_duration, default=None,
                        help="start excluded from every figure (default 10m, at most a quarter of the run)")
    parser.add_argument("--capacity-rps", type=float, default=None,
                        help="requests/s one replica carries within the SLO; skips the calibration search")
    parser.add_argument("--max-num-batched-tokens", type=int, default=None,
                        help="token budget of one engine step (chunked prefill); default: spec.engine.args' "
                        "--max-num-batched-tokens, else vLLM's default for the GPU")
    add_output_argument(parser, ("table", "json", "yaml"), "table")
    parser.add_argument("--plot", default=None, metavar="PNG",
                        help="write a PNG: the load, then each policy's replicas and the minutes that missed "
                        "the SLO (its folder must exist)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar on stderr")


def _fmt(v: Any, spec: str) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "—"
    return format(v, spec)


def main(args: argparse.Namespace) -> int:
    """Run the verb; return the exit status: 0 ok, 2 bad input (checked before simulating),
    1 when the plot cannot be written (the figures are printed first, so they are not lost)."""
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from llmscale.commands.output import write_document
    from llmscale.commands.specfile import SpecFileError, read_llmdeployment
    from llmscale.data import resolve_trace
    from llmscale.fielderrors import suggestion
    from llmscale.sim.baselines import POLICY_NAMES, TUNABLE
    from llmscale.sim.engine_args import engine_config
    from llmscale.sim.manifests import UnsupportedAutoscaler, autoscaler_from_manifest
    from llmscale.sim.plot import plot_day
    from llmscale.sim.runner import Scenario, compare
    from llmscale.sim.trace import (
        DiurnalEnvelope,
        Envelope,
        TraceFormatError,
        WeeklyEnvelope,
        load_trace,
        synthesize,
    )

    err = Console(stderr=True)
    if args.plot and importlib.util.find_spec("matplotlib") is None:
        print("llmscale simulate: error: --plot needs matplotlib, which the operator's image leaves out: "
              "pip install 'llmscale[plot]'", file=sys.stderr)
        return 2
    if args.plot and not Path(args.plot).resolve().parent.is_dir():
        err.print(f"[red]Cannot write the plot:[/red] no folder {escape(str(Path(args.plot).parent))}")
        return 2
    try:
        manifest = read_llmdeployment(args.spec)
        spec = manifest.spec
    except SpecFileError as exc:
        for line in exc.lines:
            print(f"llmscale simulate: error: {line}", file=sys.stderr)
        return 2
    from llmscale.model import ModelDoesNotFit, ReplicaModel
    from llmscale.planner import check_fits

    try:
        check_fits(ReplicaModel.from_spec(spec), spec.model.context_limit_tokens)
    except (ModelDoesNotFit, KeyError, ValueError) as exc:
        err.print(f"[red]The LLMDeployment's model cannot run:[/red] {escape(str(exc))}")
        return 2
    try:
        engine = engine_config(spec, max_num_batched_tokens=args.max_num_batched_tokens)
    except ValueError as exc:
        err.print(f"[red]Could not set the engine's limits:[/red] {escape(str(exc))}")
        return 2
    try:
        trace_file = resolve_trace(args.trace)
        base = load_trace(trace_file)
    except (OSError, TraceFormatError) as exc:
        err.print(f"[red]Could not read the trace:[/red] {escape(str(exc))}")
        return 2
    default_duration = {"none": base.duration_s, "diurnal": 86_400.0, "weekly": 7 * 86_400.0}[args.shape]
    duration = args.duration if args.duration is not None else default_duration
    try:
        envelope: Envelope | None = None
        if args.shape != "none":
            day = DiurnalEnvelope(args.peak_hour, args.trough_fraction)
            envelope = day if args.shape == "diurnal" else WeeklyEnvelope(day, args.weekend_fraction)
        trace = synthesize(
            base,
            duration_s=duration,
            peak_rps=args.peak_rps,
            envelope=envelope,
            seed=args.seed,
            batch_fraction=args.batch_fraction,
        )
    except ValueError as exc:
        err.print(f"[red]Could not shape the trace:[/red] {escape(str(exc))}")
        return 2
    warmup = args.warmup if args.warmup is not None else min(600.0, duration / 4)
    if warmup >= duration:
        err.print("[red]The warm-up must be shorter than the run[/red]")
        return 2
    names = list(POLICY_NAMES) if args.policy == "all" else [args.policy]
    name = manifest.metadata.get("name", "?")
    settings: dict[str, float] = {}
    for item in args.setting:
        policy, _, value = item.partition("=")
        if policy not in TUNABLE:
            print(f"llmscale simulate: error: --setting {item}: Unsupported value: {policy!r}"
                  f"{suggestion(policy, TUNABLE)} (policies with a setting: {', '.join(TUNABLE)})", file=sys.stderr)
            return 2
        try:
            settings[policy] = float(value)
        except ValueError:
            settings[policy] = -1.0
        if not settings[policy] > 0 or not math.isfinite(settings[policy]):
            print(f"llmscale simulate: error: --setting {item}: Invalid value: {value!r}: must be a number > 0 "
                  f"({policy}: {TUNABLE[policy]})", file=sys.stderr)
            return 2
        if policy not in names:
            names.append(policy)
    custom = []
    for path in args.autoscaler:
        try:
            with Path(path).open(encoding="utf-8") as stream:
                found = [d for d in yaml.safe_load_all(stream)
                         if isinstance(d, dict) and d.get("kind") in ("ScaledObject", "HorizontalPodAutoscaler")]
            if not found:
                raise UnsupportedAutoscaler("no ScaledObject or HorizontalPodAutoscaler in it")
            custom += [autoscaler_from_manifest(d, spec) for d in found]
        except (OSError, yaml.YAMLError, UnsupportedAutoscaler) as exc:
            print(f"llmscale simulate: error: --autoscaler {path}: {exc}", file=sys.stderr)
            return 2

    progress = Progress(
        TextColumn("{task.description}"), BarColumn(), TextColumn("{task.percentage:>3.0f}%"),
        TimeElapsedColumn(), console=err, disable=args.quiet, transient=True,
    )
    with progress:
        task = progress.add_task("calibrating capacity at the SLO", total=None)
        try:
            sc = Scenario.build(spec, trace, base, warmup_s=warmup, seed=args.seed, capacity_rps=args.capacity_rps,
                                engine=engine)
        except ValueError as exc:
            err.print(f"[red]Could not set up the simulation:[/red] {escape(str(exc))}")
            return 2
        total = trace.duration_s

        def tick(policy: str, t: float) -> None:
            progress.update(task, description=f"simulating {policy}", total=total,
                            completed=min(total, t - trace.start_s))

        results = compare(sc, names, tick, settings=settings, custom=custom)

    summaries = [s for s, _ in results]
    cap = sc.capacity
    citation = trace.citation or f"{trace_file.name}: not a known public trace, no citation"
    scenario = {
        "llmdeployment": name,
        "trace": trace.source,
        "trace_citation": citation,
        "requests_total": len(trace),
        "duration_s": trace.duration_s,
        "warmup_s": warmup,
        "seed": args.seed,
        "capacity_rps_per_replica": cap.rate_rps,
        "capacity_concurrency_per_replica": cap.concurrency,
        "capacity_running_per_replica": cap.running,
        "capacity_kv_cache_utilization_per_replica": cap.kv_cache_utilization,
        "max_num_seqs": sc.engine.max_num_seqs,
        "max_num_batched_tokens": sc.engine.max_num_batched_tokens,
        "prefix_caching": sc.engine.enable_prefix_caching and trace.has_hashes,
        "cold_start_s": spec.headroom.cold_start_seconds,
    }
    if args.output in ("json", "yaml"):
        write_document({"scenario": scenario, "results": summaries}, args.output)
    else:
        _print_table(name, trace, warmup, spec, cap, summaries, citation)
    if args.plot:
        try:
            plot_day(
                {s["policy"]: series for s, series in results},  # type: ignore[misc]
                args.plot,
                title=f"{name}: {trace.source}",
                footnote=f"Trace: {citation}",
                warmup_s=warmup,
            )
        except OSError as exc:
            err.print(f"[red]Could not write the plot {escape(str(args.plot))}:[/red] {escape(str(exc))}")
            return 1
        err.print(f"Plot written to {escape(str(args.plot))}")
    return 0


def _print_table(name: str, trace: Any, warmup: float, spec: Any, cap: Any,
                 summaries: list[dict[str, Any]], citation: str) -> None:
    """Print the scenario line, one row per policy and the trace's attribution, for people."""
    from rich.console import Console
    from rich.table import Table
    # A pipe or file gets the whole table, not one squeezed to 80 columns.
    out = Console() if sys.stdout.isatty() else Console(width=200)
    out.print(
        f"LLMDeployment {name}: {len(trace):,} requests over {trace.duration_s / 3600:.1f} h "
        f"({trace.source}); warm-up {warmup:.0f} s excluded. SLO p95 TTFT ≤ {spec.slo.ttft_p95_seconds:g} s, "
        f"ITL ≤ {spec.slo.itl_p95_seconds:g} s. Calibrated capacity {cap.rate_rps:.2f} req/s per replica."
    )
    table = Table(show_lines=False)
    for col in ("policy", "GPU-h", "SLO att.", "minutes OK", "TTFT p50/p95/p99 s", "ITL p50/p95/p99 ms",
                "goodput tok/GPU-h", "$/M tok", "replicas mean/peak", "scale events", "preempt."):
        table.add_column(col, justify="left" if col == "policy" else "right", no_wrap=col == "policy")
    for s in summaries:
        table.add_row(
            str(s["policy"]),
            _fmt(s["gpu_hours"], ".1f"),
            _fmt(s["slo_attainment"], ".2%"),
            _fmt(s["minutes_meeting_slo_fraction"], ".2%"),
            "/".join(_fmt(s[k], ".2f") for k in ("ttft_p50_s", "ttft_p95_s", "ttft_p99_s")),
            "/".join(_fmt(None if s[k] is None else 1000 * float(s[k]), ".0f")  # type: ignore[arg-type]
                     for k in ("itl_p50_s", "itl_p95_s", "itl_p99_s")),
            _fmt(s["goodput_tokens_per_gpu_hour"], ",.0f"),
            _fmt(s["usd_per_million_tokens"], ".3f"),
            f"{s['mean_replicas']:.2f}/{s['peak_replicas']}",
            str(s["scale_events"]),
            str(s["preemptions"]),
        )
    out.print(table)
    out.print(f"Trace: {citation}")
