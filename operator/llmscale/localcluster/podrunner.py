"""The local cluster's stand-in for a kubelet's container runtime, plus a Service router.

KWOK gives the local cluster fake GPU nodes and pod lifecycles (scheduled, Running, Ready after the
cold start), but nothing runs in those pods. This process runs what the pods would run:

* for every Ready pod whose container runs the mock engine (``llmscale engine ...``) — llmscale's
  own, or the pods of a workload created by hand that llmscale scales through ``/scale`` — it
  starts that very command as a local process on a free port on
  127.0.0.1 (the cold start has already been waited out by KWOK, so it passes
  ``--cold-start-seconds 0``), and annotates the pod with ``llmscale.dev/local-address`` so that
  Prometheus' Kubernetes service discovery can relabel ``__address__`` to it;
* when a pod is deleted it does what a kubelet does: the pod leaves the router at once (as it
  leaves its Service's endpoints), the container's preStop ``exec`` hook runs (the pod template's
  drain hook, pointed at the engine's local address), then the engine gets SIGTERM — the mock
  engine refuses new requests and finishes those in flight — and SIGKILL once the pod's
  ``terminationGracePeriodSeconds`` have passed since the deletion; when the engine has exited it
  deletes the pod with a grace period of 0, as the kubelet does, so the pod stays ``Terminating``
  exactly as long as its engine runs (KWOK removes it at its ``deletionTimestamp`` should this
  runner be gone: kwok-stages.yaml);
* it serves a small router on ``--router-port``: ``/ns/<namespace>/svc/<service>/<path>`` is
  proxied to the least-loaded Ready engine among the pods the Service (any Service) selects (as kube-proxy
  would, but least-outstanding rather than random), and ``/ns/<namespace>/pool/<deployment>/<pool>/
  <path>`` to a pool's pods directly, Service or not. A Service request that finds
  no ready engine is *held* for up to ``--hold-seconds`` until one answers, as Knative's activator
  or KEDA's HTTP interceptor hold requests for a deployment scaled to zero;
* it serves its own ``/metrics`` (prometheus-client): ``llmscale_router_pending_requests{namespace,
  service}``, the requests held waiting for a ready engine, and ``llmscale_router_requests_total{
  namespace, service}``, every request received, both present (at 0) for every Service from the
  moment the router sees it. They are a gateway's demand signals that exist at zero replicas: an
  LLMDeployment's ``spec.scaling.wake.query`` reads them to scale from zero;
* for every Ready pod of a Job whose container runs ``llmscale batch run``, it runs that batch
  client for real against the router, with hostPath volumes as local folders, and terminates it
  like a node when the pod is deleted (:mod:`llmscale.localcluster.jobpods`);
* it serves ``/sd``: Prometheus HTTP service discovery of the running engines, with the
  ``__meta_kubernetes_pod_*`` labels Kubernetes service discovery would give them (Debian's
  Prometheus is built without Kubernetes service discovery); ``/status`` lists engines and Services.

Test infrastructure, not product code: started by :mod:`llmscale.localcluster.addons`
(``python -m llmscale.localcluster.podrunner``) for the e2e suite and ``llmscale demo``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import re
import shlex
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from kubernetes import client, config
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, generate_latest

from llmscale.localcluster import realvllm
from llmscale.localcluster.jobpods import BatchClients
from llmscale.localcluster.ports import free_port

log = logging.getLogger("podrunner")

#: The niceness real vLLM engines run at (the mock engines at the runner's own): 10. A CPU engine
#: under load takes a whole core; on a 2-core machine two of them left Prometheus answering a query
#: in more than the operator's 5 s read timeout, which no GPU cluster would see.
REAL_ENGINE_NICENESS = 10

ADDRESS_ANNOTATION = "llmscale.dev/local-address"
#: Seconds a Service request waits for a ready engine before a 503: a wake from zero takes a tick,
#: the cold start (seconds in the e2e sample) and the engine's start.
HOLD_S = 60.0
#: Seconds between two looks for a ready engine while a request is held.
_HOLD_POLL_S = 0.2


class RouterMetrics:
    """The router's own metrics, on a registry of their own (docs/policy.md, "Scale to zero")."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.pending = Gauge(
            "llmscale_router_pending_requests", "Requests held waiting for a ready engine of the Service",
            ["namespace", "service"], registry=self.registry,
        )
        self.requests = Counter(
            "llmscale_router_requests", "Requests received for the Service",
            ["namespace", "service"], registry=self.registry,
        )

    def know(self, services: list[tuple[str, str]]) -> None:
        """Create the series of every Service at 0, so a query of them reads 0, not nothing."""
        for namespace, service in services:
            self.pending.labels(namespace, service)
            self.requests.labels(namespace, service)


