"""One pool's snapshot from a parsed fleet answer: every rule of llmscale.signals.assemble, named.

Each case states its whole input: the per-pod rows, which metric names each pod exports, the
per-pool values, the window and the live pods.
"""

from __future__ import annotations

from typing import Any

import pytest

from llmscale.signals import PoolTarget, RateWindow, SignalSnapshot, get_profile
from llmscale.signals.answer import UNATTRIBUTED, FleetAnswer
from llmscale.signals.assemble import assemble
from llmscale.signals.queries import POOL_GROUPS

POOL = PoolTarget("ml", "chat", "interactive")
VLLM = get_profile("vllm")
SGLANG = get_profile("sglang")
NOW = 1_700_000_000.0
EVAL = NOW - 1.0
# 15 s scrape, automatic 60 s window: a pod scraped through the window holds 4-5 samples, and is
# judged for a stall from ceil(0.5 × 60 / 15) + 1 = 3 samples (30 s) on.
WINDOW = RateWindow(window_s=60.0, promql="60s", scrape_interval_s=15.0, interval_source="targets", auto=True)


def busy(**changes: float | None) -> dict[str, float | None]:
    """A healthy, busy vLLM pod's row; ``None`` removes a signal from the answer."""
    row: dict[str, float | None] = {
        "queue_depth": 4.0,
        "running_requests": 30.0,
        "kv_cache_utilization": 0.6,
        "newest_sample_s": EVAL - 5.0,
        "samples_in_window": 5.0,
        "running_min": 20.0,
        "preemption_rate": 0.1,
        "request_rate": 2.0,
        "prompt_tokens_rate": 2000.0,
        "generation_tokens_rate": 400.0,
        "prefix_cache_hits_rate": 500.0,
        "prefix_cache_queries_rate": 2000.0,
        "prompt_tokens_sum_rate": 2000.0,
        "prompt_tokens_count_rate": 2.0,
        "generation_tokens_sum_rate": 400.0,
        "generation_tokens_count_rate": 2.0,
    }
    for key, value in changes.items():
        if value is None:
            row.pop(key)
        else:
            row[key] = value
    return row


POOL_VALUES = {
    "ttft_p95_s": 0.4,
    "itl_p95_s": 0.03,
    "prompt_tokens_p90": 1800.0,
    "prompt_tokens_p95": 1950.0,
    "generation_tokens_p90": 300.0,
    "generation_tokens_p95": 380.0,
    "ttft_observations_rate": 4.0,
    "itl_observations_rate": 800.0,
}


def fleet(
    rows: dict[str, dict[str, float | None]],
    absent: dict[str, set[str]] | None = None,
    pools: dict[str, float | None] | None = None,
    failed: dict[str, str] | None = None,
) -> FleetAnswer:
    """A parsed answer holding ``rows`` for POOL; every pod exports every metric but ``absent``."""
    return FleetAnswer(
        evaluated_at=EVAL,
        pods={POOL: rows},
        pools={POOL: dict(POOL_VALUES if pools is None else pools)},
        absent={POOL: absent or {}},
        failed=failed or {},
    )


def snap(
    answer: FleetAnswer, live: set[str] | None = None, window: RateWindow = WINDOW, **kw: Any
) -> SignalSnapshot:
    return assemble(POOL, kw.get("profile", VLLM), answer, window, NOW, live_pods=live)


def _healthy_pool() -> SignalSnapshot:
    return snap(
        fleet({"a": busy(), "b": busy(queue_depth=6.0, kv_cache_utilization=0.8, newest_sample_s=EVAL - 2)})
    )


def test_a_healthy_pool_sums_its_pods() -> None:
    s = _healthy_pool()
    assert (s.queue_depth, s.running_requests, s.kv_cache_utilization) == (10.0, 60.0, pytest.approx(0.7))
    assert s.preemption_rate == pytest.approx(0.2)
    assert (s.ttft_p95_s, s.itl_p95_s) == (0.4, 0.03)
    assert s.error is None and dict(s.unknown) == {}


