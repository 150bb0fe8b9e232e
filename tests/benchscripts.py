"""The benchmark scripts (``benchmarks/*.py``, not a package) loaded as modules, for the tests that
run them on a small case or read their helpers. A script is loaded once and registered in
``sys.modules`` under its own name (its dataclasses and worker processes look it up there)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

__all__ = ["BENCHMARKS", "load_benchmark"]

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def load_benchmark(name: str) -> ModuleType:
    """Return ``benchmarks/<name>.py`` as the module ``name`` (loaded on the first call).

    Raises:
        FileNotFoundError: no such script.
    """
    path = BENCHMARKS / f"{name}.py"
    loaded = sys.modules.get(name)
    if loaded is not None and Path(getattr(loaded, "__file__", "") or "").resolve() == path:
        return loaded
    if not path.is_file():
        raise FileNotFoundError(path)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