def engine_command(pod: Any, port: int, time_scale: float, python: str) -> list[str] | None:
    """Return the local command line for ``pod``'s engine container, or ``None`` if it is not the
    mock engine (a real vLLM image cannot run here).

    The pod's own command and args are kept; ``--host``/``--port`` are pointed at 127.0.0.1:``port``,
    ``--cold-start-seconds`` is 0 (KWOK already delayed readiness) and ``--time-scale`` is set.
    """
    for container in pod.spec.containers:
        argv = list(container.command or []) + list(container.args or [])
        if len(argv) >= 2 and Path(argv[0]).name == "llmscale" and argv[1] == "engine":
            rest = _drop_flags(argv[2:], {"--host", "--port", "--cold-start-seconds", "--time-scale"})
            return [
                python, "-m", "llmscale.cli", "engine", *rest,
                "--host", "127.0.0.1", "--port", str(port),
                "--cold-start-seconds", "0", "--time-scale", str(time_scale),
            ]
    return None


def vllm_command(pod: Any, port: int, found: realvllm.VllmInstall) -> tuple[list[str], dict[str, str]] | None:
    """Return the local command line and environment of ``pod``'s vLLM container, or ``None`` if no
    container runs vLLM's OpenAI server (:mod:`llmscale.localcluster.realvllm`: the operator's own
    command with the tiny local model, 127.0.0.1:``port`` and the CPU settings)."""
    for container in pod.spec.containers:
        argv = list(container.command or []) + list(container.args or [])
        if realvllm.is_vllm_command(argv):
            env = {e.name: e.value for e in container.env or [] if e.value is not None}
            return realvllm.local_command(argv, port, found), {**os.environ, **env, **realvllm.CPU_ENV}
    return None


def runs_vllm(pod: Any) -> bool:
    """Whether one of ``pod``'s containers runs vLLM's OpenAI server."""
    return any(realvllm.is_vllm_command(list(c.command or []) + list(c.args or [])) for c in pod.spec.containers)


def _runs_engine(argv: list[str]) -> bool:
    """Whether a container's command line is an engine this runner runs (mock or real vLLM)."""
    return (len(argv) >= 2 and Path(argv[0]).name == "llmscale" and argv[1] == "engine") or realvllm.is_vllm_command(argv)


def prestop_command(pod: Any, address: str, python: str) -> list[str] | None:
    """Return the local command line of the engine container's preStop ``exec`` hook, or ``None``.

    The hook runs in the pod's network namespace, where the engine listens on its container port;
    here the engine listens on ``address`` (``127.0.0.1:PORT``), so every ``127.0.0.1:<container
    port>`` and ``localhost:<container port>`` in the command is pointed at it, and ``python3`` is
    this interpreter (the hook of llmscale's pod template is a ``python3 -c`` program).
    """
    for container in pod.spec.containers:
        argv = list(container.command or []) + list(container.args or [])
        if not _runs_engine(argv):
            continue
        hook = container.lifecycle.pre_stop if container.lifecycle is not None else None
        command = list(hook._exec.command or []) if hook is not None and hook._exec is not None else []
        if not command:
            return None
        ports = [p.container_port for p in container.ports or []]
        local = []
        for arg in command:
            for port in ports:
                arg = arg.replace(f"127.0.0.1:{port}", address).replace(f"localhost:{port}", address)
            local.append(arg)
        if Path(local[0]).name in ("python", "python3"):
            local[0] = python
        return local
    return None


def _drop_flags(argv: list[str], flags: set[str]) -> list[str]:
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
            continue
        name = arg.split("=", 1)[0]
        if name in flags:
            skip = "=" not in arg
            continue
        out.append(arg)
    return out


