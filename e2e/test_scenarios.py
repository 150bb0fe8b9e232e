"""End-to-end scenarios against a real API server, real Prometheus and mock GPU engines.

Each scenario asserts on what the cluster really holds: API objects, Events, conditions, and the
series in Prometheus. Times are short (the sample llmscale/localcluster/chat-mock.yaml): cold start 8 s,
tick 1 s, scrape 1 s, scale-down stabilisation 20 s, one replica removed per 5 s. The engine is
the mock Llama-3.1-8B on an L40S at real-time speed with 4 running requests per replica: a
200-token answer takes ~4 s of decode (19 ms a step), so one replica serves about one request a
second and 4 requests/s build a queue on one or two replicas.

The numbered scenarios 1-9 are those of issue 4; 2, 3 and 4 are one load cycle on one
LLMDeployment (ordered tests of one class); 7 (Prometheus stopped: replicas held, the right
condition, recovery) is the short form of test_chaos.py's 18 (Prometheus flapping), which checks
all it did three times over, so it runs there. 10 is in test_drain.py. 11 and 12 are issue 10's:
scale from zero on the router's queue, and an operator reading a Prometheus that demands TLS and
basic auth.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import json
import os
import re
import subprocess
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import bcrypt
import kubernetes
import numpy as np
import pytest
import yaml

from conftest import GROUP, PLURAL, VERSION, Cluster, sample, wait_for
from llmscale.loadgen import ReplayReport, replay
from llmscale.localcluster import addons
from llmscale.localcluster.podrunner import ADDRESS_ANNOTATION
from llmscale.policy import Reason
from llmscale.policy.mix import RATE_FLOOR_WINDOWS
from llmscale.sim.trace import Trace

MODEL = "llama-3.1-8b-instruct"
COLD_START_S = 8.0
STABILISATION_S = 20.0
SCALE_DOWN_PERIOD_S = 5.0
#: The arrival rate's rate window (the signals' default 1m).
RATE_WINDOW_S = 60.0
#: How long after the last request finished the load signal reads 0 requests/s, at most: its rate is
#: floored at the mean of the last RATE_FLOOR_WINDOWS windows (microbursts); a stop is read within one
#: window when enough requests came before it to tell it from a dip (policy.mix.FALL_TAIL), else
#: falling over that many windows.
RATE_FALL_S = RATE_FLOOR_WINDOWS * RATE_WINDOW_S
LABELS = ("app.kubernetes.io/managed-by", "app.kubernetes.io/name", "app.kubernetes.io/instance",
          "llmscale.dev/deployment", "llmscale.dev/pool")


def poisson_trace(rate_rps: float, duration_s: float, prompt: int = 256, output: int = 200, seed: int = 0) -> Trace:
    """Fixed-size requests arriving as a Poisson process of ``rate_rps`` for ``duration_s``."""
    rng = np.random.default_rng(seed)
    gaps = rng.exponential(1.0 / rate_rps, int(rate_rps * duration_s * 2) + 10)
    arrivals = np.cumsum(gaps)
    arrivals = arrivals[arrivals < duration_s]
    n = len(arrivals)
    return Trace(arrivals, np.full(n, prompt, np.int64), np.full(n, output, np.int64), np.zeros(n, np.bool_),
                 0.0, duration_s, source=f"poisson {rate_rps} req/s")


def start_load(cluster: Cluster, namespace: str, rate_rps: float, duration_s: float) -> Future[ReplayReport]:
    """Replay a Poisson load through Service chat in a background thread; the future holds the report."""
    return start_load_to(cluster, cluster.service_url(namespace, "chat"), rate_rps, duration_s)


def start_load_to(cluster: Cluster, url: str, rate_rps: float, duration_s: float) -> Future[ReplayReport]:
    """Replay a Poisson load to ``url`` in a background thread; the future holds the report."""
    pool = ThreadPoolExecutor(max_workers=1)
    fut = pool.submit(asyncio.run, replay(poisson_trace(rate_rps, duration_s), url, MODEL,
                                          deadline_s=duration_s + 60, max_in_flight=64))
    pool.shutdown(wait=False)
    return fut


def apply_and_wait_ready(cluster: Cluster, namespace: str, manifest: dict[str, Any], ready: int) -> None:
    cluster.apply(namespace, manifest)
    name = manifest["metadata"]["name"]
    wait_for(f"{namespace}/{name}: {ready} ready replicas and fresh metrics", lambda: (
        cluster.status(namespace, name).get("replicas", {}).get("ready") == ready
        and (cluster.condition(namespace, name, "MetricsAvailable") or {}).get("status") == "True"
    ), COLD_START_S + 60)


def is_ready(pod: Any) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


# ------------------------------------------------------------------------------------------ 1


def test_1_apply_creates_owned_labelled_children_shown_in_printer_columns(cluster: Cluster, namespace: str) -> None:
    cluster.apply(namespace, sample())
    body = cluster.llmdep(namespace, "chat")
    uid = body["metadata"]["uid"]

    dep = wait_for("Deployment chat", lambda: cluster.apps.read_namespaced_deployment("chat", namespace), 30)
    svc = cluster.core.read_namespaced_service("chat", namespace)
    pdb = cluster.policy.read_namespaced_pod_disruption_budget("chat", namespace)
    for obj in (dep, svc, pdb):
        kind = type(obj).__name__
        refs = obj.metadata.owner_references or []
        assert [(r.kind, r.name, r.uid, r.controller) for r in refs] == [("LLMDeployment", "chat", uid, True)], kind
        labels = obj.metadata.labels or {}
        assert all(k in labels for k in LABELS), (kind, labels)
        assert labels["app.kubernetes.io/managed-by"] == "llmscale" and labels["app.kubernetes.io/name"] == "mock"
        assert labels["llmscale.dev/deployment"] == "chat" and labels["llmscale.dev/pool"] == "interactive"
    assert dep.spec.replicas == 2, "initial replicas: one of demand plus one of headroom"
    assert dep.spec.template.metadata.annotations["llmscale.dev/cold-start-seconds"] == "8"
    assert svc.spec.selector == {"llmscale.dev/deployment": "chat", "llmscale.dev/pool": "interactive"}
    assert pdb.spec.max_unavailable == 1
    assert pdb.spec.unhealthy_pod_eviction_policy == "AlwaysAllow"  # issue 11, case 6
    assert dep.spec.progress_deadline_seconds == 600  # issue 11, case 7: max(600, 2 x 8 s + 60)

    # The printer columns, once the operator has written the status.
    wait_for("status.replicas.ready == 2", lambda: cluster.status(namespace, "chat").get("replicas", {}).get("ready") == 2,
             COLD_START_S + 40)
    # What a person scans first: Ready, the bounds beside the replicas (as the HPA's MINPODS and
    # MAXPODS), SLO % and $/M tokens (empty until a minute is judged and tokens are generated);
    # headroom, the signals and the queue target with -o wide.
    out = cluster.kubectl("get", "llmdep", "-n", namespace).stdout.splitlines()
    assert out[0].split() == ["NAME", "READY", "MIN", "MAX", "DESIRED", "SERVING", "SLO%", "USD/MTOK", "MODE",
                              "AGE"], out
    assert out[1].split()[:6] == ["chat", "True", "1", "8", "2", "2"], out
    wide = cluster.kubectl("get", "llmdep", "-n", namespace, "-o", "wide").stdout.splitlines()
    assert {"HEADROOM", "QUEUE", "QUEUE-TARGET", "KV"} <= set(wide[0].split()), wide
    at = wide[0].index("HEADROOM")
    assert wide[1][at:].split()[0] == "1", wide
    out = cluster.kubectl("get", "llmdeployments.llmscale.dev", "chat", "-n", namespace, "-o", "name").stdout
    assert out.strip() == "llmdeployment.llmscale.dev/chat"


# ------------------------------------------------------------------------------------- 2, 3, 4


class Recorder(threading.Thread):
    """Samples, every 0.5 s, the Deployment's replicas and the recommendation of the operator's last
    decision (``recommends N = demand D + headroom H`` in ``status.lastDecision.reasons``)."""

    def __init__(self, cluster: Cluster, namespace: str) -> None:
        super().__init__(daemon=True)
        self.cluster, self.namespace = cluster, namespace
        self.samples: list[tuple[float, int | None, int | None]] = []  # (monotonic s, recommendation, replicas)
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            with contextlib.suppress(Exception):
                reasons = self.cluster.status(self.namespace, "chat").get("lastDecision", {}).get("reasons", [])
                rec = next((int(m.group(1)) for r in reasons if (m := re.match(r"recommends (\d+)", r))), None)
                self.samples.append((time.monotonic(), rec, self.cluster.deployment_replicas(self.namespace, "chat")))
            self.stop.wait(0.5)


@pytest.mark.long(165)  # seconds beside others (fresh-clone CI, the three tests)
class TestLoadCycle:
    """One LLMDeployment through a load ramp, steady load, and the end of the load."""

    load: Future[ReplayReport]
    recorder: Recorder

    def test_2_load_ramp_raises_the_queue_scaling_up_with_a_reason(self, cluster: Cluster,
                                                                       class_namespace: str) -> None:
        ns = class_namespace
        # A lenient TTFT SLO: this cycle checks the leading signals. With the sample's 2 s, the
        # ramp's queueing keeps TTFT p95 over the 1-minute rate window above the SLO for a minute
        # after the queue is gone, and the latency guard adds a replica per cold start up to max.
        apply_and_wait_ready(cluster, ns, sample(slo={"ttftP95Seconds": 30}), ready=2)
        TestLoadCycle.recorder = Recorder(cluster, ns)
        TestLoadCycle.recorder.start()
        TestLoadCycle.load = start_load(cluster, ns, rate_rps=3.0, duration_s=60.0)

        # The queue rises, as Prometheus scraped it from the engines.
        query = f'sum(vllm:num_requests_waiting{{namespace="{ns}", llmscale_dev_deployment="chat"}})'
        wait_for("queue depth > 2 in Prometheus", lambda: (cluster.prom_value(query) or 0) > 2, 40)

        # The operator scales up, says why in status and in an Event.
        new = wait_for("scale-up of Deployment chat",
                       lambda: (r := cluster.deployment_replicas(ns, "chat")) and r > 2 and r, 30)
        status = wait_for("status.replicas.desired of the scale-up", lambda: (
            s if (s := cluster.status(ns, "chat"))["replicas"]["desired"] >= new else None), 10)
        reasons = " | ".join(status["lastDecision"]["reasons"])
        assert "queue depth" in reasons and "proposes" in reasons, reasons
        events = wait_for("a ScaledUp Event", lambda: cluster.events(ns, "ScaledUp"), 15)
        # The Event leads with the demand and the signal that set it (the queue, the KV cache its
        # requests fill, or the load signal: arrival rate and backlog drain); the signals' own lines
        # follow and may be clipped away (an Event message is cut at 1,000 characters).
        assert any(re.search(rf"Scaled LLMDeployment {ns}/chat from 2 to \d+ replicas: "
                             r"demand \d+ replicas \((queue depth|KV-cache utilisation|load)\)", e.message)
                   for e in events), [e.message for e in events]
        assert events[0].involved_object.kind == "LLMDeployment" and events[0].involved_object.name == "chat"

        # New pods sit in their cold start: Running, not Ready; the operator counts them once.
        pods = cluster.pods(ns, "interactive")
        starting = [p for p in pods if not is_ready(p)]
        assert starting, f"scaled to {new}, but no pod is starting"
        assert all(p.status.phase == "Running" for p in starting)
        status = cluster.status(ns, "chat")
        ready_now = sum(is_ready(p) for p in cluster.pods(ns, "interactive"))
        assert status["replicas"]["ready"] <= ready_now < status["replicas"]["desired"], status["replicas"]
        # The per-replica arithmetic of the decision divides by ready replicas only.
        m = re.search(r"queue depth [\d.]+ over (\d+) ready replicas", " ".join(status["lastDecision"]["reasons"]))
        assert m and int(m.group(1)) < status["replicas"]["desired"], status["lastDecision"]["reasons"]
        # Never more pods than the Deployment asks for: starting pods are not asked for twice.
        for _ in range(6):
            replicas = cluster.deployment_replicas(ns, "chat") or 0
            assert len(cluster.pods(ns, "interactive")) <= replicas + 1  # +1: a pod being created
            time.sleep(0.5)

        # Ready only after the cold start, as measured in the API.
        def all_ready() -> list[Any] | None:
            pods = cluster.pods(ns, "interactive")
            return pods if pods and all(is_ready(p) for p in pods) else None

        for pod in wait_for("the new pods Ready", all_ready, COLD_START_S + 40):
            ready_at = next(c.last_transition_time for c in pod.status.conditions if c.type == "Ready")
            assert (ready_at - pod.metadata.creation_timestamp).total_seconds() >= COLD_START_S - 1.5, pod.metadata.name

    def test_3_after_the_ramp_ready_equals_demand_plus_headroom(self, cluster: Cluster, class_namespace: str) -> None:
        ns = class_namespace

        def settled() -> dict[str, Any] | None:
            s = cluster.status(ns, "chat")
            r = s.get("replicas", {})
            return s if r.get("ready") == r.get("desired") and r.get("desired", 0) > 2 else None

        status = wait_for("ready == desired after the ramp", settled, 60)
        reasons = status["lastDecision"]["reasons"]
        demand = int(next(m.group(1) for r in reasons if (m := re.match(r"demand (\d+) replicas", r))))
        replicas = status["replicas"]
        # spec.headroom.replicas is 1, within spec.replicas.max: at 3 requests/s the demand may
        # itself reach max (8) at the top of the ramp, and then no warm replica fits above it.
        most = sample()["spec"]["replicas"]["max"]
        assert replicas["headroom"] >= min(1, most - demand), ("spec.headroom.replicas is 1", replicas, reasons)
        assert f"recommends {demand + 1} = demand {demand} + headroom 1" in reasons or replicas["headroom"] > 1, reasons
        assert replicas["ready"] == replicas["desired"] == demand + replicas["headroom"], (replicas, reasons)
        assert cluster.deployment_replicas(ns, "chat") == replicas["desired"]
        assert not TestLoadCycle.load.done(), "the load should still be running"

    # Three rate windows for the load signal to read 0, the scale-down window, then a step a period.
    @pytest.mark.timeout(600)
    def test_4_after_the_load_scale_down_waits_for_the_window_then_steps_by_one(
        self, cluster: Cluster, class_namespace: str
    ) -> None:
        ns = class_namespace
        report = TestLoadCycle.load.result(timeout=120)
        stopped_at = time.monotonic()
        assert report.sent > 120 and report.errors == 0, (report.sent, report.errors)
        start = cluster.deployment_replicas(ns, "chat") or 0
        assert start > 2
        history: list[tuple[float, int]] = [(stopped_at, start)]
        stabilised: set[str] = set()
        deadline = stopped_at + RATE_FALL_S + STABILISATION_S + start * (SCALE_DOWN_PERIOD_S + 3) + 20
        while history[-1][1] > 1 and time.monotonic() < deadline:
            time.sleep(0.5)
            replicas = cluster.deployment_replicas(ns, "chat") or 0
            cond = cluster.condition(ns, "chat", "AbleToScale") or {}
            stabilised.add(cond.get("reason", ""))
            if replicas != history[-1][1]:
                history.append((time.monotonic(), replicas))
        TestLoadCycle.recorder.stop.set()
        steps = [(round(t - stopped_at, 1), r) for t, r in history]
        assert history[-1][1] == 1, f"did not drain to spec.replicas.min: {steps}"
        # Stabilisation (the HPA rule): a step down to v at time t needs every recommendation of
        # the last 20 s to be at most v. Checked on the recommendations sampled from the status,
        # with 2 s of slack at both ends for the 1 s tick and the 0.5 s sampling.
        recs = TestLoadCycle.recorder.samples
        for t_down, v in history[1:]:
            window = [(round(t - stopped_at, 1), r) for t, r, _ in recs
                      if t_down - STABILISATION_S + 2 <= t <= t_down - 2 and r is not None]
            assert window, f"no recommendation sampled in the 20 s before the step to {v}"
            assert max(r for _, r in window) <= v, f"scaled down to {v} within 20 s of a higher recommendation: {window}"
        assert all(b[1] == a[1] - 1 for a, b in itertools.pairwise(history)), f"not one at a time: {steps}"
        gaps = [b[0] - a[0] for a, b in itertools.pairwise(history[1:])]
        assert all(g >= SCALE_DOWN_PERIOD_S - 1.5 for g in gaps), f"steps closer than the period: {steps}"
        assert Reason.ScaleDownStabilized in stabilised, stabilised
        cluster.event_message(ns, "ScaledDown", f"Scaled LLMDeployment {ns}/chat from 2 to 1 replicas")


# ------------------------------------------------------------------------------------------ 5


@pytest.mark.long(110)  # seconds beside others (fresh-clone CI)
def test_5_batch_pool_runs_in_the_trough_window_draining_after(cluster: Cluster, namespace: str) -> None:
    """The batch pool follows the backlog inside the window: with no Job it stays at 0 even while the
    window is open; a suspended Job (of unknown size, so the pool runs at its bound) gives it one
    replica in the window, reached through Service ``chat-batch``; the window closes, the Job is
    paused and the pool drains to 0 (e2e/test_batch.py runs real batch clients)."""
    now = datetime.now(UTC)
    opens = (now + timedelta(minutes=1)).replace(second=0, microsecond=0)
    if (opens - now).total_seconds() < 8:  # too close to apply and observe it closed first
        opens += timedelta(minutes=1)
    closes = opens + timedelta(minutes=1)
    window = {"start": opens.strftime("%H:%M"), "end": closes.strftime("%H:%M"), "timezone": "UTC"}
    # Windows only: with the operator's read of the nodes (the e2e operator has it on), the local
    # cluster's idle GPUs would keep the Job running after the window (releaseOnIdleCapacity;
    # e2e/test_batch.py::test_16b covers that).
    cluster.apply(namespace, sample(batch={"windows": [window], "replicas": 1, "releaseOnIdleCapacity": False}))
    # A suspended Job labelled for chat; its container is not the batch client, so nothing runs in
    # its pod (the pod runner runs only `llmscale batch run`). Due in two days: tomorrow's window
    # comes before its deadline, so it can wait for it once today's closes (with the default 24 h
    # completion window a Job of unknown size could not, and would keep running).
    due = (now + timedelta(days=2)).strftime("%Y-%m-%dT%H:%M:%SZ")
    cluster.apply(namespace, {"apiVersion": "batch/v1", "kind": "Job",
                              "metadata": {"name": "nightly", "labels": {"llmscale.dev/deployment": "chat"},
                                           "annotations": {"llmscale.dev/deadline": due}},
                              "spec": {"suspend": True, "template": {"spec": {
                                  "restartPolicy": "Never",
                                  "containers": [{"name": "work", "image": "busybox", "command": ["sleep", "3600"]}]}}}})
    batch = kubernetes.client.BatchV1Api(cluster.api)

    wait_for("BatchWindowOpen=False before the window", lambda: (
        (cluster.condition(namespace, "chat", "BatchWindowOpen") or {}).get("reason") == Reason.OutsideTroughWindows), 30)
    wait_for("BacklogWaiting before the window", lambda: (
        (cluster.condition(namespace, "chat", "BatchBacklog") or {}).get("reason") == Reason.BacklogWaiting), 30)
    assert cluster.deployment_replicas(namespace, "chat-batch") == 0
    assert not cluster.pods(namespace, "batch")
    assert batch.read_namespaced_job("nightly", namespace).spec.suspend is True

    wait_for_s = (opens - datetime.now(UTC)).total_seconds()
    wait_for("batch pool scaled to 1 inside the window",
             lambda: cluster.deployment_replicas(namespace, "chat-batch") == 1, wait_for_s + 15)
    assert datetime.now(UTC) >= opens - timedelta(seconds=1), "the batch pool started before its window"
    # The tick scales the Deployment before it patches the status: wait for the condition to follow.
    wait_for("BatchWindowOpen=True inside the window", lambda: (
        (c := cluster.condition(namespace, "chat", "BatchWindowOpen") or {}).get("status") == "True"
        and c.get("reason") == Reason.InsideTroughWindow), 15)
    pods = wait_for("a Ready batch pod", lambda: [p for p in cluster.pods(namespace, "batch") if is_ready(p)],
                    COLD_START_S + 30)
    assert pods[0].metadata.labels["llmscale.dev/pool"] == "batch"
    wait_for("the Job released onto the Ready batch replica",
             lambda: batch.read_namespaced_job("nightly", namespace).spec.suspend is False, 15)
    # Its engine serves, through the batch Service.
    # The pod runner routes to an engine once it answers /health, a moment after the pod is Ready.
    wait_for("the batch engine serving", lambda: cluster.pool_serving(namespace, "chat", "batch"), 20)
    url = cluster.service_url(namespace, "chat-batch")
    report = asyncio.run(replay(poisson_trace(2.0, 1.0, output=8), url, MODEL, deadline_s=30))
    assert report.sent >= 1 and report.errors == 0

    wait_s = (closes - datetime.now(UTC)).total_seconds()
    wait_for("the Job paused after the window", lambda: batch.read_namespaced_job("nightly", namespace).spec.suspend
             is True, wait_s + 15)
    wait_for("batch pool drained to 0 after the window",
             lambda: cluster.deployment_replicas(namespace, "chat-batch") == 0, 30)
    assert datetime.now(UTC) >= closes - timedelta(seconds=1), "the batch pool stopped before its window closed"
    wait_for("batch pods gone", lambda: not cluster.pods(namespace, "batch"), 30)
    wait_for("BatchWindowOpen=False after the window", lambda: (
        (cluster.condition(namespace, "chat", "BatchWindowOpen") or {}).get("status") == "False"), 15)


# ------------------------------------------------------------------------------------------ 6


@pytest.mark.alone  # fills every GPU of the cluster
def test_6_not_enough_gpus_leaves_pods_pending_while_the_operator_stops_adding(cluster: Cluster, namespace: str) -> None:
    nodes = cluster.core.list_node().items
    gpus = sum(int(n.status.allocatable.get("nvidia.com/gpu", "0")) for n in nodes)
    per_replica = max(int(n.status.allocatable.get("nvidia.com/gpu", "0")) for n in nodes)
    fits = gpus // per_replica
    # min = every node full plus one: at least one pod can never be scheduled.
    # The engine simulates one GPU whatever the pod requests (engine args come last and argparse
    # keeps the last value): a tensor-parallel mock would step so fast that two replicas never queue.
    engine = {"args": [*sample()["spec"]["engine"]["args"], "--gpus", "1"]}
    # The policy's model, though, sizes a replica of `per_replica` GPUs, far faster than the engine
    # it gets: its load signal could find the test's load light. An ITL SLO no replica can meet
    # makes any arrival need every replica the spec allows, so the demand beyond the GPUs is
    # certain whatever the model thinks of them (the queue and KV signals still read the engines).
    cluster.apply(namespace, sample(resources={"gpusPerReplica": per_replica}, engine=engine,
                                    replicas={"min": fits + 1, "max": fits + 4},
                                    slo={"itlP95Seconds": 0.001}))

    def pending() -> list[Any]:
        return [p for p in cluster.pods(namespace, "interactive")
                if any(c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable"
                       for c in p.status.conditions or [])]

    wait_for("an Unschedulable pod", pending, 60)
    wait_for("ready pods", lambda: (cluster.status(namespace, "chat").get("replicas", {}).get("ready") or 0) >= 1,
             COLD_START_S + 40)
    # Any arrival needs every replica (the ITL SLO above): a light, short load is enough, and leaves
    # no backlog for the end of the test to wait on.
    load = start_load(cluster, namespace, rate_rps=2.0, duration_s=25.0)
    cond = wait_for("ScalingLimited=InsufficientCapacity", lambda: (
        c if (c := cluster.condition(namespace, "chat", "ScalingLimited") or {}).get("reason") == Reason.InsufficientCapacity
        else None), 40)
    assert cond["status"] == "True" and cond["message"], cond
    # It keeps not adding while the load lasts.
    for _ in range(10):
        assert cluster.deployment_replicas(namespace, "chat") == fits + 1
        time.sleep(0.5)
    assert len(cluster.pods(namespace, "interactive")) == fits + 1
    assert pending(), "the pod should still be Pending"
    load.result(timeout=120)


# ------------------------------------------------------------------------------------------ 8


@pytest.mark.parametrize(
    ("spec_patch", "field_path"),
    [
        pytest.param({"replicas": {"min": 5, "max": 2}}, "spec.replicas", id="min-greater-than-max"),
        pytest.param({"batch": {"windows": [{"start": "01:00", "end": "05:00", "timezone": "Mars/Olympus_Mons"}]}},
                     "spec.batch.windows[0].timezone", id="bad-timezone"),
        pytest.param({"engine": {"type": "tgi"}}, "spec.engine.type", id="unknown-engine"),
        pytest.param({"replicas": {"min": 0}}, "spec.replicas.min", id="min-zero-without-a-wake-query"),
    ],
)
def test_8_invalid_specs_are_rejected_by_the_api_server(cluster: Cluster, namespace: str,
                                                        spec_patch: dict[str, Any], field_path: str) -> None:
    manifest = sample("bad", **spec_patch)
    with pytest.raises(kubernetes.client.ApiException) as info:
        cluster.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, manifest)
    assert info.value.status == 422, info.value.body
    # The field, from the Status's structured causes (details.causes[].field), not its text.
    fields = {c.get("field") for c in json.loads(info.value.body)["details"]["causes"]}
    assert field_path in fields, info.value.body
    # kubectl says the same to a user.
    p = cluster.kubectl("apply", "--server-side", "-n", namespace, "-f", "-",
                        input=yaml.safe_dump(manifest), check=False)
    assert p.returncode != 0 and field_path in p.stderr, p.stderr
    assert not cluster.custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)["items"]


# ------------------------------------------------------------------------------------------ 9


def test_9_delete_garbage_collects_the_children(cluster: Cluster, namespace: str) -> None:
    cluster.apply(namespace, sample(batch={"windows": [{"start": "00:00", "end": "12:00"}], "replicas": 1}))
    wait_for("children and pods", lambda: cluster.deployment_replicas(namespace, "chat")
             and cluster.deployment_replicas(namespace, "chat-batch") is not None
             and cluster.pods(namespace), 30)
    assert cluster.core.read_namespaced_service("chat", namespace)
    cluster.custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "chat")

    deleted = time.monotonic()

    def left() -> list[str]:
        """What is not collected yet, e.g. ``Pod chat-…-x (Running, terminating, its engine runs)``."""
        kinds = {
            "Deployment": cluster.apps.list_namespaced_deployment(namespace).items,
            "ReplicaSet": cluster.apps.list_namespaced_replica_set(namespace).items,
            "Service": cluster.core.list_namespaced_service(namespace).items,
            "PodDisruptionBudget": cluster.policy.list_namespaced_pod_disruption_budget(namespace).items,
        }
        out = [f"{kind} {o.metadata.name}" for kind, items in kinds.items() for o in items]
        for pod in cluster.core.list_namespaced_pod(namespace).items:
            state = [pod.status.phase if pod.status else "?"]
            if pod.metadata.deletion_timestamp is not None:
                state.append("terminating")
            if ADDRESS_ANNOTATION in (pod.metadata.annotations or {}):
                state.append("its engine runs")
            out.append(f"Pod {pod.metadata.name} ({', '.join(state)})")
        return out

    def gone() -> bool:
        if remaining := left():
            raise AssertionError(f"{time.monotonic() - deleted:.0f} s after the delete: " + "; ".join(remaining))
        return True

    # Three rounds of the garbage collector (owner → Deployments → ReplicaSets → pods), then each
    # running engine's preStop hook (its 15 s endpoint delay), SIGTERM and exit before the pod
    # runner deletes the pod: 8 s on a warm idle cluster, 38 s on a fresh one (its discovery sync), more
    # beside the other scenarios.
    wait_for("Deployments, ReplicaSets, Service, PDB and pods garbage-collected", gone, 120)


# ----------------------------------------------------------------------------------------- 11

#: The router's demand for Service <name>: requests it holds for want of a ready engine, plus those
#: it received in the last 10 s (10 scrapes); ``or vector(0)`` before the router knows the Service.
WAKE_QUERY = (
    '(sum(llmscale_router_pending_requests{namespace="$namespace", service="$name"})'
    ' + sum(rate(llmscale_router_requests_total{namespace="$namespace", service="$name"}[10s])))'
    " or vector(0)"
)


def completion(cluster: Cluster, namespace: str, timeout_s: float = 90.0) -> tuple[int, float]:
    """One completion through the router's Service path: ``(HTTP status, seconds it took)``."""
    body = json.dumps({"model": MODEL, "prompt": "hello", "max_tokens": 8}).encode()
    request = urllib.request.Request(cluster.service_url(namespace, "chat"), data=body,
                                     headers={"Content-Type": "application/json"})
    started = time.monotonic()
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as r:
            r.read()
            return r.status, time.monotonic() - started
    except urllib.error.HTTPError as exc:
        return exc.code, time.monotonic() - started