def test_a_healthy_pool_counts_its_replicas() -> None:
    s = _healthy_pool()
    assert s.replicas_reporting == 2
    assert s.observed_at == EVAL - 2, "the newest sample of any contributing pod"
    assert [p.pod for p in s.pods] == ["a", "b"]


def test_a_healthy_pools_workload_mix_combines_its_pods() -> None:
    w = _healthy_pool().workload
    assert (w.request_rate, w.prompt_tokens_rate, w.generation_tokens_rate) == (4.0, 4000.0, 800.0)
    assert (w.prompt_tokens_mean, w.generation_tokens_mean) == (1000.0, 200.0)
    assert (w.prompt_tokens_p95, w.generation_tokens_p90) == (1950.0, 300.0)
    assert w.prefix_cache_hit_rate == pytest.approx(0.25)


# -- case 2 of issue 10: a counter that appears only after its first event -------------------------


def _absent_retractions() -> SignalSnapshot:
    absent = {"a": {"sglang:num_retracted_requests_total"}}
    return snap(fleet({"a": busy(preemption_rate=None)}, absent), profile=SGLANG)


def test_an_absent_counter_on_a_reporting_pod_reads_zero() -> None:
    s = _absent_retractions()
    assert s.preemption_rate == 0.0 and s.leading_known
    assert s.pods[0].preemption_rate == 0.0


def test_an_absent_counter_on_a_reporting_pod_is_named() -> None:
    assert _absent_retractions().absent_counters == ("sglang:num_retracted_requests_total",)


def test_absent_counter_on_one_pod_adds_nothing_to_the_others() -> None:
    absent = {"b": {"vllm:num_preemptions_total"}}
    s = snap(fleet({"a": busy(preemption_rate=0.5), "b": busy(preemption_rate=None)}, absent))
    assert s.preemption_rate == 0.5 and s.absent_counters == ("vllm:num_preemptions_total",)


def test_present_counter_without_a_rate_is_unknown_not_zero() -> None:
    # The counter exists but has one sample in the window (a pod a scrape old): no rate yet.
    s = snap(fleet({"a": busy(preemption_rate=None, samples_in_window=1.0)}))
    assert s.preemption_rate is None
    assert "fewer than two samples in the 60s window" in s.unknown["preemption_rate"]
    assert s.absent_counters == ()


def test_young_pod_without_a_rate_does_not_hide_the_others() -> None:
    s = snap(
        fleet({"a": busy(preemption_rate=0.3), "young": busy(preemption_rate=None, samples_in_window=1.0)})
    )
    assert s.preemption_rate == 0.3 and s.replicas_reporting == 2


def test_absent_gauge_is_never_zero() -> None:
    # A pod without the queue gauge is not reporting: nothing of it counts, nothing reads 0.
    s = snap(fleet({"a": busy(queue_depth=None)}))
    assert s.queue_depth is None and s.replicas_reporting == 0
    assert "no pod of ml/chat pool interactive exports vllm:num_requests_waiting" in s.unknown["queue_depth"]


# -- case 3: a window too short for the data ------------------------------------------------------


SHORT_WINDOW = RateWindow(
    window_s=60.0,
    promql="1m",
    scrape_interval_s=60.0,
    interval_source="targets",
    too_short=True,
    problem="rate window 1m is shorter than two scrape intervals",
)


def _read_in_a_too_short_window() -> SignalSnapshot:
    rows = {"a": busy(preemption_rate=None, request_rate=None, samples_in_window=1.0)}
    absent = {"a": {"vllm:num_preemptions_total"}}  # absent must not read 0 here
    return snap(fleet(rows, absent, pools={}), window=SHORT_WINDOW)


def test_a_too_short_window_empties_every_rate() -> None:
    s = _read_in_a_too_short_window()
    assert s.queue_depth == 4.0, "gauges need no window"
    assert s.preemption_rate is None and s.workload.request_rate is None and s.ttft_p95_s is None
    assert s.window is SHORT_WINDOW


def test_a_too_short_window_is_named_as_every_rates_reason() -> None:
    s = _read_in_a_too_short_window()
    for name in ("preemption_rate", "request_rate", "ttft_p95_s", "prompt_tokens_mean", "prompt_tokens_p95"):
        assert "shorter than two scrape intervals" in s.unknown[name], name


