"""``llmscale simulate`` end to end through the real CLI entry point."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from llmscale.cli import main
from llmscale.data import trace_path
from llmscale.sim.baselines import POLICY_NAMES

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "benchmarks" / "chat-llama-70b-h100.yaml"
REAL = trace_path("azure-llm-2023-conv")

#: Keys the issue requires of every policy's JSON, plus the ones docs/cli.md documents.
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
    documented = (ROOT / "docs" / "cli.md").read_text()
    for key in list(doc["results"][0]) + list(doc["scenario"]):
        assert f"`{key}`" in documented, f"{key} is not documented in docs/cli.md"


def _simulate_with_a_plot(tmp_path: Path) -> Path:
    png = tmp_path / "day.png"
    rc = main(["simulate", "--spec", str(SPEC), "--trace", "azure-llm-2023-conv", "--shape", "diurnal", "--duration", "20m",
               "--peak-rps", "8", "--policy", "oracle", "--capacity-rps", "5", "--plot", str(png), "--quiet"])
    assert rc == 0
    return png


def test_the_table_output_names_the_policy_crediting_the_trace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _simulate_with_a_plot(tmp_path)
    out = capsys.readouterr().out
    assert "oracle" in out and "Splitwise" in out


def test_the_plot_is_a_png(tmp_path: Path) -> None:
    png = _simulate_with_a_plot(tmp_path)
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


# --------------------------------------------------------------------------- on small fixture traces


def _simulated_mooncake_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    from tests.sim.fixture_traces import write_fixture_traces

    _, moon = write_fixture_traces(tmp_path, "own.csv", "own.jsonl")
    spec = ROOT / "benchmarks" / "long-context-llama-70b-h100x8.yaml"
    rc = main(["simulate", "--spec", str(spec), "--trace", str(moon), "--duration", "15m", "--warmup", "3m",
               "--capacity-rps", "1", "--policy", "oracle", "--output", "json", "--quiet"])
    assert rc == 0
    doc = json.loads(capsys.readouterr().out)
    return doc  # type: ignore[no-any-return]


def test_a_mooncake_trace_is_replayed_with_prefix_caching(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = _simulated_mooncake_file(tmp_path, capsys)
    sc = doc["scenario"]
    assert sc["prefix_caching"] is True and sc["max_num_batched_tokens"] == 2048  # from spec.engine.args
    (r,) = doc["results"]
    assert r["prefix_cache_hit_fraction"] > 0.05 and r["requests"] > 0


def test_a_mooncake_file_it_does_not_know_credits_no_dataset(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sc = _simulated_mooncake_file(tmp_path, capsys)["scenario"]
    assert "not a known public trace" in sc["trace_citation"]


def test_the_step_budget_flag_overrides_the_spec(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tests.sim.fixture_traces import write_fixture_traces

    azure, _ = write_fixture_traces(tmp_path, "own.csv", "own.jsonl")
    rc = main(["simulate", "--spec", str(SPEC), "--trace", str(azure), "--duration", "10m", "--warmup", "2m",
               "--capacity-rps", "5", "--policy", "oracle", "--max-num-batched-tokens", "2048", "--output", "json",
               "--quiet"])
    assert rc == 0
    sc = json.loads(capsys.readouterr().out)["scenario"]
    assert (sc["max_num_seqs"], sc["max_num_batched_tokens"], sc["prefix_caching"]) == (1024, 2048, False)


def test_bad_engine_args_in_the_spec_exit_2_naming_the_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import yaml
    from tests.sim.fixture_traces import write_fixture_traces

    azure, _ = write_fixture_traces(tmp_path, "own.csv", "own.jsonl")
    doc = yaml.safe_load(SPEC.read_text())
    doc["spec"]["engine"]["args"] = ["--max-num-batched-tokens", "lots"]
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(doc))
    assert main(["simulate", "--spec", str(bad), "--trace", str(azure), "--quiet"]) == 2
    assert "spec.engine.args" in capsys.readouterr().err
