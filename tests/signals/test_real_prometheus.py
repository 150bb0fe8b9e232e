"""The reader against a real Prometheus (Debian's 2.42): live scrapes and backfilled history.

Proves what the canned answers cannot: that the PromQL runs and aggregates as computed by hand.
The cases of issue 10 each have a test here that fails with the queries llmscale sent before
(the raw PromQL of the old query is run beside the reader to show it) and passes now:

1. copies of one gauge inside one pod (SGLang tensor parallel ranks);
2. a counter that appears only after its first event;
3. a rate window no longer than the scrape interval;
4. latency histograms that Prometheus stores as native histograms only;
5. series of deleted pods that linger after a Prometheus restart;
6. an engine that hangs but keeps serving /metrics.

Plus the fleet basics (sums, p95, counter resets, another deployment not leaking, staleness of a
dead target), authentication (TLS, mutual TLS, basic auth) and the mock engine's own /metrics.
"""

from __future__ import annotations

import asyncio
import subprocess
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import bcrypt
import pytest
import requests
from aiohttp import web
from tests.aioserve import start
from tests.signals.exposition import PROTOBUF_TYPE, Family, NativeHistogram, protobuf_page
from tests.signals.prom import (
    POOL_LABELS,
    backfilled,
    counter,
    every,
    gauge,
    live,
    needs_prometheus,
    run_prometheus,
    wait_targets_up,
)

from llmscale.controller.state.servicerecord import judge_minute
from llmscale.policy.livefit import live_window
from llmscale.signals import (
    PoolRequest,
    PoolTarget,
    PrometheusAuth,
    PrometheusSignalReader,
    ReaderSettings,
    SignalSnapshot,
    get_profile,
)
from llmscale.signals.profiles.base import MetricProfile
from llmscale.signals.profiles.vllm import TTFT_BUCKETS_S as VLLM_TTFT_BUCKETS_S

pytestmark = needs_prometheus

TARGET = PoolTarget(namespace="ml", deployment="chat", pool="interactive")
VLLM = get_profile("vllm")
SGLANG = get_profile("sglang")


def raw(url: str, query: str, **kwargs: Any) -> list[dict[str, Any]]:
    """Run one instant query directly (the old queries, to show what they read)."""
    answer = requests.get(f"{url}/api/v1/query", params={"query": query}, timeout=5, **kwargs).json()
    assert answer["status"] == "success", answer
    return list(answer["data"]["result"])


def only_value(result: list[dict[str, Any]]) -> float | None:
    assert len(result) <= 1, result
    return float(result[0]["value"][1]) if result else None


def labels(pod: str, **extra: str) -> dict[str, str]:
    return {**POOL_LABELS, "pod": pod, **extra}


# -- live scrapes ---------------------------------------------------------------------------------


def histogram(name: str, engine: str, per_scrape: tuple[int, int, int], scrapes: int) -> str:
    """Exposition lines of a classic histogram with buckets 0.1, 0.5, 1 s after ``scrapes`` scrapes.

    ``per_scrape`` is how many observations land in (0, 0.1], (0.1, 0.5] and (0.5, 1] per scrape.
    """
    a, b, c = (n * scrapes for n in per_scrape)
    return "\n".join(
        [
            f'{name}_bucket{{engine="{engine}",le="0.1"}} {a}',
            f'{name}_bucket{{engine="{engine}",le="0.5"}} {a + b}',
            f'{name}_bucket{{engine="{engine}",le="1.0"}} {a + b + c}',
            f'{name}_bucket{{engine="{engine}",le="+Inf"}} {a + b + c}',
            f'{name}_count{{engine="{engine}"}} {a + b + c}',
            f'{name}_sum{{engine="{engine}"}} {0.3 * (a + b + c)}',
        ]
    )


@dataclass
class Engine:
    """A canned vLLM V1 /metrics page whose counters advance on every scrape."""

    engines: dict[str, tuple[float, float, float]]  # engine core -> (waiting, running, kv usage)
    preemptions: Callable[[int], float]  # scrape number -> counter value
    scrapes: int = 0

    def page(self) -> str:
        self.scrapes += 1
        n = self.scrapes
        out = []
        for core, (waiting, running, kv) in self.engines.items():
            out += [
                f'vllm:num_requests_waiting{{engine="{core}"}} {waiting}',
                f'vllm:num_requests_running{{engine="{core}"}} {running}',
                f'vllm:kv_cache_usage_perc{{engine="{core}"}} {kv}',
                f'vllm:num_preemptions_total{{engine="{core}"}} {self.preemptions(n)}',
                f'vllm:generation_tokens_total{{engine="{core}"}} {100 * n}',
                # TTFT: 10 requests a scrape, 5 under 0.1 s, 4 under 0.5 s, 1 under 1 s -> p95 0.75 s
                histogram("vllm:time_to_first_token_seconds", core, (5, 4, 1), n),
                # ITL: no tokens at all -> every rate is 0 -> histogram_quantile is NaN
                histogram("vllm:inter_token_latency_seconds", core, (0, 0, 0), n),
            ]
        return "\n".join(out) + "\n"


async def serve(page: Callable[[], str | bytes], delay_s: Callable[[], float] = lambda: 0.0) -> tuple[web.AppRunner, int]:
    """Serve ``page()`` at /metrics on 127.0.0.1 (bytes: protobuf exposition), each answer
    ``delay_s()`` seconds late (a slow engine)."""

    async def metrics(_: web.Request) -> web.Response:
        body = page()
        if (delay := delay_s()) > 0:
            await asyncio.sleep(delay)
        if isinstance(body, bytes):
            return web.Response(body=body, headers={"Content-Type": PROTOBUF_TYPE})
        return web.Response(text=body, content_type="text/plain")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    runner = await start(app)
    return runner, runner.addresses[0][1]


def static_config(targets: list[tuple[int, dict[str, str]]]) -> str:
    """prometheus.yml scraping each ``(port, labels)`` target every second."""
    lines = [
        "global: {scrape_interval: 1s, scrape_timeout: 900ms}",
        "scrape_configs:",
        "  - job_name: engines",
        "    static_configs:",
    ]
    for port, target_labels in targets:
        text = ", ".join(f"{k}: {v}" for k, v in target_labels.items())
        lines += [f'      - targets: ["127.0.0.1:{port}"]', f"        labels: {{{text}}}"]
    return "\n".join(lines) + "\n"


async def read_until(
    reader: PrometheusSignalReader,
    done: Callable[[SignalSnapshot], bool],
    timeout_s: float,
    profile: MetricProfile = VLLM,
    target: PoolTarget = TARGET,
    pods: set[str] | None = None,
) -> SignalSnapshot:
    deadline = time.monotonic() + timeout_s
    while True:
        snap = await reader.read(profile, target, now=time.time(), pods=pods)
        if done(snap) or time.monotonic() > deadline:
            return snap
        await asyncio.sleep(0.25)


@dataclass
class Fleet:
    url: str
    a: Engine
    b: Engine
    b_runner: web.AppRunner


