"""The demo's pure parts: the compressed day, the trough window on the wall clock, the summary."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from llmscale.batch.requests import read_requests
from llmscale.batch.size import batch_size
from llmscale.demo import (
    BatchOutcome,
    DemoConfig,
    DemoError,
    Sample,
    batch_inputs,
    batch_job_manifest,
    batch_outcome,
    compressed_cold_start,
    demo_home,
    demo_manifest,
    demo_trace,
    find_repo,
    live_side,
    plot_compare,
    rolling_p95,
    simulated_sides,
    summarize,
    trough_window,
)
from llmscale.loadgen import RequestResult
from llmscale.sim.calibrate import Capacity
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


def _sample(t: float, gpus: int, backlog: float | None = None, done: int | None = None) -> Sample:
    return Sample(t, 0.0, 0.0, 0.0, 0.0, 0.0, gpus, gpus, 1, 0, 0, gpus, backlog, None, None, done)


def _summary() -> dict[str, Any]:
    results = [
        _result(0.5, 0.5 + 99 * 0.05, 100),   # meets both: TTFT 0.5 s, ITL 50 ms
        _result(3.0, 3.0 + 99 * 0.05, 100),   # TTFT over the 2 s SLO
        _result(0.5, 0.5 + 99 * 0.2, 100),    # ITL 200 ms over the 100 ms SLO
        _result(0.1, 0.2, 0, status=503),     # failed
    ]
    batch = BatchOutcome(jobs=2, requests=10, results=10, unique_results=10, output_tokens=250)
    # 2 GPUs 30 min + 4 GPUs 30 min; a backlog seen at 1,800 s, both Jobs done at 3,600 s.
    samples = [_sample(0, 2, 0.0, 0), _sample(1800, 4, 5000.0, 0), _sample(3600, 4, 0.0, 2)]
    s = summarize(results, batch, samples, duration_s=100.0, ttft_slo_s=2.0, itl_slo_s=0.1,
                  gpu_hour_usd=2.5, sent=5, dropped=1, start_hour=6.0, speedup=12.0)
    return s


def test_the_summary_counts_the_slo_attainment() -> None:
    s = _summary()
    assert s["slo_attainment"] == pytest.approx(1 / 5)
    assert s["requests_ok"] == 3 and s["requests_failed"] == 1 and s["requests_dropped"] == 1


def test_the_summary_counts_the_goodput() -> None:
    assert _summary()["goodput_tok_s"] == pytest.approx(100 / 100.0)


def test_the_summary_counts_the_cost_per_million_tokens() -> None:
    s = _summary()
    assert s["gpu_hours"] == pytest.approx(3.0)
    assert s["cost_usd"] == pytest.approx(7.5)
    assert s["cost_per_million_tokens_usd"] == pytest.approx(7.5 / 550 * 1e6, rel=1e-3)


def test_the_summary_follows_the_batch_backlog_until_drained() -> None:
    s = _summary()
    assert (s["batch_jobs"], s["batch_jobs_done"], s["batch_results"], s["batch_results_unique"]) == (2, 2, 10, 10)
    assert s["batch_backlog_peak_tokens"] == 5000
    # Drained at wall 3,600 s: 6:00 + 3,600 s × 12 = 18:00 of the compressed day.
    assert s["batch_drained_at_hour"] == pytest.approx(18.0)


def test_the_summary_credits_the_trace() -> None:
    assert "Patel et al." in _summary()["trace"]


def test_a_backlog_never_drained_has_no_drain_hour() -> None:
    batch = BatchOutcome(jobs=2, requests=10, results=4, unique_results=4, output_tokens=100)
    samples = [_sample(0, 2, 5000.0, 0), _sample(60, 2, 2000.0, 1)]
    s = summarize([], batch, samples, duration_s=60.0, ttft_slo_s=2.0, itl_slo_s=0.1, gpu_hour_usd=2.5, sent=0,
                  dropped=0)
    assert s["batch_drained_at_hour"] is None and s["batch_jobs_done"] == 1


def test_the_days_jobs_are_suspended_batch_clients_on_their_hostpath_folder(tmp_path: Path) -> None:
    cfg = DemoConfig(batch_job_hours=(9.0, 17.0), batch_requests=5)
    jobs = batch_inputs(tmp_path, cfg, "chat")
    assert [(name, hour) for name, hour, _ in jobs] == [("batch-09h", 9.0), ("batch-17h", 17.0)]
    assert jobs[0][2]["llmscale.dev/batch-requests"] == "5"
    assert jobs[0][2]["llmscale.dev/batch-output-tokens"] == str(5 * 64)
    # The same annotations as `llmscale batch size` writes for the input.
    assert jobs[0][2] == batch_size(read_requests(tmp_path / "batch-09h" / "requests.jsonl")).annotations()
    job = batch_job_manifest("batch-09h", tmp_path, jobs[0][2], 8000)
    assert job["spec"]["suspend"] is True
    assert job["metadata"]["labels"] == {"llmscale.dev/deployment": "chat"}
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["llmscale", "batch", "run"]
    assert "--url=http://chat-batch:8000" in container["args"]
    assert job["spec"]["template"]["spec"]["volumes"][0]["hostPath"]["path"] == str(tmp_path)
    # Results written by a client are read back; a Job without results yet counts none.
    (tmp_path / "batch-09h" / "results.jsonl").write_text(
        '{"custom_id": "batch-09h-0000", "response": {"status_code": 200, "body": {"usage": {"completion_tokens": 64}}}}\n')
    assert batch_outcome(tmp_path, ["batch-09h", "batch-17h"], 5) == BatchOutcome(2, 10, 1, 1, 64)


def test_the_repository_is_found_from_below() -> None:
    assert find_repo(REPO / "operator" / "llmscale") == REPO


def test_a_folder_outside_the_repository_is_refused(tmp_path: Path) -> None:
    with pytest.raises(DemoError, match="no llmscale checkout"):
        find_repo(tmp_path)


def test_the_demo_keeps_its_state_in_the_checkout_or_else_where_it_runs(tmp_path: Path) -> None:
    """In a checkout the demo's .cluster/demo and out/ go to its root; outside one (an installed
    package) to the working directory: the local cluster and the trace ship with the package."""
    assert demo_home(REPO / "operator" / "llmscale") == REPO
    assert demo_home(tmp_path) == tmp_path.resolve()


# --------------------------------------------------------------------------- issue 25: the comparison


@pytest.mark.parametrize("minutes", [3.5, 7.0, 14.0, 60.0])
def test_the_cold_start_is_compressed_with_the_day(minutes: float) -> None:
    """The lead time the headroom covers is the same share of the day (so of its ramps) at every
    compression: cold start / day length is the real cold start / 24 h."""
    cfg = DemoConfig(minutes=minutes, cold_start_real_s=300.0)
    cold = compressed_cold_start(cfg)
    assert cold / (minutes * 60.0) == pytest.approx(300.0 / 86_400, rel=0.05)
    assert compressed_cold_start(DemoConfig(minutes=7.0)) == pytest.approx(1.46)
    # Never below what a pod can do (the mock engine's own start is about a second).
    assert compressed_cold_start(DemoConfig(minutes=1.0, cold_start_real_s=10.0)) == 0.5


def _demo_spec() -> Any:
    from llmscale.api import LLMDeploymentSpec

    opens = datetime(2026, 1, 1, 12, 6, tzinfo=UTC)
    manifest = demo_manifest(opens, opens.replace(minute=7), DemoConfig(minutes=14.0, headroom_replicas=3))
    return LLMDeploymentSpec.model_validate(manifest["spec"])  # what the API server would admit


def test_the_demos_llmdeployment_carries_the_compressed_cold_start() -> None:
    assert _demo_spec().headroom.cold_start_seconds == compressed_cold_start(DemoConfig(minutes=14.0, headroom_replicas=3))


def test_the_demos_llmdeployment_keeps_the_warm_replicas() -> None:
    assert _demo_spec().headroom.replicas == 3


def test_the_demos_batch_window_opens_when_asked() -> None:
    spec = _demo_spec()
    assert spec.batch is not None and spec.batch.windows[0].start == "12:06"


def test_the_rolling_p95_counts_a_request_without_a_first_token_as_late() -> None:
    sent = np.array([0.0, 1.0, 2.0, 40.0])
    ttft = np.array([0.1, 0.2, np.inf, 0.3])
    p95 = rolling_p95(sent, ttft, np.array([0.5, 2.0, 35.0, 45.0, 100.0]), window_s=30.0)
    assert p95[0] == pytest.approx(0.1)
    assert p95[1] == np.inf  # the failed request is within the 30 s before t = 2
    assert np.isnan(p95[2])  # (5, 35]: nothing sent
    assert p95[3] == pytest.approx(0.3)
    assert np.isnan(p95[4])  # nothing sent in the 30 s before t = 100


LIVE_SAMPLES = [Sample(t, 0.0, 0.0, 0.0, 0.0, 0.0, 2, 2, 1, 1, 1, 4, interactive_pods=n)
                for t, n in ((0.0, 2), (180.0, 3), (360.0, 3))]


def _live_side() -> Any:
    results = [_result(0.5, 0.5 + 99 * 0.05, 100), _result(3.0, 3.0 + 99 * 0.05, 100),
               RequestResult(500.0, 100, 10, 200, 1.0, 0.1, 10)]  # sent after the day: not counted
    return live_side(results, LIVE_SAMPLES, day_s=360.0, ttft_slo_s=2.0, itl_slo_s=0.1, gpus_per_replica=2)


def test_the_live_side_counts_the_days_requests() -> None:
    side = _live_side()
    assert side.mode == "live" and side.slo_attainment == pytest.approx(0.5)
    assert side.figures()["slo_attainment"] == 0.5
    assert live_side([], LIVE_SAMPLES, 360.0, 2.0, 0.1, 1).figures()["slo_attainment"] is None


def test_the_live_side_counts_the_interactive_pods_gpus() -> None:
    # 2 pods × 180 s + 3 pods × 180 s, 2 GPUs each: batch pods (gpus 4) are not counted.
    assert _live_side().gpu_hours == pytest.approx((2 * 180 + 3 * 180) * 2 / 3600)


def _simulated_one_minute_day() -> tuple[DemoConfig, dict[str, Any], float, list[Any]]:
    """A one-minute day at a small rate under llmscale, HPA and KEDA in the simulator."""
    cfg = DemoConfig(minutes=1.0, peak_rps=1.0)
    opens = datetime(2026, 1, 1, 12, 6, tzinfo=UTC)
    spec = demo_manifest(opens, opens.replace(minute=7), cfg)["spec"]
    base = _base(600)
    day, speedup = demo_trace(base, cfg, context_limit_tokens=2048)
    # The capacity given (the demo calibrates it, seconds of CPU): 0.75 requests/s per replica.
    capacity = Capacity(rate_rps=0.75, concurrency=4.8, running=4.7, waiting=0.02, minutes_meeting=1.0, replicas=4,
                        kv_cache_utilization=0.02)
    sides = simulated_sides(spec, day, speedup, base, ("llmscale", "hpa", "keda-queue"), capacity=capacity)
    return cfg, spec, speedup, sides


def test_the_same_day_runs_under_the_baselines_in_the_simulator() -> None:
    """Every side has figures and curves on the same wall time."""
    _, spec, _, sides = _simulated_one_minute_day()
    assert [(s.policy, s.mode) for s in sides] == [("llmscale", "simulated"), ("hpa", "simulated"),
                                                   ("keda-queue", "simulated")]
    for side in sides:
        assert 0.0 <= side.slo_attainment <= 1.0
        assert side.gpu_hours > 0 and side.t_s[-1] == pytest.approx(60.0)
        assert len(side.t_s) == len(side.replicas) == len(side.ttft_p95_s)
        assert np.all(side.replicas >= 1)
    assert "5 waiting requests" in sides[2].setting and sides[0].setting == ""
    assert "target 4.7 running requests" in sides[1].setting
    # The simulated day's GPU-hours lie between min and max replicas held all the day long.
    assert spec["replicas"]["min"] * 60 / 3600 <= sides[1].gpu_hours <= spec["replicas"]["max"] * 60 / 3600


def test_the_simulated_days_are_drawn_beside_the_live_run(tmp_path: Path) -> None:
    cfg, _, speedup, sides = _simulated_one_minute_day()
    samples = [Sample(t, 0.0, 0.0, 0.0, 0.0, 0.0, 3, 3, 2, 0, 0, 3, interactive_pods=3) for t in (0.0, 30.0, 60.0)]
    live = live_side([_result(0.2, 1.0, 20)], samples, 60.0, 2.0, 0.1, 1)
    path = plot_compare([live, *sides], tmp_path / "demo-compare.png", 2.0, cfg.minutes, speedup)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