# -- case 5: series of pods that are gone ---------------------------------------------------------


def test_series_of_pods_not_in_the_api_server_are_ignored() -> None:
    gone = busy(queue_depth=10.0, kv_cache_utilization=0.97, newest_sample_s=EVAL - 200)
    rows = {"a": busy(queue_depth=1.0, kv_cache_utilization=0.3), "deleted": gone}
    s = snap(fleet(rows), live={"a"})
    assert (s.queue_depth, s.kv_cache_utilization, s.replicas_reporting) == (1.0, 0.3, 1)
    assert s.ignored_pods == ("deleted",) and [p.pod for p in s.pods] == ["a"]
    # Without the API server's pods (the old behaviour) the deleted pod counts.
    old = snap(fleet(rows))
    assert (old.queue_depth, old.replicas_reporting) == (11.0, 2)


def test_live_pod_without_series_is_silent() -> None:
    s = snap(fleet({"a": busy()}), live={"a", "new"})
    assert s.silent_pods == ("new",) and s.replicas_reporting == 1


def test_only_deleted_pods_report_gives_unknown_naming_them() -> None:
    s = snap(fleet({"deleted": busy()}), live={"a"})
    assert s.queue_depth is None and s.replicas_reporting == 0
    assert "series only of pods not in the API server: deleted" in s.unknown["queue_depth"]
    assert "(pods in the API server: a)" in s.unknown["queue_depth"]


def test_series_without_pod_label_are_named() -> None:
    s = snap(fleet({"": busy()}), live={"a"})
    assert s.queue_depth is None and s.error is not None and "without the 'pod' label" in s.error
    # Without live pods they are one anonymous replica, still named.
    anonymous = snap(fleet({"": busy()}))
    assert anonymous.queue_depth == 4.0 and anonymous.error is not None and "'pod' label" in anonymous.error


# -- case 6: an engine that hangs but keeps serving /metrics ---------------------------------------


FROZEN = busy(
    queue_depth=15.0,
    running_requests=106.0,
    running_min=106.0,
    kv_cache_utilization=0.9,
    generation_tokens_rate=0.0,
    prompt_tokens_rate=0.0,
    request_rate=0.0,
)


def _with_a_stalled_pod() -> SignalSnapshot:
    return snap(fleet({"healthy": busy(), "hung": FROZEN}), live={"healthy", "hung"})


def test_a_stalled_pod_is_named() -> None:
    s = _with_a_stalled_pod()
    assert s.stalled_pods == ("hung",)
    assert [p.stalled for p in s.pods] == [False, True]


def test_a_stalled_pod_is_left_out_of_every_aggregate() -> None:
    s = _with_a_stalled_pod()
    assert (s.queue_depth, s.running_requests, s.kv_cache_utilization) == (4.0, 30.0, 0.6)
    assert s.replicas_reporting == 1


def test_every_pod_stalled_gives_unknown_leading_signals() -> None:
    s = snap(fleet({"hung": FROZEN}))
    assert s.queue_depth is None and s.kv_cache_utilization is None and s.preemption_rate is None
    assert s.unknown["queue_depth"] == "every reporting pod is stalled: hung"
    assert s.replicas_reporting == 0 and s.stalled_pods == ("hung",)
    assert s.observed_at == FROZEN["newest_sample_s"]


def test_stall_judged_from_half_the_window() -> None:
    assert snap(fleet({"hung": {**FROZEN, "samples_in_window": 3.0}})).stalled_pods == ("hung",)


def test_stall_with_the_generation_counter_absent() -> None:
    absent = {"hung": {"vllm:generation_tokens_total"}}
    s = snap(fleet({"hung": busy(generation_tokens_rate=None, running_min=5.0)}, absent))
    assert s.stalled_pods == ("hung",)


