"""``llmscale simulate`` end to end through the real CLI entry point."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmscale.cli import main
from llmscale.data import trace_path
from llmscale.sim.baselines import POLICY_NAMES

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "benchmarks" / "chat-llama-70b-h100.yaml"
REAL = trace_path("azure-llm-2023-conv")

#: Keys the issue requires of every policy's JSON, plus the ones the README documents.
REQUIRED = {
    "policy", "gpu_hours", "requests", "slo_attainment", "minutes_meeting_slo_fraction",
    "ttft_p50_s", "ttft_p95_s", "ttft_p99_s", "itl_p50_s", "itl_p95_s", "itl_p99_s",
    "goodput_tokens", "goodput_tokens_per_gpu_hour", "usd_per_million_tokens", "mean_replicas",
    "peak_replicas", "scale_events", "preemptions", "warmup_s",
}


def test_json_output_has_every_documented_key_for_every_policy(capsys: pytest.CaptureFixture[str]) -> None:
    # No --trace: the packaged Azure trace is the default.
    rc = main(["simulate", "--spec", str(SPEC), "--duration", "12m", "--warmup", "2m",
               "--capacity-rps", "5", "--output", "json", "--quiet"])
    assert rc == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["scenario"]["trace"].startswith("azure-llm-2023-conv.csv")
    assert [r["policy"] for r in doc["results"]] == list(POLICY_NAMES)
    for r in doc["results"]:
        assert set(r) >= REQUIRED, REQUIRED - set(r)
        assert r["warmup_s"] == 120.0
        assert r["completed_requests"] == r["requests"] > 0
    assert "Splitwise" in doc["scenario"]["trace_citation"]
    documented = (ROOT / "README.md").read_text()
    for key in list(doc["results"][0]) + list(doc["scenario"]):
        assert f"`{key}`" in documented, f"{key} is not documented in the README"


def test_table_output_and_plot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    png = tmp_path / "day.png"
    rc = main(["simulate", "--spec", str(SPEC), "--trace", "azure-llm-2023-conv", "--shape", "diurnal", "--duration", "20m",
               "--peak-rps", "8", "--policy", "oracle", "--capacity-rps", "5", "--plot", str(png), "--quiet"])
    assert rc == 0
    out = capsys.readouterr().out
    assert "oracle" in out and "Splitwise" in out
    assert png.stat().st_size > 10_000
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        pytest.param(["--trace", "/nonexistent.csv"], "trace", id="missing-trace"),
        pytest.param(["--warmup", "2h", "--duration", "1h"], "warm-up", id="warmup-too-long"),
    ],
)
def test_bad_input_exits_2_with_a_reason(extra: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["simulate", "--spec", str(SPEC), "--trace", str(REAL), "--quiet", *extra]
    assert main(args) == 2
    assert message in capsys.readouterr().err
