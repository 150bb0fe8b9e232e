"""End to end: batch Jobs released in their window, before it for a near deadline, paused when the
window closes and finished in a later window, every result written exactly once (issue 13).

The Jobs are ordinary suspended Jobs running ``llmscale batch run`` against Service ``chat-batch``;
the pod runner runs that client for real for each Ready Job pod (:mod:`llmscale.localcluster.jobpods`)
with the input and the results file on a hostPath folder of this machine (the fake nodes are this
machine), so a paused pod's results outlive it, and it SIGTERMs the client when the Job controller
deletes the pod of a suspended Job. Windows are written in a time zone (Asia/Kolkata, UTC+05:30) on
the wall clock, a minute or two ahead.
"""

from __future__ import annotations

import asyncio
import copy
import json
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import kubernetes
import pytest

from conftest import Cluster, sample, wait_for
from llmscale.api import LLMDeploymentSpec
from llmscale.batch.requests import read_requests
from llmscale.batch.size import batch_size
from llmscale.controller.gpusfree import GpuReader, pool_gpus_free
from llmscale.policy import Reason
from test_scenarios import start_load

ZONE = ZoneInfo("Asia/Kolkata")
MODEL = "llama-3.1-8b-instruct"
#: The nightly Job: 300 requests of 64 output tokens. On one batch replica of the sample (4 running
#: requests, ~19 ms a decode step) that is well over a minute of work, so the one-minute first
#: window ends mid-Job; the second window (three minutes) finishes it.
NIGHTLY_REQUESTS = 300
URGENT_REQUESTS = 12


def write_input(path: Path, n: int, max_tokens: int) -> list[str]:
    ids = []
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        for i in range(n):
            cid = f"{path.parent.name}-{i:04d}"
            ids.append(cid)
            body = {"model": MODEL, "prompt": f"document {i} " * 20, "max_tokens": max_tokens}
            f.write(json.dumps({"custom_id": cid, "method": "POST", "url": "/v1/completions", "body": body}) + "\n")
    return ids