@pytest.fixture
async def fleet(tmp_path: Path) -> AsyncIterator[Fleet]:
    # Replica A crash-loops: its engine restarts between every two scrapes and comes back having
    # preempted about 1000 requests, so the raw counter *falls* by 1 a scrape (1000, 999, ...).
    a = Engine({"0": (3, 5, 0.5)}, lambda n: 1000.0 - n)
    # Replica B runs two engine cores (data parallel): two series per metric, one replica.
    b = Engine({"0": (2, 3, 0.7), "1": (2, 3, 0.7)}, lambda n: 10 * n)
    # A pod of another LLMDeployment in the same namespace: must not leak into the sums.
    other = Engine({"0": (100, 100, 1.0)}, lambda n: 1000 * n)
    served = [await serve(e.page) for e in (a, b, other)]
    config = static_config(
        [
            (served[0][1], labels("a")),
            (served[1][1], labels("b")),
            (served[2][1], {**labels("x"), "llmscale_dev_deployment": "other"}),
        ]
    )
    try:
        with run_prometheus(tmp_path, config) as url:
            await asyncio.to_thread(wait_targets_up, url, 3)  # the loop serves the pages meanwhile
            yield Fleet(url=url, a=a, b=b, b_runner=served[1][0])
    finally:
        for runner, _ in served:
            await runner.cleanup()


async def test_real_prometheus_answers_the_fleet_queries(fleet: Fleet) -> None:
    # A 5 s rate window (five 1 s scrapes) so the rates are settled within seconds; with the
    # default 1m a series younger than the window reads low (rate() divides by the whole range).
    reader = PrometheusSignalReader(fleet.url, settings=ReaderSettings(rate_window="5s"))
    pods = {"a", "b"}
    snap = await read_until(
        reader, lambda s: fleet.a.scrapes >= 6 and s.ttft_p95_s is not None, 20.0, pods=pods
    )
    assert snap.error is None, snap.error
    assert snap.replicas_reporting == 2, "two pods; B's two engine cores are one replica"
    assert snap.queue_depth == 7.0  # 3 + 2 + 2: B's cores are summed, the other deployment's 100 is not
    assert snap.running_requests == 11.0  # 5 + 3 + 3
    assert snap.kv_cache_utilization == pytest.approx((0.5 + 0.7) / 2), (
        "mean over pods of the mean over cores"
    )
    # p95 of 10 observations a scrape: rank 9.5 falls in (0.5, 1] holding the 10th -> 0.75 s.
    assert snap.ttft_p95_s == pytest.approx(0.75, rel=0.02)
    assert snap.itl_p95_s is None, "no tokens in the window: the quantile is unknown, not 0"
    assert "no request observed" in snap.unknown["itl_p95_s"]
    # B adds 10 a second per core: 20/s. A's counter falls every scrape; read raw it would be
    # -1/s, but rate() takes every fall as a restart from 0 and counts the new value (~1000) as
    # the increase: ~1000/s. Never negative, and the restarts are not hidden.
    assert snap.preemption_rate is not None and 500.0 < snap.preemption_rate < 2000.0
    # observed_at is the newest scrape, at most one scrape interval (plus a margin) old.
    assert 0.0 <= snap.age(time.time()) < 2.5
    # The window: read from /api/v1/targets, 5 s = five 1 s scrapes, nothing to report.
    assert snap.window is not None and snap.window.interval_source == "targets"
    assert snap.window.scrape_interval_s == 1.0 and snap.window.problem is None

    # Replica B dies: its next scrape is refused, Prometheus writes staleness markers, and the
    # replica drops out at once (a refused scrape is not bridged) rather than after the 5 min lookback.
    await fleet.b_runner.cleanup()
    deadline = time.monotonic() + 6.0
    while raw(fleet.url, 'vllm:num_requests_waiting{pod="b"}') and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    # The first read after the refused scrape: B's scrape_duration_seconds says it failed fast.
    snap = await reader.read(VLLM, TARGET, now=time.time(), pods=pods)
    assert snap.bridged_pods == (), "a refused scrape is an engine down, not a slow one"
    assert snap.replicas_reporting == 1 and snap.silent_pods == ("b",)
    assert snap.queue_depth == 3.0
    reader.close()


async def test_automatic_window_on_a_live_prometheus_reads_the_targets_api(fleet: Fleet) -> None:
    reader = PrometheusSignalReader(fleet.url)
    snap = await read_until(reader, lambda s: s.queue_depth is not None, 10.0)
    assert snap.window is not None and snap.window.auto
    assert (snap.window.window_s, snap.window.scrape_interval_s) == (60.0, 1.0)
    reader.close()


async def test_a_live_pod_whose_scrapes_time_out_is_bridged_for_four_intervals(tmp_path: Path) -> None:
    # The e2e run with real vLLM engines read "no pod exports vllm:num_requests_waiting" for a tick:
    # both engines' /metrics overran the 1 s scrape timeout under load, Prometheus wrote staleness
    # markers, and the instant gauges vanished until the next good scrape. Here B's page overruns
    # the 900 ms timeout on demand.
    a = Engine({"0": (3, 5, 0.5)}, lambda n: 0.0)
    b = Engine({"0": (2, 3, 0.7)}, lambda n: 0.0)
    slow = threading.Event()

    b_runner, b_port = await serve(b.page, lambda: 1.5 if slow.is_set() else 0.0)
    a_runner, a_port = await serve(a.page)
    reader: PrometheusSignalReader | None = None
    pods = {"a", "b"}
    try:
        with run_prometheus(tmp_path, static_config([(a_port, labels("a")), (b_port, labels("b"))])) as url:
            await asyncio.to_thread(wait_targets_up, url, 2)
            reader = PrometheusSignalReader(url, settings=ReaderSettings(rate_window="5s"))
            snap = await read_until(reader, lambda s: s.replicas_reporting == 2 and s.window is not None
                                    and s.window.scrape_interval_s == 1.0, 15.0, pods=pods)
            assert snap.replicas_reporting == 2 and snap.queue_depth == 5.0, snap
            slow.set()
            b_gauge = 'vllm:num_requests_waiting{pod="b"}'
            deadline = time.monotonic() + 10.0
            while raw(url, b_gauge) and time.monotonic() < deadline:  # B's next scrape fails
                await asyncio.sleep(0.1)
            assert not raw(url, b_gauge), "B's scrape never failed: no staleness marker to bridge"
            # Prometheus has nothing for B now; the reader keeps B's last sample, with its own time.
            snap = await reader.read(VLLM, TARGET, now=time.time(), pods=pods)
            assert snap.replicas_reporting == 2 and snap.silent_pods == (), snap
            assert snap.queue_depth == 5.0 and snap.running_requests == 8.0, snap
            assert snap.unknown.get("queue_depth") is None, snap.unknown
            by_pod = {p.pod: p for p in snap.pods}
            a_time, b_time = by_pod["a"].newest_sample_s, by_pod["b"].newest_sample_s
            assert a_time is not None and b_time is not None and b_time < a_time, "B's sample is its last good one"
            assert snap.bridged_pods == ("b",), snap
            # Still failing four scrape intervals after its last good sample: B is hung, not slow.
            snap = await read_until(reader, lambda s: s.replicas_reporting == 1, 8.0, pods=pods)
            assert snap.replicas_reporting == 1 and snap.silent_pods == ("b",) and snap.bridged_pods == (), snap
            assert snap.queue_depth == 3.0
            assert time.time() - b_time > 4.0, "dropped only after the bridge"
            # A pod that left the API server is forgotten: read once without it, then with it again
            # within the bound, and it is silent, not bridged.
            slow.clear()
            await read_until(reader, lambda s: s.replicas_reporting == 2, 8.0, pods=pods)
            slow.set()
            deadline = time.monotonic() + 10.0
            while raw(url, b_gauge) and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            assert not raw(url, b_gauge), "B's scrape never failed the second time"
            snap = await reader.read(VLLM, TARGET, now=time.time(), pods={"a"})
            assert [p.pod for p in snap.pods] == ["a"], snap
            snap = await reader.read(VLLM, TARGET, now=time.time(), pods=pods)
            assert snap.silent_pods == ("b",) and snap.bridged_pods == (), snap
    finally:
        if reader is not None:
            reader.close()
        for runner in (a_runner, b_runner):
            await runner.cleanup()


