"""The operator's connections to a real kube-apiserver with a request budget of one (issue 14).

Kopf's own session opens a connection per concurrent request with no limit; llmscale's login hands
Kopf a session whose pool holds the watch streams plus ``--api-requests`` more
(:mod:`llmscale.controller.apisession`). With a budget of one request every watch stream still has
its connection, so nothing deadlocks: a burst of LLMDeployments created at once is reconciled
(children and status), a spec change afterwards is acted on, and the process's connections to the
API server, sampled from ``/proc`` all along, never exceed the pool's limit plus the peering
keep-alive's own connection plus the official client's pool (the writer's server-side applies,
``connection_pool_maxsize``).
"""

from __future__ import annotations

import re
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import kubernetes.client
import pytest
from tests.cluster.helpers import LocalCluster, OperatorProcess, start_operator, wait_for

from llmscale.controller.apisession import connection_budget
from llmscale.controller.handlers import build_registry
from llmscale.controller.manifests.names import LABEL_MANAGED_BY, MANAGER
from llmscale.controller.settings import OperatorSettings

pytestmark = pytest.mark.slow

GROUP, VERSION, PLURAL = "llmscale.dev", "v1alpha1", "llmdeployments"
NS = "conn-budget"
#: LLMDeployments created at once: several requests each (Kopf's annotations, children, status)
#: through one request connection.
OBJECTS = 16
LIMIT_LINE = re.compile(r"Limited connections to the API server to (\d+): (\d+) watch streams and (\d+) requests")


def llmdeployment(name: str, least: int = 1) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "LLMDeployment", "metadata": {"name": name, "namespace": NS},
            "spec": {"model": {"name": "chat", "preset": "llama-3.1-8b"}, "engine": {"type": "mock", "image": "llmscale:dev"},
                     "replicas": {"min": least, "max": 3}, "scaling": {"tickSeconds": 1},
                     "headroom": {"replicas": 0, "coldStartSeconds": 1}}}


def api_connections(pid: int, port: int) -> int:
    """Established TCP connections of process ``pid`` to remote port ``port`` (its socket inodes
    in ``/proc/<pid>/fd`` matched against ``/proc/<pid>/net/tcp`` and ``tcp6``)."""
    inodes = set()
    fds = Path(f"/proc/{pid}/fd")
    for fd in fds.iterdir():
        try:
            target = (fds / fd.name).readlink().as_posix()
        except OSError:  # closed in between
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:["):-1])
    count = 0
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            remote_port = int(fields[2].rsplit(":", 1)[1], 16)
            if remote_port == port and fields[3] == "01" and fields[9] in inodes:  # 01: ESTABLISHED
                count += 1
    return count


@pytest.fixture(scope="module")
def operator(cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    """``llmscale run`` as the cluster admin (client certificate), watching one namespace, with a
    budget of one request connection."""
    cluster.create_namespace(NS)
    log = tmp_path_factory.mktemp("connections") / "operator.log"
    op = start_operator({"LLMSCALE_NAMESPACES": NS, "LLMSCALE_API_REQUESTS": "1"}, cluster.kubeconfig, log)
    try:
        yield op
    finally:
        op.stop()
        kubernetes.client.CoreV1Api(cluster.api).delete_namespace(NS)


def test_a_budget_of_one_request_reconciles_a_burst_within_the_limit(cluster: LocalCluster,
                                                                      operator: OperatorProcess) -> None:
    found = wait_for("the operator's connection limit in its log", lambda: LIMIT_LINE.search(operator.text()))
    limit, streams, requests = (int(g) for g in found.groups())
    settings = OperatorSettings(namespaces=(NS,), api_requests=1)
    assert (limit, requests) == (connection_budget(build_registry(settings), settings).limit, 1)
    assert limit == streams + 1
    port = urlsplit(cluster.server).port or 443
    api = kubernetes.client.CustomObjectsApi(cluster.api)
    apps = kubernetes.client.AppsV1Api(cluster.api)
    names = [f"burst-{i}" for i in range(OBJECTS)]
    peak = 0

    def sampled(probe: Any) -> Any:
        def wrapped() -> Any:
            nonlocal peak
            peak = max(peak, api_connections(operator.proc.pid, port))
            return probe()
        return wrapped

    for name in names:
        api.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, llmdeployment(name))

    def reconciled() -> bool:
        owners = {ref.name for d in apps.list_namespaced_deployment(NS, label_selector=f"{LABEL_MANAGED_BY}={MANAGER}").items
                  for ref in d.metadata.owner_references or ()}
        statuses = [api.get_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, n).get("status") or {} for n in names]
        return owners >= set(names) and all(s.get("conditions") for s in statuses)

    started = time.monotonic()
    wait_for(f"{OBJECTS} LLMDeployments reconciled through one request connection", sampled(reconciled), 120, 0.1)
    burst_s = time.monotonic() - started

    # Still served after the burst: a spec change reaches the child Deployment.
    api.patch_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, names[0], {"spec": {"replicas": {"min": 2}}})

    def scaled() -> bool:
        return any((d.spec.replicas or 0) >= 2 and any(r.name == names[0] for r in d.metadata.owner_references or ())
                   for d in apps.list_namespaced_deployment(NS).items)

    wait_for("the spec change acted on", sampled(scaled), 60, 0.1)
    writer_pool = kubernetes.client.Configuration().connection_pool_maxsize
    # The peering keep-alive never waits for the pool and may open one connection beyond it
    # (apisession.PeeringFirst).
    assert 0 < peak <= limit + 1 + writer_pool, (peak, limit, writer_pool, burst_s)
    assert operator.proc.poll() is None
    # The burst's requests queued for the one connection, and the operator says how long they waited.
    with urllib.request.urlopen(f"http://127.0.0.1:{operator.port}/metrics", timeout=5) as r:
        page = r.read().decode()
    waited = [float(line.split()[-1]) for line in page.splitlines()
              if line.startswith("llmscale_api_connection_wait_seconds_count")]
    assert waited and waited[0] > 0, "no request waited for the one request connection"
