"""The README stays a front page: about 15 KB, every relative link resolves (its own and those of
the docs it sends readers to), and none of the facts that went stale before (issue numbers, test
counts) creeps back. Its numbers come from generated blocks (tests/sim/test_readme_benchmark.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
_LINK = re.compile(r"\]\(([^)\s]+)\)")


def _relative_links(path: Path) -> list[tuple[str, Path]]:
    out = []
    text = re.sub(r"```.*?```|`[^`\n]*`", "", path.read_text(encoding="utf-8"), flags=re.S)  # code is not links
    for target in _LINK.findall(text):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        out.append((target, (path.parent / target.split("#")[0]).resolve()))
    return out


def test_the_readme_is_about_15_kb() -> None:
    assert len(README.read_bytes()) <= 16_000


@pytest.mark.parametrize(
    "doc", [README, *sorted((ROOT / "docs").glob("*.md"))], ids=lambda p: p.relative_to(ROOT).as_posix()
)
def test_relative_links_resolve(doc: Path) -> None:
    broken = [target for target, path in _relative_links(doc) if not path.exists()]
    assert not broken, f"{doc.relative_to(ROOT)}: {broken}"


def test_the_readme_anchors_exist() -> None:
    text = README.read_text(encoding="utf-8")
    slugs = {re.sub(r"[^a-z0-9 -]", "", h.lower()).replace(" ", "-") for h in re.findall(r"^#+ (.+)$", text, re.M)}
    anchors = set(re.findall(r"\]\(#([^)]+)\)", text))
    assert anchors <= slugs, anchors - slugs


@pytest.mark.parametrize(
    "stale",
    [
        pytest.param(r"\bissue \d+", id="issue-number"),
        pytest.param(r"\d[\d,]* (?:[\w-]+\s+){0,3}(?:tests|scenarios)\b", id="test-count"),
        pytest.param(r"three samples", id="sample-count"),
    ],
)
def test_no_stale_kind_of_fact(stale: str) -> None:
    assert not re.search(stale, README.read_text(encoding="utf-8"), re.I)


def test_the_readmes_llmdeployment_is_valid() -> None:
    import yaml

    from llmscale.api import LLMDeploymentSpec

    (block,) = re.findall(r"```yaml\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    doc = yaml.safe_load(block)
    assert doc["kind"] == "LLMDeployment"
    LLMDeploymentSpec.model_validate(doc["spec"])


def test_the_readmes_printer_columns_are_the_crds() -> None:
    """The `kubectl get llmdep` example shows the CRD's default columns, in order."""
    from llmscale.crd import PRINTER_COLUMNS

    text = README.read_text(encoding="utf-8")
    header = next(line for line in text.splitlines() if line.startswith("NAME "))
    default = [c["name"].upper() for c in PRINTER_COLUMNS if not c.get("priority")]
    assert header.split() == ["NAME", *default]
