"""What the snapshot says about the signals themselves (``llmscale.policy.signal_health``), and how
``decide`` words it: every unknown signal named with its reason, never ``MetricsFresh`` while one
the policy uses is unknown; the stalled-engine and rate-window conditions; the latency guard's
window from the snapshot.

Every case states its snapshot in full; the spec is the scenarios' (targets queue 3, KV 0.75,
headroom 1, replicas 1–16, SLO TTFT 2 s / ITL 100 ms).
"""

from __future__ import annotations

import pytest

from llmscale.api import (
    HeadroomSpec,
    LLMDeploymentSpec,
    ModelSpec,
    ReplicasSpec,
    ScalingBehavior,
    ScalingSpec,
    ScalingTargets,
)
from llmscale.policy import PolicyMemory, PoolState, Reason, decide
from llmscale.policy.signal_health import (
    LATENCY_WINDOW_S,
    engines_stalled_condition,
    latency_window_s,
    rate_window_condition,
    why_unknown,
)
from llmscale.signals.snapshot import RateWindow, SignalSnapshot

NOW = 1_717_416_000.0
R = Reason
FITS = RateWindow(60.0, "60s", 15.0, "targets", auto=True)
SLOW_SCRAPE = RateWindow(240.0, "240s", 60.0, "targets", auto=True)
TOO_SHORT = RateWindow(
    60.0, "1m", 60.0, "set", too_short=True,
    problem="rate window 1m is shorter than two scrape intervals (60 s, from targets): rate() cannot find two samples",
)
BELOW_ADVICE = RateWindow(60.0, "1m", 20.0, "targets", problem="rate window 1m spans fewer than 4 scrape intervals")
NO_INTERVAL = RateWindow(60.0, "60s", None, "unknown", auto=True)
NO_HISTOGRAM = (
    "no vllm:time_to_first_token_seconds histogram: neither native series nor classic "
    "vllm:time_to_first_token_seconds_bucket series on any reporting pod"
)


def spec() -> LLMDeploymentSpec:
    return LLMDeploymentSpec(
        model=ModelSpec(name="chat", preset="llama-3.1-8b"),
        replicas=ReplicasSpec(min=1, max=16),
        headroom=HeadroomSpec(replicas=1, cold_start_seconds=180.0, growth_factor=0.0),
        scaling=ScalingSpec(
            targets=ScalingTargets(queue_depth_per_replica=3.0, kv_cache_utilization=0.75),
            scale_up=ScalingBehavior(stabilization_window_seconds=0),
        ),
    )


def snap(**fields: object) -> SignalSnapshot:
    """A healthy two-replica snapshot (queue 0, KV 0.3, no preemption, TTFT 0.4 s, ITL 30 ms, the
    usual 60 s window at a 15 s scrape), with ``fields`` replaced."""
    base: dict[str, object] = {
        "observed_at": NOW - 5, "queue_depth": 0.0, "running_requests": 2.0, "kv_cache_utilization": 0.3,
        "preemption_rate": 0.0, "ttft_p95_s": 0.4, "itl_p95_s": 0.03, "replicas_reporting": 2, "window": FITS,
    }
    base.update(fields)
    return SignalSnapshot(**base)  # type: ignore[arg-type]


def metrics_available(s: SignalSnapshot) -> tuple[str, Reason, str]:
    d = decide(spec(), [s], PoolState(2, 2), PolicyMemory(), NOW)
    cond = d.metrics_available
    assert isinstance(cond.reason, Reason)
    return cond.status, cond.reason, cond.message