def batch_job(name: str, folder: str, data: Path, annotations: dict[str, str]) -> dict[str, Any]:
    """A suspended Job as docs/batch.md writes it: ``llmscale batch run`` on a hostPath volume."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": {"llmscale.dev/deployment": "chat"}, "annotations": annotations},
        "spec": {
            "suspend": True,
            "backoffLimit": 2,
            "podFailurePolicy": {"rules": [
                {"action": "Ignore", "onExitCodes": {"containerName": "batch", "operator": "In", "values": [75]}},
                {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]},
            ]},
            "template": {"spec": {
                "restartPolicy": "Never",
                "terminationGracePeriodSeconds": 30,
                "containers": [{
                    "name": "batch", "image": "llmscale:dev", "command": ["llmscale", "batch", "run"],
                    "args": [f"--input=/data/{folder}/requests.jsonl", f"--output=/data/{folder}/results.jsonl",
                             "--url=http://chat-batch:8000", "--concurrency=8", "--grace=5",
                             "--progress=plain", "--progress-interval=5"],
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                }],
                "volumes": [{"name": "data", "hostPath": {"path": str(data), "type": "Directory"}}],
            }},
        },
    }


def results(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def local_window(opens: datetime, closes: datetime) -> dict[str, str]:
    return {"start": opens.astimezone(ZONE).strftime("%H:%M"), "end": closes.astimezone(ZONE).strftime("%H:%M"),
            "timezone": "Asia/Kolkata"}


def job_events(cluster: Cluster, namespace: str, job: str, reason: str) -> list[Any]:
    return [e for e in cluster.events(namespace, reason)
            if e.involved_object.kind == "Job" and e.involved_object.name == job]


# Up to 2 min 20 s until W1, W1, the gap, and W2 until the Job is done (under a minute as a rule; three
# at most): longer than the suite's 300 s default.
@pytest.mark.long(300)  # seconds beside others (fresh-clone CI): started first of them
@pytest.mark.beside_cpu  # it waits for minutes on the clock: beside the real-vLLM scenarios
@pytest.mark.timeout(600)
def test_16_batch_jobs_run_in_deadline_order_around_their_window_without_loss(
    cluster: Cluster, namespace: str
) -> None:
    if cluster.local_state is None:
        pytest.fail("this scenario needs the local cluster: the Jobs' hostPath folder is on this machine")
    batch = kubernetes.client.BatchV1Api(cluster.api)
    data = cluster.local_state / "batch-data" / namespace
    nightly_ids = write_input(data / "nightly" / "requests.jsonl", NIGHTLY_REQUESTS, max_tokens=64)
    urgent_ids = write_input(data / "urgent" / "requests.jsonl", URGENT_REQUESTS, max_tokens=16)

    # Windows: W1 one minute from T0, W2 three minutes from T0 + 2 min; T0 at least 80 s away so
    # the urgent Job's deadline (T0 − 10 s) cannot be met by waiting for W1.
    now = datetime.now(UTC)
    t0 = (now + timedelta(seconds=80 + 59)).replace(second=0, microsecond=0)
    w1 = (t0, t0 + timedelta(minutes=1))
    w2 = (t0 + timedelta(minutes=2), t0 + timedelta(minutes=5))
    # Windows and deadlines only: the idle GPUs of the local cluster are scenario 16b's.
    cluster.apply(namespace, sample(batch={"windows": [local_window(*w1), local_window(*w2)], "maxReplicas": 1,
                                           "releaseOnIdleCapacity": False}))
    wait_for("the batch Service chat-batch", lambda: cluster.core.read_namespaced_service("chat-batch", namespace), 30)

    size = {k: v for k, v in batch_size(read_requests(data / "nightly" / "requests.jsonl")).annotations().items()}
    cluster.apply(namespace, batch_job("nightly", "nightly", data, size))
    urgent_size = batch_size(read_requests(data / "urgent" / "requests.jsonl")).annotations()
    deadline = (t0 - timedelta(seconds=10)).strftime("%Y-%m-%dT%H:%M:%SZ")
    cluster.apply(namespace, batch_job("urgent", "urgent", data, {**urgent_size, "llmscale.dev/deadline": deadline}))

    # The urgent Job cannot wait for W1: released before it, onto a batch replica sized for it.
    wait_for("the urgent Job released", lambda: batch.read_namespaced_job("urgent", namespace).spec.suspend is False,
             60)
    assert datetime.now(UTC) < t0, "the urgent Job was released only when the window opened"
    (released,) = wait_for("its BatchJobReleased Event", lambda: job_events(cluster, namespace, "urgent",
                                                                             "BatchJobReleased"), 10)
    assert "deadline cannot wait" in released.message, released.message
    wait_for("the urgent Job complete", lambda: any(
        c.type == "Complete" and c.status == "True"
        for c in batch.read_namespaced_job("urgent", namespace).status.conditions or []), 90)
    done = results(data / "urgent" / "results.jsonl")
    assert sorted(r["custom_id"] for r in done) == sorted(urgent_ids)
    assert all(r["response"]["status_code"] == 200 for r in done)
    assert datetime.now(UTC) < t0 - timedelta(seconds=10), "the urgent Job finished after its deadline"

    # The nightly Job waits, suspended, until W1 opens; the status says so once the urgent one is done.
    wait_for("BacklogWaiting with the urgent Job done", lambda: (
        (cluster.condition(namespace, "chat", "BatchBacklog") or {}).get("reason") == Reason.BacklogWaiting
        and (cluster.status(namespace, "chat").get("batch") or {}).get("jobsDone") == 1), 15)
    status = cluster.status(namespace, "chat")["batch"]
    nightly = next(j for j in status["jobs"] if j["name"] == "nightly")
    assert nightly["state"] == "Waiting" and nightly["outstandingTokens"] > 0, status
    assert status.get("nextWindowOpen") == t0.strftime("%Y-%m-%dT%H:%M:%SZ"), status
    while datetime.now(UTC) < t0 - timedelta(seconds=1):
        assert batch.read_namespaced_job("nightly", namespace).spec.suspend is True, "released before its window"
        time.sleep(1)
    wait_for("the nightly Job released in W1", lambda: batch.read_namespaced_job("nightly", namespace).spec.suspend
             is False, 45)
    assert datetime.now(UTC) >= t0 - timedelta(seconds=1)

    # W1 closes mid-Job: paused, its pod drains, and what it wrote stays.
    wait_for("the nightly Job paused when W1 closed",
             lambda: batch.read_namespaced_job("nightly", namespace).spec.suspend is True,
             (w1[1] - datetime.now(UTC)).total_seconds() + 20)
    assert datetime.now(UTC) >= w1[1] - timedelta(seconds=1), "paused before the window closed"
    # Its client stops sending, finishes what is in flight (--grace 5) and exits 75; the pod stays
    # Terminating until then, and the Job counts it as terminating, not gone.
    wait_for("the nightly Job's pod gone", lambda: not cluster.core.list_namespaced_pod(
        namespace, label_selector="batch.kubernetes.io/job-name=nightly").items, 45)
    after_w1 = results(data / "nightly" / "results.jsonl")
    assert 0 < len(after_w1) < NIGHTLY_REQUESTS, f"{len(after_w1)} results after W1: not paused mid-Job"
    assert job_events(cluster, namespace, "nightly", "BatchJobPaused")
    # Nothing runs between the windows.
    while datetime.now(UTC) < w2[0] - timedelta(seconds=1):
        assert batch.read_namespaced_job("nightly", namespace).spec.suspend is True, "released between the windows"
        assert len(results(data / "nightly" / "results.jsonl")) == len(after_w1), "results written while paused"
        time.sleep(1)

    # W2 finishes it, every result exactly once.
    wait_for("the nightly Job complete in W2", lambda: any(
        c.type == "Complete" and c.status == "True"
        for c in batch.read_namespaced_job("nightly", namespace).status.conditions or []),
        (w2[1] - datetime.now(UTC)).total_seconds())
    lines = results(data / "nightly" / "results.jsonl")
    counts = Counter(r["custom_id"] for r in lines)
    assert sorted(counts) == sorted(nightly_ids) and set(counts.values()) == {1}, counts.most_common(3)
    assert all(r["response"]["status_code"] == 200 for r in lines)
    assert len(job_events(cluster, namespace, "nightly", "BatchJobReleased")) >= 2
    # The backlog is empty: the pool goes back to 0 and the status says so.
    wait_for("BacklogEmpty and the batch pool at 0", lambda: (
        (cluster.condition(namespace, "chat", "BatchBacklog") or {}).get("reason") == Reason.BacklogEmpty
        and cluster.deployment_replicas(namespace, "chat-batch") == 0), 30)
    final = cluster.status(namespace, "chat").get("batch") or {}
    assert final.get("jobsDone") == 2 and final.get("tokensOutstanding") == 0, final


# ------------------------------------------------------------------------------------------ idle GPUs


def free_gpus_by_node(cluster: Cluster, *, terminating: bool = True) -> dict[str, int]:
    """``{node: nvidia.com/gpu allocatable − requested by bound pods not finished, at least 0}`` of
    the Ready nodes, read here independently of the operator (as ``kubectl describe node`` sums
    them); ``terminating=False`` leaves out the pods being deleted (their GPUs come free soon)."""
    used: Counter[str] = Counter()
    for pod in cluster.core.list_pod_for_all_namespaces(
            field_selector="spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed").items:
        if not terminating and pod.metadata.deletion_timestamp is not None:
            continue
        for c in pod.spec.containers:
            wanted = {**((c.resources and c.resources.limits) or {}), **((c.resources and c.resources.requests) or {})}
            used[pod.spec.node_name] += int(wanted.get(GPU, 0))
    return {n.metadata.name: max(0, int(n.status.allocatable.get(GPU, 0)) - used[n.metadata.name])
            for n in cluster.core.list_node().items
            if any(c.type == "Ready" and c.status == "True" for c in n.status.conditions or [])}


def hog(name: str, node: str, gpus: int) -> dict[str, Any]:
    """A pod bound to ``node`` (no scheduler) holding ``gpus`` GPUs: another team's workload."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"e2e": "hog"}},
            "spec": {"nodeName": node, "terminationGracePeriodSeconds": 0, "containers": [{
                "name": "hog", "image": "registry.k8s.io/pause:3.10",
                "resources": {"limits": {GPU: str(gpus)}, "requests": {GPU: str(gpus)}}}]}}


