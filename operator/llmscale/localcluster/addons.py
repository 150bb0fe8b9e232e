"""The local cluster's add-ons: Prometheus (Debian's package) and the pod runner with its router.

    .venv/bin/python -m llmscale.localcluster.addons up       # after e2e/cluster/cluster.py up
    .venv/bin/python -m llmscale.localcluster.addons status
    .venv/bin/python -m llmscale.localcluster.addons down

Both run on 127.0.0.1 and are tracked by PID in the cluster's state dir
(``${LLMSCALE_CLUSTER_DIR:-$PWD/.cluster}/pids/``), in the pid-file format of
:mod:`llmscale.localcluster.cluster` (``<pid> <start time> <argv0>``), so ``cluster.py down`` stops them too
and a reused PID is never signalled. The engines the pod runner starts are tracked the same way
under ``<state>/engines/`` and swept by :func:`down` should the pod runner itself have died.

Where they listen is written to ``<state>/addons.json``::

    {"prometheus_url": "http://127.0.0.1:P", "router_url": "http://127.0.0.1:R", ...}

:func:`stop_prometheus` and :func:`start_prometheus` stop and restart Prometheus alone, on the same
port and with the same data, for the "Prometheus went away" scenario of the e2e suite.
:func:`start_secured_prometheus` starts a second one, scraping the same engines, that demands TLS
and basic auth (``--web.config.file``), for the authenticated-Prometheus scenario.

Prometheus also scrapes the router's own ``/metrics`` (requests held for a Service with no ready
engine, requests received): the demand signals a scale-from-zero wake query reads.

Runs with the project's virtualenv (the pod runner needs the Kubernetes client and aiohttp).
Test infrastructure, not product code.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from llmscale.localcluster import cluster
from llmscale.localcluster.ports import free_port
from llmscale.localcluster.prometheus_config import write_operator_targets, write_prometheus_config

__all__ = [
    "SCRAPE_INTERVAL_S", "AddonsInfo", "announce_operator", "down", "main", "operator_targets_path", "read_info",
    "start_podrunner", "start_prometheus", "start_secured_prometheus", "state_dir", "status", "stop_podrunner",
    "stop_prometheus", "stop_secured_prometheus", "sweep_engines", "up",
]

#: Process name (pid file, log) of the Prometheus that demands TLS and basic auth.
SECURED = "prometheus-auth"

#: Seconds between scrapes. 1 s: the e2e scenarios tick every second and cold starts last
#: seconds, so a 15 s production scrape would hide everything they check.
SCRAPE_INTERVAL_S = 1.0


def state_dir() -> Path:
    """The cluster's state dir: ``$LLMSCALE_CLUSTER_DIR``, else ``$PWD/.cluster`` (as cluster.py)."""
    return Path(os.environ.get("LLMSCALE_CLUSTER_DIR") or (Path.cwd() / ".cluster")).resolve()


@dataclass
class AddonsInfo:
    """Where the add-ons listen (``addons.json`` in the state dir)."""

    prometheus_url: str
    router_url: str
    prometheus_port: int
    router_port: int
    scrape_interval_s: float
    time_scale: float


def _log(msg: str) -> None:
    print(f"[addons] {msg}", flush=True)


