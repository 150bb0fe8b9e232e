"""docs/benchmarks.md's performance tables are the ones the workloads benchmark last wrote, the
README's headline table is their summary as benchmarks/workloads.py draws it, and the plots exist."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from tests.benchscripts import load_benchmark

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
DOCS = ROOT / "docs" / "benchmarks.md"


def _block(text: str, name: str) -> str:
    block = re.search(rf"<!-- BEGIN GENERATED: {name}[^>]*-->\n(.*?)<!-- END GENERATED: {name} -->", text, re.DOTALL)
    assert block, f"no generated {name} block"
    return block.group(1).strip()


def test_docs_quote_the_checked_in_benchmark_tables() -> None:
    table = (RESULTS / "workloads.md").read_text(encoding="utf-8").strip()
    assert _block(DOCS.read_text(encoding="utf-8"), "benchmark") == table, (
        "Rerun `.venv/bin/python benchmarks/workloads.py --render`"
    )


def test_readme_headline_is_drawn_from_the_checked_in_results() -> None:
    workloads = load_benchmark("workloads")
    doc = json.loads((RESULTS / "workloads.json").read_text(encoding="utf-8"))
    headline = workloads.headline_markdown(doc).strip()
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert _block(readme, "headline") == headline, "Rerun `.venv/bin/python benchmarks/workloads.py --render`"
    # One row per workload, and the command that redraws it is the one the README names.
    assert len(headline.splitlines()) == 2 + len(doc["workloads"])
    assert "`.venv/bin/python benchmarks/workloads.py --render`" in readme


def _checked_in_results() -> dict[str, Any]:
    return json.loads((RESULTS / "workloads.json").read_text(encoding="utf-8"))  # type: ignore[no-any-return]


def test_the_checked_in_results_are_a_full_run() -> None:
    assert _checked_in_results()["run"]["quick"] is False


def test_every_checked_in_workload_has_its_plot_shown_in_the_readme_with_the_docs() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    docs = DOCS.read_text(encoding="utf-8")
    for entry in _checked_in_results()["workloads"]:
        key = entry["scenario"]["workload"]
        assert (RESULTS / f"{key}.png").exists()
        assert f"benchmarks/results/{key}.png" in readme
        assert f"../benchmarks/results/{key}.png" in docs


def test_docs_quote_the_checked_in_batch_day_table() -> None:
    table = (RESULTS / "batch-day.md").read_text(encoding="utf-8").strip()
    assert _block(DOCS.read_text(encoding="utf-8"), "batch-day") == table, (
        "Rerun `.venv/bin/python benchmarks/batch_day.py`"
    )