@pytest.mark.parametrize(
    "row",
    [
        pytest.param(busy(running_min=0.0, generation_tokens_rate=0.0), id="idle-pod-is-not-stalled"),
        pytest.param(busy(running_min=3.0, generation_tokens_rate=0.5), id="slow-progress-is-not-a-stall"),
        pytest.param(
            busy(running_min=3.0, generation_tokens_rate=0.0, samples_in_window=2.0),
            id="pod-younger-than-the-window-is-not-judged",
        ),
        pytest.param(
            busy(running_min=3.0, generation_tokens_rate=None), id="unknown-progress-is-not-a-stall"
        ),
    ],
)
def test_not_a_stall(row: dict[str, float | None]) -> None:
    assert snap(fleet({"a": row})).stalled_pods == ()


def test_no_stall_check_without_the_scrape_interval() -> None:
    unknown = RateWindow(window_s=60.0, promql="60s", auto=True)
    assert snap(fleet({"hung": FROZEN}), window=unknown).stalled_pods == ()


# -- case 4 and the rest: every missing signal is named --------------------------------------------


def test_missing_latency_histogram_is_named_not_silently_off() -> None:
    absent = {"a": {"vllm:time_to_first_token_seconds"}}  # neither native nor _bucket
    s = snap(fleet({"a": busy()}, absent, pools={**POOL_VALUES, "ttft_p95_s": None}))
    assert s.ttft_p95_s is None
    assert "no vllm:time_to_first_token_seconds histogram" in s.unknown["ttft_p95_s"]
    assert "neither native series nor classic" in s.unknown["ttft_p95_s"]


def test_histogram_on_one_pod_is_enough_to_be_present() -> None:
    pools = {**POOL_VALUES}
    pools.pop("ttft_p95_s")
    s = snap(fleet({"a": busy(), "b": busy()}, {"b": {"vllm:time_to_first_token_seconds"}}, pools=pools))
    assert "no request observed in the 60s window" in s.unknown["ttft_p95_s"]


def test_failed_absence_query_reads_no_counter_as_zero() -> None:
    s = snap(fleet({"a": busy(preemption_rate=None)}, failed={"absent": "HTTP Status Code 422 (x)"}))
    assert s.preemption_rate is None and s.absent_counters == ()
    assert s.queue_depth == 4.0 and s.error is not None and "absent query failed" in s.error


def test_quantile_of_an_idle_window_is_unknown_for_that_reason() -> None:
    s = snap(fleet({"a": busy()}, pools={**POOL_VALUES, "ttft_p95_s": None, "ttft_observations_rate": 0.0}))
    assert s.ttft_p95_s is None and "no request observed" in s.unknown["ttft_p95_s"]
    # Nothing to measure is not a fault: the policy does not switch the latency guard off for it.
    assert s.quiet == ("ttft_p95_s",)


def test_missing_histogram_is_not_quiet() -> None:
    absent = {"a": {"vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds"}}
    s = snap(fleet({"a": busy()}, absent, pools={**POOL_VALUES, "ttft_p95_s": None, "itl_p95_s": None}))
    assert s.ttft_p95_s is None and s.itl_p95_s is None and s.quiet == ()


@pytest.mark.parametrize(
    ("group", "signals"),
    [
        pytest.param("pods", ("queue_depth", "kv_cache_utilization", "preemption_rate"), id="pods-query"),
        pytest.param("rates", ("preemption_rate", "request_rate"), id="rates-query"),
        pytest.param("ttft", ("ttft_p95_s",), id="ttft-query"),
        pytest.param("itl", ("itl_p95_s",), id="itl-query"),
        pytest.param("prompt", ("prompt_tokens_p95", "prompt_tokens_p90"), id="prompt-query"),
        pytest.param("generation", ("generation_tokens_p95",), id="generation-query"),
    ],
)
def test_failed_query_names_itself_on_its_signals(group: str, signals: tuple[str, ...]) -> None:
    answer = fleet(
        {} if group == "pods" else {"a": busy()}, failed={group: "HTTP Status Code 422 (too many samples)"}
    )
    if group == "pods":
        answer.absent = {}
    s = snap(answer)
    assert s.error is not None and f"{group} query failed: HTTP Status Code 422" in s.error
    for name in signals:
        assert f"{group} query failed" in s.unknown[name], name
    # Structured, for the fleet reader's carry (controller/signals/carry.py): which groups failed.
    assert s.failed_queries == (group,)


