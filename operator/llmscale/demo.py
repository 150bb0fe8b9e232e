"""``llmscale demo``: a compressed day of real production traffic through the operator, end to end.

What it does, unattended (see docs/demo.md):

1. builds (first time only) and starts the local stack of :mod:`llmscale.localcluster.stack`: the
   pinned Kubernetes control plane, KWOK fake GPU nodes, Prometheus, and the pod runner that runs
   one mock engine per Ready pod behind a router;
2. installs the CRD generated from :mod:`llmscale.api` (server-side apply), starts the operator
   (``llmscale run``) as a process, and applies the sample LLMDeployment
   (``llmscale/localcluster/chat-mock.yaml``) with a batch pool whose trough window is set on the wall
   clock so that it opens during the compressed night;
3. replays the Azure LLM inference trace 2023 (CC-BY 4.0; Patel et al., Splitwise, ISCA 2024;
   shipped in the package, :mod:`llmscale.data`), time-rescaled onto a daily shape (:func:`llmscale.sim.trace.synthesize` with a
   :class:`~llmscale.sim.trace.DiurnalEnvelope`), a day compressed into ``--minutes`` of wall time,
   through the router; during the compressed day suspended batch Jobs are created
   (``llmscale batch run`` against Service ``chat-batch``, the input and the results on a hostPath
   folder of the state dir), which the operator releases when the trough window opens, so the
   day's batch backlog drains overnight;
4. shows a live view (rich) of arrivals, queue, KV-cache use, TTFT p95 (from Prometheus, through
   :mod:`llmscale.signals`), the replicas and the batch backlog from the LLMDeployment's status;
5. writes ``out/demo.png`` (load, replicas, latency and the batch backlog over time) and
   ``out/demo-summary.json``, and stops everything it started, also on Ctrl-C or an error;
6. runs the same day in the simulator (:mod:`llmscale.sim`) under llmscale, the HPA and KEDA as
   they ship (:func:`simulated_sides`) and draws them beside the live run in
   ``out/demo-compare.png`` (replicas and TTFT p95 against time, the SLO line, each side's SLO
   attainment and GPU-hours), printed and in the summary's ``comparison``.

The cold start is compressed with the day (:func:`compressed_cold_start`), so the lead time the
warm headroom covers is the same share of the morning ramp as on a real day.

The engines run at real-time speed; only the traffic's day is compressed. GPU-hours and cost are
therefore wall-clock GPU time of the fake GPUs the pods hold, priced at ``spec.cost.gpuHourUsd``.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import math
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import FrameType
from typing import Any

import numpy as np
import yaml

from llmscale.crd import crd_yaml
from llmscale.data import resolve_trace
from llmscale.loadgen import ReplayReport, RequestResult, replay
from llmscale.localcluster import SAMPLE
from llmscale.localcluster import stack as local_stack
from llmscale.localcluster.ports import free_port
from llmscale.sim.trace import (
    TRACE_CITATION,
    DiurnalEnvelope,
    Trace,
    TraceFormatError,
    load_azure_csv,
    synthesize,
)

__all__ = ["DemoConfig", "DemoError", "DemoInputError", "Sample", "demo_home", "find_repo", "run_demo", "summarize"]

DAY_S = 86_400.0
NAMESPACE = "llmscale-demo"
NAME = "chat"


class DemoError(RuntimeError):
    """The demo cannot run here (no repository checkout, a stack that did not start)."""


class DemoInputError(DemoError):
    """The demo's input cannot be used (an unreadable trace, or not in the Azure CSV format)."""


@dataclass(frozen=True)
class DemoConfig:
    """Knobs of the demo.

    Attributes:
        minutes: wall minutes one compressed day of traffic lasts.
        peak_rps: arrival rate at the daily peak, requests per wall second. 2: the mock engines
            (about two trace requests a second each at 8 running) stay within ``replicas.max`` 8
            on 2 shared CPU cores, which also run the control plane.
        start_hour: hour of the (UTC) trace day the replay starts at; 6 puts the morning ramp
            first and the night near the end, where the trough window is.
        batch_job_hours: hours of the compressed day at which a batch Job is created (one each).
        batch_requests: requests of each batch Job (64 output tokens each): three Jobs of 60 take
            one batch replica of the sample about half a minute, so the one-minute window drains
            them.
        out_dir: where the plot and the summary go.
        trace: a trace CSV in the Azure format, or the name of a bundled trace in that format
            (default: :data:`llmscale.data.DEFAULT_TRACE`, the packaged Azure LLM inference trace 2023).
        seed: seed of the time rescaling.
        cold_start_real_s: the replicas' cold start on the uncompressed day, seconds (300: an 8B
            model's image and weights from a node cache and its CUDA graphs, minutes on a GPU). The
            demo compresses it with the day (:func:`compressed_cold_start`), so the lead time the
            headroom covers is the same share of the morning ramp as it is in production.
        headroom_replicas: ``spec.headroom.replicas`` of the demo's LLMDeployment. 2: the day is
            compressed about 200× but the operator's 60 s arrival-rate window is not, so the load
            signal sees the compressed day ~3.4 of its hours late; over that lag the daily envelope
            alone grows by about one replica's capacity at the steepest of the ramp, and the trace's
            own bursts by more (docs/demo.md). A demo setting, not a policy constant: in real time
            the default is 0.
        compare: the baselines (:data:`llmscale.sim.baselines.POLICY_NAMES`) run over the same day
            in the simulator, drawn beside the live run in ``demo-compare.png``.
    """

    minutes: float = 7.0
    peak_rps: float = 2.0
    start_hour: float = 6.0
    batch_job_hours: tuple[float, ...] = (9.0, 13.0, 17.0)
    batch_requests: int = 60
    out_dir: Path = Path("out")
    trace: str | Path | None = None
    seed: int = 0
    cold_start_real_s: float = 300.0
    headroom_replicas: int = 2
    compare: tuple[str, ...] = ("hpa", "keda-queue")


def speedup_of(cfg: DemoConfig) -> float:
    """Trace seconds per wall second: one day in ``cfg.minutes``."""
    return DAY_S / (cfg.minutes * 60.0)


