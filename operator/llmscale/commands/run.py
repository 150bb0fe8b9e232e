"""``llmscale run``: the operator — Kopf handlers plus ``/metrics``, ``/healthz`` and ``/readyz``.

Configuration comes from flags, then ``LLMSCALE_*`` environment variables, then the defaults of
:class:`llmscale.controller.settings.OperatorSettings` (see ``docs/operator.md``). Kubernetes credentials come
from the in-cluster service account, else the kubeconfig (``$KUBECONFIG`` or ``~/.kube/config``,
``--kubeconfig``/``--context`` to choose); Kopf and the server-side-apply writer share them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import logging
import os
import random
import sys
import threading
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import kopf
import kubernetes.client
import kubernetes.config
import urllib3
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from llmscale.commands.logformat import formatter
from llmscale.controller.deps import Decider, Dependencies, SignalSource
from llmscale.controller.gpusfree import GpuReader
from llmscale.controller.handlers import build_registry, configure_kopf
from llmscale.controller.heap import limit_arenas, trim_heap_forever
from llmscale.controller.metrics import OperatorMetrics
from llmscale.controller.peers import PeeringConflict, check_peering
from llmscale.controller.scaletarget import KubernetesScaleClient
from llmscale.controller.settings import (
    OperatorSettings,
    add_setting_flags,
    load_settings,
    with_peering_priority,
)
from llmscale.controller.signals.fleet import FleetReader
from llmscale.controller.tlsbuffers import shrink_tls_read_buffers
from llmscale.controller.writer import KubernetesInferencePools, KubernetesWriter

if TYPE_CHECKING:
    from llmscale.signals.prometheus import PrometheusSignalReader

__all__ = ["QuietTimerFilter", "add_arguments", "health_app", "kube_configuration", "main", "prometheus_reader", "serve"]

_LOG = logging.getLogger("llmscale.run")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``llmscale run`` flags: one per setting (:func:`~llmscale.controller.settings.add_setting_flags`;
    unset flags fall back to ``LLMSCALE_*`` and the defaults), plus the Kubernetes credentials."""
    add_setting_flags(parser)
    parser.add_argument("--kubeconfig", default=None, help="kubeconfig file (default: in-cluster, $KUBECONFIG)")
    parser.add_argument("--context", default=None, help="kubeconfig context")


def kube_configuration(kubeconfig: str | None = None, context: str | None = None) -> kubernetes.client.Configuration:
    """Return the official client's configuration: in-cluster service account, else kubeconfig.

    Raises:
        kubernetes.config.ConfigException: neither works.
    """
    config = kubernetes.client.Configuration()
    if kubeconfig is None and context is None:
        try:
            kubernetes.config.load_incluster_config(client_configuration=config)  # type: ignore[no-untyped-call]
            return config
        except kubernetes.config.ConfigException:
            pass
    kubernetes.config.load_kube_config(  # type: ignore[no-untyped-call]
        config_file=kubeconfig, context=context, client_configuration=config
    )
    return config


