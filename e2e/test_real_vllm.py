"""End-to-end scenarios with real vLLM engines: llmscale scales on the signals a real engine exports.

The pod runner runs, for each pod of an LLMDeployment with ``spec.engine.type: vllm``, the
operator's own vLLM command with a tiny random-weight Llama and CPU settings
(:mod:`llmscale.localcluster.realvllm`): real batching, a real paged KV cache (128-token blocks on
the CPU backend), real preemptions and vLLM's own ``/metrics``, scraped by Prometheus. The module
fixture installs vLLM first (``build-vllm.sh``: a no-op when cached, ~2-3 minutes cold), so the
scenarios never skip.

vLLM starts when its pod runs (as a kubelet starts the container) and answers in ~40 s on an idle
core, so the pods' cold start (``headroom.coldStartSeconds``) is 40 s: KWOK turns them Ready then.

- ``test_squeezed_cache_preemptions_drive_the_preemption_signal``: ``--num-gpu-blocks-override 24
  --max-num-seqs 8`` (3,072 tokens of cache) and 1,000 + 800-token requests: vLLM preempts, the
  preemption rate llmscale reads is above its target and its proposal asks for more replicas,
  with the queue and KV-cache targets set out of reach so that they propose nothing.
- ``test_real_engines_scale_up_on_queue_with_kv_cache_pressure_then_back_down``: one replica with
  ``--max-num-seqs 4`` and 64 blocks; an open-loop load of long answers keeps 12 requests in flight:
  the queue and the KV cache pass their targets, llmscale scales 1 -> 2 with every signal known
  (``MetricsAvailable`` True, ``MetricsFresh`` under load, never ``False``), the second engine
  reports, and after the load it steps back to 1. It runs last: once its load is over it says so
  (``cpu_work_over``), and ``make test`` starts the unit suite beside its minutes of waiting.

The load generator sends the same prompt token ids every time; prefix caching is off in both
(``--no-enable-prefix-caching``) so that each request holds its own KV blocks, as distinct prompts do.
"""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest

from conftest import Cluster, sample, wait_for
from llmscale.loadgen import ReplayReport, replay
from llmscale.localcluster import realvllm
from llmscale.policy.mix import RATE_FLOOR_WINDOWS
from llmscale.sim.trace import Trace

#: The preemption line once it asks for 2 or more replicas, as a measure or as a symptom.
PREEMPTION_PROPOSES_2 = r"proposes (?:one more than current demand \d+: )?([2-9]|\d\d)"

#: vLLM's start-up is minutes on a busy 2-core machine (~40 s on a free core, 150 s measured at a
#: load average of 13), and a scenario waits for two of them: above the suite's 300 s. ``cpu`` (alone,
#: and first): two real engines take every core of a 2-core machine, and a scenario or a unit test
#: beside them (or they beside it) misses its timings for want of CPU, not for a fault of llmscale.
pytestmark = [pytest.mark.timeout(900), pytest.mark.cpu]

MODEL = "llama-3.1-8b-instruct"  # the served name; the weights are the tiny local model's
COLD_START_S = 40.0
STABILISATION_S = 10.0
RATE_WINDOW_S = 60.0  # the signals' default rate window


@pytest.fixture(scope="module", autouse=True)
def vllm_installed() -> realvllm.VllmInstall:
    """Real vLLM and the tiny model, installed (cached) before any scenario: never skipped."""
    return realvllm.install()


def vllm_sample(args: list[str], **overrides: Any) -> dict[str, Any]:
    """The sample LLMDeployment on real vLLM with ``args``: 1-2 replicas, no warm headroom."""
    return sample(
        engine={"type": "vllm", "image": "vllm/vllm-openai:v0.32.0", "args": args},
        replicas={"min": 1, "max": 2},
        headroom={"replicas": 0, "coldStartSeconds": COLD_START_S, "growthFactor": 0},
        slo={"ttftP95Seconds": 60, "itlP95Seconds": 1.0},
        **overrides,
    )


def fixed_trace(rate_rps: float, duration_s: float, prompt: int, output: int) -> Trace:
    """Requests of one size at a fixed rate (every 1/rate s) for ``duration_s``."""
    arrivals = np.arange(0.0, duration_s, 1.0 / rate_rps)
    n = len(arrivals)
    return Trace(arrivals, np.full(n, prompt, np.int64), np.full(n, output, np.int64), np.zeros(n, np.bool_),
                 0.0, duration_s, source=f"fixed {rate_rps} req/s")


def start_load(url: str, trace: Trace, max_in_flight: int) -> Future[ReplayReport]:
    """Replay ``trace`` to ``url`` in a background thread, at most ``max_in_flight`` open."""
    pool = ThreadPoolExecutor(max_workers=1)
    fut = pool.submit(asyncio.run, replay(trace, url, MODEL, deadline_s=trace.duration_s + 120,
                                          max_in_flight=max_in_flight))
    pool.shutdown(wait=False)
    return fut


