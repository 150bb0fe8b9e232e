"""Session fixtures of the end-to-end suite: a real API server, Prometheus, engines, the operator.

Two ways to get a cluster:

* **Local** (the default, and CI): :mod:`llmscale.localcluster.stack` (``e2e/stack.py``) builds the pinned control plane once (cached
  outside the clone), starts etcd, kube-apiserver, kube-controller-manager, kube-scheduler and KWOK
  with fake GPU nodes, then Prometheus and the pod runner (engines for Ready pods, and the
  router). State in ``$LLMSCALE_CLUSTER_DIR`` (default ``<repo>/.cluster/e2e``). Everything is
  stopped by PID at the end of the session (``LLMSCALE_E2E_KEEP=1`` leaves it running to debug).
* **External**: ``KUBECONFIG`` points at a reachable cluster (kind, for users with Docker). Then
  ``LLMSCALE_E2E_PROMETHEUS_URL`` must say where Prometheus is, and load goes through the
  Services like on any cluster: ``LLMSCALE_E2E_SERVICE_PROXY`` is a ``kubectl proxy`` URL, and
  requests go to the API server's service proxy
  (``<proxy>/api/v1/namespaces/<ns>/services/<svc>:http/proxy/...``; a pool without a Service,
  the batch pool, through the pod proxy of one of its Ready pods). ``LLMSCALE_E2E_ROUTER_URL`` (a
  router with the pod runner's paths, ``/ns/<ns>/svc/<svc>/...``) may replace it. The
  Prometheus-outage scenario needs ``LLMSCALE_E2E_PROMETHEUS_STOP`` / ``..._START`` shell commands.

Either way the CRD is installed with server-side apply and the operator runs as a process
(``llmscale run``, one-second base tick, log in the state dir), stopped by PID. A scenario that needs
the operator configured otherwise (the authenticated-Prometheus one) stops it and starts its own
with :meth:`Cluster.run_operator`, and :meth:`Cluster.restore_operator` puts the session's back.
Each test gets its own namespace. When the cluster cannot be had, the suite FAILS with the reason; it never skips.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import kubernetes
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families
from tests.waiting import wait_for

from llmscale.localcluster import SAMPLE
from llmscale.localcluster import cluster as local_cluster
from llmscale.localcluster import stack as local_stack
from llmscale.localcluster.ports import free_port
from llmscale.localcluster.prometheus_config import write_operator_targets

REPO = Path(__file__).resolve().parents[1]
# The scenarios import this module's helpers as `conftest` (e2e/ is not a package).
sys.path.insert(0, str(REPO / "e2e"))
CRD = REPO / "crds" / "llmdeployments.llmscale.dev.yaml"
GROUP, VERSION, PLURAL = "llmscale.dev", "v1alpha1", "llmdeployments"
T = TypeVar("T")


@dataclass
class Cluster:
    """Everything a scenario needs to drive and observe the cluster."""

    kubeconfig: Path
    kubectl_bin: str
    prometheus_url: str
    router_url: str
    operator_log: Path
    local_state: Path | None = None
    service_proxy: str | None = None
    operator: subprocess.Popen[bytes] | None = None
    #: The running operator's /metrics port (``--metrics-port``).
    operator_port: int | None = None
    #: The file service discovery file through which Prometheus scrapes the operator's /metrics:
    #: the local cluster's, or LLMSCALE_E2E_OPERATOR_TARGETS on an external cluster (docs/e2e.md).
    operator_targets: Path | None = None
    api: kubernetes.client.ApiClient = field(init=False)

    def __post_init__(self) -> None:
        self.api = kubernetes.config.new_client_from_config(config_file=str(self.kubeconfig))
        self.core = kubernetes.client.CoreV1Api(self.api)
        self.apps = kubernetes.client.AppsV1Api(self.api)
        self.policy = kubernetes.client.PolicyV1Api(self.api)
        self.custom = kubernetes.client.CustomObjectsApi(self.api)

    # ------------------------------------------------------------------ kubectl and objects

    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run the cached kubectl against the cluster; raise with its stderr when ``check`` fails."""
        p = subprocess.run([self.kubectl_bin, "--kubeconfig", str(self.kubeconfig), *args],
                           input=input, capture_output=True, text=True, timeout=60)
        if check and p.returncode != 0:
            raise AssertionError(f"kubectl {shlex.join(args)} failed ({p.returncode}): {p.stderr.strip()}")
        return p

    def apply(self, namespace: str, manifest: dict[str, Any]) -> None:
        """``kubectl apply --server-side`` one object into ``namespace``."""
        self.kubectl("apply", "--server-side", "--field-manager=e2e", "-n", namespace, "-f", "-",
                     input=yaml.safe_dump(manifest))

    def llmdep(self, namespace: str, name: str) -> dict[str, Any]:
        """The LLMDeployment as the API server has it."""
        return dict(self.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name))

    def status(self, namespace: str, name: str) -> dict[str, Any]:
        return dict(self.llmdep(namespace, name).get("status") or {})

    def condition(self, namespace: str, name: str, type_: str) -> dict[str, Any] | None:
        for cond in self.status(namespace, name).get("conditions") or []:
            if cond.get("type") == type_:
                return dict(cond)
        return None

    def deployment_replicas(self, namespace: str, name: str) -> int | None:
        try:
            return self.apps.read_namespaced_deployment(name, namespace).spec.replicas
        except kubernetes.client.ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def pods(self, namespace: str, pool: str | None = None) -> list[Any]:
        """Live (not terminating) pods llmscale manages in ``namespace``, optionally of one pool."""
        selector = "app.kubernetes.io/managed-by=llmscale" + (f",llmscale.dev/pool={pool}" if pool else "")
        items = self.core.list_namespaced_pod(namespace, label_selector=selector).items
        return [p for p in items if p.metadata.deletion_timestamp is None]

    def events(self, namespace: str, reason: str | None = None) -> list[Any]:
        items = self.core.list_namespaced_event(namespace).items
        return [e for e in items if reason is None or e.reason == reason]

    # ------------------------------------------------------------------ Prometheus and load

    def prom(self, query: str) -> list[dict[str, Any]]:
        """Instant query; returns ``data.result``. Raises on an HTTP or query error."""
        url = f"{self.prometheus_url}/api/v1/query?{urllib.parse.urlencode({'query': query})}"
        with urllib.request.urlopen(url, timeout=5) as r:
            body = json.loads(r.read())
        assert body["status"] == "success", body
        return list(body["data"]["result"])

    def prom_value(self, query: str) -> float | None:
        """The single value of an aggregated query, ``None`` when it has no series."""
        result = self.prom(query)
        return float(result[0]["value"][1]) if result else None

    def service_url(self, namespace: str, service: str) -> str:
        """The completions URL of a Service: the router's (local cluster), or the API server's
        service proxy (``LLMSCALE_E2E_SERVICE_PROXY``: kind, traffic through the Service)."""
        if self.service_proxy:
            return f"{self.service_proxy}/api/v1/namespaces/{namespace}/services/{service}:http/proxy/v1/completions"
        return f"{self.router_url}/ns/{namespace}/svc/{service}/v1/completions"

    # ------------------------------------------------------------------ the operator process

    def run_operator(self, *args: str, env: dict[str, str] | None = None) -> None:
        """Stop the running operator and start ``llmscale run`` with the session's flags plus
        ``args`` (later flags win) and ``env`` added to its environment; wait for ``/readyz``."""
        self.stop_operator()
        self.operator, port = _start_operator(self.kubeconfig, self.prometheus_url, self.operator_log, args, env)
        self.operator_port = port
        if self.operator_targets is not None:
            write_operator_targets(self.operator_targets, [f"127.0.0.1:{port}"])

    def restore_operator(self) -> None:
        """Put the session's operator back (the one the fixture started)."""
        self.run_operator()

    def stop_operator(self) -> None:
        """Stop the running operator by PID (SIGTERM, SIGKILL after 10 s)."""
        if self.operator is not None:
            _stop(self.operator)
            self.operator = None
            self.operator_port = None

    def _serving_pods(self, namespace: str, deployment: str, pool: str) -> list[Any]:
        return [p for p in self.pods(namespace, pool) if p.metadata.labels.get("llmscale.dev/deployment") == deployment
                and any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])]

    def pool_serving(self, namespace: str, deployment: str, pool: str) -> bool:
        """Whether an engine of the pool answers: one the router routes to (local cluster), or a
        Ready pod (external cluster, where Ready means its probe passed)."""
        if self.service_proxy:
            return bool(self._serving_pods(namespace, deployment, pool))
        with urllib.request.urlopen(f"{self.router_url}/status", timeout=5) as r:
            engines = json.loads(r.read())["engines"]
        return any(e["listening"] and e["namespace"] == namespace and e["labels"].get("llmscale.dev/pool") == pool
                   and e["labels"].get("llmscale.dev/deployment") == deployment for e in engines)

    def pool_url(self, namespace: str, deployment: str, pool: str, port: int = 8000) -> str:
        """The completions URL of a pool without a Service (the batch pool): the router's pool path,
        or the API server's pod proxy to one of its Ready pods."""
        if self.service_proxy:
            pod = self._serving_pods(namespace, deployment, pool)[0].metadata.name
            return f"{self.service_proxy}/api/v1/namespaces/{namespace}/pods/{pod}:{port}/proxy/v1/completions"
        return f"{self.router_url}/ns/{namespace}/pool/{deployment}:{pool}/v1/completions"

    def operator_metric(self, sample_name: str, /, **labels: str) -> float | None:
        """The value of one sample of the running operator's ``/metrics`` (read directly, not
        through Prometheus): the sample ``sample_name`` (e.g. ``llmscale_signal_read_errors_total``)
        whose labels include ``labels``; ``None`` when there is none."""
        assert self.operator_port is not None, "no operator runs"
        with urllib.request.urlopen(f"http://127.0.0.1:{self.operator_port}/metrics", timeout=5) as r:
            text = r.read().decode()
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if s.name == sample_name and all(s.labels.get(k) == v for k, v in labels.items()):
                    return float(s.value)
        return None

    def restart_apiserver(self, down_s: float = 0.0) -> None:
        """Stop the API server by PID and start it again on the same port and etcd (local cluster
        only: :func:`llmscale.localcluster.cluster.restart_apiserver`); return once it is ready."""
        if self.local_state is None:
            pytest.fail("restarting the API server needs the local cluster (an external one has no PID here)")
        local_cluster.restart_apiserver(self.local_state, down_s=down_s)

    def stop_prometheus(self) -> None:
        if self.local_state is not None:
            local_stack.addons.stop_prometheus(self.local_state)
        else:
            _run_env_command("LLMSCALE_E2E_PROMETHEUS_STOP")

    def start_prometheus(self) -> None:
        if self.local_state is not None:
            local_stack.addons.start_prometheus(self.local_state)
        else:
            _run_env_command("LLMSCALE_E2E_PROMETHEUS_START")


