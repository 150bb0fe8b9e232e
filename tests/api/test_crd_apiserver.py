"""The generated CRD against a real kube-apiserver: accepted, defaulted and enforced as documented.

Starts its own etcd and kube-apiserver (the pinned binaries built by ``e2e/cluster/build.sh``) on
free 127.0.0.1 ports for this module, and talks to them with the official Kubernetes Python client.
Skipped where those binaries have not been built. Only the API server is needed: no nodes, no
controllers, no operator.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import urllib3
from kubernetes import client
from kubernetes.client.rest import ApiException

from llmscale import api
from llmscale.crd import CRD_NAME, crd

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
TOKEN = "llmscale-crd-test-token"
NAMESPACE = "default"


def _bin_dir() -> Path | None:
    script = REPO / "e2e" / "cluster" / "build.sh"
    if not script.exists():
        return None
    out = subprocess.run(
        ["bash", str(script), "--print-bin-dir"], capture_output=True, text=True, check=False
    )
    path = Path(out.stdout.strip())
    if out.returncode != 0 or not all((path / b).is_file() for b in ("etcd", "kube-apiserver")):
        return None
    return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def kube(tmp_path_factory: pytest.TempPathFactory) -> Iterator[client.ApiClient]:
    bins = _bin_dir()
    if bins is None:
        pytest.skip("kube-apiserver/etcd not built (run e2e/cluster/build.sh)")
    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed for the service-account key")
    work = tmp_path_factory.mktemp("apiserver")
    subprocess.run(
        ["openssl", "genrsa", "-out", str(work / "sa.key"), "2048"], check=True, capture_output=True
    )
    subprocess.run(
        ["openssl", "rsa", "-in", str(work / "sa.key"), "-pubout", "-out", str(work / "sa.pub")],
        check=True,
        capture_output=True,
    )
    (work / "tokens.csv").write_text(f"{TOKEN},admin,admin,system:masters\n")
    etcd_port, peer_port, api_port = _free_port(), _free_port(), _free_port()
    etcd_url, peer_url = f"http://127.0.0.1:{etcd_port}", f"http://127.0.0.1:{peer_port}"
    procs: list[subprocess.Popen[bytes]] = []
    try:
        with open(work / "etcd.log", "wb") as etcd_log:
            procs.append(
                subprocess.Popen(
                    [
                        str(bins / "etcd"),
                        "--name=crdtest",
                        f"--data-dir={work / 'etcd'}",
                        f"--listen-client-urls={etcd_url}",
                        f"--advertise-client-urls={etcd_url}",
                        f"--listen-peer-urls={peer_url}",
                        f"--initial-advertise-peer-urls={peer_url}",
                        f"--initial-cluster=crdtest={peer_url}",
                        "--unsafe-no-fsync=true",
                        "--log-level=warn",
                    ],
                    stdout=etcd_log,
                    stderr=subprocess.STDOUT,
                )
            )
        with open(work / "apiserver.log", "wb") as api_log:
            procs.append(
                subprocess.Popen(
                    [
                        str(bins / "kube-apiserver"),
                        f"--etcd-servers={etcd_url}",
                        "--bind-address=127.0.0.1",
                        "--advertise-address=127.0.0.1",
                        f"--secure-port={api_port}",
                        "--endpoint-reconciler-type=none",
                        f"--cert-dir={work / 'certs'}",
                        f"--token-auth-file={work / 'tokens.csv'}",
                        "--authorization-mode=RBAC",
                        "--service-account-issuer=https://kubernetes.default.svc",
                        f"--service-account-key-file={work / 'sa.pub'}",
                        f"--service-account-signing-key-file={work / 'sa.key'}",
                        "--service-cluster-ip-range=10.96.0.0/16",
                        "--profiling=false",
                        "--v=0",
                    ],
                    stdout=api_log,
                    stderr=subprocess.STDOUT,
                )
            )
        config = client.Configuration(host=f"https://127.0.0.1:{api_port}")
        # --cert-dir makes a self-signed serving certificate (with its CA) once the server starts.
        config.ssl_ca_cert = str(work / "certs" / "apiserver.crt")
        config.api_key = {"authorization": f"Bearer {TOKEN}"}
        api_client = client.ApiClient(config)
        deadline = time.monotonic() + 90
        while True:
            try:
                client.ApiextensionsV1Api(api_client).list_custom_resource_definition(_request_timeout=5)
                break
            except (ApiException, OSError, urllib3.exceptions.HTTPError):
                if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                    log = (work / "apiserver.log").read_text(errors="replace")[-3000:]
                    pytest.fail(f"kube-apiserver did not become ready:\n{log}")
                time.sleep(0.5)
        _install_crd(api_client)
        yield api_client
    finally:
        for proc in reversed(procs):
            proc.terminate()
        for proc in reversed(procs):
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _install_crd(api_client: client.ApiClient) -> None:
    ext = client.ApiextensionsV1Api(api_client)
    ext.create_custom_resource_definition(body=crd())
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        got = ext.read_custom_resource_definition(CRD_NAME)
        conditions = {c.type: c.status for c in (got.status.conditions or [])}
        assert conditions.get("NonStructuralSchema") != "True", conditions
        if conditions.get("Established") == "True":
            time.sleep(1)  # the discovery of the new resource lags Established a little
            return
        time.sleep(0.3)
    pytest.fail(f"CRD {CRD_NAME} was not Established")


def _object(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": api.API_VERSION, "kind": api.KIND, "metadata": {"name": name}, "spec": spec}


def _create(kube: client.ApiClient, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    objects = client.CustomObjectsApi(kube)
    created: dict[str, Any] = objects.create_namespaced_custom_object(
        api.GROUP, api.VERSION, NAMESPACE, api.PLURAL, _object(name, spec)
    )
    return created


MODEL = {"name": "chat", "preset": "llama-3.1-8b"}


@pytest.mark.parametrize(
    "spec",
    [
        pytest.param({"model": MODEL}, id="minimal"),
        pytest.param(
            {
                "model": MODEL,
                "scaling": {"scaleDown": {"periodSeconds": 30}},
                "batch": {"windows": [{"start": "22:00", "end": "06:00", "timezone": "Europe/London"}]},
            },
            id="partial-scaling-and-batch",
        ),
    ],
)
def test_api_server_fills_the_same_defaults_as_the_models(
    kube: client.ApiClient, spec: dict[str, Any]
) -> None:
    name = f"ok-{len(json.dumps(spec))}"
    created = _create(kube, name, spec)
    # JSON numbers: the API server returns 2.0 as 2, which compares equal in Python.
    assert created["spec"] == api.LLMDeploymentSpec.model_validate(spec).to_wire()


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        pytest.param(
            {"model": MODEL, "replicas": {"min": 5, "max": 2}},
            "spec.replicas.min must be less than or equal to spec.replicas.max",
            id="min-gt-max",
        ),
        pytest.param(
            {"model": MODEL, "replicas": {"min": 9}},
            "spec.replicas.min must be less than or equal to spec.replicas.max",
            id="min-gt-default-max",
        ),
        pytest.param({"model": {"name": "c"}}, "set exactly one of preset and architecture", id="neither"),
        pytest.param(
            {
                "model": {
                    **MODEL,
                    "architecture": {
                        "numHiddenLayers": 1,
                        "numAttentionHeads": 1,
                        "numKeyValueHeads": 1,
                        "headDim": 64,
                        "parameters": 10**6,
                    },
                }
            },
            "set exactly one of preset and architecture",
            id="both",
        ),
        pytest.param(
            {"model": MODEL, "batch": {"windows": [{"start": "24:00", "end": "06:00"}]}},
            "spec.batch.windows[0].start",
            id="bad-hhmm",
        ),
        pytest.param(
            {"model": MODEL, "batch": {"windows": [{"start": "06:00", "end": "06:00"}]}},
            "start and end of a trough window must differ",
            id="empty-window",
        ),
        pytest.param(
            {
                "model": MODEL,
                "batch": {"windows": [{"start": "22:00", "end": "06:00", "timezone": "Mars/Olympus"}]},
            },
            'Unsupported value: \\"Mars/Olympus\\"',
            id="unknown-timezone",
        ),
        pytest.param({"model": MODEL, "engine": {"type": "tgi"}}, "spec.engine.type", id="unknown-engine"),
        pytest.param({"model": MODEL, "resources": {"gpusPerReplica": 0}}, "gpusPerReplica", id="zero-gpus"),
        pytest.param(
            {"model": MODEL, "scaling": {"targets": {"kvCacheUtilization": 1.5}}},
            "kvCacheUtilization",
            id="kv-over-1",
        ),
    ],
)
def test_api_server_rejects_invalid_specs(kube: client.ApiClient, spec: dict[str, Any], message: str) -> None:
    with pytest.raises(ApiException) as caught:
        _create(kube, "bad", spec)
    assert caught.value.status == 422
    assert message in str(caught.value.body)


def test_status_is_written_through_the_status_subresource_only(kube: client.ApiClient) -> None:
    objects = client.CustomObjectsApi(kube)
    _create(kube, "status", {"model": MODEL})
    status = {
        "replicas": {"desired": 5, "ready": 4},
        "policyState": {"history": [[0, 3]], "free": {"form": 1}},
    }
    objects.patch_namespaced_custom_object_status(
        api.GROUP, api.VERSION, NAMESPACE, api.PLURAL, "status", {"status": status}
    )
    # A write to the main resource cannot change status (the subresource owns it).
    objects.patch_namespaced_custom_object(
        api.GROUP, api.VERSION, NAMESPACE, api.PLURAL, "status", {"status": {"replicas": {"desired": 99}}}
    )
    got = objects.get_namespaced_custom_object(api.GROUP, api.VERSION, NAMESPACE, api.PLURAL, "status")
    assert got["status"]["replicas"] == {"desired": 5, "ready": 4}
    assert got["status"]["policyState"] == {"history": [[0, 3]], "free": {"form": 1}}  # kept, not pruned
    assert api.LLMDeploymentStatus.model_validate(got["status"]).replicas.desired == 5
