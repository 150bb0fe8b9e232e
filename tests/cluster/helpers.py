"""Helpers of the cluster tests: a handle on the running cluster, the chart, operator processes.

The fixtures that start the cluster (and what it is) are in conftest.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import kubernetes.client
import kubernetes.config
import pytest
import yaml
from tests.waiting import wait_for

from llmscale.localcluster.cluster import nodes_manifest
from llmscale.localcluster.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
CLUSTER_PY = ROOT / "e2e" / "cluster" / "cluster.py"
CRDS = [ROOT / "crds" / "llmdeployments.llmscale.dev.yaml", *sorted((ROOT / "charts" / "llmscale" / "crds").glob("*kopf*")),
        ROOT / "tests" / "cluster" / "keda-scaledobjects-crd.yaml", ROOT / "tests" / "cluster" / "gie-inferencepools-crd.yaml"]
AUDITED_NAMESPACES = ("llmscale-system", "llmscale-ns", "llmscale-modes")

T = TypeVar("T")

AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [
        {"level": "Metadata", "userGroups": [f"system:serviceaccounts:{ns}" for ns in AUDITED_NAMESPACES]},
        {"level": "None"},
    ],
}


def bin_dir(script: str) -> Path | None:
    proc = subprocess.run(["bash", str(ROOT / script), "--print-bin-dir"], capture_output=True, text=True, check=False)
    path = Path(proc.stdout.strip())
    return path if proc.returncode == 0 and path.is_dir() else None


@dataclass
class LocalCluster:
    """The running cluster: admin credentials, the kubectl binary and the audit log."""

    state_dir: Path
    kubeconfig: Path
    kubectl_bin: Path
    audit_log: Path
    server: str
    ca_file: str
    api: kubernetes.client.ApiClient

    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run the pinned kubectl as the cluster admin."""
        proc = subprocess.run([str(self.kubectl_bin), "--kubeconfig", str(self.kubeconfig), *args],
                              input=input, capture_output=True, text=True, timeout=60, check=False)
        if check and proc.returncode != 0:
            pytest.fail(f"kubectl {' '.join(args)} exited {proc.returncode}: {proc.stderr}", pytrace=False)
        return proc

    def apply(self, objects: list[dict[str, Any]], field_manager: str, *, force: bool = False) -> None:
        """Server-side apply ``objects`` as the admin under ``field_manager`` (what GitOps tools do)."""
        args = ["apply", "--server-side", f"--field-manager={field_manager}", "-f", "-"]
        if force:
            args.append("--force-conflicts")
        self.kubectl(*args, input=yaml.safe_dump_all(objects))

    def add_gpu_node(self, name: str, gpus: int, labels: dict[str, str], taints: list[dict[str, str]]) -> None:
        """Add a KWOK node with ``gpus`` nvidia.com/gpu, ``labels`` and ``taints`` (a node of its
        own for a test that counts GPUs: other tests' pods do not land on a tainted node) and wait
        until it is Ready."""
        (node,) = json.loads(nodes_manifest(1, gpus, "NVIDIA-H100-80GB-HBM3", name))["items"]
        node["metadata"]["name"] = name
        node["metadata"]["labels"].update({"kubernetes.io/hostname": name, **labels})
        node["spec"] = {"taints": taints}
        core = kubernetes.client.CoreV1Api(self.api)
        core.create_node(node)

        def ready() -> bool:
            got = core.read_node(name)
            return any(c.type == "Ready" and c.status == "True" for c in got.status.conditions or ())

        wait_for(f"node {name} Ready", ready, 60)

    @contextlib.contextmanager
    def gpu_nodes(self, namespace: str, names: tuple[str, ...], gpus: int, label: str,
                  taint: dict[str, str]) -> Iterator[None]:
        """Add the tainted KWOK GPU nodes ``names`` (each ``gpus`` GPUs, labelled
        ``llmscale.dev/test-node: <label>``) and the namespace ``namespace`` for one test; delete
        them afterwards (the namespace first, so that nothing is left on the nodes)."""
        for name in names:
            self.add_gpu_node(name, gpus, {"llmscale.dev/test-node": label}, [taint])
        self.create_namespace(namespace)
        try:
            yield
        finally:
            core = kubernetes.client.CoreV1Api(self.api)
            core.delete_namespace(namespace)
            for name in names:
                try:
                    core.delete_node(name)
                except kubernetes.client.exceptions.ApiException as exc:
                    if exc.status != 404:
                        raise

    def create_namespace(self, name: str, labels: dict[str, str] | None = None) -> None:
        core = kubernetes.client.CoreV1Api(self.api)
        core.create_namespace({"metadata": {"name": name, "labels": labels or {}}})
        # Pods are refused until the namespace's default ServiceAccount exists.
        wait_for(f"ServiceAccount {name}/default", lambda: core.read_namespaced_service_account("default", name))

    def service_account_kubeconfig(self, namespace: str, name: str, path: Path) -> Path:
        """Mint a one-hour token for ServiceAccount ``namespace/name`` (TokenRequest API) and
        write a kubeconfig that uses only that token; return its path."""
        core = kubernetes.client.CoreV1Api(self.api)
        request = core.create_namespaced_service_account_token(
            name, namespace, {"spec": {"expirationSeconds": 3600}}
        )
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "local", "cluster": {"server": self.server, "certificate-authority": self.ca_file}}],
            "users": [{"name": name, "user": {"token": request.status.token}}],
            "contexts": [{"name": name, "context": {"cluster": "local", "user": name}}],
            "current-context": name,
        }
        path.write_text(yaml.safe_dump(config))
        path.chmod(0o600)
        return path

    def audit_offset(self) -> int:
        """The audit log's size now: pass it to :meth:`audit_events` as ``since`` to read only the
        requests made after this moment."""
        return self.audit_log.stat().st_size if self.audit_log.exists() else 0

    def audit_events(self, username: str, since: int = 0) -> list[dict[str, Any]]:
        """Requests of ``username`` from the API server's audit log (JSON lines), one event each:
        the ``ResponseComplete`` stage, or ``ResponseStarted`` for a watch still open. ``since``: a
        byte offset of the log (:meth:`audit_offset`); only the requests logged after it."""
        by_id: dict[str, dict[str, Any]] = {}
        with self.audit_log.open("rb") as f:
            f.seek(since)
            text = f.read().decode()
        for line in text.splitlines():
            event = json.loads(line)
            if event.get("user", {}).get("username") != username:
                continue
            if event.get("stage") == "ResponseComplete" or event["auditID"] not in by_id:
                by_id[event["auditID"]] = event
        return list(by_id.values())


