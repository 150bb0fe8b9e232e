"""Chaos scenarios (issue 14): the operator, the API server and Prometheus go away in the middle of
the work, and the operator neither doubles a scale-up, nor scales on missing data, nor loses a
request, and its conditions say what happened.

15. The operator killed with SIGKILL in the middle of a scale-up. The scale-up rate limit is one
    replica per period (30 s). Under a load the pool cannot carry, the operator adds one replica; the moment
    the child Deployment shows it, the operator process is killed with SIGKILL (no shutdown, no
    last status write) and started again. The Deployment is written before the status that records
    the step, and a kill between the two loses that status write: the test makes it lost every time
    (the saved ``status.policyState`` put back as it was before the step) before the restart. The
    restarted operator must take its policy memory from ``status.policyState`` and count the size
    it finds against the size that memory ends at: no second replica inside the period (a double
    scale-up), PolicyStateReadable=True, then the next step once the period has passed (the limit,
    not a dead operator, held it). Nothing is lost: every request of the load is answered and no
    pod is deleted.
17. The API server restarted in the middle of the same scale-up (the same LLMDeployment, load and
    namespace as 15: ordered tests of one class): stopped by PID the moment the Deployment shows
    the second step (3 -> 4), down for 3 s, started again on the same port and etcd
    (:func:`llmscale.localcluster.cluster.restart_apiserver`). The operator process lives through
    it and carries on over new watches: no fifth replica inside the period, the next step after
    it, every request of the load answered, no pod deleted, and Ready, ChildrenApplied,
    PolicyStateReadable and MetricsAvailable True afterwards.
18. Prometheus flapping: a 30 s load scales the pool up; with no scale-down window, Prometheus is
    then stopped and started three times over about a minute, while the load leaves the rate
    window and the policy steps down on known metrics. Each time the operator says so
    (``MetricsAvailable=False``, ``MetricsMissing`` or ``MetricsStale``) and holds the Deployment
    and ``status.replicas.desired`` while it does (an operator reading missing data as zero demand
    would step down at once), the first time above the size at rest; each failed read is counted
    in ``llmscale_signal_read_errors_total`` (read from the operator's own ``/metrics``); once
    Prometheus stays up it scales again, down to ``min``. Scenario 7 (one outage at rest) is the
    short form of this one.
"""

from __future__ import annotations

import signal
import time
from concurrent.futures import Future
from typing import Any

import pytest

from conftest import GROUP, PLURAL, VERSION, Cluster, sample, wait_for
from llmscale.loadgen import ReplayReport
from llmscale.policy import Reason
from test_scenarios import apply_and_wait_ready, start_load

# The operator killed, the API server restarted, Prometheus stopped: nothing else runs meanwhile.
pytestmark = pytest.mark.alone

#: The scale-up limit's period, seconds: one replica per period. Long enough for an operator restart
#: (a few seconds) and an API server restart (3 s down, then its start) to fall inside it.
PERIOD_S = 30.0


def _assert_nothing_lost(report: ReplayReport) -> None:
    """Every request the load sent was answered with a 200 and none was left open. (Arrivals beyond
    the load generator's 64 open requests are ``dropped`` before they are sent: the client's cap
    while a limited scale-up lags the load, not a loss.)"""
    assert report.sent > 0 and report.errors == 0, (report.sent, report.errors)
    assert report.in_flight == 0 and len(report.results) == report.sent, (report.sent, len(report.results),
                                                                          report.in_flight)


def _lose_the_steps_status_write(cluster: Cluster, namespace: str, step_to: int) -> None:
    """Put ``status.policyState`` back as it was before the scale-up step to ``step_to`` replicas (its
    newest scale event gone, its size one less), as if the operator had died between the Deployment
    write and the status write; nothing to do where it did."""
    memory = cluster.status(namespace, "chat").get("policyState") or {}
    if memory.get("replicas") != step_to:
        return
    events = sorted(memory.get("scaleEvents") or [])
    patch = {"status": {"policyState": {"scaleEvents": events[:-1], "replicas": step_to - 1}}}
    cluster.custom.patch_namespaced_custom_object_status(GROUP, VERSION, namespace, PLURAL, "chat", patch)


def _condition_of(llmdep: dict[str, Any], type_: str) -> dict[str, Any]:
    return next((dict(c) for c in (llmdep.get("status") or {}).get("conditions") or [] if c.get("type") == type_), {})


