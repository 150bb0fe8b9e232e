"""Linters of what cannot run here: the Dockerfile (hadolint) and every shell script (shellcheck)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.deploy.helpers import ROOT, run

_SKIP_DIRS = {".git", ".venv", ".cluster", "node_modules", ".mypy_cache", ".ruff_cache", ".hypothesis"}


def shell_scripts() -> list[Path]:
    found = []
    for path in ROOT.rglob("*.sh"):
        if not _SKIP_DIRS.intersection(path.relative_to(ROOT).parts):
            found.append(path)
    return sorted(found)


def test_hadolint_dockerfile(hadolint: Path) -> None:
    # Default failure threshold: any finding, down to style and info, fails.
    run([hadolint, "--no-color", ROOT / "Dockerfile"])


def _dockerfile() -> str:
    return (ROOT / "Dockerfile").read_text()


def test_the_dockerfile_is_multi_stage() -> None:
    text = _dockerfile()
    assert text.startswith("# syntax=docker/dockerfile:1\n"), "the syntax directive must be the first line"
    assert text.count("\nFROM ") == 2


def test_the_dockerfile_runs_as_non_root() -> None:
    assert "USER 65532:65532" in _dockerfile()


def test_the_dockerfile_runs_every_verb_through_llmscale() -> None:
    assert 'ENTRYPOINT ["llmscale"]' in _dockerfile()


def test_there_are_scripts_to_check() -> None:
    names = {p.relative_to(ROOT).as_posix() for p in shell_scripts()}
    assert {"e2e/kind/run.sh", "tools/build-helm.sh", "tools/sync-chart-crds.sh"} <= names


@pytest.mark.parametrize("script", [pytest.param(p, id=p.relative_to(ROOT).as_posix()) for p in shell_scripts()])
def test_shellcheck(shellcheck: Path, script: Path) -> None:
    run([shellcheck, "--external-sources", "--severity=style", script])


def test_kind_script_fails_early_without_docker(tmp_path: Path) -> None:
    """With no docker on PATH the kind path stops before doing anything, and says why."""
    proc = run([ROOT / "e2e/kind/run.sh", "--no-tests"], ok=False, env={"PATH": f"{tmp_path}:/usr/bin:/bin", "HOME": str(tmp_path)})
    if Path("/usr/bin/docker").exists():
        pytest.fail("this check needs a machine without /usr/bin/docker")
    assert proc.returncode == 1
    assert "docker is not installed" in proc.stderr