def _start_time(pid: int) -> str:
    """Start time of ``pid`` in clock ticks since boot (field 22 of /proc/PID/stat), or ``?``."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return "?"


async def _answers(address: str, session: aiohttp.ClientSession) -> bool:
    """Whether the engine at ``address`` answers ``GET /health`` with 200."""
    try:
        async with session.get(f"http://{address}/health", timeout=aiohttp.ClientTimeout(total=1)) as r:
            return r.status == 200
    except (TimeoutError, aiohttp.ClientError):
        return False


def is_running(pod: Any) -> bool:
    """Whether the pod's phase is Running and it is not being deleted."""
    return pod.metadata.deletion_timestamp is None and pod.status is not None and pod.status.phase == "Running"


def is_ready(pod: Any) -> bool:
    """Whether the pod's Ready condition is True and it is not being deleted."""
    if pod.metadata.deletion_timestamp is not None:
        return False
    for cond in (pod.status.conditions or []) if pod.status else []:
        if cond.type == "Ready":
            return bool(cond.status == "True")
    return False


@dataclass
class Engine:
    """One running engine process of one pod."""

    namespace: str
    pod: str
    uid: str
    labels: dict[str, str]
    port: int
    process: asyncio.subprocess.Process
    log_path: Path
    grace_s: float
    prestop: list[str] | None = None
    outstanding: int = 0
    listening: bool = False
    stopping_since: float | None = None
    pod_terminating: bool = False
    terminator: asyncio.Task[None] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"


