"""Issue 27, item 4: the model's replicas-needed against the simulator's calibrated need. The full
map comes from ``benchmarks/model_map.py``; this runs its small case and keeps the band."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.benchscripts import load_benchmark

MAP = load_benchmark("model_map")


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip("|").split("|")]


def test_the_map_small_case_prints_both_capacities(capsys: pytest.CaptureFixture[str]) -> None:
    assert MAP.main(["--quick"]) == 0
    out = capsys.readouterr().out
    rows = [_cells(line) for line in out.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert len(rows) == 2
    for cells in rows:
        model_rps, sim_rps = float(cells[5].split()[0]), float(cells[6])
        assert model_rps > 0 and sim_rps > 0
        assert float(cells[7].split()[0]) == pytest.approx(sim_rps / model_rps, abs=0.01)
    assert "2 of 2 mixes within ±20%" in out


# The band, on mixes drawn across the grid's ranges (short probes; the seeded draw is the same every
# run): the model's need is within 20 % of the simulator's calibrated need.
@settings(max_examples=3, deadline=None, derandomize=True)
@given(
    prompt=st.sampled_from([100.0, 300.0, 1000.0, 3000.0, 8000.0]),
    sigma=st.sampled_from([0.3, 0.8, 1.5]),
    output=st.sampled_from([1000.0, 2000.0, 4000.0]),
    itl_s=st.sampled_from([0.03, 0.08, 0.2]),
    budget=st.sampled_from([512, 2048, 8192]),
)
def test_the_model_keeps_the_band(prompt: float, sigma: float, output: float, itl_s: float, budget: int) -> None:
    r = MAP.row(MAP.Mix(prompt, sigma, output, itl_s, budget), minutes=4.0)
    assert abs(float(r["need_ratio"]) - 1.0) <= MAP.BAND, r
