"""The live calibration against the engine it measures (``benchmarks/livefit_accuracy.py``) on a
small case: the simulator's engine equal to the model, and one with half its compute, read within
5 % at batch 1 and in prefill. Before a window's mean ITL was read as the mixture of its decode and
chunk steps, the second read its batch-1 decode 0.80 of the model's (truth 1.00)."""

from __future__ import annotations

import math

import pytest
import yaml
from tests.benchscripts import load_benchmark

from llmscale.api import LLMDeployment
from llmscale.data import trace_path
from llmscale.sim.trace import load_azure_csv


@pytest.mark.parametrize("key", ["model", "compute-x0.5", "bandwidth-x0.5"])
def test_the_live_fit_reads_the_engine_it_measures(key: str) -> None:
    bench = load_benchmark("livefit_accuracy")
    spec = LLMDeployment.model_validate(yaml.safe_load(bench.SPEC_FILE.read_text(encoding="utf-8"))).spec
    case = {c.key: c for c in bench.CASES}[key]
    row = bench.measure(case, spec, load_azure_csv(trace_path("azure-llm-2023-conv")), 3, [4.0, 8.0, 12.0], 8)
    assert row["used"] == 1.0
    for figure in ("itl1", "prefill"):
        assert row[f"fit_{figure}"] == pytest.approx(row[f"truth_{figure}"], rel=0.05), (figure, row)
    assert max(bench.errors(row)) < math.log(1.25), row


def test_the_benchmark_script_runs_on_a_small_case(capsys: pytest.CaptureFixture[str]) -> None:
    bench = load_benchmark("livefit_accuracy")
    assert bench.main(["--cases", "model,overhead-5ms", "--minutes", "5", "--rates", "4,10"]) == 0
    out = capsys.readouterr().out
    assert "| model | ×" in out and "| overhead-5ms | ×" in out and "figures within 10 %" in out
    assert bench.main(["--cases", "nope"]) == 2
    assert bench.main(["--rates", "0"]) == 2
