"""Scenario 10 (issue 11, case 5): a scale-down during long streams cuts no request.

Three replicas of the sample (mock Llama-3.1-8B on an L40S, real time, about 19 ms a decode step).
Long streams run straight to two of the engines: two on pod A, one longer one on pod B, none on
pod C. Then ``spec.replicas`` drops to 1. What must happen, on the real API server with the pod
runner playing the kubelet (preStop hook, SIGTERM, SIGKILL after the grace period):

- the operator annotates the pods with their requests in flight before it lowers the replicas, so
  the ReplicaSet removes C (idle) and B (one stream) and keeps A (two);
- B leaves the router at once but stays ``Terminating`` until its stream has ended: its preStop
  hook waits for the engine's running requests to reach 0, then SIGTERM finds nothing to cut;
- every stream ends with ``[DONE]`` and its full token count.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from typing import Any

import pytest

from conftest import Cluster, sample, wait_for
from llmscale.controller.state.deletioncost import load_of

MODEL = "llama-3.1-8b-instruct"
#: Stream lengths, tokens: about 20 s and 30 s of decode at ~19 ms a step, both longer than the
#: preStop hook's 15 s endpoint delay, so only its wait for the running requests can save them.
#: The KV cache of the sample (152 blocks of 16 tokens) holds two 1,000-token streams, or one of
#: 1,600, without preemption.
SHORTER, LONGER = 1000, 1600


@dataclass
class Stream:
    """One streaming completion against one engine, read in a thread."""

    address: str
    max_tokens: int
    payloads: list[str] = field(default_factory=list)
    started: threading.Event = field(default_factory=threading.Event)
    ended_at: float | None = None
    error: str | None = None

    def start(self) -> Stream:
        threading.Thread(target=self._run, daemon=True).start()
        return self

    def _run(self) -> None:
        body = json.dumps({"model": MODEL, "prompt": "Tell me a long story.", "max_tokens": self.max_tokens,
                           "stream": True, "stream_options": {"include_usage": True}}).encode()
        request = urllib.request.Request(f"http://{self.address}/v1/completions", body,
                                         {"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=300) as r:
                for raw in r:
                    line = raw.decode().strip()
                    if line.startswith("data: "):
                        self.payloads.append(line.removeprefix("data: "))
                        self.started.set()
        except Exception as exc:  # recorded: a cut stream is the failure this scenario looks for
            self.error = f"{type(exc).__name__}: {exc}"
        finally:
            self.ended_at = time.monotonic()
            self.started.set()

    @property
    def done(self) -> bool:
        return self.ended_at is not None

    def completion_tokens(self) -> int | None:
        usage = [json.loads(p).get("usage") for p in self.payloads if p != "[DONE]"]
        last = [u for u in usage if u]
        return int(last[-1]["completion_tokens"]) if last else None


def engines(cluster: Cluster, namespace: str) -> dict[str, dict[str, Any]]:
    """Pod name -> the router's record of its engine (address, listening, stopping)."""
    with urllib.request.urlopen(f"{cluster.router_url}/status", timeout=5) as r:
        status = json.loads(r.read())
    return {e["pod"]: e for e in status["engines"] if e["namespace"] == namespace}


def pod_exists(cluster: Cluster, namespace: str, name: str) -> bool:
    selector = "app.kubernetes.io/managed-by=llmscale"
    return any(p.metadata.name == name for p in cluster.core.list_namespaced_pod(namespace, label_selector=selector).items)


@pytest.mark.long(50)  # seconds beside others (fresh-clone CI)
def test_10_scale_down_during_long_streams_cuts_no_request(cluster: Cluster, namespace: str) -> None:
    cluster.apply(namespace, sample(replicas={"min": 3, "max": 3}))
    serving = wait_for("3 engines answering", lambda: (
        e if len(e := {p: x for p, x in engines(cluster, namespace).items() if x["listening"]}) == 3 else None), 90)
    wait_for("the operator's status to show 3 ready", lambda: (
        cluster.status(namespace, "chat").get("replicas", {}).get("ready") == 3), 30)
    a, b, c = sorted(serving)
    streams = {
        a: [Stream(serving[a]["address"], SHORTER).start(), Stream(serving[a]["address"], SHORTER).start()],
        b: [Stream(serving[b]["address"], LONGER).start()],
    }
    for stream in (s for group in streams.values() for s in group):
        assert stream.started.wait(30) and stream.error is None, stream.error
    # Let Prometheus (1 s scrapes) and a tick see the requests in flight on each pod.
    wait_for("per-pod running requests in Prometheus", lambda: {
        r["metric"].get("pod"): float(r["value"][1])
        for r in cluster.prom(f'vllm:num_requests_running{{namespace="{namespace}"}}')
    } == {a: 2.0, b: 1.0, c: 0.0}, 20)

    def loads() -> dict[str, int | None]:
        """Each pod's requests in flight as its deletion cost says (``load × 1000 + cache share``)."""
        found = {p.metadata.name: (p.metadata.annotations or {}).get("controller.kubernetes.io/pod-deletion-cost")
                 for p in cluster.core.list_namespaced_pod(namespace).items}
        return {pod: None if (cost := found.get(pod)) is None else load_of(int(cost)) for pod in (a, b, c)}

    # The operator annotates each pod with its requests in flight before any scale-down (a busy
    # machine's scrape may be late for one tick: wait for the ticks, then scale down).
    wait_for("deletion costs from the requests in flight", lambda: loads() == {a: 2, b: 1, c: 0}, 30)
    cluster.apply(namespace, sample(replicas={"min": 1, "max": 1}))
    wait_for("Deployment chat at 1 replica", lambda: cluster.deployment_replicas(namespace, "chat") == 1, 30)
    found = loads()
    assert found == {a: 2, b: 1, c: 0}, found

    # The ReplicaSet removed the two least-loaded pods and kept the busiest.
    wait_for("pods B and C terminating", lambda: all(
        p.metadata.deletion_timestamp is not None or p.metadata.name not in (b, c)
        for p in cluster.core.list_namespaced_pod(namespace).items), 30)
    assert [p.metadata.name for p in cluster.pods(namespace, "interactive")] == [a]
    wait_for("pod C (idle) gone after the endpoint delay", lambda: not pod_exists(cluster, namespace, c), 60)

    # B drains: still there while its stream runs, gone soon after it ended.
    (long_stream,) = streams[b]
    while not long_stream.done:
        assert pod_exists(cluster, namespace, b), "pod B went away while its stream was running"
        time.sleep(0.5)
    wait_for("pod B gone once its stream ended", lambda: not pod_exists(cluster, namespace, b), 30)

    for pod, group in streams.items():
        for stream in group:
            wait_for(f"stream on {pod} to end", lambda s=stream: s.done, 120)  # type: ignore[misc]
            assert stream.error is None, (pod, stream.error)
            assert stream.payloads and stream.payloads[-1] == "[DONE]", (pod, stream.payloads[-2:])
            assert stream.completion_tokens() == stream.max_tokens, pod
    cluster.event_message(namespace, "ScaledDown", f"Scaled LLMDeployment {namespace}/chat from 3 to 1 replicas")
