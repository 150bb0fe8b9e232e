"""Bridging failed scrapes (:func:`llmscale.signals.answer.bridge_missed_scrapes`): the pure rule.

A live pod whose instant gauges vanished keeps its last samples for up to the bound, with their own
time; a pod out of the API server, older than the bound, or in a pool read without live pods is
never bridged. The same against a real Prometheus: ``test_real_prometheus.py``.
"""

from __future__ import annotations

import pytest

from llmscale.signals.answer import FleetAnswer, GaugeMemory, bridge_missed_scrapes
from llmscale.signals.assemble import assemble
from llmscale.signals.profiles import get_profile
from llmscale.signals.queries import PoolTarget, SelectorLabels
from llmscale.signals.snapshot import RateWindow

POOL = PoolTarget("ml", "chat", "interactive")
WINDOW = RateWindow(window_s=60.0, promql="60s", scrape_interval_s=1.0, interval_source="targets")


def gauges(t: float, queue: float) -> dict[str, float | None]:
    return {"queue_depth": queue, "running_requests": 4.0, "kv_cache_utilization": 0.5, "newest_sample_s": t,
            "samples_in_window": 60.0, "running_min": 1.0}


def answer_at(t: float, **rows: dict[str, float | None]) -> FleetAnswer:
    return FleetAnswer(evaluated_at=t, pods={POOL: dict(rows)}, asked=frozenset({"pods"}))


def test_a_live_pod_missing_one_scrape_keeps_its_last_samples_with_their_time() -> None:
    memory: GaugeMemory = {}
    assert bridge_missed_scrapes(answer_at(100.0, a=gauges(100.0, 3), b=gauges(100.0, 2)), memory, {POOL: {"a", "b"}}, 3.0) == {}
    # B's scrape failed: only its range reads are left.
    later = answer_at(101.5, a=gauges(101.0, 3), b={"samples_in_window": 60.0, "running_min": 1.0})
    assert bridge_missed_scrapes(later, memory, {POOL: {"a", "b"}}, 3.0) == {POOL: ["b"]}
    assert later.pods[POOL]["b"]["queue_depth"] == 2 and later.pods[POOL]["b"]["newest_sample_s"] == 100.0
    snap = assemble(POOL, get_profile("vllm"), later, WINDOW, 101.5, SelectorLabels(), {"a", "b"})
    assert snap.replicas_reporting == 2 and snap.queue_depth == 5.0 and snap.silent_pods == ()
    assert snap.observed_at == 101.0, "the age is the newest real sample's"


@pytest.mark.parametrize(("now", "bridged"), [(102.9, True), (103.0, True), (103.1, False), (160.0, False)])
def test_the_bridge_ends_at_the_bound(now: float, bridged: bool) -> None:
    memory: GaugeMemory = {}
    bridge_missed_scrapes(answer_at(100.0, b=gauges(100.0, 2)), memory, {POOL: {"b"}}, 3.0)
    later = answer_at(now)
    assert bool(bridge_missed_scrapes(later, memory, {POOL: {"b"}}, 3.0)) is bridged
    assert ("queue_depth" in later.pods[POOL].get("b", {})) is bridged
    assert bool(memory) is bridged, "an expired pod is forgotten"


def test_a_pod_gone_from_the_api_server_is_not_bridged_and_is_forgotten() -> None:
    memory: GaugeMemory = {}
    bridge_missed_scrapes(answer_at(100.0, a=gauges(100.0, 3), b=gauges(100.0, 2)), memory, {POOL: {"a", "b"}}, 3.0)
    later = answer_at(101.0, a=gauges(101.0, 3))
    assert bridge_missed_scrapes(later, memory, {POOL: {"a"}}, 3.0) == {}
    assert "b" not in later.pods[POOL] and set(memory[POOL]) == {"a"}


@pytest.mark.parametrize(("live", "bound"), [(None, 3.0), ({"b"}, 0.0)])
def test_no_bridge_without_live_pods_or_a_bound(live: set[str] | None, bound: float) -> None:
    memory: GaugeMemory = {}
    bridge_missed_scrapes(answer_at(100.0, b=gauges(100.0, 2)), memory, {POOL: live}, bound)
    later = answer_at(101.0)
    assert bridge_missed_scrapes(later, memory, {POOL: live}, bound) == {}
    assert later.pods[POOL] == {} and memory == {}


def test_a_failed_pods_query_bridges_nothing_and_keeps_the_memory() -> None:
    memory: GaugeMemory = {}
    bridge_missed_scrapes(answer_at(100.0, b=gauges(100.0, 2)), memory, {POOL: {"b"}}, 3.0)
    failed = answer_at(101.0)
    failed.failed["pods"] = "timed out"
    assert bridge_missed_scrapes(failed, memory, {POOL: {"b"}}, 3.0) == {}
    assert failed.pods[POOL] == {} and memory[POOL]["b"]["queue_depth"] == 2