def _hold_then_step(cluster: Cluster, namespace: str, scaled_at: float, at: int) -> float:
    """Check that the Deployment stays at ``at`` replicas until the period since ``scaled_at`` has
    nearly passed (no double scale-up), then that the next step comes; return when it was seen."""
    most = at
    while time.monotonic() < scaled_at + PERIOD_S - 5:
        most = max(most, cluster.deployment_replicas(namespace, "chat") or 0)
        assert most <= at, f"a second scale-up {time.monotonic() - scaled_at:.0f} s after the step to {at} (limit 1/min)"
        time.sleep(0.25)
    wait_for(f"the next scale-up step ({at} -> {at + 1}) once the period has passed",
             lambda: (cluster.deployment_replicas(namespace, "chat") or 0) >= at + 1, 40)
    assert time.monotonic() >= scaled_at + PERIOD_S - 5
    return time.monotonic()


class TestScaleUpChaos:
    """One LLMDeployment under a load it cannot carry, scaled up one replica a period: the operator
    is killed at the first step (15), the API server restarted at the second (17). Ordered tests
    of one class, sharing the namespace, the load and the scale-up (one setup and ramp, not two)."""

    load: Future[ReplayReport]
    pods_before: set[str]
    scaled_at: float

    def test_15_sigkill_in_a_scale_up_neither_doubles_it_nor_loses_work(
        self, cluster: Cluster, class_namespace: str,
    ) -> None:
        ns = class_namespace
        manifest = sample(scaling={"scaleUp": {"stabilizationWindowSeconds": 0, "maxReplicasPerPeriod": 1,
                                               "periodSeconds": int(PERIOD_S)}})
        apply_and_wait_ready(cluster, ns, manifest, ready=2)  # min 1 + headroom 1
        # Long enough for both tests' steps (2 -> 3 -> 4 -> 5, a period apart).
        TestScaleUpChaos.load = start_load(cluster, ns, rate_rps=4.0, duration_s=3 * PERIOD_S + 15)

        wait_for("the first scale-up step (2 -> 3)", lambda: cluster.deployment_replicas(ns, "chat") == 3, 60)
        scaled_at = time.monotonic()
        pods_before = {p.metadata.name for p in cluster.pods(ns)}
        assert cluster.operator is not None
        cluster.operator.send_signal(signal.SIGKILL)
        cluster.operator.wait(timeout=10)
        _lose_the_steps_status_write(cluster, ns, 3)
        cluster.run_operator()  # the session's operator, started again

        # Inside the period: never a fourth replica, whatever the queue says; then the next step
        # (the limit, not a dead operator, held it).
        TestScaleUpChaos.scaled_at = _hold_then_step(cluster, ns, scaled_at, 3)
        cond = cluster.condition(ns, "chat", "PolicyStateReadable") or {}
        assert cond.get("status") == "True", cond
        pods_now = {p.metadata.name for p in cluster.pods(ns)}
        assert not pods_before - pods_now, f"pods deleted during the scale-up: {sorted(pods_before - pods_now)}"
        TestScaleUpChaos.pods_before = pods_now
        assert not TestScaleUpChaos.load.done(), "the load ended before scenario 17"

    def test_17_api_server_restart_in_a_scale_up_neither_doubles_it_nor_loses_work(
        self, cluster: Cluster, class_namespace: str,
    ) -> None:
        ns = class_namespace
        assert cluster.operator is not None
        operator = cluster.operator
        try:
            # The second step (3 -> 4) has just come. Down for 3 s (every client's connections
            # refused, watches ended), then the same port and etcd.
            assert cluster.deployment_replicas(ns, "chat") == 4
            cluster.restart_apiserver(down_s=3.0)
            assert operator.poll() is None, f"the operator exited ({operator.returncode}) when the API server went away"
            # Inside the period: no fifth replica; after it, the next step, over the new watches.
            _hold_then_step(cluster, ns, TestScaleUpChaos.scaled_at, 4)
            assert operator.poll() is None and cluster.operator is operator, "the operator was not the same process"
        finally:
            report = TestScaleUpChaos.load.result(timeout=240)
        _assert_nothing_lost(report)
        gone = TestScaleUpChaos.pods_before - {p.metadata.name for p in cluster.pods(ns)}
        assert not gone, f"pods deleted around the restart: {sorted(gone)}"

        # The conditions are right again: serving, children applied, memory read, metrics known.
        def conditions_settled() -> dict[str, dict[str, Any]] | None:
            obj = cluster.llmdep(ns, "chat")
            conds = {t: _condition_of(obj, t) for t in ("Ready", "ChildrenApplied", "PolicyStateReadable",
                                                        "MetricsAvailable")}
            ok = (conds["Ready"].get("status") == "True" and conds["PolicyStateReadable"].get("status") == "True"
                  and conds["MetricsAvailable"].get("status") == "True"
                  and conds["ChildrenApplied"].get("status", "True") == "True")
            return conds if ok else None

        conds = wait_for("Ready, PolicyStateReadable, MetricsAvailable True after the restart", conditions_settled, 60)
        assert conds["Ready"]["reason"] in ("AllReplicasReady", "Serving"), conds["Ready"]
        status = cluster.status(ns, "chat")
        assert status["replicas"]["desired"] == cluster.deployment_replicas(ns, "chat"), status["replicas"]