def compressed_cold_start(cfg: DemoConfig) -> float:
    """The cold start on the compressed day, wall seconds: ``cold_start_real_s`` / the speedup
    (300 s in 7 minutes: 1.46 s), rounded to 0.01 s and at least 0.5 s (the mock engine's own
    start takes about a second on top of it)."""
    return max(round(cfg.cold_start_real_s / speedup_of(cfg), 2), 0.5)


@dataclass
class Sample:
    """One row of the demo's timeline (every ~2 s of wall time).

    Attributes:
        t_s: wall seconds since the replay started.
        trace_hour: hour of the compressed day, 0–24.
        arrivals_rps: interactive arrivals per wall second over the last 10 s (client side).
        queue: waiting requests in the pool (Prometheus), or None when unknown.
        kv: mean KV-cache utilisation 0–1 (Prometheus), or None.
        ttft_p95_s: TTFT p95 over the last 30 s (Prometheus histogram), seconds, or None.
        desired / ready / headroom / batch / batch_ready: from ``status.replicas``.
        gpus: GPUs held by the LLMDeployment's live pods (starting ones included).
        interactive_pods: live pods of the interactive pool (starting ones included; None: unknown).
        backlog_tokens: ``status.batch.tokensOutstanding`` (None before the first status).
        jobs_waiting / jobs_running / jobs_done: ``status.batch.jobsWaiting`` / ``…Running`` /
            ``…Done``.
    """

    t_s: float
    trace_hour: float
    arrivals_rps: float
    queue: float | None
    kv: float | None
    ttft_p95_s: float | None
    desired: int | None
    ready: int | None
    headroom: int | None
    batch: int | None
    batch_ready: int | None
    gpus: int
    backlog_tokens: float | None = None
    jobs_waiting: int | None = None
    jobs_running: int | None = None
    jobs_done: int | None = None
    interactive_pods: int | None = None


@dataclass
class _Run:
    samples: list[Sample] = field(default_factory=list)
    jobs_created: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class BatchOutcome:
    """What the day's batch Jobs did, read from their results files at the end.

    Attributes:
        jobs: Jobs created.
        requests: requests in their inputs.
        results: result lines written (over all Jobs).
        unique_results: distinct ``custom_id`` among them (equal to ``results``: each written once).
        output_tokens: completion tokens of the successful results.
    """

    jobs: int
    requests: int
    results: int
    unique_results: int
    output_tokens: int


def batch_inputs(folder: Path, cfg: DemoConfig, model: str) -> list[tuple[str, float, dict[str, str]]]:
    """Write one OpenAI batch input per Job under ``folder/<job>/requests.jsonl`` (completions of
    64 tokens on short documents) and return ``(job name, creation hour, size annotations)``.

    The size annotations count as ``llmscale batch size`` does (:mod:`llmscale.batch.size`, a
    sibling layer the demo does not import): the lines, the prompt tokens as the mock engine counts
    them (:func:`llmscale.engine.tokenizer.prompt_tokens`) and ``max_tokens`` each.
    """
    from llmscale.engine.tokenizer import prompt_tokens
    from llmscale.policy.batch.jobs import (
        ANNOTATION_INPUT_TOKENS,
        ANNOTATION_OUTPUT_TOKENS,
        ANNOTATION_REQUESTS,
    )

    out = []
    max_tokens = 64
    for k, hour in enumerate(cfg.batch_job_hours):
        name = f"batch-{int(hour):02d}h"
        path = folder / name / "requests.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        (path.parent / "results.jsonl").unlink(missing_ok=True)
        prompt_total = 0
        with path.open("w") as f:
            for i in range(cfg.batch_requests):
                prompt = f"summarise document {k}-{i}: " + "text " * 60
                prompt_total += prompt_tokens(prompt)
                body = {"model": model, "prompt": prompt, "max_tokens": max_tokens}
                f.write(json.dumps({"custom_id": f"{name}-{i:04d}", "method": "POST", "url": "/v1/completions",
                                    "body": body}) + "\n")
        out.append((name, hour, {ANNOTATION_REQUESTS: str(cfg.batch_requests),
                                 ANNOTATION_INPUT_TOKENS: str(prompt_total),
                                 ANNOTATION_OUTPUT_TOKENS: str(max(cfg.batch_requests * max_tokens, 1))}))
    return out


def batch_job_manifest(name: str, data: Path, annotations: dict[str, str], port: int) -> dict[str, Any]:
    """A suspended batch Job for the demo's LLMDeployment, as docs/batch.md writes one: the batch
    client on a hostPath folder (the local cluster's nodes are this machine)."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"llmscale.dev/deployment": NAME},
                     "annotations": annotations},
        "spec": {
            "suspend": True,
            "backoffLimit": 2,
            "podFailurePolicy": {"rules": [
                {"action": "Ignore", "onExitCodes": {"containerName": "batch", "operator": "In", "values": [75]}},
                {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]},
            ]},
            "template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{
                    "name": "batch", "image": "llmscale:dev", "command": ["llmscale", "batch", "run"],
                    "args": [f"--input=/data/{name}/requests.jsonl", f"--output=/data/{name}/results.jsonl",
                             f"--url=http://{NAME}-batch:{port}", "--concurrency=16", "--grace=5",
                             "--progress=plain"],
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                }],
                "volumes": [{"name": "data", "hostPath": {"path": str(data), "type": "Directory"}}],
            }},
        },
    }


def batch_outcome(folder: Path, jobs: list[str], requests_per_job: int) -> BatchOutcome:
    """Read the Jobs' results files (missing: no result yet)."""
    results = unique = tokens = 0
    for name in jobs:
        path = folder / name / "results.jsonl"
        lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.exists() else []
        results += len(lines)
        unique += len({r.get("custom_id") for r in lines})
        for r in lines:
            response = r.get("response") or {}
            if response.get("status_code") == 200:
                tokens += int(((response.get("body") or {}).get("usage") or {}).get("completion_tokens") or 0)
    return BatchOutcome(len(jobs), len(jobs) * requests_per_job, results, unique, tokens)


