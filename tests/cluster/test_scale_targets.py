"""``spec.scaleTargetRef`` and ``spec.mode`` against a real kube-apiserver, audited.

The operator runs as the chart's ServiceAccount (release ``llmscale-modes``, watching two
namespaces; its token only) with Prometheus unreachable, so every signal is unknown and the policy
holds: only ``spec.replicas`` bounds move replicas — enough to see every write. The API server's
audit log records each request of that ServiceAccount (tests/conftest.py), which is how the tests
prove what the operator did *not* do.

- A Deployment created with ``kubectl create deployment`` is scaled through ``deployments/scale``:
  llmscale's field manager owns ``spec.replicas`` and nothing else, no owner reference is set, no
  Service, PDB or Deployment is created, and deleting the LLMDeployment leaves the Deployment.
- ``Advisory`` reports the advice (status, an ``AdvisedScaleUp`` Event) and ``Paused`` holds: the
  audit log holds no write of the operator to anything in the namespace but the LLMDeployment's
  status and Events, while switching back to ``Active`` shows the write the check looks for.
- A LeaderWorkerSet (the upstream controller, built from its Go module) is scaled the same way; its
  ``/scale`` selects the group leaders, whose readiness the status reports.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes.client
import pytest
import yaml
from kubernetes.client.exceptions import ApiException
from tests.cluster.helpers import (
    LocalCluster,
    OperatorProcess,
    container_env,
    render_chart,
    start_operator,
    wait_for,
)

pytestmark = pytest.mark.slow

GROUP, VERSION, PLURAL = "llmscale.dev", "v1alpha1", "llmdeployments"
RELEASE, RELEASE_NS = "llmscale-modes", "llmscale-modes"
USER = f"system:serviceaccount:{RELEASE_NS}:{RELEASE}"
NS_DEPLOY, NS_LWS = "scale-deployment", "scale-lws"
#: What of the chart's render the test applies: the RBAC and the Kopf peering objects the operator
#: joins (the chart's operator is peered by default).
RBAC_KINDS = {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "KopfPeering"}
WRITE_VERBS = {"create", "update", "patch", "delete", "deletecollection"}
#: What the operator may write in a watched namespace whatever the mode: the LLMDeployment (Kopf's
#: annotations and finalizer, the status), Events, and Kopf's peering object (its heartbeat).
ALWAYS_WRITTEN = {"llmdeployments", "events", "kopfpeerings"}


@pytest.fixture(scope="module")
def operator(cluster: LocalCluster, helm: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    """``llmscale run`` with the token of the chart's ServiceAccount, watching the two namespaces."""
    for ns in (RELEASE_NS, NS_DEPLOY, NS_LWS):
        cluster.create_namespace(ns)
    docs = render_chart(helm, RELEASE_NS, "watch.allNamespaces=false", f"watch.namespaces={{{NS_DEPLOY},{NS_LWS}}}",
                        release=RELEASE)
    cluster.apply([d for d in docs if d["kind"] in RBAC_KINDS], field_manager="helm")
    tmp = tmp_path_factory.mktemp("modes")
    kubeconfig = cluster.service_account_kubeconfig(RELEASE_NS, RELEASE, tmp / "sa.kubeconfig")
    op = start_operator(container_env(docs), kubeconfig, tmp / "operator.log")
    try:
        yield op
    finally:
        op.stop()
        core = kubernetes.client.CoreV1Api(cluster.api)
        for ns in (NS_DEPLOY, NS_LWS):
            core.delete_namespace(ns)


def llmdeployment(name: str, namespace: str, ref: dict[str, str], *, mode: str = "Active", least: int = 2) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "LLMDeployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "model": {"name": "meta-llama/Llama-3.1-8B-Instruct", "preset": "llama-3.1-8b"},
            "replicas": {"min": least, "max": 6},
            "scaling": {"tickSeconds": 1},
            "mode": mode,
            "scaleTargetRef": ref,
        },
    }


def status(cluster: LocalCluster, namespace: str, name: str) -> dict[str, Any]:
    obj = kubernetes.client.CustomObjectsApi(cluster.api).get_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, name)
    return dict(obj.get("status") or {})


def condition(st: dict[str, Any], type_: str) -> dict[str, Any]:
    return next((c for c in st.get("conditions") or () if c["type"] == type_), {})


def workload_writes(cluster: LocalCluster, namespace: str, since: int) -> list[str]:
    """Writes of the operator in ``namespace`` after audit offset ``since`` to anything but the
    LLMDeployment and Events: ``verb resource/subresource name -> code``."""
    out = []
    for e in cluster.audit_events(USER, since):
        ref = e.get("objectRef") or {}
        if e["verb"] in WRITE_VERBS and ref.get("namespace") == namespace and ref.get("resource") not in ALWAYS_WRITTEN:
            sub = f"/{ref['subresource']}" if ref.get("subresource") else ""
            out.append(f"{e['verb']} {ref.get('resource')}{sub} {ref.get('name')} -> "
                       f"{(e.get('responseStatus') or {}).get('code')}")
    return out


