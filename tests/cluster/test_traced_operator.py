"""benchmarks/traced_operator.py and ``scale.py --tracemalloc``'s report: a process run under the
wrapper writes a tracemalloc snapshot on SIGUSR1, and the report reads it back by file, line and
stack. The wrapped verb here is the mock engine (a long-running ``llmscale`` verb that needs no
cluster); the operator is wrapped the same way."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from tests.benchscripts import BENCHMARKS, load_benchmark

from llmscale.localcluster.ports import free_port


def _serving(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1):
            return True
    except OSError:
        return False


def test_a_traced_process_reports_what_it_holds(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scale = load_benchmark("scale")
    shard = scale.Shard(0, "llmscale-shard-0", [])
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, str(BENCHMARKS / "traced_operator.py"), str(scale.traced_dump(tmp_path, shard)),
         "engine", "--host", "127.0.0.1", "--port", str(port), "--model", "llama-3.1-8b", "--gpu", "h100-sxm",
         "--cold-start-seconds", "0", "--log-level", "warning"],
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not _serving(port):
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            assert time.monotonic() < deadline, "the traced engine never served"
            time.sleep(0.2)
        shard.pid = proc.pid
        scale.print_traced(tmp_path, shard, top=5)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    out = capsys.readouterr().out
    assert "operator-0 (tracemalloc):" in out and "MB traced" in out
    assert "allocated at (innermost last):" in out
    assert scale.traced_dump(tmp_path, shard).stat().st_size > 0
