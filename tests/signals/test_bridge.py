"""Bridging failed scrapes (:func:`llmscale.signals.answer.bridge_missed_scrapes`): the pure rule.

A live pod whose instant gauges vanished after a slow (timed-out) scrape keeps its last samples,
and the metrics it lacked, for up to the bound, with their own time; a pod refused fast, out of the
API server, older than the bound, or in a pool read without live pods is never bridged. The same
against a real Prometheus: ``test_real_prometheus.py``.
"""

from __future__ import annotations

import pytest

from llmscale.signals.answer import FAILED_FAST_S, FleetAnswer, GaugeMemory, bridge_missed_scrapes
from llmscale.signals.assemble import assemble
from llmscale.signals.profiles import get_profile
from llmscale.signals.queries import PoolTarget, SelectorLabels
from llmscale.signals.snapshot import RateWindow

POOL = PoolTarget("ml", "chat", "interactive")
WINDOW = RateWindow(window_s=60.0, promql="60s", scrape_interval_s=1.0, interval_source="targets")
LIVE = {POOL: {"a", "b"}}
TIMED_OUT = {"samples_in_window": 60.0, "running_min": 1.0, "last_scrape_s": 1.0}


def gauges(t: float, queue: float | None) -> dict[str, float | None]:
    return {"queue_depth": queue, "running_requests": 4.0, "kv_cache_utilization": 0.5, "newest_sample_s": t,
            "samples_in_window": 60.0, "running_min": 1.0, "last_scrape_s": 0.01}


def answer_at(t: float, **rows: dict[str, float | None]) -> FleetAnswer:
    return FleetAnswer(evaluated_at=t, pods={POOL: dict(rows)}, asked=frozenset({"pods"}))


def remembered(memory: GaugeMemory, pod: str = "b") -> float | None:
    return memory[POOL][pod].row["newest_sample_s"]


def test_a_live_pod_whose_scrape_timed_out_keeps_its_last_samples_with_their_time() -> None:
    memory: GaugeMemory = {}
    assert bridge_missed_scrapes(answer_at(100.0, a=gauges(100.0, 3), b=gauges(100.0, 2)), memory, LIVE, 4.0) == {}
    later = answer_at(101.5, a=gauges(101.0, 3), b=dict(TIMED_OUT))  # only B's range reads are left
    assert bridge_missed_scrapes(later, memory, LIVE, 4.0) == {POOL: ["b"]}
    assert later.pods[POOL]["b"]["queue_depth"] == 2 and later.pods[POOL]["b"]["newest_sample_s"] == 100.0
    snap = assemble(POOL, get_profile("vllm"), later, WINDOW, 101.5, SelectorLabels(), {"a", "b"})
    assert snap.replicas_reporting == 2 and snap.queue_depth == 5.0 and snap.silent_pods == ()
    assert snap.bridged_pods == ("b",)
    assert snap.observed_at == 101.0, "the age is the newest real sample's"


def test_every_pod_bridged_the_snapshot_is_as_old_as_their_last_samples() -> None:
    memory: GaugeMemory = {}
    bridge_missed_scrapes(answer_at(100.0, a=gauges(99.0, 3), b=gauges(100.0, 2)), memory, LIVE, 4.0)
    later = answer_at(102.0, a=dict(TIMED_OUT), b=dict(TIMED_OUT))
    bridge_missed_scrapes(later, memory, LIVE, 4.0)
    snap = assemble(POOL, get_profile("vllm"), later, WINDOW, 102.0, SelectorLabels(), {"a", "b"})
    assert snap.observed_at == 100.0 and snap.bridged_pods == ("a", "b") and snap.queue_depth == 5.0


@pytest.mark.parametrize(("now", "bridged"), [(103.9, True), (104.0, True), (104.1, False), (160.0, False)])
def test_the_bridge_ends_at_the_bound(now: float, bridged: bool) -> None:
    memory: GaugeMemory = {}
    bridge_missed_scrapes(answer_at(100.0, b=gauges(100.0, 2)), memory, {POOL: {"b"}}, 4.0)
    later = answer_at(now, b=dict(TIMED_OUT))
    assert bool(bridge_missed_scrapes(later, memory, {POOL: {"b"}}, 4.0)) is bridged
    assert ("queue_depth" in later.pods[POOL]["b"]) is bridged
    assert bool(memory) is bridged, "an expired pod is forgotten"


def test_consecutive_failed_reads_never_extend_the_bridge() -> None:
    memory: GaugeMemory = {}
    bridge_missed_scrapes(answer_at(100.0, b=gauges(100.0, 2)), memory, {POOL: {"b"}}, 4.0)
    for t in (101.0, 102.0, 103.0, 104.0):
        assert bridge_missed_scrapes(answer_at(t, b=dict(TIMED_OUT)), memory, {POOL: {"b"}}, 4.0) == {POOL: ["b"]}
        assert remembered(memory) == 100.0, "a bridged row is not remembered as news"
    assert bridge_missed_scrapes(answer_at(104.5, b=dict(TIMED_OUT)), memory, {POOL: {"b"}}, 4.0) == {}


