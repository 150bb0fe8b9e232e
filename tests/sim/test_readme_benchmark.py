"""The README's performance table is the one the benchmark script last wrote."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_readme_quotes_the_checked_in_benchmark_table() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(
        r"<!-- BEGIN GENERATED: benchmark[^>]*-->\n(.*?)<!-- END GENERATED: benchmark -->", readme, re.DOTALL
    )
    assert block, "README.md has no generated benchmark block"
    table = (ROOT / "benchmarks" / "results" / "goodput.md").read_text(encoding="utf-8").strip()
    assert block.group(1).strip() == table, "Rerun `.venv/bin/python benchmarks/goodput.py`"