def _run_env_command(var: str) -> None:
    command = os.environ.get(var)
    if not command:
        pytest.fail(f"{var} is not set: with an external cluster, the Prometheus-outage scenario needs "
                    "shell commands that stop and start its Prometheus (see docs/e2e.md)")
    subprocess.run(command, shell=True, check=True, timeout=120)


def _reachable(kubeconfig: str) -> bool:
    try:
        api = kubernetes.config.new_client_from_config(config_file=kubeconfig)
        kubernetes.client.VersionApi(api).get_code(_request_timeout=5)
        return True
    except Exception:
        return False


def _start_operator(
    kubeconfig: Path, prometheus_url: str, log_path: Path, extra: tuple[str, ...] = (),
    extra_env: dict[str, str] | None = None,
) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    argv = [
        str(Path(sys.executable).with_name("llmscale")), "run", "--all-namespaces", "--standalone",
        "--prometheus-url", prometheus_url, "--tick-base-seconds", "1",
        "--metrics-host", "127.0.0.1", "--metrics-port", str(port), "--kubeconfig", str(kubeconfig), *extra,
    ]
    # Status writes at most every second (default 60 s), so scenarios see the live signals.
    # The GPUs-free read is off by default (a fixed set of GPU nodes turns it on): the local
    # cluster's KWOK nodes are fixed, and scenario 16b releases a Job onto idle GPUs.
    env = {**os.environ, "LLMSCALE_STATUS_REFRESH_SECONDS": "1", "LLMSCALE_READ_NODES": "true",
           "KUBECONFIG": str(kubeconfig), **(extra_env or {})}
    with log_path.open("ab") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)

    def ready() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"the operator exited with {proc.returncode}:\n{_tail(log_path)}")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as r:
            return bool(r.status == 200)

    wait_for(f"the operator's /readyz on port {port} ({log_path})", ready, 90)
    return proc, port


