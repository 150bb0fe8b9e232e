"""The package's layering (pyproject.toml, import-linter): every module sits in a layer, the
contracts hold, and nothing is loaded behind the linter's back."""

from __future__ import annotations

import ast
import pkgutil
import subprocess
import sys
import tomllib
from pathlib import Path

import llmscale

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = Path(llmscale.__file__).resolve().parent


def _contracts() -> list[dict[str, object]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    contracts: list[dict[str, object]] = config["tool"]["importlinter"]["contracts"]
    return contracts


def test_every_module_of_the_package_sits_in_a_layer() -> None:
    (layers,) = [c for c in _contracts() if c["type"] == "layers" and "containers" not in c]
    placed = {m.strip() for layer in layers["layers"] for m in str(layer).replace(":", "|").split("|")}  # type: ignore[attr-defined]
    top = {f"llmscale.{m.name}" for m in pkgutil.iter_modules([str(PACKAGE)])}
    assert top == placed, f"not in a layer: {sorted(top - placed)}; no such module: {sorted(placed - top)}"


def test_the_import_contracts_hold() -> None:
    proc = subprocess.run([str(Path(sys.executable).with_name("lint-imports"))], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "BROKEN" not in proc.stdout


def test_nothing_is_imported_behind_the_linters_back() -> None:
    """No module of the package loads code by path or by a computed name
    (importlib.util.spec_from_file_location, importlib.import_module, runpy): import-linter cannot
    see such a dependency."""
    hidden = {"spec_from_file_location", "module_from_spec", "run_path", "exec_module", "import_module"}
    found = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Attribute) and node.attr in hidden:
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {node.attr}")
    assert not found, found


def test_the_control_plane_script_needs_only_the_standard_library() -> None:
    """e2e/cluster/cluster.py runs before any virtualenv exists (it starts the pinned binaries);
    ``-I -S`` hides every installed package."""
    proc = subprocess.run([sys.executable, "-I", "-S", str(ROOT / "e2e" / "cluster" / "cluster.py"), "--help"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "status" in proc.stdout
