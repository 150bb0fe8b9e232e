"""The workloads benchmark: every scaling policy over several simulated workloads, each baseline at
its best setting, judged by one SLO definition.

For each workload (:data:`WORKLOADS`: the Azure conversation day, the Mooncake long-context day,
a prefill-heavy day, an Azure conversation week with quieter weekends) it calibrates one replica's
capacity at the spec's SLO, then runs llmscale (its current defaults), static-peak, the oracle, and
every tunable baseline (hpa, keda-queue, keda-llmd, kpa, aibrix-kv) at each setting of its grid
(``llmscale.sim.baselines.SETTING_GRID``), across ``--jobs`` processes. Each baseline is reported
at its cheapest setting that meets the SLO in ≥ 99 % of minutes (or, if none does, its best
attainment), named in the table. It writes:

- ``benchmarks/results/workloads.md``   — one table per workload (docs/benchmarks.md quotes it),
  with the sweeps and the command; the README's ``headline`` block is one row per workload from it;
- ``benchmarks/results/workloads.json`` — every figure of every run (keys: docs/cli.md's
  ``llmscale simulate`` JSON);
- ``benchmarks/results/<workload>.png`` — the load and one panel per reported policy.

A minute meets the SLO when its ``histogram_quantile(0.95)`` of TTFT and of per-token ITL (vLLM's
histograms, as the operator reads them) are within the targets — see docs/simulate.md.

Usage (from the repository root)::

    .venv/bin/python benchmarks/workloads.py [--trace-dir DIR] [--workloads azure-day,...]
        [--policies llmscale,oracle] [--seed N] [--jobs 2] [--quick] [--out DIR]
        [--variant 'LABEL={"scaling": {...}}'] [--update RESULTS.json]

``--quick`` runs every workload for 20 minutes at a low rate with a two-point grid: a check that
everything runs (the tests use it), not a result.

``--update benchmarks/results/workloads.json --policies llmscale,oracle`` reruns only those policies
(on ``--workloads``, default all) and merges them into the results: their rows, sweeps and runs are
replaced, the others kept, and the tables, plots and docs/README blocks are rewritten as a full run would.
Each kept row is rerun once at its reported setting (its plot needs the minute series, which the
JSON does not keep) and the update stops, writing nothing, if its figures or the calibrated
capacities differ from the stored ones: the simulator changed, and only a full run is honest then.
The JSON's ``run.updates`` lists every such partial rerun (command, policies, workloads, UTC time,
commit); the tables say which rows are newer than the full run.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import multiprocessing
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from llmscale.api import LLMDeployment, LLMDeploymentSpec
from llmscale.crd import has_block, replace_block
from llmscale.model import ReplicaModel
from llmscale.sim.baselines import POLICY_NAMES, SETTING_GRID, TUNABLE
from llmscale.sim.calibrate import CURVE_SIZES, Capacity, calibrate
from llmscale.sim.engine_args import engine_config
from llmscale.sim.plot import plot_day
from llmscale.sim.report import minute_series, summarize
from llmscale.sim.runner import Scenario, default_setting, run_policy, sweep_settings
from llmscale.sim.trace import (
    DiurnalEnvelope,
    Envelope,
    LogNormalLengths,
    Trace,
    WeeklyEnvelope,
    load_trace,
    resample_lengths,
    synthesize,
)

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
#: Where the full tables go (its ``benchmark`` block) and the README, whose ``headline`` block
#: summarises them, when ``--out`` is the checked-in results folder.
DOCS = ROOT / "docs" / "benchmarks.md"
README = ROOT / "README.md"

# --------------------------------------------------------------------------- the traces (one place)

#: Where the benchmark reads the real traces: the package data the traces ship as. ``--trace-dir``
#: points elsewhere (a folder holding the files below).
TRACE_DIR = ROOT / "operator" / "llmscale" / "data" / "traces"

#: The trace files the workloads replay, by key.
TRACE_FILES: dict[str, str] = {
    "azure-conv": "azure-llm-2023-conv.csv",
    "mooncake-conv": "mooncake-conversation-trace.jsonl",
}

# --------------------------------------------------------------------------- the workloads

#: Goals of issue 15, checked for every row.
GOAL_MINUTES = 0.99
GOAL_ORACLE_RATIO = 1.10
GOAL_STATIC_RATIO = 0.60


@dataclass(frozen=True)
class Workload:
    """One workload: a spec, a trace and how a day (or week) is made from it.

    Attributes:
        key: short name (results file names, ``--workloads``).
        title: one line for people.
        spec: the LLMDeployment file in ``benchmarks/``.
        trace: key of :data:`TRACE_FILES`.
        peak_rps: the envelope's peak, requests/s.
        duration_s: simulated time, seconds.
        envelope: the load shape.
        seed: seeds the synthesis, the size draws and the calibration.
        lengths: ``(prompt, output)`` distributions replacing the trace's sizes (its timing kept).
        warmup_s: the excluded start, seconds.
        why: what the workload tests.
    """

    key: str
    title: str
    spec: str
    trace: str
    peak_rps: float
    duration_s: float
    envelope: Envelope
    seed: int = 0
    lengths: tuple[LogNormalLengths, LogNormalLengths] | None = None
    warmup_s: float = 600.0
    why: str = ""


#: Prompts of a few thousand tokens, outputs of tens (prefill-heavy): the prefill-heavy workload's
#: size distributions. Stated, not measured: the shape of code completion or retrieval-augmented
#: traffic, chosen so that prefill, not decode, sets a replica's capacity.
PREFILL_HEAVY_LENGTHS = (LogNormalLengths(2500, 0.5, 512, 7168), LogNormalLengths(30, 0.7, 4, 256))

WORKLOADS: tuple[Workload, ...] = (
    Workload(
        "azure-day", "Azure conversation day", "chat-llama-70b-h100.yaml", "azure-conv", 50.0, 86_400.0,
        DiurnalEnvelope(), why="the day llmscale's defaults were chosen on",
    ),
    Workload(
        "mooncake-day", "Mooncake long-context day (prefix reuse)", "long-context-llama-70b-h100x8.yaml",
        "mooncake-conv", 10.0, 86_400.0, DiurnalEnvelope(),
        why="12k-token prompts with 37 % repeated blocks on 8-GPU replicas; never tuned on",
    ),
    Workload(
        "prefill-heavy-day", "Prefill-heavy day (Azure timing, long prompts, short outputs)",
        "chat-llama-70b-h100.yaml", "azure-conv", 40.0, 86_400.0, DiurnalEnvelope(),
        lengths=PREFILL_HEAVY_LENGTHS, why="prefill sets capacity; never tuned on",
    ),
    Workload(
        "azure-week", "Azure conversation week (weekends at half the weekday rate)",
        "chat-llama-70b-h100.yaml", "azure-conv", 12.0, 7 * 86_400.0, WeeklyEnvelope(),
        why="seven days with a weekly shape for a forecast to learn",
    ),
)

#: ``--quick``: every workload for 20 minutes from its start at this share of its peak.
QUICK_DURATION_S = 1200.0
QUICK_WARMUP_S = 300.0
QUICK_PEAK_SHARE = 0.25
QUICK_CURVE_SIZES = (4,)
QUICK_GRID = {name: (kind, (values[1], values[-1])) for name, (kind, values) in SETTING_GRID.items()}


@dataclass(frozen=True)
class Options:
    """What the command line asked for (passed to the worker processes)."""

    trace_dir: Path
    quick: bool
    seed: int | None
    variants: tuple[tuple[str, dict[str, Any]], ...] = ()


# --------------------------------------------------------------------------- building a scenario


def _merge(into: dict[str, Any], patch: dict[str, Any]) -> None:
    for key, value in patch.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = value


def load_spec(wl: Workload, patch: dict[str, Any] | None = None) -> tuple[dict[str, Any], LLMDeploymentSpec]:
    """The workload's manifest (with ``patch`` merged into ``spec``) and its validated spec."""
    doc = yaml.safe_load((HERE / wl.spec).read_text(encoding="utf-8"))
    if patch:
        _merge(doc["spec"], json.loads(json.dumps(patch)))
    return doc, LLMDeployment.model_validate(doc).spec