def find_repo(start: Path | None = None) -> Path:
    """Return the repository root above ``start`` (default: the current directory): the first
    folder holding ``e2e/stack.py`` and ``crds/``.

    Raises:
        DemoError: none found (:func:`run_demo` then keeps its state and output in the working
            directory).
    """
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / "e2e" / "stack.py").is_file() and (folder / "crds").is_dir():
            return folder
    raise DemoError(f"no llmscale checkout at or above {here}")


def demo_home(start: Path | None = None) -> Path:
    """Return where the demo keeps its state (``.cluster/demo``) and output (``out/``): the
    repository root above ``start`` (default: the current directory) in a checkout, else
    ``start`` itself — the demo runs from an installed package too (its local cluster and its
    trace ship with it)."""
    try:
        return find_repo(start)
    except DemoError:
        return (start or Path.cwd()).resolve()


def demo_trace(base: Trace, cfg: DemoConfig, context_limit_tokens: int) -> tuple[Trace, float]:
    """Return the compressed day (trace time) and the speedup (trace seconds per wall second).

    The day is synthesised from ``base`` at a trace-time peak of ``peak_rps / speedup`` so that the
    wall-time peak is ``cfg.peak_rps``; prompts are cut so that prompt + output fits the
    context limit (the sample's engines hold 2,048 tokens; the trace's prompts reach 14,050).
    """
    speedup = speedup_of(cfg)
    midnight = math.floor(base.start_s / DAY_S) * DAY_S
    day = synthesize(base, duration_s=DAY_S, peak_rps=cfg.peak_rps / speedup, envelope=DiurnalEnvelope(),
                     seed=cfg.seed, start_s=midnight + cfg.start_hour * 3600.0)
    output = np.minimum(day.output_tokens, context_limit_tokens // 2)
    prompt = np.clip(day.prompt_tokens, 1, context_limit_tokens - output - 1)
    trace = Trace(day.arrival_s, prompt.astype(np.int64), output.astype(np.int64), day.is_batch,
                  day.start_s, day.duration_s, day.source + f", prompts cut to {context_limit_tokens} tokens")
    return trace, speedup


def trough_window(t0: float, cfg: DemoConfig, opens_at_hour: float = 0.5) -> tuple[datetime, datetime]:
    """Return the wall-clock (UTC) trough window: it opens at the first whole minute after the
    compressed clock passes ``opens_at_hour`` (after midnight of the trace day) and lasts one
    minute, the granularity of ``spec.batch.windows``."""
    hours_in = (24.0 - cfg.start_hour + opens_at_hour) % 24.0
    at = datetime.fromtimestamp(t0 + hours_in / 24.0 * cfg.minutes * 60.0, tz=UTC)
    opens = (at + timedelta(minutes=1)).replace(second=0, microsecond=0)
    return opens, opens + timedelta(minutes=1)


def summarize(results: list[RequestResult], batch: BatchOutcome, samples: list[Sample],
              duration_s: float, ttft_slo_s: float, itl_slo_s: float, gpu_hour_usd: float,
              sent: int, dropped: int, unfinished: int = 0, start_hour: float = 0.0,
              speedup: float = 1.0) -> dict[str, Any]:
    """Return the demo's summary (keys carry their units).

    A request meets the SLO when it succeeded, its client-measured TTFT is within
    ``ttft_slo_s`` and its mean inter-token latency ``(e2e − TTFT) / (tokens − 1)`` within
    ``itl_slo_s``. SLO attainment = such requests / requests sent; goodput = their output tokens per
    wall second. GPU-hours integrate the GPUs held by live pods over the samples (wall time); cost
    per million tokens = GPU-hours × ``gpu_hour_usd`` / (delivered tokens, interactive + batch) × 10⁶.
    The batch backlog's peak and the compressed hour at which it drained (the first sample with
    every Job done, after some backlog was seen; ``start_hour`` + wall seconds × ``speedup``) come
    from the samples of ``status.batch``.
    """
    def meets(r: RequestResult) -> bool:
        if not r.ok or r.ttft_s is None or r.ttft_s > ttft_slo_s:
            return False
        itl = (r.e2e_s - r.ttft_s) / max(1, r.completion_tokens - 1)
        return itl <= itl_slo_s

    good = [r for r in results if meets(r)]
    ok = [r for r in results if r.ok]
    tokens = sum(r.completion_tokens for r in ok)
    batch_tokens = batch.output_tokens
    gpu_s = 0.0
    for a, b in itertools.pairwise(samples):
        gpu_s += a.gpus * (b.t_s - a.t_s)
    gpu_hours = gpu_s / 3600.0
    ttfts = [r.ttft_s for r in ok if r.ttft_s is not None]
    delivered = tokens + batch_tokens
    desired = [s.desired for s in samples if s.desired is not None]
    return {
        "duration_s": round(duration_s, 1),
        "requests_sent": sent,
        "requests_ok": len(ok),
        "requests_failed": len(results) - len(ok),
        "requests_dropped": dropped,
        "requests_unfinished": unfinished,
        "slo_ttft_p95_s": ttft_slo_s,
        "slo_itl_p95_s": itl_slo_s,
        "slo_attainment": round(len(good) / sent, 4) if sent else None,
        "ttft_p50_s": round(float(np.percentile(ttfts, 50)), 3) if ttfts else None,
        "ttft_p95_s": round(float(np.percentile(ttfts, 95)), 3) if ttfts else None,
        "output_tokens": tokens,
        "batch_jobs": batch.jobs,
        "batch_jobs_done": max((s.jobs_done or 0 for s in samples), default=0),
        "batch_requests": batch.requests,
        "batch_results": batch.results,
        "batch_results_unique": batch.unique_results,
        "batch_output_tokens": batch_tokens,
        "batch_backlog_peak_tokens": int(max((s.backlog_tokens or 0 for s in samples), default=0)),
        "batch_drained_at_hour": _drained_at(samples, batch.jobs, start_hour, speedup),
        "goodput_tok_s": round(sum(r.completion_tokens for r in good) / duration_s, 2) if duration_s else None,
        "replicas_min": min(desired) if desired else None,
        "replicas_max": max(desired) if desired else None,
        "gpu_hours": round(gpu_hours, 4),
        "gpu_hour_usd": gpu_hour_usd,
        "cost_usd": round(gpu_hours * gpu_hour_usd, 4),
        "cost_per_million_tokens_usd": round(gpu_hours * gpu_hour_usd / delivered * 1e6, 2) if delivered else None,
        "trace": TRACE_CITATION,
    }


def _drained_at(samples: list[Sample], jobs: int, start_hour: float, speedup: float) -> float | None:
    seen = False
    for s in samples:
        seen = seen or bool(s.backlog_tokens)
        if seen and jobs and (s.jobs_done or 0) >= jobs:
            return round((start_hour + s.t_s * speedup / 3600.0) % 24.0, 2)
    return None


# ------------------------------------------------------------------------------ the comparison

#: Trailing window of the comparison's TTFT p95 curves, wall seconds (the live view's Prometheus
#: p95 is over 30 s too).
P95_WINDOW_S = 30.0
#: Step of the comparison's curves, wall seconds (the live view samples about every 2 s).
CURVE_STEP_S = 2.0


@dataclass(frozen=True)
class Side:
    """One autoscaler's run over the compressed day, for the comparison figure.

    Attributes:
        policy: ``llmscale`` or a baseline's name (:data:`llmscale.sim.baselines.POLICY_NAMES`).
        mode: ``"live"`` (the local cluster, the demo itself) or ``"simulated"`` (:mod:`llmscale.sim`).
        slo_attainment: requests meeting the SLO / requests sent over the day.
        gpu_hours: GPU-hours of the interactive pool's pods (starting ones included) over the day,
            wall time.
        t_s: wall seconds since the day started, shape ``(n,)``.
        replicas: interactive pods (starting ones included) at ``t_s``.
        ttft_p95_s: TTFT p95 of the requests sent in the ``P95_WINDOW_S`` before ``t_s`` (a request
            with no first token counts as infinitely late); NaN where none was sent.
        setting: a baseline's target as it ran (``""``: none).
    """

    policy: str
    mode: str
    slo_attainment: float
    gpu_hours: float
    t_s: Any
    replicas: Any
    ttft_p95_s: Any
    setting: str = ""

    def figures(self) -> dict[str, Any]:
        """The side's figures for the summary (JSON-able)."""
        attained = round(self.slo_attainment, 4) if math.isfinite(self.slo_attainment) else None
        out = {"policy": self.policy, "mode": self.mode, "slo_attainment": attained, "gpu_hours": round(self.gpu_hours, 4)}
        return {**out, "setting": self.setting} if self.setting else out


def rolling_p95(sent_s: Any, ttft_s: Any, grid_s: Any, window_s: float = P95_WINDOW_S) -> Any:
    """TTFT p95 at each time of ``grid_s`` over the requests sent in the ``window_s`` before it
    (NaN where none was); every array in seconds."""
    sent = np.asarray(sent_s, dtype=float)
    ttft = np.asarray(ttft_s, dtype=float)
    order = np.argsort(sent, kind="stable")
    sent, ttft = sent[order], ttft[order]
    out = np.full(len(grid_s), np.nan)
    for i, t in enumerate(grid_s):
        a, b = np.searchsorted(sent, t - window_s, "right"), np.searchsorted(sent, t, "right")
        if b > a:
            out[i] = np.percentile(ttft[a:b], 95, method="higher")
    return out


def live_side(results: list[RequestResult], samples: list[Sample], day_s: float, ttft_slo_s: float,
              itl_slo_s: float, gpus_per_replica: int) -> Side:
    """The live run's side: requests sent within the day (client-measured; the summary's SLO rule),
    interactive pods from the samples, integrated over ``[0, day_s]`` wall seconds."""
    day = [r for r in results if r.sent_at <= day_s]

    def meets(r: RequestResult) -> bool:
        if not r.ok or r.ttft_s is None or r.ttft_s > ttft_slo_s:
            return False
        return (r.e2e_s - r.ttft_s) / max(1, r.completion_tokens - 1) <= itl_slo_s

    pts = [(s.t_s, s.interactive_pods) for s in samples if s.interactive_pods is not None and s.t_s <= day_s]
    t = np.array([p[0] for p in pts], dtype=float)
    reps = np.array([p[1] for p in pts], dtype=float)
    gpu_s = float(np.sum(reps[:-1] * np.diff(t))) * gpus_per_replica if len(t) > 1 else 0.0
    sent = np.array([r.sent_at for r in day], dtype=float)
    ttft = np.array([r.ttft_s if r.ok and r.ttft_s is not None else np.inf for r in day], dtype=float)
    return Side("llmscale", "live", sum(map(meets, day)) / len(day) if day else float("nan"), gpu_s / 3600.0,
                t, reps, rolling_p95(sent, ttft, t))


def simulated_sides(spec: dict[str, Any], day: Trace, speedup: float, calibration: Trace,
                    policies: tuple[str, ...], seed: int = 0, capacity: Any = None) -> list[Side]:
    """Run each of ``policies`` over the compressed day in the simulator (:mod:`llmscale.sim`):
    the day in wall time (arrivals ÷ ``speedup``), the demo's spec without its batch pool (the
    comparison is of the interactive pool), the replica model the mock engines run, the capacity
    calibrated on ``calibration`` (which the HPA's and KEDA's default settings derive from, as
    ``llmscale simulate`` does; ``capacity``, a :class:`~llmscale.sim.calibrate.Capacity`, skips the
    calibration). SLO attainment is :func:`llmscale.sim.report.request_meets`'s
    (TTFT within the SLO and at most 5 % of a request's gaps over the ITL target)."""
    from llmscale.api import LLMDeploymentSpec
    from llmscale.sim.report import request_meets, ttft_s
    from llmscale.sim.runner import Scenario, default_setting, run_policy

    body = {k: v for k, v in spec.items() if k != "batch"}
    sim_spec = LLMDeploymentSpec.model_validate(body)
    offsets = (day.arrival_s - day.start_s) / speedup
    wall = Trace(day.start_s + offsets, day.prompt_tokens, day.output_tokens, day.is_batch, day.start_s,
                 day.duration_s / speedup, day.source + f", {speedup:.0f}× compressed")
    sc = Scenario.build(sim_spec, wall, calibration, warmup_s=0.0, seed=seed, capacity=capacity)
    grid = np.arange(0.0, wall.duration_s + 1e-9, CURVE_STEP_S)
    out = []
    for name in policies:
        res = run_policy(name, sc)
        inter = ~np.asarray(res.is_batch)
        meets = request_meets(res, sim_spec.slo)[inter]
        sent = np.asarray(res.requests.arrival, dtype=float)[inter] - wall.start_s
        recs = [r for r in res.replicas if r.pool == "interactive"]
        reps = np.array([sum(1 for r in recs if r.created_s - wall.start_s <= t < r.gone_s - wall.start_s)
                         for t in grid], dtype=float)
        held = sum(max(0.0, min(r.gone_s, wall.end_s) - max(r.created_s, wall.start_s)) for r in recs)
        gpu_h = held * res.gpus_per_replica / 3600.0
        value = default_setting(name, sc.capacity)
        setting = "" if value is None else f"target {value:.3g} {_UNITS.get(name, '')}".rstrip()
        out.append(Side(name, "simulated", float(meets.mean()) if len(meets) else float("nan"), gpu_h, grid, reps,
                        rolling_p95(sent, ttft_s(res)[inter], grid), setting))
    return out


#: How the comparison names each autoscaler, and the unit of a baseline's target.
_LABELS = {"llmscale": "llmscale", "hpa": "HPA", "keda-queue": "KEDA", "keda-llmd": "KEDA (llm-d)", "kpa": "Knative KPA",
           "aibrix-kv": "AIBrix KV"}
_UNITS = {"hpa": "running requests per pod (the calibrated capacity at the SLO)",
          "keda-queue": "waiting requests per replica (vLLM production-stack's KEDA)",
          "keda-llmd": "running + waiting per replica", "kpa": "in-flight per pod", "aibrix-kv": "KV-cache fraction"}


def plot_compare(sides: list[Side], path: Path, ttft_slo_s: float, minutes: float, speedup: float,
                 start_hour: float = 6.0, settings: str = "") -> Path:
    """Write the comparison PNG: replicas and TTFT p95 against wall time for every side (the SLO
    line on the latter), each side's mode, SLO attainment and GPU-hours in the legend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    fig, (rep_ax, ttft_ax) = plt.subplots(2, 1, figsize=(10, 8), sharex=True)
    styles: dict[str, dict[str, Any]] = {"live": {"linewidth": 2.2}, "simulated": {"linewidth": 1.4, "linestyle": "--"}}
    for side in sides:
        label = (f"{_LABELS.get(side.policy, side.policy)} [{side.mode}]: SLO attainment "
                 f"{side.slo_attainment:.1%}, {side.gpu_hours:.3f} GPU-h" + (f"\n    {side.setting}" if side.setting else ""))
        t = np.asarray(side.t_s) / 60.0
        (line,) = rep_ax.step(t, side.replicas, where="post", label=label, **styles[side.mode])
        ttft_ax.plot(t, np.minimum(side.ttft_p95_s, 60.0), color=line.get_color(), **styles[side.mode])
    rep_ax.set_ylabel("interactive replicas (pods)")
    top = max((float(np.nanmax(s.replicas)) for s in sides if len(s.replicas)), default=1.0)
    rep_ax.set_ylim(0, top * 1.9 + 1)  # room for the legend above the curves
    rep_ax.legend(loc="upper left", fontsize=7.5)
    ttft_ax.axhline(ttft_slo_s, color="red", linestyle=":", label=f"SLO: TTFT p95 {ttft_slo_s:g} s")
    ttft_ax.set_yscale("log")
    ttft_ax.set_ylabel(f"TTFT p95 over {P95_WINDOW_S:.0f} s (s, log)")
    ttft_ax.legend(loc="upper left", fontsize=8)

    def tick(m: float, _pos: object) -> str:
        at = round((start_hour * 60.0 + m * speedup) % 1440.0) % 1440  # minutes of the day
        return f"{m:g}\n{at // 60:02d}:{at % 60:02d}"

    ttft_ax.xaxis.set_major_formatter(FuncFormatter(tick))
    ttft_ax.set_xlabel(f"wall minutes / hour of the day (one day in {minutes:g} minutes, ×{speedup:.0f}). "
                       "Solid: live, local cluster; dashed: simulator, same day, same spec")
    rep_ax.set_title("The same compressed day under llmscale, the HPA and KEDA (default behaviour)\n"
                     + (f"{settings}\n" if settings else "") + f"{TRACE_CITATION}", fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot(samples: list[Sample], path: Path, ttft_slo_s: float, window: tuple[float, float]) -> Path:
    """Write the four-panel PNG (load and queue; replicas; TTFT p95 vs the SLO; the batch backlog)
    to ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = np.array([s.t_s / 60.0 for s in samples])

    def col(name: str) -> Any:
        return np.array([np.nan if getattr(s, name) is None else getattr(s, name) for s in samples], dtype=float)

    fig, axes = plt.subplots(4, 1, figsize=(10, 11.5), sharex=True)
    ax = axes[0]
    ax.plot(t, col("arrivals_rps"), label="arrivals/s (client)")
    ax.set_ylabel("arrivals per wall second")
    ax.set_title("llmscale demo: a compressed day of the Azure LLM inference trace 2023")
    ax.legend(loc="upper left")
    queue_ax = ax.twinx()  # the queue can be tens of times the arrival rate: its own scale
    queue_ax.plot(t, col("queue"), color="tab:orange", label="queue depth (Prometheus)")
    queue_ax.set_ylabel("waiting requests")
    queue_ax.legend(loc="upper right")
    ax = axes[1]
    ax.step(t, col("desired"), where="post", label="desired (interactive)")
    ax.step(t, col("ready"), where="post", label="ready (interactive)")
    ax.step(t, col("batch"), where="post", label="batch pool")
    ax.set_ylabel("replicas")
    ax.legend(loc="upper left")
    ax = axes[2]
    ax.plot(t, col("ttft_p95_s"), label="TTFT p95 (Prometheus, 30 s)")
    ax.axhline(ttft_slo_s, color="red", linestyle="--", label=f"SLO {ttft_slo_s:g} s")
    ax.set_ylabel("seconds")
    ax.legend(loc="upper left")
    ax = axes[3]
    ax.step(t, col("backlog_tokens") / 1000.0, where="post", color="tab:purple", label="batch tokens outstanding")
    ax.set_ylabel("k tokens")
    ax.legend(loc="upper left")
    jobs_ax = ax.twinx()
    jobs_ax.step(t, col("jobs_waiting"), where="post", color="tab:grey", label="Jobs waiting")
    jobs_ax.step(t, col("jobs_done"), where="post", color="tab:green", label="Jobs done")
    jobs_ax.set_ylabel("Jobs")
    jobs_ax.legend(loc="upper right")
    ax.set_xlabel(f"wall minutes (one day compressed; {TRACE_CITATION})")
    for ax in axes:
        ax.axvspan(window[0] / 60.0, window[1] / 60.0, color="grey", alpha=0.15)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# ------------------------------------------------------------------------------------ the shell


@contextlib.contextmanager
def _operator(kubeconfig: Path, prometheus_url: str, log_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    port = free_port()
    argv = [str(Path(sys.executable).with_name("llmscale")), "run", "--namespace", NAMESPACE, "--standalone",
            "--prometheus-url", prometheus_url, "--tick-base-seconds", "1", "--metrics-host", "127.0.0.1",
            "--metrics-port", str(port), "--kubeconfig", str(kubeconfig)]
    env = {**os.environ, "LLMSCALE_STATUS_REFRESH_SECONDS": "1"}
    with log_path.open("ab") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        while True:
            if proc.poll() is not None:
                raise DemoError(f"the operator exited with {proc.returncode}; see {log_path}")
            with contextlib.suppress(OSError), urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2):
                break
            if time.monotonic() > deadline:
                raise DemoError(f"the operator did not become ready in 90 s; see {log_path}")
            time.sleep(0.5)
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)