def idle_reason(cluster: Cluster, namespace: str) -> str | None:
    reasons = (cluster.status(namespace, "chat").get("lastDecision") or {}).get("reasons") or []
    return next((r for r in reasons if "idle GPUs:" in r), None)


GPU = "nvidia.com/gpu"


@pytest.mark.alone  # holds every free GPU with pods of its own
@pytest.mark.timeout(300)
def test_16b_a_job_runs_early_only_on_idle_gpus_within_the_gpus_free(
    cluster: Cluster, namespace: str
) -> None:
    """Issue 13, idle capacity: outside any window, with the interactive SLO safe, a suspended Job
    waits while other pods hold every GPU, is released onto idle GPUs once one is free, and the batch
    pool (up to 2 replicas) never grows past the GPUs free. The interactive pool is fixed at 1
    replica (min = max), so no GPU is kept back for its growth."""
    if cluster.local_state is None:
        pytest.fail("this scenario needs the local cluster: the Jobs' hostPath folder is on this machine")
    batch = kubernetes.client.BatchV1Api(cluster.api)
    data = cluster.local_state / "batch-data" / namespace
    write_input(data / "early" / "requests.jsonl", 200, max_tokens=64)
    # The only window is 6 hours away: nothing but idle GPUs may release the Job now.
    opens = (datetime.now(UTC) + timedelta(hours=6)).replace(second=0, microsecond=0)
    cluster.apply(namespace, sample(replicas={"min": 1, "max": 1}, batch={
        "windows": [local_window(opens, opens + timedelta(hours=1))], "maxReplicas": 2}))
    wait_for("the interactive replica Ready", lambda: cluster.status(namespace, "chat").get("replicas", {}).get("ready")
             == 1, 90)

    # Every free GPU taken by pods bound to the nodes: one 1-GPU pod per node plus the rest. The GPUs
    # of pods still terminating (an earlier scenario's namespace) are taken too, so that nothing
    # comes free when they are gone: until then the nodes are overcommitted, and free reads 0.
    free = free_gpus_by_node(cluster, terminating=False)
    assert sum(free.values()) >= 2, free
    ones = []
    for i, (node, gpus) in enumerate(sorted(free.items())):
        if gpus > 1:
            cluster.core.create_namespaced_pod(namespace, hog(f"hog-{i}-rest", node, gpus - 1))
        if gpus > 0:
            cluster.core.create_namespaced_pod(namespace, hog(f"hog-{i}-one", node, 1))
            ones.append(f"hog-{i}-one")
    wait_for("no GPU free", lambda: sum(free_gpus_by_node(cluster).values()) == 0, 30)
    # The operator reads the GPUs every READ_PERIOD_S or longer (a slow read stretches the period): a
    # read from before the hogs would still show GPUs free (the documented lag; docs/batch.md,
    # "Limits"). The Job comes after a read that started once every hog was bound.
    hogs_bound = time.time()
    wait_for("the operator's read of the GPUs after the hogs", lambda: (
        cluster.operator_metric("llmscale_gpus_free_read_timestamp_seconds") or 0.0) > hogs_bound + 0.5, 120)

    load = start_load(cluster, namespace, rate_rps=0.5, duration_s=170)
    size = batch_size(read_requests(data / "early" / "requests.jsonl")).annotations()
    cluster.apply(namespace, batch_job("early", "early", data, size))

    # The planner knows the GPUs (none free) and the SLO is safe: the Job still waits.
    reason = wait_for("the planner judging idle GPUs with the interactive SLO safe", lambda: (
        r if (r := idle_reason(cluster, namespace)) and "GPUs free =" in r and "interactive SLO safe" in r
        else None), 90)
    assert batch.read_namespaced_job("early", namespace).spec.suspend is True, reason
    until = time.monotonic() + 10
    while time.monotonic() < until:
        assert sum(free_gpus_by_node(cluster).values()) == 0, "a GPU came free: the scenario's premise is gone"
        assert batch.read_namespaced_job("early", namespace).spec.suspend is True, "released with no GPU free"
        assert (cluster.deployment_replicas(namespace, "chat-batch") or 0) == 0, "batch pool grown with no GPU free"
        time.sleep(1)

    # One GPU comes free: the Job is released onto it, and the pool stays at that one GPU though
    # its maxReplicas is 2 and the Job's clients would keep two replicas busy.
    cluster.core.delete_namespaced_pod(ones[0], namespace, grace_period_seconds=0)
    wait_for("one GPU free", lambda: sum(free_gpus_by_node(cluster).values()) == 1, 30)

    pool_sizes: list[int] = []

    def released() -> bool:
        pool_sizes.append(cluster.deployment_replicas(namespace, "chat-batch") or 0)
        return bool(batch.read_namespaced_job("early", namespace).spec.suspend is False)

    wait_for("the Job released onto the idle GPU", released, 60)
    assert max(pool_sizes) <= 1, f"batch pool past the GPUs free: {pool_sizes}"
    (event,) = wait_for("its BatchJobReleased Event", lambda: job_events(cluster, namespace, "early",
                                                                      "BatchJobReleased"), 10)
    assert "the interactive pool leaves GPUs idle" in event.message, event.message
    until = time.monotonic() + 20
    while time.monotonic() < until:
        assert (cluster.deployment_replicas(namespace, "chat-batch") or 0) <= 1, "batch pool past the GPUs free"
        time.sleep(1)
    assert cluster.deployment_replicas(namespace, "chat-batch") == 1
    load.cancel()


