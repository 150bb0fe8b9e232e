"""The operator on a shared cluster (issue 11, cases 6, 8, 10, 12-15), against the real local
control plane of conftest.py: kube-apiserver, the controller manager (disruption, ReplicaSet, HPA,
garbage collector and quota controllers), the scheduler and KWOK nodes.

The operator runs as ``llmscale run`` with the environment the chart gives it (namespaced install
of namespace ``shared``, peering ``llmscale``, the chart's PriorityClasses) and the admin's
kubeconfig; Prometheus is a port nobody listens on, so every signal is unknown and the policy
holds, moving replicas only by ``spec.replicas`` bounds. Each case is the issue's input:

- case 13: an LLMDeployment restored with Kopf's annotations copied gets its children;
- case 12: a real HorizontalPodAutoscaler (the controller manager acts on it) and a KEDA
  ScaledObject on the child Deployment: the operator stops writing its replicas and says so;
- case 10's kind: a child refused by the API server (a ResourceQuota) gives a condition, an Event
  and a retry;
- case 15: a standalone ``llmscale run`` beside the running operator refuses to start, and a
  default one joins its peering (one of the two works);
- case 14: with the operator stopped, a deletion waits on the finalizer docs/deploy.md names, and
  its command finishes the deletion;
- case 6: a node drain's eviction of an unhealthy pod passes the PodDisruptionBudget;
- case 8: an interactive pod preempts a batch pod (the chart's PriorityClasses, the real scheduler).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubernetes.client
import pytest
from kubernetes.client.exceptions import ApiException
from prometheus_client.parser import text_string_to_metric_families
from tests.cluster.helpers import (
    ROOT,
    LocalCluster,
    OperatorProcess,
    container_env,
    free_port,
    render_chart,
    start_operator,
    wait_for,
)

from llmscale.api import LLMDeploymentSpec
from llmscale.controller.manifests.children import PriorityClasses, deployment_manifest, pdb_manifest
from llmscale.controller.tick import CHILDREN_GRACE_S
from llmscale.localcluster.cluster import nodes_manifest

pytestmark = pytest.mark.slow

GROUP, VERSION, PLURAL = "llmscale.dev", "v1alpha1", "llmdeployments"
NS = "shared"
#: Kinds of the chart's objects the tests apply besides the operator's own Deployment.
CHART_OBJECTS = {"PriorityClass", "KopfPeering"}


def llmdeployment(name: str, *, min_replicas: int = 1, max_replicas: int = 2, **extra: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "model": {"name": "chat", "preset": "llama-3.1-8b"},
        "engine": {"type": "mock", "image": "llmscale:dev"},
        "replicas": {"min": min_replicas, "max": max_replicas},
        "scaling": {"tickSeconds": 1},
        "headroom": {"replicas": 1, "coldStartSeconds": 1},
        **extra,
    }
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "LLMDeployment",
            "metadata": {"name": name, "namespace": NS}, "spec": spec}


def objects(cluster: LocalCluster) -> kubernetes.client.CustomObjectsApi:
    return kubernetes.client.CustomObjectsApi(cluster.api)


def get(cluster: LocalCluster, name: str) -> dict[str, Any] | None:
    try:
        obj: dict[str, Any] = objects(cluster).get_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, name)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    return obj


def condition(cluster: LocalCluster, name: str, type_: str) -> dict[str, Any] | None:
    for cond in ((get(cluster, name) or {}).get("status") or {}).get("conditions") or ():
        if cond["type"] == type_:
            return dict(cond)
    return None


def replicas(cluster: LocalCluster, name: str) -> int | None:
    try:
        return int(kubernetes.client.AppsV1Api(cluster.api).read_namespaced_deployment(name, NS).spec.replicas)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def events(cluster: LocalCluster, reason: str, name: str) -> list[str]:
    got = kubernetes.client.CoreV1Api(cluster.api).list_namespaced_event(
        NS, field_selector=f"involvedObject.kind=LLMDeployment,involvedObject.name={name},reason={reason}")
    return [e.message for e in got.items]


def ticks(port: int, name: str) -> float:
    """llmscale_signal_read_errors_total of ``shared/<name>`` on an operator's /metrics: every tick
    fails to read signals here (nobody listens on the Prometheus port), so it counts ticks."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    return sum(s.value for family in text_string_to_metric_families(text) for s in family.samples
               if s.name == "llmscale_signal_read_errors_total" and s.labels.get("name") == name)


