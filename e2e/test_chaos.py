"""Scenario 15 (issue 14, chaos): the operator killed with SIGKILL in the middle of a scale-up.

The scale-up rate limit is one replica a minute. Under a load the pool cannot carry, the operator
adds one replica; the moment the child Deployment shows it, the operator process is killed with
SIGKILL (no shutdown, no last status write) and started again. The restarted operator must take
its policy memory from ``status.policyState`` (what the last tick wrote with the scale): no second
replica inside the minute (a double scale-up), PolicyStateReadable=True, then the next step once
the minute has passed (the limit, not a dead operator, held it). Nothing is lost: every request of
the load is answered and no pod is deleted.
"""

from __future__ import annotations

import signal
import time

from conftest import Cluster, sample, wait_for
from test_scenarios import apply_and_wait_ready, start_load

PERIOD_S = 60.0


def test_15_sigkill_in_a_scale_up_neither_doubles_it_nor_loses_work(cluster: Cluster, namespace: str) -> None:
    manifest = sample(scaling={"scaleUp": {"stabilizationWindowSeconds": 0, "maxReplicasPerPeriod": 1,
                                           "periodSeconds": int(PERIOD_S)}})
    apply_and_wait_ready(cluster, namespace, manifest, ready=2)  # min 1 + headroom 1
    load = start_load(cluster, namespace, rate_rps=4.0, duration_s=130.0)

    wait_for("the first scale-up step (2 -> 3)", lambda: cluster.deployment_replicas(namespace, "chat") == 3, 60)
    scaled_at = time.monotonic()
    pods_before = {p.metadata.name for p in cluster.pods(namespace)}
    assert cluster.operator is not None
    cluster.operator.send_signal(signal.SIGKILL)
    cluster.operator.wait(timeout=10)
    cluster.run_operator()  # the session's operator, started again

    try:
        # Inside the minute: never a fourth replica, whatever the queue says.
        most = 3
        while time.monotonic() < scaled_at + PERIOD_S - 5:
            most = max(most, cluster.deployment_replicas(namespace, "chat") or 0)
            assert most <= 3, f"a second scale-up {time.monotonic() - scaled_at:.0f} s after the first (limit 1/min)"
            time.sleep(0.25)
        cond = cluster.condition(namespace, "chat", "PolicyStateReadable") or {}
        assert cond.get("status") == "True", cond
        # After the minute the next step comes: the restarted operator scales.
        wait_for("the next scale-up step once the minute has passed",
                 lambda: (cluster.deployment_replicas(namespace, "chat") or 0) >= 4, 40)
        assert time.monotonic() >= scaled_at + PERIOD_S - 5
    finally:
        report = load.result(timeout=240)
    assert report.sent > 0 and report.errors == 0, report
    gone = pods_before - {p.metadata.name for p in cluster.pods(namespace)}
    assert not gone, f"pods deleted during the scale-up: {sorted(gone)}"