# -- case 4: latency histograms that are native only -----------------------------------------------


@dataclass
class NativeEngine:
    """A vLLM page in protobuf whose latency and token histograms are native (schema 0)."""

    scrapes: int = 0

    def page(self) -> bytes:
        self.scrapes += 1
        n = self.scrapes
        pod = {"engine": "0"}
        return protobuf_page(
            [
                Family("vllm:num_requests_waiting", "gauge", [(pod, 2)]),
                Family("vllm:num_requests_running", "gauge", [(pod, 8)]),
                Family("vllm:kv_cache_usage_perc", "gauge", [(pod, 0.4)]),
                Family("vllm:num_preemptions_total", "counter", [(pod, 0)]),
                # 20 first tokens (the TTFT samples) + 20 ITL samples a scrape: one token a step, as
                # vLLM without speculative decoding (200 would be 9 tokens a sample, issue 21).
                Family("vllm:generation_tokens_total", "counter", [(pod, 40 * n)]),
                # TTFT: 20 requests a scrape, 19 in (0.25, 0.5], 1 in (0.5, 1]: rank 0.95 × 20 = 19
                # ends the first bucket exactly, so p95 = 0.5 s whatever the interpolation.
                Family(
                    "vllm:time_to_first_token_seconds",
                    "histogram",
                    [(pod, NativeHistogram(0, {-1: 19 * n, 0: n}, 0.4 * 20 * n))],
                ),
                # ITL: 19 in (1/64, 1/32], 1 in (1/32, 1/16] -> p95 = 1/32 s.
                Family(
                    "vllm:inter_token_latency_seconds",
                    "histogram",
                    [(pod, NativeHistogram(0, {-5: 19 * n, -4: n}, 0.03 * 20 * n))],
                ),
                # Prompt tokens: 10 requests a scrape of 1000 tokens each, in (512, 1024].
                Family(
                    "vllm:request_prompt_tokens",
                    "histogram",
                    [(pod, NativeHistogram(0, {10: 10 * n}, 1000.0 * 10 * n))],
                ),
            ]
        )


async def test_native_latency_histograms_are_read(tmp_path: Path) -> None:
    native = NativeEngine()
    classic = Engine({"0": (1, 1, 0.1)}, lambda n: 0.0)
    served = [await serve(native.page), await serve(classic.page)]
    config = static_config(
        [(served[0][1], labels("n")), (served[1][1], {**labels("c"), "llmscale_dev_pool": "batch"})]
    )
    try:
        with run_prometheus(tmp_path, config, "--enable-feature=native-histograms") as url:
            await asyncio.to_thread(wait_targets_up, url, 2)
            reader = PrometheusSignalReader(url, settings=ReaderSettings(rate_window="5s"))
            snap = await read_until(
                reader, lambda s: native.scrapes >= 6 and s.ttft_p95_s is not None, 20.0, pods={"n"}
            )
            # The case: Prometheus stored the histogram as native only, so the classic query of
            # before found no _bucket series and the latency guard was silently off.
            old = 'histogram_quantile(0.95, sum by (le) (rate(vllm:time_to_first_token_seconds_bucket{llmscale_dev_pool="interactive"}[5s])))'
            assert await asyncio.to_thread(raw, url, old) == []
            # The presence probe sees the native series (an idle window then reads "no request
            # observed", not "no histogram").
            present = 'count({__name__="vllm:time_to_first_token_seconds", pod="n"})'
            assert only_value(await asyncio.to_thread(raw, url, present)) == 1.0
            assert snap.error is None, snap.error
            assert snap.ttft_p95_s == pytest.approx(0.5, rel=0.01)
            assert snap.itl_p95_s == pytest.approx(1 / 32, rel=0.01)
            assert snap.workload.prompt_tokens_mean == pytest.approx(1000.0, rel=0.01)
            p95 = snap.workload.prompt_tokens_p95
            assert p95 is not None and 512.0 < p95 <= 1024.0
            assert "no vllm:request_generation_tokens histogram" in snap.unknown["generation_tokens_p95"]
            # The classic pool in the same Prometheus still reads its _bucket series.
            batch = await read_until(
                reader,
                lambda s: s.ttft_p95_s is not None,
                10.0,
                target=PoolTarget("ml", "chat", "batch"),
            )
            assert batch.ttft_p95_s == pytest.approx(0.75, rel=0.02)
            reader.close()
    finally:
        for runner, _ in served:
            await runner.cleanup()


# -- backfilled history: cases 1, 2, 3, 5 and 6 ----------------------------------------------------


def vllm_pod(
    pod: str,
    times: list[float],
    waiting: float,
    running: float,
    kv: float,
    tokens_per_s: float,
    **extra: str,
) -> list[Any]:
    lab = labels(pod, **{"engine": "0", **extra})
    return [
        gauge(VLLM.waiting, lab, times, waiting),
        gauge(VLLM.running, lab, times, running),
        gauge(VLLM.kv_cache_usage, lab, times, kv),
        counter("vllm:num_preemptions_total", lab, times, 0.0),
        counter("vllm:generation_tokens_total", lab, times, tokens_per_s, start=5000.0),
    ]


def test_copies_of_one_gauge_inside_a_pod_count_once(tmp_path: Path) -> None:
    now = time.time()
    ts = live(now)
    series = []
    # Case 1: SGLang, tensor parallel 8: every rank exports the scheduler gauges and counter.
    for pod, queue in (("tp8-a", 40.0), ("tp8-b", 20.0)):
        for rank in range(8):
            lab = labels(pod, tp_rank=str(rank), pp_rank="0")
            series += [
                gauge(SGLANG.waiting, lab, ts, queue),
                gauge(SGLANG.running, lab, ts, 10.0),
                gauge(SGLANG.kv_cache_usage, lab, ts, 0.5),
                counter("sglang:num_retracted_requests_total", lab, ts, 0.5),
            ]
        series.append(counter("sglang:generation_tokens_total", labels(pod), ts, 300.0))
    with backfilled(tmp_path, series) as url:
        old = raw(url, 'sum(sglang:num_queue_reqs{llmscale_dev_deployment="chat", pod="tp8-a"})')
        assert only_value(old) == 320.0, "before: eight copies summed"
        reader = PrometheusSignalReader(url)
        snap = reader.read_sync(SGLANG, TARGET, time.time(), pods={"tp8-a", "tp8-b"})
        reader.close()
    assert snap.error is None, snap.error
    assert snap.queue_depth == 60.0  # 40 + 20, each pod once
    assert snap.running_requests == 20.0 and snap.kv_cache_utilization == 0.5
    assert snap.preemption_rate == pytest.approx(1.0, rel=0.05), "0.5/s per pod, not per rank"
    assert snap.replicas_reporting == 2 and [p.queue_depth for p in snap.pods] == [40.0, 20.0]


