"""tools/test-side-by-side.sh (``make test``) with stand-ins for the three runs: the unit suite starts
only once the e2e suite has said its busy scenarios are done (or has ended), at nice 19; the timing
tests once the e2e suite has ended, at the script's own niceness; the output of both unit runs is
printed after all have ended; the exit status is the e2e suite's when it failed, else the unit
suite's, else the timing tests'; a Ctrl-C on the terminal stops them all."""

from __future__ import annotations

import fcntl
import os
import pty
import select
import signal
import subprocess
import termios
import time
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "tools" / "test-side-by-side.sh"
SUITES = ("./e2e.sh", "./unit.sh", "./timing.sh")
#: The timing tests run at the script's own niceness: 0 under make, 19 where this test itself runs
#: inside make test's unit suite.
TIMING_NICE = f"timing: niceness {os.nice(0)}"

E2E = """#!/usr/bin/env bash
trap 'echo interrupted > e2e-interrupted; exit 2' INT
echo "e2e: busy"; sleep {busy}
date +%s.%N > e2e-busy-done; {touch}
sleep {tail} & wait
date +%s.%N > e2e-ended; echo "e2e: done"; exit {rc}
"""
UNIT = """#!/usr/bin/env bash
date +%s.%N > unit-started
echo "unit: niceness $(nice)"; exit {rc}
"""
TIMING = """#!/usr/bin/env bash
date +%s.%N > timing-started
echo "timing: niceness $(nice)"; exit {rc}
"""


def _write(tmp_path: Path, e2e_rc: int = 0, unit_rc: int = 0, timing_rc: int = 0, touch: bool = True,
           busy: float = 1, tail: float = 6) -> None:
    """The stand-ins: the e2e suite is busy for ``busy`` s, says so, and ends ``tail`` s later."""
    (tmp_path / "e2e.sh").write_text(E2E.format(rc=e2e_rc, busy=busy, tail=tail,
                                                touch='touch "$LLMSCALE_E2E_CPU_DONE"' if touch else ":"))
    (tmp_path / "unit.sh").write_text(UNIT.format(rc=unit_rc))
    (tmp_path / "timing.sh").write_text(TIMING.format(rc=timing_rc))
    for f in ("e2e.sh", "unit.sh", "timing.sh"):
        (tmp_path / f).chmod(0o755)


def _run(tmp_path: Path, **stand_ins: float | bool) -> subprocess.CompletedProcess[str]:
    _write(tmp_path, **stand_ins)  # type: ignore[arg-type]
    return subprocess.run(["bash", str(SCRIPT), *SUITES], cwd=tmp_path, capture_output=True, text=True,
                          timeout=60, check=False)


def _time(tmp_path: Path, name: str) -> float:
    return float((tmp_path / name).read_text())