def _kubectl(stack: Any, *args: str, input: str | None = None) -> str:
    p = subprocess.run([str(stack.kubectl), "--kubeconfig", str(stack.kubeconfig), *args], input=input,
                       capture_output=True, text=True, timeout=60)
    if p.returncode != 0:
        raise DemoError(f"kubectl {' '.join(args)} failed: {p.stderr.strip()}")
    return p.stdout


def _wait_established(stack: Any, crd: str, timeout_s: float = 90.0) -> None:
    """Wait until ``crd`` (``crd/<name>``) is Established. ``kubectl wait`` fails outright, rather
    than waits, while a new CRD has no status yet (``.status.conditions accessor error``), which a
    large CRD on a busy API server shows for a moment: retry it until ``timeout_s`` seconds.

    Raises:
        DemoError: the CRD was not Established in time (with kubectl's last message).
    """
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            _kubectl(stack, "wait", "--for=condition=Established", "--timeout=30s", crd)
            return
        except DemoError:
            if time.monotonic() > deadline:
                raise
            time.sleep(1.0)


def demo_manifest(opens: datetime, closes: datetime, cfg: DemoConfig) -> dict[str, Any]:
    """The demo's LLMDeployment: the local sample with the day's compressed cold start and warm
    headroom (see :class:`DemoConfig`) and a batch pool whose trough window is ``opens``–``closes``."""
    manifest: dict[str, Any] = yaml.safe_load(SAMPLE.read_text())
    manifest["metadata"] = {"name": NAME, "namespace": NAMESPACE}
    spec = manifest["spec"]
    spec["headroom"]["growthFactor"] = 1.0  # adaptive headroom on: the day has real ramps
    # The cold start compressed with the day (the pods' KWOK delay is this too), and the warm
    # replicas that cover the lag of the uncompressed rate window (DemoConfig.headroom_replicas).
    spec["headroom"]["coldStartSeconds"] = compressed_cold_start(cfg)
    spec["headroom"]["replicas"] = cfg.headroom_replicas
    # The trace's prompts (median 1,020 tokens) would fill the e2e sample's 2,432-token KV cache
    # with two requests; the demo keeps the L40S's own cache (tens of thousands of tokens) and lets
    # 8 requests run per replica, so a replica serves about two trace requests a second.
    spec["engine"]["args"] = ["--max-num-seqs", "8"]
    # With the L40S's own cache the KV-cache target is the one derived from the model and the SLO.
    spec["scaling"]["targets"].pop("kvCacheUtilization", None)
    spec["scaling"]["scaleDown"].update({"stabilizationWindowSeconds": 30, "periodSeconds": 10})
    # The demo shows the day's backlog drained in the night's window: the local cluster's GPUs are
    # mostly idle all day, onto which the operator (reading the nodes) would otherwise release the
    # Jobs as soon as the interactive SLO is safe (docs/batch.md, step 4; e2e scenario 16b).
    spec["batch"] = {"maxReplicas": 1, "releaseOnIdleCapacity": False, "windows": [
        {"start": opens.strftime("%H:%M"), "end": closes.strftime("%H:%M"), "timezone": "UTC"}]}
    return manifest