def test_pods_of_a_workload_llmscale_did_not_create_are_read_by_name(tmp_path: Path) -> None:
    """spec.scaleTargetRef: the workload's pods carry none of llmscale's labels (only the namespace
    and pod name every scrape configuration gives); the pool is read by the names of the pods its
    /scale selector picks, and the answer is stamped with the pool's labels."""
    now = time.time()
    ts = every(now - 600, now - 3, 15)
    series = []
    for pod, queue in (("vllm-7d9f-a", 4.0), ("vllm-7d9f-b", 2.0), ("other-0", 100.0)):
        lab = {"namespace": "ml", "pod": pod, "app": "vllm"}
        series += [gauge(VLLM.waiting, lab, ts, queue), gauge(VLLM.running, lab, ts, 3.0),
                   gauge(VLLM.kv_cache_usage, lab, ts, 0.4), counter(VLLM.counters["preemption_rate"], lab, ts, 0.0)]
    target = PoolTarget("ml", "chat", "interactive", pods=("vllm-7d9f-a", "vllm-7d9f-b"))
    with backfilled(tmp_path, series) as url:
        reader = PrometheusSignalReader(url)
        by_labels = reader.read_sync(VLLM, PoolTarget("ml", "chat", "interactive"), time.time())
        snap = reader.read_sync(VLLM, target, time.time())
        reader.close()
    assert by_labels.replicas_reporting == 0, "selected by llmscale's labels, the workload is invisible"
    assert snap.error is None, snap.error
    assert snap.replicas_reporting == 2, "the pod of another workload in the namespace is not read"
    assert snap.queue_depth == 6.0 and snap.kv_cache_utilization == pytest.approx(0.4)
    assert sorted(p.pod for p in snap.pods) == ["vllm-7d9f-a", "vllm-7d9f-b"]


def test_fleet_read_takes_pools_selected_by_name_beside_the_labelled_ones(tmp_path: Path) -> None:
    """The operator's read (the fleet reader): a spec.scaleTargetRef pool gets queries of its own,
    by the names of its live pods (the request's, newer than those the target was registered
    with), beside the pools selected by llmscale's labels, and neither reads the other's pods."""
    now = time.time()
    ts = every(now - 600, now - 3, 15)
    series = vllm_pod("a", ts, 5.0, 8.0, 0.5, 100.0)  # a pod of TARGET, with llmscale's labels
    for pod, queue in (("vllm-7d9f-a", 4.0), ("vllm-7d9f-b", 2.0), ("other-0", 100.0)):
        lab = {"namespace": "ml", "pod": pod, "app": "vllm"}
        series += [gauge(VLLM.waiting, lab, ts, queue), gauge(VLLM.running, lab, ts, 3.0),
                   gauge(VLLM.kv_cache_usage, lab, ts, 0.4), counter(VLLM.counters["preemption_rate"], lab, ts, 0.0),
                   counter("vllm:generation_tokens_total", lab, ts, 50.0)]
    named = PoolTarget("ml", "vllm", "interactive", pods=("vllm-7d9f-a",))
    pools = [PoolRequest(TARGET, VLLM, frozenset({"a"})),
             PoolRequest(named, VLLM, frozenset({"vllm-7d9f-a", "vllm-7d9f-b"}))]
    with backfilled(tmp_path, series) as url:
        reader = PrometheusSignalReader(url)
        snaps = reader.read_fleet_sync(pools, time.time())
        reader.close()
    labelled, by_name = snaps[TARGET], snaps[named]
    assert labelled.error is None and by_name.error is None, (labelled.error, by_name.error)
    assert (labelled.queue_depth, labelled.replicas_reporting) == (5.0, 1)
    assert sorted(p.pod for p in by_name.pods) == ["vllm-7d9f-a", "vllm-7d9f-b"], "the live pods, not the stale"
    assert by_name.queue_depth == 6.0, ("neither the labelled pod nor another workload's", by_name.unknown)


def test_vllm_data_parallel_engines_are_summed_not_collapsed(tmp_path: Path) -> None:
    now = time.time()
    ts = every(now - 600, now - 3, 15)
    # One pod, two engine cores (--data-parallel-size 2): label engine="0" and engine="1".
    series = vllm_pod("dp", ts, 3.0, 8.0, 0.4, 100.0) + vllm_pod("dp", ts, 5.0, 8.0, 0.6, 100.0, engine="1")
    with backfilled(tmp_path, series) as url:
        reader = PrometheusSignalReader(url)
        snap = reader.read_sync(VLLM, TARGET, time.time(), pods={"dp"})
        reader.close()
    assert snap.queue_depth == 8.0 and snap.running_requests == 16.0, "each engine core has its own queue"
    assert snap.kv_cache_utilization == pytest.approx(0.5) and snap.replicas_reporting == 1


def test_the_queue_counts_capacity_waits_where_the_engine_tells_them_apart(tmp_path: Path) -> None:
    """Issue 24: vLLM's waiting_by_reason splits capacity waits (a replica fixes them) from deferred
    ones (a LoRA budget, a KV transfer: another replica would defer them too); a pod without the
    family (an older engine beside it) counts every wait, and data-parallel cores are summed."""
    now = time.time()
    ts = every(now - 600, now - 3, 15)
    series = vllm_pod("new", ts, 5.0, 8.0, 0.4, 100.0) + vllm_pod("old", ts, 4.0, 8.0, 0.4, 100.0)
    series += vllm_pod("new", ts, 1.0, 8.0, 0.4, 100.0, engine="1")
    for engine, capacity, deferred in (("0", 2.0, 3.0), ("1", 1.0, 0.0)):
        for reason, value in (("capacity", capacity), ("deferred", deferred)):
            series.append(gauge("vllm:num_requests_waiting_by_reason", labels("new", engine=engine, reason=reason),
                                ts, value))
    with backfilled(tmp_path, series) as url:
        reader = PrometheusSignalReader(url)
        snap = reader.read_sync(VLLM, TARGET, time.time(), pods={"new", "old"})
        reader.close()
    assert snap.error is None, snap.error
    assert {p.pod: p.queue_depth for p in snap.pods} == {"new": 3.0, "old": 4.0}
    assert snap.queue_depth == 7.0


def test_a_sleeping_engine_is_neither_capacity_nor_a_failure(tmp_path: Path) -> None:
    """Issue 24: vLLM's engine_sleep_state has one series per state, 1 for the current one; a pod
    whose engine sleeps (weights offloaded) reports an empty queue that must not read as room."""
    now = time.time()
    ts = every(now - 600, now - 3, 15)
    series = vllm_pod("up", ts, 6.0, 8.0, 0.5, 100.0) + vllm_pod("slept", ts, 0.0, 0.0, 0.0, 0.0)
    for pod, current in (("up", "awake"), ("slept", "weights_offloaded")):
        for state in ("awake", "weights_offloaded", "discard_all"):
            series.append(gauge("vllm:engine_sleep_state", labels(pod, engine="0", sleep_state=state), ts,
                                1.0 if state == current else 0.0))
    with backfilled(tmp_path, series) as url:
        reader = PrometheusSignalReader(url)
        snap = reader.read_sync(VLLM, TARGET, time.time(), pods={"up", "slept"})
        reader.close()
    assert snap.error is None, snap.error
    assert snap.sleeping_pods == ("slept",) and snap.stalled_pods == ()
    assert snap.replicas_reporting == 1 and snap.queue_depth == 6.0 and snap.kv_cache_utilization == 0.5
    assert [(p.pod, p.asleep) for p in snap.pods] == [("slept", True), ("up", False)]