@pytest.mark.parametrize("group", list(POOL_GROUPS))
def test_a_failed_histogram_query_costs_only_its_own_signals(group: str) -> None:
    # Issue 14: the four per-pool quantiles were one query; when it passed the HTTP timeout every
    # pool lost TTFT, ITL and the token quantiles at once. Each histogram is a query of its own now.
    s = snap(fleet({"a": busy()}, failed={group: "Read timed out. (read timeout=5.0)"}))
    lost = {name for name, why in s.unknown.items() if "query failed" in why}
    assert lost == set(POOL_GROUPS[group]) - {"ttft_observations_rate", "itl_observations_rate"}
    mix = s.workload
    kept = {
        "ttft_p95_s": s.ttft_p95_s,
        "itl_p95_s": s.itl_p95_s,
        "prompt_tokens_p95": mix.prompt_tokens_p95,
        "prompt_tokens_p90": mix.prompt_tokens_p90,
        "generation_tokens_p95": mix.generation_tokens_p95,
        "generation_tokens_p90": mix.generation_tokens_p90,
    }
    assert all(value is not None for name, value in kept.items() if name not in lost), kept
    assert s.queue_depth is not None and s.preemption_rate is not None


def test_rejected_value_of_one_pod_makes_the_pool_gauge_unknown() -> None:
    answer = fleet({"a": busy(), "b": busy(queue_depth=None)})
    answer.pods[POOL]["b"]["queue_depth"] = None  # parse_answer rejected it (e.g. "lots")
    answer.problem(POOL, "queue_depth of pod 'b': value 'lots' is not a number")
    s = snap(answer)
    assert s.queue_depth is None and s.unknown["queue_depth"] == "unknown on pod b (see the error)"
    assert s.running_requests == 60.0 and s.error is not None and "'lots'" in s.error
    assert s.failed_queries == (), "a rejected value is an answer, not a failed query (never carried over)"


def test_unattributed_problems_reach_every_pool() -> None:
    answer = fleet({"a": busy()})
    answer.problem(UNATTRIBUTED, "ignored malformed series 'junk'")
    assert "malformed series" in (snap(answer).error or "")


def test_profile_without_a_metric_says_so() -> None:
    from dataclasses import replace

    bare = replace(VLLM, preemptions_total=None, prompt_tokens_histogram=None)
    s = assemble(POOL, bare, fleet({"a": busy()}), WINDOW, NOW)
    assert s.unknown["preemption_rate"] == "profile vllm has no counter for it"
    assert s.unknown["prompt_tokens_p95"] == "profile vllm has no histogram for it"


# -- the workload mix -----------------------------------------------------------------------------


def test_mean_lengths_fall_back_to_the_counters_without_histograms() -> None:
    rows = {"a": busy(prompt_tokens_sum_rate=None, prompt_tokens_count_rate=None, prompt_tokens_rate=3000.0)}
    absent = {"a": {"vllm:request_prompt_tokens"}}
    s = snap(fleet(rows, absent, pools={**POOL_VALUES, "prompt_tokens_p95": None}))
    assert s.workload.prompt_tokens_mean == 1500.0  # 3000 tokens/s over 2 requests/s
    assert "no vllm:request_prompt_tokens histogram" in s.unknown["prompt_tokens_p95"]


def _idle_pool() -> SignalSnapshot:
    idle = busy(
        request_rate=0.0,
        prompt_tokens_rate=0.0,
        generation_tokens_rate=0.0,
        prefix_cache_hits_rate=0.0,
        prefix_cache_queries_rate=0.0,
        prompt_tokens_sum_rate=0.0,
        prompt_tokens_count_rate=0.0,
        generation_tokens_sum_rate=0.0,
        generation_tokens_count_rate=0.0,
        running_min=0.0,
    )
    return snap(fleet({"a": idle}, pools={"ttft_observations_rate": 0.0, "itl_observations_rate": 0.0}))


