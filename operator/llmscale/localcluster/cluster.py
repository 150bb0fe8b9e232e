#!/usr/bin/env python3
"""Local Kubernetes control plane for llmscale's end-to-end tests.

    python3 e2e/cluster/cluster.py up       # build (cached) + start + wait until usable
    python3 e2e/cluster/cluster.py status   # what runs, ports, nodes
    python3 e2e/cluster/cluster.py down     # stop everything by PID (SIGTERM, then SIGKILL)
    python3 e2e/cluster/cluster.py env      # print `export KUBECONFIG=...` lines
    python3 e2e/cluster/cluster.py restart-apiserver [--down S]  # chaos: stop it, start it again

(``e2e/cluster/cluster.py`` runs :func:`main`; so does ``python -m llmscale.localcluster.cluster``.)
Real upstream components, built by build.sh (``e2e/cluster/build.sh``) from pinned Go modules: etcd,
kube-apiserver, kube-controller-manager, kube-scheduler, and KWOK for fake GPU nodes and the pod
lifecycle (Running at once, Ready after the pod's own cold start; see kwok-stages.yaml).
Everything listens on 127.0.0.1. State (certificates, etcd data, logs, PIDs, kubeconfigs) lives
in ${LLMSCALE_CLUSTER_DIR:-$PWD/.cluster}. Only the Python standard library and the `openssl`
command are used (and nothing else of llmscale is imported), so this runs before any virtualenv
exists. See e2e/README-cluster.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import shutil
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from llmscale.localcluster.ports import free_port

HERE = Path(__file__).resolve().parent
BUILD_SH = HERE / "build.sh"
STAGES_YAML = HERE / "kwok-stages.yaml"

# Start order; `down` stops in reverse order.
COMPONENTS = ["etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"]
# Files and folders `up` owns inside the state dir (removed on a fresh `up` and by `down --purge`).
OWNED = [
    "pki",
    "etcd",
    "logs",
    "pids",
    "kwok-home",
    "kubeconfig",
    "kubeconfigs",
    "kwok.yaml",
    "nodes.yaml",
    "cluster.json",
    "env.sh",
    "kcm-certs",
    "scheduler-certs",
    "kube-apiserver.argv.json",
]
#: The kube-apiserver's command line as ``up`` started it (JSON list), for :func:`restart_apiserver`.
APISERVER_ARGV = "kube-apiserver.argv.json"

SERVICE_CIDR = "10.96.0.0/16"
POD_CIDR = "10.244.0.0/16"
FAKE_NODE_ANNOTATION = "kwok.x-k8s.io/node"
FAKE_NODE_VALUE = "fake"


def log(msg: str) -> None:
    print(f"[cluster {time.monotonic() - T0:6.1f}s] {msg}", flush=True)


T0 = time.monotonic()


def env_int(name: str, default: int) -> int:
    v = os.environ.get(name, "")
    return int(v) if v.strip() else default


def state_dir() -> Path:
    return Path(os.environ.get("LLMSCALE_CLUSTER_DIR") or (Path.cwd() / ".cluster")).resolve()


def bin_dir() -> Path:
    if os.environ.get("LLMSCALE_BIN_DIR"):
        return Path(os.environ["LLMSCALE_BIN_DIR"])
    out = subprocess.run(
        ["bash", str(BUILD_SH), "--print-bin-dir"], check=True, capture_output=True, text=True
    )
    return Path(out.stdout.strip())


def port_from_env(name: str) -> int:
    p = env_int(name, 0)
    return p if p > 0 else free_port()


# --------------------------------------------------------------------------- certificates (openssl)


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def make_pki(pki: Path) -> None:
    pki.mkdir(parents=True, exist_ok=True)
    days = "3650"
    openssl(
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        "-days",
        days,
        "-subj",
        "/CN=llmscale-e2e-ca",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign,cRLSign,digitalSignature",
        cwd=pki,
    )

    def leaf(name: str, subj: str, ext: str) -> None:
        (pki / f"{name}.ext").write_text(ext)
        openssl(
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            f"{name}.key",
            "-out",
            f"{name}.csr",
            "-subj",
            subj,
            cwd=pki,
        )
        openssl(
            "x509",
            "-req",
            "-in",
            f"{name}.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            f"{name}.crt",
            "-days",
            days,
            "-extfile",
            f"{name}.ext",
            cwd=pki,
        )
        (pki / f"{name}.csr").unlink()
        (pki / f"{name}.ext").unlink()

    leaf(
        "apiserver",
        "/CN=kube-apiserver",
        "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=serverAuth\n"
        "subjectAltName=IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,"
        "DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local\n",
    )
    client_ext = (
        "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=clientAuth\n"
    )
    for name, subj in CLIENTS.items():
        leaf(name, subj, client_ext)
    # Service-account token signing key pair (ES256). ECDSA P-256 keys throughout: instant to make.
    openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", "sa.key", cwd=pki)
    openssl("pkey", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=pki)
    for f in pki.iterdir():
        if f.suffix == ".key":
            f.chmod(0o600)


# client certificate name -> subject (O= becomes the group)
CLIENTS = {
    "admin": "/O=system:masters/CN=llmscale-admin",
    "kube-controller-manager": "/CN=system:kube-controller-manager",
    "kube-scheduler": "/CN=system:kube-scheduler",
    # KWOK patches node and pod status, node leases and events of every managed object.
    "kwok": "/O=system:masters/CN=kwok-controller",
    # The apiserver's client identity towards aggregated API servers (front proxy).
    "front-proxy-client": "/CN=front-proxy-client",
}


def write_kubeconfig(path: Path, server: str, pki: Path, user: str) -> None:
    # JSON is valid YAML; kubectl and client-go read it.
    cfg = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "llmscale-e2e",
                "cluster": {"server": server, "certificate-authority": str(pki / "ca.crt")},
            }
        ],
        "users": [
            {
                "name": user,
                "user": {
                    "client-certificate": str(pki / f"{user}.crt"),
                    "client-key": str(pki / f"{user}.key"),
                },
            }
        ],
        "contexts": [{"name": "llmscale-e2e", "context": {"cluster": "llmscale-e2e", "user": user}}],
        "current-context": "llmscale-e2e",
    }
    path.write_text(json.dumps(cfg, indent=2) + "\n")
    path.chmod(0o600)


# --------------------------------------------------------------------------- processes


def pid_file(sd: Path, name: str) -> Path:
    return sd / "pids" / f"{name}.pid"


def proc_start_time(pid: int) -> int | None:
    """Start time (clock ticks since boot) of a live, non-zombie process; None otherwise.

    Set at fork and unchanged by exec, so (pid, start time) names one process for its lifetime:
    a PID that the kernel has reused for another process gets a different start time.
    """
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    if not fields or fields[0] in ("Z", "X"):
        return None
    try:
        return int(fields[19])  # field 22 of proc(5); fields[] starts at field 3 (state)
    except (IndexError, ValueError):
        return None


def running(sd: Path, name: str) -> int | None:
    """PID of component `name` if the process its pid file names still runs, else None.

    Pid file format: "<pid> <start time> <argv0>" (see spawn); a bare "<pid>" is accepted too
    (then only liveness is checked), for processes that other scripts add to <state>/pids/.
    """
    try:
        parts = pid_file(sd, name).read_text().split()
        pid = int(parts[0])
    except (OSError, ValueError, IndexError):
        return None
    started = proc_start_time(pid)
    if started is None:
        return None
    if len(parts) > 1 and parts[1].isdigit() and int(parts[1]) != started:
        return None  # PID reused by an unrelated process
    return pid


def spawn(sd: Path, name: str, argv: list[str], env: dict[str, str] | None = None) -> int:
    with open(sd / "logs" / f"{name}.log", "ab") as logf:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=logf,
            stderr=subprocess.STDOUT,
            cwd=sd,
            env={**os.environ, **(env or {})},
            start_new_session=True,
        )
    # "<pid> <start time> <argv0>": the start time lets `down` check it is still our process.
    pid_file(sd, name).write_text(f"{proc.pid} {proc_start_time(proc.pid)} {argv[0]}\n")
    log(f"started {name} (pid {proc.pid}), log {sd / 'logs' / (name + '.log')}")
    return proc.pid


def stop(sd: Path, name: str, grace: float) -> bool:
    pid = running(sd, name)
    pf = pid_file(sd, name)
    if pid is None:
        pf.unlink(missing_ok=True)
        return False
    # spawn() makes each component a session (and process group) leader; remember that so
    # that helpers it may have forked die with it (killpg below). Never true for a reused PID:
    # running() checked the start time.
    try:
        group_leader = os.getpgid(pid) == pid
    except ProcessLookupError:
        group_leader = False
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and running(sd, name):
        time.sleep(0.1)
    if running(sd, name):
        print(f"  {name} (pid {pid}) ignored SIGTERM for {grace:.0f}s: SIGKILL", flush=True)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        for _ in range(50):
            if not running(sd, name):
                break
            time.sleep(0.1)
    if group_leader:
        # The kernel does not hand out a PID that is still some group's id, so this only
        # reaches what is left of the group this component led.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
    # Reap it if we happen to be its parent (not the case after `up` has exited).
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)
    pf.unlink(missing_ok=True)
    print(f"  stopped {name} (pid {pid})", flush=True)
    return True


def tail(path: Path, n: int = 25) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(no log)"


# --------------------------------------------------------------------------- readiness


def https_get(
    url: str, sd: Path, verify: bool = True, client: str | None = "admin", timeout: float = 3.0
) -> tuple[int, str]:
    pki = sd / "pki"
    if verify:
        ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    else:
        ctx = ssl._create_unverified_context()
    if client:
        ctx.load_cert_chain(str(pki / f"{client}.crt"), str(pki / f"{client}.key"))
    try:
        with urllib.request.urlopen(url, context=ctx, timeout=timeout) as r:
            return r.status, r.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")


def http_get(url: str, timeout: float = 3.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")


def wait_for(what: str, check: Callable[[], object], timeout: float, sd: Path, watch: list[str]) -> None:
    """Poll `check()` (truthy = done) until `timeout`; fail early when a watched process died."""
    start = time.monotonic()
    last = ""
    next_note = start + 5
    while True:
        try:
            ok = check()
            last = "" if ok else last
        except Exception as e:
            ok, last = False, f"{type(e).__name__}: {e}"
        if ok:
            log(f"{what}: ok ({time.monotonic() - start:.1f}s)")
            return
        for name in watch:
            if running(sd, name) is None:
                raise SystemExit(
                    f"{name} exited while waiting for {what}; last log lines:\n"
                    f"{tail(sd / 'logs' / (name + '.log'))}"
                )
        now = time.monotonic()
        if now - start > timeout:
            raise SystemExit(f"timed out after {timeout:.0f}s waiting for {what} ({last})")
        if now >= next_note:
            log(f"  waiting for {what} ({now - start:.0f}s){': ' + last if last else ''}")
            next_note = now + 5
        time.sleep(0.25)


def kubectl(
    bins: Path, sd: Path, *args: str, input: str | None = None, check: bool = True
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(bins / "kubectl"), "--kubeconfig", str(sd / "kubeconfig"), *args],
        input=input,
        capture_output=True,
        text=True,
        check=check,
    )


# --------------------------------------------------------------------------- nodes


def nodes_manifest(count: int, gpus: int, product: str, prefix: str) -> str:
    docs = []
    for i in range(count):
        name = f"{prefix}{i}"
        docs.append(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": name,
                    "annotations": {
                        FAKE_NODE_ANNOTATION: FAKE_NODE_VALUE,
                        "node.alpha.kubernetes.io/ttl": "0",
                    },
                    "labels": {
                        "kubernetes.io/hostname": name,
                        "kubernetes.io/os": "linux",
                        "kubernetes.io/arch": "amd64",
                        "type": "kwok",
                        "node.kubernetes.io/instance-type": f"fake-gpu-{gpus}",
                        "nvidia.com/gpu.present": "true",
                        "nvidia.com/gpu.product": product,
                        "nvidia.com/gpu.count": str(gpus),
                    },
                },
                "status": {
                    "capacity": {
                        "cpu": "96",
                        "memory": "1Ti",
                        "pods": "110",
                        "ephemeral-storage": "1Ti",
                        "nvidia.com/gpu": str(gpus),
                    },
                    "allocatable": {
                        "cpu": "96",
                        "memory": "1Ti",
                        "pods": "110",
                        "ephemeral-storage": "1Ti",
                        "nvidia.com/gpu": str(gpus),
                    },
                },
            }
        )
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}, indent=2) + "\n"


def nodes_ready(bins: Path, sd: Path, want: int) -> bool:
    out = kubectl(bins, sd, "get", "nodes", "-o", "json", check=False)
    if out.returncode != 0:
        return False
    ready = 0
    for n in json.loads(out.stdout)["items"]:
        conds = {c["type"]: c["status"] for c in n.get("status", {}).get("conditions", [])}
        taints = [t["key"] for t in n.get("spec", {}).get("taints", []) or []]
        if conds.get("Ready") == "True" and not any(t.startswith("node.kubernetes.io/") for t in taints):
            ready += 1
    return ready >= want


# --------------------------------------------------------------------------- commands


def cmd_up(a: argparse.Namespace) -> int:
    sd = state_dir()
    alive = [n for n in COMPONENTS if running(sd, n)]
    if alive and len(alive) == len(COMPONENTS) and (sd / "cluster.json").exists():
        log(f"already running in {sd}")
        print_env(sd)
        return 0
    if alive:
        log(f"partly running ({', '.join(alive)}): stopping first")
        do_down(sd, grace=a.grace)

    if not a.no_build:
        subprocess.run(["bash", str(BUILD_SH), "--no-prometheus"], check=True)
    bins = bin_dir()
    for b in ["etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok", "kubectl"]:
        if not (bins / b).is_file():
            raise SystemExit(f"{bins / b} missing: run e2e/cluster/build.sh")
    if not shutil.which("openssl"):
        raise SystemExit("openssl is required (apt-get install openssl)")

    # Fresh state: remove only what we own.
    sd.mkdir(parents=True, exist_ok=True)
    for name in OWNED:
        p = sd / name
        if p.is_dir():
            shutil.rmtree(p)
        elif p.exists():
            p.unlink()
    for d in ["pki", "etcd", "logs", "pids", "kwok-home", "kubeconfigs", "kcm-certs", "scheduler-certs"]:
        (sd / d).mkdir(parents=True, exist_ok=True)
    (sd / "etcd").chmod(0o700)

    ports = {
        "apiserver": port_from_env("LLMSCALE_APISERVER_PORT"),
        "etcd_client": port_from_env("LLMSCALE_ETCD_PORT"),
        "etcd_peer": free_port(),
        "controller_manager": free_port(),
        "scheduler": free_port(),
        "kwok": free_port(),
    }
    if len(set(ports.values())) != len(ports):
        raise SystemExit(f"port clash: {ports}")
    server = f"https://127.0.0.1:{ports['apiserver']}"
    pki = sd / "pki"
    log(f"state dir {sd}; binaries {bins}")
    log("generating certificates (openssl)")
    make_pki(pki)
    write_kubeconfig(sd / "kubeconfig", server, pki, "admin")
    for user in ["kube-controller-manager", "kube-scheduler", "kwok"]:
        write_kubeconfig(sd / "kubeconfigs" / f"{user}.kubeconfig", server, pki, user)

    info = {
        "state_dir": str(sd),
        "bin_dir": str(bins),
        "server": server,
        "ports": ports,
        "kubeconfig": str(sd / "kubeconfig"),
        "nodes": {
            "count": a.nodes,
            "gpus_per_node": a.gpus_per_node,
            "prefix": a.node_prefix,
            "gpu_product": a.gpu_product,
        },
        "service_cidr": SERVICE_CIDR,
        "pod_cidr": POD_CIDR,
    }
    (sd / "cluster.json").write_text(json.dumps(info, indent=2) + "\n")
    (sd / "env.sh").write_text(env_lines(sd, bins))

    try:
        start_all(a, sd, bins, ports, server)
    except BaseException:
        if not a.keep_on_failure:
            print(
                f"up failed: stopping what was started (logs kept in {sd / 'logs'})",
                file=sys.stderr,
                flush=True,
            )
            do_down(sd, grace=a.grace)
        raise
    log(f"cluster up in {time.monotonic() - T0:.1f}s: {server}")
    print_env(sd)
    return 0


def apiserver_argv(sd: Path, bins: Path, ports: dict[str, int]) -> list[str]:
    """The kube-apiserver command line of the cluster in ``sd``: ``bins``, the ports of ``up``
    (``apiserver``, ``etcd_client``) and ``$LLMSCALE_APISERVER_EXTRA_ARGS`` as it is now."""
    pki = sd / "pki"
    etcd_url = f"http://127.0.0.1:{ports['etcd_client']}"
    return [
        str(bins / "kube-apiserver"),
        f"--etcd-servers={etcd_url}",
        "--bind-address=127.0.0.1",
        f"--secure-port={ports['apiserver']}",
        "--advertise-address=127.0.0.1",
        "--endpoint-reconciler-type=none",
        f"--tls-cert-file={pki / 'apiserver.crt'}",
        f"--tls-private-key-file={pki / 'apiserver.key'}",
        f"--client-ca-file={pki / 'ca.crt'}",
        # Front proxy (aggregation layer); also fills extension-apiserver-authentication,
        # which controller-manager and scheduler read for delegated authentication.
        f"--requestheader-client-ca-file={pki / 'ca.crt'}",
        "--requestheader-allowed-names=front-proxy-client",
        "--requestheader-username-headers=X-Remote-User",
        "--requestheader-group-headers=X-Remote-Group",
        "--requestheader-extra-headers-prefix=X-Remote-Extra-",
        f"--proxy-client-cert-file={pki / 'front-proxy-client.crt'}",
        f"--proxy-client-key-file={pki / 'front-proxy-client.key'}",
        "--authorization-mode=Node,RBAC",
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        f"--service-account-key-file={pki / 'sa.pub'}",
        f"--service-account-signing-key-file={pki / 'sa.key'}",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        "--allow-privileged=true",
        "--profiling=false",
        "--v=1",
        # Extra flags for tests, e.g. an audit log or admission plugins (tests/cluster/).
        *shlex.split(os.environ.get("LLMSCALE_APISERVER_EXTRA_ARGS", "")),
    ]


def start_all(a: argparse.Namespace, sd: Path, bins: Path, ports: dict[str, int], server: str) -> None:
    pki = sd / "pki"
    kc = sd / "kubeconfigs"
    etcd_url = f"http://127.0.0.1:{ports['etcd_client']}"
    peer_url = f"http://127.0.0.1:{ports['etcd_peer']}"
    spawn(
        sd,
        "etcd",
        [
            str(bins / "etcd"),
            "--name=llmscale-e2e",
            f"--data-dir={sd / 'etcd'}",
            f"--listen-client-urls={etcd_url}",
            f"--advertise-client-urls={etcd_url}",
            f"--listen-peer-urls={peer_url}",
            f"--initial-advertise-peer-urls={peer_url}",
            f"--initial-cluster=llmscale-e2e={peer_url}",
            "--initial-cluster-state=new",
            "--unsafe-no-fsync=true",  # test cluster: speed over durability
            "--log-level=warn",
        ],
    )
    wait_for("etcd /health", lambda: '"health":"true"' in http_get(f"{etcd_url}/health")[1], 30, sd, ["etcd"])

    argv = apiserver_argv(sd, bins, ports)
    (sd / APISERVER_ARGV).write_text(json.dumps(argv) + "\n")  # for restart_apiserver
    spawn(sd, "kube-apiserver", argv)
    wait_for(
        "kube-apiserver /readyz",
        lambda: https_get(f"{server}/readyz", sd)[0] == 200,
        120,
        sd,
        ["etcd", "kube-apiserver"],
    )

    spawn(
        sd,
        "kube-controller-manager",
        [
            str(bins / "kube-controller-manager"),
            f"--kubeconfig={kc / 'kube-controller-manager.kubeconfig'}",
            f"--authentication-kubeconfig={kc / 'kube-controller-manager.kubeconfig'}",
            f"--authorization-kubeconfig={kc / 'kube-controller-manager.kubeconfig'}",
            "--bind-address=127.0.0.1",
            f"--secure-port={ports['controller_manager']}",
            f"--cert-dir={sd / 'kcm-certs'}",
            "--controllers=*",
            "--use-service-account-credentials=true",
            f"--service-account-private-key-file={pki / 'sa.key'}",
            f"--root-ca-file={pki / 'ca.crt'}",
            f"--cluster-signing-cert-file={pki / 'ca.crt'}",
            f"--cluster-signing-key-file={pki / 'ca.key'}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--leader-elect=false",
            "--profiling=false",
            "--v=1",
        ],
    )
    spawn(
        sd,
        "kube-scheduler",
        [
            str(bins / "kube-scheduler"),
            f"--kubeconfig={kc / 'kube-scheduler.kubeconfig'}",
            f"--authentication-kubeconfig={kc / 'kube-scheduler.kubeconfig'}",
            f"--authorization-kubeconfig={kc / 'kube-scheduler.kubeconfig'}",
            "--bind-address=127.0.0.1",
            f"--secure-port={ports['scheduler']}",
            f"--cert-dir={sd / 'scheduler-certs'}",
            "--leader-elect=false",
            "--profiling=false",
            "--v=1",
        ],
    )

    kwok_cfg = (
        "apiVersion: config.kwok.x-k8s.io/v1alpha1\n"
        "kind: KwokConfiguration\n"
        "options:\n"
        f"  cidr: {POD_CIDR}\n"
        # Fake nodes' InternalIP and pods' hostIP: the nodes are this machine.
        "  nodeIP: 127.0.0.1\n"
        f"  serverAddress: 127.0.0.1:{ports['kwok']}\n"
        "  nodeLeaseDurationSeconds: 40\n"
        # KWOK applies no defaults to these when they come from a file; 0 is refused.
        "  nodeLeaseParallelism: 4\n"
        "  podPlayStageParallelism: 4\n"
        "  nodePlayStageParallelism: 4\n"
        "  podsOnNodeSyncParallelism: 1\n"
        "  enableDebuggingHandlers: false\n"
        "  enableProfilingHandler: false\n"
        "  enableContentionProfiling: false\n" + STAGES_YAML.read_text()
    )
    (sd / "kwok.yaml").write_text(kwok_cfg)
    # HOME is set so that KWOK never reads a user's ~/.kwok/kwok.yaml.
    spawn(
        sd,
        "kwok",
        [
            str(bins / "kwok"),
            f"--kubeconfig={kc / 'kwok.kubeconfig'}",
            f"--config={sd / 'kwok.yaml'}",
            "--manage-all-nodes=false",
            f"--manage-nodes-with-annotation-selector={FAKE_NODE_ANNOTATION}={FAKE_NODE_VALUE}",
            f"--server-address=127.0.0.1:{ports['kwok']}",
        ],
        env={"HOME": str(sd / "kwok-home")},
    )

    all_procs = list(COMPONENTS)
    wait_for(
        "kube-controller-manager /healthz",
        lambda: (
            https_get(
                f"https://127.0.0.1:{ports['controller_manager']}/healthz", sd, verify=False, client=None
            )[0]
            == 200
        ),
        60,
        sd,
        all_procs,
    )
    wait_for(
        "kube-scheduler /healthz",
        lambda: (
            https_get(f"https://127.0.0.1:{ports['scheduler']}/healthz", sd, verify=False, client=None)[0]
            == 200
        ),
        60,
        sd,
        all_procs,
    )
    wait_for(
        "kwok /healthz",
        lambda: http_get(f"http://127.0.0.1:{ports['kwok']}/healthz")[0] == 200,
        60,
        sd,
        all_procs,
    )

    manifest = nodes_manifest(a.nodes, a.gpus_per_node, a.gpu_product, a.node_prefix)
    (sd / "nodes.yaml").write_text(manifest)
    if a.nodes:
        kubectl(bins, sd, "apply", "-f", str(sd / "nodes.yaml"))
        log(
            f"created {a.nodes} fake node(s) x {a.gpus_per_node} nvidia.com/gpu "
            f"({a.node_prefix}0..{a.node_prefix}{a.nodes - 1})"
        )
        wait_for(f"{a.nodes} node(s) Ready", lambda: nodes_ready(bins, sd, a.nodes), 90, sd, all_procs)
    # Pods are rejected until the namespace's default ServiceAccount exists.
    wait_for(
        "serviceaccount default/default",
        lambda: (
            kubectl(bins, sd, "get", "serviceaccount", "default", "-n", "default", check=False).returncode
            == 0
        ),
        60,
        sd,
        all_procs,
    )


def do_down(sd: Path, grace: float) -> int:
    stopped = 0
    for name in reversed(COMPONENTS):
        stopped += stop(sd, name, grace)
    # Stray pid files from components added later (e.g. per-pod engines, prometheus).
    for pf in sorted((sd / "pids").glob("*.pid")) if (sd / "pids").is_dir() else []:
        stopped += stop(sd, pf.stem, grace)
    return stopped


def restart_apiserver(sd: Path, down_s: float = 0.0, grace: float = 10.0, timeout: float = 120.0) -> int:
    """Stop the kube-apiserver of the cluster in ``sd`` by PID (SIGTERM, SIGKILL after ``grace``
    seconds), leave it down ``down_s`` seconds, and start it again with the command line ``up``
    gave it (same port, certificates and etcd, so every object and client survives); return once
    its ``/readyz`` answers 200, with the new PID.

    For the chaos scenarios of the e2e suite: clients see their connections refused and their
    watches end, as in a control-plane upgrade.

    Raises:
        SystemExit: no cluster in ``sd`` (no ``cluster.json`` or saved command line), or the new
            process exited or was not ready within ``timeout`` seconds.
    """
    info_path, argv_path = sd / "cluster.json", sd / APISERVER_ARGV
    if not info_path.exists() or not argv_path.exists():
        raise SystemExit(f"no cluster in {sd} started by this version of cluster.py (missing {argv_path})")
    server = json.loads(info_path.read_text())["server"]
    argv = json.loads(argv_path.read_text())
    stop(sd, "kube-apiserver", grace)
    if down_s > 0:
        time.sleep(down_s)
    pid = spawn(sd, "kube-apiserver", argv)
    wait_for("kube-apiserver /readyz after the restart", lambda: https_get(f"{server}/readyz", sd)[0] == 200,
             timeout, sd, ["etcd", "kube-apiserver"])
    return pid


def cmd_restart_apiserver(a: argparse.Namespace) -> int:
    sd = state_dir()
    pid = restart_apiserver(sd, down_s=a.down, grace=a.grace)
    print(f"restart-apiserver: kube-apiserver running again (pid {pid})")
    return 0


def cmd_down(a: argparse.Namespace) -> int:
    sd = state_dir()
    n = do_down(sd, a.grace)
    print(f"down: stopped {n} process(es) in {sd}")
    if a.purge:
        for name in OWNED:
            p = sd / name
            if p.is_dir():
                shutil.rmtree(p)
            elif p.exists():
                p.unlink()
        with contextlib.suppress(OSError):
            sd.rmdir()
        print(f"down: removed state in {sd}")
    return 0


def cmd_status(a: argparse.Namespace) -> int:
    sd = state_dir()
    info = {}
    if (sd / "cluster.json").exists():
        info = json.loads((sd / "cluster.json").read_text())
    names = list(COMPONENTS)
    if (sd / "pids").is_dir():
        names += sorted(p.stem for p in (sd / "pids").glob("*.pid") if p.stem not in names)
    up = 0
    print(f"state dir: {sd}")
    for name in names:
        pid = running(sd, name)
        up += pid is not None
        print(f"  {name:24s} {'running pid ' + str(pid) if pid else 'stopped'}")
    if info:
        print(f"server: {info['server']}   ports: {info['ports']}")
    if up and info:
        try:
            code, body = https_get(f"{info['server']}/readyz", sd)
            print(f"readyz: {code} {body.strip()}")
            out = kubectl(Path(info["bin_dir"]), sd, "get", "nodes", "-o", "wide", check=False)
            print(out.stdout.rstrip() or out.stderr.rstrip())
        except Exception as e:
            print(f"readyz: unreachable ({e})")
    return 0 if up == len(COMPONENTS) else 1


def env_lines(sd: Path, bins: Path) -> str:
    return (
        f"export LLMSCALE_CLUSTER_DIR={sd}\nexport KUBECONFIG={sd / 'kubeconfig'}\nexport PATH={bins}:$PATH\n"
    )


def print_env(sd: Path) -> None:
    print(f"# to use it: source {sd / 'env.sh'}   (or:)")
    print((sd / "env.sh").read_text(), end="", flush=True)


def cmd_env(a: argparse.Namespace) -> int:
    sd = state_dir()
    if not (sd / "env.sh").exists():
        print(f"no cluster in {sd}", file=sys.stderr)
        return 1
    print((sd / "env.sh").read_text(), end="")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", help="start the cluster (fresh state) and wait until usable")
    up.add_argument(
        "--nodes",
        type=int,
        default=env_int("LLMSCALE_GPU_NODES", 2),
        help="fake GPU nodes (env LLMSCALE_GPU_NODES, default 2)",
    )
    up.add_argument(
        "--gpus-per-node",
        type=int,
        default=env_int("LLMSCALE_GPUS_PER_NODE", 8),
        help="nvidia.com/gpu per node (env LLMSCALE_GPUS_PER_NODE, default 8)",
    )
    up.add_argument(
        "--gpu-product",
        default=os.environ.get("LLMSCALE_GPU_PRODUCT", "NVIDIA-H100-80GB-HBM3"),
        help="label nvidia.com/gpu.product (env LLMSCALE_GPU_PRODUCT)",
    )
    up.add_argument(
        "--node-prefix",
        default=os.environ.get("LLMSCALE_NODE_PREFIX", "gpu-node-"),
        help="node name prefix (env LLMSCALE_NODE_PREFIX, default gpu-node-)",
    )
    up.add_argument("--no-build", action="store_true", help="do not run build.sh first")
    up.add_argument(
        "--keep-on-failure", action="store_true", help="leave processes running when up fails (for debugging)"
    )
    up.add_argument("--grace", type=float, default=10.0)
    down = sub.add_parser("down", help="stop every process by PID")
    down.add_argument(
        "--grace", type=float, default=10.0, help="seconds between SIGTERM and SIGKILL (default 10)"
    )
    down.add_argument("--purge", action="store_true", help="also remove the state dir")
    restart = sub.add_parser("restart-apiserver", help="stop the kube-apiserver by PID and start it again")
    restart.add_argument("--down", type=float, default=0.0, help="seconds to leave it stopped (default 0)")
    restart.add_argument("--grace", type=float, default=10.0)
    sub.add_parser("status", help="print what runs; exit 1 unless all components run")
    sub.add_parser("env", help="print export lines for KUBECONFIG and PATH")
    a = p.parse_args(argv)
    commands = {"up": cmd_up, "down": cmd_down, "restart-apiserver": cmd_restart_apiserver, "status": cmd_status,
                "env": cmd_env}
    return commands[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
