"""One process serving the mock engine's metric families for every llmscale pod of a cluster: the
scale benchmark's stand-in for 1,000 engines (benchmarks/scale.py).

    .venv/bin/python benchmarks/fleet_exporter.py --kubeconfig PATH --port P --sd-file PATH
        [--refresh-seconds 5]

Every ``--refresh-seconds`` it lists the Ready, not terminating pods labelled
``app.kubernetes.io/managed-by=llmscale`` (one LIST for the whole cluster) and serves, for each,
the series the ``vllm`` profile reads (:data:`llmscale.signals.profiles.vllm.PROFILE`: the names,
types and histogram buckets of :mod:`llmscale.engine.metrics`) on ``/pods/<namespace>/<pod>/metrics``.
It writes the pods as Prometheus file service discovery targets (``--sd-file``), one target per pod
with the labels a Kubernetes scrape with the usual relabelling gives an engine target:
``namespace``, ``pod``, ``llmscale_dev_deployment``, ``llmscale_dev_pool`` (and
``__metrics_path__``). So Prometheus scrapes one target per engine, as on a cluster, and its
targets API knows their scrape interval — from one small process rather than 1,000 engines.

Each pod serves a light, steady load: :data:`REQUEST_RATE` requests/s of :data:`PROMPT_TOKENS` +
:data:`GENERATION_TOKENS` tokens, one request running, no queue, 20 % KV cache, with TTFT and ITL
in fixed buckets — counters grow with time since the pod was first seen, so rates and
``histogram_quantile`` have real samples to work on, and the policy holds at ``min``.

``/metrics`` serves every pod's series at once (for a look; the benchmark does not scrape it).
``POST /set?namespace=NS&deployment=NAME&waiting=Q`` sets the queue depth of every pod of one
LLMDeployment (the benchmark's metric change); ``GET /status`` says how many pods are served.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import kubernetes.client
import kubernetes.config
from aiohttp import web
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from llmscale.engine.metrics import ITL_BUCKETS_S, TTFT_BUCKETS_S, build_1_2_5_buckets
from llmscale.signals.profiles.vllm import PROFILE

_LOG = logging.getLogger("fleet-exporter")

#: Requests/s finished per pod: light enough that one replica holds (queue 0, one running).
REQUEST_RATE = 0.2
#: Tokens per request (prompt, generated), and the engine-seconds of TTFT and ITL each request sees.
PROMPT_TOKENS, GENERATION_TOKENS = 256, 200
TTFT_S, ITL_S = 0.12, 0.018
#: Context limit of the sample, tokens: the top of the token-count histograms' buckets.
MAX_MODEL_LEN = 2048
SELECTOR = "app.kubernetes.io/managed-by=llmscale"
LABELS = ["namespace", "pod", "llmscale_dev_deployment", "llmscale_dev_pool", "model_name", "engine"]


@dataclass(frozen=True)
class Pod:
    """One served pod: its labels as a scrape of the engine would give them."""

    namespace: str
    name: str
    deployment: str
    pool: str
    first_seen_s: float


def _counter(name: str) -> str:
    return name.removesuffix("_total")


class FleetCollector:
    """A prometheus-client collector of every served pod's engine series (module docstring)."""

    def __init__(self) -> None:
        self.pods: dict[tuple[str, str], Pod] = {}
        self.waiting: dict[tuple[str, str], float] = {}

    def only(self, namespace: str, pod: str) -> FleetCollector:
        """A collector of one pod's series (empty when the pod is not served)."""
        one = FleetCollector()
        one.waiting = self.waiting
        if (namespace, pod) in self.pods:
            one.pods = {(namespace, pod): self.pods[(namespace, pod)]}
        return one

    def collect(self) -> Iterator[Metric]:
        """Yield the families of :data:`PROFILE`, one series per pod."""
        now = time.time()
        p = PROFILE
        gauges = [GaugeMetricFamily(p.waiting, "Requests waiting", labels=LABELS),
                  GaugeMetricFamily(p.running, "Requests running", labels=LABELS),
                  GaugeMetricFamily(p.kv_cache_usage, "KV-cache usage, 0-1", labels=LABELS)]
        counters = {name: CounterMetricFamily(_counter(name), name, labels=LABELS) for name in (
            p.preemptions_total, p.requests_total, p.prompt_tokens_total, p.generation_tokens_total,
            p.prefix_cache_hits_total, p.prefix_cache_queries_total) if name}
        token_buckets = build_1_2_5_buckets(MAX_MODEL_LEN)
        histograms = [
            (HistogramMetricFamily(p.ttft_histogram, "TTFT, seconds", labels=LABELS), TTFT_BUCKETS_S, TTFT_S, 1),
            (HistogramMetricFamily(p.itl_histogram, "ITL, seconds", labels=LABELS), ITL_BUCKETS_S, ITL_S,
             GENERATION_TOKENS - 1),
            (HistogramMetricFamily(str(p.prompt_tokens_histogram), "Prompt tokens", labels=LABELS),
             token_buckets, PROMPT_TOKENS, 1),
            (HistogramMetricFamily(str(p.generation_tokens_histogram), "Generated tokens", labels=LABELS),
             token_buckets, GENERATION_TOKENS, 1),
        ]
        per_request = {p.preemptions_total: 0.0, p.requests_total: 1.0, p.prompt_tokens_total: PROMPT_TOKENS,
                       p.generation_tokens_total: GENERATION_TOKENS, p.prefix_cache_hits_total: PROMPT_TOKENS / 2,
                       p.prefix_cache_queries_total: PROMPT_TOKENS}
        for pod in list(self.pods.values()):
            labels = [pod.namespace, pod.name, pod.deployment, pod.pool, "llama-3.1-8b-instruct", "0"]
            requests = REQUEST_RATE * max(0.0, now - pod.first_seen_s)
            gauges[0].add_metric(labels, self.waiting.get((pod.namespace, pod.deployment), 0.0))
            gauges[1].add_metric(labels, 1.0)
            gauges[2].add_metric(labels, 0.2)
            for name, family in counters.items():
                family.add_metric(labels, requests * per_request[name])
            for family, buckets, value, per in histograms:
                count = requests * per
                family.add_metric(labels, [(f"{b:g}", count if value <= b else 0.0) for b in buckets]
                                  + [("+Inf", count)], count * value)
        yield from gauges
        yield from counters.values()
        yield from (h[0] for h in histograms)


