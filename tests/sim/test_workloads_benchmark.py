"""``benchmarks/workloads.py`` on its small case (``--quick``), and the rules it reports by: each
baseline at its cheapest setting meeting the SLO, every missed goal said.

The quick run replays two small synthetic traces written here in the two formats the real ones use
(an hour of Azure-format CSV, an hour of Mooncake-format JSONL with shared prefixes), under the real
file names the benchmark looks for, so that the test needs no data from outside the repository.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from benchmarks.workloads import TRACE_FILES, WORKLOADS, best_setting, judge, main, next_setting
from tests.sim.fixture_traces import write_fixture_traces


@pytest.mark.slow
def test_quick_run_writes_a_table_per_workload_with_the_chosen_settings_and_goals(tmp_path: Path) -> None:
    traces = tmp_path / "traces"
    traces.mkdir()
    write_fixture_traces(traces, TRACE_FILES["azure-conv"], TRACE_FILES["mooncake-conv"])
    out = tmp_path / "out"
    assert main(["--quick", "--trace-dir", str(traces), "--out", str(out), "--jobs", "2"]) == 0
    md = (out / "workloads.md").read_text(encoding="utf-8")
    doc = json.loads((out / "workloads.json").read_text(encoding="utf-8"))
    assert [e["scenario"]["workload"] for e in doc["workloads"]] == [w.key for w in WORKLOADS]
    for entry in doc["workloads"]:
        policies = [r["policy"] for r in entry["reported"]]
        assert policies == ["llmscale", "static-peak", "hpa", "keda-queue", "keda-llmd", "kpa", "aibrix-kv", "oracle"]
        for r in entry["reported"]:
            assert r["goals"], r["policy"]
            assert r["oracle_ratio"] is not None and r["static_ratio"] is not None
        # a tunable baseline is reported at one of its swept settings, and the sweep is kept
        for name, runs in entry["sweeps"].items():
            assert len(runs) >= 2
            assert entry["chosen"][name] in [r["setting"] for r in runs]
        assert (out / f"{entry['scenario']['workload']}.png").stat().st_size > 10_000
        assert entry["scenario"]["requests_total"] > 0
    assert md.count("| policy | setting | GPU-h | minutes meeting SLO | TTFT p95") == len(WORKLOADS)
    assert "Reproduce: `.venv/bin/python benchmarks/workloads.py --quick`" in md
    assert doc["run"]["wall_s"] > 0 and doc["run"]["runs"] == sum(len(e["all_runs"]) for e in doc["workloads"])
    # the tables can be redrawn from the JSON alone, identically
    (out / "workloads.md").unlink()
    assert main(["--render", "--out", str(out)]) == 0
    assert (out / "workloads.md").read_text(encoding="utf-8") == md


def test_quick_refuses_to_overwrite_the_checked_in_results(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--quick"])
    assert "--quick needs --out" in capsys.readouterr().err


def test_a_missing_trace_folder_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--trace-dir", str(tmp_path), "--out", str(tmp_path / "out"), "--workloads", "azure-day"])
    assert "pass --trace-dir" in capsys.readouterr().err


def row(policy: str, gpu_h: float, minutes: float, goodput: float, setting: float | None = None) -> dict[str, Any]:
    return {"policy": policy, "gpu_hours": gpu_h, "minutes_meeting_slo_fraction": minutes,
            "goodput_tokens_per_gpu_hour": goodput, "setting": setting}


def test_a_baseline_is_reported_at_its_cheapest_passing_setting_else_its_best_attainment() -> None:
    runs = [row("hpa", 900, 1.0, 1, 10.0), row("hpa", 700, 0.995, 1, 14.0), row("hpa", 600, 0.97, 1, 18.0)]
    best, note = best_setting(runs)
    assert best["setting"] == 14.0 and "cheapest of 3" in note
    failing = [row("kpa", 900, 0.95, 1, 1.0), row("kpa", 500, 0.95, 1, 2.0), row("kpa", 400, 0.90, 1, 3.0)]
    best, note = best_setting(failing)
    assert best["setting"] == 2.0 and "none of 3" in note  # same attainment: the cheaper
    edge, note = best_setting([row("hpa", 900, 1.0, 1, 10.0), row("hpa", 800, 1.0, 1, 12.0)])
    assert edge["setting"] == 12.0 and "largest" in note


def test_goals_say_which_are_missed() -> None:
    rows = [
        row("llmscale", 1150, 0.93, 900),
        row("static-peak", 2000, 1.0, 500),
        row("hpa", 1050, 0.995, 1000, 14.0),
        row("oracle", 1000, 1.0, 1100),
    ]
    judge(rows)
    by = {r["policy"]: r["goals"] for r in rows}
    assert "✗ SLO 93.0% < 99 %" in by["llmscale"] and "✗ 1.15× oracle > 1.10×" in by["llmscale"]
    assert "✓ 0.57× static" in by["llmscale"]  # the oracle reaches 0.50×, so the goal applies
    assert "✗ goodput/GPU-h below hpa" in by["llmscale"]
    assert "✓ SLO" in by["hpa"] and "✓ 1.05× oracle" in by["hpa"] and "✓ best goodput/GPU-h" in by["hpa"]
    assert by["oracle"].startswith("lower bound")
    flat = [row("llmscale", 990, 1.0, 900), row("static-peak", 1000, 1.0, 800), row("oracle", 900, 1.0, 1000)]
    judge(flat)
    assert "n/a: oracle 0.90×" in flat[0]["goals"]  # a flat load leaves nothing to save


@pytest.mark.parametrize(
    ("runs", "expected"),
    [
        # the cheapest passing setting is the largest tried: try one step larger
        pytest.param([row("hpa", 900, 1.0, 1, 10.0), row("hpa", 800, 0.995, 1, 12.0)], 15.0, id="extend-up"),
        # nothing passes and the most replicas (smallest setting) did best: try one step smaller
        pytest.param([row("kpa", 900, 0.98, 1, 10.0), row("kpa", 800, 0.95, 1, 12.0)], 8.0, id="extend-down"),
        # the boundary is inside the grid: done
        pytest.param([row("hpa", 900, 1.0, 1, 10.0), row("hpa", 800, 0.9, 1, 12.0)], None, id="inside"),
        pytest.param([row("kpa", 900, 0.90, 1, 10.0), row("kpa", 800, 0.95, 1, 12.0)], None, id="best-inside"),
    ],
)
def test_a_sweep_is_extended_past_the_edge_its_best_setting_sits_on(
    runs: list[dict[str, Any]], expected: float | None
) -> None:
    assert next_setting(runs, grid_size=2) == expected
    assert next_setting(runs, grid_size=0) is None  # no more than two settings beyond the grid
