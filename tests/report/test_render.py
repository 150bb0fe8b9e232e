"""``llmscale report``'s rendering and flags, without a cluster: Markdown and HTML hold every row,
verdict and plot; an empty fleet still renders; HTML escapes names; malformed prices are refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmscale.commands.report import (
    as_document,
    parse_price,
    parse_prices,
    plot,
    render_html,
    render_markdown,
)
from llmscale.consolidation import Candidate
from llmscale.fleetreport import Deployment, FleetReport, Price, Recorded, build_report

NOW = 1_780_000_000.0


def fleet() -> Recorded:
    hours = [(NOW - i * 3600.0, 1.0) for i in range(24 * 8)][::-1]
    return Recorded(pools={"interactive": {"gpus": hours, "busy_share": [(t, 0.4) for t, _ in hours],
                                           "tokens_per_second": [(t, 100.0) for t, _ in hours]}})


def _report_with_a_candidate(tmp_path: Path) -> tuple[FleetReport, tuple[str, ...], list[Candidate]]:
    deps = [Deployment("ml", "chat", "m", "e", 1, 1, 2.0), Deployment("ml", "<b>", "m", "e", 1, 1, 2.0)]
    report = build_report(deps, {("ml", "chat"): fleet()}, {}, Price(1, 2), now=NOW, step_s=3600.0)
    found = [Candidate(("ml/chat", "ml/<b>"), "m", 2, 1, 2, 1, 2.0, 0.5)]
    return report, plot(report, tmp_path), found


def test_the_markdown_holds_every_row_verdict_plot(tmp_path: Path) -> None:
    report, plots, found = _report_with_a_candidate(tmp_path)
    md = render_markdown(report, plots, found)
    for text in ("| ml/chat | 192.0 |", "**fleet**", "- **ml/chat**: buy:", "## Consolidation candidates",
                 "$1,460.00 (floors exceed the merged peak)", "![cost.png](cost.png)"):
        assert text in md, text


def test_the_html_escapes_what_it_shows(tmp_path: Path) -> None:
    report, plots, found = _report_with_a_candidate(tmp_path)
    page = render_html(report, plots, found)
    assert "ml/&lt;b&gt;" in page and "<b>" not in page.replace("<b>fleet</b>", "").replace("<b>ml/", "")


def test_the_plots_are_pngs(tmp_path: Path) -> None:
    _, plots, _ = _report_with_a_candidate(tmp_path)
    assert all((tmp_path / p).read_bytes()[:4] == b"\x89PNG" for p in plots)


def test_the_document_holds_the_windows_with_the_candidates(tmp_path: Path) -> None:
    report, _, found = _report_with_a_candidate(tmp_path)
    doc = as_document(report, found)
    chat = next(d for d in doc["deployments"] if d["name"] == "chat")
    assert doc["consolidation"][0]["gpusSaved"] == 1 and chat["windows"]["7d"]["gpuHours"] == 168


def test_an_empty_fleet_renders(tmp_path: Path) -> None:
    report = build_report([], {}, {}, None, now=NOW, step_s=3600.0)
    assert "0 LLMDeployments" in render_markdown(report, plot(report, tmp_path), [])
    assert "None: no two deployments" in render_html(report, (), [])


@pytest.mark.parametrize("bad", ["1", "a,b", "1,2,3", "-1,2"])
def test_a_malformed_price_is_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_price(bad)


def test_per_deployment_prices() -> None:
    assert parse_prices(["ml/chat=0.5,1.5"]) == {("ml", "chat"): Price(0.5, 1.5)}
    for bad in ("chat=1,2", "ml/chat", "/chat=1,2"):
        with pytest.raises(ValueError, match="NAMESPACE/NAME=IN,OUT"):
            parse_prices([bad])