def _ready(pod: kubernetes.client.V1Pod) -> bool:
    if pod.metadata.deletion_timestamp is not None:
        return False
    return any(c.type == "Ready" and c.status == "True" for c in (pod.status.conditions or []))


def write_targets(path: Path, port: int, pods: list[Pod]) -> None:
    """Write ``pods`` as file service discovery targets (JSON, through a temporary file so that
    Prometheus never reads half of it)."""
    groups = [{"targets": [f"127.0.0.1:{port}"], "labels": {
        "__metrics_path__": f"/pods/{p.namespace}/{p.name}/metrics", "namespace": p.namespace, "pod": p.name,
        "llmscale_dev_deployment": p.deployment, "llmscale_dev_pool": p.pool}} for p in pods]
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(groups) + "\n")
    tmp.replace(path)


async def refresh(collector: FleetCollector, core: kubernetes.client.CoreV1Api, period_s: float, sd_file: Path,
                  port: int) -> None:
    """List llmscale's Ready pods every ``period_s`` seconds, serve exactly those and write them
    to ``sd_file`` when they changed."""
    loop = asyncio.get_running_loop()
    while True:
        try:
            items = (await loop.run_in_executor(None, lambda: core.list_pod_for_all_namespaces(
                label_selector=SELECTOR, _request_timeout=30))).items
            now = time.time()
            live = {}
            for pod in items:
                if not _ready(pod):
                    continue
                key = (pod.metadata.namespace, pod.metadata.name)
                labels = pod.metadata.labels or {}
                old = collector.pods.get(key)
                live[key] = old or Pod(key[0], key[1], labels.get("llmscale.dev/deployment", ""),
                                       labels.get("llmscale.dev/pool", ""), now)
            if live.keys() != collector.pods.keys() or not sd_file.exists():
                write_targets(sd_file, port, sorted(live.values(), key=lambda p: (p.namespace, p.name)))
            collector.pods = live
        except Exception as exc:  # the API server is busy or restarting: keep the last list
            _LOG.warning(f"Failed to list llmscale's pods: {exc!r}")
        await asyncio.sleep(period_s)


def make_app(collector: FleetCollector) -> web.Application:
    """The exporter's HTTP app: ``/metrics``, ``/set`` and ``/status`` (module docstring)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)  # type: ignore[arg-type]

    async def metrics(_: web.Request) -> web.Response:
        body = await asyncio.get_running_loop().run_in_executor(None, generate_latest, registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def pod_metrics(request: web.Request) -> web.Response:
        one = CollectorRegistry(auto_describe=False)
        one.register(collector.only(request.match_info["namespace"], request.match_info["pod"]))  # type: ignore[arg-type]
        return web.Response(body=generate_latest(one), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def set_waiting(request: web.Request) -> web.Response:
        q = request.query
        try:
            collector.waiting[(q["namespace"], q["deployment"])] = float(q["waiting"])
        except (KeyError, ValueError) as exc:
            raise web.HTTPBadRequest(text=f"need namespace, deployment and a numeric waiting: {exc!r}") from None
        return web.json_response({"ok": True})

    async def status(_: web.Request) -> web.Response:
        return web.json_response({"pods": len(collector.pods)})

    app = web.Application()
    app.add_routes([web.get("/metrics", metrics), web.get("/pods/{namespace}/{pod}/metrics", pod_metrics),
                    web.post("/set", set_waiting), web.get("/status", status)])
    return app


async def serve(kubeconfig: str, host: str, port: int, refresh_s: float, sd_file: Path) -> None:
    """Run the exporter until cancelled."""
    core = kubernetes.client.CoreV1Api(kubernetes.config.new_client_from_config(config_file=kubeconfig))
    collector = FleetCollector()
    runner = web.AppRunner(make_app(collector), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    _LOG.info(f"Serving the engine series of llmscale's pods on http://{host}:{port}/metrics")
    try:
        await refresh(collector, core, refresh_s, sd_file, port)
    finally:
        await runner.cleanup()


def main(argv: list[str] | None = None) -> int:
    """The exporter's command line (module docstring); return the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--sd-file", type=Path, required=True, help="file service discovery targets to write")
    parser.add_argument("--refresh-seconds", type=float, default=5.0, help="seconds between two pod lists")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    asyncio.run(serve(args.kubeconfig, args.host, args.port, args.refresh_seconds, args.sd_file))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
