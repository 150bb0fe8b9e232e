"""The LeaderWorkerSet controller in the local cluster, for the ``spec.scaleTargetRef`` tests.

    .venv/bin/python -m llmscale.localcluster.lws up      # after e2e/cluster/cluster.py up
    .venv/bin/python -m llmscale.localcluster.lws down

Runs the upstream controller (``sigs.k8s.io/lws``, built from its pinned Go module by
``build-lws.sh`` into the cache, as ``build.sh`` builds the control plane) on 127.0.0.1 against the
cluster in ``${LLMSCALE_CLUSTER_DIR:-$PWD/.cluster}``:

- its CRDs (LeaderWorkerSet, DisaggregatedSet) from the module source, created;
- its admission webhooks (the module's ``config/webhook`` configurations with their kustomize
  patches applied), pointed at ``https://127.0.0.1:<port>`` instead of an in-cluster Service and
  served with a certificate the cluster's own CA signs (``openssl``, as the control plane's);
- the controller itself, tracked by PID in ``<state>/pids/lws-controller.pid`` so that
  ``cluster.py down`` stops it with the rest; its log in ``<state>/logs/lws-controller.log``.

Test infrastructure, not product code.
"""

from __future__ import annotations

import argparse
import base64
import json
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from llmscale.localcluster import cluster
from llmscale.localcluster.ports import free_port

__all__ = ["BUILD_LWS_SH", "LwsInfo", "bin_dir", "build", "down", "main", "up", "webhook_configurations"]

#: The build script of the pinned controller (package data).
BUILD_LWS_SH = Path(__file__).resolve().parent / "build-lws.sh"
_NAME = "lws-controller"


@dataclass(frozen=True)
class LwsInfo:
    """Where the controller listens."""

    webhook_port: int
    health_port: int


def bin_dir() -> Path:
    """Return the folder ``build-lws.sh`` builds into (it may not exist yet)."""
    out = subprocess.run(["bash", str(BUILD_LWS_SH), "--print-bin-dir"], check=True, capture_output=True, text=True)
    return Path(out.stdout.strip())


def build() -> Path:
    """Run ``build-lws.sh`` (a no-op when cached) and return its folder.

    Raises:
        subprocess.CalledProcessError: the build failed (its output says why).
    """
    subprocess.run(["bash", str(BUILD_LWS_SH)], check=True)
    return bin_dir()


def _json_patch(doc: dict[str, Any], ops: list[dict[str, Any]]) -> None:
    """Apply the ``replace``/``add`` operations of a JSON patch (RFC 6902) with list indexes, the
    only ones the module's webhook patches use."""
    for op in ops:
        if op.get("op") not in ("replace", "add"):
            raise ValueError(f"unsupported JSON patch operation {op!r}")
        parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].lstrip("/").split("/")]
        node: Any = doc
        for part in parts[:-1]:
            node = node[int(part)] if isinstance(node, list) else node[part]
        last = parts[-1]
        if isinstance(node, list):
            node[int(last)] = op["value"]
        else:
            node[last] = op["value"]


def webhook_configurations(bins: Path, port: int, ca_bundle_b64: str) -> list[dict[str, Any]]:
    """Return the module's webhook configurations, patched, each webhook calling
    ``https://127.0.0.1:<port><path>`` with ``ca_bundle_b64`` (the cluster CA, base64)."""
    docs = [d for d in yaml.safe_load_all((bins / "webhooks.yaml").read_text()) if d]
    patches = {
        "MutatingWebhookConfiguration": yaml.safe_load((bins / "webhook-mutating-patch.yaml").read_text()),
        "ValidatingWebhookConfiguration": yaml.safe_load((bins / "webhook-validating-patch.yaml").read_text()),
    }
    for doc in docs:
        _json_patch(doc, patches.get(doc["kind"]) or [])
        doc["metadata"]["name"] = f"lws-{doc['metadata']['name']}"
        for hook in doc["webhooks"]:
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}", "caBundle": ca_bundle_b64}
    return docs


def _serving_certificate(sd: Path, out: Path) -> None:
    """Write ``tls.crt``/``tls.key`` for 127.0.0.1 into ``out``, signed by the cluster's CA."""
    pki = sd / "pki"
    out.mkdir(parents=True, exist_ok=True)
    (out / "ext").write_text("basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
                             "extendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n")
    cluster.openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                    "-keyout", "tls.key", "-out", "tls.csr", "-subj", "/CN=lws-webhook", cwd=out)
    cluster.openssl("x509", "-req", "-in", "tls.csr", "-CA", str(pki / "ca.crt"), "-CAkey", str(pki / "ca.key"),
                    "-CAcreateserial", "-CAserial", str(out / "ca.srl"), "-out", "tls.crt", "-days", "365",
                    "-extfile", "ext", cwd=out)
    (out / "tls.key").chmod(0o600)