def workload_seed(wl: Workload, opts: Options) -> int:
    """The workload's seed, or ``--seed`` when given."""
    return wl.seed if opts.seed is None else opts.seed


def build_traces(wl: Workload, opts: Options) -> tuple[Trace, Trace]:
    """``(base, run)``: the real trace (sizes redrawn when the workload says so) and the shaped run.

    Raises:
        FileNotFoundError: the trace file is not in ``opts.trace_dir``.
    """
    path = opts.trace_dir / TRACE_FILES[wl.trace]
    if not path.exists():
        raise FileNotFoundError(
            f"{path} does not exist: pass --trace-dir, a folder holding {', '.join(TRACE_FILES.values())}"
        )
    seed = workload_seed(wl, opts)
    base = load_trace(path)
    if wl.lengths is not None:
        base = resample_lengths(base, wl.lengths[0], wl.lengths[1], seed=seed)
    duration = QUICK_DURATION_S if opts.quick else wl.duration_s
    peak = wl.peak_rps * (QUICK_PEAK_SHARE if opts.quick else 1.0)
    run = synthesize(base, duration_s=duration, peak_rps=peak, envelope=wl.envelope, seed=seed)
    return base, run


def calibrate_workload(wl: Workload, opts: Options, replicas: int) -> Capacity | None:
    """One replica's capacity at the workload's SLO in a fleet of ``replicas`` (quick: a shorter,
    coarser search); ``None`` when no rate meets the SLO at that size."""
    _, spec = load_spec(wl)
    base, _ = build_traces(wl, opts)
    kw: dict[str, Any] = {"duration_s": 600.0, "warmup_s": 120.0, "iterations": 4} if opts.quick else {}
    try:
        return calibrate(
            base,
            ReplicaModel.from_spec(spec),
            spec.slo,
            engine=engine_config(spec),
            context_limit_tokens=spec.model.context_limit_tokens,
            seed=workload_seed(wl, opts),
            replicas=replicas,
            **kw,
        )
    except ValueError as exc:
        print(f"Calibration of {wl.key} at {replicas} replicas found no capacity: {exc}", file=sys.stderr)
        return None


# --------------------------------------------------------------------------- the worker processes

_SCENARIOS: dict[str, Scenario] = {}


def _scenario(wl: Workload, opts: Options, curve: dict[int, Capacity]) -> Scenario:
    sc = _SCENARIOS.get(wl.key)
    if sc is None:
        _, spec = load_spec(wl)
        base, run = build_traces(wl, opts)
        warmup = QUICK_WARMUP_S if opts.quick else wl.warmup_s
        sc = Scenario.build(spec, run, base, warmup_s=warmup, capacity_curve=curve)
        _SCENARIOS.clear()  # one workload's traces at a time: a week is a few hundred MB
        _SCENARIOS[wl.key] = sc
    return sc


@dataclass(frozen=True)
class Job:
    """One run: a policy (at a setting, or with a spec variant) on a workload."""

    workload: str
    policy: str
    setting: float | None = None
    variant: str | None = None
    cost: float = 0.0
    check: bool = False  # ``--update``: a kept row rerun at its reported setting, to compare and plot


def _calibrate_job(args: tuple[str, int, Options]) -> tuple[str, int, Capacity | None, float]:
    key, replicas, opts = args
    t0 = time.process_time()
    cap = calibrate_workload(_by_key(key), opts, replicas)
    return key, replicas, cap, time.process_time() - t0


def _run_job(
    args: tuple[Job, Options, dict[int, Capacity]],
) -> tuple[Job, dict[str, Any], dict[str, np.ndarray]]:
    job, opts, curve = args
    wl = _by_key(job.workload)
    sc = _scenario(wl, opts, curve)
    if job.variant is not None:
        patch = dict(opts.variants)[job.variant]
        sc = dataclasses.replace(sc, spec=load_spec(wl, patch)[1])
    cpu0 = time.process_time()
    res = run_policy(job.policy, sc, setting=job.setting)
    cpu = time.process_time() - cpu0
    summary = summarize(res, sc.spec.slo, sc.spec.cost.gpu_hour_usd, sc.warmup_s)
    summary["policy"] = job.policy if job.variant is None else f"llmscale ({job.variant})"
    summary["setting"] = job.setting
    summary["cpu_s"] = round(cpu, 3)
    series = minute_series(res, sc.spec.slo)
    return job, summary, series


