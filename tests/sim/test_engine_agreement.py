"""One SLO definition everywhere: the simulator's TTFT and per-token ITL percentiles are the ones the
mock engine exports over real HTTP, read the way the operator reads them.

A short seeded trace is replayed open-loop (``llmscale.loadgen.replay``) against a real
``llmscale engine`` process at ``--time-scale 3`` (stopped by its PID), and through the simulator
with one replica of the same model; both sides' ``vllm:time_to_first_token_seconds`` and
``vllm:inter_token_latency_seconds`` histograms (vLLM's buckets) go through the same
``histogram_quantile``. The load (2.5 requests/s of 500–6,000-token prompts on one 70B replica)
puts the ITL p95 among the gaps that prefill chunks stretch, where a minute's SLO is decided.

Tolerances: the observation counts must agree exactly; the p50/p95 of TTFT and ITL within 15 %, and
the share of gaps over a 100 ms target within 1.5 percentage points. The simulator and the engine's
scheduler agree bucket for bucket when run in-process (``test_replica.py``); over HTTP the engine
sees each arrival a little late (the client, the event loop and a shared 2-core machine, all
multiplied by the time scale), which is what the margins absorb (measured: p95 within 5 %).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families
from tests.engine.conftest import run_engine

from llmscale.loadgen import replay
from llmscale.model import GPU_PRESETS, MODEL_PRESETS, ReplicaModel
from llmscale.model.vllm_defaults import ITL_BUCKETS_S, TTFT_BUCKETS_S, vllm_batch_defaults
from llmscale.sim.baselines import StaticReplicas
from llmscale.sim.fleet import FleetConfig, simulate
from llmscale.sim.latency import histogram_quantile
from llmscale.sim.replica import EngineConfig
from llmscale.sim.trace import Trace

MODEL, GPU, GPUS, CONTEXT = "llama-3.1-70b", "h100-sxm", 4, 8192
SCALE = 3.0
RM = ReplicaModel(arch=MODEL_PRESETS[MODEL], gpu=GPU_PRESETS[GPU], gpus=GPUS)
pytestmark = [pytest.mark.slow, pytest.mark.timing]


def _trace(seconds: float = 90.0, rate: float = 2.5, seed: int = 7) -> Trace:
    """Poisson arrivals, prompts 200–3,000 tokens (some prefill steps stall the decodes), outputs
    20–300 tokens."""
    rng = np.random.default_rng(seed)
    n = int(rng.poisson(rate * seconds))
    t = 1000.0 + np.sort(rng.uniform(0.0, seconds, n))
    return Trace(
        t, rng.integers(500, 6000, n), rng.integers(10, 150, n), np.zeros(n, bool), 1000.0, seconds, "poisson"
    )


def _engine_histograms(text: str) -> tuple[np.ndarray, np.ndarray]:
    """Per-bucket (not cumulative) counts of the TTFT and ITL histograms in an exposition."""
    cum: dict[str, dict[float, float]] = {"ttft": {}, "itl": {}}
    names = {
        "vllm:time_to_first_token_seconds_bucket": "ttft",
        "vllm:inter_token_latency_seconds_bucket": "itl",
    }
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name in names:
                cum[names[s.name]][float(s.labels["le"])] = s.value
    out = []
    for kind, bounds in (("ttft", TTFT_BUCKETS_S), ("itl", ITL_BUCKETS_S)):
        c = np.array([cum[kind][b] for b in (*bounds, float("inf"))])
        out.append(np.diff(c, prepend=0.0))
    return out[0], out[1]


def _simulated_histograms(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    seqs, tokens = vllm_batch_defaults(GPU_PRESETS[GPU])  # what the engine runs with by default
    res = simulate(
        trace,
        StaticReplicas(1),
        RM,
        engine=EngineConfig(max_num_seqs=seqs, max_num_batched_tokens=tokens),
        fleet=FleetConfig(cold_start_s=0.0, initial_replicas=1, min_replicas=1, max_replicas=1),
        context_limit_tokens=CONTEXT,
        itl_slo_s=0.1,
    )
    assert res.latency is not None
    assert np.all(np.asarray(res.requests.finish) > 0)
    # The drain after the trace's end is not scored in a run; here every request counts, so the
    # trace is long enough that the recorder's window covers them (checked by the counts below).
    return res.latency.counts("ttft").sum(axis=0), res.latency.counts("itl").sum(axis=0)


def test_the_simulator_agrees_with_the_mock_engine_on_the_latency_percentiles(tmp_path: Path) -> None:
    trace = _trace()
    # The recorder scores [start, end); stretch the interval so the drain is inside it.
    long = Trace(trace.arrival_s, trace.prompt_tokens, trace.output_tokens, trace.is_batch, trace.start_s,
                 trace.duration_s + 120.0, trace.source)
    sim_ttft, sim_itl = _simulated_histograms(long)
    with run_engine(tmp_path, "--model", MODEL, "--gpu", GPU, "--gpus", str(GPUS), "--max-model-len", str(CONTEXT),
                    "--time-scale", str(SCALE)) as engine:
        report = asyncio.run(replay(trace, engine.v1 + "/completions", MODEL, speedup=SCALE, deadline_s=300.0))
        assert report.sent == len(trace) and report.errors == 0 and report.dropped == 0
        _, body, _ = engine.get("/metrics")
    eng_ttft, eng_itl = _engine_histograms(body.decode())
    n = len(trace)
    # Every request gives one TTFT sample, every later token one ITL sample — on both sides.
    assert sim_ttft.sum() == eng_ttft.sum() == n
    assert sim_itl.sum() == eng_itl.sum() == int((trace.output_tokens - 1).sum())
    for q in (0.5, 0.95):
        s_t = float(histogram_quantile(q, TTFT_BUCKETS_S, sim_ttft))
        e_t = float(histogram_quantile(q, TTFT_BUCKETS_S, eng_ttft))
        s_i = float(histogram_quantile(q, ITL_BUCKETS_S, sim_itl))
        e_i = float(histogram_quantile(q, ITL_BUCKETS_S, eng_itl))
        assert s_t == pytest.approx(e_t, rel=0.15), (q, "ttft", s_t, e_t)
        assert s_i == pytest.approx(e_i, rel=0.15), (q, "itl", s_i, e_i)
    # The share of gaps over a 100 ms ITL target (a bucket boundary of vLLM's): what decides a minute.
    k = ITL_BUCKETS_S.index(0.1) + 1
    assert sim_itl[k:].sum() / sim_itl.sum() == pytest.approx(eng_itl[k:].sum() / eng_itl.sum(), abs=0.015)
    # The load is not trivial: prefill steps stretch the p95 gap far past a pure decode step.
    assert float(histogram_quantile(0.95, ITL_BUCKETS_S, eng_itl)) > 3 * RM.decode_step_time(16, 3000)
