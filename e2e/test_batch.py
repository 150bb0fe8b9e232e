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
from llmscale.batch.requests import read_requests
from llmscale.batch.size import batch_size
from llmscale.policy import Reason

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
@pytest.mark.timeout(600)
def test_16_jobs_wait_for_their_window_a_near_deadline_goes_first_and_a_closing_window_pauses_without_loss(
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
    cluster.apply(namespace, sample(batch={"windows": [local_window(*w1), local_window(*w2)], "maxReplicas": 1}))
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
