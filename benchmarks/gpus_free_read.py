"""What the GPUs-free read (``llmscale.controller.gpusfree``, ``operator.readNodes``) costs the API
server as the cluster grows, and the period it then runs at (issue 22, case 4).

    .venv/bin/python benchmarks/gpus_free_read.py [--nodes 200] [--pods 2000] [--reads 3] [--kubeconfig PATH]

Without ``--kubeconfig`` it starts the local control plane (the pinned binaries of
``e2e/cluster/build.sh``, a state dir of its own, stopped at the end). It adds ``--nodes`` KWOK
GPU nodes and ``--pods`` pods bound to them (``spec.nodeName`` set, so no scheduling), then runs the
reader's own read (the paginated node list and bound-pod list, :func:`read_once`) ``--reads``
times. Prints the pages (requests) and seconds of one read, the period the reader then keeps
(``max(READ_PERIOD_S, min(seconds / READ_DUTY, READ_PERIOD_MAX_S))``) and the requests per hour at a fixed 15 s period
against that period.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubernetes.client
import kubernetes.config

from llmscale.controller.gpusfree import (
    READ_DUTY,
    READ_PERIOD_MAX_S,
    READ_PERIOD_S,
    ClusterGPUs,
    read_cluster_gpus,
)
from llmscale.localcluster.cluster import nodes_manifest

ROOT = Path(__file__).resolve().parents[1]
GPUS_PER_NODE = 8


@dataclass
class Read:
    """One read: its requests (pages), seconds and answer."""

    requests: int
    seconds: float
    cluster: ClusterGPUs

    @property
    def cycle_s(self) -> float:
        """The period the reader keeps after this read."""
        return max(READ_PERIOD_S, min(self.seconds / READ_DUTY, READ_PERIOD_MAX_S))


def read_once(api: kubernetes.client.ApiClient) -> Read:
    """The reader's read (:func:`llmscale.controller.gpusfree.read_cluster_gpus`), its requests
    (pages) counted."""
    calls = [0]
    call_api = api.call_api

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        return call_api(*args, **kwargs)

    api.call_api = counted  # type: ignore[method-assign]
    try:
        started = time.perf_counter()
        cluster = read_cluster_gpus(api)
        return Read(calls[0], time.perf_counter() - started, cluster)
    finally:
        del api.call_api


def populate(api: kubernetes.client.ApiClient, nodes: int, pods: int) -> str:
    """Add ``nodes`` GPU nodes and ``pods`` pods bound to them round robin (the first
    ``GPUS_PER_NODE`` per node request a GPU each); return the pods' namespace."""
    core = kubernetes.client.CoreV1Api(api)
    prefix = f"bench-{uuid.uuid4().hex[:4]}-"
    for node in json.loads(nodes_manifest(nodes, GPUS_PER_NODE, "NVIDIA-H100-80GB-HBM3", prefix))["items"]:
        core.create_node(node)
    namespace = f"gpus-bench-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": namespace}})
    deadline = time.monotonic() + 60
    while True:  # pods are refused until the namespace's default ServiceAccount exists
        try:
            core.read_namespaced_service_account("default", namespace)
            break
        except kubernetes.client.ApiException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)
    for i in range(pods):
        gpu = i // max(nodes, 1) < GPUS_PER_NODE
        resources = {"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}} if gpu else {}
        core.create_namespaced_pod(namespace, {
            "metadata": {"name": f"p{i}"},
            "spec": {"nodeName": f"{prefix}{i % nodes}",
                     "tolerations": [{"operator": "Exists"}],
                     "containers": [{"name": "c", "image": "registry.example/none:1", "resources": resources}]},
        })
    return namespace


def _local_cluster(state: Path) -> Path:
    script = ROOT / "e2e" / "cluster" / "cluster.py"
    env = {**os.environ, "LLMSCALE_CLUSTER_DIR": str(state)}
    env.pop("KUBECONFIG", None)
    subprocess.run([sys.executable, "-B", str(script), "up", "--nodes", "1"], env=env, check=True,
                   stdout=subprocess.DEVNULL)
    return state / "kubeconfig"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=200, help="KWOK GPU nodes to add")
    parser.add_argument("--pods", type=int, default=2000, help="pods to bind to them")
    parser.add_argument("--reads", type=int, default=3, help="reads to time (the median is printed)")
    parser.add_argument("--kubeconfig", default=None, help="an existing cluster (default: start the local one)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="llmscale-gpus-bench-") as tmp:
        state = Path(tmp)
        kubeconfig = Path(args.kubeconfig) if args.kubeconfig else _local_cluster(state)
        try:
            api = kubernetes.config.new_client_from_config(config_file=str(kubeconfig))
            started = time.perf_counter()
            populate(api, args.nodes, args.pods)
            print(f"added {args.nodes} nodes and {args.pods} bound pods in {time.perf_counter() - started:.0f} s")
            reads = sorted((read_once(api) for _ in range(args.reads)), key=lambda r: r.seconds)
        finally:
            if not args.kubeconfig:
                subprocess.run([sys.executable, "-B", str(ROOT / "e2e" / "cluster" / "cluster.py"), "down"],
                               env={**os.environ, "LLMSCALE_CLUSTER_DIR": str(state)}, check=False,
                               stdout=subprocess.DEVNULL)
    read = reads[len(reads) // 2]
    held = sum(used.get("nvidia.com/gpu", 0.0) for used in read.cluster.used.values())
    print(f"one read: {len(read.cluster.nodes)} nodes, {held:.0f} GPUs held by bound pods, "
          f"{read.requests} requests, {read.seconds:.2f} s (median of {len(reads)})")
    fixed = 3600 / READ_PERIOD_S * read.requests
    grown = 3600 / read.cycle_s * read.requests
    print(f"{'period':<34} {'s':>8} {'requests/h':>12}")
    print(f"{'before: fixed':<34} {READ_PERIOD_S:>8.0f} {fixed:>12.0f}")
    print(f"{'after: max(15 s, min(read / 5 %, 300 s))':<34} {read.cycle_s:>8.0f} {grown:>12.0f}")
    # Issue 22's cluster, 4,000 nodes and 120,000 bound pods, scaled from this read per object.
    objects = len(read.cluster.nodes) + args.pods
    if objects:
        big = 124_000
        seconds = read.seconds * big / objects
        pages = math.ceil(4000 / 500) + math.ceil(120_000 / 500)
        cycle = max(READ_PERIOD_S, min(seconds / READ_DUTY, READ_PERIOD_MAX_S))
        print(f"estimate at 4,000 nodes / 120,000 pods (this read's {read.seconds / objects * 1e3:.2f} ms per object): "
              f"{pages} requests, {seconds:.1f} s a read, every {cycle:.0f} s: "
              f"{3600 / READ_PERIOD_S * pages:.0f} -> {3600 / cycle * pages:.0f} requests/h")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