class Watch(threading.Thread):
    """Samples the MetricsAvailable condition every 0.5 s until stopped: (monotonic s, status, reason)."""

    def __init__(self, cluster: Cluster, namespace: str) -> None:
        super().__init__(daemon=True)
        self.cluster, self.namespace = cluster, namespace
        self.samples: list[tuple[float, str, str, str]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                cond = self.cluster.condition(self.namespace, "chat", "MetricsAvailable") or {}
                self.samples.append((time.monotonic(), cond.get("status", ""), cond.get("reason", ""),
                                     cond.get("message", "")))
            except Exception:  # an API hiccup is not a signal
                pass
            self.stop.wait(0.5)


def engines_in_prometheus(cluster: Cluster, ns: str) -> int:
    """How many pods' vLLM gauges Prometheus holds (fresh) for Deployment chat."""
    return len(cluster.prom(f'vllm:num_requests_waiting{{namespace="{ns}", llmscale_dev_deployment="chat"}}'))


def ready_with_fresh_metrics(cluster: Cluster, ns: str, ready: int) -> None:
    wait_for(f"{ns}/chat: {ready} ready replicas, real engines reporting, MetricsAvailable", lambda: (
        cluster.status(ns, "chat").get("replicas", {}).get("ready") == ready
        and engines_in_prometheus(cluster, ns) == ready
        and (cluster.condition(ns, "chat", "MetricsAvailable") or {}).get("status") == "True"
    ), COLD_START_S + 240)


def test_squeezed_cache_preemptions_drive_the_preemption_signal(cluster: Cluster, namespace: str) -> None:
    ns = namespace
    # 24 blocks x 128 tokens = 3,072 tokens, and a 1,000 + 800-token request grows to 15 blocks: any
    # two running together outgrow the cache, so vLLM preempts one (with 500-token answers two fit
    # exactly, 2 x 12 = 24 blocks, and it need not).
    args = ["--num-gpu-blocks-override", "24", "--max-num-seqs", "8", "--no-enable-prefix-caching"]
    cluster.apply(ns, vllm_sample(args, scaling={
        "tickSeconds": 1, "metricsMaxAgeSeconds": 10,
        # Out of reach: the queue and the KV cache propose nothing; the preemption rate must ask.
        "targets": {"queueDepthPerReplica": 1000, "kvCacheUtilization": 1.0, "preemptionsPerSecondPerReplica": 0.05},
        "scaleUp": {"stabilizationWindowSeconds": 0},
    }))
    t0 = time.monotonic()
    ready_with_fresh_metrics(cluster, ns, 1)
    # A modest rate, so that the load signal (the performance model's capacity at this rate) does
    # not ask for 2 itself: the preemptions must.
    load = start_load(cluster.service_url(ns, "chat"), fixed_trace(1.0, 45.0, prompt=1000, output=800), 8)
    preempted = f'sum(vllm:num_preemptions_total{{namespace="{ns}", llmscale_dev_deployment="chat"}})'
    wait_for("real preemptions in Prometheus", lambda: (cluster.prom_value(preempted) or 0) > 0, 60)

    def preemption_decision() -> list[str] | None:
        """The decision's reasons once the preemption rate, above target, proposes 2 or more."""
        status = cluster.status(ns, "chat")
        rate = (status.get("signals") or {}).get("preemptionRate")
        reasons = list(status.get("lastDecision", {}).get("reasons", []))
        # With the load signal known the preemption rate is a symptom (issue 27): "proposes one more
        # than current demand 1: 2"; without it "proposes 2".
        line = any(r.startswith("preemption rate") and re.search(PREEMPTION_PROPOSES_2, r) for r in reasons)
        return reasons if rate and rate > 0.05 and line else None

    reasons = wait_for("the preemption rate above target proposing 2 replicas", preemption_decision, 90)
    line = next(r for r in reasons if r.startswith("preemption rate"))
    # The preemption rate sets the demand; the full KV cache (1.0 against a target of 1.0:
    # proposes 1) and the queue do not ask for 2.
    assert any(re.fullmatch(r"demand [2-9] replicas \(preemption rate\)", r) for r in reasons), reasons
    assert not any(r.startswith(("queue depth", "KV-cache")) and re.search(r"proposes ([2-9]|\d\d)", r)
                   for r in reasons), reasons
    wait_for("scale-up of Deployment chat to 2", lambda: cluster.deployment_replicas(ns, "chat") == 2, 30)
    report = load.result(timeout=200)
    assert report.errors == 0, (report.sent, report.errors)
    print(f"\n[real vLLM] {line}; scenario {time.monotonic() - t0:.0f} s")


def test_real_engines_scale_up_on_queue_with_kv_cache_pressure_then_back_down(
    cluster: Cluster, namespace: str, cpu_work_over: Callable[[], None]
) -> None:
    ns = namespace
    # 64 blocks x 128 tokens: four running 32 + 1,900-token requests fill 4 x 16 = 64 of them.
    args = ["--max-num-seqs", "4", "--num-gpu-blocks-override", "64", "--no-enable-prefix-caching"]
    cluster.apply(ns, vllm_sample(args, scaling={
        # Fresh within 30 s (the default is 90): one read that overruns the fleet reader's 10 s wait on a
        # busy 2-core machine is carried, not "no signals"; the carried snapshot is then as old as its
        # newest sample when read (up to a scrape interval and Prometheus's lag) plus the failed read's
        # 10 s and a tick, which came to 24 s in a fresh-clone CI on 2026-12-06 (20 s failed there).
        "tickSeconds": 1, "metricsMaxAgeSeconds": 30,
        "targets": {"queueDepthPerReplica": 2, "kvCacheUtilization": 0.5},
        "scaleUp": {"stabilizationWindowSeconds": 0},
        "scaleDown": {"stabilizationWindowSeconds": STABILISATION_S, "maxReplicasPerPeriod": 1, "periodSeconds": 5},
    }))
    t0 = time.monotonic()
    ready_with_fresh_metrics(cluster, ns, 1)
    first_ready_s = time.monotonic() - t0
    # The operator's command, run for real: the pod's container is vLLM's server module.
    pod = cluster.pods(ns, "interactive")[0]
    argv = list(pod.spec.containers[0].command) + list(pod.spec.containers[0].args)
    assert realvllm.is_vllm_command(argv) and "--max-num-seqs" in argv, argv
    watch = Watch(cluster, ns)
    watch.start()

    # 3 long answers a second (~3 s each at batch 4 on one free core, more on a busy one) against a
    # capacity of about 1.5/s a replica: 4 run, the rest of the 12 in flight wait; excess arrivals
    # are dropped, so the backlog is bounded and drains in seconds once the load stops.
    load = start_load(cluster.service_url(ns, "chat"), fixed_trace(3.0, 90.0, prompt=32, output=1900), 12)
    queue = f'sum(vllm:num_requests_waiting{{namespace="{ns}", llmscale_dev_deployment="chat"}})'
    kv = f'max(vllm:kv_cache_usage_perc{{namespace="{ns}", llmscale_dev_deployment="chat"}})'
    wait_for("the real queue above 2 in Prometheus", lambda: (cluster.prom_value(queue) or 0) > 2, 60)
    wait_for("the real KV cache above 0.5 in Prometheus", lambda: (cluster.prom_value(kv) or 0) > 0.5, 60)

    wait_for("scale-up of Deployment chat to 2", lambda: cluster.deployment_replicas(ns, "chat") == 2, 30)
    status = cluster.status(ns, "chat")
    signals = status["signals"]
    for key in ("queueDepth", "runningRequests", "kvCacheUtilization", "preemptionRate"):
        assert signals.get(key) is not None, (key, signals)
    # The decision that scaled is the ScaledUp Event's (the status holds the newest tick's, which
    # may already hold 2 with the second replica starting). Which of the engines' own signals asks
    # first depends on timing: the load signal (arrivals from the finished counter and the in-flight
    # growth, bound by max-num-seqs), the queue or the KV cache.
    scaled = f"Scaled LLMDeployment {ns}/chat from 1 to 2 replicas: "
    events = wait_for("a ScaledUp Event", lambda: [e.message for e in cluster.events(ns, "ScaledUp")
                                                   if e.message.startswith(scaled)], 15)
    # The message leads with the demand line, which names the signal that set the demand.
    assert any(re.match(r"demand ([2-9]|\d\d) replicas \((load|queue depth|KV-cache utilisation|preemption rate)\)",
                        m.removeprefix(scaled)) for m in events), "\n".join(events)

    # The second engine starts, is Ready and reports; both pods' signals are read.
    ready_with_fresh_metrics(cluster, ns, 2)
    fresh = wait_for("MetricsFresh under load (every signal, latencies too, known)", lambda: (
        c if (c := cluster.condition(ns, "chat", "MetricsAvailable") or {}).get("reason") == "MetricsFresh" else None
    ), 30)
    assert fresh["status"] == "True", fresh

    report = load.result(timeout=200)
    answered = len(report.results) - report.errors
    assert report.errors == 0 and answered > 10, (report.sent, answered, report.errors)
    # The engines idle from here while the load leaves the rate windows (up to three minutes): the
    # unit suite may start beside this scenario (the last of the real-vLLM ones).
    cpu_work_over()
    # The load signal reads the arrival rate over a 1-minute window, floored at the mean of the last
    # three windows unless the newest is a fall (policy.mix.FALL_SHARE): at most three windows.
    wait_for("scale-down to 1 after the load", lambda: cluster.deployment_replicas(ns, "chat") == 1,
             RATE_FLOOR_WINDOWS * RATE_WINDOW_S + STABILISATION_S + 60)
    watch.stop.set()
    watch.join()
    # Never "no signals": from the first Ready replica to the end, the condition stayed True.
    assert watch.samples, "no condition sampled"
    falses = [(round(t - t0, 1), r, m) for t, s, r, m in watch.samples if s != "True"]
    assert not falses, falses
    cluster.event_message(ns, "ScaledDown", f"Scaled LLMDeployment {ns}/chat from 2 to 1 replicas")
    print(f"\n[real vLLM] first engine ready and reporting after {first_ready_s:.0f} s; "
          f"scenario {time.monotonic() - t0:.0f} s; load sent {report.sent}, answered {answered}")
