"""Each test's name says one behaviour: a name joined by ``_and_`` usually carries two tests
(issue 26), so none is allowed; a scenario that checks a sequence says it with ``then``."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _test_names(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return [node.name for node in ast.walk(tree)
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test_")]


def test_no_test_name_joins_two_behaviours_with_and() -> None:
    files = sorted([*ROOT.joinpath("tests").rglob("test_*.py"), *ROOT.joinpath("e2e").rglob("test_*.py")])
    assert len(files) > 50, "the test files were not found"
    joined = [f"{path.relative_to(ROOT)}::{name}" for path in files for name in _test_names(path) if "_and_" in name]
    assert not joined, "one behaviour per test (split it, or name the one behaviour):\n" + "\n".join(joined)


def test_the_name_check_sees_a_joined_name(tmp_path: Path) -> None:
    sample = tmp_path / "test_sample.py"
    sample.write_text("def test_one_and_another():\n    pass\n\nasync def test_one_thing():\n    pass\n")
    assert _test_names(sample) == ["test_one_and_another", "test_one_thing"]