def test_series_of_an_unmerged_ha_pair_count_once(tmp_path: Path) -> None:
    # The same kind as case 1: a Thanos or federation in front of two Prometheus replicas without
    # deduplication returns every series twice, told apart by prometheus_replica.
    now = time.time()
    ts = live(now)
    series = []
    for replica in ("0", "1"):
        series += vllm_pod("a", ts, 4.0, 8.0, 0.5, 100.0, prometheus_replica=replica)
        series[-2] = counter(
            "vllm:num_preemptions_total", labels("a", engine="0", prometheus_replica=replica), ts, 0.3
        )
    with backfilled(tmp_path, series) as url:
        reader = PrometheusSignalReader(url)
        snap = reader.read_sync(VLLM, TARGET, time.time(), pods={"a"})
        reader.close()
    assert (snap.queue_depth, snap.running_requests, snap.replicas_reporting) == (4.0, 8.0, 1)
    assert snap.preemption_rate == pytest.approx(0.3, rel=0.05)


def test_counter_absent_before_its_first_event_reads_zero(tmp_path: Path) -> None:
    now = time.time()
    ts = live(now)
    series = []
    # Case 2: an idle SGLang pod has no retraction counter at all; a busy one retracts 0.2/s.
    for pod, retracting in (("idle", False), ("busy", True)):
        lab = labels(pod, tp_rank="0")
        series += [
            gauge(SGLANG.waiting, lab, ts, 0.0),
            gauge(SGLANG.running, lab, ts, 0.0 if not retracting else 30.0),
            gauge(SGLANG.kv_cache_usage, lab, ts, 0.02 if not retracting else 0.95),
        ]
        if retracting:
            series.append(counter("sglang:num_retracted_requests_total", lab, ts, 0.2))
            series.append(counter("sglang:generation_tokens_total", labels(pod), ts, 100.0))
    with backfilled(tmp_path, series) as url:
        reader = PrometheusSignalReader(url)
        idle = reader.read_sync(SGLANG, TARGET, time.time(), pods={"idle"})
        both = reader.read_sync(SGLANG, TARGET, time.time(), pods={"idle", "busy"})
        reader.close()
        old = raw(url, 'sum(rate(sglang:num_retracted_requests_total{pod="idle"}[1m]))')
    assert old == [], "before: no series, so the preemption rate was unknown for ever"
    assert idle.preemption_rate == 0.0 and idle.leading_known
    assert "sglang:num_retracted_requests_total" in idle.absent_counters
    assert both.preemption_rate == pytest.approx(0.2, rel=0.05)


@pytest.mark.parametrize(
    ("rate_window", "too_short"),
    [
        pytest.param(None, False, id="automatic-window-spans-four-scrapes"),
        pytest.param("1m", True, id="set-1m-reported"),
    ],
)
def test_window_no_longer_than_a_60s_scrape(tmp_path: Path, rate_window: str | None, too_short: bool) -> None:
    now = time.time()
    ts = live(now, span=1200, step=60)  # case 3: one scrape a minute, 20 minutes
    series = vllm_pod("a", ts, 2.0, 10.0, 0.5, 50.0)
    series[3] = counter("vllm:num_preemptions_total", labels("a", engine="0"), ts, 0.1)
    with backfilled(tmp_path, series) as url:
        old = raw(url, 'sum(rate(vllm:num_preemptions_total{pod="a"}[1m]))')
        reader = PrometheusSignalReader(url, settings=ReaderSettings(rate_window=rate_window))
        snap = reader.read_sync(VLLM, TARGET, time.time(), pods={"a"})
        reader.close()
    assert old == [], "before: rate(...[1m]) never holds two samples at a 60 s scrape"
    window = snap.window
    assert window is not None and window.interval_source == "samples"  # no targets API here
    assert window.scrape_interval_s == 60.0
    assert window.too_short is too_short
    assert snap.queue_depth == 2.0, "gauges need no window"
    if too_short:
        assert snap.preemption_rate is None and window.problem is not None
        assert "shorter than two scrape intervals" in snap.unknown["preemption_rate"]
        assert snap.stalled_pods == ()
    else:
        assert window.window_s == 240.0 and window.problem is None
        assert snap.preemption_rate == pytest.approx(0.1, rel=0.05)


def test_series_of_deleted_pods_are_ignored(tmp_path: Path) -> None:
    now = time.time()
    # Case 5: Prometheus restarted while pod "deleted" went away: no staleness marker, so its last
    # samples (KV 0.97, queue 10) are returned for the 5 min lookback.
    series = vllm_pod("a", every(now - 600, now - 3, 15), 1.0, 5.0, 0.3, 80.0)
    series += vllm_pod("deleted", every(now - 600, now - 60, 15), 10.0, 50.0, 0.97, 80.0)
    with backfilled(tmp_path, series) as url:
        old = raw(url, 'sum(vllm:num_requests_waiting{llmscale_dev_deployment="chat"})')
        reader = PrometheusSignalReader(url)
        snap = reader.read_sync(VLLM, TARGET, time.time(), pods={"a", "new"})
        reader.close()
    assert only_value(old) == 11.0, "before: the deleted pod's queue counted"
    assert (snap.queue_depth, snap.kv_cache_utilization, snap.replicas_reporting) == (1.0, 0.3, 1)
    assert snap.ignored_pods == ("deleted",) and snap.silent_pods == ("new",)


def test_hung_engine_with_frozen_busy_gauges_is_stalled(tmp_path: Path) -> None:
    now = time.time()
    ts = every(now - 600, now - 3, 15)
    # Case 6: "hung" serves /metrics with fresh timestamps and frozen busy gauges, no token.
    series = vllm_pod("hung", ts, 15.0, 106.0, 0.90, 0.0)
    series += vllm_pod("healthy", ts, 1.0, 20.0, 0.40, 300.0)
    series += vllm_pod("idle", ts, 0.0, 0.0, 0.0, 0.0)  # nothing running, nothing generated: fine
    # Busy for the last 15 s only, no token yet (a long prefill): too young to judge.
    series += vllm_pod("starting", every(now - 18, now - 3, 15), 0.0, 4.0, 0.1, 0.0)
    with backfilled(tmp_path, series) as url:
        reader = PrometheusSignalReader(url)
        snap = reader.read_sync(VLLM, TARGET, time.time(), pods={"hung", "healthy", "idle", "starting"})
        reader.close()
    assert snap.stalled_pods == ("hung",)
    assert snap.queue_depth == 1.0 and snap.running_requests == 24.0  # healthy + starting
    assert snap.kv_cache_utilization == pytest.approx((0.4 + 0.0 + 0.1) / 3)
    assert snap.replicas_reporting == 3
    hung = next(p for p in snap.pods if p.pod == "hung")
    assert hung.stalled and hung.queue_depth == 15.0 and hung.newest_sample_s is not None


def _finished(pod: str, ts: list[float], per_s: dict[str, float]) -> list[Any]:
    """``vllm:request_success_total`` of one pod, one series per ``finished_reason``."""
    return [counter("vllm:request_success_total", labels(pod, engine="0", finished_reason=reason), ts, rate)
            for reason, rate in per_s.items()]


