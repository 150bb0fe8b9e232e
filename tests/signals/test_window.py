"""The rate window: derived from the scrape interval, checked against it, and the interval read."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from llmscale.signals import ReaderSettings, SelectorLabels
from llmscale.signals.queries import format_duration, parse_duration
from llmscale.signals.window import check_samples, choose_window, interval_from_samples, interval_from_targets


@pytest.mark.parametrize(
    ("interval_s", "window_s"),
    [
        pytest.param(15.0, 60.0, id="15s-scrape-keeps-the-1m-minimum"),
        pytest.param(2.0, 60.0, id="fast-scrape-never-below-the-minimum"),
        pytest.param(30.0, 120.0, id="30s-scrape-four-intervals"),
        pytest.param(60.0, 240.0, id="60s-scrape-four-intervals"),
        pytest.param(62.5, 250.0, id="odd-interval-rounded-up-to-whole-seconds"),
        pytest.param(None, 60.0, id="unknown-interval-the-minimum"),
    ],
)
def test_automatic_window_spans_four_intervals(interval_s: float | None, window_s: float) -> None:
    window = choose_window(None, 60.0, interval_s, "targets")
    assert window.window_s == window_s and window.auto
    assert parse_duration(window.promql) == window_s
    assert not window.too_short and window.problem is None


SET_WINDOWS = pytest.mark.parametrize(
    ("rate_window", "interval_s", "too_short", "problem"),
    [
        pytest.param(
            "1m", 60.0, True, "shorter than two scrape intervals", id="1m-at-60s-scrape-is-too-short"
        ),
        pytest.param("90s", 60.0, True, "shorter than two scrape intervals", id="90s-at-60s-too-short"),
        pytest.param("2m", 60.0, False, "fewer than 4 scrape intervals", id="2m-at-60s-noisy"),
        pytest.param("4m", 60.0, False, None, id="4m-at-60s-fine"),
        pytest.param("1m", 15.0, False, None, id="1m-at-15s-fine"),
        pytest.param("30s", None, False, None, id="unknown-interval-cannot-judge"),
    ],
)


@SET_WINDOWS
def test_a_set_window_is_kept(
    rate_window: str, interval_s: float | None, too_short: bool, problem: str | None
) -> None:
    window = choose_window(rate_window, 60.0, interval_s, "set")
    assert window.promql == rate_window and not window.auto


@SET_WINDOWS
def test_a_set_window_is_checked_against_the_scrape_interval(
    rate_window: str, interval_s: float | None, too_short: bool, problem: str | None
) -> None:
    window = choose_window(rate_window, 60.0, interval_s, "set")
    assert window.too_short is too_short
    if problem is None:
        assert window.problem is None
    else:
        assert window.problem is not None and problem in window.problem
        assert f"{interval_s:g} s" in window.problem


def test_too_short_window_says_what_to_set() -> None:
    window = choose_window("1m", 60.0, 60.0, "targets")
    assert window.problem is not None and "at least 240s" in window.problem and "targets" in window.problem


@pytest.mark.parametrize(
    ("most_samples", "too_short"),
    [
        pytest.param(1.0, True, id="one-sample-everywhere-is-too-short"),
        pytest.param(0.0, True, id="no-sample-in-window"),
        pytest.param(2.0, False, id="two-samples-make-a-rate"),
        pytest.param(None, False, id="no-pod-reports-nothing-to-judge"),
    ],
)
def test_data_decides_when_the_interval_is_unknown(most_samples: float | None, too_short: bool) -> None:
    window = check_samples(choose_window("1m", 60.0, None, "unknown"), most_samples)
    assert window.too_short is too_short
    assert (window.problem is not None) is too_short


def test_known_interval_is_not_overruled_by_a_young_fleet() -> None:
    # A fleet of pods that started a scrape ago holds one sample each: the window is not wrong.
    window = check_samples(choose_window(None, 60.0, 15.0, "targets"), 1.0)
    assert not window.too_short and window.problem is None


def _target(interval: str, **labels: str) -> dict[str, Any]:
    return {"labels": labels, "scrapeInterval": interval, "health": "up"}


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        pytest.param(
            {"activeTargets": [_target("15s", llmscale_dev_deployment="chat")]}, 15.0, id="engine-target"
        ),
        pytest.param(
            {
                "activeTargets": [
                    _target("15s", llmscale_dev_deployment="chat"),
                    _target("1m", llmscale_dev_deployment="code"),
                    _target("5s", job="node"),
                ]
            },
            60.0,
            id="slowest-engine-target-wins-others-ignored",
        ),
        pytest.param({"activeTargets": [_target("30s", job="node")]}, None, id="no-engine-target"),
        pytest.param(
            {"activeTargets": [_target("soon", llmscale_dev_deployment="chat")]}, None, id="bad-duration"
        ),
        pytest.param({"droppedTargets": []}, None, id="no-active-targets-key"),
        pytest.param(["junk"], None, id="not-an-object"),
    ],
)
def test_interval_from_targets(data: Any, expected: float | None) -> None:
    assert interval_from_targets(data, SelectorLabels()) == expected


def test_interval_from_targets_uses_the_configured_deployment_label() -> None:
    data = {"activeTargets": [_target("30s", llmdep="chat")]}
    assert interval_from_targets(data, SelectorLabels(deployment="llmdep")) == 30.0
    assert interval_from_targets(data, SelectorLabels()) is None


@pytest.mark.parametrize(
    ("timestamps", "expected"),
    [
        pytest.param([0.0, 15.0, 30.0, 45.0], 15.0, id="regular-15s"),
        pytest.param([0.0, 60.0, 180.0, 240.0, 300.0], 60.0, id="one-missed-scrape-does-not-move-it"),
        pytest.param([300.0, 0.0, 240.0, 60.0, 120.0, 180.0], 60.0, id="order-does-not-matter"),
        pytest.param([5.0], None, id="one-sample-says-nothing"),
        pytest.param([], None, id="no-sample"),
        pytest.param([7.0, 7.0], None, id="duplicates-only"),
    ],
)
def test_interval_from_samples(timestamps: list[float], expected: float | None) -> None:
    assert interval_from_samples(timestamps) == expected


@given(st.integers(min_value=1, max_value=10_000_000))
def test_duration_round_trip(ms: int) -> None:
    assert parse_duration(format_duration(ms / 1000)) == pytest.approx(ms / 1000)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("1m", 60.0), ("90s", 90.0), ("1m30s", 90.0), ("500ms", 0.5), ("2h", 7200.0), ("1d", 86400.0),
     # the one grammar of every flag (llmscale.durations): decimals, weeks, bare seconds
     ("1.5m", 90.0), ("1w", 604800.0), ("90", 90.0), ("0.5s", 0.5)],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "1 minute", "m", "0s", "-1m", "30s1m2", "1..5m", "1mm", "0"])
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration(text)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        pytest.param({"rate_window": "1 minute"}, "not a duration", id="bad-window"),
        pytest.param({"scrape_interval": "often"}, "not a duration", id="bad-interval"),
        pytest.param({"quantile": 1.5}, "less than or equal to 1", id="bad-quantile"),
        pytest.param({"timeout_s": 0}, "greater than 0", id="zero-timeout"),
        pytest.param({"labels": {"pod": "pod name"}}, "should match pattern", id="bad-label-name"),
        pytest.param({"rate_windw": "1m"}, "Extra inputs are not permitted", id="typo-is-refused"),
        pytest.param({"copy_labels": ["tp-rank"]}, "not a Prometheus label name", id="bad-copy-label"),
    ],
)
def test_bad_settings_are_refused_with_the_field_named(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ReaderSettings(**kwargs)


def test_auto_window_spellings() -> None:
    assert ReaderSettings(rate_window="auto").rate_window is None
    assert ReaderSettings().rate_window is None
    assert ReaderSettings(rate_window="2m").rate_window == "2m"
