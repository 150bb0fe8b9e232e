"""docs/api.md carries the reference tables generated from the models, and they are current; the
README, which holds another tool's generated block, is left alone by the refresh."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from llmscale.cli import main as cli_main
from llmscale.crd import (
    EMBEDDED_FIELDS,
    openapi_schema,
    replace_block,
    replace_generated_blocks,
    spec_reference_markdown,
    status_reference_markdown,
)

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "api.md"


def _block(text: str, name: str) -> str:
    match = re.search(
        rf"<!-- BEGIN GENERATED: {name}[^>]*-->\n(.*?)<!-- END GENERATED: {name} -->", text, re.DOTALL
    )
    assert match, f"no {name} block"
    return match.group(1)


@pytest.mark.parametrize(
    ("name", "generate"),
    [
        pytest.param("spec-reference", spec_reference_markdown, id="spec"),
        pytest.param("status-reference", status_reference_markdown, id="status"),
    ],
)
def test_docs_tables_equal_the_generated_ones(name: str, generate: Any) -> None:
    assert _block(DOC.read_text(encoding="utf-8"), name) == generate(), (
        "Regenerate with `llmscale crd --update-docs docs/api.md`"
    )


def _leaf_paths(node: dict[str, Any], path: str) -> list[str]:
    out = [path]
    if path in EMBEDDED_FIELDS:
        return out  # an embedded Kubernetes schema is one row
    child = node["items"] if node["type"] == "array" and node["items"]["type"] == "object" else node
    prefix = f"{path}[]" if child is not node else path
    for name, sub in child.get("properties", {}).items():
        out.extend(_leaf_paths(sub, f"{prefix}.{name}"))
    return out


def test_spec_table_has_one_row_per_field() -> None:
    spec = openapi_schema()["properties"]["spec"]
    expected = [p for name, sub in spec["properties"].items() for p in _leaf_paths(sub, f"spec.{name}")]
    rows = [line.split("|")[1].strip().strip("`") for line in spec_reference_markdown().splitlines()[2:]]
    assert rows == expected
    assert "spec.scaling.scaleDown.stabilizationWindowSeconds" in rows


def test_the_table_shows_each_fields_default_bounds_rules() -> None:
    table = spec_reference_markdown()
    row = next(
        line
        for line in table.splitlines()
        if line.startswith("| `spec.scaling.scaleDown.stabilizationWindowSeconds`")
    )
    assert "`300`" in row and "≥ 0" in row
    replicas = next(line for line in table.splitlines() if line.startswith("| `spec.replicas` "))
    assert "self.min <= self.max" in replicas
    timezone = next(line for line in table.splitlines() if "windows[].timezone" in line)
    assert "598" in timezone or "values" in timezone


def test_a_pipe_inside_a_cell_is_escaped() -> None:
    # A pipe inside a cell (the HH:MM regex) is escaped so the table keeps five columns.
    start = next(line for line in spec_reference_markdown().splitlines() if "windows[].start" in line)
    assert len(re.split(r"(?<!\\)\|", start)) == 7


def test_replace_generated_blocks_touches_only_the_blocks() -> None:
    text = (
        "# Title\nbefore\n"
        "<!-- BEGIN GENERATED: spec-reference -->\nOLD TABLE ROW\n<!-- END GENERATED: spec-reference -->\n"
        "after\n"
    )
    new = replace_generated_blocks(text)
    assert new.startswith("# Title\nbefore\n<!-- BEGIN GENERATED: spec-reference -->\n| Field |")
    assert new.endswith("<!-- END GENERATED: spec-reference -->\nafter\n")
    assert "OLD TABLE ROW" not in new
    assert replace_generated_blocks(new) == new


def test_the_docs_update_as_they_say() -> None:
    # `llmscale crd --update-docs docs/api.md` (what docs/api.md and docs/development.md say) refreshes
    # the reference tables; the README's headline block belongs to benchmarks/workloads.py and stays.
    assert replace_generated_blocks(DOC.read_text(encoding="utf-8")) == DOC.read_text(encoding="utf-8")
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert replace_generated_blocks(readme) == readme
    bench = (REPO / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    assert _block(replace_generated_blocks(bench), "benchmark") == _block(bench, "benchmark")


def test_unknown_block_name_is_an_error() -> None:
    with pytest.raises(KeyError):
        replace_generated_blocks("<!-- BEGIN GENERATED: nonsense -->\n<!-- END GENERATED: nonsense -->")


TWO_BLOCKS = (
    "a\n<!-- BEGIN GENERATED: batch-day (benchmarks/batch_day.py) -->\nold\n<!-- END GENERATED: batch-day -->\n"
    "b\n<!-- BEGIN GENERATED: benchmark -->\nkept\n<!-- END GENERATED: benchmark -->\nc\n"
)


def test_a_benchmark_table_replaces_only_its_own_block() -> None:
    assert replace_block(TWO_BLOCKS, "batch-day", "| new |\n\n") == (
        "a\n<!-- BEGIN GENERATED: batch-day (benchmarks/batch_day.py) -->\n| new |\n<!-- END GENERATED: batch-day -->\n"
        "b\n<!-- BEGIN GENERATED: benchmark -->\nkept\n<!-- END GENERATED: benchmark -->\nc\n"
    )


def test_a_benchmark_table_without_its_block_is_refused() -> None:
    with pytest.raises(ValueError, match="no '<!-- BEGIN GENERATED: headline -->' block"):
        replace_block(TWO_BLOCKS, "headline", "x")


def test_cli_updates_docs_in_place(tmp_path: Path) -> None:
    doc = tmp_path / "README.md"
    doc.write_text(
        "x\n<!-- BEGIN GENERATED: status-reference -->\n<!-- END GENERATED: status-reference -->\n",
        encoding="utf-8",
    )
    assert cli_main(["crd", "--update-docs", str(doc)]) == 0
    assert _block(doc.read_text(encoding="utf-8"), "status-reference") == status_reference_markdown()


@pytest.mark.parametrize("name", ["README.md", "docs/benchmarks.md", "docs/api.md"])
def test_cli_leaves_other_generators_blocks_alone(tmp_path: Path, name: str) -> None:
    """The README (headline) and docs/benchmarks.md (benchmark, batch-day) hold the benchmarks'
    generated tables: not ours to fill; docs/api.md is up to date."""
    text = (REPO / name).read_text(encoding="utf-8")
    assert "<!-- BEGIN GENERATED: " in text
    copy = tmp_path / Path(name).name
    copy.write_text(text, encoding="utf-8")
    assert cli_main(["crd", "--update-docs", str(copy)]) == 0
    assert copy.read_text(encoding="utf-8") == text  # the checked-in file is up to date