@pytest.mark.parametrize(
    ("s", "status", "reason", "named"),
    [
        pytest.param(snap(), "True", R.MetricsFresh, [], id="all-known-is-fresh"),
        # No request in the window: no p95 to measure, and nothing for the guard to judge.
        pytest.param(snap(ttft_p95_s=None, itl_p95_s=None, quiet=("itl_p95_s", "ttft_p95_s"),
                          unknown={"ttft_p95_s": "no request observed in the 60s window",
                                   "itl_p95_s": "no request observed in the 60s window"}),
                     "True", R.MetricsFresh, [], id="idle-window-is-still-fresh"),
        # Case 4 of issue 10: the latency histograms are not there; the guard is off and said so.
        pytest.param(snap(ttft_p95_s=None, itl_p95_s=None,
                          unknown={"ttft_p95_s": NO_HISTOGRAM, "itl_p95_s": NO_HISTOGRAM}),
                     "True", R.LatencyUnknown,
                     ["TTFT p95, ITL p95 unknown: no vllm:time_to_first_token_seconds histogram",
                      "the latency guard is off"],
                     id="missing-histograms-turn-the-guard-off"),
        pytest.param(snap(itl_p95_s=None, unknown={"itl_p95_s": "pools query failed: HTTP 422"}),
                     "True", R.LatencyUnknown, ["ITL p95 unknown: pools query failed: HTTP 422"],
                     id="one-failed-quantile-is-named"),
        # A leading signal unknown and the latency too: MetricsPartial names both, with reasons.
        pytest.param(snap(preemption_rate=None, ttft_p95_s=None, itl_p95_s=None,
                          unknown={"preemption_rate": TOO_SHORT.problem, "ttft_p95_s": TOO_SHORT.problem,
                                   "itl_p95_s": TOO_SHORT.problem}, window=TOO_SHORT),
                     "True", R.MetricsPartial,
                     [f"preemption rate unknown: {TOO_SHORT.problem}", "scaling up only, on queue depth",
                      f"TTFT p95, ITL p95 unknown: {TOO_SHORT.problem}: the latency guard is off"],
                     id="window-too-short-names-every-rate"),
        # Every leading signal unknown for one reason: one clause, and a hold.
        pytest.param(snap(queue_depth=None, kv_cache_utilization=None, preemption_rate=None, replicas_reporting=0,
                          unknown={k: "every reporting pod is stalled: chat-a, chat-b"
                                   for k in ("queue_depth", "kv_cache_utilization", "preemption_rate")}),
                     "False", R.MetricsMissing,
                     ["queue depth, KV-cache utilisation, preemption rate unknown: every reporting pod is stalled"],
                     id="every-pod-stalled-holds-and-names-them"),
        # No reason recorded (a source that does not say): the snapshot's error stands in.
        pytest.param(snap(kv_cache_utilization=None, error="pods query failed: timeout"),
                     "True", R.MetricsPartial, ["KV-cache utilisation unknown: pods query failed: timeout"],
                     id="error-stands-in-for-a-missing-reason"),
    ],
)
def test_metrics_available_names_each_unknown_signal_with_its_reason(
    s: SignalSnapshot, status: str, reason: Reason, named: list[str]
) -> None:
    got_status, got_reason, message = metrics_available(s)
    assert (got_status, got_reason) == (status, reason), message
    for text in named:
        assert text in message, message


def test_why_unknown_groups_signals_of_one_reason() -> None:
    s = SignalSnapshot(NOW, unknown={"queue_depth": "a", "kv_cache_utilization": "a", "preemption_rate": "b"})
    assert why_unknown(s, ["queue depth", "KV-cache utilisation", "preemption rate"]) == (
        "queue depth, KV-cache utilisation unknown: a; preemption rate unknown: b"
    )
    assert why_unknown(None, ["queue depth"]) == "queue depth unknown: no snapshot"


@pytest.mark.parametrize(
    ("s", "status", "reason", "named"),
    [
        pytest.param(snap(stalled_pods=("chat-hung",)), "True", R.StalledPods, "pod chat-hung:", id="stalled"),
        pytest.param(snap(stalled_pods=("chat-a", "chat-b")), "True", R.StalledPods, "pod chat-a, chat-b:",
                     id="each-stalled-pod-named"),
        pytest.param(snap(), "False", R.NoStalledPods, "60s window", id="none"),
        pytest.param(snap(window=NO_INTERVAL), "Unknown", R.StallCheckOff, "--prometheus-scrape-interval",
                     id="interval-unknown"),
        pytest.param(snap(window=TOO_SHORT), "Unknown", R.StallCheckOff, "too short", id="window-too-short"),
        pytest.param(snap(window=None), "Unknown", R.StallCheckOff, "no rate window", id="no-window"),
        pytest.param(None, "Unknown", R.StallCheckOff, "no rate window", id="no-snapshot"),
    ],
)
def test_engines_stalled_condition(s: SignalSnapshot | None, status: str, reason: Reason, named: str) -> None:
    cond = engines_stalled_condition(s)
    assert (cond.status, cond.reason) == (status, reason)
    assert named in cond.message