def _stop(proc: subprocess.Popen[bytes], grace_s: float = 10.0) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


def _tail(path: Path, lines: int = 40) -> str:
    with contextlib.suppress(OSError):
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    return "(no log)"


_OPERATOR_LOG: list[Path] = []


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """The cluster, Prometheus, router and a running operator for the whole session."""
    kubeconfig_env = os.environ.get("KUBECONFIG", "")
    external = bool(kubeconfig_env) and _reachable(kubeconfig_env)
    local_state: Path | None = None
    service_proxy: str | None = None
    if external:
        prom = os.environ.get("LLMSCALE_E2E_PROMETHEUS_URL")
        router = os.environ.get("LLMSCALE_E2E_ROUTER_URL", "")
        service_proxy = None if router else os.environ.get("LLMSCALE_E2E_SERVICE_PROXY")
        if not prom or not (router or service_proxy):
            pytest.fail(f"KUBECONFIG={kubeconfig_env} is reachable, so the suite runs against it; set "
                        "LLMSCALE_E2E_PROMETHEUS_URL and LLMSCALE_E2E_SERVICE_PROXY (a `kubectl proxy` URL) "
                        "or LLMSCALE_E2E_ROUTER_URL too (see docs/e2e.md)")
        kubeconfig, kubectl_bin = Path(kubeconfig_env), "kubectl"
        log_dir = tmp_path_factory.mktemp("operator")
    else:
        local_state = Path(os.environ.get("LLMSCALE_CLUSTER_DIR") or REPO / ".cluster" / "e2e").resolve()
        local_state.mkdir(parents=True, exist_ok=True)
        try:
            s = local_stack.up(local_state)
        except Exception as exc:
            with contextlib.suppress(Exception):
                local_stack.down(local_state)
            pytest.fail(f"the local cluster did not start: {exc}\n(logs in {local_state / 'logs'})")
        kubeconfig, kubectl_bin = s.kubeconfig, str(s.kubectl)
        prom, router = s.prometheus_url, s.router_url
        log_dir = local_state / "logs"
    log_path = log_dir / "operator.log"
    _OPERATOR_LOG[:] = [log_path]
    c: Cluster | None = None
    try:
        targets = os.environ.get("LLMSCALE_E2E_OPERATOR_TARGETS")
        c = Cluster(kubeconfig, kubectl_bin, prom, router, log_path, local_state, service_proxy,
                    operator_targets=Path(targets) if targets else
                    local_stack.addons.operator_targets_path(local_state) if local_state else None)
        c.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD))
        # `kubectl wait` fails outright (not waits) while the new CRD has no status yet: retry it.
        kubectl = c.kubectl
        wait_for("the CRD Established", lambda: kubectl(
            "wait", "--for=condition=Established", "--timeout=30s", "crd/llmdeployments.llmscale.dev",
            check=False).returncode == 0, 60)
        c.run_operator()
        yield c
    finally:
        if c is not None:
            c.stop_operator()
        if local_state is not None and os.environ.get("LLMSCALE_E2E_KEEP") != "1":
            local_stack.down(local_state)


