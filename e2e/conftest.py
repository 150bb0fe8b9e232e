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

**Side by side** (``pytest e2e -n 3``, what ``make e2e`` runs): every pytest-xdist
worker shares the one cluster and the one operator. The first worker to need them starts them and
writes where they are into a folder the controller hands every worker; the controller stops them at
the end. Scenarios run side by side in their own namespaces under a shared lock; a scenario marked
``alone`` (it restarts the API server, Prometheus or the operator, or fills every GPU) takes the
lock exclusively, so nothing else runs while it does. The alone scenarios run first (those marked
``cpu``, real vLLM, first of all), all on the first worker, while the others wait until all of them
are done; then the rest start side by side, the longest first (``long(seconds)``), and a worker
running a long one is handed a short one as its next (:mod:`listscheduler`). A scenario marked
``beside_cpu`` (one that waits on the clock and computes little) may run beside the ``cpu`` ones,
never beside the other alone ones. The ordered tests of a class hold the lock from their first test
to their last and stay on one worker.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterator
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
from listscheduler import ListScheduling, Unit, unit_of, write_units  # noqa: E402  (e2e/ on the path)

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
    #: The file service discovery file through which Prometheus scrapes the operator's /metrics:
    #: the local cluster's, or LLMSCALE_E2E_OPERATOR_TARGETS on an external cluster (docs/e2e.md).
    operator_targets: Path | None = None
    #: The folder every pytest worker of the session shares: where the cluster and the running
    #: operator are (``cluster.json``, ``operator.json``) and the side-by-side lock.
    shared: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="llmscale-e2e-")))
    api: kubernetes.client.ApiClient = field(init=False)

    def __post_init__(self) -> None:
        self.api = kubernetes.config.new_client_from_config(config_file=str(self.kubeconfig))
        self.core = kubernetes.client.CoreV1Api(self.api)
        self.apps = kubernetes.client.AppsV1Api(self.api)
        self.policy = kubernetes.client.PolicyV1Api(self.api)
        self.custom = kubernetes.client.CustomObjectsApi(self.api)

    def save(self) -> None:
        """Write where the cluster is into the shared folder, for the other workers (:meth:`attach`)."""
        fields = {"kubeconfig": self.kubeconfig, "kubectl_bin": self.kubectl_bin, "prometheus_url": self.prometheus_url,
                  "router_url": self.router_url, "operator_log": self.operator_log, "local_state": self.local_state,
                  "service_proxy": self.service_proxy, "operator_targets": self.operator_targets}
        (self.shared / "cluster.json").write_text(json.dumps({k: str(v) if isinstance(v, Path) else v
                                                              for k, v in fields.items()}))

    @classmethod
    def attach(cls, shared: Path) -> Cluster:
        """The cluster another worker of the session started (:meth:`save`)."""
        saved = json.loads((shared / "cluster.json").read_text())
        paths = ("kubeconfig", "operator_log", "local_state", "operator_targets")
        return cls(**{k: Path(v) if k in paths and v is not None else v for k, v in saved.items()}, shared=shared)

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

    def event_message(self, namespace: str, reason: str, text: str, timeout_s: float = 15.0) -> str:
        """The message of the first ``reason`` Event in ``namespace`` that contains ``text``, waited
        for: the operator posts an Event after the change it reports (Kopf posts them from a queue),
        so a test that saw the change may ask a moment before the Event exists."""
        return wait_for(f"a {reason} Event containing {text!r} in {namespace}", lambda: next(
            (e.message for e in self.events(namespace, reason) if text in (e.message or "")), None), timeout_s)

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

    @property
    def operator(self) -> OperatorProcess | None:
        """The running operator (whichever worker of the session started it); ``None``: none runs."""
        return _running_operator(self.shared)

    @property
    def operator_port(self) -> int | None:
        """The running operator's /metrics port (``--metrics-port``)."""
        operator = self.operator
        return operator.port if operator is not None else None

    def run_operator(self, *args: str, env: dict[str, str] | None = None) -> None:
        """Stop the running operator and start ``llmscale run`` with the session's flags plus
        ``args`` (later flags win) and ``env`` added to its environment; wait for ``/readyz``."""
        self.stop_operator()
        proc, port = _start_operator(self.kubeconfig, self.prometheus_url, self.operator_log, args, env)
        _OPERATORS[proc.pid] = OperatorProcess(proc.pid, port, proc)
        (self.shared / "operator.json").write_text(json.dumps({"pid": proc.pid, "port": port}))
        if self.operator_targets is not None:
            write_operator_targets(self.operator_targets, [f"127.0.0.1:{port}"])

    def restore_operator(self) -> None:
        """Put the session's operator back (the one the fixture started)."""
        self.run_operator()

    def stop_operator(self) -> None:
        """Stop the running operator by PID (SIGTERM, SIGKILL after 10 s)."""
        _stop_operator(self.shared)

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