@dataclass
class PodRunner:
    """Reconciles local engine processes with the cluster's Ready pods; routes Service traffic."""

    core: client.CoreV1Api
    state_dir: Path
    time_scale: float
    poll_s: float = 0.5
    hold_s: float = HOLD_S
    engines: dict[str, Engine] = field(default_factory=dict)  # by pod uid
    services: dict[tuple[str, str], dict[str, str]] = field(default_factory=dict)
    metrics: RouterMetrics = field(default_factory=RouterMetrics)
    jobs: BatchClients | None = None  # the batch Job pods' clients (None: not run)
    unrunnable: set[str] = field(default_factory=set)  # uids of vLLM pods without an install (warned)

    async def run(self) -> None:
        """Poll pods and Services forever, starting and stopping engines."""
        (self.state_dir / "engines").mkdir(parents=True, exist_ok=True)
        while True:
            try:
                await self.sync_once()
            except Exception:
                log.exception("Pod sync failed; retrying")
            await asyncio.sleep(self.poll_s)

    async def sync_once(self) -> None:
        # Every pod and Service, not only llmscale's: a workload scaled through spec.scaleTargetRef
        # carries none of llmscale's labels. engine_command() picks the mock engines out.
        pods = (await asyncio.to_thread(self.core.list_pod_for_all_namespaces)).items
        svcs = (await asyncio.to_thread(self.core.list_service_for_all_namespaces)).items
        self.services = {
            (str(s.metadata.namespace), str(s.metadata.name)): dict(s.spec.selector or {})
            for s in svcs if s.metadata is not None and s.spec is not None
        }
        self.metrics.know(list(self.services))
        seen: set[str] = set()
        for pod in pods:
            if pod.metadata is None or pod.metadata.uid is None:
                continue
            uid = pod.metadata.uid
            seen.add(uid)
            ready = is_ready(pod)
            engine = self.engines.get(uid)
            # A mock engine starts at Ready (KWOK has waited out the cold start; it answers in a
            # second). Real vLLM starts when the pod runs, as a kubelet starts the container: its
            # ~40 s start-up is then the pod's cold start, hidden behind KWOK's (the scenarios set
            # coldStartSeconds to cover it).
            if engine is None and (ready or (is_running(pod) and runs_vllm(pod))):
                await self.start(pod)
            elif engine is not None and pod.metadata.deletion_timestamp is not None:
                engine.pod_terminating = True
                self.stop(engine, reason="Pod is terminating")
        for uid, engine in list(self.engines.items()):
            if uid not in seen:
                self.stop(engine, reason="Pod is gone")
            await self.reap(uid, engine)
        # An engine takes a second or more to import and bind; route to it only once it answers
        # (as a Service routes only to endpoints whose readiness probe passed).
        waiting = [e for e in self.engines.values() if not e.listening and e.stopping_since is None]
        if waiting:
            async with aiohttp.ClientSession() as session:
                for engine in waiting:
                    if await _answers(engine.address, session):
                        engine.listening = True
                        log.info("Engine of pod %s/%s answered on %s", engine.namespace, engine.pod,
                                 engine.address)
        if self.jobs is not None:
            await self.jobs.sync_once()

    async def start(self, pod: Any) -> None:
        port = free_port()
        name, ns = pod.metadata.name, pod.metadata.namespace
        argv = engine_command(pod, port, self.time_scale, sys.executable)
        env: dict[str, str] | None = None
        if argv is None and runs_vllm(pod):
            found = realvllm.find()
            if found is None:
                if pod.metadata.uid not in self.unrunnable:
                    self.unrunnable.add(pod.metadata.uid)
                    log.warning("Not running vLLM for pod %s/%s: real vLLM is not installed (run %s)",
                                ns, name, realvllm.BUILD_SH)
                return
            argv, env = vllm_command(pod, port, found) or (None, None)
        if argv is None:
            return
        log_path = self.state_dir / "engines" / f"{ns}_{name}.log"
        logf = log_path.open("ab")
        # A real engine below the control plane's priority: on a cluster it computes on its GPU, not on
        # the CPUs the API server, Prometheus and the operator share; here it would starve them.
        nice = (lambda: os.nice(REAL_ENGINE_NICENESS)) if env is not None else None
        proc = await asyncio.create_subprocess_exec(*argv, stdout=logf, stderr=asyncio.subprocess.STDOUT, env=env,
                                                    preexec_fn=nice)
        logf.close()
        grace = float(pod.spec.termination_grace_period_seconds or 30)
        engine = Engine(ns, name, pod.metadata.uid, dict(pod.metadata.labels or {}), port, proc, log_path, grace,
                        prestop=prestop_command(pod, f"127.0.0.1:{port}", sys.executable))
        self.engines[pod.metadata.uid] = engine
        # "<pid> <start time> <argv0>", the format of llmscale.localcluster.cluster: a sweep after a crash
        # of this runner (addons.sweep_engines) never signals a PID the kernel has reused.
        (self.state_dir / "engines" / f"{ns}_{name}.pid").write_text(
            f"{proc.pid} {_start_time(proc.pid)} {argv[0]}\n")
        log.info("Started engine for pod %s/%s on %s (pid %d): %s", ns, name, engine.address, proc.pid,
                 shlex.join(argv[1:]))
        patch = {"metadata": {"annotations": {ADDRESS_ANNOTATION: engine.address}}}
        with contextlib.suppress(client.ApiException):
            await asyncio.to_thread(self.core.patch_namespaced_pod, name, ns, patch)

    def stop(self, engine: Engine, reason: str) -> None:
        """Start the pod's termination (module docstring): no more routing, preStop, SIGTERM."""
        if engine.stopping_since is not None or engine.process.returncode is not None:
            return
        engine.stopping_since = time.monotonic()
        log.info("Stopping engine of pod %s/%s (pid %d): %s", engine.namespace, engine.pod,
                 engine.process.pid, reason)
        engine.terminator = asyncio.create_task(self._terminate(engine))

    async def _terminate(self, engine: Engine) -> None:
        """Run the preStop hook (within the grace period), then send SIGTERM."""
        if engine.prestop:
            started = time.monotonic()
            with engine.log_path.open("ab") as out:
                hook = await asyncio.create_subprocess_exec(*engine.prestop, stdout=out, stderr=asyncio.subprocess.STDOUT)
            try:
                await asyncio.wait_for(hook.wait(), timeout=engine.grace_s)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    hook.kill()
                await hook.wait()
            log.info("PreStop hook of pod %s/%s exited with %s after %.1f s", engine.namespace, engine.pod,
                     hook.returncode, time.monotonic() - started)
        with contextlib.suppress(ProcessLookupError):
            engine.process.send_signal(signal.SIGTERM)

    async def reap(self, uid: str, engine: Engine) -> None:
        if engine.process.returncode is not None:
            self.engines.pop(uid, None)
            with contextlib.suppress(FileNotFoundError):
                (self.state_dir / "engines" / f"{engine.namespace}_{engine.pod}.pid").unlink()
            log.info("Engine of pod %s/%s exited with %s", engine.namespace, engine.pod, engine.process.returncode)
            if engine.terminator is not None:
                engine.terminator.cancel()
            if engine.pod_terminating:
                # The kubelet's last word: the containers are gone, so the pod object goes too.
                with contextlib.suppress(client.ApiException):
                    await asyncio.to_thread(self.core.delete_namespaced_pod, engine.pod, engine.namespace,
                                            grace_period_seconds=0)
            return
        if engine.stopping_since is not None and time.monotonic() - engine.stopping_since > engine.grace_s:
            with contextlib.suppress(ProcessLookupError):
                engine.process.kill()

    async def shutdown(self, grace_s: float = 5.0) -> None:
        """SIGTERM every engine, SIGKILL what is left after ``grace_s``, remove their pid files."""
        for engine in self.engines.values():
            with contextlib.suppress(ProcessLookupError):
                engine.process.send_signal(signal.SIGTERM)
        procs = [e.process.wait() for e in self.engines.values()]
        if procs:
            _, pending = await asyncio.wait([asyncio.ensure_future(p) for p in procs], timeout=grace_s)
            if pending:
                for engine in self.engines.values():
                    with contextlib.suppress(ProcessLookupError):
                        engine.process.kill()
                await asyncio.wait(pending, timeout=grace_s)
        for engine in self.engines.values():
            with contextlib.suppress(FileNotFoundError):
                (self.state_dir / "engines" / f"{engine.namespace}_{engine.pod}.pid").unlink()
        self.engines.clear()
        if self.jobs is not None:
            await self.jobs.shutdown(grace_s)

    # ---------------------------------------------------------------------------------- routing

    def backends(self, namespace: str, selector: dict[str, str]) -> list[Engine]:
        return [
            e for e in self.engines.values()
            if e.namespace == namespace and e.stopping_since is None and e.listening
            and all(e.labels.get(k) == v for k, v in selector.items())
        ]

    def status(self) -> dict[str, Any]:
        return {
            "engines": [
                {"namespace": e.namespace, "pod": e.pod, "address": e.address, "outstanding": e.outstanding,
                 "labels": e.labels, "listening": e.listening, "stopping": e.stopping_since is not None}
                for e in self.engines.values()
            ],
            "services": [f"{ns}/{name}" for ns, name in self.services],
            "batch_clients": self.jobs.status() if self.jobs is not None else [],
        }


