"""The demo's pure parts: the compressed day, the trough window on the wall clock, the summary."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

from llmscale.demo import (
    DemoConfig,
    DemoError,
    Sample,
    demo_home,
    demo_trace,
    find_repo,
    summarize,
    trough_window,
)
from llmscale.loadgen import RequestResult
from llmscale.sim.trace import DiurnalEnvelope, Trace

REPO = Path(__file__).resolve().parents[2]


def _base(n: int = 2000, seed: int = 1) -> Trace:
    rng = np.random.default_rng(seed)
    t = 1_700_000_000.0 + np.cumsum(rng.exponential(0.2, n))
    return Trace(t, rng.integers(10, 9000, n), rng.integers(1, 2000, n), np.zeros(n, np.bool_), float(t[0]),
                 float(t[-1] - t[0]), "synthetic")


def test_the_day_is_compressed_to_the_wall_minutes_with_the_peak_rate_asked_for() -> None:
    cfg = DemoConfig(minutes=6.0, peak_rps=3.0, start_hour=6.0)
    trace, speedup = demo_trace(_base(), cfg, context_limit_tokens=2048)
    assert speedup == pytest.approx(86_400 / 360)
    wall = (trace.arrival_s - trace.start_s) / speedup
    assert wall.max() <= 360.0
    # Expected count: the integral of peak × envelope over the day, in wall seconds.
    hours = (6.0 + np.arange(0, 86_400, 60) / 3600.0) % 24 * 3600
    expected = 3.0 * float(np.mean(DiurnalEnvelope()(hours))) * 360
    assert len(trace) == pytest.approx(expected, rel=0.1)
    # Every request fits the context: prompt + output < limit, outputs at most half of it.
    assert np.all(trace.prompt_tokens + trace.output_tokens < 2048)
    assert np.all(trace.output_tokens <= 1024) and np.all(trace.prompt_tokens >= 1)


def test_the_trough_window_opens_on_a_whole_minute_in_the_compressed_night() -> None:
    cfg = DemoConfig(minutes=7.0, start_hour=6.0)
    t0 = datetime(2026, 1, 1, 12, 0, 10, tzinfo=UTC).timestamp()
    opens, closes = trough_window(t0, cfg)
    # Trace hour 00:30 is 18.5 h after 06:00: 18.5 / 24 × 420 s = 323.75 s after t0 -> 12:05:33.75,
    # so the window opens at the next whole minute, 12:06, and closes a minute later.
    assert (opens.hour, opens.minute, opens.second) == (12, 6, 0)
    assert (closes - opens).total_seconds() == 60


def _result(ttft: float, e2e: float, tokens: int, status: int = 200) -> RequestResult:
    return RequestResult(0.0, 100, tokens, status, e2e, ttft, tokens if status == 200 else 0)


def _sample(t: float, gpus: int) -> Sample:
    return Sample(t, 0.0, 0.0, 0.0, 0.0, 0.0, gpus, gpus, 1, 0, 0, gpus)


def test_summary_counts_slo_attainment_goodput_and_cost_per_million_tokens() -> None:
    results = [
        _result(0.5, 0.5 + 99 * 0.05, 100),   # meets both: TTFT 0.5 s, ITL 50 ms
        _result(3.0, 3.0 + 99 * 0.05, 100),   # TTFT over the 2 s SLO
        _result(0.5, 0.5 + 99 * 0.2, 100),    # ITL 200 ms over the 100 ms SLO
        _result(0.1, 0.2, 0, status=503),     # failed
    ]
    batch = [_result(0.0, 10.0, 250)]
    samples = [_sample(0, 2), _sample(1800, 4), _sample(3600, 4)]  # 2 GPUs 30 min + 4 GPUs 30 min
    s = summarize(results, batch, samples, duration_s=100.0, ttft_slo_s=2.0, itl_slo_s=0.1,
                  gpu_hour_usd=2.5, sent=5, dropped=1)
    assert s["slo_attainment"] == pytest.approx(1 / 5)
    assert s["goodput_tok_s"] == pytest.approx(100 / 100.0)
    assert s["requests_ok"] == 3 and s["requests_failed"] == 1 and s["requests_dropped"] == 1
    assert s["gpu_hours"] == pytest.approx(3.0)
    assert s["cost_usd"] == pytest.approx(7.5)
    assert s["cost_per_million_tokens_usd"] == pytest.approx(7.5 / 550 * 1e6, rel=1e-3)
    assert "Patel et al." in s["trace"]


def test_the_repository_is_found_from_below_and_refused_outside(tmp_path: Path) -> None:
    assert find_repo(REPO / "operator" / "llmscale") == REPO
    with pytest.raises(DemoError, match="no llmscale checkout"):
        find_repo(tmp_path)


def test_the_demo_keeps_its_state_in_the_checkout_or_else_where_it_runs(tmp_path: Path) -> None:
    """In a checkout the demo's .cluster/demo and out/ go to its root; outside one (an installed
    package) to the working directory: the local cluster and the trace ship with the package."""
    assert demo_home(REPO / "operator" / "llmscale") == REPO
    assert demo_home(tmp_path) == tmp_path.resolve()