class OperatorProcess:
    """The operator process by PID, so that any worker of the session can signal it, wait for it or
    stop it; the worker that started it also holds its ``Popen`` (to reap it)."""

    def __init__(self, pid: int, port: int, popen: subprocess.Popen[bytes] | None = None) -> None:
        self.pid, self.port, self._popen = pid, port, popen

    def poll(self) -> int | None:
        """``None`` while it runs; its exit status (``-1`` when another worker's child) once gone."""
        if self._popen is not None:
            return self._popen.poll()
        return None if _alive(self.pid) else -1

    def send_signal(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, sig)

    def wait(self, timeout: float) -> int:
        """Wait until it exited; raise :class:`subprocess.TimeoutExpired` after ``timeout`` seconds."""
        if self._popen is not None:
            return self._popen.wait(timeout=timeout)
        deadline = time.monotonic() + timeout
        while (code := self.poll()) is None:
            if time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout)
            time.sleep(0.05)
        return code


#: The operators this process knows, by PID (one object per process, so that ``cluster.operator is
#: cluster.operator`` while it runs).
_OPERATORS: dict[int, OperatorProcess] = {}


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, exited but not yet reaped by the worker that started it, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def _running_operator(shared: Path) -> OperatorProcess | None:
    try:
        saved = json.loads((shared / "operator.json").read_text())
    except FileNotFoundError:
        return None
    pid = int(saved["pid"])
    if pid not in _OPERATORS:
        _OPERATORS[pid] = OperatorProcess(pid, int(saved["port"]))
    return _OPERATORS[pid]


def _stop_operator(shared: Path) -> None:
    operator = _running_operator(shared)
    if operator is not None:
        _stop(operator)
        (shared / "operator.json").unlink(missing_ok=True)


def _stop(proc: OperatorProcess, grace_s: float = 10.0) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=5)


def _tail(path: Path, lines: int = 40) -> str:
    with contextlib.suppress(OSError):
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    return "(no log)"


_OPERATOR_LOG: list[Path] = []


def _shared(config: pytest.Config) -> Path:
    """The folder every worker of the session shares (made by the controller, handed to each worker)."""
    return config.stash[_SHARED]


_SHARED = pytest.StashKey[Path]()


def pytest_configure(config: pytest.Config) -> None:
    workerinput = getattr(config, "workerinput", None)
    config.stash[_SHARED] = (Path(workerinput["llmscale_e2e_shared"]) if workerinput is not None
                             else Path(tempfile.mkdtemp(prefix="llmscale-e2e-")))


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """(pytest-xdist, controller) Hand each worker the shared folder."""
    node.workerinput["llmscale_e2e_shared"] = str(_shared(node.config))


def pytest_sessionfinish(session: pytest.Session) -> None:
    """(The controller, or a run without workers) Stop what a worker started: the operator by PID,
    then the local cluster. A run without workers has done it already (the fixture's teardown)."""
    if hasattr(session.config, "workerinput"):
        return
    _cpu_done()  # whatever became of the scenarios: nothing waits for this session any longer
    shared = _shared(session.config)
    if (shared / "cluster.json").exists():
        _teardown(Cluster.attach(shared))