@pytest.mark.long(140)  # seconds beside others (fresh-clone CI)
@pytest.mark.timeout(600)  # three rate windows to read 0, the scale-down window, then a cold start
def test_11_scale_to_zero_round_trip_wakes_on_the_routers_queue(cluster: Cluster, namespace: str) -> None:
    """``replicas.min: 0`` with a wake query on the router's metrics: after a little load the pool
    goes to zero once the scale-down window has passed; a request held by the router wakes it; the
    request is served once the new replica is Ready."""
    manifest = sample(replicas={"min": 0, "max": 4}, scaling={"wake": {"query": WAKE_QUERY}},
                      slo={"ttftP95Seconds": 30})
    apply_and_wait_ready(cluster, namespace, manifest, ready=2)
    # A little load, so the pool has recommended replicas recently: the way down has to wait.
    load = start_load(cluster, namespace, rate_rps=1.0, duration_s=8.0)
    assert load.result(timeout=90).errors == 0
    load_done = time.monotonic()

    # Idle: down one replica per 5 s, no sooner than the 20 s scale-down window allows, which starts
    # once the load signal's arrival rate (finished requests over the 60 s rate window, floored at
    # the mean of the last three windows) reads 0.
    wait_for("the pool at zero replicas", lambda: cluster.deployment_replicas(namespace, "chat") == 0,
             RATE_FALL_S + STABILISATION_S + 10 + 2 * (SCALE_DOWN_PERIOD_S + 3) + 30)
    at_zero = time.monotonic()
    status = cluster.status(namespace, "chat")
    # The stabilisation window held: every recommendation of the last 20 s before zero was 0, and
    # the pool did not reach zero before the window had passed since the load ended.
    recent = [r for t, r in status["policyState"]["recommendations"] if t > time.time() - STABILISATION_S + 2]
    assert recent and max(recent) == 0, status["policyState"]
    assert at_zero - load_done >= STABILISATION_S - 2, f"zero {at_zero - load_done:.0f} s after the load"
    cluster.event_message(namespace, "ScaledDown", f"Scaled LLMDeployment {namespace}/chat from 1 to 0 replicas")
    assert any(r.startswith("idle: ") for r in status["lastDecision"]["reasons"]), status["lastDecision"]
    cond = wait_for("MetricsAvailable=WakeQueryOnly at zero", lambda: (
        c if (c := cluster.condition(namespace, "chat", "MetricsAvailable") or {}).get("reason")
        == Reason.WakeQueryOnly else None), 15)
    assert cond["status"] == "True", cond
    ready = cluster.condition(namespace, "chat", "Ready") or {}
    assert (ready.get("status"), ready.get("reason")) == ("False", "ScaledToZero"), ready
    wait_for("engines gone", lambda: not cluster.pods(namespace, "interactive"), 60)

    # A request arrives: the router holds it, its queue wakes the pool, the request is served.
    with ThreadPoolExecutor(max_workers=1) as pool:
        sent = pool.submit(completion, cluster, namespace)
        woke = wait_for("a scale from zero", lambda: (r := cluster.deployment_replicas(namespace, "chat")) and r, 30)
        assert woke == 2, "one replica of demand plus one of headroom"
        code, took = sent.result(timeout=120)
    assert code == 200, code
    assert took >= COLD_START_S - 1, f"served in {took:.1f} s: it must have waited for the cold start"
    woken = cluster.event_message(namespace, "ScaledUp", f"Scaled LLMDeployment {namespace}/chat from 0 to 2 replicas")
    # The demand the wake query set leads the message; its own line ("the wake query reads ...") follows.
    assert re.search(r"demand \d+ replicas \(wake query\)|wake query reads", woken), woken