def status_writes(cluster: LocalCluster, namespace: str, since: int) -> int:
    """Status writes of the operator in ``namespace`` after ``since``: shows the audit log records
    the operator's requests in the window a check reads."""
    return sum(1 for e in cluster.audit_events(USER, since)
               if e["verb"] == "patch" and (e.get("objectRef") or {}).get("subresource") == "status"
               and (e.get("objectRef") or {}).get("namespace") == namespace)


def scale_owners(obj: dict[str, Any]) -> list[tuple[str, str | None, Any]]:
    """(manager, subresource, fieldsV1) of every managedFields entry that names llmscale."""
    return [(m["manager"], m.get("subresource"), m["fieldsV1"]) for m in obj["metadata"].get("managedFields") or ()
            if m["manager"] == "llmscale"]


def events(cluster: LocalCluster, namespace: str, reason: str) -> list[Any]:
    got = kubernetes.client.CoreV1Api(cluster.api).list_namespaced_event(
        namespace, field_selector=f"involvedObject.kind=LLMDeployment,reason={reason}")
    return list(got.items)


def deployment(cluster: LocalCluster, name: str) -> dict[str, Any]:
    got = kubernetes.client.AppsV1Api(cluster.api).read_namespaced_deployment(name, NS_DEPLOY)
    return dict(cluster.api.sanitize_for_serialization(got))


DEPLOYMENT_REF = {"apiVersion": "apps/v1", "kind": "Deployment", "name": "vllm"}