@pytest.mark.parametrize(("last_scrape_s", "bridged"), [(0.002, False), (FAILED_FAST_S - 0.01, False),
                                                        (FAILED_FAST_S, True), (10.0, True), (None, True)])
def test_a_scrape_refused_fast_is_an_engine_down_not_bridged(last_scrape_s: float | None, bridged: bool) -> None:
    memory: GaugeMemory = {}
    bridge_missed_scrapes(answer_at(100.0, b=gauges(100.0, 2)), memory, {POOL: {"b"}}, 4.0)
    row = {"samples_in_window": 60.0} if last_scrape_s is None else {"last_scrape_s": last_scrape_s}
    later = answer_at(101.0, b=row)
    assert bool(bridge_missed_scrapes(later, memory, {POOL: {"b"}}, 4.0)) is bridged
    assert ("queue_depth" in later.pods[POOL]["b"]) is bridged


def test_the_metrics_a_pod_lacked_are_kept_through_the_bridge() -> None:
    memory: GaugeMemory = {}
    first = answer_at(100.0, b=gauges(100.0, 2))
    first.absent[POOL] = {"b": {"vllm:num_preemptions_total"}}
    bridge_missed_scrapes(first, memory, {POOL: {"b"}}, 4.0)
    later = answer_at(101.0, b=dict(TIMED_OUT))
    bridge_missed_scrapes(later, memory, {POOL: {"b"}}, 4.0)
    assert later.absent[POOL]["b"] == {"vllm:num_preemptions_total"}


def test_a_rejected_queue_value_is_not_remembered() -> None:
    memory: GaugeMemory = {}
    bridge_missed_scrapes(answer_at(100.0, b=gauges(99.0, 2)), memory, {POOL: {"b"}}, 4.0)
    bridge_missed_scrapes(answer_at(101.0, b=gauges(100.0, None)), memory, {POOL: {"b"}}, 4.0)
    assert memory[POOL]["b"].row["queue_depth"] == 2 and remembered(memory) == 99.0


def test_a_read_that_finished_late_does_not_replace_a_newer_sample() -> None:
    memory: GaugeMemory = {}
    bridge_missed_scrapes(answer_at(101.0, b=gauges(101.0, 5)), memory, {POOL: {"b"}}, 4.0)
    bridge_missed_scrapes(answer_at(100.0, b=gauges(100.0, 2)), memory, {POOL: {"b"}}, 4.0)
    assert memory[POOL]["b"].row["queue_depth"] == 5 and remembered(memory) == 101.0


def test_a_pod_gone_from_the_api_server_is_forgotten_unbridged() -> None:
    memory: GaugeMemory = {}
    bridge_missed_scrapes(answer_at(100.0, a=gauges(100.0, 3), b=gauges(100.0, 2)), memory, LIVE, 4.0)
    later = answer_at(101.0, a=gauges(101.0, 3), b=dict(TIMED_OUT))
    assert bridge_missed_scrapes(later, memory, {POOL: {"a"}}, 4.0) == {}
    assert "queue_depth" not in later.pods[POOL]["b"] and set(memory[POOL]) == {"a"}


def test_pools_no_longer_read_are_forgotten_once_their_samples_age_out() -> None:
    memory: GaugeMemory = {}
    other = PoolTarget("ml", "gone", "interactive")
    first = answer_at(100.0, b=gauges(100.0, 2))
    first.pods[other] = {"x": gauges(100.0, 1)}
    bridge_missed_scrapes(first, memory, {POOL: {"b"}, other: {"x"}}, 4.0)
    bridge_missed_scrapes(answer_at(102.0, b=gauges(102.0, 2)), memory, {POOL: {"b"}}, 4.0)
    assert other in memory, "within the bound a pool read apart (scaleTargetRef) keeps its memory"
    bridge_missed_scrapes(answer_at(105.0, b=gauges(105.0, 2)), memory, {POOL: {"b"}}, 4.0)
    assert other not in memory


@pytest.mark.parametrize(("live", "bound"), [(None, 4.0), ({"b"}, 0.0)])
def test_no_bridge_without_live_pods_or_a_bound(live: set[str] | None, bound: float) -> None:
    memory: GaugeMemory = {}
    bridge_missed_scrapes(answer_at(100.0, b=gauges(100.0, 2)), memory, {POOL: live}, bound)
    later = answer_at(101.0, b=dict(TIMED_OUT))
    assert bridge_missed_scrapes(later, memory, {POOL: live}, bound) == {}
    assert "queue_depth" not in later.pods[POOL]["b"]


def test_a_failed_pods_query_leaves_the_memory_unused() -> None:
    memory: GaugeMemory = {}
    bridge_missed_scrapes(answer_at(100.0, b=gauges(100.0, 2)), memory, {POOL: {"b"}}, 4.0)
    failed = answer_at(101.0)
    failed.failed["pods"] = "timed out"
    assert bridge_missed_scrapes(failed, memory, {POOL: {"b"}}, 4.0) == {}
    assert failed.pods[POOL] == {} and memory[POOL]["b"].row["queue_depth"] == 2
