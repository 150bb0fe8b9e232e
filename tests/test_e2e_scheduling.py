"""The e2e suite's scheduling (e2e/conftest.py, e2e/listscheduler.py).

- With real pytest-xdist, on a suite of sleeping stand-ins and three workers: the alone scenarios
  all on one worker and before any other, the real-vLLM (``cpu``) ones first of all with the file
  ``make test`` waits for written when they end, the ``beside_cpu`` one beside them (they wait for
  it to start) and beside no other alone one, and a worker that holds the longest scenario handed
  only short ones after it (read from the gate's ledger).
- The scheduler alone, driven by stand-in workers that run a test only once they hold the next (as
  xdist's do): no worker ever holds more than the unit it runs and one more, and every test runs,
  whatever the number of workers, the selection, or the test at which a worker dies.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from collections import deque
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]

SUITE = '''
import time
from pathlib import Path
import pytest

def _beside_started():
    """A cpu stand-in waits until the beside_cpu one has begun: a gate that kept them apart stalls."""
    deadline = time.monotonic() + 60
    while not Path("beside-started").exists():
        assert time.monotonic() < deadline, "the beside_cpu scenario never ran beside the cpu ones"
        time.sleep(0.05)

@pytest.mark.cpu
def test_vllm_a(): _beside_started(); time.sleep(0.4)

@pytest.mark.cpu
def test_vllm_b(cpu_work_over):
    time.sleep(0.2)
    cpu_work_over()  # the rest waits on the clock: make test may start the unit suite
    time.sleep(1.0)

@pytest.mark.alone
def test_chaos(): time.sleep(0.4)

@pytest.mark.alone
class TestChaosClass:
    def test_first(self): time.sleep(0.2)
    def test_second(self): time.sleep(0.2)

@pytest.mark.long(300)
@pytest.mark.beside_cpu
def test_longest(): Path("beside-started").touch(); time.sleep(4.0)

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
    beside_cpu: stand-in
    long(seconds): stand-in
"""


Ledger = list[tuple[float, str, str, str, str]]


def _ledger(tmp: Path) -> Ledger:
    """The gate's ledger: ``(time, worker pid, enter|leave, cpu|alone|beside-cpu|shared, test name)``,
    waits left out."""
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
    for name in ("conftest.py", "listscheduler.py"):
        (tmp / "e2e" / name).write_text((ROOT / "e2e" / name).read_text())
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


def test_the_alone_scenarios_run_before_any_other_on_one_worker(run: tuple[Ledger, Path]) -> None:
    rows, _ = run
    alone = [r for r in rows if r[3] in ("cpu", "alone")]
    shared = [r for r in rows if r[3] == "shared"]
    assert len({pid for _, pid, *_ in alone}) == 1, alone
    assert min(t for t, _, what, *_ in shared if what == "enter") >= max(t for t, *_ in alone)


def _spans(rows: Ledger, mode: str) -> list[tuple[float, float]]:
    """Each hold of the lock in ``mode``: (enter, leave), a class's from its first test to its last."""
    entered: dict[str, float] = {}
    out = []
    for t, pid, what, m, _ in rows:
        if m == mode and what == "enter":
            entered[pid] = t
        elif m == mode and what == "leave":
            out.append((entered.pop(pid), t))
    return out


def test_the_beside_cpu_scenario_runs_beside_the_cpu_ones(run: tuple[Ledger, Path]) -> None:
    rows, _ = run
    ((begin, end),) = _spans(rows, "beside-cpu")
    assert any(b < end and begin < e for b, e in _spans(rows, "cpu")), rows  # the cpu stand-in waited for it


def test_the_beside_cpu_scenario_runs_beside_no_other_alone_one(run: tuple[Ledger, Path]) -> None:
    rows, _ = run
    ((begin, end),) = _spans(rows, "beside-cpu")
    # The ledger's times are rounded to 0.1 s.
    assert all(e <= begin + 0.1 or end <= b + 0.1 for b, e in _spans(rows, "alone")), rows


def test_the_cpu_scenarios_come_first(run: tuple[Ledger, Path]) -> None:
    rows, _ = run
    entered = [name for _, _, what, mode, name in rows if what == "enter" and mode in ("cpu", "alone")]
    assert set(entered[:2]) == {"test_vllm_a", "test_vllm_b"}, entered