def _teardown(c: Cluster) -> None:
    c.stop_operator()
    (c.shared / "cluster.json").unlink(missing_ok=True)
    if c.local_state is not None and os.environ.get("LLMSCALE_E2E_KEEP") != "1":
        local_stack.down(c.local_state)


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    with path.open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config) -> Iterator[Cluster]:
    """The cluster, Prometheus, router and a running operator for the whole session: started by the
    first worker that needs them, attached to by the others (see the module's docstring)."""
    shared = _shared(pytestconfig)
    with _file_lock(shared / "start.lock"):
        failed = shared / "start-failed.txt"
        if failed.exists():
            pytest.fail(failed.read_text())
        if (shared / "cluster.json").exists():
            c = Cluster.attach(shared)
        else:
            try:
                c = _start(tmp_path_factory, shared)
            except BaseException as exc:
                failed.write_text(f"another worker could not start the cluster: {exc}")
                raise
    _OPERATOR_LOG[:] = [c.operator_log]
    try:
        yield c
    finally:
        if not hasattr(pytestconfig, "workerinput"):
            _teardown(c)


def _start(tmp_path_factory: pytest.TempPathFactory, shared: Path) -> Cluster:
    """Start (or reach) the cluster, install the CRD and start the operator; save where they are."""
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
    c: Cluster | None = None
    try:
        targets = os.environ.get("LLMSCALE_E2E_OPERATOR_TARGETS")
        c = Cluster(kubeconfig, kubectl_bin, prom, router, log_path, local_state, service_proxy,
                    operator_targets=Path(targets) if targets else
                    local_stack.addons.operator_targets_path(local_state) if local_state else None,
                    shared=shared)
        c.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD))
        # `kubectl wait` fails outright (not waits) while the new CRD has no status yet: retry it.
        kubectl = c.kubectl
        wait_for("the CRD Established", lambda: kubectl(
            "wait", "--for=condition=Established", "--timeout=30s", "crd/llmdeployments.llmscale.dev",
            check=False).returncode == 0, 60)
        c.run_operator()
        c.save()
        return c
    except BaseException:
        if c is not None:
            c.stop_operator()
        if local_state is not None and os.environ.get("LLMSCALE_E2E_KEEP") != "1":
            local_stack.down(local_state)
        raise


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


# ---------------------------------------------------------------------- side by side


def _cpu(item: pytest.Item) -> bool:
    """A scenario that keeps every core busy (real vLLM engines): alone, and first of all."""
    return item.get_closest_marker("cpu") is not None


def _alone(item: pytest.Item) -> bool:
    return item.get_closest_marker("alone") is not None or _cpu(item)


def _beside_cpu(item: pytest.Item) -> bool:
    """A scenario that waits on the clock and computes little: it may run beside the ``cpu`` ones."""
    return item.get_closest_marker("beside_cpu") is not None and not _alone(item)


def _mode(item: pytest.Item) -> str:
    """How a scenario holds the side-by-side lock, as the gate's ledger writes it."""
    return "cpu" if _cpu(item) else "alone" if _alone(item) else "beside-cpu" if _beside_cpu(item) else "shared"


def _seconds(item: pytest.Item) -> float:
    """About how long a scenario runs beside others, seconds (``long(seconds)``); 0 for a short one.

    Raises:
        pytest.UsageError: a ``long`` mark without its seconds as one positive number.
    """
    mark = item.get_closest_marker("long")
    if mark is None:
        return 0.0
    if len(mark.args) != 1 or mark.kwargs or not isinstance(mark.args[0], int | float) or mark.args[0] <= 0:
        raise pytest.UsageError(f"{item.nodeid}: write the mark as long(seconds), seconds > 0; got {mark}")
    return float(mark.args[0])


