#!/usr/bin/env python3
"""Smoke test of the local e2e cluster: up, check the behaviour the e2e tests rely on, down.

    python3 e2e/cluster/smoke.py            # uses a temporary state dir; exit 0 when all pass

Checks: server version; fake GPU nodes Ready with nvidia.com/gpu; a Deployment of 2 pods with
`nvidia.com/gpu: 1` and `llmscale.dev/cold-start-seconds: "5"` is scheduled onto the fake nodes,
Running at once and Ready only after ~5 s; the cold start survives a pod update; pods asking for
more GPUs than are free stay Pending (Unschedulable); deleting an owner garbage-collects its
children; `down` leaves no process behind. Standard library only.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
CLUSTER = [sys.executable, "-B", str(HERE / "cluster.py")]
COLD_START_S = 5.0

results: list[tuple[str, bool, str]] = []


def check(name: str, ok: bool, detail: str = "") -> bool:
    results.append((name, ok, detail))
    print(f"{'PASS' if ok else 'FAIL'}: {name}{' - ' + detail if detail else ''}", flush=True)
    return ok


def kubectl(*args: str, input: str | None = None, check_rc: bool = True) -> str:
    p = subprocess.run(["kubectl", *args], input=input, capture_output=True, text=True)
    if check_rc and p.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args)}: {p.stderr.strip()}")
    return p.stdout


def pods(selector: str) -> list[dict]:
    return json.loads(kubectl("get", "pods", "-l", selector, "-o", "json"))["items"]


def cond(pod: dict, kind: str) -> str | None:
    for c in pod.get("status", {}).get("conditions", []) or []:
        if c["type"] == kind:
            return c["status"]
    return None


def ts(s: str) -> dt.datetime:
    return dt.datetime.fromisoformat(s.replace("Z", "+00:00"))


def deployment(name: str, replicas: int, gpus: int, cold_start: float | None) -> str:
    ann = {"llmscale.dev/cold-start-seconds": str(cold_start)} if cold_start is not None else {}
    return json.dumps(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": name}},
                "template": {
                    "metadata": {"labels": {"app": name}, "annotations": ann},
                    "spec": {
                        "containers": [
                            {
                                "name": "engine",
                                "image": "llmscale:dev",
                                "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
                            }
                        ]
                    },
                },
            },
        }
    )


def run_checks() -> None:
    version = json.loads(kubectl("version", "-o", "json"))
    check(
        "server version",
        version["serverVersion"]["gitVersion"].startswith("v1."),
        version["serverVersion"]["gitVersion"],
    )

    nodes = json.loads(kubectl("get", "nodes", "-o", "json"))["items"]
    gpus = sum(int(n["status"]["allocatable"].get("nvidia.com/gpu", "0")) for n in nodes)
    ready = [
        n
        for n in nodes
        if any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"]["conditions"])
    ]
    check(
        "fake GPU nodes Ready",
        len(nodes) >= 1 and len(ready) == len(nodes),
        f"{len(ready)}/{len(nodes)} Ready, {gpus} GPUs",
    )

    # Cold start: Running at once, Ready after the pod's annotation.
    kubectl("apply", "-f", "-", input=deployment("cold", 2, 1, COLD_START_S))
    t0 = time.monotonic()
    running_at = ready_at = None
    touched = False
    while time.monotonic() - t0 < COLD_START_S + 15:
        ps = pods("app=cold")
        now = time.monotonic() - t0
        if running_at is None and len(ps) == 2 and all(p["status"].get("phase") == "Running" for p in ps):
            running_at = now
        if not touched and running_at is not None and now > 2:
            # An update during the cold start must not restart it.
            for p in ps:
                kubectl("label", "pod", p["metadata"]["name"], "smoke=touched", "--overwrite")
            touched = True
        if len(ps) == 2 and all(cond(p, "Ready") == "True" for p in ps):
            ready_at = now
            break
        time.sleep(0.2)
    ps = pods("app=cold")
    nodes_used = sorted({p["spec"].get("nodeName", "") for p in ps})
    check(
        "pods scheduled onto fake nodes",
        all(n.startswith(os.environ.get("LLMSCALE_NODE_PREFIX", "gpu-node-")) for n in nodes_used),
        ",".join(nodes_used),
    )
    check("pods Running at once", running_at is not None and running_at < 3, f"Running after {running_at}s")
    if ready_at is not None:
        # Measured in the API: Ready transition vs. the pod's start (both second precision).
        lag = [
            (
                ts(next(c for c in p["status"]["conditions"] if c["type"] == "Ready")["lastTransitionTime"])
                - ts(p["status"]["startTime"])
            ).total_seconds()
            for p in ps
        ]
        ok = COLD_START_S - 1.5 <= ready_at <= COLD_START_S + 3 and all(
            COLD_START_S - 1 <= x <= COLD_START_S + 2 for x in lag
        )
        check(
            "Ready only after the cold start (~5 s, despite an update)",
            ok,
            f"all Ready {ready_at:.1f}s after apply; Ready - startTime = {lag}",
        )
    else:
        check("Ready only after the cold start (~5 s, despite an update)", False, "pods never became Ready")

    # More GPUs than exist: Pending, Unschedulable.
    kubectl("apply", "-f", "-", input=deployment("toobig", 1, gpus + 1, None))
    reason = None
    for _ in range(50):
        ps = pods("app=toobig")
        if ps:
            for c in ps[0].get("status", {}).get("conditions", []) or []:
                if c["type"] == "PodScheduled" and c["status"] == "False":
                    reason = c.get("reason")
        if reason:
            break
        time.sleep(0.2)
    phase = ps[0]["status"].get("phase") if ps else None
    check(
        "too many GPUs: Pending/Unschedulable",
        phase == "Pending" and reason == "Unschedulable",
        f"{phase}/{reason}",
    )

    # Garbage collection: deleting the Deployment removes its ReplicaSet and pods.
    kubectl("delete", "deployment", "cold", "toobig", "--wait=false")
    gone = False
    for _ in range(100):
        left = pods("app in (cold,toobig)")
        rs = json.loads(kubectl("get", "rs", "-o", "json"))["items"]
        if not left and not rs:
            gone = True
            break
        time.sleep(0.2)
    check("owner deleted: children garbage-collected", gone)


def main() -> int:
    tmp = tempfile.mkdtemp(prefix="llmscale-smoke-")
    os.environ["LLMSCALE_CLUSTER_DIR"] = tmp
    t = time.monotonic()
    up = subprocess.run([*CLUSTER, "up"])
    if not check("cluster up", up.returncode == 0, f"{time.monotonic() - t:.1f}s"):
        subprocess.run([*CLUSTER, "down"])
        print("0 passed, 1 failed")
        return 1
    env = subprocess.run([*CLUSTER, "env"], capture_output=True, text=True, check=True).stdout
    for line in env.splitlines():
        k, v = line.removeprefix("export ").split("=", 1)
        os.environ[k] = v.replace("$PATH", os.environ.get("PATH", ""))
    pids = [int(p.read_text().split()[0]) for p in Path(tmp, "pids").glob("*.pid")]
    try:
        run_checks()
    except Exception as e:  # a broken check must still bring the cluster down
        check("checks ran", False, repr(e))
    finally:
        subprocess.run([*CLUSTER, "down"])
    alive = [
        p
        for p in pids
        if Path(f"/proc/{p}").exists()
        and "Z" not in Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[:1]
    ]
    check("down: no process left", not alive, f"pids {pids} alive={alive}")
    subprocess.run([*CLUSTER, "down", "--purge"], capture_output=True)
    passed = sum(ok for _, ok, _ in results)
    print(f"{passed} passed, {len(results) - passed} failed")
    return 0 if passed == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
