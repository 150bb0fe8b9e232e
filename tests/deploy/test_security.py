"""checkov over everything we ship to clusters, as rendered: the chart under each variant of
values, the kustomize overlays, the kind manifests, the CRDs and the Dockerfile. Every finding must
be listed, with its reason, in checkov-accepted.yaml; an entry that matches nothing is stale."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.deploy.helpers import CHART, ROOT, VARIANTS, run

ACCEPTED = yaml.safe_load((Path(__file__).parent / "checkov-accepted.yaml").read_text())


@pytest.fixture(scope="module")
def findings(helm: Path, kubectl: Path, checkov: Path, tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    scan = tmp_path_factory.mktemp("checkov")
    for name, sets in VARIANTS.items():
        args: list[str | Path] = [helm, "template", "llmscale", CHART, "--namespace", "llmscale-system"]
        for s in sets:
            args += ["--set", s]
        (scan / f"chart-{name}.yaml").write_text(run(args).stdout)
    for target in ("overlays/dev", "overlays/production", "samples"):
        (scan / f"kustomize-{target.replace('/', '-')}.yaml").write_text(
            run([kubectl, "kustomize", ROOT / "manifests" / target]).stdout
        )
    (scan / "kustomize-monitoring.yaml").write_text((ROOT / "manifests/components/monitoring/monitoring.yaml").read_text())
    for path in [ROOT / "e2e/kind/prometheus.yaml", *sorted((CHART / "crds").glob("*.yaml"))]:
        shutil.copy(path, scan / path.name)
    shutil.copy(ROOT / "Dockerfile", scan / "Dockerfile")
    # --skip-download: no Prisma Cloud calls (no network here, and none needed for the checks).
    proc = run([checkov, "--directory", scan, "--framework", "kubernetes", "dockerfile", "--output", "json",
                "--quiet", "--skip-download", "--soft-fail"], timeout=600)
    reports = json.loads(proc.stdout)
    reports = reports if isinstance(reports, list) else [reports]
    frameworks = {r["check_type"] for r in reports}
    assert frameworks == {"kubernetes", "dockerfile"}, f"checkov scanned {frameworks}: {proc.stderr[-2000:]}"
    assert all(r["summary"]["passed"] > 0 for r in reports)
    return [f for r in reports for f in r["results"]["failed_checks"]]


def _accepted(finding: dict[str, Any]) -> bool:
    return any(a["check"] == finding["check_id"] and re.search(a["resource"], finding["resource"]) for a in ACCEPTED)


def test_no_unexplained_findings(findings: list[dict[str, Any]]) -> None:
    unexplained = sorted({f"{f['check_id']} {f['check_name']}: {f['resource']} ({Path(f['file_path']).name})"
                          for f in findings if not _accepted(f)})
    assert not unexplained, "fix these or justify them in checkov-accepted.yaml:\n" + "\n".join(unexplained)


def test_every_accepted_finding_has_a_reason() -> None:
    for entry in ACCEPTED:
        assert len(entry.get("reason", "")) > 40, entry


def test_every_accepted_finding_still_occurs(findings: list[dict[str, Any]]) -> None:
    for entry in ACCEPTED:
        assert any(f["check_id"] == entry["check"] and re.search(entry["resource"], f["resource"]) for f in findings), (
            f"stale entry in checkov-accepted.yaml: {entry['check']} {entry['resource']}"
        )