def test_a_ready_engine_failing_every_request_fast_is_not_idle_capacity(tmp_path: Path) -> None:
    """Issue 21, the crash loop's sibling: an engine that answers /health and /metrics but ends
    every request in error (stop/length flat, error rising while traffic reaches it) looks idle
    (queue 0, KV 0): it is failing, left out of every aggregate. Neighbours: an idle pod (no
    traffic), a pod with errors beside answers, a pod with two errors in the window are not."""
    now = time.time()
    ts = live(now)
    series = vllm_pod("serving", ts, 2.0, 30.0, 0.60, 400.0)
    series += _finished("serving", ts, {"stop": 2.0, "length": 0.5, "error": 0.0, "abort": 0.0})
    series += vllm_pod("broken", ts, 0.0, 0.0, 0.0, 0.0)
    series += _finished("broken", ts, {"stop": 0.0, "length": 0.0, "error": 2.0, "abort": 0.0})
    series += vllm_pod("idle", ts, 0.0, 0.0, 0.0, 0.0)
    series += _finished("idle", ts, {"stop": 0.0, "length": 0.0, "error": 0.0, "abort": 0.0})
    series += vllm_pod("flaky", ts, 1.0, 20.0, 0.50, 300.0)
    series += _finished("flaky", ts, {"stop": 1.5, "length": 0.0, "error": 0.5, "abort": 0.0})
    series += vllm_pod("rare", ts, 0.0, 0.0, 0.0, 0.0)  # 0.02/s: about one error a window
    series += _finished("rare", ts, {"stop": 0.0, "length": 0.0, "error": 0.02, "abort": 0.0})
    pods = {"serving", "broken", "idle", "flaky", "rare"}
    with backfilled(tmp_path, series) as url:
        reader = PrometheusSignalReader(url)
        snap = reader.read_sync(VLLM, TARGET, time.time(), pods=pods)
        reader.close()
    assert snap.error is None, snap.error
    assert snap.failing_pods == ("broken",)
    broken = next(p for p in snap.pods if p.pod == "broken")
    assert broken.failing and broken.failed_request_rate == pytest.approx(2.0, rel=0.05)
    assert broken.served_request_rate == 0.0
    # Left out like a stalled pod: the mean KV use is over the four others, not dragged down by it.
    assert snap.replicas_reporting == 4
    assert snap.kv_cache_utilization == pytest.approx((0.6 + 0.0 + 0.5 + 0.0) / 4)


# -- authentication: TLS, mutual TLS and basic auth -------------------------------------------------


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_ca(d: Path, name: str) -> None:
    openssl(
        "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", f"{name}.key", "-out", f"{name}.crt", "-days", "1", "-subj", f"/CN={name}",
        cwd=d,
    )  # fmt: skip


def make_cert(d: Path, name: str, ca: str, ext: str) -> None:
    (d / f"{name}.ext").write_text(ext + "\n")
    openssl(
        "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}",
        cwd=d,
    )  # fmt: skip
    openssl(
        "x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key",
        "-CAcreateserial", "-out", f"{name}.crt", "-days", "1", "-extfile", f"{name}.ext",
        cwd=d,
    )  # fmt: skip


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A Prometheus demanding TLS, a client certificate from its CA, and basic auth alice/s3cret."""
    d = tmp_path / "pki"
    d.mkdir()
    make_ca(d, "ca")
    make_ca(d, "other-ca")
    make_cert(d, "server", "ca", "subjectAltName=IP:127.0.0.1")
    make_cert(d, "client", "ca", "extendedKeyUsage=clientAuth")
    hashed = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=4)).decode()
    web_config = tmp_path / "web.yml"
    web_config.write_text(
        f"""
tls_server_config:
  cert_file: {d / "server.crt"}
  key_file: {d / "server.key"}
  client_auth_type: RequireAndVerifyClientCert
  client_ca_file: {d / "ca.crt"}
basic_auth_users:
  alice: {hashed}
"""
    )
    probe = {
        "verify": str(d / "ca.crt"),
        "cert": (str(d / "client.crt"), str(d / "client.key")),
        "auth": ("alice", "s3cret"),
    }
    with run_prometheus(
        tmp_path,
        "global: {scrape_interval: 15s}\n",
        f"--web.config.file={web_config}",
        scheme="https",
        ready=probe,
    ) as url:
        yield url, d


def tls_reader(url: str, d: Path, **auth: Any) -> PrometheusSignalReader:
    settings = {
        "username": "alice",
        "password": "s3cret",
        "ca_file": d / "ca.crt",
        "cert_file": d / "client.crt",
        "key_file": d / "client.key",
        **auth,
    }
    return PrometheusSignalReader(url, settings=ReaderSettings(auth=PrometheusAuth(**settings)))


def test_authenticated_prometheus_over_mutual_tls(secured: tuple[str, Path]) -> None:
    url, d = secured
    reader = tls_reader(url, d)
    snap = reader.read_sync(VLLM, TARGET, time.time())
    reader.close()
    assert snap.error is None, snap.error
    assert "no pod of ml/chat pool interactive exports" in snap.unknown["queue_depth"], "answered, no engines"
    assert snap.window is not None and snap.window.interval_source == "unknown", "targets API reached"


@pytest.mark.parametrize(
    ("auth", "error"),
    [
        pytest.param({"password": "wrong"}, "refused the credentials (HTTP 401)", id="wrong-password"),
        pytest.param({"ca_file": "other-ca.crt"}, "failed the TLS handshake", id="wrong-ca"),
        pytest.param(
            {"cert_file": None, "key_file": None}, "Prometheus at https://", id="no-client-certificate"
        ),
    ],
)
def test_authentication_failure_is_a_clear_error(
    secured: tuple[str, Path], auth: dict[str, Any], error: str
) -> None:
    url, d = secured
    if isinstance(auth.get("ca_file"), str):
        auth["ca_file"] = d / auth["ca_file"]
    reader = tls_reader(url, d, **auth)
    snap = reader.read_sync(VLLM, TARGET, time.time())
    reader.close()
    assert snap.error is not None and error in snap.error, snap.error
    assert snap.queue_depth is None and error in snap.unknown["queue_depth"]


# -- the mock engine's own /metrics -----------------------------------------------------------------


def test_the_mock_engine_gives_every_vllm_signal_through_a_real_prometheus(tmp_path: Path) -> None:
    from tests.engine.conftest import run_engine

    model = "llama-3.1-8b"
    args = ("--model", model, "--gpu", "h100-sxm", "--time-scale", "5", "--max-model-len", "8192")
    with run_engine(tmp_path, *args) as engine:
        port = int(engine.base_url.rsplit(":", 1)[1])
        stop = threading.Event()

        def load() -> None:
            while not stop.is_set():
                body = {"model": model, "prompt": list(range(300)), "max_tokens": 20}
                requests.post(f"{engine.v1}/completions", json=body, timeout=30)

        workers = [threading.Thread(target=load, daemon=True) for _ in range(2)]
        for w in workers:
            w.start()
        try:
            with run_prometheus(tmp_path, static_config([(port, labels("engine-0"))])) as url:
                wait_targets_up(url, 1)
                reader = PrometheusSignalReader(url, settings=ReaderSettings(rate_window="10s"))
                deadline = time.monotonic() + 30
                while True:
                    snap = reader.read_sync(VLLM, TARGET, time.time(), pods={"engine-0"})
                    w = snap.workload
                    if (w.request_rate or 0) > 0 and snap.ttft_p95_s is not None and w.prompt_tokens_p95:
                        break
                    assert time.monotonic() < deadline, snap
                    time.sleep(0.5)
                reader.close()
        finally:
            stop.set()
            for w in workers:
                w.join(timeout=30)
    assert snap.error is None, snap.error
    assert snap.replicas_reporting == 1 and snap.stalled_pods == () and snap.absent_counters == ()
    assert snap.leading_known and snap.itl_p95_s is not None
    w = snap.workload
    assert w.prompt_tokens_mean == pytest.approx(300.0) and w.generation_tokens_mean == pytest.approx(20.0)
    assert w.prompt_tokens_p95 is not None and 200.0 < w.prompt_tokens_p95 <= 500.0  # 1-2-5 buckets
    assert w.generation_tokens_rate is not None and w.prompt_tokens_rate is not None
    assert w.prompt_tokens_rate == pytest.approx(
        15 * w.generation_tokens_rate, rel=0.1
    )  # 300 vs 20 a request
    assert w.prefix_cache_hit_rate == 0.0, "the mock engine counts lookups and never hits"
    assert dict(snap.unknown) == {}


# -- scale from zero: the wake queries of every pool in one query ----------------------------------


def test_wake_queries_of_every_pool_each_answered(tmp_path: Path) -> None:
    """Pools at zero replicas (no engine series at all) with wake queries on a router's metrics:
    each answered by a query of its own (issue 22), ``$namespace``/``$name`` filled in per pool; a
    query with no series is unknown with the hint, one ending in ``or vector(0)`` reads 0."""
    now = time.time()
    ts = live(now, span=300)
    router = {"job": "router"}
    series = [
        gauge("router_pending_requests", {**router, "namespace": "ml", "service": "chat"}, ts, 3.0),
        counter("router_requests_total", {**router, "namespace": "ml", "service": "chat"}, ts, 0.5),
        gauge("router_pending_requests", {**router, "namespace": "ml", "service": "embed"}, ts, 0.0),
    ]
    query = ('sum(router_pending_requests{namespace="$namespace", service="$name"}) '
             '+ sum(rate(router_requests_total{namespace="$namespace", service="$name"}[1m]))')
    pools = [
        PoolRequest(TARGET, VLLM, frozenset(), query),
        PoolRequest(PoolTarget("ml", "embed", "interactive"), VLLM, frozenset(),
                    'sum(router_pending_requests{namespace="$namespace", service="$name"})'),
        PoolRequest(PoolTarget("ml", "rag", "interactive"), VLLM, frozenset(),
                    'sum(router_pending_requests{namespace="$namespace", service="$name"})'),
        PoolRequest(PoolTarget("ml", "code", "interactive"), VLLM, frozenset(),
                    'sum(router_pending_requests{namespace="$namespace", service="$name"}) or vector(0)'),
    ]
    with backfilled(tmp_path, series) as url:
        reader = PrometheusSignalReader(url, settings=ReaderSettings(scrape_interval="15s"))
        snaps = reader.read_fleet_sync(pools, time.time())
        reader.close()
    chat, embed, rag, code = (snaps[p.target] for p in pools)
    assert chat.wake_demand == pytest.approx(3.5, rel=0.05), "3 waiting + 0.5 requests/s"
    assert embed.wake_demand == 0.0 and "wake_demand" not in embed.unknown
    assert rag.wake_demand is None and "add `or vector(0)`" in rag.unknown["wake_demand"]
    assert code.wake_demand == 0.0
    # No engine at all: the leading signals are unknown, the wake query is the pool's only signal.
    assert chat.queue_depth is None and chat.replicas_reporting == 0


def _histogram(name: str, lab: dict[str, str], ts: list[float], per_s: dict[str, float]) -> list[Any]:
    """A classic histogram's ``_bucket`` and ``_count`` series rising by ``per_s[le]`` a second."""
    out = [counter(f"{name}_bucket", {**lab, "le": le}, ts, rate) for le, rate in per_s.items()]
    out.append(counter(f"{name}_count", lab, ts, per_s["+Inf"]))
    return out


