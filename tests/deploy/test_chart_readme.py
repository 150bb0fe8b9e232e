"""The chart for real users: its README written by helm-docs from README.md.gotmpl and values.yaml
(every value described), and its Artifact Hub metadata in step with the chart."""

from __future__ import annotations

import subprocess
import tomllib
from pathlib import Path
from typing import Any

import yaml
from tests.deploy.helpers import CHART, ROOT

from llmscale.api import LLMDeployment
from llmscale.controller.settings import OperatorSettings

HELM_DOCS_ARGS = ("--chart-search-root", "charts", "--sort-values-order", "file")


def rows(readme: str) -> dict[str, str]:
    """The values table of the chart's README: key -> description."""
    return {cells[1].strip(): cells[4].strip() for line in readme.splitlines()
            if line.startswith("| ") and len(cells := line.split("|")) >= 6 and cells[1].strip() not in ("Key", "")}


def leaves(values: dict[str, Any], rowed: set[str], prefix: str = "") -> list[str]:
    """The paths of ``values`` a table row documents: a key with a row of its own (a map or list
    documented whole), else each of its children."""
    out = []
    for key, value in values.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value and path not in rowed:
            out.extend(leaves(value, rowed, f"{path}."))
        else:
            out.append(path)
    return out


def test_the_readme_is_what_helm_docs_writes(helm_docs: Path) -> None:
    proc = subprocess.run([str(helm_docs), *HELM_DOCS_ARGS, "--dry-run"], cwd=ROOT, capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == (CHART / "README.md").read_text().strip(), (
        f"charts/llmscale/README.md is stale: run {helm_docs} {' '.join(HELM_DOCS_ARGS)}")


def test_every_value_has_a_described_row() -> None:
    table = rows((CHART / "README.md").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert list(table) == leaves(values, set(table))
    assert [key for key, description in table.items() if not description] == []


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
