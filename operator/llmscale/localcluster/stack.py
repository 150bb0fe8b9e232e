"""The whole local stack in one command: build (cached), control plane, Prometheus, pod runner.

    .venv/bin/python e2e/stack.py up        # build.sh (no-op when cached), cluster up, add-ons up
    .venv/bin/python e2e/stack.py status
    .venv/bin/python e2e/stack.py down      # everything stopped by PID
    .venv/bin/python e2e/stack.py env       # export lines: KUBECONFIG, PATH, Prometheus, router

(``e2e/stack.py`` runs :func:`main`; so does ``python -m llmscale.localcluster.stack``.) State lives
in ``${LLMSCALE_CLUSTER_DIR:-$PWD/.cluster}``. Used by the e2e suite's session fixture and by
``llmscale demo``; see docs/e2e.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from llmscale.localcluster import addons

#: The build script of the pinned binaries (package data; ``e2e/cluster/build.sh`` runs it).
BUILD_SH = Path(__file__).resolve().parent / "build.sh"
#: How a child process runs the control plane's script (:mod:`llmscale.localcluster.cluster`).
CLUSTER = [sys.executable, "-B", "-m", "llmscale.localcluster.cluster"]

__all__ = ["BUILD_SH", "Stack", "addons", "build", "down", "main", "up"]


@dataclass(frozen=True)
class Stack:
    """A running local stack: where to reach each part."""

    state_dir: Path
    kubeconfig: Path
    bin_dir: Path
    prometheus_url: str
    router_url: str

    @property
    def kubectl(self) -> Path:
        """The cached kubectl of the pinned release."""
        return self.bin_dir / "kubectl"

    def env(self) -> dict[str, str]:
        """Environment for child processes: KUBECONFIG, PATH with the cached binaries first."""
        return {
            **os.environ,
            "KUBECONFIG": str(self.kubeconfig),
            "LLMSCALE_CLUSTER_DIR": str(self.state_dir),
            "PATH": f"{self.bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        }


def _env_for(sd: Path) -> dict[str, str]:
    return {**os.environ, "LLMSCALE_CLUSTER_DIR": str(sd)}


def build(log: bool = True) -> Path:
    """Run ``build.sh`` (a no-op when the binaries are cached; minutes the first time,
    with progress on stdout) and return the binaries' folder.

    Raises:
        subprocess.CalledProcessError: the build failed (its output says why).
    """
    subprocess.run(["bash", str(BUILD_SH)], check=True, stdout=None if log else subprocess.DEVNULL)
    out = subprocess.run(["bash", str(BUILD_SH), "--print-bin-dir"], check=True, capture_output=True, text=True)
    return Path(out.stdout.strip())


def up(sd: Path | None = None, *, time_scale: float = 1.0, nodes: int | None = None,
       gpus_per_node: int | None = None) -> Stack:
    """Build (cached), start the control plane and the add-ons, and return the :class:`Stack`.

    Raises:
        subprocess.CalledProcessError: build.sh or ``cluster.py up`` failed (their output says why).
        RuntimeError: an add-on did not start.
    """
    sd = (sd or addons.state_dir()).resolve()
    t0 = time.monotonic()
    bins = build()
    cmd = [*CLUSTER, "up", "--no-build"]
    if nodes is not None:
        cmd += ["--nodes", str(nodes)]
    if gpus_per_node is not None:
        cmd += ["--gpus-per-node", str(gpus_per_node)]
    subprocess.run(cmd, check=True, env=_env_for(sd))
    info = addons.up(sd, time_scale=time_scale)
    print(f"[stack] up in {time.monotonic() - t0:.0f} s: state {sd}", flush=True)
    return Stack(sd, sd / "kubeconfig", bins, info.prometheus_url, info.router_url)


def down(sd: Path | None = None) -> None:
    """Stop the add-ons, the engines and the control plane, all by PID."""
    sd = (sd or addons.state_dir()).resolve()
    addons.down(sd)
    subprocess.run([*CLUSTER, "down"], check=False, env=_env_for(sd))


def main(argv: list[str] | None = None) -> int:
    """``up``, ``down``, ``status`` or ``env`` of the whole stack; return the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["up", "down", "status", "env"])
    parser.add_argument("--time-scale", type=float, default=1.0, help="engine seconds per wall second")
    args = parser.parse_args(argv)
    sd = addons.state_dir()
    if args.command == "up":
        stack = up(sd, time_scale=args.time_scale)
        print(f"export KUBECONFIG={stack.kubeconfig}")
        print(f"export LLMSCALE_E2E_PROMETHEUS_URL={stack.prometheus_url}")
        print(f"export LLMSCALE_E2E_ROUTER_URL={stack.router_url}")
    elif args.command == "down":
        down(sd)
    elif args.command == "status":
        subprocess.run([*CLUSTER, "status"], check=False, env=_env_for(sd))
        print(json.dumps(addons.status(sd), indent=2))
    else:
        info = addons.read_info(sd)
        subprocess.run([*CLUSTER, "env"], check=False, env=_env_for(sd))
        if info:
            print(f"export LLMSCALE_E2E_PROMETHEUS_URL={info.prometheus_url}")
            print(f"export LLMSCALE_E2E_ROUTER_URL={info.router_url}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
