"""Issue 27, item 6: diagnoses that hold when applied. The prefill-interference remedy's budget,
applied in the simulator, meets the ITL it was recommended for, and its "replicas with and without"
match the simulator's within 15 %. The full table comes from ``benchmarks/diagnosis_check.py``; this
runs its small case."""

from __future__ import annotations

from typing import Any

import pytest
from tests.benchscripts import load_benchmark

DIAG = load_benchmark("diagnosis_check")


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip("|").split("|")]


def _p4000_row(capsys: pytest.CaptureFixture[str]) -> list[str]:
    assert DIAG.main(["--quick"]) == 0
    out = capsys.readouterr().out
    return next(_cells(line) for line in out.splitlines() if line.startswith("| p4000"))


def test_the_recommended_budget_meets_its_itl(capsys: pytest.CaptureFixture[str]) -> None:
    row = _p4000_row(capsys)
    # Applied in the simulator, the recommended budget meets the ITL in every minute.
    assert row[4].startswith("100.0%") and "✗" not in row[4], row


def test_the_diagnosis_replicas_match_the_simulators(capsys: pytest.CaptureFixture[str]) -> None:
    row = _p4000_row(capsys)
    # The Diagnosis condition's "replicas with and without" within 15 % of the simulator's.
    for cell in (row[5], row[6]):
        model, sim = (int(x) for x in cell.replace("✗", "").split("/"))
        assert abs(model - sim) <= DIAG.BAND * sim, row


@pytest.mark.parametrize("case", DIAG.CASES, ids=lambda c: c.key)
def test_the_recommended_budget_is_one_whose_full_step_fits_the_target(case: Any) -> None:
    from llmscale.model.capacity import Burstiness, chunk_step_time
    from llmscale.policy.diagnosis import budget_remedy
    from llmscale.policy.load import capacity_context

    spec = DIAG.case_spec(case)
    cap = capacity_context(spec, DIAG.case_shape(case), True, Burstiness(), 1.0)
    assert cap is not None
    r = budget_remedy(cap, case.itl_s, 10.0)
    point = cap.need(10.0).point
    assert r.step_s > case.itl_s  # the case is one of interference
    assert 0 < r.best < r.budget
    assert chunk_step_time(cap.model, r.best - point.running, point.running, point.context_tokens) <= case.itl_s
    assert r.with_replicas is not None and r.without_replicas is not None