def test_the_file_make_test_waits_for_is_written_when_the_cpu_work_is_over(run: tuple[Ledger, Path]) -> None:
    rows, cpu_done = run
    # After the last of them began (not after the first ended), and when it said its work was over,
    # a second before it ended (not at its end, nor at the session's); the ledger's times are
    # rounded to 0.1 s.
    last_cpu = max(t for t, _, what, _, name in rows if what == "enter" and name.startswith("test_vllm"))
    last_end = max(t for t, _, what, _, name in rows if what == "leave" and name.startswith("test_vllm"))
    assert last_cpu - 0.05 <= cpu_done.stat().st_mtime <= last_end - 0.5, (last_cpu, cpu_done.stat().st_mtime, last_end)


def test_the_worker_with_the_longest_scenario_gets_a_short_one_as_its_next(run: tuple[Ledger, Path]) -> None:
    rows, _ = run
    (pid,) = {pid for _, pid, _, _, name in rows if name == "test_longest"}
    on_it = [name for _, p, what, mode, name in rows if p == pid and what == "enter" and mode != "alone"]
    assert on_it[0] == "test_longest" and on_it[1].startswith("test_short"), on_it


# ---------------------------------------------------------------------- the scheduler, stand-in workers


def _listscheduler() -> ModuleType:
    spec = importlib.util.spec_from_file_location("listscheduler", ROOT / "e2e" / "listscheduler.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # a dataclass looks its module up
    spec.loader.exec_module(module)
    return module


LS = _listscheduler()
P = "e2e/test_x.py::"
TESTS = [P + "test_vllm_a", P + "test_vllm_b", P + "test_chaos", P + "TestChaos::test_1", P + "TestChaos::test_2",
         P + "test_windows", P + "test_longest", P + "TestCycle::test_ramp", P + "TestCycle::test_down", P + "test_wake", P + "test_dash",
         *(P + f"test_short[{i}]" for i in range(6))]
UNITS = {P + "test_vllm_a": LS.Unit(alone=True, cpu=True), P + "test_vllm_b": LS.Unit(alone=True, cpu=True),
         P + "test_chaos": LS.Unit(alone=True), P + "TestChaos": LS.Unit(alone=True),
         P + "test_windows": LS.Unit(seconds=280, beside_cpu=True),
         P + "test_longest": LS.Unit(seconds=300), P + "TestCycle": LS.Unit(seconds=160),
         P + "test_wake": LS.Unit(seconds=120), P + "test_dash": LS.Unit(seconds=90)}


class Worker:
    """A worker as xdist's controller sees it: the test indices it was sent, which it runs in order,
    each only once it holds the next or is shutting down."""

    def __init__(self, name: str) -> None:
        self.gateway = SimpleNamespace(id=name)
        self.torun: deque[int] = deque()
        self.shutting_down = False

    def shutdown(self) -> None:
        self.shutting_down = True

    def send_runtest_some(self, indices: list[int]) -> None:
        self.torun.extend(indices)


def _scheduler(tmp: Path, units: dict[str, Any], workers: int) -> Any:
    """The list scheduler for ``workers`` workers, ``units`` written where it reads them."""
    LS.write_units(tmp / "units.json", units)
    config = SimpleNamespace(option=SimpleNamespace(loadscopereorder=True), getvalue=lambda key: [f"{workers}*popen"])
    return LS.ListScheduling(config, None, units_path=tmp / "units.json")


def _drive(tmp: Path, tests: list[str], workers: int, crash_at: str | None = None) -> list[str]:
    """Run ``tests`` through the scheduler on ``workers`` stand-ins, the alone ones before any other
    but a ``beside_cpu`` one while a ``cpu`` one is left (the gate); the worker that reaches ``crash_at`` dies there and a new one replaces it. Return
    the tests in the order they ran; fail if a worker ever holds more than two units, or if the run
    stalls (every worker waiting: the gate's hour-long fallback)."""
    sched = _scheduler(tmp, {u: UNITS.get(u, LS.Unit()) for u in {LS.unit_of(t) for t in tests}}, workers)
    alone = {t for t in tests if UNITS.get(LS.unit_of(t), LS.Unit()).alone}
    cpu = {t for t in tests if UNITS.get(LS.unit_of(t), LS.Unit()).cpu}
    beside = {t for t in tests if UNITS.get(LS.unit_of(t), LS.Unit()).beside_cpu}
    ran: list[str] = []

    def join(worker: Worker) -> None:
        sched.add_node(worker)
        sched.add_node_collection(worker, tests)

    active = [Worker(f"gw{i}") for i in range(workers)]
    for w in active:
        join(w)
    sched.schedule()
    for _ in range(10 * len(tests) + 50):
        held = {w.gateway.id: sched._holds(w) for w in sched.nodes}
        assert all(len(units) <= 2 for units in held.values()), held
        if sched.tests_finished:
            for w in sched.nodes:
                w.shutdown()
        exited = next((w for w in active if w.shutting_down and not w.torun), None)
        if exited is not None:
            active.remove(exited)
            if exited in sched.nodes:  # as xdist's DSession: one shut down unused is no longer there
                assert sched.remove_node(exited) is None
            if not active:
                assert not sched.workqueue and sched.tests_finished, list(sched.workqueue)
                return ran
            continue
        runnable = [w for w in active if len(w.torun) >= 2 or (w.torun and w.shutting_down)]
        runnable = [w for w in runnable if tests[w.torun[0]] in alone or alone <= set(ran)
                    or (tests[w.torun[0]] in beside and not cpu <= set(ran))]
        assert runnable, f"stalled: {[(w.gateway.id, [tests[i] for i in w.torun]) for w in active]} after {ran}"
        w = runnable[0]
        test = tests[w.torun[0]]
        if test == crash_at:
            crash_at = None
            active.remove(w)
            sched.remove_node(w)
            new = Worker(w.gateway.id + "-2")
            active.append(new)
            join(new)
            sched.schedule()
            continue
        w.torun.popleft()
        ran.append(test)
        sched.mark_test_complete(w, tests.index(test))
    raise AssertionError(f"no end after {ran}")


@pytest.mark.parametrize("workers", [1, 2, 3, 5])
def test_every_test_runs_once_on_any_number_of_workers(tmp_path: Path, workers: int) -> None:
    ran = _drive(tmp_path, TESTS, workers)
    assert sorted(ran) == sorted(TESTS)


@pytest.mark.parametrize("selection", [slice(0, 5), slice(5, None), slice(2, 7), slice(0, 2)],
                         ids=["alone", "shared", "mixed", "cpu"])
def test_every_selected_test_runs_once(tmp_path: Path, selection: slice) -> None:
    tests = TESTS[selection]
    assert sorted(_drive(tmp_path, tests, 3)) == sorted(tests)


@pytest.mark.parametrize("crash_at", TESTS, ids=[t.removeprefix(P) for t in TESTS])
def test_every_test_runs_when_a_worker_dies(tmp_path: Path, crash_at: str) -> None:
    ran = _drive(tmp_path, TESTS, 3, crash_at=crash_at)
    assert set(ran) == set(TESTS), sorted(set(TESTS) - set(ran))


def test_the_alone_units_go_to_one_worker_the_cpu_ones_first(tmp_path: Path) -> None:
    sched = _scheduler(tmp_path, UNITS, 3)
    workers: list[Any] = [Worker(f"gw{i}") for i in range(3)]
    shuffled = TESTS[2:5] + TESTS[:2] + TESTS[5:]  # the cpu ones not first in the collection
    for w in workers:
        sched.add_node(w)
        sched.add_node_collection(w, shuffled)
    sched.schedule()
    first, *others = ([shuffled[i] for i in w.torun] for w in workers)
    assert first == [P + "test_vllm_a", P + "test_vllm_b"], first
    assert [t for other in others for t in other if UNITS.get(LS.unit_of(t), LS.Unit()).alone] == []
    # Each of the others holds a long one (the one that may run beside the cpu ones first) and, as
    # its next, a short one.
    assert [o[0] for o in others] == [P + "test_windows", P + "test_longest"], others
    assert all(o[-1].startswith(P + "test_short") for o in others), others
