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
   through the router; batch work is sent to the batch pool while it serves;
4. shows a live view (rich) of arrivals, queue, KV-cache use, TTFT p95 (from Prometheus, through
   :mod:`llmscale.signals`) and the replicas from the LLMDeployment's status;
5. writes ``out/demo.png`` (load, replicas and latency over time) and ``out/demo-summary.json``,
   prints the summary, and stops everything it started, also on Ctrl-C or an error.

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
import socket
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

import aiohttp
import numpy as np
import yaml

from llmscale.crd import crd_yaml
from llmscale.data import resolve_trace
from llmscale.loadgen import ReplayReport, RequestResult, replay
from llmscale.localcluster import SAMPLE
from llmscale.localcluster import stack as local_stack
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
        batch_rps: batch requests per wall second sent to the batch pool while it serves.
        out_dir: where the plot and the summary go.
        trace: a trace CSV in the Azure format, or the name of a bundled trace in that format
            (default: :data:`llmscale.data.DEFAULT_TRACE`, the packaged Azure LLM inference trace 2023).
        seed: seed of the time rescaling.
    """

    minutes: float = 7.0
    peak_rps: float = 2.0
    start_hour: float = 6.0
    batch_rps: float = 0.5
    out_dir: Path = Path("out")
    trace: str | Path | None = None
    seed: int = 0


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


@dataclass
class _Run:
    samples: list[Sample] = field(default_factory=list)
    batch_results: list[RequestResult] = field(default_factory=list)


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
    speedup = DAY_S / (cfg.minutes * 60.0)
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


def summarize(results: list[RequestResult], batch: list[RequestResult], samples: list[Sample],
              duration_s: float, ttft_slo_s: float, itl_slo_s: float, gpu_hour_usd: float,
              sent: int, dropped: int, unfinished: int = 0) -> dict[str, Any]:
    """Return the demo's summary (keys carry their units).

    A request meets the SLO when it succeeded, its client-measured TTFT is within
    ``ttft_slo_s`` and its mean inter-token latency ``(e2e − TTFT) / (tokens − 1)`` within
    ``itl_slo_s``. SLO attainment = such requests / requests sent; goodput = their output tokens per
    wall second. GPU-hours integrate the GPUs held by live pods over the samples (wall time); cost
    per million tokens = GPU-hours × ``gpu_hour_usd`` / (delivered tokens, interactive + batch) × 10⁶.
    """
    def meets(r: RequestResult) -> bool:
        if not r.ok or r.ttft_s is None or r.ttft_s > ttft_slo_s:
            return False
        itl = (r.e2e_s - r.ttft_s) / max(1, r.completion_tokens - 1)
        return itl <= itl_slo_s

    good = [r for r in results if meets(r)]
    ok = [r for r in results if r.ok]
    tokens = sum(r.completion_tokens for r in ok)
    batch_tokens = sum(r.completion_tokens for r in batch if r.ok)
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
        "batch_requests_ok": sum(1 for r in batch if r.ok),
        "batch_output_tokens": batch_tokens,
        "goodput_tok_s": round(sum(r.completion_tokens for r in good) / duration_s, 2) if duration_s else None,
        "replicas_min": min(desired) if desired else None,
        "replicas_max": max(desired) if desired else None,
        "gpu_hours": round(gpu_hours, 4),
        "gpu_hour_usd": gpu_hour_usd,
        "cost_usd": round(gpu_hours * gpu_hour_usd, 4),
        "cost_per_million_tokens_usd": round(gpu_hours * gpu_hour_usd / delivered * 1e6, 2) if delivered else None,
        "trace": TRACE_CITATION,
    }


def plot(samples: list[Sample], path: Path, ttft_slo_s: float, window: tuple[float, float]) -> Path:
    """Write the three-panel PNG (load and queue; replicas; TTFT p95 vs the SLO) to ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = np.array([s.t_s / 60.0 for s in samples])

    def col(name: str) -> Any:
        return np.array([np.nan if getattr(s, name) is None else getattr(s, name) for s in samples], dtype=float)

    fig, axes = plt.subplots(3, 1, figsize=(10, 9), sharex=True)
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
    ax.set_xlabel(f"wall minutes (one day compressed; {TRACE_CITATION})")
    ax.legend(loc="upper left")
    for ax in axes:
        ax.axvspan(window[0] / 60.0, window[1] / 60.0, color="grey", alpha=0.15)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# ------------------------------------------------------------------------------------ the shell


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def _operator(kubeconfig: Path, prometheus_url: str, log_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    port = _free_port()
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


def _manifest(opens: datetime, closes: datetime) -> dict[str, Any]:
    manifest: dict[str, Any] = yaml.safe_load(SAMPLE.read_text())
    manifest["metadata"] = {"name": NAME, "namespace": NAMESPACE}
    spec = manifest["spec"]
    spec["headroom"]["growthFactor"] = 1.0  # adaptive headroom on: the day has real ramps
    # The trace's prompts (median 1,020 tokens) would fill the e2e sample's 2,432-token KV cache
    # with two requests; the demo keeps the L40S's own cache (tens of thousands of tokens) and lets
    # 8 requests run per replica, so a replica serves about two trace requests a second.
    spec["engine"]["args"] = ["--max-num-seqs", "8"]
    # With the L40S's own cache the KV-cache target is the one derived from the model and the SLO.
    spec["scaling"]["targets"].pop("kvCacheUtilization", None)
    spec["scaling"]["scaleDown"].update({"stabilizationWindowSeconds": 30, "periodSeconds": 10})
    spec["batch"] = {"replicas": 1, "windows": [
        {"start": opens.strftime("%H:%M"), "end": closes.strftime("%H:%M"), "timezone": "UTC"}]}
    return manifest


def _status(stack: Any) -> dict[str, Any]:
    out = _kubectl(stack, "get", "llmdeployment", NAME, "-n", NAMESPACE, "-o", "json")
    return dict(json.loads(out).get("status") or {})


def _gpus(stack: Any, per_replica: int) -> int:
    out = _kubectl(stack, "get", "pods", "-n", NAMESPACE, "-l", f"llmscale.dev/deployment={NAME}", "-o", "json")
    return per_replica * sum(1 for p in json.loads(out)["items"] if not p["metadata"].get("deletionTimestamp"))


def _fmt(v: float | None, fmt: str) -> str:
    return "?" if v is None else format(v, fmt)


async def _batch_worker(router: str, stop: asyncio.Event, rate: float, run: _Run, model: str) -> None:
    """Send batch requests to the batch pool while it has ready engines (503 otherwise: skipped)."""
    url = f"{router}/ns/{NAMESPACE}/pool/{NAME}:batch/v1/completions"
    body = {"model": model, "prompt": [1] * 1024, "max_tokens": 256, "ignore_eos": True}
    tasks: set[asyncio.Task[None]] = set()
    async with aiohttp.ClientSession() as session:
        async def one() -> None:
            start = time.monotonic()
            with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError):
                async with session.post(url, json=body) as resp:
                    payload = await resp.read()
                    if resp.status == 200:
                        tokens = int(json.loads(payload)["usage"]["completion_tokens"])
                        run.batch_results.append(RequestResult(start, 1024, 256, 200, time.monotonic() - start,
                                                               None, tokens))
        while not stop.is_set():
            if len(tasks) < 8:
                task = asyncio.create_task(one())
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), 1.0 / rate)
        for task in list(tasks):
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def _replay_and_watch(stack: Any, trace: Trace, speedup: float, cfg: DemoConfig, spec: dict[str, Any],
                            window_s: tuple[float, float], t0: float, run: _Run) -> ReplayReport:
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
    stop = asyncio.Event()
    console = Console()
    replay_task = asyncio.create_task(replay(trace, url, model, speedup=speedup, deadline_s=deadline,
                                             max_in_flight=256, stream=True))
    batch_task = asyncio.create_task(_batch_worker(stack.router_url, stop, cfg.batch_rps, run, model))

    def table(s: Sample) -> Table:
        tab = Table(title=f"llmscale demo — {TRACE_CITATION}", show_header=True)
        for col in ("wall", "day", "arrivals/s", "queue", "KV", "TTFT p95", "desired", "ready", "headroom", "batch"):
            tab.add_column(col, justify="right")

        f = _fmt
        tab.add_row(f"{s.t_s:5.0f} s", f"{int(s.trace_hour):02d}:{int(s.trace_hour % 1 * 60):02d}",
                    f"{s.arrivals_rps:.2f}", f(s.queue, ".0f"), f(s.kv, ".2f"), f(s.ttft_p95_s, ".2f"),
                    f(s.desired, "d"), f(s.ready, "d"), f(s.headroom, "d"), f(s.batch, "d"))
        return tab

    last_print = -1e9
    live = Live(console=console, auto_refresh=False) if console.is_terminal else None
    with live if live is not None else contextlib.nullcontext():
        while not replay_task.done():
            now = time.time()
            t = time.monotonic() - t0
            snap = await reader.read(profile, target, now)
            try:
                st = await asyncio.to_thread(_status, stack)
                gpus = await asyncio.to_thread(_gpus, stack, per_gpu)
            except DemoError:
                st, gpus = {}, 0
            reps = st.get("replicas", {})
            arrivals = float(np.count_nonzero((offsets > t - 10) & (offsets <= t))) / 10.0
            hour = (cfg.start_hour + t * speedup / 3600.0) % 24.0
            s = Sample(t, hour, arrivals, snap.queue_depth, snap.kv_cache_utilization, snap.ttft_p95_s,
                       reps.get("desired"), reps.get("ready"), reps.get("headroom"), reps.get("batch"),
                       reps.get("batchReady"), gpus)
            run.samples.append(s)
            if live is not None:
                live.update(table(s), refresh=True)
            elif t - last_print >= 10:  # not a terminal (CI, a log file): one line every 10 s
                last_print = t
                print(f"[{t:5.0f} s, day {int(hour):02d}:{int(hour % 1 * 60):02d}] arrivals {arrivals:.1f}/s "
                      f"queue {_fmt(s.queue, '.0f')} KV {_fmt(s.kv, '.2f')} TTFT p95 {_fmt(s.ttft_p95_s, '.2f')} s | "
                      f"desired {_fmt(s.desired, 'd')} ready {_fmt(s.ready, 'd')} headroom {_fmt(s.headroom, 'd')} "
                      f"batch {_fmt(s.batch, 'd')}", flush=True)
            await asyncio.wait({replay_task}, timeout=2.0)
    stop.set()
    await batch_task
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
        _kubectl(stack, "wait", "--for=condition=Established", "--timeout=60s", "crd/llmdeployments.llmscale.dev")
        _kubectl(stack, "apply", "-f", "-", input=yaml.safe_dump({"apiVersion": "v1", "kind": "Namespace",
                                                                    "metadata": {"name": NAMESPACE}}))
        with _operator(stack.kubeconfig, stack.prometheus_url, state / "logs" / "demo-operator.log"):
            # First with a window twelve hours away (the batch pool exists, at 0); the real
            # window is set once the replicas are ready and the replay's start is known.
            far = datetime.now(UTC) + timedelta(hours=12)
            manifest = _manifest(far, far + timedelta(minutes=1))
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
            manifest = _manifest(opens, closes)
            _kubectl(stack, "apply", "--server-side", "--field-manager=llmscale-demo", "-f", "-",
                     input=yaml.safe_dump(manifest))
            print(f"llmscale demo: trough window {opens:%H:%M}–{closes:%H:%M} UTC (the compressed night)", flush=True)
            run = _Run()
            t0 = time.monotonic()
            start_wall = time.time()
            window_s = (opens.timestamp() - start_wall, closes.timestamp() - start_wall)
            report = asyncio.run(_replay_and_watch(stack, trace, speedup, cfg, spec, window_s, t0, run))
            duration = time.monotonic() - t0
        summary = summarize(report.results, run.batch_results, run.samples, duration,
                            float(spec["slo"]["ttftP95Seconds"]), float(spec["slo"]["itlP95Seconds"]),
                            float(spec.get("cost", {}).get("gpuHourUsd", 2.5)), report.sent, report.dropped, report.in_flight)
        out_dir.mkdir(parents=True, exist_ok=True)
        plot(run.samples, out_dir / "demo.png", float(spec["slo"]["ttftP95Seconds"]), window_s)
        (out_dir / "demo-summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        (out_dir / "demo-timeline.json").write_text(json.dumps([asdict(s) for s in run.samples]) + "\n")
        return summary
    finally:
        signal.signal(signal.SIGTERM, previous)
        if os.environ.get("LLMSCALE_DEMO_KEEP") != "1":
            print("llmscale demo: stopping everything", flush=True)
            stack_mod.down(state)