def _by_key(key: str) -> Workload:
    for wl in WORKLOADS:
        if wl.key == key:
            return wl
    raise KeyError(f"Unknown workload {key!r}; known: {', '.join(w.key for w in WORKLOADS)}")


def plan_jobs(
    workloads: Sequence[Workload],
    policies: Sequence[str],
    capacities: dict[str, Capacity],
    opts: Options,
    kept: dict[str, dict[str, float | None]] | None = None,
) -> list[Job]:
    """Every run, longest first (so two processes finish together); ``capacities`` are the
    four-replica capacities the baselines' grids scale; ``kept`` (``--update``), per workload key,
    the kept policies and their reported settings: one check run each."""
    jobs: list[Job] = []
    for key, rows in (kept or {}).items():
        wl = _by_key(key)
        weight = (QUICK_DURATION_S if opts.quick else wl.duration_s) / 86_400.0 * wl.peak_rps
        jobs += [Job(key, name, setting, cost=weight, check=True) for name, setting in rows.items()]
    for wl in workloads:
        days = (QUICK_DURATION_S if opts.quick else wl.duration_s) / 86_400.0
        weight = days * wl.peak_rps
        for name in policies:
            if name in TUNABLE:
                grid = QUICK_GRID[name] if opts.quick else None
                for value in sweep_settings(name, capacities[wl.key], grid):
                    jobs.append(Job(wl.key, name, value, cost=weight))
            else:
                jobs.append(Job(wl.key, name, cost=weight))
        if "llmscale" in policies:
            for label, _ in opts.variants:
                jobs.append(Job(wl.key, "llmscale", variant=label, cost=weight))
    # longest first, and one workload's runs together (each process keeps one scenario at a time)
    order = {wl.key: i for i, wl in enumerate(sorted(workloads, key=lambda w: -w.duration_s * w.peak_rps))}
    return sorted(jobs, key=lambda j: (order[j.workload], -j.cost))


# --------------------------------------------------------------------------- choosing and judging

#: Settings tried beyond a baseline's grid, at most, when its best run sits at the grid's edge.
MAX_EXTENSIONS = 2
#: Step of an extension: × this past the largest setting, ÷ this below the smallest.
EXTENSION_STEP = 1.25


def next_setting(runs: list[dict[str, Any]], grid_size: int) -> float | None:
    """One more setting to try for a baseline whose sweep so far is ``runs``, or ``None``.

    When the cheapest passing run is at the largest setting tried, a larger setting might be
    cheaper still (× :data:`EXTENSION_STEP`); when no run passes and the best attainment is at the
    smallest setting (the most replicas), a smaller one might pass (÷ the step). At most
    :data:`MAX_EXTENSIONS` beyond the ``grid_size`` settings of the grid.
    """
    if len(runs) >= grid_size + MAX_EXTENSIONS:
        return None
    settings = sorted(r["setting"] for r in runs)
    best, _ = best_setting(runs)
    passes = (best["minutes_meeting_slo_fraction"] or 0.0) >= GOAL_MINUTES
    if passes and best["setting"] == settings[-1]:
        return round(settings[-1] * EXTENSION_STEP, 4)
    if not passes and best["setting"] == settings[0]:
        return round(settings[0] / EXTENSION_STEP, 4)
    return None



def best_setting(runs: list[dict[str, Any]]) -> tuple[dict[str, Any], str]:
    """The run a baseline is reported at: the cheapest (GPU-h) meeting ≥ 99 % of minutes, else the
    best attainment (ties: cheaper); and a note naming how it was chosen."""
    passing = [r for r in runs if (r["minutes_meeting_slo_fraction"] or 0.0) >= GOAL_MINUTES]
    if passing:
        best = min(passing, key=lambda r: r["gpu_hours"])
        note = f"cheapest of {len(runs)} meeting the SLO"
        if best["setting"] == max(r["setting"] for r in runs):
            note += " (the grid's largest: a larger one might be cheaper still)"
        return best, note
    best = max(runs, key=lambda r: ((r["minutes_meeting_slo_fraction"] or 0.0), -r["gpu_hours"]))
    return best, f"none of {len(runs)} meets the SLO: best attainment"


def judge(rows: list[dict[str, Any]]) -> None:
    """Add ``oracle_ratio``, ``static_ratio`` and ``goals`` (text that names every missed goal) to
    each reported row, in place."""
    by = {r["policy"]: r for r in rows}
    oracle = by.get("oracle")
    static = by.get("static-peak")
    o_gpu = oracle["gpu_hours"] if oracle else None
    s_gpu = static["gpu_hours"] if static else None
    shape_allows = bool(o_gpu and s_gpu and o_gpu <= GOAL_STATIC_RATIO * s_gpu)
    meeting = [
        r for r in rows
        if r["policy"] != "oracle" and (r["minutes_meeting_slo_fraction"] or 0.0) >= GOAL_MINUTES
        and r["goodput_tokens_per_gpu_hour"] is not None
    ]
    winner = max(meeting, key=lambda r: r["goodput_tokens_per_gpu_hour"])["policy"] if meeting else None
    for r in rows:
        r["oracle_ratio"] = r["gpu_hours"] / o_gpu if o_gpu else None
        r["static_ratio"] = r["gpu_hours"] / s_gpu if s_gpu else None
        if r["policy"] == "oracle":
            r["goals"] = "lower bound (clairvoyant)"
            continue
        minutes = r["minutes_meeting_slo_fraction"] or 0.0
        parts = [f"✓ SLO {minutes:.1%}" if minutes >= GOAL_MINUTES else f"✗ SLO {minutes:.1%} < 99 %"]
        if r["oracle_ratio"] is not None:
            ok = r["oracle_ratio"] <= GOAL_ORACLE_RATIO
            parts.append(f"{'✓' if ok else '✗'} {r['oracle_ratio']:.2f}× oracle" + ("" if ok else " > 1.10×"))
        if r["static_ratio"] is not None and r["policy"] != "static-peak":
            if shape_allows:
                ok = r["static_ratio"] <= GOAL_STATIC_RATIO
                parts.append(f"{'✓' if ok else '✗'} {r['static_ratio']:.2f}× static" + ("" if ok else " > 0.60×"))
            else:
                parts.append(f"– {r['static_ratio']:.2f}× static (n/a: oracle {o_gpu / s_gpu:.2f}×)")  # type: ignore[operator]
        if winner is not None:
            parts.append("✓ best goodput/GPU-h" if r["policy"] == winner else f"✗ goodput/GPU-h below {winner}")
        else:
            parts.append("✗ no policy meets the SLO")
        r["goals"] = "; ".join(parts)


