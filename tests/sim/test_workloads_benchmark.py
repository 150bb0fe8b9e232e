"""``benchmarks/workloads.py`` on its small case (``--quick``), and the rules it reports by: each
baseline at its cheapest setting meeting the SLO, every missed goal said.

The quick run replays two small synthetic traces written here in the two formats the real ones use
(an hour of Azure-format CSV, an hour of Mooncake-format JSONL with shared prefixes), under the real
file names the benchmark looks for, so that the test needs no data from outside the repository.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from benchmarks.workloads import (
    TRACE_FILES,
    WORKLOADS,
    best_setting,
    judge,
    main,
    merge_entry,
    next_setting,
)
from tests.sim.fixture_traces import write_fixture_traces


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """``(traces, out)``: the fixture traces and a ``--quick`` run of every policy on them (made
    once for this module; tests copy ``out`` before changing it)."""
    root = tmp_path_factory.mktemp("quick")
    traces = root / "traces"
    traces.mkdir()
    write_fixture_traces(traces, TRACE_FILES["azure-conv"], TRACE_FILES["mooncake-conv"])
    out = root / "out"
    assert main(["--quick", "--trace-dir", str(traces), "--out", str(out), "--jobs", "2"]) == 0
    return traces, out


@pytest.mark.slow
def test_a_quick_run_writes_a_complete_table_per_workload(
    quick_run: tuple[Path, Path], tmp_path: Path
) -> None:
    out = tmp_path / "out"
    shutil.copytree(quick_run[1], out)
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


@pytest.mark.parametrize("text", [None, "# no generated block here\n"], ids=["missing file", "no block"])
def test_a_readme_it_cannot_write_is_refused_before_any_simulation(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str | None
) -> None:
    readme = tmp_path / "README.md"
    if text is not None:
        readme.write_text(text, encoding="utf-8")
    with pytest.raises(SystemExit) as exc:
        # An empty trace folder: had the README been accepted, the run would stop on the traces instead.
        main(["--readme", str(readme), "--trace-dir", str(tmp_path), "--out", str(tmp_path / "out")])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert f"--readme {readme}" in err and "pass --trace-dir" not in err


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


README_WITH_BLOCK = "# Results\n\n<!-- BEGIN GENERATED: benchmark (benchmarks/workloads.py) -->\nold\n<!-- END GENERATED: benchmark -->\n"


@pytest.mark.slow
def test_update_reruns_only_the_named_policies_saying_so(quick_run: tuple[Path, Path], tmp_path: Path) -> None:
    traces, full = quick_run
    out = tmp_path / "out"
    shutil.copytree(full, out)
    before = json.loads((out / "workloads.json").read_text(encoding="utf-8"))
    readme = tmp_path / "README.md"
    readme.write_text(README_WITH_BLOCK, encoding="utf-8")
    for png in out.glob("*.png"):
        png.unlink()  # the plots are redrawn, from the rerun rows and the kept rows' check runs
    args = ["--quick", "--trace-dir", str(traces), "--update", str(out / "workloads.json"),
            "--policies", "llmscale,oracle", "--jobs", "2", "--readme", str(readme)]
    assert main(args) == 0
    doc = json.loads((out / "workloads.json").read_text(encoding="utf-8"))
    (update,) = doc["run"]["updates"]
    assert update["policies"] == ["llmscale", "oracle"]
    assert update["workloads"] == [w.key for w in WORKLOADS]
    assert update["command"].endswith("--update " + str(out / "workloads.json") + " --policies llmscale,oracle")
    assert update["runs"] == 8 * len(WORKLOADS)  # two rerun, six kept rows checked, per workload
    assert doc["run"]["command"] == before["run"]["command"] and doc["run"]["quick"] is True
    assert doc["run"]["runs"] == sum(len(e["all_runs"]) for e in doc["workloads"])
    for old, new in zip(before["workloads"], doc["workloads"], strict=True):
        assert [r["policy"] for r in new["reported"]] == [r["policy"] for r in old["reported"]]
        assert new["sweeps"] == old["sweeps"] and new["chosen"] == old["chosen"]
        # the same code and seed: the rerun rows reproduce the old ones (timings aside)
        for a, b in zip(old["reported"], new["reported"], strict=True):
            timing = {"cpu_s", "wall_s"}
            assert {k: v for k, v in a.items() if k not in timing} == {k: v for k, v in b.items() if k not in timing}
        assert (out / f"{new['scenario']['workload']}.png").stat().st_size > 10_000
    md = (out / "workloads.md").read_text(encoding="utf-8")
    assert "reran llmscale, oracle on " in md and "reproduced its figures" in md
    assert md.strip() in readme.read_text(encoding="utf-8")
    assert main(["--render", "--out", str(out)]) == 0  # still renders from the JSON alone, identically
    assert (out / "workloads.md").read_text(encoding="utf-8") == md


@pytest.mark.slow
def test_update_writes_nothing_when_a_kept_row_does_not_reproduce(
    quick_run: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    traces, full = quick_run
    out = tmp_path / "out"
    shutil.copytree(full, out)
    path = out / "workloads.json"
    doc = json.loads(path.read_text(encoding="utf-8"))
    # as if static-peak had been run by another simulator
    next(r for r in doc["workloads"][0]["reported"] if r["policy"] == "static-peak")["gpu_hours"] *= 0.9
    path.write_text(json.dumps(doc), encoding="utf-8")
    before = {f.name: f.read_bytes() for f in out.iterdir()}
    args = ["--quick", "--trace-dir", str(traces), "--update", str(path), "--policies", "llmscale",
            "--workloads", doc["workloads"][0]["scenario"]["workload"], "--jobs", "1"]
    assert main(args) == 1
    err = capsys.readouterr().err
    assert "nothing written" in err and "static-peak: gpu_hours" in err
    assert {f.name: f.read_bytes() for f in out.iterdir()} == before


def test_update_refuses_a_run_of_the_other_kind_or_no_policies(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "workloads.json"
    path.write_text(json.dumps({"run": {"quick": False}, "workloads": []}), encoding="utf-8")
    with pytest.raises(SystemExit):
        main(["--update", str(path), "--policies", "llmscale", "--quick"])
    assert "holds a full run: drop --quick" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--update", str(path)])
    assert "--update needs --policies" in capsys.readouterr().err
    path.write_text("{}", encoding="utf-8")
    with pytest.raises(SystemExit):
        main(["--update", str(path), "--policies", "llmscale"])
    assert "not a results JSON" in capsys.readouterr().err


def entry(rows: list[dict[str, Any]], sweeps: dict[str, list[dict[str, Any]]], tag: str) -> dict[str, Any]:
    return {
        "scenario": {"workload": "w", "tag": tag},
        "reported": rows,
        "sweeps": sweeps,
        "chosen": {name: runs[0]["setting"] for name, runs in sweeps.items()},
        "why": {name: tag for name in sweeps},
        "all_runs": [r for r in rows if r["setting"] is None] + [r for runs in sweeps.values() for r in runs],
    }


def _old_and_new_entries() -> tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]:
    """An entry of every policy, and a rerun of llmscale, hpa (swept anew) and oracle."""
    hpa_old = [row("hpa", 700, 0.995, 1000, 14.0), row("hpa", 600, 0.95, 1100, 18.0)]
    old = entry([row("llmscale", 500, 0.93, 900), row("llmscale (kv)", 520, 0.94, 880), row("static-peak", 1000, 1.0, 500),
                 hpa_old[0], row("oracle", 550, 1.0, 1200)], {"hpa": hpa_old}, "old")
    hpa_new = [row("hpa", 650, 0.999, 1050, 12.0)]
    new = entry([row("llmscale", 540, 0.995, 1150), hpa_new[0], row("oracle", 500, 1.0, 1300)], {"hpa": hpa_new}, "new")
    return old, new, hpa_old, hpa_new


def test_merge_replaces_only_the_rerun_policies_rows_sweeps_runs() -> None:
    old, new, hpa_old, _ = _old_and_new_entries()
    merged = merge_entry(old, new, ["llmscale", "oracle"])
    by = {r["policy"]: r for r in merged["reported"]}
    # llmscale's variant row goes with llmscale; the order is the policies' order
    assert list(by) == ["llmscale", "static-peak", "hpa", "oracle"]
    assert by["llmscale"]["gpu_hours"] == 540 and by["oracle"]["gpu_hours"] == 500
    assert by["hpa"]["gpu_hours"] == 700 and merged["sweeps"] == {"hpa": hpa_old}  # kept: not rerun
    assert merged["chosen"] == {"hpa": 14.0} and merged["why"] == {"hpa": "old"}
    assert merged["scenario"]["tag"] == "new"
    # judged again against the new oracle: the kept rows' ratios move with it
    assert by["hpa"]["oracle_ratio"] == pytest.approx(1.4) and "✓ best goodput/GPU-h" in by["llmscale"]["goals"]
    assert sorted((r["policy"], r["gpu_hours"]) for r in merged["all_runs"]) == [
        ("hpa", 600), ("hpa", 700), ("llmscale", 540), ("oracle", 500), ("static-peak", 1000)]
    assert "oracle_ratio" not in old["reported"][0]  # the inputs are left alone


def test_a_rerun_tunable_baseline_brings_its_whole_sweep() -> None:
    old, new, _, hpa_new = _old_and_new_entries()
    merged = merge_entry(old, new, ["hpa"])
    assert merged["sweeps"] == {"hpa": hpa_new} and merged["chosen"] == {"hpa": 12.0}
    assert [r["policy"] for r in merged["reported"]] == ["llmscale", "llmscale (kv)", "static-peak", "hpa", "oracle"]
