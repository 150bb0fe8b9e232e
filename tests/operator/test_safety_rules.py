"""The pure rules behind issue 11's pod and cluster cases: deletion costs, other autoscalers, live
Kopf peers, names, the ChildrenApplied condition. The same cases against a real API server are in
tests/cluster/test_shared_cluster.py."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from llmscale.controller.applyfailure import applied_condition
from llmscale.controller.autoscalers import sole_autoscaler_condition
from llmscale.controller.indexes import index_hpas, index_pod_costs, index_scaled_objects, other_autoscalers
from llmscale.controller.peers import live_peers
from llmscale.controller.spec import InvalidSpec, read_spec
from llmscale.controller.state.deletioncost import (
    CACHE_SCALE,
    LOAD_MAX,
    UNKNOWN_COST,
    cost_updates,
    load_of,
    meaningful,
    pod_costs,
)
from llmscale.controller.state.pods import classify_pod, pool_state
from llmscale.signals.snapshot import PodSignals, SignalSnapshot

T0 = 1717416000.0

# ------------------------------------------------------------------------------------------ deletion cost


def _costs_of_every_kind_of_pod() -> dict[str, int] | None:
    snapshot = SignalSnapshot(observed_at=T0, pods=(
        PodSignals("a", queue_depth=2.0, running_requests=4.0),
        PodSignals("b", queue_depth=0.0, running_requests=0.0),
        PodSignals("c", running_requests=None),
        PodSignals("d", queue_depth=0.0, running_requests=9.0, stalled=True),
        PodSignals("e", queue_depth=None, running_requests=1.4),
        PodSignals("g", queue_depth=5000.0, running_requests=256.0),
    ))
    return pod_costs(snapshot, ["a", "b", "c", "d", "e", "f", "g"])


def test_each_pod_costs_its_requests_in_flight() -> None:
    costs = _costs_of_every_kind_of_pod()
    assert costs is not None and set(costs) == set("abcdefg")
    assert {k: costs[k] for k in "abeg"} == {"a": 6000, "b": 0, "e": 1000, "g": LOAD_MAX * CACHE_SCALE}


def test_a_pod_of_unknown_load_is_never_idle() -> None:
    costs = _costs_of_every_kind_of_pod()
    assert costs is not None
    assert {k: costs[k] for k in "cdf"} == {"c": UNKNOWN_COST, "d": UNKNOWN_COST, "f": UNKNOWN_COST}


def test_among_pods_equally_loaded_the_one_whose_cache_serves_least_goes_first() -> None:
    # Three idle pods after a burst: b's cache served most of the pool's prefix hits, c's none.
    snapshot = SignalSnapshot(observed_at=T0, pods=(
        PodSignals("a", queue_depth=0.0, running_requests=0.0, prefix_cache_hits_rate=300.0),
        PodSignals("b", queue_depth=0.0, running_requests=0.0, prefix_cache_hits_rate=700.0),
        PodSignals("c", queue_depth=0.0, running_requests=0.0, prefix_cache_hits_rate=0.0),
        PodSignals("d", queue_depth=0.0, running_requests=1.0, prefix_cache_hits_rate=0.0),
        PodSignals("e", queue_depth=0.0, running_requests=0.0, prefix_cache_hits_rate=None),
    ))
    costs = pod_costs(snapshot, ["a", "b", "c", "d", "e"])
    assert costs == {"a": 300, "b": 700, "c": 0, "d": 1000, "e": 0}
    # The ReplicaSet removes the lowest first: the idle pods without cache, then a, then b; the
    # pod with a request in flight last, whatever its cache.
    assert sorted(costs, key=lambda p: (costs[p], p)) == ["c", "e", "a", "b", "d"]


def test_any_finite_hit_rate_gives_a_cost() -> None:
    # Two pods reporting absurd rates: the pool's sum stays finite, each gets half (the tick must
    # not fail on a bad gauge: it is before the scale is written).
    snapshot = SignalSnapshot(observed_at=T0, pods=(
        PodSignals("a", queue_depth=0.0, running_requests=0.0, prefix_cache_hits_rate=1e308),
        PodSignals("b", queue_depth=0.0, running_requests=3.0, prefix_cache_hits_rate=1e308),
    ))
    assert pod_costs(snapshot, ["a", "b"]) == {"a": 500, "b": 3500}


def test_no_hits_anywhere_leaves_the_order_to_the_load() -> None:
    snapshot = SignalSnapshot(observed_at=T0, pods=(
        PodSignals("a", queue_depth=0.0, running_requests=2.0, prefix_cache_hits_rate=0.0),
        PodSignals("b", queue_depth=0.0, running_requests=0.0),
    ))
    assert pod_costs(snapshot, ["a", "b"]) == {"a": 2000, "b": 0}


pod_signals = st.builds(
    PodSignals,
    pod=st.sampled_from("abcdef"),
    queue_depth=st.one_of(st.none(), st.floats(0, 5000)),
    running_requests=st.one_of(st.none(), st.floats(0, 2000)),
    prefix_cache_hits_rate=st.one_of(st.none(), st.floats(-1e308, 1e308)),
    stalled=st.booleans(),
)


def _costs_and_loads(pods: list[PodSignals]) -> tuple[dict[str, int], dict[str, int]]:
    costs = pod_costs(SignalSnapshot(observed_at=T0, pods=tuple(pods)), [p.pod for p in pods])
    assert costs is not None
    loads = {p.pod: round(p.running_requests + (p.queue_depth or 0.0)) for p in pods
             if p.running_requests is not None and not p.stalled}
    return costs, loads


@given(st.lists(pod_signals, max_size=6, unique_by=lambda p: p.pod))
def test_more_requests_in_flight_never_cost_less(pods: list[PodSignals]) -> None:
    costs, loads = _costs_and_loads(pods)
    for pod in loads:
        assert load_of(costs[pod]) == min(LOAD_MAX, loads[pod])
    for x in loads:
        for y in loads:
            if min(LOAD_MAX, loads[x]) < min(LOAD_MAX, loads[y]):
                assert costs[x] < costs[y]


@given(st.lists(pod_signals, max_size=6, unique_by=lambda p: p.pod))
def test_an_unknown_load_costs_most(pods: list[PodSignals]) -> None:
    costs, loads = _costs_and_loads(pods)
    for pod, cost in costs.items():
        assert 0 <= cost <= UNKNOWN_COST < 2**31
        assert (pod not in loads) == (cost == UNKNOWN_COST)


def test_a_failed_read_writes_nothing() -> None:
    assert pod_costs(SignalSnapshot(observed_at=T0, error="Prometheus down"), ["a"]) is None


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        pytest.param(None, 3000, True, id="never written"),
        pytest.param(3000, 3000, False, id="unchanged"),
        pytest.param(0, 1000, True, id="leaves idle"),
        pytest.param(1000, 0, True, id="becomes idle"),
        pytest.param(3000, 4000, False, id="a wobble"),
        pytest.param(3000, 6000, True, id="doubled"),
        pytest.param(8000, 5000, False, id="less than halved"),
        pytest.param(8000, 4000, True, id="halved"),
        pytest.param(7000, UNKNOWN_COST, True, id="became unknown"),
        pytest.param(0, 999, False, id="cache share alone"),
        pytest.param(3000, 3500, False, id="cache share alone, loaded"),
        pytest.param(6, 6000, True, id="an annotation from before the cache share"),
    ],
)
def test_only_meaningful_changes_are_written_between_scale_downs(old: int | None, new: int, expected: bool) -> None:
    assert meaningful(old, new) is expected


def test_a_scale_down_rewrites_every_changed_cost() -> None:
    current = {"a": 3000, "b": 0, "c": 5000, "d": 0}
    costs = {"a": 4000, "b": 0, "c": 5000, "d": 420}
    assert cost_updates(current, costs, exact=False) == {}
    assert cost_updates(current, costs, exact=True) == {"a": 4000, "d": 420}


@given(st.one_of(st.none(), st.integers(0, UNKNOWN_COST)), st.booleans())
def test_unknown_never_overwrites_a_measured_cost(old: int | None, exact: bool) -> None:
    # e2e scenario 10 once saw the busiest-but-one pod missing from the scale-down tick's snapshot
    # (a late scrape): its cost 1 became unknown and the ReplicaSet's order changed under the drain.
    written = cost_updates({"p": old}, {"p": UNKNOWN_COST}, exact=exact)
    if old is None:
        assert written == {"p": UNKNOWN_COST}
    else:
        assert written == {}


def test_a_pod_measured_again_after_an_unknown_gets_its_new_cost() -> None:
    assert cost_updates({"p": 1000}, {"p": 0}, exact=False) == {"p": 0}
    assert cost_updates({"p": UNKNOWN_COST}, {"p": 3000}, exact=False) == {"p": 3000}


@given(st.integers(1, LOAD_MAX), st.floats(0.51, 1.99), st.integers(0, 999), st.integers(0, 999))
def test_a_load_that_moves_by_less_than_a_factor_of_two_writes_nothing(
    old: int, factor: float, old_cache: int, new_cache: int
) -> None:
    new = min(LOAD_MAX, max(1, round(old * factor)))
    if max(old, new) < 2 * min(old, new):
        assert cost_updates({"p": old * CACHE_SCALE + old_cache}, {"p": new * CACHE_SCALE + new_cache},
                            exact=False) == {}


def test_the_pod_costs_index_holds_ready_pods_only() -> None:
    labels = {"llmscale.dev/deployment": "chat", "llmscale.dev/pool": "interactive"}
    ready = {"conditions": [{"type": "Ready", "status": "True"}]}
    key = ("serving", "chat", "interactive")
    assert index_pod_costs(namespace="serving", name="p", labels=labels, meta={}, status=ready,
                           annotations={"controller.kubernetes.io/pod-deletion-cost": "7"}) == {key: ("p", 7)}
    assert index_pod_costs(namespace="serving", name="p", labels=labels, meta={}, status=ready,
                           annotations={"controller.kubernetes.io/pod-deletion-cost": "x"}) == {key: ("p", None)}
    assert index_pod_costs(namespace="serving", name="p", labels=labels, meta={}, status={}, annotations={}) == {}
    assert index_pod_costs(namespace="serving", name="p", labels=labels, meta={"deletionTimestamp": "t"},
                           status=ready, annotations={}) == {}


# ------------------------------------------------------------------------------------------ autoscalers


@pytest.mark.parametrize(
    ("ref", "target"),
    [
        pytest.param({"apiVersion": "apps/v1", "kind": "Deployment", "name": "chat"}, "chat", id="a Deployment"),
        pytest.param({"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "chat"}, None, id="another kind"),
        pytest.param({"apiVersion": "argoproj.io/v1alpha1", "kind": "Deployment", "name": "chat"}, None,
                     id="another group's Deployment"),
        pytest.param({}, None, id="no target"),
    ],
)
def test_an_hpa_counts_when_it_targets_a_deployment(ref: dict[str, Any], target: str | None) -> None:
    got = index_hpas(namespace="serving", name="h", spec={"scaleTargetRef": ref})
    assert got == ({("serving", target): "HorizontalPodAutoscaler serving/h"} if target else {})


def test_a_scaled_object_defaults_to_an_apps_v1_deployment() -> None:
    got = index_scaled_objects(namespace="serving", name="so", spec={"scaleTargetRef": {"name": "chat"}})
    assert got == {("serving", "chat"): "ScaledObject serving/so"}


def test_other_autoscalers_from_both_indexes_are_named_in_the_condition() -> None:
    hpas = {("serving", "chat"): {"HorizontalPodAutoscaler serving/h"}}
    scaled = {("serving", "chat"): {"ScaledObject serving/so"}}
    found = other_autoscalers((hpas, scaled), ("serving", "chat"))
    assert found == ("HorizontalPodAutoscaler serving/h", "ScaledObject serving/so")
    assert other_autoscalers((hpas, None), ("serving", "other")) == ()
    cond = sole_autoscaler_condition("chat", {"interactive": found, "batch": ()})
    assert (cond.status, cond.reason) == ("False", "OtherAutoscaler")
    assert "targets Deployment chat" in cond.message and "ScaledObject serving/so" in cond.message
    assert sole_autoscaler_condition("chat", {"interactive": (), "batch": ()}).status == "True"


# ------------------------------------------------------------------------------------------ peers

NOW = datetime.datetime(2026, 5, 1, 12, 0, tzinfo=datetime.UTC)


@pytest.mark.parametrize(
    ("status", "live"),
    [
        pytest.param({"a": {"priority": 1, "lifetime": 60, "lastseen": "2026-05-01T11:59:30+00:00"}}, ["a"],
                     id="seen 30 s ago, lives 60 s"),
        pytest.param({"a": {"priority": 1, "lifetime": 60, "lastseen": "2026-05-01T11:58:30Z"}}, [],
                     id="expired"),
        pytest.param({"a": None}, [], id="left cleanly (Kopf nulls its entry)"),
        pytest.param({"a": {"lastseen": "yesterday"}}, [], id="unreadable time"),
        pytest.param(None, [], id="no status"),
    ],
)
def test_live_peers_follow_kopfs_lifetime_rule(status: dict[str, Any] | None, live: list[str]) -> None:
    assert live_peers(status, NOW) == live


# ------------------------------------------------------------------------------------------ names and applies


@pytest.mark.parametrize("name", ["70b-chat", "a" * 64, "Chat", "chat-"])
def test_a_name_the_service_cannot_take_is_an_invalid_spec(name: str) -> None:
    """An object created before the CRD carried its rule on metadata.name still reaches the
    operator: it is reported (InvalidSpec, naming metadata.name), not half-applied."""
    body = {"metadata": {"name": name}, "spec": {"model": {"name": "m", "preset": "llama-3.1-8b"}}}
    with pytest.raises(InvalidSpec, match=r"metadata\.name"):
        read_spec(body)


def test_a_pod_waiting_on_a_preemption_counts_as_unschedulable() -> None:
    """Case 8: the policy shrinks batch first when interactive pods cannot be placed. A pod for
    which the scheduler preempts a batch pod reports PodScheduled=False/Unschedulable (with a
    nominated node) until the victim is gone: PoolState carries it, beside the batch replicas
    (whose GPUs are batch_replicas x spec.resources.gpusPerReplica)."""
    status = {"phase": "Pending", "nominatedNodeName": "gpu-node-0",
              "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}
    phase = classify_pod({}, status)
    assert phase == "unschedulable"
    # 3 replicas, the third waiting (pods beyond spec.replicas would be a rollout's surge, issue 21).
    state = pool_state(3, 4, ["ready", "ready", phase], ["ready"] * 4)
    assert state.interactive_unschedulable == 1 and state.batch_replicas == 4


def test_children_applied_condition() -> None:
    assert applied_condition(None).status == "True"
    failed = applied_condition("API server refused Service s/x: 403 Forbidden: exceeded quota")
    assert (failed.status, failed.reason) == ("False", "ApplyFailed") and "exceeded quota" in failed.message