def render_chart(helm: Path, release_namespace: str, *sets: str, release: str = "llmscale") -> list[dict[str, Any]]:
    """``helm template`` of charts/llmscale (release ``release``) with ``--set`` pairs; the rendered objects."""
    args = [str(helm), "template", release, str(ROOT / "charts" / "llmscale"), "--namespace", release_namespace]
    for s in sets:
        args += ["--set", s]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)
    if proc.returncode != 0:
        pytest.fail(f"helm template failed: {proc.stderr}", pytrace=False)
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


@dataclass
class OperatorProcess:
    """One ``llmscale run`` process started by a test."""

    proc: subprocess.Popen[bytes]
    log: Path
    port: int

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self, grace_s: float = 10.0) -> None:
        """SIGTERM this process (Kopf stops gracefully and leaves the peering), SIGKILL after ``grace_s``."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)


def start_operator(chart_env: dict[str, str], kubeconfig: Path, log: Path) -> OperatorProcess:
    """Start ``llmscale run`` with the environment the chart gives the operator container, adapted to
    a workstation: Prometheus at a port nobody listens on (every signal is unknown, so the policy
    holds; only spec.replicas bounds and trough windows move replicas), endpoints on 127.0.0.1, a
    1 s base tick and status written every second. Credentials: ``kubeconfig`` only."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLMSCALE_") and k != "KUBECONFIG"}
    env.update(chart_env)
    env.update({
        "LLMSCALE_PROMETHEUS_URL": f"http://127.0.0.1:{free_port()}",
        "LLMSCALE_METRICS_HOST": "127.0.0.1",
        "LLMSCALE_METRICS_PORT": str(port),
        "LLMSCALE_TICK_BASE_SECONDS": "1",
        "LLMSCALE_STATUS_REFRESH_SECONDS": "1",
        "LLMSCALE_SIGNAL_TIMEOUT_SECONDS": "2",
    })
    argv = [str(Path(sys.executable).with_name("llmscale")), "run", "--kubeconfig", str(kubeconfig)]
    with log.open("ab") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    op = OperatorProcess(proc, log, port)

    def ready() -> bool:
        if proc.poll() is not None:
            pytest.fail(f"llmscale run exited with {proc.returncode}:\n{op.text()[-3000:]}", pytrace=False)
        with contextlib.closing(urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2)) as r:
            return bool(r.status == 200)

    try:
        wait_for(f"the operator's /readyz ({log})", ready, 60)
    except BaseException:
        op.stop()
        raise
    return op


def container_env(docs: list[dict[str, Any]]) -> dict[str, str]:
    """The LLMSCALE_* environment of the chart's operator container."""
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e["value"] for e in container["env"]}
