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
    assert "operator-0 (census):" in out and "VmRSS" in out and "Kopf: no watched object in this process" in out
    assert "allocated at (innermost last):" in out
    assert scale.traced_dump(tmp_path, shard).stat().st_size > 0


async def test_the_census_counts_what_kopf_keeps_per_llmdeployment() -> None:
    # The census walks Kopf's own memories (not stand-ins): a kept body's managedFields, status and
    # the rest, and llmscale's ObjectMemory by attribute; the process figures come first.
    import kopf
    from kopf._core.reactor import inventory

    from llmscale.controller.memory import MEMO_KEY, ObjectMemory

    traced = load_benchmark("traced_operator")
    memories = inventory.ResourceMemories()
    raw = {"apiVersion": "llmscale.dev/v1alpha1", "kind": "LLMDeployment",
           "metadata": {"name": "chat", "namespace": "a", "uid": "u1",
                        "managedFields": [{"manager": "kopf", "fieldsV1": {"f:status": {f"f:{i}": {} for i in range(200)}}}]},
           "status": {"conditions": [{"type": f"T{i}", "message": "m" * 40} for i in range(20)]}}
    memory = await memories.recall(raw, memobase=kopf.Memo(deps=None))
    memory.memo[MEMO_KEY] = ObjectMemory()
    memory.daemons_memory.live_fresh_body = kopf.Body(raw)
    text = traced.census()
    assert text.splitlines()[0].startswith("VmRSS ")
    assert "Kopf: 1 watched objects, 1 bodies kept" in text
    sizes = {line.split("  ")[-1]: float(line.split()[0]) for line in text.splitlines() if " KB an LLMDeployment " in line}
    assert sizes["body: metadata.managedFields"] > 0.01 and sizes["body: status"] > 0.005, text
    assert any(name.startswith("llmscale ObjectMemory") for name in sizes), text
    del memories
