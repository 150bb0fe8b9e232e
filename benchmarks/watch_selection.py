"""What the operator's pod watch receives on a cluster full of other pods: events and bytes with the
label selector the operator sends (Kopf's ``settings.watching.label_selectors``, set by
``llmscale.controller.handlers.configure_kopf``) against the unselected watch it sent before
(issue 11, case 11: the indexes' ``labels=`` filter is applied by Kopf after the event arrived).

    .venv/bin/python benchmarks/watch_selection.py [--pods 300] [--ours 3] [--kubeconfig PATH]

Without ``--kubeconfig`` it starts the local control plane (the pinned binaries of
``e2e/cluster/build.sh``, a state dir of its own, stopped at the end). It opens both watches on
``/api/v1/pods`` from the same resourceVersion, then creates ``--pods`` unrelated pods and
``--ours`` pods labelled as llmscale's in one namespace (KWOK schedules and starts each: several
events per pod), and counts what each watch delivered until the cluster is quiet. Prints one row
per watch and the ratio.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import kubernetes.client
import kubernetes.config
import kubernetes.watch
import urllib3
from kopf._cogs.structs.references import Resource

from llmscale.controller.handlers import configure_kopf
from llmscale.controller.settings import OperatorSettings

ROOT = Path(__file__).resolve().parents[1]
PODS = Resource(group="", version="v1", plural="pods", kind="Pod", singular="pod", namespaced=True)


@dataclass
class Count:
    """Events and bytes of JSON one watch delivered."""

    events: int = 0
    bytes: int = 0


def operator_selector() -> str:
    """The label selector Kopf sends on the operator's pod watch."""
    settings = configure_kopf(OperatorSettings(all_namespaces=True))
    return ",".join(sorted(set(settings.watching.label_selectors.collect(PODS))))


def _watch(core: kubernetes.client.CoreV1Api, selector: str | None, rv: str, count: Count, stop: threading.Event,
           ready: threading.Event) -> None:
    watch = kubernetes.watch.Watch()
    kwargs = {"label_selector": selector} if selector else {}
    ready.set()
    with contextlib.suppress(urllib3.exceptions.HTTPError, OSError):  # the cluster went down first
        for event in watch.stream(core.list_pod_for_all_namespaces, resource_version=rv, timeout_seconds=600,
                                  _request_timeout=620, **kwargs):
            if stop.is_set():
                watch.stop()
                break
            count.events += 1
            count.bytes += len(json.dumps(event["raw_object"]))


def measure(api: kubernetes.client.ApiClient, pods: int, ours: int, quiet_s: float = 5.0) -> dict[str, Count]:
    """Create ``pods`` unrelated and ``ours`` llmscale-labelled pods in a new namespace and return
    what the unselected and the selected pod watch delivered (``{"unselected", "selected"}``)."""
    core = kubernetes.client.CoreV1Api(api)
    namespace = f"watch-bench-{uuid.uuid4().hex[:6]}"
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
    rv = core.list_pod_for_all_namespaces(limit=1).metadata.resource_version
    counts = {"unselected": Count(), "selected": Count()}
    stop = threading.Event()
    threads = []
    for key, selector in (("unselected", None), ("selected", operator_selector())):
        ready = threading.Event()
        thread = threading.Thread(target=_watch, args=(core, selector, rv, counts[key], stop, ready), daemon=True)
        thread.start()
        ready.wait(10)
        threads.append(thread)
    try:
        for i in range(pods + ours):
            mine = i >= pods
            labels = ({"app.kubernetes.io/managed-by": "llmscale", "llmscale.dev/deployment": "bench",
                       "llmscale.dev/pool": "interactive"} if mine else {"app": "other"})
            core.create_namespaced_pod(namespace, {
                "metadata": {"name": f"{'ours' if mine else 'other'}-{i}", "labels": labels},
                "spec": {"containers": [{"name": "c", "image": "registry.example/none:1"}]},
            })
        # Quiet: no new event on the unselected watch for quiet_s.
        last, since = -1, time.monotonic()
        while time.monotonic() - since < quiet_s:
            time.sleep(0.5)
            if counts["unselected"].events != last:
                last, since = counts["unselected"].events, time.monotonic()
    finally:
        stop.set()
        core.delete_namespace(namespace, propagation_policy="Background")
    return counts


def _local_cluster(state: Path) -> Path:
    script = ROOT / "e2e" / "cluster" / "cluster.py"
    env = {**os.environ, "LLMSCALE_CLUSTER_DIR": str(state)}
    env.pop("KUBECONFIG", None)
    subprocess.run([sys.executable, "-B", str(script), "up", "--nodes", "1"], env=env, check=True,
                   stdout=subprocess.DEVNULL)
    return state / "kubeconfig"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=300, help="unrelated pods to create")
    parser.add_argument("--ours", type=int, default=3, help="pods labelled as llmscale's")
    parser.add_argument("--kubeconfig", default=None, help="an existing cluster (default: start the local one)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="llmscale-watch-bench-") as tmp:
        state = Path(tmp)
        kubeconfig = Path(args.kubeconfig) if args.kubeconfig else _local_cluster(state)
        try:
            api = kubernetes.config.new_client_from_config(config_file=str(kubeconfig))
            counts = measure(api, args.pods, args.ours)
        finally:
            if not args.kubeconfig:
                subprocess.run([sys.executable, "-B", str(ROOT / "e2e" / "cluster" / "cluster.py"), "down"],
                               env={**os.environ, "LLMSCALE_CLUSTER_DIR": str(state)}, check=False,
                               stdout=subprocess.DEVNULL)
    un, sel = counts["unselected"], counts["selected"]
    print(f"pod watch, {args.pods} unrelated pods and {args.ours} of llmscale's created")
    print(f"{'watch':<44} {'events':>8} {'KiB':>10}")
    print(f"{'before: no selector (Kopf labels= filter)':<44} {un.events:>8} {un.bytes / 1024:>10.1f}")
    print(f"{'after: labelSelector ' + operator_selector():<44} {sel.events:>8} {sel.bytes / 1024:>10.1f}")
    ratio = un.events / sel.events if sel.events else float("inf")
    print(f"events received: {ratio:.1f}x fewer with the selector")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