@pytest.mark.usefixtures("operator")
class TestKubectlDeployment:
    """Ordered steps on one Deployment created by kubectl."""

    def test_active_scales_through_scale_without_owning_anything(self, cluster: LocalCluster) -> None:
        cluster.kubectl("create", "deployment", "vllm", "-n", NS_DEPLOY, "--image=vllm/vllm-openai:v0.11.0",
                        "--replicas=1")
        since = cluster.audit_offset()
        cluster.apply([llmdeployment("chat", NS_DEPLOY, DEPLOYMENT_REF)], "argocd-controller")
        # Prometheus is down: the policy holds 1, and spec.replicas.min raises it to 2.
        wait_for("Deployment vllm at 2 replicas", lambda: deployment(cluster, "vllm")["spec"]["replicas"] == 2)
        got = deployment(cluster, "vllm")
        assert got["metadata"].get("ownerReferences") is None
        assert scale_owners(got) == [("llmscale", "scale", {"f:spec": {"f:replicas": {}}})]
        wait_for("status: 2 current, 2 ready, ScalingActive", lambda: (
            (st := status(cluster, NS_DEPLOY, "chat"))["replicas"].items() >= {"current": 2, "desired": 2, "ready": 2}.items()
            and condition(st, "ScalingActive").get("reason") == "Active"))
        apps, core, policy = (kubernetes.client.AppsV1Api(cluster.api), kubernetes.client.CoreV1Api(cluster.api),
                              kubernetes.client.PolicyV1Api(cluster.api))
        assert [d.metadata.name for d in apps.list_namespaced_deployment(NS_DEPLOY).items] == ["vllm"]
        assert core.list_namespaced_service(NS_DEPLOY).items == []
        assert policy.list_namespaced_pod_disruption_budget(NS_DEPLOY).items == []
        writes = workload_writes(cluster, NS_DEPLOY, since)
        assert writes and all(w.startswith("patch deployments/scale vllm -> 200") for w in writes), writes
        # The pool figures come from the workload's own pods (found by its /scale selector).
        wait_for("status.pools.interactive: 2 cold starts measured", lambda: (
            status(cluster, NS_DEPLOY, "chat").get("pools", {}).get("interactive", {}).get("coldStartsMeasured") == 2))
        assert status(cluster, NS_DEPLOY, "chat")["pools"]["interactive"]["coldStartP90Seconds"] >= 0

    def test_advisory_reports_the_advice_without_writing(self, cluster: LocalCluster) -> None:
        since = cluster.audit_offset()
        cluster.apply([llmdeployment("chat", NS_DEPLOY, DEPLOYMENT_REF, mode="Advisory", least=3)], "argocd-controller")
        wait_for("status: advice 3, current 2, ScalingActive=False/Advisory", lambda: (
            (st := status(cluster, NS_DEPLOY, "chat"))["replicas"].items() >= {"desired": 3, "current": 2}.items()
            and condition(st, "ScalingActive").get("reason") == "Advisory"))
        wait_for("an AdvisedScaleUp Event 2 -> 3", lambda: [
            e for e in events(cluster, NS_DEPLOY, "AdvisedScaleUp") if "from 2 to 3 replicas" in e.message])
        time.sleep(3)  # three more ticks
        assert deployment(cluster, "vllm")["spec"]["replicas"] == 2
        assert workload_writes(cluster, NS_DEPLOY, since) == []
        assert status_writes(cluster, NS_DEPLOY, since) > 0, "the audit log saw no request of the operator at all"

    def test_paused_holds_without_writing(self, cluster: LocalCluster) -> None:
        since = cluster.audit_offset()
        cluster.apply([llmdeployment("chat", NS_DEPLOY, DEPLOYMENT_REF, mode="Paused", least=4)], "argocd-controller")
        wait_for("status: held at 2, the policy would set 4, ScalingActive=False/Paused", lambda: (
            (st := status(cluster, NS_DEPLOY, "chat"))["replicas"].items() >= {"desired": 2, "current": 2}.items()
            and st["lastDecision"]["interactiveReplicas"] == 4
            and condition(st, "ScalingActive").get("reason") == "Paused"))
        time.sleep(3)
        assert deployment(cluster, "vllm")["spec"]["replicas"] == 2
        assert workload_writes(cluster, NS_DEPLOY, since) == []
        assert status_writes(cluster, NS_DEPLOY, since) > 0

    def test_active_again_writes_where_the_audit_check_sees_it(self, cluster: LocalCluster) -> None:
        since = cluster.audit_offset()
        cluster.apply([llmdeployment("chat", NS_DEPLOY, DEPLOYMENT_REF, least=3)], "argocd-controller")
        wait_for("Deployment vllm at 3 replicas", lambda: deployment(cluster, "vllm")["spec"]["replicas"] == 3)
        assert "patch deployments/scale vllm -> 200" in workload_writes(cluster, NS_DEPLOY, since)

    def test_deleting_the_llmdeployment_leaves_the_deployment(self, cluster: LocalCluster) -> None:
        since = cluster.audit_offset()
        objects = kubernetes.client.CustomObjectsApi(cluster.api)
        objects.delete_namespaced_custom_object(GROUP, VERSION, NS_DEPLOY, PLURAL, "chat")

        def gone() -> bool:
            try:
                objects.get_namespaced_custom_object(GROUP, VERSION, NS_DEPLOY, PLURAL, "chat")
            except ApiException as exc:
                return exc.status == 404
            return False

        wait_for("the LLMDeployment gone (the operator released its finalizer)", gone)
        time.sleep(2)  # the garbage collector would act within this on an owned object
        assert deployment(cluster, "vllm")["spec"]["replicas"] == 3
        assert workload_writes(cluster, NS_DEPLOY, since) == []

    def test_a_missing_target_is_reported(self, cluster: LocalCluster) -> None:
        ref = {"apiVersion": "apps/v1", "kind": "Deployment", "name": "absent"}
        cluster.apply([llmdeployment("ghost", NS_DEPLOY, ref)], "argocd-controller")
        wait_for("ScalingActive=False/FailedGetScale naming the Deployment", lambda: (
            (c := condition(status(cluster, NS_DEPLOY, "ghost"), "ScalingActive")).get("reason") == "FailedGetScale"
            and "Deployment scale-deployment/absent" in c["message"] and c["status"] == "False"))
        wait_for("a FailedGetScale Warning Event", lambda: events(cluster, NS_DEPLOY, "FailedGetScale"))

    def test_a_generated_workload_is_not_created_while_advisory(self, cluster: LocalCluster) -> None:
        """Without scaleTargetRef, Advisory writes no child either; Active then creates them."""
        since = cluster.audit_offset()
        manifest = llmdeployment("own", NS_DEPLOY, DEPLOYMENT_REF, mode="Advisory", least=1)
        del manifest["spec"]["scaleTargetRef"]
        manifest["spec"]["engine"] = {"type": "mock", "image": "llmscale:dev"}
        cluster.apply([manifest], "argocd-controller")
        wait_for("status: ScalingActive=False/Advisory, nothing running", lambda: (
            condition(st := status(cluster, NS_DEPLOY, "own"), "ScalingActive").get("reason") == "Advisory"
            and st["replicas"]["current"] == 0))
        time.sleep(2)
        assert workload_writes(cluster, NS_DEPLOY, since) == []
        manifest["spec"]["mode"] = "Active"
        cluster.apply([manifest], "argocd-controller")
        wait_for("Deployment own created once Active", lambda: "own" in {
            d.metadata.name for d in kubernetes.client.AppsV1Api(cluster.api).list_namespaced_deployment(NS_DEPLOY).items})
        created = {w.split(" ")[1] for w in workload_writes(cluster, NS_DEPLOY, since)}
        assert {"services", "poddisruptionbudgets", "deployments"} <= created, created