@dataclass
class Shared:
    """The namespace, the chart's environment for the operator, and the running operator."""

    env: dict[str, str]
    operator: OperatorProcess
    tmp: Path


@pytest.fixture(scope="module")
def shared(cluster: LocalCluster, helm: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Shared]:
    cluster.create_namespace(NS)
    docs = render_chart(helm, "llmscale-system", "watch.allNamespaces=false", f"watch.namespaces={{{NS}}}")
    cluster.apply([d for d in docs if d["kind"] in CHART_OBJECTS], field_manager="helm")
    env = container_env(docs)
    tmp = tmp_path_factory.mktemp("shared")
    op = start_operator(env, cluster.kubeconfig, tmp / "operator.log")
    try:
        yield Shared(env, op, tmp)
    finally:
        op.stop()


@pytest.mark.usefixtures("shared")
class TestOnASharedCluster:
    """Ordered: the last test stops the operator."""

    def test_a_restored_object_with_kopfs_annotations_gets_its_children(self, cluster: LocalCluster) -> None:
        """Case 13: restored from a backup with ``llmscale.dev/last-handled-configuration`` copied,
        Kopf sees nothing to create and never calls the create handler (0 applies in 10 minutes).
        The tick applies the children of an object whose Deployment stays missing."""
        cluster.apply([llmdeployment("original")], "backup-tool")
        wait_for("Deployment original", lambda: replicas(cluster, "original"))
        # Kopf writes the handled configuration after the create handler has applied the children:
        # the Deployment can exist before the annotation does (seen on a loaded machine).

        def handled() -> dict[str, str] | None:
            annotations = ((get(cluster, "original") or {}).get("metadata") or {}).get("annotations") or {}
            return annotations if "llmscale.dev/last-handled-configuration" in annotations else None

        annotations = wait_for("Kopf's handled configuration on original", handled)
        assert "llmscale.dev/last-handled-configuration" in annotations
        restored = llmdeployment("restored")
        # What a restore (Velero, a GitOps re-sync of an exported object) brings back: the spec and
        # every annotation, Kopf's included, with the handled configuration of the same spec.
        restored["metadata"]["annotations"] = dict(annotations)
        objects(cluster).create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, restored)
        started = time.monotonic()
        wait_for("Deployment restored", lambda: replicas(cluster, "restored") == 2, timeout_s=CHILDREN_GRACE_S + 20)
        took = time.monotonic() - started
        assert kubernetes.client.CoreV1Api(cluster.api).read_namespaced_service("restored", NS)
        assert took < CHILDREN_GRACE_S + 20

    def test_an_hpa_on_the_child_deployment_makes_the_operator_step_back(self, cluster: LocalCluster) -> None:
        """Case 12: a HorizontalPodAutoscaler with minReplicas 3 on Deployment ``hpa`` (whose
        LLMDeployment allows at most 2). The controller manager scales it to 3 through /scale;
        before, the operator forced it back to 2 on every tick, and the two fought. Now the operator
        leaves the replicas to the HPA, says so, and takes over again when the HPA goes."""
        cluster.apply([llmdeployment("hpa")], "user")
        wait_for("Deployment hpa at 2", lambda: replicas(cluster, "hpa") == 2)
        autoscaling = kubernetes.client.AutoscalingV2Api(cluster.api)
        autoscaling.create_namespaced_horizontal_pod_autoscaler(NS, {
            "metadata": {"name": "hpa-cpu"},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "hpa"},
                     "minReplicas": 3, "maxReplicas": 4,
                     "metrics": [{"type": "Resource", "resource": {
                         "name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}}}]},
        })
        cond = wait_for("SoleAutoscaler=False", lambda: (
            c if (c := condition(cluster, "hpa", "SoleAutoscaler")) and c["status"] == "False" else None))
        assert cond["reason"] == "OtherAutoscaler"
        assert "HorizontalPodAutoscaler shared/hpa-cpu targets Deployment hpa" in cond["message"]
        wait_for("the HPA's minReplicas applied by the controller manager", lambda: replicas(cluster, "hpa") == 3,
                 timeout_s=60)
        seen = set()
        for _ in range(16):  # 8 s: eight ticks of the operator
            seen.add(replicas(cluster, "hpa"))
            time.sleep(0.5)
        assert seen == {3}, f"the operator fought the HPA: replicas seen {seen}"
        assert len(events(cluster, "OtherAutoscaler", "hpa")) == 1
        autoscaling.delete_namespaced_horizontal_pod_autoscaler("hpa-cpu", NS)
        wait_for("the operator back at spec.replicas.max", lambda: replicas(cluster, "hpa") == 2)
        wait_for("SoleAutoscaler=True", lambda: (condition(cluster, "hpa", "SoleAutoscaler") or {}).get("status") == "True")

    def test_a_keda_scaled_object_on_the_child_deployment_is_seen_too(self, cluster: LocalCluster) -> None:
        so = {"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "metadata": {"name": "queue", "namespace": NS},
              "spec": {"scaleTargetRef": {"name": "hpa"}, "triggers": []}}
        objects(cluster).create_namespaced_custom_object("keda.sh", "v1alpha1", NS, "scaledobjects", so)
        cond = wait_for("SoleAutoscaler=False", lambda: (
            c if (c := condition(cluster, "hpa", "SoleAutoscaler")) and c["status"] == "False" else None))
        assert "ScaledObject shared/queue targets Deployment hpa" in cond["message"], cond
        objects(cluster).delete_namespaced_custom_object("keda.sh", "v1alpha1", NS, "scaledobjects", "queue")
        wait_for("SoleAutoscaler=True", lambda: (condition(cluster, "hpa", "SoleAutoscaler") or {}).get("status") == "True")

    def test_a_refused_child_is_reported_then_applied_on_retry(self, cluster: LocalCluster) -> None:
        """The kind of case 10: any refused apply. A ResourceQuota of 0 Services refuses the
        Service of LLMDeployment ``quota`` (403, exceeded quota): ChildrenApplied=False with the API
        server's answer, an ApplyFailed Warning Event, and the children once the quota goes."""
        core = kubernetes.client.CoreV1Api(cluster.api)
        core.create_namespaced_resource_quota(NS, {"metadata": {"name": "no-services"},
                                                   "spec": {"hard": {"count/services": "0"}}})
        wait_for("the quota counted", lambda: core.read_namespaced_resource_quota("no-services", NS).status.hard)
        cluster.apply([llmdeployment("quota")], "user")
        cond = wait_for("ChildrenApplied=False", lambda: (
            c if (c := condition(cluster, "quota", "ChildrenApplied")) and c["status"] == "False" else None))
        assert cond["reason"] == "ApplyFailed" and "Service shared/quota" in cond["message"], cond
        assert "403" in cond["message"] and "quota" in cond["message"], cond
        assert any("exceeded quota" in m for m in wait_for("an ApplyFailed Event",
                                                           lambda: events(cluster, "ApplyFailed", "quota")))
        assert replicas(cluster, "quota") is None
        core.delete_namespaced_resource_quota("no-services", NS)
        wait_for("the children after the retry", lambda: replicas(cluster, "quota") == 2, timeout_s=CHILDREN_GRACE_S + 30)
        wait_for("ChildrenApplied=True",
                 lambda: (condition(cluster, "quota", "ChildrenApplied") or {}).get("status") == "True")

    def test_a_second_operator_never_writes_beside_the_first(self, cluster: LocalCluster, shared: Shared) -> None:
        """Case 15: ``llmscale run`` defaulted to standalone, so a run on a workstation beside the
        installed operator wrote replicas too. A --standalone run now refuses to start while the
        peering holds a live operator; a default run joins the peering, and one of the two works."""
        base = ["-n", NS, "--kubeconfig", str(cluster.kubeconfig), "--prometheus-url", f"http://127.0.0.1:{free_port()}",
                "--metrics-host", "127.0.0.1", "--tick-base-seconds", "1", "--signal-timeout-seconds", "2"]
        env = {k: v for k, v in os.environ.items() if not k.startswith("LLMSCALE_") and k != "KUBECONFIG"}
        llmscale = str(Path(sys.executable).with_name("llmscale"))
        refused = subprocess.run([llmscale, "run", *base, "--metrics-port", str(free_port()), "--standalone"],
                                 env=env, capture_output=True, text=True, timeout=60, check=False)
        assert refused.returncode == 2, refused.stdout + refused.stderr
        assert "refused to start standalone" in refused.stderr and f"KopfPeering {NS}/llmscale" in refused.stderr

        port = free_port()
        log = shared.tmp / "workstation.log"
        with log.open("ab") as out:
            proc = subprocess.Popen([llmscale, "run", *base, "--metrics-port", str(port)], env=env, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        second = OperatorProcess(proc, log, port)
        try:
            wait_for("the default run's /metrics", lambda: ticks(port, "hpa") is not None)
            peers = wait_for("two live peers in the peering", lambda: (
                p if len(p := live(cluster)) == 2 else None))
            assert len(set(peers.values())) == 2, peers
            time.sleep(3)  # the pause settles
            before = (ticks(shared.operator.port, "hpa"), ticks(port, "hpa"))
            time.sleep(4)
            after = (ticks(shared.operator.port, "hpa"), ticks(port, "hpa"))
            worked = [b > a for a, b in zip(before, after, strict=True)]
            assert sorted(worked) == [False, True], f"exactly one operator must tick: {before} -> {after}"
        finally:
            second.stop()

    def test_deleting_without_the_operator_waits_on_the_documented_finalizer(
        self, cluster: LocalCluster, shared: Shared
    ) -> None:
        """Case 14: Kopf puts a finalizer on every object with a timer (and offers no timer without
        one: nolar/kopf PR #896), so with the operator gone a deletion hangs; docs/deploy.md named
        the wrong finalizer. The finalizer on the object is the one the docs name, and the docs'
        command finishes the deletion; the garbage collector then takes the children."""
        shared.operator.stop()
        body = get(cluster, "quota")
        assert body is not None and body["metadata"]["finalizers"] == ["llmscale.dev/finalizer"]
        objects(cluster).delete_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "quota")
        time.sleep(2)
        hanging = get(cluster, "quota")
        assert hanging is not None and hanging["metadata"].get("deletionTimestamp"), "deleted without the finalizer?"
        command = documented_finalizer_command()
        assert "llmscale.dev/finalizer" in command
        argv = [a.replace("NAME", "quota").replace("NS", NS) for a in shlex.split(command)]
        assert argv[0] == "kubectl"
        cluster.kubectl(*argv[1:])
        wait_for("LLMDeployment quota gone", lambda: get(cluster, "quota") is None)
        wait_for("its Deployment garbage-collected", lambda: replicas(cluster, "quota") is None, timeout_s=60)


def live(cluster: LocalCluster) -> dict[str, int]:
    """Peer id -> priority of the live peers in KopfPeering shared/llmscale."""
    obj = objects(cluster).get_namespaced_custom_object("kopf.dev", "v1", NS, "kopfpeerings", "llmscale")
    return {peer: int(info["priority"]) for peer, info in (obj.get("status") or {}).items() if info}


def documented_finalizer_command() -> str:
    """The ``kubectl patch`` command of docs/deploy.md, "Uninstall"."""
    text = (ROOT / "docs" / "deploy.md").read_text()
    section = text[text.index("## Uninstall"):]
    (command,) = re.findall(r"^\s*(kubectl patch llmdep .+)$", section, flags=re.MULTILINE)
    return command


# ------------------------------------------------------------------------------------------ without the operator


def spec(**overrides: Any) -> LLMDeploymentSpec:
    data: dict[str, Any] = {"model": {"name": "chat", "preset": "llama-3.1-8b"},
                            "engine": {"type": "mock", "image": "llmscale:dev"}}
    data.update(overrides)
    return LLMDeploymentSpec.model_validate(data)


def server_side_apply(cluster: LocalCluster, manifest: dict[str, Any]) -> None:
    cluster.apply([manifest], field_manager="llmscale", force=True)


def owner(cluster: LocalCluster, name: str) -> dict[str, Any]:
    """An LLMDeployment to own the test's children (no operator acts on namespace ``shared`` now)."""
    body = get(cluster, name) or objects(cluster).create_namespaced_custom_object(
        GROUP, VERSION, NS, PLURAL, llmdeployment(name))
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "LLMDeployment", "name": name,
            "uid": body["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}


def own_node(cluster: LocalCluster, name: str, gpus: int) -> str:
    """Create KWOK node ``<name>-0`` with ``gpus`` GPUs and a taint only the test's pods tolerate,
    so that the other tests' pods never take its GPUs; return its name."""
    core = kubernetes.client.CoreV1Api(cluster.api)
    manifest = json.loads(nodes_manifest(1, gpus, "NVIDIA-H100-80GB-HBM3", f"{name}-"))["items"]
    for doc in manifest:
        doc["spec"] = {"taints": [{"key": "llmscale.dev/test", "value": name, "effect": "NoSchedule"}]}
    cluster.apply(manifest, field_manager="test")
    node = f"{name}-0"
    wait_for(f"node {node} Ready", lambda: any(
        c.type == "Ready" and c.status == "True" for c in core.read_node(node).status.conditions or ()), timeout_s=60)
    return node


def pinned(deployment: dict[str, Any], node: str) -> dict[str, Any]:
    """``deployment`` with its pods bound to ``node`` (a node selector and the node's toleration)."""
    pod = deployment["spec"]["template"]["spec"]
    pod["nodeSelector"] = {"kubernetes.io/hostname": node}
    pod["tolerations"] = [{"key": "llmscale.dev/test", "operator": "Equal", "value": node.rsplit("-", 1)[0],
                           "effect": "NoSchedule"}]
    return deployment


def ready(pod: Any) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or ())


def test_an_unhealthy_pod_can_be_evicted_through_the_pdb(cluster: LocalCluster, shared: Shared) -> None:
    """Case 6: ``maxUnavailable: 1`` without ``unhealthyPodEvictionPolicy`` blocks a node drain when
    2 of 3 replicas crash-loop: the disruption budget is used up by pods that serve nothing. With
    the operator's PDB (``AlwaysAllow``) the eviction of an unhealthy pod passes; with the old one
    it is refused (429), which shows the check can fail."""
    shared.operator.stop()  # no operator acts on these children: they are the test's own
    core, policy = kubernetes.client.CoreV1Api(cluster.api), kubernetes.client.PolicyV1Api(cluster.api)
    s = spec(headroom={"coldStartSeconds": 3600})  # KWOK keeps every pod unready for an hour
    ref = owner(cluster, "drain")
    deployment = deployment_manifest("drain", NS, s, "interactive", 3, ref)
    assert deployment["spec"]["progressDeadlineSeconds"] == 7260
    server_side_apply(cluster, pinned(deployment, own_node(cluster, "drain-node", 4)))
    selector = "llmscale.dev/deployment=drain,llmscale.dev/pool=interactive"
    pods = wait_for("3 running pods", lambda: (
        p if len(p := [x for x in core.list_namespaced_pod(NS, label_selector=selector).items
                       if x.status.phase == "Running"]) == 3 else None))
    # One replica serves; two crash-loop (never Ready).
    healthy = pods[0].metadata.name
    core.patch_namespaced_pod_status(healthy, NS, {"status": {"conditions": [
        {"type": "Ready", "status": "True"}, {"type": "ContainersReady", "status": "True"}]}})
    wait_for(f"pod {healthy} Ready", lambda: ready(core.read_namespaced_pod(healthy, NS)))
    victim = pods[1].metadata.name

    def budget_seen(pdb_name: str) -> Any:
        got = policy.read_namespaced_pod_disruption_budget(pdb_name, NS)
        return got if got.status and got.status.observed_generation == got.metadata.generation \
            and got.status.expected_pods == 3 and got.status.current_healthy == 1 else None

    def evict(pod: str) -> int:
        try:
            core.create_namespaced_pod_eviction(pod, NS, {"metadata": {"name": pod, "namespace": NS}})
        except ApiException as exc:
            return int(exc.status)
        return 201

    old = pdb_manifest("drain", NS, s, ref)
    del old["spec"]["unhealthyPodEvictionPolicy"]
    server_side_apply(cluster, old)
    wait_for("the old budget computed", lambda: budget_seen("drain"))
    assert evict(victim) == 429, "the old PDB let an unhealthy pod go: the test could not fail"

    server_side_apply(cluster, pdb_manifest("drain", NS, s, ref))
    wait_for("the PDB with AlwaysAllow", lambda: (
        policy.read_namespaced_pod_disruption_budget("drain", NS).spec.unhealthy_pod_eviction_policy == "AlwaysAllow"))
    assert wait_for("the eviction of an unhealthy pod", lambda: evict(victim) == 201, timeout_s=20)
    assert evict(healthy) == 429, "the one healthy replica must stay protected"


def test_an_interactive_pod_preempts_a_batch_pod(cluster: LocalCluster, shared: Shared) -> None:
    """Case 8: the batch pool keeps its GPUs while interactive pods wait. With the chart's
    PriorityClasses on the pools' pods, the real scheduler preempts the batch pod for the
    interactive one. A node of its own (4 GPUs, tainted) keeps the other tests' pods out."""
    core = kubernetes.client.CoreV1Api(cluster.api)
    node = own_node(cluster, "preempt-node", 4)

    classes = PriorityClasses(shared.env["LLMSCALE_INTERACTIVE_PRIORITY_CLASS"], shared.env["LLMSCALE_BATCH_PRIORITY_CLASS"])
    s = spec(resources={"gpusPerReplica": 4}, headroom={"coldStartSeconds": 1},
             batch={"windows": [{"start": "00:00", "end": "23:59"}], "replicas": 1})
    ref = owner(cluster, "preempt")

    def on_the_node(pool: str) -> dict[str, Any]:
        return pinned(deployment_manifest("preempt", NS, s, pool, 1, ref, classes), node)  # type: ignore[arg-type]

    def pods(pool: str) -> list[Any]:
        return [p for p in core.list_namespaced_pod(
            NS, label_selector=f"llmscale.dev/deployment=preempt,llmscale.dev/pool={pool}").items
            if p.metadata.deletion_timestamp is None]

    server_side_apply(cluster, on_the_node("batch"))
    (batch,) = wait_for("the batch pod on the node", lambda: (
        p if (p := [x for x in pods("batch") if x.spec.node_name == node]) else None))
    assert batch.spec.priority_class_name == "llmscale-batch"
    server_side_apply(cluster, on_the_node("interactive"))
    (interactive,) = wait_for("the interactive pod scheduled on the node", lambda: (
        p if (p := [x for x in pods("interactive") if x.spec.node_name == node]) else None), timeout_s=60)
    assert interactive.spec.priority_class_name == "llmscale-interactive"
    assert interactive.spec.priority > batch.spec.priority
    preempted = wait_for("a Preempted event of the batch pod", lambda: [
        e for e in core.list_namespaced_event(NS, field_selector=f"involvedObject.name={batch.metadata.name}").items
        if e.reason == "Preempted"])
    assert "preempted" in preempted[0].message.lower()
    # The batch ReplicaSet's new pod waits: batch pods never preempt (preemptionPolicy: Never).
    time.sleep(3)
    assert all(p.spec.node_name is None for p in pods("batch"))


def test_the_docs_name_the_finalizer_the_operator_sets() -> None:
    from llmscale.controller.handlers import configure_kopf
    from llmscale.controller.settings import OperatorSettings

    finalizer = configure_kopf(OperatorSettings(all_namespaces=True)).persistence.finalizer
    assert finalizer in documented_finalizer_command()
    assert "KopfFinalizerMarker" not in (ROOT / "docs" / "deploy.md").read_text()
