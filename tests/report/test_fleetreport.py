"""The fleet cost report's figures (llmscale.fleetreport): pure, over hand-made series.

Each formula of docs/report.md on a series whose answer is worked out by hand, the neighbours
that must not count (samples outside the window, NaN, a pool without GPUs), the verdict's three
cases, the fleet's totals, and properties over generated fleets: GPU-hours add up over
deployments and grow with the window; cost and the managed price scale with their prices.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmscale.fleetreport import (
    DAY_S,
    Deployment,
    Figures,
    FleetReport,
    Price,
    Recorded,
    build_report,
    window_figures,
)

NOW = 1_780_000_000.0
HOUR = 3600.0


def dep(name: str = "chat", usd: float = 2.0, model: str = "m", floor: int = 1) -> Deployment:
    return Deployment("ml", name, model, '["vllm", "img", []]', 1, floor, usd)


def hourly(days: float, value: float | None = None, fn=None) -> list[tuple[float, float]]:  # type: ignore[no-untyped-def]
    """Hourly samples over the ``days`` before NOW (the first one hour after the start)."""
    n = int(days * 24)
    times = [NOW - (n - 1 - i) * HOUR for i in range(n)]
    return [(t, fn(t) if fn else value) for t in times]  # type: ignore[misc]


def steady(gpus: float, busy: float, kv: float, tps: float, good: float, days: float = 30) -> Recorded:
    return Recorded(pools={"interactive": {
        "gpus": hourly(days, gpus), "busy_share": hourly(days, busy), "kv_mean": hourly(days, kv),
        "tokens_per_second": hourly(days, tps), "goodput_tokens_per_second": hourly(days, good)}})


def test_a_steady_pool_worked_by_hand() -> None:
    rec = steady(gpus=2, busy=0.5, kv=0.4, tps=1000, good=900)
    rec = Recorded(pools=rec.pools, input_tokens_per_second=hourly(30, 3000.0))
    f = window_figures(dep(usd=2.0), rec, Price(1.0, 4.0), now=NOW, days=7, step_s=HOUR)
    assert f.gpu_hours == pytest.approx(2 * 7 * 24)
    assert f.busy_share == pytest.approx(0.5) and f.kv_use == pytest.approx(0.4)
    seconds = 7 * DAY_S
    assert f.output_tokens == pytest.approx(1000 * seconds)
    assert f.input_tokens == pytest.approx(3000 * seconds)
    assert f.goodput_per_gpu_hour == pytest.approx(900 * seconds / (2 * 7 * 24))
    assert f.cost_usd == pytest.approx(2 * 7 * 24 * 2.0)
    # 336 GPU-hours × $2 over 604.8 M tokens.
    assert f.usd_per_million_tokens == pytest.approx(672 / 604.8)
    assert f.reference_usd == pytest.approx(3 * 604.8 * 1.0 + 604.8 * 4.0)
    assert f.verdict.startswith("build: self-hosting costs $672, 16% of the managed API's $4,234")


def _one_gpu_then_three() -> Figures:
    # One GPU at 20 % busy for the first half of the week, three at 60 % for the second half.
    half = NOW - 3.5 * DAY_S
    rec = Recorded(pools={"interactive": {
        "gpus": hourly(7, fn=lambda t: 1.0 if t <= half else 3.0),
        "busy_share": hourly(7, fn=lambda t: 0.2 if t <= half else 0.6),
        "kv_mean": hourly(7, fn=lambda t: 0.1 if t <= half else 0.5)}})
    return window_figures(dep(), rec, None, now=NOW, days=7, step_s=HOUR)


def test_the_busy_share_is_weighted_by_the_gpus_held() -> None:
    assert _one_gpu_then_three().busy_share == pytest.approx((0.2 * 1 + 0.6 * 3) / 4)


def test_the_kv_use_is_weighted_by_the_gpus_held() -> None:
    assert _one_gpu_then_three().kv_use == pytest.approx((0.1 * 1 + 0.5 * 3) / 4)


def test_gpu_hours_sum_the_gpus_held() -> None:
    assert _one_gpu_then_three().gpu_hours == pytest.approx(3.5 * 24 * 1 + 3.5 * 24 * 3)


def test_samples_outside_the_window_or_nan_do_not_count() -> None:
    gpus = [*hourly(30, 1.0), (NOW + HOUR, 100.0)]  # after now: not in the report
    gpus = [(t, math.nan) if i == len(gpus) - 2 else (t, v) for i, (t, v) in enumerate(gpus)]
    rec = Recorded(pools={"interactive": {"gpus": gpus}})
    f7 = window_figures(dep(), rec, None, now=NOW, days=7, step_s=HOUR)
    assert f7.gpu_hours == pytest.approx(7 * 24 - 1)  # the NaN hour is not a GPU-hour
    assert f7.busy_share is None and f7.kv_use is None and f7.input_tokens is None
    assert window_figures(dep(), rec, None, now=NOW, days=30, step_s=HOUR).gpu_hours == pytest.approx(30 * 24 - 1)


def _interactive_with_batch() -> Figures:
    rec = Recorded(pools={
        "interactive": {"gpus": hourly(7, 1.0), "tokens_per_second": hourly(7, 100.0),
                        "goodput_tokens_per_second": hourly(7, 50.0)},
        "batch": {"gpus": hourly(7, 2.0), "tokens_per_second": hourly(7, 400.0)}})
    return window_figures(dep(), rec, None, now=NOW, days=7, step_s=HOUR)


def test_batch_tokens_count_as_goodput() -> None:
    f = _interactive_with_batch()
    assert f.output_tokens == pytest.approx(500 * 7 * DAY_S)
    assert f.goodput_tokens == pytest.approx(450 * 7 * DAY_S)


def test_both_pools_count_as_gpu_hours() -> None:
    assert _interactive_with_batch().gpu_hours == pytest.approx(3 * 7 * 24)


def test_the_verdicts() -> None:
    idle = window_figures(dep(), steady(1, 0.1, 0.1, 10, 10), Price(10, 30), now=NOW, days=7, step_s=HOUR)
    # 168 GPU-hours × $2 = $336 for 6.048 M tokens: the managed API charges 6.048 × $30 = $181.
    assert idle.verdict.startswith("buy: the managed API would cost $181, 46% less than self-hosting's $336")
    assert idle.verdict.endswith("GPUs are busy 10% of the time: consolidate first")
    busy = window_figures(dep(), steady(1, 0.9, 0.6, 10, 10), Price(10, 30), now=NOW, days=7, step_s=HOUR)
    assert busy.verdict.startswith("buy:") and "consolidate" not in busy.verdict
    silent = window_figures(dep(), steady(1, 0.0, 0.0, 0, 0), Price(10, 30), now=NOW, days=7, step_s=HOUR)
    assert silent.verdict.startswith("no traffic: $336 of GPU time generated nothing")
    assert silent.usd_per_million_tokens is None and silent.reference_usd_per_million_tokens is None
    unpriced = window_figures(dep(), steady(1, 0.5, 0.5, 10, 10), None, now=NOW, days=7, step_s=HOUR)
    assert unpriced.verdict.startswith("no reference price")


def test_bad_input_is_refused() -> None:
    with pytest.raises(ValueError, match="reference price"):
        Price(-1.0, 2.0)
    with pytest.raises(ValueError, match="step and window"):
        window_figures(dep(), Recorded(pools={}), None, now=NOW, days=7, step_s=0)


def _three_deployments() -> FleetReport:
    deps = [dep("b", usd=3.0), dep("a", usd=2.0), dep("silent")]
    recorded = {("ml", "a"): steady(1, 0.2, 0.3, 100, 90), ("ml", "b"): steady(3, 0.6, 0.5, 900, 800)}
    return build_report(deps, recorded, {("ml", "b"): Price(1, 2)}, Price(5, 15), now=NOW, step_s=HOUR)


def test_the_report_has_a_row_per_deployment_by_name() -> None:
    report = _three_deployments()
    assert [r.deployment.name for r in report.rows] == ["a", "b", "silent"]
    assert report.rows[2].figures[7.0].gpu_hours == 0 and list(report.rows[2].busy_series) == []
    assert report.rows[0].busy_series[0][1] == pytest.approx(0.2)


def test_each_row_has_its_own_price_or_the_default() -> None:
    report = _three_deployments()
    assert report.rows[1].price == Price(1, 2) and report.rows[0].price == Price(5, 15)


def test_the_report_totals_sum_the_rows() -> None:
    report = _three_deployments()
    for days in (7.0, 30.0):
        total = report.total[days]
        figs = [r.figures[days] for r in report.rows]
        assert total.gpu_hours == pytest.approx(sum(f.gpu_hours for f in figs))
        assert total.cost_usd == pytest.approx(sum(f.cost_usd for f in figs))
        assert total.busy_share == pytest.approx((0.2 * 1 + 0.6 * 3) / 4)
        assert total.reference_usd == pytest.approx(sum(f.reference_usd or 0 for f in figs))


@settings(max_examples=60, deadline=None)
@given(
    fleet=st.lists(st.tuples(st.floats(0, 8), st.floats(0, 1), st.floats(0, 5000)), min_size=1, max_size=5),
    gpu_usd=st.floats(0.1, 10), scale=st.floats(0.5, 4),
)
def test_properties_over_fleets(fleet: list[tuple[float, float, float]], gpu_usd: float, scale: float) -> None:
    deps = [dep(f"d{i}", usd=gpu_usd) for i in range(len(fleet))]
    recorded = {("ml", f"d{i}"): steady(g, b, 0.5, tps, tps) for i, (g, b, tps) in enumerate(fleet)}
    price = Price(1.0, 3.0)
    one = build_report(deps, recorded, {}, price, now=NOW, step_s=HOUR)
    pricier = build_report([Deployment(d.namespace, d.name, d.model, d.engine, 1, 1, gpu_usd * scale) for d in deps],
                           recorded, {}, Price(scale, 3.0 * scale), now=NOW, step_s=HOUR)
    for days in (7.0, 30.0):
        assert one.total[days].gpu_hours == pytest.approx(sum(g for g, _, _ in fleet) * days * 24)
        assert pricier.total[days].cost_usd == pytest.approx(one.total[days].cost_usd * scale)
        assert pricier.total[days].reference_usd == pytest.approx((one.total[days].reference_usd or 0) * scale)
    assert one.total[30.0].gpu_hours >= one.total[7.0].gpu_hours
