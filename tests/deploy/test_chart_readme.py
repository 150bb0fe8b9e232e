"""The chart for real users: its README's values table generated from values.yaml (helm-docs
style, by tools/chart-readme.py) and its Artifact Hub metadata in step with the chart."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import tomllib
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml
from tests.deploy.helpers import CHART, ROOT

from llmscale.api import LLMDeployment
from llmscale.controller.settings import OperatorSettings

TOOL = ROOT / "tools" / "chart-readme.py"


def tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("chart_readme", TOOL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def leaves(values: dict[str, Any], described: set[str], prefix: str = "") -> list[str]:
    out = []
    for key, value in values.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value and path not in described:
            out.extend(leaves(value, described, f"{path}."))
        else:
            out.append(path)
    return out


def test_the_readme_table_is_current() -> None:
    proc = subprocess.run([sys.executable, str(TOOL), "--check"], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr


def test_every_value_has_a_described_row() -> None:
    text = (CHART / "values.yaml").read_text()
    described = tool().descriptions(text)
    rows = {line.split("|")[1].strip().strip("`"): line.split("|")[4].strip()
            for line in (CHART / "README.md").read_text().splitlines() if line.startswith("| `")}
    assert list(rows) == leaves(yaml.safe_load(text), set(described))
    assert [key for key, description in rows.items() if not description] == []


def test_descriptions_follow_the_helm_docs_convention() -> None:
    text = "# -- Top.\n# Continued.\na: 1\nb:\n  # -- Nested.\n  c: x\n  d: y\n# plain comment\ne: []\n"
    assert tool().descriptions(text) == {"a": "Top. Continued.", "b.c": "Nested."}


def annotation(name: str) -> Any:
    return yaml.safe_load(yaml.safe_load((CHART / "Chart.yaml").read_text())["annotations"][name])


def test_artifact_hub_metadata_matches_the_chart() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    notes = chart["annotations"]
    assert notes["artifacthub.io/license"] == pyproject["project"]["license"]
    images = {i["name"]: i["image"] for i in annotation("artifacthub.io/images")}
    assert images["llmscale"] == f"{values['image']['repository']}:{chart['appVersion']}"
    assert images["placeholder"] == values["operator"]["placeholderImage"] == OperatorSettings().placeholder_image
    assert all(link["url"].startswith("https://") for link in annotation("artifacthub.io/links"))
    assert {c["kind"] for c in annotation("artifacthub.io/changes")} <= {"added", "changed", "deprecated", "removed",
                                                                         "fixed", "security"}
    for example in annotation("artifacthub.io/crdsExamples"):
        LLMDeployment.model_validate(example)
    assert [c["kind"] for c in annotation("artifacthub.io/crds")] == ["LLMDeployment"]


def test_the_readme_documents_the_crd_upgrade() -> None:
    readme = (CHART / "README.md").read_text()
    assert "kubectl apply --server-side --force-conflicts -f charts/llmscale/crds/" in readme
    assert Path(ROOT / "tests/cluster/test_crd_upgrade.py").exists()
