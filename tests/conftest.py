"""A real local control plane for the tests that need one (tests/cluster, tests/api), once per session.

The cluster is ``e2e/cluster/cluster.py`` (pinned kube-apiserver, etcd, controller manager,
scheduler, KWOK fake GPU nodes; see e2e/README-cluster.md) in a temporary state dir of its own, so
it never collides with the e2e suite's ``.cluster/``; ``cluster.py down`` stops it by PID at the end.
Two kube-apiserver flags are added for these tests (``LLMSCALE_APISERVER_EXTRA_ARGS``):

- an **audit log** of every request made by the operator's ServiceAccounts (namespaces
  ``llmscale-system`` and ``llmscale-ns``), from which the RBAC test reads the permissions the
  operator really used;
- the **OwnerReferencesPermissionEnforcement** admission plugin (on in OpenShift and other hardened
  clusters): setting ``blockOwnerDeletion`` on a child then needs ``update`` on the owner's
  ``finalizers`` subresource, so the chart's rule for it is exercised rather than assumed.

Under pytest-xdist (``make unit``: ``-n auto``) the tests that use the cluster run on one worker
(:func:`pytest_xdist_make_scheduler`), so the cluster starts once; the CPU-light tests run on the
others.

Where the binaries, Helm or Prometheus (``make binaries``) are missing, the tests that need them
fail with the command to run; they never skip.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import kubernetes.config
import pytest
import yaml
from tests.cluster.helpers import AUDIT_POLICY, CLUSTER_PY, CRDS, LocalCluster, bin_dir, wait_for

from llmscale.localcluster import lws as local_lws


def _down(state_dir: Path) -> None:
    subprocess.run([sys.executable, "-B", str(CLUSTER_PY), "down", "--grace", "5"], env={**os.environ,
                   "LLMSCALE_CLUSTER_DIR": str(state_dir)}, capture_output=True, timeout=120, check=False)


#: The test files that use the local cluster (the ``cluster`` or ``lws`` fixture): one worker runs
#: them all, so that the cluster starts once (a worker that got one of them alone would start a
#: second cluster: slower, not wrong).
CLUSTER_TESTS = ("tests/cluster/", "tests/api/test_crd_apiserver.py", "tests/api/test_kubeschema.py",
                 "tests/batch/test_job_contract_apiserver.py")
#: Files under those that start a control plane of their own (the scale benchmark's, 2.5 minutes):
#: a unit of their own, beside the cluster's tests rather than after them.
OWN_CONTROL_PLANE = ("tests/cluster/test_scale_benchmark.py",)


#: A fixture decorator with ``scope="module"`` (either quote, spaces around ``=``).
_MODULE_FIXTURE = re.compile(r"""@pytest\.fixture\([^)]*scope\s*=\s*["']module["']""")


def _module_scoped(root: Path, path: str, seen: dict[str, bool]) -> bool:
    """Whether the test file ``path`` (relative to ``root``), or a conftest.py in its folder or
    above it within ``tests/``, defines a module-scoped fixture: its tests then share one unit of
    work, or each worker that got one of them would build the fixture again (the batch-day days:
    135 s of CPU twice)."""
    if path not in seen:
        file = root / path
        files = [file, *(d / "conftest.py" for d in file.parents if d != root and root in d.parents)]
        seen[path] = any(f.is_file() and _MODULE_FIXTURE.search(f.read_text(encoding="utf-8")) for f in files)
    return seen[path]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--timing-tests", choices=("with", "without", "only"), default="with",
        help="run the tests marked `timing` with the others (default), without them, or only them: "
             "make test runs the unit suite without them beside the e2e suite, then them on their own")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``--timing-tests=without|only`` deselects (never skips) the other half: make test runs both
    halves, so every test still runs once."""
    mode = config.getoption("--timing-tests")
    if mode == "with":
        return
    keep, drop = [], []
    for item in items:
        timed = item.get_closest_marker("timing") is not None
        (keep if timed == (mode == "only") else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """(pytest-xdist, controller) Each test is a unit of work of its own, except the cluster's tests
    (one unit, :data:`CLUSTER_TESTS` but :data:`OWN_CONTROL_PLANE`), the tests of one class (one
    unit each) and the tests of a file with a module-scoped fixture (one unit each,
    :func:`_module_scoped`)."""
    from xdist.scheduler import LoadScopeScheduling

    root, seen = config.rootpath, dict[str, bool]()

    class Scheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            if nodeid.startswith(CLUSTER_TESTS) and not nodeid.startswith(OWN_CONTROL_PLANE):
                return "cluster"
            # A parametrized id may hold "::" itself: split what comes before it.
            path, _, rest = nodeid.partition("[")[0].partition("::")
            if _module_scoped(root, path, seen):
                return path
            name, _, method = rest.partition("::")
            return f"{path}::{name}" if method else nodeid

    return Scheduling(config, log)


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """The local control plane with llmscale's and Kopf's CRDs installed."""
    bins = bin_dir("e2e/cluster/build.sh")
    needed = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok", "kubectl")
    if bins is None or not all((bins / b).is_file() for b in needed):
        pytest.fail("the local cluster's binaries are not built: run `make binaries` (~8 min once)", pytrace=False)
    if shutil.which("openssl") is None:
        pytest.fail("the local cluster needs the openssl command", pytrace=False)
    state = tmp_path_factory.mktemp("cluster")
    policy = state / "audit-policy.yaml"
    policy.write_text(yaml.safe_dump(AUDIT_POLICY))
    audit_log = state / "audit.log"
    extra = (f"--audit-policy-file={policy} --audit-log-path={audit_log} --audit-log-format=json "
             "--enable-admission-plugins=OwnerReferencesPermissionEnforcement")
    env = {**os.environ, "LLMSCALE_CLUSTER_DIR": str(state), "LLMSCALE_APISERVER_EXTRA_ARGS": extra}
    env.pop("KUBECONFIG", None)
    try:
        proc = subprocess.run([sys.executable, "-B", str(CLUSTER_PY), "up", "--no-build", "--nodes", "1"],
                              env=env, capture_output=True, text=True, timeout=240, check=False)
        if proc.returncode != 0:
            pytest.fail(f"the local cluster did not start (logs in {state / 'logs'}):\n{proc.stdout[-3000:]}"
                        f"\n{proc.stderr[-2000:]}", pytrace=False)
        kubeconfig = state / "kubeconfig"
        api = kubernetes.config.new_client_from_config(config_file=str(kubeconfig))
        info = json.loads((state / "cluster.json").read_text())
        c = LocalCluster(state, kubeconfig, bins / "kubectl", audit_log, info.get("server") or api.configuration.host,
                         api.configuration.ssl_ca_cert, api)
        c.kubectl("apply", "--server-side", *[f"-f={p}" for p in CRDS])
        # `kubectl wait` fails outright (not waits) while a new CRD has no status yet: retry it.
        names = [f"crd/{d['metadata']['name']}" for p in CRDS for d in yaml.safe_load_all(p.read_text()) if d]
        wait_for("the CRDs Established", lambda: c.kubectl(
            "wait", "--for=condition=Established", "--timeout=30s", *names, check=False).returncode == 0, 60)
        yield c
    finally:
        _down(state)


@pytest.fixture(scope="session")
def prometheus_binaries() -> None:
    """Debian's prometheus and promtool on PATH (``make binaries`` installs them): the tests that
    read a real Prometheus fail, never skip, without them."""
    if shutil.which("prometheus") is None or shutil.which("promtool") is None:
        pytest.fail("needs Debian's prometheus package (prometheus and promtool): run `make binaries`", pytrace=False)


@pytest.fixture(scope="session")
def helm() -> Path:
    """Helm built from its Go module by tools/build-helm.sh."""
    bins = bin_dir("tools/build-helm.sh")
    if bins is None or not (bins / "helm").is_file():
        pytest.fail("helm is not built: run `make binaries` (tools/build-helm.sh)", pytrace=False)
    return bins / "helm"




@pytest.fixture(scope="session")
def lws(cluster: LocalCluster) -> LocalCluster:
    """The session's cluster with the LeaderWorkerSet controller, its CRDs and webhooks
    (:mod:`llmscale.localcluster.lws`: the upstream controller built from its pinned Go module by
    ``operator/llmscale/localcluster/build-lws.sh``); stopped with the cluster."""
    built = local_lws.bin_dir()
    if not (built / "lws-controller").is_file():
        pytest.fail("the LeaderWorkerSet controller is not built: run `make binaries` "
                    "(operator/llmscale/localcluster/build-lws.sh, ~5 min once)", pytrace=False)
    try:
        local_lws.up(cluster.state_dir, build_first=False)
    except RuntimeError as exc:
        pytest.fail(f"the LeaderWorkerSet controller did not start: {exc}", pytrace=False)
    return cluster