# --------------------------------------------------------------------------- output


def _f(v: object, fmt: str) -> str:
    return "—" if v is None or (isinstance(v, float) and not math.isfinite(v)) else format(v, fmt)


def _setting_text(policy: str, setting: float | None) -> str:
    if setting is None:
        return "defaults" if policy.startswith("llmscale") else "—"
    return f"{setting:.3g} {TUNABLE[policy].split(':')[0]}"


def workload_markdown(entry: dict[str, Any]) -> str:
    """One workload's section: what it is, the table, the sweeps."""
    sc = entry["scenario"]
    rows = entry["reported"]
    llm_cpu = next((r["cpu_s"] for r in rows if r["policy"] == "llmscale"), None)
    lines = [
        f"### {sc['workload']} — {sc['title']}",
        "",
        f"`benchmarks/{sc['spec']}` ({sc['spec_summary']}); {sc['requests_total']:,} requests over "
        f"{sc['duration_s'] / 3600:.3g} h, peak {sc['peak_rps']:g} req/s, seed {sc['seed']} "
        f"({sc['trace']}); the first {sc['warmup_s'] / 60:.0f} minutes are warm-up, excluded. "
        f"Calibrated capacity per replica: "
        + ", ".join(f"{v:.2f} req/s in a fleet of {n}" for n, v in sc["capacity_rps_per_replica_by_fleet_size"].items())
        + f" (the oracle's and static-peak's sizing; at 4: {sc['capacity_running_per_replica']:.1f} running, "
        f"{sc['capacity_concurrency_per_replica']:.1f} in flight, KV {sc['capacity_kv_cache_utilization_per_replica']:.3f}"
        f" per replica, the baselines' grids). "
        + (f"Simulating this run took {llm_cpu:.0f} s of CPU for llmscale. " if llm_cpu is not None else "")
        + f"Trace: {sc['trace_citation']}.",
        "",
        "| policy | setting | GPU-h | minutes meeting SLO | TTFT p95 (s) | ITL p95 (ms) | goodput (tok/GPU-h) "
        "| $/M tok | × oracle | × static peak | goals |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in rows:
        itl = None if r["itl_p95_s"] is None else 1000 * float(r["itl_p95_s"])
        lines.append(
            f"| {r['policy']} | {_setting_text(r['policy'].split(' ')[0], r['setting'])} "
            f"| {_f(r['gpu_hours'], ',.0f')} | {_f(r['minutes_meeting_slo_fraction'], '.1%')} "
            f"| {_f(r['ttft_p95_s'], '.2f')} | {_f(itl, '.0f')} | {_f(r['goodput_tokens_per_gpu_hour'], ',.0f')} "
            f"| {_f(r['usd_per_million_tokens'], '.2f')} | {_f(r['oracle_ratio'], '.2f')} "
            f"| {_f(r['static_ratio'], '.2f')} | {r['goals']} |"
        )
    sweeps = entry["sweeps"]
    if sweeps:
        lines += ["", "<details><summary>Baseline sweeps (every setting run)</summary>", ""]
        lines += ["| policy | setting | GPU-h | minutes meeting SLO | chosen |", "| --- | --- | ---: | ---: | --- |"]
        for name, runs in sweeps.items():
            chosen = entry["chosen"][name]
            for r in runs:
                mark = "← " + entry["why"][name] if r["setting"] == chosen else ""
                lines.append(
                    f"| {name} | {_setting_text(name, r['setting'])} | {_f(r['gpu_hours'], ',.0f')} "
                    f"| {_f(r['minutes_meeting_slo_fraction'], '.1%')} | {mark} |"
                )
        lines += ["", "</details>"]
    return "\n".join(lines)


def markdown(doc: dict[str, Any]) -> str:
    """The whole results file (from the JSON document: ``--render`` redraws it without running)."""
    run = doc["run"]
    parts = [workload_markdown(e) for e in doc["workloads"]]
    day_cost = run.get("llmscale_cpu_s_per_simulated_day")
    sim_cpu = sum(r["cpu_s"] for e in doc["workloads"] for r in e["all_runs"])
    tail = (
        f"Reproduce: `{run['command']}` — {run['runs']} simulated runs in {run['wall_s'] / 60:.0f} min of wall "
        f"time on {run['jobs']} processes on this 2-core machine ({sim_cpu / 60:.0f} CPU-minutes of simulation; "
        "the wall time depends on what else the machine runs)"
        + (f"; one simulated day of one policy takes {day_cost:.0f} s of CPU (llmscale, mean over workloads)"
           if day_cost else "")
        + "."
        + "".join(_update_text(u) for u in run.get("updates", []))
        + " A minute meets the SLO when its `histogram_quantile(0.95)` of TTFT and of per-token ITL "
        "(vLLM's histograms) are within the targets; goals: ≥ 99 % of minutes, ≤ 1.10× the oracle's "
        "GPU-h, ≤ 0.60× static-peak's where the oracle gets there, the best goodput per GPU-hour of "
        "the non-oracle policies that meet the SLO."
    )
    return "\n\n".join([*parts, tail]) + "\n"


def _update_text(update: dict[str, Any]) -> str:
    """One sentence per ``--update``: what it reran, when, on which commit."""
    commit = f", commit {update['commit'][:12]}" if update.get("commit") else ""
    return (
        f" Then `{update['command']}` reran {', '.join(update['policies'])} on {', '.join(update['workloads'])} "
        f"({update['utc']}{commit}; {update['runs']} runs in {update['wall_s'] / 60:.0f} min): those rows are "
        "newer than the full run's; every other row was rerun at its reported setting and reproduced its "
        "figures on that code."
    )


def spec_summary(spec: LLMDeploymentSpec) -> str:
    """E.g. ``llama-3.1-70b on 4 × h100-sxm, SLO p95 TTFT ≤ 2 s and ITL ≤ 100 ms, cold start 300 s``."""
    eng = engine_config(spec)
    return (
        f"{spec.model.preset or spec.model.name} on {spec.resources.gpus_per_replica} × {spec.resources.gpu_type}, "
        f"context {spec.model.context_limit_tokens:,}, step budget {eng.max_num_batched_tokens:,} tokens, "
        f"SLO p95 TTFT ≤ {spec.slo.ttft_p95_seconds:g} s and ITL ≤ {1000 * spec.slo.itl_p95_seconds:g} ms, "
        f"cold start {spec.headroom.cold_start_seconds:g} s, ${spec.cost.gpu_hour_usd:g}/GPU-h"
    )


def headline_markdown(doc: dict[str, Any]) -> str:
    """The README's headline: per workload, llmscale's row beside the cheapest baseline meeting the SLO
    (from the same JSON document as :func:`markdown`)."""
    lines = [
        "| workload | llmscale: minutes meeting SLO | llmscale GPU-h | × oracle | cheapest baseline meeting the SLO "
        "| its GPU-h | GPU-h saved |",
        "| --- | ---: | ---: | ---: | --- | ---: | ---: |",
    ]
    for entry in doc["workloads"]:
        rows = entry["reported"]
        ours = next(r for r in rows if r["policy"] == "llmscale")
        baselines = [
            r for r in rows
            if row_family(r["policy"]) not in ("llmscale", "oracle", "static-peak")
            and (r["minutes_meeting_slo_fraction"] or 0.0) >= GOAL_MINUTES
        ]
        best = min(baselines, key=lambda r: r["gpu_hours"]) if baselines else None
        saved = 1.0 - ours["gpu_hours"] / best["gpu_hours"] if best else None
        lines.append(
            f"| `{entry['scenario']['workload']}` | {_f(ours['minutes_meeting_slo_fraction'], '.1%')} "
            f"| {_f(ours['gpu_hours'], ',.0f')} | {_f(ours['oracle_ratio'], '.2f')} "
            f"| {best['policy'] if best else 'none'} | {_f(best['gpu_hours'] if best else None, ',.0f')} "
            f"| {_f(saved, '.0%')} |"
        )
    return "\n".join(lines) + "\n"


def update_headline(path: Path, table: str) -> None:
    """Replace the ``headline`` generated block of ``path`` (the README) with ``table``.

    Raises:
        ValueError: the file has no such block.
    """
    path.write_text(replace_block(path.read_text(encoding="utf-8"), "headline", table), encoding="utf-8")


def update_readme(path: Path, table: str) -> None:
    """Replace the ``benchmark`` generated block of ``path`` with ``table``.

    Raises:
        ValueError: the file has no such block.
    """
    path.write_text(replace_block(path.read_text(encoding="utf-8"), "benchmark", table), encoding="utf-8")


# --------------------------------------------------------------------------- --update

#: Figures a kept row must reproduce when ``--update`` reruns it at its reported setting.
CHECK_KEYS = ("gpu_hours", "minutes_meeting_slo_fraction", "ttft_p95_s", "itl_p95_s", "goodput_tokens_per_gpu_hour")
#: Relative tolerance of that comparison: the simulation is deterministic, so only float noise.
CHECK_RTOL = 1e-6


def row_family(policy: str) -> str:
    """The policy a reported row belongs to: ``"llmscale (kv 0.14)"`` → ``"llmscale"``."""
    return policy.split(" ")[0]


def figures_differ(stored: dict[str, Any], rerun: dict[str, Any]) -> list[str]:
    """The :data:`CHECK_KEYS` on which a rerun's summary differs from the stored row, as
    ``"key stored → rerun"`` texts (empty when it reproduces them)."""
    out = []
    for key in CHECK_KEYS:
        a, b = stored.get(key), rerun.get(key)
        same = (a is None and b is None) or (
            a is not None and b is not None and math.isclose(float(a), float(b), rel_tol=CHECK_RTOL, abs_tol=1e-12)
        )
        if not same:
            out.append(f"{key} {a} → {b}")
    return out


def _in_policy_order(names: Sequence[str]) -> list[str]:
    order = {name: i for i, name in enumerate(POLICY_NAMES)}
    return sorted(names, key=lambda n: (order.get(row_family(n), 99), n))


def merge_entry(old: dict[str, Any], new: dict[str, Any], policies: Sequence[str]) -> dict[str, Any]:
    """A workload's results entry after rerunning ``policies`` (``--update``).

    Takes the stored entry ``old`` and the entry ``new`` of the rerun (both shaped as the JSON's
    ``workloads[i]``) and returns a new entry: the reported rows, sweeps, choices and runs of
    ``policies`` (and of their ``--variant`` rows) from ``new``, every other one from ``old``, the
    scenario from ``new``, every row judged again (the ratios follow the rerun oracle). Neither
    argument is changed.
    """
    rerun = set(policies)

    def pick(part: str) -> dict[str, Any]:
        merged = {k: v for k, v in old[part].items() if row_family(k) not in rerun}
        merged |= {k: v for k, v in new[part].items() if row_family(k) in rerun}
        return {k: merged[k] for k in _in_policy_order(list(merged))}

    rows = {r["policy"]: dict(r) for r in old["reported"] if row_family(r["policy"]) not in rerun}
    rows |= {r["policy"]: dict(r) for r in new["reported"] if row_family(r["policy"]) in rerun}
    reported = [rows[name] for name in _in_policy_order(list(rows))]
    judge(reported)
    all_runs = [r for r in old["all_runs"] if row_family(r["policy"]) not in rerun]
    all_runs += [r for r in new["all_runs"] if row_family(r["policy"]) in rerun]
    return {"scenario": new["scenario"], "reported": reported, "sweeps": pick("sweeps"), "chosen": pick("chosen"),
            "why": pick("why"), "all_runs": all_runs}


def _commit() -> str | None:
    """The repository's ``HEAD`` commit (with ``+dirty`` when the tree has changes), or ``None``
    outside a git checkout."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def _llmscale_day_cost(entries: Sequence[dict[str, Any]]) -> float | None:
    """CPU seconds llmscale's run takes per simulated day, mean over the workloads."""
    costs = [r["cpu_s"] / (r["duration_s"] + r["warmup_s"]) * 86_400.0
             for e in entries for r in e["reported"] if r["policy"] == "llmscale"]
    return float(np.mean(costs)) if costs else None


def _display(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


# --------------------------------------------------------------------------- main


@dataclass
class _Collected:
    runs: dict[str, list[tuple[Job, dict[str, Any], dict[str, np.ndarray]]]] = field(default_factory=dict)
    checks: dict[str, list[tuple[Job, dict[str, Any], dict[str, np.ndarray]]]] = field(default_factory=dict)


def _parse_variants(items: list[str]) -> tuple[tuple[str, dict[str, Any]], ...]:
    out = []
    for item in items:
        label, sep, patch = item.partition("=")
        if not sep or not label.strip():
            raise SystemExit(f"--variant {item!r}: expected LABEL=JSON")
        try:
            value = json.loads(patch)
        except json.JSONDecodeError as exc:
            raise SystemExit(f"--variant {label}: {exc}") from None
        if not isinstance(value, dict):
            raise SystemExit(f"--variant {label}: the JSON must be an object of spec fields")
        out.append((label.strip(), value))
    return tuple(out)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; return the exit status."""
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--trace-dir", type=Path, default=TRACE_DIR,
                    help=f"folder holding {', '.join(TRACE_FILES.values())} (default: the package data)")
    ap.add_argument("--workloads", default=",".join(w.key for w in WORKLOADS),
                    help="comma-separated workload keys (default: all)")
    ap.add_argument("--policies", default=",".join(POLICY_NAMES),
                    help="comma-separated policies (default: all; tunable baselines are swept)")
    ap.add_argument("--seed", type=int, default=None, help="replace every workload's seed (a holdout)")
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), help="worker processes (default 2)")
    ap.add_argument("--quick", action="store_true", help="20 minutes per workload, two-point grids: a smoke run")
    ap.add_argument("--variant", action="append", default=[], metavar="LABEL=JSON",
                    help="an extra llmscale row per workload with spec fields changed (camelCase, merged "
                    "into spec), e.g. 'kv 0.14={\"scaling\": {\"targets\": {\"kvCacheUtilization\": 0.14}}}'")
    ap.add_argument("--out", type=Path, default=None,
                    help="output folder (default: benchmarks/results; required with --quick)")
    ap.add_argument("--readme", type=Path, default=None,
                    help="Markdown file whose 'benchmark' block gets the tables (default: docs/benchmarks.md when "
                    "writing to benchmarks/results)")
    ap.add_argument("--render", action="store_true",
                    help="only rewrite workloads.md (and the docs/README blocks) from the JSON in --out")
    ap.add_argument("--update", type=Path, default=None, metavar="RESULTS.json",
                    help="rerun only --policies (on --workloads) and merge them into this results JSON: their "
                    "rows replaced, the others kept (each rerun once at its reported setting and required to "
                    "reproduce its figures), then tables, plots and docs rewritten (default --out: its folder)")
    args = ap.parse_args(argv)
    if args.readme is not None:
        # Checked before any simulation: a full run takes hours and writes the docs last.
        try:
            if not has_block(args.readme.read_text(encoding="utf-8"), "benchmark"):
                ap.error(f"--readme {args.readme}: no '<!-- BEGIN GENERATED: benchmark -->' block to replace")
        except OSError as exc:
            ap.error(f"--readme {args.readme}: {exc.strerror or exc}")
    t_start = time.perf_counter()
    commit = _commit() if args.update is not None else None  # the code the runs ran
    if args.render:
        out_dir = args.out or HERE / "results"
        md = markdown(json.loads((out_dir / "workloads.json").read_text(encoding="utf-8")))
        (out_dir / "workloads.md").write_text(md, encoding="utf-8")
        checked_in = out_dir.resolve() == (HERE / "results").resolve()
        readme = args.readme or (DOCS if checked_in else None)
        if readme:
            update_readme(Path(readme), md)
        if checked_in:
            update_headline(README, headline_markdown(json.loads((out_dir / "workloads.json").read_text(encoding="utf-8"))))
        sys.stdout.write(md)
        return 0

    results_dir = HERE / "results"
    stored: dict[str, Any] | None = None
    if args.update is not None:
        try:
            stored = json.loads(args.update.read_text(encoding="utf-8"))
            stored_entries = {e["scenario"]["workload"]: e for e in stored["workloads"]}
            stored_quick = bool(stored["run"]["quick"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            ap.error(f"--update {args.update}: not a results JSON of this benchmark ({exc})")
        if args.policies == ",".join(POLICY_NAMES):
            ap.error("--update needs --policies, the policies to rerun (a full run is the plain command)")
        if args.variant:
            ap.error("--update reruns policies at their defaults; --variant rows come from a full run")
        if stored_quick != args.quick:
            ap.error(f"--update {args.update} holds a {'--quick' if stored_quick else 'full'} run: "
                     + ("pass --quick" if stored_quick else "drop --quick"))
        if args.out is None:
            args.out = args.update.parent
    if args.out is None:
        if args.quick:
            ap.error("--quick needs --out (the checked-in results are full runs)")
        args.out = results_dir
    try:
        workloads = [_by_key(k.strip()) for k in args.workloads.split(",") if k.strip()]
    except KeyError as exc:
        ap.error(str(exc.args[0]))
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    unknown = sorted(set(policies) - set(POLICY_NAMES))
    if unknown:
        ap.error(f"unknown policies {', '.join(unknown)}; known: {', '.join(POLICY_NAMES)}")
    opts = Options(args.trace_dir, args.quick, args.seed, _parse_variants(args.variant))
    kept: dict[str, dict[str, float | None]] | None = None
    if stored is not None:
        kept = {}
        for wl in workloads:
            entry = stored_entries.get(wl.key)
            if entry is None:
                ap.error(f"--update: {args.update} has no workload {wl.key}; a full run adds one")
            if entry["scenario"]["seed"] != workload_seed(wl, opts):
                ap.error(f"--update: {wl.key} was run with seed {entry['scenario']['seed']}, not "
                         f"{workload_seed(wl, opts)}: pass the same --seed")
            rows = [r for r in entry["reported"] if row_family(r["policy"]) not in policies]
            variants = [r["policy"] for r in rows if r["policy"] != row_family(r["policy"])]
            if variants:
                ap.error(f"--update: {wl.key}'s rows {', '.join(variants)} are --variant rows: rerun llmscale too")
            kept[wl.key] = {r["policy"]: r["setting"] for r in rows}
    for wl in workloads:
        path = opts.trace_dir / TRACE_FILES[wl.trace]
        if not path.exists():
            ap.error(f"{path} does not exist: pass --trace-dir, a folder holding {', '.join(TRACE_FILES.values())}")

    jobs_n = max(1, args.jobs)
    ctx = multiprocessing.get_context("fork")
    pool = ProcessPoolExecutor(jobs_n, mp_context=ctx) if jobs_n > 1 else None
    try:
        # the largest sizes first: they take longest
        sizes = QUICK_CURVE_SIZES if opts.quick else CURVE_SIZES
        cal_args = [(wl.key, n, opts) for n in sorted(sizes, reverse=True) for wl in workloads]
        cal = list(pool.map(_calibrate_job, cal_args)) if pool else [_calibrate_job(a) for a in cal_args]
        curves: dict[str, dict[int, Capacity]] = {wl.key: {} for wl in workloads}
        cal_wall: dict[str, float] = {wl.key: 0.0 for wl in workloads}
        for key, n, cap_n, wall_n in cal:
            cal_wall[key] += wall_n
            if cap_n is not None:
                curves[key][n] = cap_n
        for key, curve in curves.items():
            if not curve:
                raise SystemExit(f"Calibration of {key} found no capacity at any fleet size: see above")
        capacities = {key: curve.get(4) or curve[max(curve)] for key, curve in curves.items()}
        jobs = plan_jobs(workloads, policies, capacities, opts, kept)
        print(f"Calibrated {len(workloads)} workloads; running {len(jobs)} simulations on {jobs_n} processes "
              "(and a few more where a baseline's best setting is at the edge of its grid)",
              file=sys.stderr, flush=True)
        collected = _Collected()
        grid_sizes = {(j.workload, j.policy): 0 for j in jobs if j.setting is not None and not j.check}
        for j in jobs:
            if j.setting is not None and not j.check:
                grid_sizes[(j.workload, j.policy)] += 1
        open_runs = dict.fromkeys(grid_sizes, 0)
        sweeps: dict[tuple[str, str], list[dict[str, Any]]] = {key: [] for key in grid_sizes}
        total = len(jobs)
        done = 0

        def record(job: Job, summary: dict[str, Any], series: dict[str, np.ndarray]) -> list[Job]:
            """Keep a finished run; return the extension it calls for (if its sweep is complete)."""
            nonlocal done
            done += 1
            (collected.checks if job.check else collected.runs).setdefault(job.workload, []).append(
                (job, summary, series))
            print(f"[{done}/{total}] {job.workload} {summary['policy']}"
                  + (f" @ {job.setting:.3g}" if job.setting is not None else "")
                  + f": {summary['gpu_hours']:,.0f} GPU-h, {summary['minutes_meeting_slo_fraction']:.1%} of minutes"
                  + f" ({summary['cpu_s']:.0f} s CPU, {(time.perf_counter() - t_start) / 60:.1f} min so far)"
                  + (" [check of a kept row]" if job.check else ""),
                  file=sys.stderr, flush=True)
            key = (job.workload, job.policy)
            if job.setting is None or job.variant is not None or job.check or key not in sweeps:
                return []
            sweeps[key].append(summary)
            open_runs[key] -= 1
            if open_runs[key] or opts.quick:
                return []
            value = next_setting(sweeps[key], grid_sizes[key])
            if value is None:
                return []
            return [Job(job.workload, job.policy, value, cost=job.cost)]

        def args_of(job: Job) -> tuple[Job, Options, dict[int, Capacity]]:
            return job, opts, curves[job.workload]

        for j in jobs:
            if j.setting is not None and not j.check:
                open_runs[(j.workload, j.policy)] += 1
        if pool is None:
            queue = list(jobs)
            while queue:
                job = queue.pop(0)
                more = record(*_run_job(args_of(job)))
                for m in more:
                    open_runs[(m.workload, m.policy)] += 1
                total += len(more)
                queue.extend(more)
        else:
            pending = {pool.submit(_run_job, args_of(j)) for j in jobs}
            while pending:
                finished, pending = wait(pending, return_when=FIRST_COMPLETED)
                for fut in finished:
                    more = record(*fut.result())
                    for m in more:
                        open_runs[(m.workload, m.policy)] += 1
                        pending.add(pool.submit(_run_job, args_of(m)))
                    total += len(more)
    finally:
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)

    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    entries = []
    plots: list[tuple[dict[str, Any], dict[str, dict[str, np.ndarray]], str]] = []
    mismatches: list[str] = []
    for wl in workloads:
        runs = collected.runs.get(wl.key, [])
        doc, spec = load_spec(wl)
        base, run = build_traces(wl, opts)
        cap = capacities[wl.key]
        reported: list[dict[str, Any]] = []
        series: dict[str, dict[str, np.ndarray]] = {}
        sweeps: dict[str, list[dict[str, Any]]] = {}
        chosen: dict[str, float | None] = {}
        why: dict[str, str] = {}
        order = {name: i for i, name in enumerate(POLICY_NAMES)}
        by_policy: dict[str, list[tuple[Job, dict[str, Any], dict[str, np.ndarray]]]] = {}
        for job, summary, ser in runs:
            by_policy.setdefault(summary["policy"], []).append((job, summary, ser))
        for name in sorted(by_policy, key=lambda n: (order.get(n.split(" ")[0], 99), n)):
            items = by_policy[name]
            if name in TUNABLE:
                summaries = sorted((s for _, s, _ in items), key=lambda s: s["setting"])
                best, note = best_setting(summaries)
                sweeps[name] = summaries
                chosen[name] = best["setting"]
                why[name] = note
                row = dict(best)
                row["setting_note"] = note
                row["default_setting"] = default_setting(name, cap)
                reported.append(row)
                series[name] = next(ser for _, s, ser in items if s is best)
            else:
                _, s, ser = items[0]
                reported.append(dict(s))
                series[name] = ser
        judge(reported)
        scenario = {
            "workload": wl.key,
            "title": wl.title,
            "why": wl.why,
            "spec": wl.spec,
            "spec_summary": spec_summary(spec),
            "llmdeployment": (doc.get("metadata") or {}).get("name", "?"),
            "trace": run.source,
            "trace_citation": run.citation or "no citation known",
            "requests_total": len(run),
            "duration_s": run.duration_s,
            "warmup_s": QUICK_WARMUP_S if opts.quick else wl.warmup_s,
            "seed": workload_seed(wl, opts),
            "peak_rps": wl.peak_rps * (QUICK_PEAK_SHARE if opts.quick else 1.0),
            "slo_ttft_s": spec.slo.ttft_p95_seconds,
            "slo_itl_s": spec.slo.itl_p95_seconds,
            "capacity_rps_per_replica": cap.rate_rps,
            "capacity_concurrency_per_replica": cap.concurrency,
            "capacity_running_per_replica": cap.running,
            "capacity_kv_cache_utilization_per_replica": cap.kv_cache_utilization,
            "capacity_rps_per_replica_by_fleet_size": {
                str(n): round(c.rate_rps, 4) for n, c in sorted(curves[wl.key].items())
            },
            "calibration_cpu_s": round(cal_wall[wl.key], 1),
            "base_requests": len(base),
        }
        entry = {"scenario": scenario, "reported": reported, "sweeps": sweeps, "chosen": chosen, "why": why,
                 "all_runs": [s for _, s, _ in runs]}
        if stored is not None:
            old = stored_entries[wl.key]
            old_curve = old["scenario"]["capacity_rps_per_replica_by_fleet_size"]
            if old_curve != scenario["capacity_rps_per_replica_by_fleet_size"]:
                mismatches.append(f"{wl.key}: calibrated capacity {old_curve} → "
                                  f"{scenario['capacity_rps_per_replica_by_fleet_size']}")
            stored_rows = {r["policy"]: r for r in old["reported"]}
            for _, check, ser in collected.checks.get(wl.key, []):
                diff = figures_differ(stored_rows[check["policy"]], check)
                if diff:
                    mismatches.append(f"{wl.key} {check['policy']}: {'; '.join(diff)}")
                series[check["policy"]] = ser
            entry = merge_entry(old, entry, policies)
        entries.append(entry)
        plots.append((entry, series, f"{wl.key}: {wl.title} — {run.source}"))
    if mismatches:
        print(f"The kept rows of {args.update} do not reproduce on this code, so merging new rows into them "
              "would compare runs of different simulators; nothing written. Run the full benchmark. Differences:\n  "
              + "\n  ".join(mismatches), file=sys.stderr)
        return 1
    for entry, series, title in plots:
        plot_day(
            {r["policy"]: {k: np.asarray(v) for k, v in series[r["policy"]].items()} for r in entry["reported"]},
            out / f"{entry['scenario']['workload']}.png",
            title=title,
            footnote=f"Trace: {entry['scenario']['trace_citation']}",
            warmup_s=entry["scenario"]["warmup_s"],
        )
    wall = time.perf_counter() - t_start
    command = ".venv/bin/python benchmarks/workloads.py" + (" --quick" if opts.quick else "") + (
        f" --seed {opts.seed}" if opts.seed is not None else ""
    ) + ("" if args.workloads == ",".join(w.key for w in WORKLOADS) else f" --workloads {args.workloads}") + (
        f" --update {_display(args.update)}" if args.update is not None else ""
    ) + (
        "" if args.policies == ",".join(POLICY_NAMES) else f" --policies {args.policies}"
    ) + "".join(f" --variant '{v}'" for v in args.variant)
    runs_made = sum(len(v) for v in collected.runs.values()) + sum(len(v) for v in collected.checks.values())
    if stored is not None:
        doc_out = stored
        updated = {e["scenario"]["workload"]: e for e in entries}
        doc_out["workloads"] = [updated.get(e["scenario"]["workload"], e) for e in stored["workloads"]]
        doc_out["run"]["runs"] = sum(len(e["all_runs"]) for e in doc_out["workloads"])
        doc_out["run"]["llmscale_cpu_s_per_simulated_day"] = _llmscale_day_cost(doc_out["workloads"])
        doc_out["run"].setdefault("updates", []).append({
            "command": command,
            "policies": policies,
            "workloads": [wl.key for wl in workloads],
            "utc": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "commit": commit,
            "wall_s": round(wall, 1),
            "jobs": jobs_n,
            "runs": runs_made,
        })
    else:
        doc_out = {
            "run": {
                "command": command,
                "wall_s": round(wall, 1),
                "jobs": jobs_n,
                "runs": runs_made,
                "quick": opts.quick,
                "llmscale_cpu_s_per_simulated_day": _llmscale_day_cost(entries),
            },
            "workloads": entries,
        }
    (out / "workloads.json").write_text(json.dumps(doc_out, indent=1, default=float) + "\n", encoding="utf-8")
    md = markdown(doc_out)
    (out / "workloads.md").write_text(md, encoding="utf-8")
    checked_in = out.resolve() == results_dir.resolve()
    readme = args.readme or (DOCS if checked_in else None)
    if readme:
        update_readme(Path(readme), md)
    if checked_in:
        update_headline(README, headline_markdown(json.loads(json.dumps(doc_out, default=float))))
    sys.stdout.write(md)
    print(f"Finished in {wall / 60:.1f} min", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
