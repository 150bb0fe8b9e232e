"""The batched query against a real Prometheus scraping canned engine /metrics pages.

Proves what the canned answers cannot: that the PromQL runs, that sums and the p95 come out as
computed by hand, that another LLMDeployment's pods do not leak in, that a counter reset does
not read as a negative rate, that a vLLM pod with two engine cores counts as one replica, that
``observed_at`` is the scrape time, and that a dead target leaves the count at once (staleness
markers). Needs the ``prometheus`` binary (Debian package ``prometheus``); skipped without it.
"""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from aiohttp import ClientSession, web

from llmscale.signals import PoolTarget, PrometheusSignalReader, ReaderSettings, SignalSnapshot, get_profile

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("prometheus") is None, reason="needs the prometheus binary"),
]

TARGET = PoolTarget(namespace="ml", deployment="chat", pool="interactive")
VLLM = get_profile("vllm")


def histogram(name: str, engine: str, per_scrape: tuple[int, int, int], scrapes: int) -> str:
    """Exposition lines of a histogram with buckets 0.1, 0.5, 1 s after ``scrapes`` scrapes.

    ``per_scrape`` is how many observations land in (0, 0.1], (0.1, 0.5] and (0.5, 1] per scrape.
    """
    a, b, c = (n * scrapes for n in per_scrape)
    lines = [
        f'{name}_bucket{{engine="{engine}",le="0.1"}} {a}',
        f'{name}_bucket{{engine="{engine}",le="0.5"}} {a + b}',
        f'{name}_bucket{{engine="{engine}",le="1.0"}} {a + b + c}',
        f'{name}_bucket{{engine="{engine}",le="+Inf"}} {a + b + c}',
        f'{name}_count{{engine="{engine}"}} {a + b + c}',
        f'{name}_sum{{engine="{engine}"}} {0.3 * (a + b + c)}',
    ]
    return "\n".join(lines)


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
                # TTFT: 10 requests a scrape, 5 under 0.1 s, 4 under 0.5 s, 1 under 1 s -> p95 0.75 s
                histogram("vllm:time_to_first_token_seconds", core, (5, 4, 1), n),
                # ITL: no tokens at all -> every rate is 0 -> histogram_quantile is NaN
                histogram("vllm:inter_token_latency_seconds", core, (0, 0, 0), n),
            ]
        return "\n".join(out) + "\n"


async def serve(engine: Engine) -> tuple[web.AppRunner, int]:
    async def metrics(_: web.Request) -> web.Response:
        return web.Response(text=engine.page(), content_type="text/plain")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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
    runners = []
    ports = []
    for engine in (a, b, other):
        runner, port = await serve(engine)
        runners.append(runner)
        ports.append(port)
    prom_port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        f"""
global: {{scrape_interval: 1s, scrape_timeout: 900ms}}
scrape_configs:
  - job_name: engines
    static_configs:
      - targets: ["127.0.0.1:{ports[0]}", "127.0.0.1:{ports[1]}"]
        labels: {{namespace: ml, llmscale_dev_deployment: chat, llmscale_dev_pool: interactive}}
      - targets: ["127.0.0.1:{ports[2]}"]
        labels: {{namespace: ml, llmscale_dev_deployment: other, llmscale_dev_pool: interactive}}
"""
    )
    proc = subprocess.Popen(
        [
            "prometheus",
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{prom_port}",
            "--log.level=error",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{prom_port}"
    try:
        async with ClientSession() as http:
            for _ in range(100):
                try:
                    async with http.get(f"{url}/-/ready") as resp:
                        if resp.status == 200:
                            break
                except OSError:
                    pass
                await asyncio.sleep(0.1)
            else:
                pytest.fail("Prometheus did not become ready in 10 s")
        yield Fleet(url=url, a=a, b=b, b_runner=runners[1])
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        for runner in runners:
            await runner.cleanup()


async def read_until(
    reader: PrometheusSignalReader, done: Callable[[SignalSnapshot], bool], timeout_s: float
) -> SignalSnapshot:
    deadline = time.monotonic() + timeout_s
    while True:
        snap = await reader.read(VLLM, TARGET, now=time.time())
        if done(snap) or time.monotonic() > deadline:
            return snap
        await asyncio.sleep(0.25)


async def test_real_prometheus_answers_the_batched_query(fleet: Fleet) -> None:
    # A 5 s rate window (five 1 s scrapes) so the rates are settled within seconds; with the
    # default 1m a series younger than the window reads low (rate() divides by the whole range).
    reader = PrometheusSignalReader(fleet.url, settings=ReaderSettings(rate_window="5s"))
    snap = await read_until(reader, lambda s: fleet.a.scrapes >= 6 and s.ttft_p95_s is not None, 20.0)
    assert snap.error is None
    assert snap.replicas_reporting == 2, "two targets; B's two engine cores are one replica"
    assert snap.queue_depth == 7.0  # 3 + 2 + 2, not the other deployment's 100
    assert snap.running_requests == 11.0  # 5 + 3 + 3
    assert snap.kv_cache_utilization == pytest.approx((0.5 + 0.7 + 0.7) / 3)
    # p95 of 10 observations a scrape: rank 9.5 falls in (0.5, 1] holding the 10th -> 0.75 s.
    assert snap.ttft_p95_s == pytest.approx(0.75, rel=0.02)
    assert snap.itl_p95_s is None, "no tokens in the window: the quantile is unknown, not 0"
    # B adds 10 a second per core: 20/s. A's counter falls every scrape; read raw it would be
    # -1/s, but rate() takes every fall as a restart from 0 and counts the new value (~1000) as
    # the increase: ~1000/s. Never negative, and the restarts are not hidden.
    assert snap.preemption_rate is not None and 500.0 < snap.preemption_rate < 2000.0
    # observed_at is the newest scrape, at most one scrape interval (plus a margin) old.
    assert 0.0 <= snap.age(time.time()) < 2.5

    # Replica B dies: its next scrape fails, Prometheus writes staleness markers, and the
    # replica drops out of the count at once rather than after the 5 min lookback.
    await fleet.b_runner.cleanup()
    snap = await read_until(reader, lambda s: s.replicas_reporting == 1, 6.0)
    assert snap.replicas_reporting == 1
    assert snap.queue_depth == 3.0
    reader.close()