#: The file in the shared folder where the workers say what they collected of each unit of work.
UNITS_FILE = "units.json"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Order the scenarios: ``cpu`` first, then the other ``alone`` ones, then the rest, the longest
    first (``long(seconds)``), a class moving as one; the same order a single worker runs. Each
    worker also writes each unit's marks into the shared folder for the controller's scheduler
    (:mod:`listscheduler`), which sees node ids only."""
    units: dict[str, Unit] = {}
    for item in items:
        u = units.get(unit_of(item.nodeid), Unit())
        units[unit_of(item.nodeid)] = Unit(u.alone or _alone(item), u.cpu or _cpu(item), max(u.seconds, _seconds(item)),
                                           u.beside_cpu or _beside_cpu(item))

    def rank(item: pytest.Item) -> tuple[bool, bool, float]:
        unit = units[unit_of(item.nodeid)]
        return not unit.cpu, not unit.alone, -unit.seconds

    items.sort(key=rank)  # stable: collection order within a rank
    if hasattr(config, "workerinput"):
        write_units(_shared(config) / UNITS_FILE, units)


def pytest_collection_finish(session: pytest.Session) -> None:
    """(Each worker) Stash the alone scenarios of this session, which the others wait for, and the
    ``cpu`` ones, after which the unit suite may start beside this one (:data:`CPU_DONE_ENV`); with
    none of them selected, say so at once."""
    session.config.stash[_ALONE] = [item.nodeid for item in session.items if _alone(item)]
    session.config.stash[_CPU] = [item.nodeid for item in session.items if _cpu(item)]
    if not session.config.stash[_CPU]:
        _cpu_done()


_ALONE = pytest.StashKey[list[str]]()
_CPU = pytest.StashKey[list[str]]()

#: A file the suite creates once every scenario marked ``cpu`` has ended or said that its engines are
#: idle for good (:func:`cpu_work_over`; at once without one; at the end of the session at the
#: latest): ``make test`` waits for it before it starts the unit suite beside this one
#: (tools/test-side-by-side.sh).
CPU_DONE_ENV = "LLMSCALE_E2E_CPU_DONE"


def _cpu_done() -> None:
    """Create the file :data:`CPU_DONE_ENV` names, if it names one and it does not exist yet (its
    time says when)."""
    if (path := os.environ.get(CPU_DONE_ENV)) and not Path(path).exists():
        Path(path).touch()


#: How long a scenario waits for the alone ones before it starts anyway: their time is bounded by
#: their own timeouts; this only keeps a worker that died inside one from hanging the session.
ALONE_WAIT_S = 3600.0


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """(pytest-xdist, controller) The list scheduler (:class:`listscheduler.ListScheduling`), told
    where the workers write their units' marks."""
    return ListScheduling(config, log, units_path=_shared(config) / UNITS_FILE)