def test_the_minute_query_gives_each_pool_the_p95s_the_simulator_scores(tmp_path: Path) -> None:
    """Issue 14: one query a minute for every pool; each pool's TTFT and ITL p95 over exactly the
    minute, its first tokens, tokens generated and lowest queue — per pool, from the histograms."""
    end = (time.time() // 60 - 2) * 60  # a whole minute that ended two minutes ago
    ts = every(end - 600, end, 15)
    fast = {**POOL_LABELS, "pod": "fast-0"}
    slow = {**POOL_LABELS, "llmscale_dev_deployment": "slow", "pod": "slow-0"}
    series = []
    for lab, ttft, queue in ((fast, {"0.5": 9.0, "1": 10.0, "2.5": 10.0, "+Inf": 10.0}, 0.0),
                             (slow, {"0.5": 0.0, "1": 1.0, "2.5": 2.0, "+Inf": 10.0}, 4.0)):
        series += _histogram(VLLM.ttft_histogram, lab, ts, ttft)
        series += _histogram(VLLM.itl_histogram, lab, ts, {"0.05": 950.0, "0.1": 1000.0, "+Inf": 1000.0})
        series.append(counter("vllm:generation_tokens_total", lab, ts, 1000.0))
        series.append(gauge(VLLM.waiting, lab, ts, queue))
    with backfilled(tmp_path, series) as url:
        reader = PrometheusSignalReader(url)
        pools = [PoolRequest(TARGET, VLLM), PoolRequest(PoolTarget("ml", "slow", "interactive"), VLLM),
                 PoolRequest(PoolTarget("ml", "gone", "interactive"), VLLM)]
        minutes = reader.read_minutes_sync(pools, end)
        reader.close()
    chat, slow_minute = minutes[TARGET], minutes[PoolTarget("ml", "slow", "interactive")]
    assert chat.end_s == end
    # 90 % of first tokens within 0.5 s, all within 1 s: p95 interpolates to 0.75 s.
    assert chat.ttft_p95_s == pytest.approx(0.75, rel=0.01)
    assert slow_minute.ttft_p95_s == pytest.approx(2.5, rel=0.01)  # the rank falls in +Inf: the top bound
    assert chat.itl_p95_s == pytest.approx(0.05, rel=0.01) and slow_minute.itl_p95_s == pytest.approx(0.05, rel=0.01)
    assert chat.ttft_observations == pytest.approx(600, rel=0.05)
    assert chat.generation_tokens == pytest.approx(60_000, rel=0.05)
    assert chat.queue_min == 0.0 and slow_minute.queue_min == 4.0
    assert not minutes[PoolTarget("ml", "gone", "interactive")].has_data


def _cumulative(bounds: tuple[float, ...], latencies: dict[float, int]) -> dict[str, float]:
    """Per-second rates of each ``le`` bucket for one minute of ``latencies`` (value → requests)."""
    out = {f"{b:g}": sum(n for v, n in latencies.items() if v <= b) / 60.0 for b in bounds}
    out["+Inf"] = sum(latencies.values()) / 60.0
    return out


# Issue 21, "an SLO inside a wide bucket": minutes of vLLM's real TTFT buckets against the default
# 2 s SLO, inside (1, 2.5]. Each: (latencies, p95 Prometheus reads, truly met, judged met).
WIDE_BUCKET_MINUTES = [
    pytest.param({0.8: 90, 2.4: 10}, 1.75, False, False, id="90x0.8s+10x2.4s-reads-met-truly-missed"),
    pytest.param({0.8: 80, 1.2: 20}, 2.125, True, False, id="80x0.8s+20x1.2s-reads-breached-truly-met"),
    pytest.param({0.8: 96, 2.4: 4}, 0.997, True, True, id="96x0.8s+4x2.4s-p95-on-the-lower-bound-met"),
    pytest.param({0.8: 90, 3.0: 10}, 3.75, False, False, id="90x0.8s+10x3s-beyond-the-bucket-missed"),
    pytest.param({1.5: 100}, 2.425, True, False, id="100x1.5s-inside-truly-met-not-counted"),
]


@pytest.mark.parametrize(("latencies", "reads", "truly_met", "judged_met"), WIDE_BUCKET_MINUTES)
def test_a_minute_inside_a_wide_ttft_bucket_is_judged_from_the_bucket_counts(
    tmp_path: Path, latencies: dict[float, int], reads: float, truly_met: bool, judged_met: bool
) -> None:
    """Issue 21: the real ``histogram_quantile`` over vLLM's TTFT buckets reads the given p95; the
    minute counts as met only when the p95 is at most the bucket's lower bound (1 s), so no minute
    that truly missed is ever counted as met (conservative), whatever the interpolation says."""
    end = (time.time() // 60 - 2) * 60
    ts = every(end - 600, end, 15)
    lab = {**POOL_LABELS, "pod": "chat-0"}
    series = _histogram(VLLM.ttft_histogram, lab, ts, _cumulative(VLLM_TTFT_BUCKETS_S, latencies))
    series.append(gauge(VLLM.waiting, lab, ts, 0.0))
    with backfilled(tmp_path, series) as url:
        reader = PrometheusSignalReader(url)
        minute = reader.read_minutes_sync([PoolRequest(TARGET, VLLM)], end)[TARGET]
        reader.close()
    true_p95 = sorted(v for v, n in latencies.items() for _ in range(n))[94]
    assert (true_p95 <= 2.0) == truly_met
    assert minute.ttft_p95_s == pytest.approx(reads, rel=0.01)
    assert minute.ttft_buckets_s == VLLM_TTFT_BUCKETS_S
    assert judge_minute(minute, 2.0, 0.1) is judged_met
    assert not (judged_met and not truly_met), "a minute that truly missed was counted as met"


def test_the_minute_query_gives_each_pool_the_live_calibrations_means(tmp_path: Path) -> None:
    """Issue 24: the live calibration reads, in the same minute query (no query of its own), each
    pool's mean running batch per engine and the sums and counts of its ITL, prefill-time, prompt and
    output histograms over exactly the minute; a pool of two pods averages their batches."""
    end = (time.time() // 60 - 2) * 60
    ts = every(end - 600, end, 15)
    pods = [({**POOL_LABELS, "pod": "chat-0"}, 6.0), ({**POOL_LABELS, "pod": "chat-1"}, 10.0)]
    series = []
    for lab, running in pods:
        series.append(gauge(VLLM.running, lab, ts, running))
        series.append(gauge(VLLM.waiting, lab, ts, 0.0))
        # 400 token gaps a second of 20 ms each; 2 requests a second of 900-token prompts, 0.3 s of
        # prefill each, 200 output tokens each.
        for hist, total, count in ((VLLM.itl_histogram, 8.0, 400.0), ("vllm:request_prefill_time_seconds", 0.6, 2.0),
                                   (VLLM.prompt_tokens_histogram, 1800.0, 2.0),
                                   (VLLM.generation_tokens_histogram, 400.0, 2.0)):
            assert hist is not None
            series.append(counter(f"{hist}_sum", lab, ts, total))
            series.append(counter(f"{hist}_count", lab, ts, count))
    with backfilled(tmp_path, series) as url:
        reader = PrometheusSignalReader(url)
        minutes = reader.read_minutes_sync([PoolRequest(TARGET, VLLM)], end)
        reader.close()
    m = minutes[TARGET]
    assert m.running_mean == pytest.approx(8.0)
    assert m.itl_count == pytest.approx(2 * 400 * 60, rel=0.05) and m.itl_sum_s == pytest.approx(2 * 8 * 60, rel=0.05)
    assert m.prefill_sum_s is not None and m.prefill_count is not None
    assert m.prefill_sum_s / m.prefill_count == pytest.approx(0.3, rel=0.01)
    assert m.prompt_tokens_sum is not None and m.prompt_tokens_count is not None
    assert m.prompt_tokens_sum / m.prompt_tokens_count == pytest.approx(900.0, rel=0.01)
    assert m.output_tokens_sum is not None and m.output_tokens_count is not None
    assert m.output_tokens_sum / m.output_tokens_count == pytest.approx(200.0, rel=0.01)
    window = live_window(m, 8192)
    assert window is not None and window.itl_mean_s == pytest.approx(0.02, rel=0.01)
    assert window.context_tokens == pytest.approx(1000.0, rel=0.01)


def test_each_llmdeployments_wake_query_is_answered_alone_within_its_namespace(tmp_path: Path) -> None:
    """Issue 22 on a real Prometheus: the old joined query let team B's wake query add a second
    series under team A's key (shown by running it); now each LLMDeployment's query is sent alone
    and Prometheus's own parser accepts the text llmscale checked (comment, range, offset, @),
    while team B's injection and its read of team A's Secrets are refused and never sent."""
    now = time.time()
    ts = every(now - 600, now - 3, 15)
    series = [gauge("gw_pending", {"namespace": "team-a", "service": "chat"}, ts, 3.0),
              gauge("gw_pending", {"namespace": "team-b", "service": "chat"}, ts, 5.0),
              counter("gw_requests_total", {"namespace": "team-b", "service": "chat"}, ts, 2.0)]
    series += [gauge("kube_secret_info", {"namespace": "team-a", "secret": f"s{i}"}, ts, 1.0) for i in range(7)]
    team_a, team_b = PoolTarget("team-a", "chat", "interactive"), PoolTarget("team-b", "chat", "interactive")
    own = 'sum(gw_pending{namespace="$namespace", service="$name"})'
    injection = ('vector(0)), "llmscale_wake", "evil", "", "") or label_replace(label_replace(vector(1000), '
                 '"llmscale_wake", "0", "", ""), "x", "1", "", "") or label_replace(sum(vector(0)')
    with backfilled(tmp_path, series) as url:
        # Before: the joined query of both pools (team A key 0, team B key 1) as llmscale sent it.
        joined = "\n  or ".join(f'label_replace(sum(\n{q}\n), "llmscale_wake", "{k}", "", "")' for k, q in (
            ("0", own.replace("$namespace", "team-a").replace("$name", "chat")), ("1", injection)))
        keys = [s["metric"].get("llmscale_wake") for s in raw(url, joined)]
        assert keys.count("0") == 2, f"before: team B added a series under team A's key: {keys}"
        reader = PrometheusSignalReader(url)
        try:
            snaps = reader.read_fleet_sync([
                PoolRequest(team_a, VLLM, None, own),
                PoolRequest(team_b, VLLM, None, "sum(gw_pending{namespace=\"$namespace\"} offset 1m)  # queue\n"
                            "+ sum(rate(gw_requests_total{namespace=\"$namespace\"}[1m] @ end()))"),
            ], time.time())
            assert snaps[team_a].wake_demand == 3.0, snaps[team_a].unknown
            assert snaps[team_b].wake_demand == pytest.approx(7.0, rel=0.05), snaps[team_b].unknown
            for bad in (injection, 'count(kube_secret_info{namespace="team-a"})'):
                snap = reader.read_fleet_sync([PoolRequest(team_a, VLLM, None, own),
                                               PoolRequest(team_b, VLLM, None, bad)], time.time())
                assert snap[team_a].wake_demand == 3.0, "team A reads its own demand, alone"
                assert snap[team_b].wake_demand is None
                assert snap[team_b].unknown["wake_demand"].startswith("spec.scaling.wake.query refused")
        finally:
            reader.close()