def test_16c_without_rbac_on_nodes_the_gpus_free_stay_unknown_saying_why(cluster: Cluster, namespace: str) -> None:
    """The operator's read of the GPUs free as a ServiceAccount with no ClusterRole: refused (403),
    no answer rather than a guess, and the reason names the RBAC; with the session's credentials it
    reads every GPU node."""
    cluster.core.create_namespaced_service_account(namespace, {"metadata": {"name": "bare"}})
    request = kubernetes.client.AuthenticationV1TokenRequest(
        spec=kubernetes.client.V1TokenRequestSpec(audiences=[], expiration_seconds=600))
    token = wait_for("a token", lambda: getattr(cluster.core.create_namespaced_service_account_token(
        "bare", namespace, request).status, "token", None), 10)
    config = copy.copy(cluster.api.configuration)
    config.api_key, config.api_key_prefix = {"authorization": token}, {"authorization": "Bearer"}
    config.cert_file = config.key_file = None
    reader = GpuReader(kubernetes.client.ApiClient(config))
    assert asyncio.run(reader.read_once()) is None
    assert reader.unknown_because is not None and "403" in reader.unknown_because, reader.unknown_because
    assert "operator.readNodes" in reader.unknown_because

    full = GpuReader(cluster.api)
    read = asyncio.run(full.read_once())
    assert read is not None and full.unknown_because is None
    gpu_nodes = [n for n in read.nodes if n.allocatable.get(GPU, 0) > 0]
    assert gpu_nodes and all(n.usable for n in gpu_nodes), read.nodes
    spec = LLMDeploymentSpec.model_validate(sample()["spec"])
    assert pool_gpus_free(read, spec, namespace, "chat", 0, 0) == sum(free_gpus_by_node(cluster).values())
