"""A non-editable install ships the bundled traces, their README, LICENSE and NOTICE.

The wheel is built from a copy of exactly the files the Dockerfile copies into its build stage
(pyproject.toml, README.md, LICENSE, NOTICE, operator/), offline (``--no-build-isolation``: the
dev extra installs setuptools), then read two ways: as a zip listing, and imported straight from
the wheel file (a zip on ``sys.path``), so importlib.resources has to extract the trace.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from llmscale import __version__
from llmscale.data import BUNDLED_TRACES

ROOT = Path(__file__).resolve().parents[2]
#: What the Dockerfile's build stage copies (COPY lines), hence all a wheel may be built from.
BUILD_INPUTS = ("pyproject.toml", "README.md", "LICENSE", "NOTICE", "operator")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = tmp_path_factory.mktemp("src")
    for name in BUILD_INPUTS:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("*.egg-info", "__pycache__"))
        else:
            shutil.copy2(ROOT / name, src / name)
    out = tmp_path_factory.mktemp("dist")
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q",
         "-w", str(out), str(src)],
        capture_output=True, text=True, timeout=240, check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (whl,) = out.glob("llmscale-*.whl")
    return whl


def test_the_wheel_ships_every_bundled_trace(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    for trace in BUNDLED_TRACES.values():
        assert f"llmscale/data/traces/{trace.filename}" in names
    assert "llmscale/data/traces/README.md" in names
    assert "llmscale/data/__init__.py" in names


def test_the_wheel_ships_the_licence_with_the_notice(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    dist_info = f"llmscale-{__version__}.dist-info"
    assert {f"{dist_info}/licenses/LICENSE", f"{dist_info}/licenses/NOTICE"} <= names, sorted(
        n for n in names if n.startswith(dist_info))


def test_the_wheels_traces_are_byte_for_byte_the_repositorys(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as z:
        for trace in BUNDLED_TRACES.values():
            packaged = z.read(f"llmscale/data/traces/{trace.filename}")
            assert packaged == (ROOT / "operator/llmscale/data/traces" / trace.filename).read_bytes()


def test_trace_path_works_from_the_installed_wheel_alone(wheel: Path, tmp_path: Path) -> None:
    """Imported from the wheel file itself (no site-packages: not the editable install), from a
    folder with no repository around it."""
    code = (
        "import llmscale.data as d, sys\n"
        "assert d.__file__.startswith(sys.argv[1]), d.__file__\n"
        "p = d.trace_path()\n"
        "print(p, sum(1 for _ in p.open()))\n"
    )
    proc = subprocess.run([sys.executable, "-I", "-S", "-c", f"import sys; sys.path.insert(0, sys.argv[1]); {code}",
                           str(wheel)], cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    path, lines = proc.stdout.split()
    assert not path.startswith(str(ROOT)) and path.endswith("azure-llm-2023-conv.csv")
    assert int(lines) == BUNDLED_TRACES["azure-llm-2023-conv"].requests + 1  # + the header