def _kubectl(bins: Path, sd: Path, *args: str, input: str | None = None) -> None:
    kubectl = Path(json.loads((sd / "cluster.json").read_text())["bin_dir"]) / "kubectl"
    proc = subprocess.run([str(kubectl), "--kubeconfig", str(sd / "kubeconfig"), *args], input=input,
                          capture_output=True, text=True, timeout=120, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args)} failed: {proc.stderr.strip()}")


def _install_crds(bins: Path, sd: Path) -> None:
    """Create the CRDs (2.8 MB, Pod templates inside): a plain create, where a server-side apply of
    that size can outlast the API server's request timeout on a loaded machine; on a cluster that
    has them already (a second ``up``), replaced. Retried: a timed-out request may still land."""
    deadline = time.monotonic() + 180
    while True:
        try:
            _kubectl(bins, sd, "create", "-f", str(bins / "crds.yaml"))
            return
        except RuntimeError as exc:
            if "AlreadyExists" in str(exc) or "already exists" in str(exc):
                _kubectl(bins, sd, "replace", "-f", str(bins / "crds.yaml"))
                return
            if time.monotonic() > deadline:
                raise
            time.sleep(2)


def up(sd: Path | None = None, *, build_first: bool = True) -> LwsInfo:
    """Install the CRDs and webhooks and start the controller (a no-op when it runs).

    Raises:
        RuntimeError: no cluster in ``sd``, or the controller exited or did not become ready.
        subprocess.CalledProcessError: ``build-lws.sh`` failed.
    """
    sd = (sd or cluster.state_dir()).resolve()
    if not (sd / "kubeconfig").exists():
        raise RuntimeError(f"no cluster in {sd}: run e2e/cluster/cluster.py up first")
    info_path = sd / "lws.json"
    if cluster.running(sd, _NAME) and info_path.exists():
        return LwsInfo(**json.loads(info_path.read_text()))
    bins = build() if build_first else bin_dir()
    home = sd / "lws"
    certs = home / "certs"
    _serving_certificate(sd, certs)
    webhook_port, health_port = free_port(), free_port()
    config = {
        "apiVersion": "config.lws.x-k8s.io/v1alpha1",
        "kind": "Configuration",
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "webhook": {"port": webhook_port, "host": "127.0.0.1", "certDir": str(certs)},
        "metrics": {"bindAddress": "0"},  # controller-runtime: "0" serves no metrics
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
    }
    (home / "config.yaml").write_text(yaml.safe_dump(config))
    _install_crds(bins, sd)
    deadline = time.monotonic() + 60
    while True:  # `kubectl wait` fails outright while the new CRD has no status yet
        try:
            _kubectl(bins, sd, "wait", "--for=condition=Established", "--timeout=30s",
                     "crd/leaderworkersets.leaderworkerset.x-k8s.io", "crd/disaggregatedsets.disaggregatedset.x-k8s.io")
            break
        except RuntimeError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    (sd / "logs").mkdir(parents=True, exist_ok=True)
    (sd / "pids").mkdir(parents=True, exist_ok=True)
    cluster.spawn(sd, _NAME, [str(bins / "lws-controller"), f"--config={home / 'config.yaml'}", "--zap-log-level=info"],
                  env={"KUBECONFIG": str(sd / "kubeconfig"), "NAMESPACE": "lws-system"})
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{health_port}/readyz", timeout=2) as r:
                if r.status == 200:
                    break
        except (urllib.error.URLError, OSError):
            pass
        if cluster.running(sd, _NAME) is None:
            raise RuntimeError(f"{_NAME} exited; last log lines:\n{cluster.tail(sd / 'logs' / f'{_NAME}.log')}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{_NAME} not ready in 60 s; last log lines:\n{cluster.tail(sd / 'logs' / f'{_NAME}.log')}")
        time.sleep(0.3)
    # Webhooks last: the API server calls them from the moment they exist.
    ca = base64.b64encode((sd / "pki" / "ca.crt").read_bytes()).decode()
    _kubectl(bins, sd, "apply", "--server-side", "--force-conflicts", "--field-manager=llmscale-localcluster", "-f", "-",
             input=yaml.safe_dump_all(webhook_configurations(bins, webhook_port, ca)))
    info = LwsInfo(webhook_port, health_port)
    info_path.write_text(json.dumps(info.__dict__) + "\n")
    print(f"[lws] {_NAME} ready: webhooks on https://127.0.0.1:{webhook_port}", flush=True)
    return info


def down(sd: Path | None = None, grace_s: float = 10.0) -> bool:
    """Stop the controller by PID; ``False`` if it was not running. (CRDs and webhooks stay, as
    the cluster they live in is about to go too.)"""
    sd = (sd or cluster.state_dir()).resolve()
    (sd / "lws.json").unlink(missing_ok=True)
    return bool(cluster.stop(sd, _NAME, grace_s))


def main(argv: list[str] | None = None) -> int:
    """``up`` or ``down``; return the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["up", "down"])
    args = parser.parse_args(argv)
    sd = cluster.state_dir()
    if args.command == "up":
        up(sd)
    else:
        down(sd)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