@pytest.mark.parametrize(
    ("s", "status", "reason", "named"),
    [
        pytest.param(snap(), "True", R.WindowFits, "spans 4 scrape intervals of 15 s", id="fits"),
        pytest.param(snap(window=TOO_SHORT), "False", R.WindowTooShort, "shorter than two", id="too-short"),
        pytest.param(snap(window=BELOW_ADVICE), "False", R.WindowBelowAdvice, "fewer than 4", id="below-advice"),
        pytest.param(snap(window=NO_INTERVAL), "Unknown", R.ScrapeIntervalUnknown, "unchecked",
                     id="interval-unknown"),
        pytest.param(snap(window=None), "Unknown", R.ScrapeIntervalUnknown, "no rate window", id="no-window"),
    ],
)
def test_rate_window_condition(s: SignalSnapshot, status: str, reason: Reason, named: str) -> None:
    cond = rate_window_condition(s)
    assert (cond.status, cond.reason) == (status, reason)
    assert named in cond.message


def test_a_stalled_pod_never_drives_a_scale_up_nor_lets_the_pool_shrink() -> None:
    # The reader left chat-hung's frozen busy gauges out: the pool's signals are the healthy pod's
    # (queue 0, KV 0.05). Demand 1 by KV would shrink 3 → 2; the hung pod holds it at 3.
    s = snap(kv_cache_utilization=0.05, replicas_reporting=2, stalled_pods=("chat-hung",))
    # The memory has seen the whole scale-down window (missing history would hold the size too).
    d = decide(spec(), [s], PoolState(3, 3), PolicyMemory(since=NOW - 3600), NOW)
    assert (d.interactive_replicas, d.scaling_limited.reason, d.clamped_by) == (3, R.StalledPods, R.StalledPods)
    assert "pod chat-hung stalled: no scale-down while an engine hangs" in d.scaling_limited.message
    # Load on the healthy pods still adds replicas: 12 / 3 = 4 + 1 = 5.
    d = decide(spec(), [snap(queue_depth=12.0, stalled_pods=("chat-hung",))], PoolState(3, 3), PolicyMemory(), NOW)
    assert d.interactive_replicas == 5


@pytest.mark.parametrize(
    ("window", "last_up_ago", "fires"),
    [
        pytest.param(FITS, 90.0, True, id="60s-window-90s-after-the-last-scale-up"),
        # At a 60 s scrape the p95 spans 240 s: 90 s after a scale-up the new replica is not in it yet.
        pytest.param(SLOW_SCRAPE, 90.0, False, id="240s-window-waits"),
        pytest.param(SLOW_SCRAPE, 250.0, True, id="240s-window-after-the-window"),
        pytest.param(None, 50.0, False, id="no-window-reported-uses-60s"),
    ],
)
def test_latency_guard_waits_for_the_snapshots_own_window(
    window: RateWindow | None, last_up_ago: float, fires: bool
) -> None:
    # TTFT 3 s > SLO 2 s with the leading signals quiet: the guard proposes current demand + 1.
    s = snap(ttft_p95_s=3.0, window=window)
    memory = PolicyMemory(scale_events=((NOW - last_up_ago, 1),))
    d = decide(spec(), [s], PoolState(2, 2), memory, NOW)
    assert (d.interactive_replicas == 3) is fires, d.reasons
    if not fires:
        assert any(f"inside the {latency_window_s(s):.0f} s window" in line for line in d.reasons), d.reasons
    # The memory keeps the scale events as long as the guard reads them.
    assert (NOW - last_up_ago, 1) in d.memory.scale_events or last_up_ago >= latency_window_s(s)


def test_latency_window_defaults_to_a_minute() -> None:
    assert latency_window_s(None) == latency_window_s(SignalSnapshot(NOW)) == LATENCY_WINDOW_S == 60.0
    assert latency_window_s(snap(window=SLOW_SCRAPE)) == 240.0
