"""docs/architecture.md's tree and the README's layout are the package's: every module and room
listed exists, and every folder whose contents are listed lists all of them."""

from __future__ import annotations

import re
from pathlib import Path

import llmscale

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = Path(llmscale.__file__).resolve().parent


def _block(text: str, heading: str) -> list[str]:
    """The lines of the first fenced block after ``heading``."""
    after = text[text.index(heading):]
    m = re.search(r"```text\n(.*?)```", after, re.S)
    assert m, f"no ```text block after {heading!r}"
    return m.group(1).rstrip("\n").split("\n")


def _tree(lines: list[str]) -> dict[Path, set[str]]:
    """``{folder: names listed in it}`` for every folder with listed contents; a name is
    ``module.py`` or ``room/``."""
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
    return listed


def _on_disk(folder: Path, rooms_only: bool) -> set[str]:
    names = {f"{p.name}/" for p in folder.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    if not rooms_only:
        names |= {p.name for p in folder.glob("*.py") if p.name != "__init__.py"}
    return names


def _check(lines: list[str], rooms_only: bool) -> None:
    for folder, names in _tree(lines).items():
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


def test_a_module_missing_from_the_tree_is_caught() -> None:
    lines = _block((ROOT / "docs" / "architecture.md").read_text(encoding="utf-8"), "## The tree")
    dropped = [line for line in lines if line.split()[0] != "tick.py"]
    try:
        _check(dropped, rooms_only=False)
    except AssertionError as e:
        assert "tick.py" in str(e)
    else:
        raise AssertionError("a tree without controller/tick.py passed")
