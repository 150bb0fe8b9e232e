"""The policy-cost benchmark (``benchmarks/policy_cost.py``) on a small case: the replayed calls
answer what the run was answered (the policy is a pure function of its arguments)."""

from __future__ import annotations

import pytest
from tests.benchscripts import load_benchmark


def test_the_benchmark_script_replays_a_run_to_the_same_answers(capsys: pytest.CaptureFixture[str]) -> None:
    bench = load_benchmark("policy_cost")
    assert bench.main(["--cases", "chat-8b-engine-x2", "--hours", "0.75", "--repeat", "1"]) == 0
    header, row = capsys.readouterr().out.splitlines()
    cells = row.split()
    assert header.split()[0] == "case" and cells[0] == "chat-8b-engine-x2" and cells[-1] == "yes", row
    ticks, refits = int(cells[1]), int(cells[3])
    assert ticks == 180 and refits > 0, row  # 45 minutes of 15-s ticks; the live fit refitted


def test_a_replay_that_answers_otherwise_is_reported() -> None:
    bench = load_benchmark("policy_cost")
    rec = bench.record("chat-llama-8b-h100.yaml", 20.0, 1.0, 0.25)
    _, _, digest = bench.replay(rec, 1)
    assert digest == rec.digest
    rec.answers["decide"][-1] += " changed"
    assert bench.replay(rec, 1)[2] != rec.digest