class _Gate:
    """The side-by-side lock of the session's workers: shared for a scenario, exclusive for one
    marked ``alone``; a class's tests hold it from the first to the last. ``flock`` on two files in
    the shared folder; a waiting exclusive holder keeps the turnstile, so that new shared holders
    queue behind it rather than starve it. A shared scenario first waits until every alone one of
    the session is done (a file each under ``alone-done/``): they all go to one worker, which
    holds no shared one before them (:mod:`listscheduler`), so the wait cannot close a circle.

    A ``cpu`` scenario holds the lock shared and a third file (``cpu.lock``) exclusive: a
    ``beside_cpu`` one, which does not wait while a ``cpu`` one is still to end, runs beside it; the
    other alone ones, exclusive, still wait for both to end."""

    def __init__(self, shared: Path) -> None:
        self._shared = shared
        self._fds: list[int] = []

    def _done_marker(self, nodeid: str) -> Path:
        return self._shared / "alone-done" / hashlib.sha1(nodeid.encode()).hexdigest()

    def _cpu_over_marker(self, nodeid: str) -> Path:
        return self._shared / "cpu-over" / hashlib.sha1(nodeid.encode()).hexdigest()

    def done(self, item: pytest.Item) -> None:
        """Record that an alone scenario has ended (passed, failed or skipped); say so once every
        ``cpu`` one has (:data:`CPU_DONE_ENV`)."""
        if _alone(item):
            self._done_marker(item.nodeid).parent.mkdir(exist_ok=True)
            self._done_marker(item.nodeid).touch()
        if _cpu(item):
            self.cpu_over(item)

    def cpu_over(self, item: pytest.Item) -> None:
        """Record that the ``cpu`` scenario ``item`` computes little from now on (its engines idle
        while it waits on the clock); say so once every ``cpu`` one has ended or said so."""
        self._cpu_over_marker(item.nodeid).parent.mkdir(exist_ok=True)
        self._cpu_over_marker(item.nodeid).touch()
        if all(self._cpu_over_marker(n).exists() for n in item.config.stash.get(_CPU, [])):
            _cpu_done()

    def _wait_for_alone(self, item: pytest.Item) -> None:
        pending = [n for n in item.config.stash.get(_ALONE, []) if not self._done_marker(n).exists()]
        if not pending:
            return
        self.note("waits", item)
        deadline = time.monotonic() + ALONE_WAIT_S
        while pending and time.monotonic() < deadline:
            time.sleep(1.0)
            pending = [n for n in pending if not self._done_marker(n).exists()]
        if pending:
            sys.stderr.write(f"e2e: {len(pending)} alone scenarios not done after {ALONE_WAIT_S:.0f} s "
                             f"(a worker died?): {item.nodeid} starts beside them\n")

    def _cpu_pending(self, item: pytest.Item) -> bool:
        return any(not self._done_marker(n).exists() for n in item.config.stash.get(_CPU, []))

    def enter(self, item: pytest.Item) -> None:
        if self._fds:
            return  # the class's earlier test took it
        if not _alone(item) and not (_beside_cpu(item) and self._cpu_pending(item)):
            self._wait_for_alone(item)
        exclusive = _alone(item) and not _cpu(item)
        turnstile = os.open(self._shared / "turnstile.lock", os.O_RDWR | os.O_CREAT)
        fds = [os.open(self._shared / "side-by-side.lock", os.O_RDWR | os.O_CREAT)]
        if _cpu(item):
            fds.append(os.open(self._shared / "cpu.lock", os.O_RDWR | os.O_CREAT))
        try:
            fcntl.flock(turnstile, fcntl.LOCK_EX)
            fcntl.flock(fds[0], fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            if _cpu(item):
                fcntl.flock(fds[1], fcntl.LOCK_EX)
        except BaseException:
            for fd in fds:
                os.close(fd)
            raise
        finally:
            os.close(turnstile)
        self._fds = fds
        self.note("enter", item)

    def leave(self, item: pytest.Item, nextitem: pytest.Item | None) -> None:
        cls = getattr(item, "cls", None)
        if cls is not None and nextitem is not None and getattr(nextitem, "cls", None) is cls:
            return  # the class goes on
        if self._fds:
            self.note("leave", item)
            for fd in self._fds:
                os.close(fd)  # releases the lock
            self._fds = []

    def note(self, what: str, item: pytest.Item) -> None:
        """Add ``<time> <pid> enter|leave <cpu|alone|beside-cpu|shared> <nodeid>`` to the session's
        gate ledger."""
        mode = _mode(item)
        with (self._shared / "gate.log").open("a") as ledger:
            ledger.write(f"{time.time():.1f} {os.getpid()} {what} {mode} {item.nodeid}\n")

    def beside(self) -> list[str]:
        """The tests other workers hold the lock for now (from the ledger), with their mode."""
        held: dict[str, str] = {}
        with contextlib.suppress(OSError):
            for line in (self._shared / "gate.log").read_text().splitlines():
                _, pid, what, mode, nodeid = line.split(" ", 4)
                if int(pid) == os.getpid():
                    continue
                if what == "enter":
                    held[pid] = f"{nodeid} ({mode})"
                else:
                    held.pop(pid, None)
        return sorted(held.values())


_GATE = pytest.StashKey[_Gate]()


@pytest.fixture
def cpu_work_over(request: pytest.FixtureRequest) -> Callable[[], None]:
    """For a ``cpu`` scenario: call it once the scenario's engines are idle for good (the rest waits
    on the clock), so that ``make test`` may start the unit suite beside it (:data:`CPU_DONE_ENV`)
    once every ``cpu`` scenario has ended or said so. The lock is held to the scenario's end."""
    item = request.node
    gate = item.config.stash.setdefault(_GATE, _Gate(_shared(item.config)))
    return lambda: gate.cpu_over(item)


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Hold the side-by-side lock around the test's setup, call and teardown. Outside the test's
    timeout (pytest-timeout's wrapper runs inside this one): waiting for the lock is not the test."""
    gate = item.config.stash.setdefault(_GATE, _Gate(_shared(item.config)))
    gate.enter(item)
    try:
        yield
    finally:
        gate.done(item)
        gate.leave(item, nextitem)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Attach the tail of the operator's log, and the scenarios running beside, to a failed test's
    report."""
    outcome = yield
    report = outcome.get_result()
    if report.failed and _OPERATOR_LOG:
        report.sections.append(("operator log (tail)", _tail(_OPERATOR_LOG[0], 60)))
    gate = item.config.stash.get(_GATE, None)
    if report.failed and gate is not None:
        report.sections.append(("running beside it", "\n".join(gate.beside()) or "nothing"))
