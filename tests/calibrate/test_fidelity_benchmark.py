"""benchmarks/fidelity.py: docs/benchmarks.md's fidelity table is what the script prints for the stored
run, and the verdict line follows the largest out-of-sample error."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from tests.benchscripts import load_benchmark

ROOT = Path(__file__).resolve().parents[2]


def _fidelity() -> ModuleType:
    return load_benchmark("fidelity")


def test_the_docs_hold_the_table_of_the_stored_run() -> None:
    doc = json.loads((ROOT / "benchmarks" / "results" / "fidelity-vllm-cpu.json").read_text())
    table = _fidelity().table(doc, 0.15)
    assert table in (ROOT / "docs" / "benchmarks.md").read_text()
    assert (ROOT / "benchmarks" / "results" / "fidelity-vllm-cpu.md").read_text().strip() == table


def test_the_readme_holds_the_rate_points_of_the_stored_run() -> None:
    doc = json.loads((ROOT / "benchmarks" / "results" / "fidelity-vllm-cpu.json").read_text())
    assert _fidelity().rate_table(doc, 0.15) in (ROOT / "README.md").read_text()


def _doc(errors: list[float]) -> dict[str, Any]:
    figures = [
        {"name": f"ITL p95 at {i + 1}.00 req/s", "unit": "ms", "measured": 10.0, "roofline": 5.0,
         "calibrated": 10.0 * (1 + e), "simulated": 10.0, "roofline_error": -0.5, "calibrated_error": e,
         "simulated_error": 0.0, "fitted": False}
        for i, e in enumerate(errors)
    ]
    fit = {"bandwidth_efficiency": 0.5, "compute_efficiency": 0.5, "step_overhead_s": 0.001,
           "seq_overhead_s": 0.0, "attention_efficiency": None, "rms_relative_error": 0.01, "observations": 5}
    return {"model": "m", "url": "u", "accelerator": "a", "fit": fit, "figures": figures}


def test_the_verdict_follows_the_largest_error_after_calibration() -> None:
    fidelity = _fidelity()
    assert fidelity.table(_doc([0.05, -0.14]), 0.15).endswith("target 15%: met.")
    assert fidelity.table(_doc([0.05, -0.16]), 0.15).endswith("target 15%: NOT met.")
    assert fidelity.rate_table(_doc([0.05, -0.16]), 0.15).endswith("target 15%: NOT met.")


def test_the_calibrations_own_options_pass_through_untouched() -> None:
    """``--rates`` is the calibration's, not an abbreviation of this script's ``--rates-only``."""
    args, rest = _fidelity().parse(["--url", "http://127.0.0.1:8000", "--rates", "1,2,3,4", "--save-json", "x.json"])
    assert rest == ["--url", "http://127.0.0.1:8000", "--rates", "1,2,3,4"]
    assert args.rates_only is False and str(args.save_json) == "x.json"
    args, rest = _fidelity().parse(["--rates-only", "--rates", "1,2"])
    assert args.rates_only is True and rest == ["--rates", "1,2"]


def test_a_document_without_rate_points_is_not_judged() -> None:
    """A run with --no-rates compares nothing: the verdict says so instead of "met"."""
    assert _fidelity().table(_doc([]), 0.15).endswith("target 15%: not judged.")


@pytest.mark.parametrize("target", ["15", "0", "nan", "x"])
def test_a_target_that_is_not_a_share_is_refused(target: str) -> None:
    with pytest.raises(SystemExit):
        _fidelity().parse(["--target", target])


@pytest.mark.parametrize("content", [None, "{}", "not json"], ids=["missing", "not-a-calibration", "not-json"])
def test_a_bad_saved_document_is_one_line_with_exit_2(
        content: str | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    saved = tmp_path / "doc.json"
    if content is not None:
        saved.write_text(content)
    monkeypatch.setattr(sys, "argv", ["fidelity.py", "--from-json", str(saved)])
    assert _fidelity().main() == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("fidelity.py: error: --from-json"), err


def test_measuring_options_beside_a_saved_document_are_refused(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    stored = ROOT / "benchmarks" / "results" / "fidelity-vllm-cpu.json"
    monkeypatch.setattr(sys, "argv", ["fidelity.py", "--from-json", str(stored), "--rates", "1,2"])
    assert _fidelity().main() == 2
    assert "--rates 1,2" in capsys.readouterr().err


def test_a_save_json_nowhere_is_refused_before_measuring(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sys, "argv", ["fidelity.py", "--url", "http://127.0.0.1:9", "--save-json",
                                      str(tmp_path / "missing" / "x.json")])
    assert _fidelity().main() == 2
    assert "not a file in an existing folder" in capsys.readouterr().err