def _status(stack: Any) -> dict[str, Any]:
    out = _kubectl(stack, "get", "llmdeployment", NAME, "-n", NAMESPACE, "-o", "json")
    return dict(json.loads(out).get("status") or {})


def _gpus(stack: Any, per_replica: int) -> tuple[int, int]:
    """Return (GPUs held by the live pods, live pods of the interactive pool)."""
    out = _kubectl(stack, "get", "pods", "-n", NAMESPACE, "-l", f"llmscale.dev/deployment={NAME}", "-o", "json")
    live = [p for p in json.loads(out)["items"] if not p["metadata"].get("deletionTimestamp")]
    interactive = sum(1 for p in live if (p["metadata"].get("labels") or {}).get("llmscale.dev/pool") == "interactive")
    return per_replica * len(live), interactive


def _fmt(v: float | None, fmt: str) -> str:
    return "?" if v is None else format(v, fmt)


async def _replay_and_watch(stack: Any, trace: Trace, speedup: float, cfg: DemoConfig, spec: dict[str, Any],
                            window_s: tuple[float, float], t0: float, run: _Run,
                            jobs: list[tuple[str, float, dict[str, Any]]]) -> ReplayReport:
    from rich.console import Console
    from rich.live import Live
    from rich.table import Table

    from llmscale.signals.profiles import get_profile
    from llmscale.signals.prometheus import PrometheusSignalReader, ReaderSettings
    from llmscale.signals.queries import PoolTarget

    model = spec["model"]["name"]
    per_gpu = int(spec["resources"]["gpusPerReplica"])
    reader = PrometheusSignalReader(stack.prometheus_url, settings=ReaderSettings(rate_window="30s"))
    profile = get_profile("vllm")
    target = PoolTarget(NAMESPACE, NAME, "interactive")
    offsets = (trace.arrival_s - trace.start_s) / speedup
    url = f"{stack.router_url}/ns/{NAMESPACE}/svc/{NAME}/v1/completions"
    deadline = max(cfg.minutes * 60.0, window_s[1] + 30.0)
    console = Console()
    replay_task = asyncio.create_task(replay(trace, url, model, speedup=speedup, deadline_s=deadline,
                                             max_in_flight=256, stream=True))

    def table(s: Sample) -> Table:
        tab = Table(title=f"llmscale demo — {TRACE_CITATION}", show_header=True)
        for col in ("wall", "day", "arrivals/s", "queue", "KV", "TTFT p95", "desired", "ready", "headroom", "batch",
                    "backlog", "Jobs done"):
            tab.add_column(col, justify="right")

        f = _fmt
        tab.add_row(f"{s.t_s:5.0f} s", f"{int(s.trace_hour):02d}:{int(s.trace_hour % 1 * 60):02d}",
                    f"{s.arrivals_rps:.2f}", f(s.queue, ".0f"), f(s.kv, ".2f"), f(s.ttft_p95_s, ".2f"),
                    f(s.desired, "d"), f(s.ready, "d"), f(s.headroom, "d"), f(s.batch, "d"),
                    f(s.backlog_tokens, ",.0f"), f(s.jobs_done, "d"))
        return tab

    last_print = -1e9
    live = Live(console=console, auto_refresh=False) if console.is_terminal else None
    # Watch until the replay is over and, after it, until every Job created is done or the
    # window has been closed for 30 s: the window can open as late as the day's last minute (it
    # starts on a whole wall minute), and a replay that ran out of requests first used to end the
    # demo with the Jobs' work written but not yet counted done.
    jobs_done: int | None = None
    while not replay_task.done() or (
        time.monotonic() - t0 < deadline and (jobs_done is None or jobs_done < len(run.jobs_created))
    ):
        now = time.time()
        t = time.monotonic() - t0
        snap = await reader.read(profile, target, now)
        try:
            st = await asyncio.to_thread(_status, stack)
            gpus, inter_pods = await asyncio.to_thread(_gpus, stack, per_gpu)
        except DemoError:
            st, gpus, inter_pods = {}, 0, None
        reps = st.get("replicas", {})
        backlog = st.get("batch") or {}
        arrivals = float(np.count_nonzero((offsets > t - 10) & (offsets <= t))) / 10.0
        day_hours = cfg.start_hour + t * speedup / 3600.0
        hour = day_hours % 24.0
        # The day's Jobs, created suspended as the compressed clock passes their hour.
        for name, at, job_annotations in jobs:
            if name not in run.jobs_created and day_hours >= at + (24.0 if at < cfg.start_hour else 0.0):
                manifest = batch_job_manifest(name, Path(stack.state_dir) / "batch-data", job_annotations,
                                              int(spec["engine"].get("port", 8000)))
                with contextlib.suppress(DemoError):
                    await asyncio.to_thread(_kubectl, stack, "apply", "--server-side",
                                            "--field-manager=llmscale-demo", "-f", "-",
                                            input=yaml.safe_dump(manifest))
                    run.jobs_created.append(name)
        s = Sample(t, hour, arrivals, snap.queue_depth, snap.kv_cache_utilization, snap.ttft_p95_s,
                   reps.get("desired"), reps.get("ready"), reps.get("headroom"), reps.get("batch"),
                   reps.get("batchReady"), gpus, backlog.get("tokensOutstanding"), backlog.get("jobsWaiting"),
                   backlog.get("jobsRunning"), backlog.get("jobsDone"), inter_pods)
        run.samples.append(s)
        jobs_done = s.jobs_done
        if live is not None:
            live.update(table(s), refresh=True)
        elif t - last_print >= 10:  # not a terminal (CI, a log file): one line every 10 s
            last_print = t
            print(f"[{t:5.0f} s, day {int(hour):02d}:{int(hour % 1 * 60):02d}] arrivals {arrivals:.1f}/s "
                  f"queue {_fmt(s.queue, '.0f')} KV {_fmt(s.kv, '.2f')} TTFT p95 {_fmt(s.ttft_p95_s, '.2f')} s | "
                  f"desired {_fmt(s.desired, 'd')} ready {_fmt(s.ready, 'd')} headroom {_fmt(s.headroom, 'd')} "
                  f"batch {_fmt(s.batch, 'd')} backlog {_fmt(s.backlog_tokens, ',.0f')} tokens, "
                  f"{_fmt(s.jobs_done, 'd')}/{len(run.jobs_created)} Jobs done", flush=True)
        await asyncio.wait({replay_task}, timeout=2.0)
        if replay_task.done():
            await asyncio.sleep(2.0)
    return replay_task.result()


