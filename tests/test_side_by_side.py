"""tools/test-side-by-side.sh (``make test``) with stand-ins for the two suites: the unit suite starts
only once the e2e suite has said its busy scenarios are done (or has ended), at nice 19, its output
printed after both; the exit status is the e2e suite's when it failed, else the unit suite's."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "tools" / "test-side-by-side.sh"

E2E = """#!/usr/bin/env bash
echo "e2e: busy" ; sleep 1
date +%s.%N > e2e-busy-done ; {touch}
sleep 1 ; echo "e2e: done" ; exit {rc}
"""
UNIT = """#!/usr/bin/env bash
date +%s.%N > unit-started
echo "unit: niceness $(nice)" ; exit {rc}
"""


def _run(tmp_path: Path, e2e_rc: int, unit_rc: int, touch: bool = True) -> subprocess.CompletedProcess[str]:
    (tmp_path / "e2e.sh").write_text(E2E.format(rc=e2e_rc, touch='touch "$LLMSCALE_E2E_CPU_DONE"' if touch else ":"))
    (tmp_path / "unit.sh").write_text(UNIT.format(rc=unit_rc))
    for f in ("e2e.sh", "unit.sh"):
        (tmp_path / f).chmod(0o755)
    return subprocess.run(["bash", str(SCRIPT), "./e2e.sh", "./unit.sh"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60, check=False, env={**os.environ})


def test_the_unit_suite_starts_after_the_busy_scenarios_at_nice_19(tmp_path: Path) -> None:
    proc = _run(tmp_path, 0, 0)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert float((tmp_path / "unit-started").read_text()) >= float((tmp_path / "e2e-busy-done").read_text())
    # Its output comes after both ended, whole.
    out = proc.stdout
    assert out.index("e2e: done") < out.index("unit: niceness 19"), out
    assert (tmp_path / ".cluster" / "test-logs" / "unit.log").read_text().strip() == "unit: niceness 19"


def test_an_e2e_suite_that_never_says_starts_the_unit_suite_when_it_ends(tmp_path: Path) -> None:
    proc = _run(tmp_path, 0, 0, touch=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "unit: niceness 19" in proc.stdout


@pytest.mark.parametrize(("e2e_rc", "unit_rc", "rc"), [(0, 3, 3), (2, 0, 2), (2, 3, 2)])
def test_the_exit_status_is_the_e2e_suites_failure_else_the_unit_suites(
    tmp_path: Path, e2e_rc: int, unit_rc: int, rc: int
) -> None:
    proc = _run(tmp_path, e2e_rc, unit_rc)
    assert proc.returncode == rc, proc.stdout + proc.stderr
    assert "unit: niceness 19" in proc.stdout  # both ran, whatever the first's outcome
