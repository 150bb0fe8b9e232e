"""docs/architecture.md's tree is the package: every package folder and every module in it, and
nothing else. The README's layout lists every room of each folder whose rooms it lists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import llmscale

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = Path(llmscale.__file__).resolve().parent


def _block(text: str, heading: str) -> list[str]:
    """The lines of the first fenced block after ``heading``."""
    after = text[text.index(heading):]
    m = re.search(r"```text\n(.*?)```", after, re.S)
    assert m, f"no ```text block after {heading!r}"
    return m.group(1).rstrip("\n").split("\n")


def _tree(lines: list[str], every: bool) -> dict[Path, set[str]]:
    """``{folder: names listed in it}``: for every listed folder when ``every``, else for those with
    listed contents; a name is ``module.py`` or ``room/``."""
    assert lines[0] == "operator/llmscale/", lines[0]
    listed: dict[Path, set[str]] = {PACKAGE: set()}
    stack = [PACKAGE]
    for line in lines[1:]:
        indent = len(line) - len(line.lstrip(" "))
        assert indent % 2 == 0 and indent >= 2, f"odd indent: {line!r}"
        depth = indent // 2
        assert depth <= len(stack), f"skips a level: {line!r}"
        del stack[depth:]
        name = line.split()[0]
        listed.setdefault(stack[-1], set()).add(name)
        if name.endswith("/"):
            stack.append(stack[-1] / name.rstrip("/"))
            if every:
                listed.setdefault(stack[-1], set())
    return listed


def _on_disk(folder: Path, rooms_only: bool) -> set[str]:
    names = {f"{p.name}/" for p in folder.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    if not rooms_only:
        names |= {p.name for p in folder.glob("*.py") if p.name != "__init__.py"}
    return names


def _check(lines: list[str], rooms_only: bool) -> None:
    tree = _tree(lines, every=not rooms_only)
    if not rooms_only:
        packages = {p.parent for p in PACKAGE.rglob("__init__.py") if "__pycache__" not in p.parts}
        assert set(tree) == packages, f"folders not in the tree: {sorted(str(p) for p in packages - set(tree))}"
    for folder, names in tree.items():
        assert folder.is_dir(), f"{folder} is not a folder"
        disk = _on_disk(folder, rooms_only)
        assert names == disk, (
            f"{folder.relative_to(PACKAGE.parent)}: listed but not there {sorted(names - disk)}; "
            f"there but not listed {sorted(disk - names)}"
        )


def test_the_architecture_tree_is_the_package() -> None:
    _check(_block((ROOT / "docs" / "architecture.md").read_text(encoding="utf-8"), "## The tree"), rooms_only=False)


def test_the_readme_layout_lists_every_room() -> None:
    _check(_block((ROOT / "README.md").read_text(encoding="utf-8"), "## Layout"), rooms_only=True)


@pytest.mark.parametrize("dropped", ["tick.py", "data/", "vllm_legacy.py"])
def test_a_module_or_folder_missing_from_the_tree_is_caught(dropped: str) -> None:
    lines = _block((ROOT / "docs" / "architecture.md").read_text(encoding="utf-8"), "## The tree")
    kept = [line for line in lines if line.split()[0] != dropped]
    assert len(kept) == len(lines) - 1
    with pytest.raises(AssertionError, match=dropped.rstrip("/")):
        _check(kept, rooms_only=False)
