"""The README's performance tables are the ones the workloads benchmark last wrote, and its plots
exist."""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"


def test_readme_quotes_the_checked_in_benchmark_tables() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(
        r"<!-- BEGIN GENERATED: benchmark[^>]*-->\n(.*?)<!-- END GENERATED: benchmark -->", readme, re.DOTALL
    )
    assert block, "README.md has no generated benchmark block"
    table = (RESULTS / "workloads.md").read_text(encoding="utf-8").strip()
    assert block.group(1).strip() == table, "Rerun `.venv/bin/python benchmarks/workloads.py`"


def test_the_checked_in_results_are_a_full_run_with_every_workload_and_plot() -> None:
    doc = json.loads((RESULTS / "workloads.json").read_text(encoding="utf-8"))
    assert doc["run"]["quick"] is False
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for entry in doc["workloads"]:
        key = entry["scenario"]["workload"]
        assert (RESULTS / f"{key}.png").exists()
        assert f"benchmarks/results/{key}.png" in readme


def test_readme_quotes_the_checked_in_batch_day_table() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(
        r"<!-- BEGIN GENERATED: batch-day[^>]*-->\n(.*?)<!-- END GENERATED: batch-day -->", readme, re.DOTALL
    )
    assert block, "README.md has no generated batch-day block"
    table = (ROOT / "benchmarks" / "results" / "batch-day.md").read_text(encoding="utf-8").strip()
    assert block.group(1).strip() == table, "Rerun `.venv/bin/python benchmarks/batch_day.py`"
