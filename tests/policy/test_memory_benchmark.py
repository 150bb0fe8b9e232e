"""benchmarks/memory_per_object.py runs on a small case and prints its figures (issues 14 and 26)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_memory_benchmark_runs_on_a_small_case() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "memory_per_object.py"), "--objects", "20", "--pods", "2",
         "--unknown", "1"],
        capture_output=True, text=True, check=False, timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert re.search(r"^whole, kept 900 s .* 1\.00 × whole", done.stdout, re.MULTILINE), done.stdout
    assert "20 objects, 2 pod(s) a pool, 1 unknown(s) a snapshot" in done.stdout
    per_object = [int(v.replace(",", "")) for v in re.findall(r"([\d,]+) bytes/object", done.stdout)]
    assert len(per_object) == 3, done.stdout
    # Slimming the older entries, then keeping one cold start, each costs less than the rule before.
    assert per_object[0] > per_object[1] > per_object[2] > 0, done.stdout
    # The operator's /metrics series: the collector's dict against prometheus-client children.
    m = re.search(r"/metrics series of one object \((\d+) series\): prometheus-client children ([\d,]+) bytes, "
                  r"ObjectSeries ([\d,]+) bytes", done.stdout)
    assert m is not None, done.stdout
    series, before, after = (int(g.replace(",", "")) for g in m.groups())
    assert series >= 40 and 0 < after < before, done.stdout