@pytest.fixture(scope="module")
def passing(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """One run of stand-ins that all pass (the tests below read different things of it)."""
    tmp_path = tmp_path_factory.mktemp("passing")
    return tmp_path, _run(tmp_path)


def test_the_unit_suite_starts_once_the_busy_scenarios_are_done(passing: tuple[Path, Any]) -> None:
    tmp_path, proc = passing
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # After the file, and well before the e2e suite's end (6 s later): the file started it.
    assert _time(tmp_path, "e2e-busy-done") <= _time(tmp_path, "unit-started") < _time(tmp_path, "e2e-ended") - 2


def test_the_unit_suite_runs_at_nice_19(passing: tuple[Path, Any]) -> None:
    tmp_path, proc = passing
    assert (tmp_path / ".cluster" / "test-logs" / "unit.log").read_text().strip() == "unit: niceness 19", proc.stdout


def test_the_timing_tests_start_once_the_e2e_suite_has_ended_at_the_scripts_niceness(
    passing: tuple[Path, Any]
) -> None:
    tmp_path, proc = passing
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _time(tmp_path, "timing-started") >= _time(tmp_path, "e2e-ended")
    assert (tmp_path / ".cluster" / "test-logs" / "timing.log").read_text().strip() == TIMING_NICE


def test_the_unit_runs_output_comes_after_all_ended(passing: tuple[Path, Any]) -> None:
    out = passing[1].stdout
    ends = [out.index(s) for s in ("e2e: done", "test: unit suite ended", "test: timing tests ended",
                                   "unit: niceness 19", TIMING_NICE)]
    assert ends == sorted(ends), out


def test_an_e2e_suite_that_never_says_starts_the_unit_suite_when_it_ends(tmp_path: Path) -> None:
    proc = _run(tmp_path, touch=False, tail=1)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _time(tmp_path, "unit-started") >= _time(tmp_path, "e2e-ended")


@pytest.mark.parametrize(("e2e_rc", "unit_rc", "timing_rc", "rc"),
                         [(0, 3, 0, 3), (2, 0, 0, 2), (2, 3, 4, 2), (0, 0, 4, 4), (0, 3, 4, 3)])
def test_the_exit_status_is_the_first_failure_of_e2e_unit_timing(
    tmp_path: Path, e2e_rc: int, unit_rc: int, timing_rc: int, rc: int
) -> None:
    proc = _run(tmp_path, e2e_rc=e2e_rc, unit_rc=unit_rc, timing_rc=timing_rc, tail=0)
    assert proc.returncode == rc, proc.stdout + proc.stderr
    # All ran, whatever the others' outcome.
    assert "unit: niceness 19" in proc.stdout and TIMING_NICE in proc.stdout


def test_ctrl_c_on_the_terminal_stops_the_e2e_suite_before_any_unit_run(tmp_path: Path) -> None:
    _write(tmp_path, busy=30)
    master, slave = pty.openpty()

    def terminal() -> None:  # the script's own session, with the pty as its controlling terminal
        os.setsid()
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)
        # A shell on a terminal starts with SIGINT at its default. This test's own process may have
        # inherited it ignored (started in the background by a non-interactive shell, as CI's runner
        # may be), and bash cannot trap a signal ignored on entry.
        signal.signal(signal.SIGINT, signal.SIG_DFL)

    proc = subprocess.Popen(["bash", str(SCRIPT), *SUITES], cwd=tmp_path, stdin=slave,
                            stdout=slave, stderr=slave, preexec_fn=terminal)
    os.close(slave)
    out = b""
    deadline = time.monotonic() + 20
    while b"e2e: busy" not in out and time.monotonic() < deadline:
        if select.select([master], [], [], 0.5)[0]:
            out += os.read(master, 4096)
    assert b"e2e: busy" in out, out

    def in_its_wait_loop() -> bool:  # the script's own `sleep 2`, a child in its process group
        children = subprocess.run(["ps", "--ppid", str(proc.pid), "-o", "pgid=,args="], capture_output=True,
                                  text=True, check=False).stdout.split("\n")
        return any(c.split(None, 1) == [str(proc.pid), "sleep 2"] for c in children)

    while not in_its_wait_loop() and time.monotonic() < deadline:
        time.sleep(0.1)
    os.write(master, b"\x03")  # Ctrl-C: the terminal signals its foreground process group
    try:
        rc = proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        state = subprocess.run(["ps", "-s", str(proc.pid), "-o", "pid,pgid,tpgid,stat,args"], capture_output=True,
                               text=True, check=False).stdout
        while select.select([master], [], [], 0.2)[0]:
            out += os.read(master, 4096)
        raise AssertionError(f"no exit 30 s after Ctrl-C; output {out!r}; processes:\n{state}") from None
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        os.close(master)
    assert rc == 130
    assert (tmp_path / "e2e-interrupted").exists(), "the e2e suite got no SIGINT"
    assert not (tmp_path / "unit-started").exists(), "the unit suite started after a Ctrl-C"
    assert not (tmp_path / "timing-started").exists(), "the timing tests started after a Ctrl-C"