@pytest.fixture
def namespace(cluster: Cluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace for one test, deleted (without waiting) afterwards."""
    yield from _namespace(cluster, request.node.name)


@pytest.fixture(scope="class")
def class_namespace(cluster: Cluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace shared by the ordered tests of one class."""
    yield from _namespace(cluster, request.node.name)


def _namespace(cluster: Cluster, test_name: str) -> Iterator[str]:
    stem = "".join(ch if ch.isalnum() else "-" for ch in test_name.lower().removeprefix("test_"))[:40].strip("-")
    name = f"e2e-{stem}-{uuid.uuid4().hex[:5]}"
    cluster.core.create_namespace({"metadata": {"name": name, "labels": {"llmscale.dev/e2e": "true"}}})
    # Pods are refused until the namespace's default ServiceAccount exists.
    wait_for(f"ServiceAccount {name}/default", lambda: cluster.core.read_namespaced_service_account("default", name), 30)
    try:
        yield name
    finally:
        with contextlib.suppress(kubernetes.client.ApiException):
            cluster.core.delete_namespace(name, propagation_policy="Background")


def sample(name: str = "chat", **overrides: Any) -> dict[str, Any]:
    """The sample LLMDeployment (``llmscale/localcluster/chat-mock.yaml``) named ``name``, with ``overrides``
    deep-merged into its spec (``sample(replicas={"min": 3})``)."""
    manifest = yaml.safe_load(SAMPLE.read_text())
    manifest["metadata"]["name"] = name
    _merge(manifest["spec"], overrides)
    return dict(manifest)


def _merge(into: dict[str, Any], patch: dict[str, Any]) -> None:
    for key, value in patch.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = value


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Attach the tail of the operator's log to a failed test's report."""
    outcome = yield
    report = outcome.get_result()
    if report.failed and _OPERATOR_LOG:
        report.sections.append(("operator log (tail)", _tail(_OPERATOR_LOG[0], 60)))
