"""The pod runner's batch Job pods: the local cluster runs ``llmscale batch run`` for real.

KWOK makes a Job's pod Running and Ready, but nothing runs in it. For every Ready pod of a Job
(label ``batch.kubernetes.io/job-name``) whose container runs ``llmscale batch run``, this starts
that command as a local process, as a node would run the container:

* ``--url http://<service>[.<namespace>[.svc…]]:<port>`` is pointed at the router's
  ``/ns/<namespace>/svc/<service>`` (what the Service's cluster DNS name reaches on a cluster);
* paths under a ``hostPath`` volume's ``mountPath`` are pointed at the ``hostPath`` itself (the
  fake nodes are this machine, so a hostPath *is* a local folder): the input and the results file —
  the client's checkpoint — live on storage that outlives the pod, as on a node;
* the container's literal ``env`` values and ``JOB_COMPLETION_INDEX`` (an Indexed Job's pod
  annotation ``batch.kubernetes.io/job-completion-index``) are set.

The pod is annotated ``llmscale.dev/local-address`` before the process starts, so that KWOK keeps
a deleted pod ``Terminating`` while its client drains (kwok-stages.yaml). When the pod is deleted —
the Job was suspended, so the Job controller deleted its pods — the client gets SIGTERM (it stops
sending, lets its requests in flight finish, writes their results and exits 75) and SIGKILL after
the pod's ``terminationGracePeriodSeconds``; once it has exited the pod is deleted with a grace
period of 0, as a kubelet does. When the client exits on its own, the pod's status becomes
``Succeeded`` (exit 0) or ``Failed`` with the container's ``terminated.exitCode``, which the Job
controller counts (and a ``podFailurePolicy`` reads).

Test infrastructure, not product code (see :mod:`llmscale.localcluster.podrunner`).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import os
import shlex
import signal
import time
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client

__all__ = ["JOB_SELECTOR", "BatchClients", "client_command", "host_paths", "service_url"]

log = logging.getLogger("podrunner.jobs")

#: Label the Job controller puts on every pod of a Job (Kubernetes ≥ 1.27).
JOB_SELECTOR = "batch.kubernetes.io/job-name"
_ADDRESS_ANNOTATION = "llmscale.dev/local-address"
_INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"


def service_url(url: str, namespace: str, router_url: str) -> str:
    """Return the router's base URL for a Service URL seen from a pod in ``namespace``:
    ``http://chat-batch:8000`` -> ``<router>/ns/<namespace>/svc/chat-batch``; the host's second
    label, when there is one, is the Service's namespace (``chat-batch.serving.svc.cluster.local``).
    A trailing path (``/v1``) is kept."""
    parts = urllib.parse.urlsplit(url)
    labels = (parts.hostname or "").split(".")
    service = labels[0]
    ns = labels[1] if len(labels) > 1 and labels[1] else namespace
    return f"{router_url.rstrip('/')}/ns/{ns}/svc/{service}{parts.path.rstrip('/')}"


def host_paths(pod: Any, container: Any) -> list[tuple[str, str]]:
    """Return ``(mountPath, hostPath)`` of each ``hostPath`` volume the container mounts, longest
    mount path first (so a nested mount wins)."""
    volumes = {v.name: v.host_path.path for v in pod.spec.volumes or [] if v.host_path is not None}
    mounts = [(m.mount_path.rstrip("/") or "/", volumes[m.name]) for m in container.volume_mounts or []
              if m.name in volumes]
    return sorted(mounts, key=lambda m: len(m[0]), reverse=True)


def _local_path(value: str, mounts: list[tuple[str, str]]) -> str:
    for mount, host in mounts:
        if value == mount or value.startswith(mount + "/"):
            return host.rstrip("/") + value[len(mount):]
    return value


def client_command(pod: Any, python: str, router_url: str) -> tuple[list[str], dict[str, str]] | None:
    """Return the local command line and extra environment of the pod's ``llmscale batch run``
    container, or ``None`` when no container runs it (module docstring: what is rewritten)."""
    for container in pod.spec.containers:
        argv = list(container.command or []) + list(container.args or [])
        if not (len(argv) >= 3 and Path(argv[0]).name == "llmscale" and argv[1:3] == ["batch", "run"]):
            continue
        mounts = host_paths(pod, container)
        out: list[str] = []
        url_next = False
        for arg in argv[3:]:
            if url_next:
                out.append(service_url(arg, pod.metadata.namespace, router_url))
                url_next = False
            elif arg == "--url":
                out.append(arg)
                url_next = True
            elif arg.startswith("--url="):
                out.append("--url=" + service_url(arg[len("--url="):], pod.metadata.namespace, router_url))
            elif arg.startswith("--") and "=" in arg:
                flag, value = arg.split("=", 1)
                out.append(f"{flag}={_local_path(value, mounts)}")
            else:
                out.append(_local_path(arg, mounts))
        env = {e.name: e.value for e in container.env or [] if e.value is not None}
        index = (pod.metadata.annotations or {}).get(_INDEX_ANNOTATION)
        if index is not None:
            env["JOB_COMPLETION_INDEX"] = str(index)
        return [python, "-m", "llmscale.cli", "batch", "run", *out], env
    return None


def _ready(pod: Any) -> bool:
    if pod.metadata.deletion_timestamp is not None or (pod.status and pod.status.phase in ("Succeeded", "Failed")):
        return False
    return any(c.type == "Ready" and c.status == "True" for c in (pod.status.conditions or []) if pod.status)


@dataclass
class _Client:
    namespace: str
    pod: str
    uid: str
    containers: list[tuple[str, str]]  # (name, image)
    process: asyncio.subprocess.Process
    grace_s: float
    started_at: str
    stopping_since: float | None = None
    pod_terminating: bool = False


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class BatchClients:
    """The batch clients of Ready Job pods, reconciled with the pods on every poll."""

    core: client.CoreV1Api
    state_dir: Path
    router_url: str
    python: str
    clients: dict[str, _Client] = field(default_factory=dict)  # by pod uid

    async def sync_once(self) -> None:
        """Start clients for new Ready Job pods, stop those whose pod is deleted, finish the pods of
        those that exited."""
        pods = (await asyncio.to_thread(self.core.list_pod_for_all_namespaces, label_selector=JOB_SELECTOR)).items
        seen: set[str] = set()
        for pod in pods:
            if pod.metadata is None or pod.metadata.uid is None:
                continue
            uid = pod.metadata.uid
            seen.add(uid)
            running = self.clients.get(uid)
            if running is None and _ready(pod):
                await self.start(pod)
            elif running is not None and pod.metadata.deletion_timestamp is not None:
                running.pod_terminating = True
                self.stop(running, "Pod is terminating")
        for uid, running in list(self.clients.items()):
            if uid not in seen:
                self.stop(running, "Pod is gone")
            await self.reap(uid, running)

    def _pid_file(self, namespace: str, pod: str) -> Path:
        # In engines/: addons.sweep_engines kills what a dead pod runner left behind.
        return self.state_dir / "engines" / f"job_{namespace}_{pod}.pid"

    async def start(self, pod: Any) -> None:
        command = client_command(pod, self.python, self.router_url)
        if command is None:
            return
        argv, env = command
        name, ns = pod.metadata.name, pod.metadata.namespace
        # First the annotation: a pod deleted from now on stays Terminating until the client exits.
        patch = {"metadata": {"annotations": {_ADDRESS_ANNOTATION: "batch-client"}}}
        try:
            await asyncio.to_thread(self.core.patch_namespaced_pod, name, ns, patch)
        except client.ApiException as exc:
            log.info("Skipped Job pod %s/%s: %s", ns, name, exc.reason)
            return
        (self.state_dir / "jobs").mkdir(parents=True, exist_ok=True)
        log_path = self.state_dir / "jobs" / f"{ns}_{name}.log"
        with log_path.open("ab") as logf:
            proc = await asyncio.create_subprocess_exec(*argv, stdout=logf, stderr=asyncio.subprocess.STDOUT,
                                                        env={**os.environ, **env}, cwd=str(self.state_dir))
        grace = float(pod.spec.termination_grace_period_seconds or 30)
        containers = [(c.name, c.image) for c in pod.spec.containers]
        self.clients[pod.metadata.uid] = _Client(ns, name, pod.metadata.uid, containers, proc, grace, _now())
        self._pid_file(ns, name).parent.mkdir(parents=True, exist_ok=True)
        self._pid_file(ns, name).write_text(f"{proc.pid} {_start_time(proc.pid)} {argv[0]}\n")
        log.info("Started batch client for Job pod %s/%s (pid %d): %s", ns, name, proc.pid, shlex.join(argv[1:]))

    def stop(self, running: _Client, reason: str) -> None:
        """SIGTERM the client (once); :meth:`reap` kills it after the grace period."""
        if running.stopping_since is not None or running.process.returncode is not None:
            return
        running.stopping_since = time.monotonic()
        log.info("Stopping batch client of Job pod %s/%s (pid %d): %s", running.namespace, running.pod,
                 running.process.pid, reason)
        with contextlib.suppress(ProcessLookupError):
            running.process.send_signal(signal.SIGTERM)

    async def reap(self, uid: str, running: _Client) -> None:
        code = running.process.returncode
        if code is None:
            if running.stopping_since is not None and time.monotonic() - running.stopping_since > running.grace_s:
                with contextlib.suppress(ProcessLookupError):
                    running.process.kill()
            return
        self.clients.pop(uid, None)
        self._pid_file(running.namespace, running.pod).unlink(missing_ok=True)
        exit_code = code if code >= 0 else 128 - code  # killed by a signal: 128 + its number
        log.info("Batch client of Job pod %s/%s exited with %d", running.namespace, running.pod, exit_code)
        if running.pod_terminating or running.stopping_since is not None:
            with contextlib.suppress(client.ApiException):
                await asyncio.to_thread(self.core.delete_namespaced_pod, running.pod, running.namespace,
                                        grace_period_seconds=0)
            return
        # The container ended by itself: the kubelet reports the pod terminal with its exit code.
        finished = _now()
        status = {
            "phase": "Succeeded" if exit_code == 0 else "Failed",
            "conditions": [
                {"type": "Ready", "status": "False", "reason": "PodCompleted" if exit_code == 0 else "PodFailed",
                 "lastTransitionTime": finished},
                {"type": "ContainersReady", "status": "False",
                 "reason": "PodCompleted" if exit_code == 0 else "PodFailed", "lastTransitionTime": finished},
            ],
            "containerStatuses": [
                {"name": name, "image": image, "imageID": "", "ready": False, "restartCount": 0, "started": False,
                 "state": {"terminated": {"exitCode": exit_code, "reason": "Completed" if exit_code == 0 else "Error",
                                          "startedAt": running.started_at, "finishedAt": finished}}}
                for name, image in running.containers
            ],
        }
        try:
            await asyncio.to_thread(self.core.patch_namespaced_pod_status, running.pod, running.namespace,
                                    {"status": status})
        except client.ApiException as exc:
            log.warning("Failed to report Job pod %s/%s finished: %s", running.namespace, running.pod, exc.reason)

    async def shutdown(self, grace_s: float = 5.0) -> None:
        """SIGTERM every client, SIGKILL what is left after ``grace_s``, remove their pid files."""
        for running in self.clients.values():
            with contextlib.suppress(ProcessLookupError):
                running.process.send_signal(signal.SIGTERM)
        waits = [asyncio.ensure_future(r.process.wait()) for r in self.clients.values()]
        if waits:
            _, pending = await asyncio.wait(waits, timeout=grace_s)
            if pending:
                for running in self.clients.values():
                    with contextlib.suppress(ProcessLookupError):
                        running.process.kill()
                await asyncio.wait(pending, timeout=grace_s)
        for running in self.clients.values():
            self._pid_file(running.namespace, running.pod).unlink(missing_ok=True)
        self.clients.clear()

    def status(self) -> list[dict[str, Any]]:
        """The running clients, for the router's ``/status``."""
        return [{"namespace": r.namespace, "pod": r.pod, "pid": r.process.pid, "stopping": r.stopping_since is not None}
                for r in self.clients.values()]


def _start_time(pid: int) -> str:
    """Start time of ``pid`` in clock ticks since boot (field 22 of /proc/PID/stat), or ``?``."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return "?"
