"""The capacity search (``llmscale.sim.calibrate``) gives a probe up once its final minutes already
miss the target: a probe given up fails as the whole probe does, one that is not is the same run,
and the search finds the same capacity either way. Specs whose probes fail on ITL (a chat 8B) and
on TTFT (long prompts); the real Azure trace's sizes (Azure LLM inference trace 2023, CC-BY 4.0;
Patel et al., Splitwise, ISCA 2024)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from tests.benchscripts import load_benchmark
from tests.sim.scripted import MODEL, Script, uniform_trace

from llmscale.api import LLMDeployment, LLMDeploymentSpec, SloSpec
from llmscale.data import trace_path
from llmscale.model.roofline import ReplicaModel
from llmscale.sim.calibrate import Capacity, _misses, _run, calibrate
from llmscale.sim.engine_args import engine_config
from llmscale.sim.fleet import simulate
from llmscale.sim.report import minute_scores
from llmscale.sim.trace import Trace, load_azure_csv

ROOT = Path(__file__).resolve().parents[2]
SPECS = ["chat-llama-8b-h100.yaml", "long-context-llama-8b-h100.yaml"]
DURATION_S, WARMUP_S = 900.0, 180.0
Searched = tuple[LLMDeploymentSpec, dict[str, Any], Capacity]


def _spec(name: str) -> LLMDeploymentSpec:
    return LLMDeployment.model_validate(yaml.safe_load((ROOT / "benchmarks" / name).read_text())).spec


@pytest.fixture(scope="module")
def base() -> Trace:
    return load_azure_csv(trace_path("azure-llm-2023-conv"))


@pytest.fixture(scope="module", params=SPECS)
def searched(request: pytest.FixtureRequest, base: Trace) -> tuple[LLMDeploymentSpec, dict[str, Any], Capacity]:
    """A spec, the search's arguments, and the capacity it finds giving probes up."""
    spec = _spec(request.param)
    kw = {"engine": engine_config(spec), "context_limit_tokens": spec.model.context_limit_tokens,
          "replicas": 2, "duration_s": DURATION_S, "warmup_s": WARMUP_S, "iterations": 5}
    return spec, kw, calibrate(base, ReplicaModel.from_spec(spec), spec.slo, give_up_early=True, **kw)


def test_the_search_finds_the_same_capacity_giving_probes_up(base: Trace, searched: Searched) -> None:
    spec, kw, found = searched
    assert found == calibrate(base, ReplicaModel.from_spec(spec), spec.slo, give_up_early=False, **kw)


@pytest.mark.parametrize("load", [0.6, 0.95, 1.05, 1.3, 3.0])
def test_a_probe_given_up_fails_as_the_whole_probe_does(base: Trace, searched: Searched, load: float) -> None:
    # ``load``: a multiple of the rate the search found, so that some probes pass, some fail late
    # on one minute, some at once.
    spec, kw, found = searched
    args = (base, ReplicaModel.from_spec(spec), kw["engine"], spec.slo, found.rate_rps * load, 2, DURATION_S,
            WARMUP_S, 0, kw["context_limit_tokens"])
    whole_frac, whole = _run(*args)
    frac, cap = _run(*args, fail_below=0.99)
    if cap is None:
        assert whole_frac <= frac < 0.99, "given up: the whole probe misses the target too"
    else:
        assert (frac, cap) == (whole_frac, whole), "not given up: the same run"
    if load >= 1.3:
        assert cap is None, "well past the capacity found, the probe is given up"


def test_the_benchmark_script_runs_on_a_small_case(capsys: pytest.CaptureFixture[str]) -> None:
    bench = load_benchmark("calibration_search")
    assert bench.main(["--specs", "chat-llama-8b-h100.yaml", "--sizes", "1", "--duration", "600"]) == 0
    rows = capsys.readouterr().out.splitlines()
    assert rows[1].startswith("chat-llama-8b-h100.yaml") and rows[1].endswith("yes"), rows
    assert rows[-1].startswith("all")


@pytest.mark.parametrize(("rate", "plan"), [
    (6.0, [(0, 2)]),  # every minute meets the SLO
    (12.0, [(0, 1), (240, 3)]),  # the first minutes miss, the later ones meet it
    (30.0, [(0, 2), (300, 6)]),  # every minute misses, one of them only as stalled
])
def test_a_finished_run_is_judged_as_minute_scores_judges_it(rate: float, plan: list[tuple[float, int]]) -> None:
    # 630 s with a 90-s warm-up: a last partial minute, and a warm-up that ends inside a minute.
    slo = SloSpec(ttftP95Seconds=1.0, itlP95Seconds=0.05)
    res = simulate(uniform_trace(rate, 630.0, seed=2), Script(plan), MODEL, context_limit_tokens=8192, itl_slo_s=0.05)
    meets, ttft, itl, _ = minute_scores(res, slo, 90.0)
    judge = _misses(slo, 90.0, 0.99)
    assert res.latency is not None
    judge(res.latency, res.end_s)
    ended = int((res.end_s - res.start_s) // 60.0) - 2  # judged: the minutes after the warm-up that ended
    assert judge.missed == int(np.count_nonzero((ttft[:ended] > 1.0) | (itl[:ended] > 0.05)))
    assert judge.bound >= meets.mean(), "stalled minutes only miss more"
    assert judge.bound == pytest.approx(1.0 - judge.missed / len(meets))