def run_demo(cfg: DemoConfig, repo: Path | None = None) -> dict[str, Any]:
    """Run the whole demo (see the module docstring) and return the summary.

    Raises:
        DemoInputError: the trace cannot be read (checked before anything starts).
        DemoError: a part of the stack that did not start.
        subprocess.CalledProcessError: the cluster build or start failed.
    """
    repo = repo or demo_home()
    # The trace is read before anything starts: a bad --trace costs nothing.
    try:
        base = load_azure_csv(resolve_trace(cfg.trace))
    except (OSError, TraceFormatError) as exc:
        raise DemoInputError(f"could not read the trace: {exc} (--trace takes a CSV in the Azure LLM "
                        "inference trace format, or a bundled trace's name)") from exc
    stack_mod = local_stack
    state = Path(os.environ.get("LLMSCALE_CLUSTER_DIR") or repo / ".cluster" / "demo").resolve()
    state.mkdir(parents=True, exist_ok=True)
    out_dir = cfg.out_dir if cfg.out_dir.is_absolute() else repo / cfg.out_dir

    def on_term(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, on_term)
    print(f"llmscale demo: starting the local stack in {state} (first run builds it: tens of minutes)", flush=True)
    try:
        stack = stack_mod.up(state)
        _kubectl(stack, "apply", "--server-side", "--force-conflicts", "-f", "-", input=crd_yaml())
        _wait_established(stack, "crd/llmdeployments.llmscale.dev")
        _kubectl(stack, "apply", "-f", "-", input=yaml.safe_dump({"apiVersion": "v1", "kind": "Namespace",
                                                                    "metadata": {"name": NAMESPACE}}))
        with _operator(stack.kubeconfig, stack.prometheus_url, state / "logs" / "demo-operator.log"):
            # First with a window twelve hours away (the batch pool exists, at 0); the real
            # window is set once the replicas are ready and the replay's start is known.
            far = datetime.now(UTC) + timedelta(hours=12)
            manifest = demo_manifest(far, far + timedelta(minutes=1), cfg)
            spec = manifest["spec"]
            trace, speedup = demo_trace(base, cfg, int(spec["model"]["contextLimitTokens"]))
            print(f"llmscale demo: {len(trace)} requests, {trace.source}; {TRACE_CITATION}", flush=True)
            _kubectl(stack, "apply", "--server-side", "--field-manager=llmscale-demo", "-f", "-",
                     input=yaml.safe_dump(manifest))
            deadline = time.monotonic() + 90
            while (_status(stack).get("replicas", {}).get("ready") or 0) < 1:
                if time.monotonic() > deadline:
                    raise DemoError("no replica became ready in 90 s; see the operator log")
                time.sleep(1)
            opens, closes = trough_window(time.time(), cfg)
            manifest = demo_manifest(opens, closes, cfg)
            _kubectl(stack, "apply", "--server-side", "--field-manager=llmscale-demo", "-f", "-",
                     input=yaml.safe_dump(manifest))
            print(f"llmscale demo: trough window {opens:%H:%M}–{closes:%H:%M} UTC (the compressed night)", flush=True)
            run = _Run()
            data = state / "batch-data"
            jobs = batch_inputs(data, cfg, spec["model"]["name"])
            t0 = time.monotonic()
            start_wall = time.time()
            window_s = (opens.timestamp() - start_wall, closes.timestamp() - start_wall)
            report = asyncio.run(_replay_and_watch(stack, trace, speedup, cfg, spec, window_s, t0, run, jobs))
            duration = time.monotonic() - t0
        outcome = batch_outcome(data, run.jobs_created, cfg.batch_requests)
        summary = summarize(report.results, outcome, run.samples, duration,
                            float(spec["slo"]["ttftP95Seconds"]), float(spec["slo"]["itlP95Seconds"]),
                            float(spec.get("cost", {}).get("gpuHourUsd", 2.5)), report.sent, report.dropped,
                            report.in_flight, start_hour=cfg.start_hour, speedup=speedup)
        out_dir.mkdir(parents=True, exist_ok=True)
        plot(run.samples, out_dir / "demo.png", float(spec["slo"]["ttftP95Seconds"]), window_s)
        (out_dir / "demo-summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        (out_dir / "demo-timeline.json").write_text(json.dumps([asdict(s) for s in run.samples]) + "\n")
    finally:
        signal.signal(signal.SIGTERM, previous)
        if os.environ.get("LLMSCALE_DEMO_KEEP") != "1":
            print("llmscale demo: stopping everything", flush=True)
            stack_mod.down(state)
    # The same day under the baselines, in the simulator, once the stack is down (its CPU free).
    try:
        summary["comparison"] = compare_day(cfg, spec, trace, speedup, base, report.results, run.samples,
                                            out_dir / "demo-compare.png")
    except ValueError as exc:  # the calibration found no capacity: the live run stands on its own
        print(f"llmscale demo: no comparison: {exc}", file=sys.stderr, flush=True)
        summary["comparison"] = None
    (out_dir / "demo-summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def compare_day(cfg: DemoConfig, spec: dict[str, Any], day: Trace, speedup: float, calibration: Trace,
                results: list[RequestResult], samples: list[Sample], path: Path) -> list[dict[str, Any]]:
    """Put the live day beside the same day under llmscale and ``cfg.compare`` in the simulator:
    write the comparison figure to ``path``, print one line per side, return their figures."""
    print(f"llmscale demo: the same day in the simulator under llmscale and {', '.join(cfg.compare)}", flush=True)
    day_s = cfg.minutes * 60.0
    slo = spec["slo"]
    sides = [live_side(results, samples, day_s, float(slo["ttftP95Seconds"]), float(slo["itlP95Seconds"]),
                       int(spec["resources"]["gpusPerReplica"]))]
    sides += simulated_sides(spec, day, speedup, calibration, ("llmscale", *cfg.compare), seed=cfg.seed)
    headroom = spec["headroom"]
    plot_compare(sides, path, float(slo["ttftP95Seconds"]), cfg.minutes, speedup, cfg.start_hour,
                 f"llmscale: cold start {cfg.cold_start_real_s:g} s compressed to {headroom['coldStartSeconds']:g} s, "
                 f"{headroom['replicas']} warm replicas; SLO TTFT p95 {slo['ttftP95Seconds']:g} s, "
                 f"ITL p95 {slo['itlP95Seconds']:g} s")
    for side in sides:
        print(f"llmscale demo: {side.policy:<10} ({side.mode:<9}) SLO attainment {side.slo_attainment:7.2%}, "
              f"{side.gpu_hours:.3f} GPU-hours (interactive pool, the day's {cfg.minutes:g} wall minutes)"
              + (f"; {side.setting}" if side.setting else ""), flush=True)
    print(f"llmscale demo: wrote {path}", flush=True)
    return [side.figures() for side in sides]
