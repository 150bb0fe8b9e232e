"""benchmarks/signals_fleet.py runs on a small fleet and prints its figures."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_fleet_benchmark_runs_on_a_small_case() -> None:
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "signals_fleet.py"),
            "--deployments",
            "5",
            "--pods",
            "2",
            "--repeat",
            "1",
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "5 LLMDeployments, 10 pools, 2 pods a pool" in done.stdout
    assert "in 7 queries (per-pool reads: 70 queries)" in done.stdout
    assert "ms a tick" in done.stdout and "× the fleet read" in done.stdout