async def proxy(request: web.Request) -> web.StreamResponse:
    runner: PodRunner = request.app["runner"]
    session: aiohttp.ClientSession = request.app["session"]
    ns = request.match_info["ns"]
    kind = request.match_info["kind"]
    target = request.match_info["target"]
    path = request.match_info["path"]
    if kind == "svc":
        selector = runner.services.get((ns, target))
        if selector is None:
            return web.json_response({"error": f"no Service {ns}/{target}"}, status=404)
        runner.metrics.requests.labels(ns, target).inc()
    else:  # pool/<deployment>/<pool>/...
        deployment, _, rest = target.partition(":")
        selector = {"llmscale.dev/deployment": deployment, "llmscale.dev/pool": rest or "interactive"}
    backends = [e for e in runner.backends(ns, selector)]
    if not backends and kind == "svc" and runner.hold_s > 0:
        # Hold it, counted as pending, until an engine answers (a scale from zero) or time is up.
        pending = runner.metrics.pending.labels(ns, target)
        pending.inc()
        try:
            deadline = time.monotonic() + runner.hold_s
            while not backends and time.monotonic() < deadline:
                await asyncio.sleep(_HOLD_POLL_S)
                backends = runner.backends(ns, selector)
        finally:
            pending.dec()
    if not backends:
        return web.json_response({"error": f"no ready endpoints for {kind} {ns}/{target}"}, status=503)
    engine = min(backends, key=lambda e: e.outstanding)
    engine.outstanding += 1
    try:
        body = await request.read()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in {"host", "content-length"}}
        async with session.request(request.method, f"http://{engine.address}/{path}",
                                   params=request.query, data=body, headers=headers) as upstream:
            response = web.StreamResponse(status=upstream.status, headers={
                k: v for k, v in upstream.headers.items()
                if k.lower() not in {"content-length", "transfer-encoding", "connection"}
            })
            await response.prepare(request)
            async for chunk in upstream.content.iter_any():
                await response.write(chunk)
            await response.write_eof()
            return response
    except aiohttp.ClientError as exc:
        return web.json_response({"error": f"upstream {engine.address}: {exc}"}, status=502)
    finally:
        engine.outstanding -= 1