def test_an_idle_pool_has_known_zero_rates() -> None:
    s = _idle_pool()
    assert s.workload.request_rate == 0.0 and s.workload.generation_tokens_rate == 0.0


def test_an_idle_pool_has_unknown_lengths() -> None:
    s = _idle_pool()
    assert s.workload.prompt_tokens_mean is None
    assert "no request finished in the 60s window" in s.unknown["prompt_tokens_mean"]
    assert "no prefix-cache lookup" in s.unknown["prefix_cache_hit_rate"]


def test_prefix_hit_rate_gauge_is_the_fallback_of_old_engines() -> None:
    legacy = get_profile("vllm-legacy")
    no_counters = {"vllm:gpu_prefix_cache_hits_total", "vllm:gpu_prefix_cache_queries_total"}
    rows = {
        "a": busy(
            prefix_cache_hits_rate=None, prefix_cache_queries_rate=None, prefix_cache_hit_rate_gauge=0.4
        ),
        "b": busy(
            prefix_cache_hits_rate=None, prefix_cache_queries_rate=None, prefix_cache_hit_rate_gauge=0.2
        ),
    }
    s = assemble(POOL, legacy, fleet(rows, {"a": no_counters, "b": no_counters}), WINDOW, NOW)
    assert s.workload.prefix_cache_hit_rate == pytest.approx(0.3)


def test_snapshot_without_new_fields_still_builds() -> None:
    # The simulator builds snapshots by keyword with the first six signals only.
    s = SignalSnapshot(observed_at=1.0, queue_depth=float("nan"), replicas_reporting=2)
    assert s.queue_depth is None and s.workload.request_rate is None and dict(s.unknown) == {}
    assert s.window is None and s.pods == () and s == SignalSnapshot(observed_at=1.0, replicas_reporting=2)


# -- a sleeping engine (vLLM's sleep mode): neither idle capacity nor a failure ---------------------


ASLEEP = busy(queue_depth=0.0, running_requests=0.0, running_min=0.0, kv_cache_utilization=0.0,
              generation_tokens_rate=0.0, prompt_tokens_rate=0.0, request_rate=0.0, asleep=1.0)


SLEEPING_CASES = pytest.mark.parametrize(("pods", "reporting", "queue", "sleeping", "stalled"), [
    pytest.param({"awake": busy(), "slept": ASLEEP}, 1, 4.0, ("slept",), (), id="one-of-two-asleep"),
    pytest.param({"awake": busy(asleep=0.0), "slept": ASLEEP}, 1, 4.0, ("slept",), (), id="awake-reads-zero"),
    pytest.param({"awake": busy(), "hung": FROZEN, "slept": ASLEEP}, 1, 4.0, ("slept",), ("hung",),
                 id="asleep-beside-stalled"),
    pytest.param({"slept": ASLEEP}, 0, None, ("slept",), (), id="all-asleep"),
    pytest.param({"slept": ASLEEP, "hung": FROZEN}, 0, None, ("slept",), ("hung",), id="asleep-or-stalled"),
])


@SLEEPING_CASES
def test_a_sleeping_engine_is_left_out_of_capacity(
    pods: dict[str, dict[str, float | None]], reporting: int, queue: float | None,
    sleeping: tuple[str, ...], stalled: tuple[str, ...],
) -> None:
    s = snap(fleet(pods), live=set(pods))
    assert (s.replicas_reporting, s.queue_depth, s.sleeping_pods) == (reporting, queue, sleeping)
    if queue is None:
        # Every gauge unknown, with the reason: replicas hold (not idle, not failed).
        assert s.unknown["queue_depth"].startswith("every reporting pod sleeps or is stalled: asleep slept")
        assert s.kv_cache_utilization is None


@SLEEPING_CASES
def test_a_sleeping_engine_is_never_judged_failed(
    pods: dict[str, dict[str, float | None]], reporting: int, queue: float | None,
    sleeping: tuple[str, ...], stalled: tuple[str, ...],
) -> None:
    assert snap(fleet(pods), live=set(pods)).stalled_pods == stalled