# ----------------------------------------------------------------------------------------- 12


#: With an external cluster: the secured Prometheus's URL, its CA file, user and password.
SECURED_ENV = (
    "LLMSCALE_E2E_SECURED_PROMETHEUS_URL", "LLMSCALE_E2E_SECURED_PROMETHEUS_CA_FILE",
    "LLMSCALE_E2E_SECURED_PROMETHEUS_USERNAME", "LLMSCALE_E2E_SECURED_PROMETHEUS_PASSWORD",
)


def _pki(d: Path) -> tuple[Path, Path, Path]:
    """A CA and a server certificate for 127.0.0.1 signed by it (openssl, P-256): ``(ca, cert, key)``."""
    d.mkdir(parents=True, exist_ok=True)
    curve = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    run = functools.partial(subprocess.run, check=True, capture_output=True, cwd=d)
    run(["openssl", "req", "-x509", *curve, "-keyout", "ca.key", "-out", "ca.crt", "-days", "1",
         "-subj", "/CN=e2e-prometheus-ca"])
    (d / "server.ext").write_text("subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
    run(["openssl", "req", *curve, "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=prometheus"])
    run(["openssl", "x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
         "-out", "server.crt", "-days", "1", "-extfile", "server.ext"])
    return d / "ca.crt", d / "server.crt", d / "server.key"


@pytest.mark.alone  # runs its own operator in place of the session's
def test_12_authenticated_prometheus_over_tls_with_basic_auth(
    cluster: Cluster, namespace: str, tmp_path: Path
) -> None:
    """A second Prometheus scraping the same engines demands TLS and basic auth
    (``--web.config.file``). The operator, given its CA, user and password file through its
    settings, reads it and scales; with a wrong password it holds and says why."""
    user, secret = "llmscale", "s3cret"
    if cluster.local_state is not None:
        ca, cert, key = _pki(tmp_path / "pki")
        hashed = bcrypt.hashpw(secret.encode(), bcrypt.gensalt(rounds=4)).decode()
        web_config = tmp_path / "web.yml"
        web_config.write_text(yaml.safe_dump({
            "tls_server_config": {"cert_file": str(cert), "key_file": str(key)},
            "basic_auth_users": {user: hashed},
        }))
        url = addons.start_secured_prometheus(cluster.local_state, web_config, ca, user, secret)
    else:
        external = {v: os.environ.get(v) for v in SECURED_ENV}
        if not all(external.values()):
            pytest.fail(f"with an external cluster this scenario needs {', '.join(SECURED_ENV)}: a Prometheus "
                        "scraping the engines over TLS with basic auth (see docs/e2e.md)")
        url, ca = str(external[SECURED_ENV[0]]), Path(str(external[SECURED_ENV[1]]))
        user, secret = str(external[SECURED_ENV[2]]), str(external[SECURED_ENV[3]])
    password = tmp_path / "password"
    password.write_text("wrong\n")
    auth = ("--prometheus-url", url, "--prometheus-ca-file", str(ca), "--prometheus-username", user)
    try:
        # Plain HTTP or no credentials get nowhere: it really demands both.
        with pytest.raises(urllib.error.URLError):
            urllib.request.urlopen(url.replace("https://", "http://") + "/-/ready", timeout=3).read()
        cluster.run_operator(*auth, env={"LLMSCALE_PROMETHEUS_PASSWORD_FILE": str(password)})
        cluster.apply(namespace, sample(slo={"ttftP95Seconds": 30}))
        cond = wait_for("MetricsAvailable=False naming the refused credentials", lambda: (
            c if "refused the credentials (HTTP 401)" in (
                c := cluster.condition(namespace, "chat", "MetricsAvailable") or {}).get("message", "") else None), 60)
        assert (cond["status"], cond["reason"]) == ("False", Reason.MetricsMissing), cond
        assert cluster.deployment_replicas(namespace, "chat") == 2, "held, not guessed"

        # The right password, through the file the settings name (re-read when it changes).
        password.write_text(secret + "\n")
        wait_for("ready replicas and MetricsAvailable=True over TLS with basic auth", lambda: (
            cluster.status(namespace, "chat").get("replicas", {}).get("ready") == 2
            and (cluster.condition(namespace, "chat", "MetricsAvailable") or {}).get("status") == "True"
        ), COLD_START_S + 60)
        load = start_load(cluster, namespace, rate_rps=3.0, duration_s=40.0)
        new = wait_for("a scale-up on signals read through TLS and basic auth",
                       lambda: (r := cluster.deployment_replicas(namespace, "chat")) and r > 2 and r, 60)
        reasons = " | ".join(cluster.status(namespace, "chat")["lastDecision"]["reasons"])
        assert new > 2 and "queue depth" in reasons, reasons
        # The scrape interval from the targets API, through TLS too (read again 60 s after the 401).
        wait_for("RateWindowFits=WindowFits", lambda: (
            cluster.condition(namespace, "chat", "RateWindowFits") or {}).get("reason") == Reason.WindowFits, 75)
        load.result(timeout=120)
    finally:
        cluster.restore_operator()
        if cluster.local_state is not None:
            addons.stop_secured_prometheus(cluster.local_state)


# ----------------------------------------------------------------------------------------- 13


@pytest.mark.long(60)  # seconds beside others (fresh-clone CI)
def test_13_scale_target_scales_a_kubectl_deployment_on_its_pods_signals(cluster: Cluster, namespace: str) -> None:
    """spec.scaleTargetRef: a mock-engine Deployment made with `kubectl create deployment` (its pods
    carry none of llmscale's labels) and its own Service. llmscale finds the pods by the selector of
    /scale, reads their signals from Prometheus by pod name, scales the Deployment through /scale
    under load, owns nothing, and leaves it running when the LLMDeployment goes."""
    cluster.kubectl("create", "deployment", "vllm", "-n", namespace, "--image=llmscale:dev", "--replicas=1", "--",
                    "llmscale", "engine", "--model", "llama-3.1-8b", "--gpu", "l40s", "--gpus", "1",
                    "--served-model-name", MODEL, "--max-model-len", "2048", "--max-num-seqs", "4",
                    "--num-gpu-blocks-override", "152", "--host", "0.0.0.0", "--port", "8000")
    # Scraped the common way on a cluster (kind's Prometheus keeps pods annotated so); the local
    # cluster's pod runner discovers every engine it runs anyway.
    cluster.kubectl("patch", "deployment", "vllm", "-n", namespace, "-p", json.dumps({"spec": {"template": {
        "metadata": {"annotations": {"prometheus.io/scrape": "true", "prometheus.io/port": "8000"}}}}}))
    cluster.apply(namespace, {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "vllm"},
                              "spec": {"selector": {"app": "vllm"},
                                       "ports": [{"name": "http", "port": 8000, "targetPort": 8000}]}})
    manifest = sample("chat", replicas={"min": 1, "max": 4}, engine={"type": "vllm"},
                      scaleTargetRef={"apiVersion": "apps/v1", "kind": "Deployment", "name": "vllm"},
                      headroom={"replicas": 0, "coldStartSeconds": COLD_START_S, "growthFactor": 0},
                      slo={"ttftP95Seconds": 30})
    cluster.apply(namespace, manifest)
    wait_for("fresh signals of the Deployment's pod", lambda: (
        (cluster.condition(namespace, "chat", "MetricsAvailable") or {}).get("status") == "True"
        and cluster.status(namespace, "chat").get("signals", {}).get("queueDepth") is not None), 60)
    assert cluster.deployment_replicas(namespace, "vllm") == 1

    load = start_load_to(cluster, cluster.service_url(namespace, "vllm"), rate_rps=4.0, duration_s=40.0)
    wait_for("the Deployment scaled up on its queue", lambda: (cluster.deployment_replicas(namespace, "vllm") or 0) > 1,
             60)
    report = load.result(timeout=120)
    assert report.sent > 0 and report.errors < report.sent, report
    events = [e.message for e in cluster.events(namespace, "ScaledUp")]
    assert any("queue depth" in m for m in events), events
    dep = cluster.apps.read_namespaced_deployment("vllm", namespace)
    assert dep.metadata.owner_references is None
    owners = {(m.manager, m.subresource) for m in dep.metadata.managed_fields if "f:replicas" in json.dumps(m.fields_v1)}
    assert ("llmscale", "scale") in owners, owners
    assert not cluster.core.list_namespaced_service(namespace, label_selector="app.kubernetes.io/managed-by=llmscale").items

    replicas = cluster.deployment_replicas(namespace, "vllm")
    cluster.custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "chat")
    wait_for("the LLMDeployment gone", lambda: not cluster.custom.list_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL)["items"], 30)
    time.sleep(3)
    assert cluster.deployment_replicas(namespace, "vllm") == replicas, "the Deployment was left as it was"