def _http_ok(url: str, timeout: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return bool(r.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def _wait(what: str, check: Any, timeout_s: float, sd: Path, name: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if cluster.running(sd, name) is None:
            raise RuntimeError(f"{name} exited while waiting for {what}; last log lines:\n"
                               f"{cluster.tail(sd / 'logs' / f'{name}.log')}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout_s:.0f} s waiting for {what}; last log lines:\n"
                               f"{cluster.tail(sd / 'logs' / f'{name}.log')}")
        time.sleep(0.2)


def read_info(sd: Path | None = None) -> AddonsInfo | None:
    """Return the add-ons' addresses from ``addons.json``, or ``None`` when there is none."""
    path = (sd or state_dir()) / "addons.json"
    if not path.exists():
        return None
    return AddonsInfo(**json.loads(path.read_text()))


def _kubeconfig(sd: Path) -> Path:
    kc = sd / "kubeconfig"
    if not kc.exists():
        raise RuntimeError(f"no cluster in {sd} (missing {kc}): run e2e/cluster/cluster.py up first")
    return kc


def supports_kubernetes_sd(binary: str) -> bool:
    """Whether this Prometheus build has Kubernetes service discovery (Debian's has not)."""
    promtool = Path(binary).with_name("promtool")
    if not promtool.exists():
        return False
    with tempfile.NamedTemporaryFile("w", suffix=".yml") as f:
        f.write("scrape_configs:\n- job_name: probe\n  kubernetes_sd_configs: [{role: pod}]\n")
        f.flush()
        return subprocess.run([str(promtool), "check", "config", f.name], capture_output=True).returncode == 0


def start_prometheus(sd: Path | None = None, port: int | None = None,
                     scrape_interval_s: float = SCRAPE_INTERVAL_S) -> str:
    """Start Prometheus on 127.0.0.1 (``port``, else the one in ``addons.json``, else a free one);
    return its base URL once ``/-/ready`` answers.

    Discovery: Kubernetes service discovery when the binary has it, else the pod runner's HTTP
    service discovery (``<router>/sd``; the pod runner must be started first).

    Raises:
        RuntimeError: ``prometheus`` is not installed, or it exited or did not become ready in 60 s.
    """
    sd = sd or state_dir()
    binary = shutil.which("prometheus")
    if binary is None:
        raise RuntimeError("prometheus is not on PATH: run e2e/cluster/build.sh (installs Debian's package)")
    info = read_info(sd)
    port = port or (info.prometheus_port if info else None) or free_port()
    url = f"http://127.0.0.1:{port}"
    if cluster.running(sd, "prometheus"):
        return url
    (sd / "logs").mkdir(parents=True, exist_ok=True)
    (sd / "pids").mkdir(parents=True, exist_ok=True)
    config = _config(sd, binary, sd / "prometheus.yml", scrape_interval_s)
    cluster.spawn(sd, "prometheus", [
        binary,
        f"--config.file={config}",
        f"--web.listen-address=127.0.0.1:{port}",
        f"--storage.tsdb.path={sd / 'prometheus-data'}",
        "--storage.tsdb.retention.time=1d",
        "--log.level=warn",
    ])
    _wait(f"Prometheus {url}/-/ready", lambda: _http_ok(f"{url}/-/ready"), 60, sd, "prometheus")
    return url


def _config(sd: Path, binary: str, path: Path, scrape_interval_s: float) -> Path:
    """Write the scrape configuration (engines, and the router when one runs) to ``path``."""
    router = read_info(sd)
    router_port = router.router_port if router else _pending_router_port(sd)
    http_sd = None
    if not supports_kubernetes_sd(binary):
        if router_port is None:
            raise RuntimeError("this Prometheus lacks Kubernetes service discovery and no pod runner runs")
        http_sd = f"http://127.0.0.1:{router_port}/sd"
    router_address = f"127.0.0.1:{router_port}" if router_port is not None else None
    targets = operator_targets_path(sd)
    if not targets.exists():
        write_operator_targets(targets, [])
    return write_prometheus_config(path, _kubeconfig(sd), scrape_interval_s, http_sd, router_address, targets)


def operator_targets_path(sd: Path) -> Path:
    """The file service discovery file naming the operators Prometheus scrapes (``announce_operator``)."""
    return sd / "operator-targets.json"


def announce_operator(sd: Path, address: str | None) -> None:
    """Have the local Prometheus scrape the operator's ``/metrics`` at ``address`` (``host:port``),
    or no operator with ``None``: the operator's port changes with every start."""
    write_operator_targets(operator_targets_path(sd), [address] if address else [])


def start_secured_prometheus(sd: Path, web_config: Path, ca_file: Path, username: str, password: str,
                             scrape_interval_s: float = SCRAPE_INTERVAL_S) -> str:
    """Start a second Prometheus, scraping what the first does, that serves HTTPS and demands basic
    auth (``--web.config.file=web_config``); return its ``https://`` URL once ``/-/ready`` answers
    to ``username``/``password`` over a connection verified with ``ca_file``.

    Raises:
        RuntimeError: ``prometheus`` is not installed, or it exited or did not become ready in 60 s.
    """
    binary = shutil.which("prometheus")
    if binary is None:
        raise RuntimeError("prometheus is not on PATH: run e2e/cluster/build.sh (installs Debian's package)")
    port = free_port()
    url = f"https://127.0.0.1:{port}"
    (sd / "logs").mkdir(parents=True, exist_ok=True)
    (sd / "pids").mkdir(parents=True, exist_ok=True)
    config = _config(sd, binary, sd / f"{SECURED}.yml", scrape_interval_s)
    cluster.spawn(sd, SECURED, [
        binary,
        f"--config.file={config}",
        f"--web.config.file={web_config}",
        f"--web.listen-address=127.0.0.1:{port}",
        f"--storage.tsdb.path={sd / f'{SECURED}-data'}",
        "--storage.tsdb.retention.time=1d",
        "--log.level=warn",
    ])
    context = ssl.create_default_context(cafile=str(ca_file))
    token = base64.b64encode(f"{username}:{password}".encode()).decode()

    def ready() -> bool:
        request = urllib.request.Request(f"{url}/-/ready", headers={"Authorization": f"Basic {token}"})
        try:
            with urllib.request.urlopen(request, timeout=2.0, context=context) as r:
                return bool(r.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    _wait(f"Prometheus {url}/-/ready (TLS, basic auth)", ready, 60, sd, SECURED)
    return url


def stop_secured_prometheus(sd: Path | None = None, grace_s: float = 10.0) -> bool:
    """Stop the secured Prometheus by PID; ``False`` if it was not running."""
    return bool(cluster.stop(sd or state_dir(), SECURED, grace_s))


def _pending_router_port(sd: Path) -> int | None:
    path = sd / "router.port"
    return int(path.read_text()) if path.exists() else None


def stop_prometheus(sd: Path | None = None, grace_s: float = 10.0) -> bool:
    """Stop Prometheus by PID (SIGTERM, SIGKILL after ``grace_s``); ``False`` if it was not running."""
    return bool(cluster.stop(sd or state_dir(), "prometheus", grace_s))


def start_podrunner(sd: Path | None = None, port: int | None = None, time_scale: float = 1.0) -> str:
    """Start the pod runner (engines for Ready pods) and its router; return the router's base URL.

    Raises:
        RuntimeError: it exited or its ``/status`` did not answer within 60 s.
    """
    sd = sd or state_dir()
    info = read_info(sd)
    port = port or (info.router_port if info else None) or free_port()
    url = f"http://127.0.0.1:{port}"
    if cluster.running(sd, "podrunner"):
        return url
    (sd / "router.port").write_text(str(port))
    (sd / "logs").mkdir(parents=True, exist_ok=True)
    (sd / "pids").mkdir(parents=True, exist_ok=True)
    cluster.spawn(sd, "podrunner", [
        sys.executable, "-m", "llmscale.localcluster.podrunner",
        "--kubeconfig", str(_kubeconfig(sd)),
        "--state-dir", str(sd),
        "--router-port", str(port),
        "--time-scale", f"{time_scale:g}",
    ])
    _wait(f"pod runner {url}/status", lambda: _http_ok(f"{url}/status"), 60, sd, "podrunner")
    return url


def stop_podrunner(sd: Path | None = None, grace_s: float = 10.0) -> bool:
    """Stop the pod runner by PID (it stops its engines), then any engine it left behind."""
    sd = sd or state_dir()
    stopped = bool(cluster.stop(sd, "podrunner", grace_s))
    sweep_engines(sd)
    return stopped


def sweep_engines(sd: Path) -> int:
    """SIGKILL engines whose pid files are still in ``<state>/engines/`` (their pod runner died);
    a pid file whose start time does not match the live process is only removed."""
    killed = 0
    for pf in sorted((sd / "engines").glob("*.pid")) if (sd / "engines").is_dir() else []:
        parts = pf.read_text().split()
        with contextlib.suppress(ValueError, IndexError):
            pid = int(parts[0])
            started = cluster.proc_start_time(pid)
            if started is not None and (len(parts) < 2 or parts[1] == str(started)):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                killed += 1
        pf.unlink(missing_ok=True)
    return killed


def up(sd: Path | None = None, time_scale: float = 1.0, scrape_interval_s: float = SCRAPE_INTERVAL_S) -> AddonsInfo:
    """Start Prometheus and the pod runner (no-op for what already runs); write ``addons.json``."""
    sd = sd or state_dir()
    router = start_podrunner(sd, time_scale=time_scale)  # first: it serves Prometheus' discovery
    prom = start_prometheus(sd, scrape_interval_s=scrape_interval_s)
    info = AddonsInfo(prom, router, int(prom.rsplit(":", 1)[1]), int(router.rsplit(":", 1)[1]),
                      scrape_interval_s, time_scale)
    (sd / "addons.json").write_text(json.dumps(asdict(info), indent=2) + "\n")
    _log(f"Prometheus on {prom}, router on {router}")
    return info


def down(sd: Path | None = None, grace_s: float = 10.0) -> int:
    """Stop the pod runner (and engines) and Prometheus by PID; return how many were running."""
    sd = sd or state_dir()
    n = int(stop_podrunner(sd, grace_s)) + int(stop_prometheus(sd, grace_s))
    return n + int(stop_secured_prometheus(sd, grace_s))


def status(sd: Path | None = None) -> dict[str, Any]:
    """Return what runs: PIDs of Prometheus and the pod runner, addresses, the router's engines."""
    sd = sd or state_dir()
    info = read_info(sd)
    out: dict[str, Any] = {
        "prometheus_pid": cluster.running(sd, "prometheus"),
        "podrunner_pid": cluster.running(sd, "podrunner"),
        "addresses": asdict(info) if info else None,
    }
    if info and out["podrunner_pid"]:
        with contextlib.suppress(urllib.error.URLError, OSError, ValueError), \
                urllib.request.urlopen(f"{info.router_url}/status", timeout=3) as r:
            out["router"] = json.loads(r.read())
    return out


def main(argv: list[str] | None = None) -> int:
    """The add-ons' command line (module docstring); return the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["up", "down", "status", "stop-prometheus", "start-prometheus"])
    parser.add_argument("--time-scale", type=float, default=float(os.environ.get("LLMSCALE_TIME_SCALE", "1")))
    args = parser.parse_args(argv)
    sd = state_dir()
    if args.command == "up":
        up(sd, time_scale=args.time_scale)
    elif args.command == "down":
        _log(f"stopped {down(sd)} process(es) in {sd}")
    elif args.command == "stop-prometheus":
        stop_prometheus(sd)
    elif args.command == "start-prometheus":
        _log(f"Prometheus on {start_prometheus(sd)}")
    else:
        print(json.dumps(status(sd), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