LWS_MANIFEST = {
    "apiVersion": "leaderworkerset.x-k8s.io/v1",
    "kind": "LeaderWorkerSet",
    "metadata": {"name": "llama-405b", "namespace": NS_LWS},
    "spec": {
        "replicas": 1,
        "leaderWorkerTemplate": {
            "size": 2,
            # No GPU request: the session's one node is shared with other tests' GPU pods, and
            # what is checked here is the scaling, not the packing.
            "workerTemplate": {"spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.11.0"}]}},
        },
    },
}
LWS_REF = {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "name": "llama-405b"}


def lws(cluster: LocalCluster) -> dict[str, Any]:
    return dict(kubernetes.client.CustomObjectsApi(cluster.api).get_namespaced_custom_object(
        "leaderworkerset.x-k8s.io", "v1", NS_LWS, "leaderworkersets", "llama-405b"))


def leaders(cluster: LocalCluster) -> list[str]:
    pods = kubernetes.client.CoreV1Api(cluster.api).list_namespaced_pod(
        NS_LWS, label_selector="leaderworkerset.sigs.k8s.io/name=llama-405b,leaderworkerset.sigs.k8s.io/worker-index=0")
    return sorted(p.metadata.name for p in pods.items if p.metadata.deletion_timestamp is None)


@pytest.mark.usefixtures("operator", "lws")
class TestLeaderWorkerSet:
    """A multi-node group (a leader and a worker per replica) scaled through leaderworkersets/scale."""

    def test_scaled_through_scale_counting_group_leaders(self, cluster: LocalCluster) -> None:
        cluster.kubectl("apply", "--server-side", "--field-manager=kubectl", "-f", "-", input=yaml.safe_dump(LWS_MANIFEST))
        wait_for("the LeaderWorkerSet's first group", lambda: leaders(cluster) == ["llama-405b-0"])
        cluster.apply([llmdeployment("llama", NS_LWS, LWS_REF)], "argocd-controller")
        wait_for("LeaderWorkerSet at 2 replicas", lambda: lws(cluster)["spec"]["replicas"] == 2)
        wait_for("2 groups, each a leader and a worker", lambda: leaders(cluster) == ["llama-405b-0", "llama-405b-1"]
                 and len(kubernetes.client.CoreV1Api(cluster.api).list_namespaced_pod(
                     NS_LWS, label_selector="leaderworkerset.sigs.k8s.io/name=llama-405b").items) == 4)
        wait_for("status: 2 ready leaders", lambda: status(cluster, NS_LWS, "llama")["replicas"].items()
                 >= {"current": 2, "ready": 2}.items(), 60)
        got = lws(cluster)
        assert got["metadata"].get("ownerReferences") is None
        # A custom resource's /scale refuses server-side apply (kube-apiserver answers 500): a merge
        # patch with the same field manager, recorded the same way.
        assert scale_owners(got) == [("llmscale", "scale", {"f:spec": {"f:replicas": {}}})]

    def test_deleting_the_llmdeployment_leaves_the_leaderworkerset(self, cluster: LocalCluster) -> None:
        since = cluster.audit_offset()
        kubernetes.client.CustomObjectsApi(cluster.api).delete_namespaced_custom_object(
            GROUP, VERSION, NS_LWS, PLURAL, "llama")
        wait_for("the LLMDeployment gone", lambda: not kubernetes.client.CustomObjectsApi(cluster.api)
                 .list_namespaced_custom_object(GROUP, VERSION, NS_LWS, PLURAL)["items"])
        time.sleep(2)
        assert lws(cluster)["spec"]["replicas"] == 2
        assert leaders(cluster) == ["llama-405b-0", "llama-405b-1"]
        assert workload_writes(cluster, NS_LWS, since) == []

    @staticmethod
    def _scale_requests(cluster: LocalCluster) -> set[tuple[str | None, str, int | None]]:
        """(resource, verb, response code) of every request the operator sent to a /scale subresource."""
        return {((e.get("objectRef") or {}).get("resource"), e["verb"], (e.get("responseStatus") or {}).get("code"))
                for e in cluster.audit_events(USER) if (e.get("objectRef") or {}).get("subresource") == "scale"}

    def test_every_scale_permission_was_used(self, cluster: LocalCluster) -> None:
        used = self._scale_requests(cluster)
        assert {("deployments", "get", 200), ("deployments", "patch", 200),
                ("leaderworkersets", "get", 200), ("leaderworkersets", "patch", 200)} <= used, used

    def test_no_scale_request_was_refused(self, cluster: LocalCluster) -> None:
        used = self._scale_requests(cluster)
        assert not [u for u in used if u[2] == 403], used