def health_app(metrics: OperatorMetrics, ready: asyncio.Event | threading.Event) -> web.Application:
    """Return the aiohttp app of the operator's own endpoints.

    - ``GET /metrics``: :class:`OperatorMetrics` in the Prometheus text format.
    - ``GET /healthz``: 200 while the event loop answers (liveness: a wedged loop fails it).
    - ``GET /readyz``: 200 once Kopf is ready (indexes listed, handlers running), else 503.
    """

    async def metrics_view(_: web.Request) -> web.Response:
        body = generate_latest(metrics.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def readyz(_: web.Request) -> web.Response:
        if ready.is_set():
            return web.Response(text="ready\n")
        return web.Response(status=503, text="starting\n")

    app = web.Application()
    app.router.add_get("/metrics", metrics_view)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    return app


@contextlib.asynccontextmanager
async def _serving(app: web.Application, host: str, port: int) -> AsyncIterator[web.AppRunner]:
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    try:
        yield runner
    finally:
        await runner.cleanup()


def prometheus_reader(settings: OperatorSettings) -> PrometheusSignalReader:
    """Return the Prometheus reader the settings describe: URL, label names, rate window,
    quantile, timeouts, retries, threads, authentication and TLS
    (:meth:`OperatorSettings.reader_settings`), and the namespaces served when they are named
    exactly (a shard's ``--namespace``): its fleet-wide queries then select only their series.
    With ``--all-namespaces``, no namespace or a pattern, every namespace's series are read."""
    from llmscale.controller.apisession import exact_namespaces
    from llmscale.signals.prometheus import PrometheusSignalReader

    names = None if settings.all_namespaces or not settings.namespaces else exact_namespaces(settings.namespaces)
    return PrometheusSignalReader(settings.prometheus_url, settings=settings.reader_settings(),
                                  namespaces=names or ())


def _default_decider() -> Decider:
    from llmscale.policy import decide

    return decide


async def serve(
    settings: OperatorSettings,
    *,
    kube_config: kubernetes.client.Configuration,
    signals: SignalSource | None = None,
    decide: Decider | None = None,
    metrics: OperatorMetrics | None = None,
    clock: Any = time.time,
    stop_flag: asyncio.Event | threading.Event | None = None,
    ready: asyncio.Event | threading.Event | None = None,
) -> None:
    """Run the operator until ``stop_flag`` is set (or a signal stops Kopf).

    Kopf treats every task created in the loop after it started as its own and cancels it on
    exit, so tests run ``serve`` in a thread of its own (``threading.Event`` flags), as Kopf's
    ``KopfRunner`` does.

    With peering and no configured ``peering_priority``, a random priority is drawn here, once per
    process (:func:`llmscale.controller.settings.with_peering_priority`).

    Raises:
        PeeringConflict: another operator is live in a peering this one would not take part in
            (:mod:`llmscale.controller.peers`); nothing was started.

    Everything the handlers use can be injected (tests pass a mock API server's configuration,
    a canned signal source and a fake clock); what is not given is built from ``settings``:
    the Prometheus reader of :mod:`llmscale.signals.prometheus` (closed here when the operator
    stops) and :func:`llmscale.policy.decide`. The fleet reader over the signal source reads every
    pool once per ``settings.tick_base_seconds``, with ``settings.signal_timeout_seconds`` per read.
    """
    # Each process draws its own peering priority (unless one is configured): replicas of one
    # Deployment share their environment, and peers of equal priority all pause (settings.py).
    settings = with_peering_priority(settings, random.SystemRandom())
    if settings.peering is not None:
        _LOG.info(f"Chose priority {settings.peering_priority} in Kopf peering {settings.peering}")
    metrics = metrics if metrics is not None else OperatorMetrics()
    ready = ready if ready is not None else threading.Event()
    api_client = kubernetes.client.ApiClient(kube_config)
    try:
        # Refuse to be a second writer beside an operator that Kopf's peering would not pause.
        await asyncio.to_thread(check_peering, api_client, settings)
    except PeeringConflict:
        api_client.close()  # type: ignore[no-untyped-call]
        raise
    own_reader: PrometheusSignalReader | None = None
    if signals is None:
        signals = own_reader = prometheus_reader(settings)
    if not settings.read_nodes:
        _LOG.info("Left the GPUs free unknown for every LLMDeployment: the node read is off (read_nodes); "
                  "batch Jobs are released by windows and deadlines only")
    deps = Dependencies(
        settings=settings,
        writer=KubernetesWriter(api_client, settings.field_manager),
        signals=signals,
        fleet=FleetReader(signals, period_s=settings.tick_base_seconds, timeout_s=settings.signal_timeout_seconds,
                          clock=clock, on_carried=lambda t: metrics.signal_errors.labels(t.namespace, t.deployment).inc()),
        decide=decide if decide is not None else _default_decider(),
        metrics=metrics,
        kube_config=kube_config,
        clock=clock,
        scales=KubernetesScaleClient(
            api_client, settings.field_manager,
            opt_in=tuple(settings.scale_target_label.split("=", 1)) if settings.scale_target_label else None,  # type: ignore[arg-type]
        ),
        gpus=GpuReader(api_client if settings.read_nodes else None, on_read=metrics.gpus_read.set),
        inference_pools=KubernetesInferencePools(api_client, settings.field_manager),
    )
    trimming = asyncio.create_task(trim_heap_forever(), name="llmscale-heap-trim")
    try:
        async with _serving(health_app(metrics, ready), settings.metrics_host, settings.metrics_port) as runner:
            for address in runner.addresses:
                _LOG.info(f"Served /metrics, /healthz and /readyz on {address}")
            await kopf.operator(
                registry=build_registry(settings),
                settings=configure_kopf(settings),
                memo=kopf.Memo(deps=deps),
                clusterwide=settings.all_namespaces,
                namespaces=settings.namespaces,
                standalone=settings.standalone,
                # Only a named peering is passed: Kopf makes any peering name given here mandatory.
                peering_name=settings.peering_name,
                stop_flag=stop_flag,
                ready_flag=ready,
            )
    finally:
        trimming.cancel()
        await deps.fleet.stop()  # Kopf's cleanup did, unless it never started
        if own_reader is not None:
            own_reader.close()
        api_client.close()  # type: ignore[no-untyped-call]


class QuietTimerFilter(logging.Filter):
    """Drop Kopf's own "Timer 'tick' is invoked/succeeded." records below WARNING: the base timer
    fires every few seconds per object, and our tick logs what matters (scales, failures)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING or not record.getMessage().startswith("Timer 'tick' ")


def _error(message: str, status: int) -> int:
    print(f"llmscale run: error: {message}", file=sys.stderr)
    return status


def api_server_problem(config: kubernetes.client.Configuration, timeout_s: float = 10.0) -> str | None:
    """Why the API server of ``config`` cannot be used, in one line, or ``None`` when it answers
    ``/version``. One request, no retries (urllib3's retries would log a warning each)."""
    probe = copy.copy(config)
    probe.retries = False
    client = kubernetes.client.ApiClient(probe)
    try:
        kubernetes.client.VersionApi(client).get_code(_request_timeout=timeout_s)
    except kubernetes.client.ApiException as exc:
        if exc.status in (401, 403):
            return f"the Kubernetes API server at {config.host} refused the credentials: {exc.status} {exc.reason}"
        return None  # it answered: what it refuses is the operator's business later
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        reason = getattr(exc, "reason", None) or exc
        text = str(reason)
        # urllib3's "HTTPSConnection(host=..., port=...): Failed to establish a new connection: [Errno 111] ..."
        text = text.split("): ", 1)[-1] if "): " in text else text
        return f"cannot reach the Kubernetes API server at {config.host}: {text}"
    finally:
        client.close()  # type: ignore[no-untyped-call]
    return None


def main(args: argparse.Namespace) -> int:
    """Run the operator; return 0 on a clean stop, 2 on a configuration error, 1 when the API
    server cannot be reached or refuses the credentials (one line on stderr, no traceback)."""
    limit_arenas()  # before any thread starts
    try:
        settings = load_settings(args, os.environ)
    except ValueError as exc:
        return _error(str(exc), 2)
    try:
        config = kube_configuration(getattr(args, "kubeconfig", None), getattr(args, "context", None))
    except kubernetes.config.ConfigException as exc:
        return _error(f"no Kubernetes credentials: {exc}", 2)
    problem = api_server_problem(config)
    if problem is not None:
        return _error(problem, 1)
    handler = logging.StreamHandler()
    handler.setFormatter(formatter(settings.log_format))
    logging.basicConfig(level=settings.log_level.upper(), handlers=[handler])
    if not settings.kopf_events:
        logging.getLogger("kopf.objects").addFilter(QuietTimerFilter())
    # aiohttp logs every request to /metrics, /healthz and /readyz at INFO: a line per scrape and
    # probe. Kept only with --log-level DEBUG.
    if settings.log_level.upper() != "DEBUG":
        logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    # Before any connection opens: Kopf holds one TLS connection per watch stream and request.
    shrink_tls_read_buffers()
    try:
        asyncio.run(serve(settings, kube_config=config))
    except PeeringConflict as exc:
        return _error(str(exc), 2)
    return 0
