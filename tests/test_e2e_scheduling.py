"""The e2e suite's scheduling (e2e/conftest.py) on a suite of sleeping stand-ins, three workers: the
alone scenarios all on one worker and before any other, the real-vLLM (``cpu``) ones first of all
with the file ``make test`` waits for written after them, and a worker that holds the longest
scenario handed only short ones after it. Read from the gate's ledger, not from timings."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

SUITE = '''
import time
import pytest

@pytest.mark.cpu
def test_vllm_a(): time.sleep(0.4)

@pytest.mark.cpu
def test_vllm_b(): time.sleep(0.4)

@pytest.mark.alone
def test_chaos(): time.sleep(0.4)

@pytest.mark.alone
class TestChaosClass:
    def test_first(self): time.sleep(0.2)
    def test_second(self): time.sleep(0.2)

@pytest.mark.long(300)
def test_longest(): time.sleep(4.0)

@pytest.mark.long(160)
class TestCycle:
    def test_ramp(self): time.sleep(0.5)
    def test_down(self): time.sleep(1.5)

@pytest.mark.long(120)
def test_wake(): time.sleep(1.6)

@pytest.mark.long(90)
def test_dashboards(): time.sleep(1.2)

@pytest.mark.parametrize("case", range(6))
def test_short(case): time.sleep(0.05)
'''

INI = """[pytest]
addopts = -p no:cacheprovider
markers =
    cpu: stand-in
    alone: stand-in
    long(seconds): stand-in
"""


Ledger = list[tuple[float, str, str, str, str]]


def _ledger(tmp: Path) -> Ledger:
    """The gate's ledger: ``(time, worker pid, enter|leave, alone|shared, test name)``, waits left out."""
    (log,) = tmp.glob("tmp/llmscale-e2e-*/gate.log")
    rows = []
    for line in log.read_text().splitlines():
        t, pid, what, mode, nodeid = line.split(" ", 4)
        if what in ("enter", "leave"):
            rows.append((float(t), pid, what, mode, nodeid.rsplit("::", 1)[-1]))
    return rows


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Ledger, Path]:
    """The stand-in suite run on three workers: its ledger, and the file ``make test`` waits for."""
    tmp = tmp_path_factory.mktemp("e2e-scheduling")
    (tmp / "e2e").mkdir()
    (tmp / "tmp").mkdir()
    (tmp / "e2e" / "conftest.py").write_text((ROOT / "e2e" / "conftest.py").read_text())
    (tmp / "e2e" / "test_stand_ins.py").write_text(SUITE)
    (tmp / "pytest.ini").write_text(INI)
    cpu_done = tmp / "cpu-done"
    env = {**os.environ, "TMPDIR": str(tmp / "tmp"), "LLMSCALE_E2E_CPU_DONE": str(cpu_done),
           "PYTHONPATH": os.pathsep.join([str(ROOT / "operator"), str(ROOT)])}
    proc = subprocess.run([sys.executable, "-m", "pytest", "e2e", "-q", "-n", "3"], cwd=tmp, env=env,
                          capture_output=True, text=True, timeout=240, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "16 passed" in proc.stdout, proc.stdout[-2000:]
    return _ledger(tmp), cpu_done


def test_the_alone_scenarios_run_on_one_worker_before_any_other(run: tuple[Ledger, Path]) -> None:
    rows, _ = run
    alone = [r for r in rows if r[3] == "alone"]
    shared = [r for r in rows if r[3] == "shared"]
    assert len({pid for _, pid, *_ in alone}) == 1, alone
    assert min(t for t, _, what, *_ in shared if what == "enter") >= max(t for t, *_ in alone)


def test_the_cpu_scenarios_come_first_and_the_file_says_when_they_are_done(run: tuple[Ledger, Path]) -> None:
    rows, cpu_done = run
    entered = [name for _, _, what, mode, name in rows if what == "enter" and mode == "alone"]
    assert set(entered[:2]) == {"test_vllm_a", "test_vllm_b"}, entered
    # Written when they ended, not when the session did.
    after = min(t for t, _, what, _, name in rows if what == "enter" and not name.startswith("test_vllm"))
    assert cpu_done.stat().st_mtime <= after + 0.05, (cpu_done.stat().st_mtime, after)


def test_the_worker_with_the_longest_scenario_gets_only_short_ones_after_it(run: tuple[Ledger, Path]) -> None:
    rows, _ = run
    (pid,) = {pid for _, pid, _, _, name in rows if name == "test_longest"}
    on_it = [name for _, p, what, mode, name in rows if p == pid and what == "enter" and mode == "shared"]
    assert on_it[0] == "test_longest", on_it
    assert all(name.startswith("test_short") for name in on_it[1:]), on_it