# ------------------------------------------------------------------------------------------ 18

#: Prometheus is stopped and started this many times, each outage lasting until the operator has
#: said so and held for a while, the restarts a few seconds apart: about a minute in all.
FLAPS = 3
#: Seconds each outage is watched after the operator has said the metrics are gone.
HELD_S = 5.0


def test_18_prometheus_flapping_holds_the_replicas_counting_read_errors_until_it_recovers(
    cluster: Cluster, namespace: str,
) -> None:
    # No scale-down window: right after the load, while its arrivals leave the rate window, the
    # policy steps down one replica per 5 s on known metrics. An operator that read missing
    # metrics as zero demand would step down during the outages too; this one must hold.
    manifest = sample(scaling={"scaleDown": {"stabilizationWindowSeconds": 0}})
    apply_and_wait_ready(cluster, namespace, manifest, ready=2)
    errors_before = cluster.operator_metric("llmscale_signal_read_errors_total", namespace=namespace, name="chat") or 0.0
    report = start_load(cluster, namespace, rate_rps=4.0, duration_s=30.0).result(timeout=120)
    _assert_nothing_lost(report)
    peak = cluster.deployment_replicas(namespace, "chat") or 0
    assert peak > 2, f"the load did not scale the pool up (replicas {peak})"

    reasons: set[str] = set()
    held_at: list[int] = []
    for flap in range(FLAPS):
        cluster.stop_prometheus()
        try:
            # Until the operator says the metrics are gone it may still act on its last fresh snapshot.
            cond = wait_for(f"MetricsAvailable=False (outage {flap + 1})", lambda: (
                c if (c := cluster.condition(namespace, "chat", "MetricsAvailable") or {}).get("status")
                == "False" else None), 30)
            reasons.add(cond["reason"])
            held = cluster.deployment_replicas(namespace, "chat") or 0
            held_at.append(held)
            # While it says so, nothing moves: the Deployment and status.replicas.desired hold.
            until = time.monotonic() + HELD_S
            while time.monotonic() < until:
                obj = cluster.llmdep(namespace, "chat")
                replicas = cluster.deployment_replicas(namespace, "chat")
                assert replicas == held, f"replicas {held} -> {replicas} without metrics (outage {flap + 1})"
                assert obj["status"]["replicas"]["desired"] == held, obj["status"]["replicas"]
                assert _condition_of(obj, "MetricsAvailable").get("status") == "False", obj["status"]["conditions"]
                time.sleep(0.5)
        finally:
            cluster.start_prometheus()
        wait_for(f"MetricsAvailable=True after outage {flap + 1}", lambda: (
            cluster.condition(namespace, "chat", "MetricsAvailable") or {}).get("status") == "True", 60)
    assert reasons and reasons <= {Reason.MetricsMissing, Reason.MetricsStale}, reasons
    # The first outage came while the pool was above its size at rest: the hold was a real one.
    assert held_at[0] > 2, held_at
    errors_after = cluster.operator_metric("llmscale_signal_read_errors_total", namespace=namespace, name="chat")
    assert errors_after is not None and errors_after >= errors_before + FLAPS, (errors_before, errors_after)

    # With Prometheus back the operator scales again: down to spec.replicas.min (as in scenario 4)
    # once the load has left the rate window.
    wait_for("the scale-down to min 1 on fresh metrics", lambda: cluster.deployment_replicas(namespace, "chat") == 1,
             120)
    cond = cluster.condition(namespace, "chat", "MetricsAvailable") or {}
    assert cond.get("status") == "True" and cond.get("reason") in (Reason.MetricsFresh, Reason.MetricsPartial), cond