def sanitize_label_name(name: str) -> str:
    """Prometheus' label-name sanitising (``strutil.SanitizeLabelName``): every character outside
    ``[a-zA-Z0-9_]`` becomes ``_`` (``llmscale.dev/pool`` -> ``llmscale_dev_pool``)."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


def sd_target_groups(engines: list[Engine]) -> list[dict[str, Any]]:
    """Return Prometheus HTTP service-discovery target groups, one per serving engine.

    Each group carries the ``__meta_kubernetes_pod_*`` labels that Prometheus' Kubernetes service
    discovery (role ``pod``) would attach to the pod (Prometheus source
    ``discovery/kubernetes/pod.go``): namespace, name, uid, ready, and every pod label and
    annotation, sanitised. The relabelling of :mod:`prometheus_config` is therefore the one a
    cluster's Prometheus uses; only the source of the meta labels differs. Debian's ``prometheus``
    package is built without Kubernetes service discovery, hence this stand-in.
    """
    groups = []
    for e in engines:
        if e.stopping_since is not None:
            continue
        labels = {
            "__meta_kubernetes_namespace": e.namespace,
            "__meta_kubernetes_pod_name": e.pod,
            "__meta_kubernetes_pod_uid": e.uid,
            "__meta_kubernetes_pod_ready": "true",
            f"__meta_kubernetes_pod_annotation_{sanitize_label_name(ADDRESS_ANNOTATION)}": e.address,
            f"__meta_kubernetes_pod_annotationpresent_{sanitize_label_name(ADDRESS_ANNOTATION)}": "true",
        }
        for key, value in e.labels.items():
            labels[f"__meta_kubernetes_pod_label_{sanitize_label_name(key)}"] = value
            labels[f"__meta_kubernetes_pod_labelpresent_{sanitize_label_name(key)}"] = "true"
        groups.append({"targets": [e.address], "labels": labels})
    return groups


async def sd_handler(request: web.Request) -> web.Response:
    runner: PodRunner = request.app["runner"]
    return web.json_response(sd_target_groups(list(runner.engines.values())))


async def status_handler(request: web.Request) -> web.Response:
    return web.json_response(request.app["runner"].status())


async def metrics_handler(request: web.Request) -> web.Response:
    body = generate_latest(request.app["runner"].metrics.registry)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


async def amain(args: argparse.Namespace) -> None:
    config.load_kube_config(config_file=args.kubeconfig)  # type: ignore[no-untyped-call]
    core = client.CoreV1Api()
    runner = PodRunner(core, Path(args.state_dir), args.time_scale, hold_s=args.hold_seconds)
    runner.jobs = BatchClients(core, Path(args.state_dir), f"http://127.0.0.1:{args.router_port}", sys.executable)
    app = web.Application()
    app["runner"] = runner
    # A fresh upstream connection per request, as kube-proxy forwards each connection on its own: a
    # pooled keep-alive connection that the engine's server has just closed (uvicorn closes an idle
    # one after 5 s) would turn a request into a 502.
    app["session"] = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(force_close=True), timeout=aiohttp.ClientTimeout(total=None, sock_connect=5)
    )
    app.router.add_get("/status", status_handler)
    app.router.add_get("/sd", sd_handler)
    app.router.add_get("/metrics", metrics_handler)
    app.router.add_route("*", "/ns/{ns}/{kind:svc|pool}/{target}/{path:.*}", proxy)
    site_runner = web.AppRunner(app)
    await site_runner.setup()
    await web.TCPSite(site_runner, "127.0.0.1", args.router_port).start()
    log.info("Routing on http://127.0.0.1:%d (time scale %.1f)", args.router_port, args.time_scale)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    task = asyncio.create_task(runner.run())
    await stop.wait()
    task.cancel()
    await runner.shutdown()
    await app["session"].close()
    await site_runner.cleanup()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--state-dir", required=True)
    parser.add_argument("--router-port", type=int, default=int(os.environ.get("LLMSCALE_ROUTER_PORT", "18000")))
    parser.add_argument("--time-scale", type=float, default=float(os.environ.get("LLMSCALE_TIME_SCALE", "1")))
    parser.add_argument("--hold-seconds", type=float, default=HOLD_S,
                        help="seconds a Service request waits for a ready engine before a 503 (0: none)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    asyncio.run(amain(args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


__all__ = [
    "ADDRESS_ANNOTATION", "HOLD_S", "PodRunner", "RouterMetrics", "engine_command", "is_ready", "is_running", "main", "prestop_command",
    "runs_vllm", "sanitize_label_name", "sd_target_groups", "vllm_command",
]
