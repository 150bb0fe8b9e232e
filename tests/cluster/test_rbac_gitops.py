"""The chart's RBAC is sufficient and minimal, and GitOps tools do not fight the operator — proved
against a real kube-apiserver (the local cluster of conftest.py).

Each install renders the chart (``helm template``), server-side applies its ServiceAccount, RBAC
and peering objects, mints a token for the ServiceAccount (TokenRequest API) and runs
``llmscale run`` with only that token and the environment the chart gives the operator container.
Prometheus is a port nobody listens on: every signal is unknown and the policy holds, so replicas
move only by ``spec.replicas`` bounds and trough windows — enough to exercise every write.

- **Sufficient**: the operator does its whole job (children created, status patched, Events
  recorded, a raised ``min`` applied, the batch Deployment deleted when ``spec.batch`` goes) and
  the API server's audit log holds no request of its ServiceAccount answered 403
  (``responseStatus.code``: a structured field, where a search of the log text for "403" matched a
  timestamp's milliseconds).
- **Minimal**: every permission the chart grants shows up in the audit log as used, or is listed in
  ``NOT_A_REQUEST`` with the reason; removing ``create`` or the owner's ``finalizers`` rule makes a
  child's creation fail; verbs outside the job are refused.
- **GitOps**: the user's manifest re-applied with server-side apply by ``argocd-controller`` and
  then ``kustomize-controller`` (Flux's manager) changes no replicas and removes no status; in
  managedFields, spec belongs to GitOps managers only and the children's ``spec.replicas`` to
  ``llmscale`` only.
"""

from __future__ import annotations

import json
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubernetes.client
import kubernetes.config
import pytest
from kubernetes.client.exceptions import ApiException
from prometheus_client.parser import text_string_to_metric_families
from tests.cluster.helpers import (
    LocalCluster,
    OperatorProcess,
    container_env,
    render_chart,
    start_operator,
    wait_for,
)

from llmscale.controller.gpusfree import BOUND_PODS

pytestmark = pytest.mark.slow

GROUP, VERSION, PLURAL = "llmscale.dev", "v1alpha1", "llmdeployments"
#: The chart's objects a test installs (as Helm would), besides the operator's own Deployment: the
#: RBAC, the peering objects and the engine pods' PriorityClasses (a pod naming a missing class is
#: refused at admission).
RBAC_KINDS = {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding",
              "ClusterKopfPeering", "KopfPeering", "PriorityClass"}
GITOPS_MANAGERS = {"argocd-controller", "kustomize-controller"}
#: Field managers of the operator's own writes: ``llmscale`` for server-side apply of children
#: (--field-manager), ``kopf`` for Kopf's merge patches (named after Kopf's User-Agent).
OPERATOR_MANAGERS = {"llmscale", "kopf"}
#: User-Agent of the requests this test makes with the operator's own token (its refused calls
#: below), so that the audit log tells them from the operator's.
TEST_USER_AGENT = "llmscale-rbac-test"

#: Granted permissions that never appear as a request of their own, with the reason they are granted.
NOT_A_REQUEST = {
    ("llmscale.dev", "llmdeployments/finalizers", "update"):
        "checked by the OwnerReferencesPermissionEnforcement admission plugin when a child with "
        "blockOwnerDeletion=true is created (test_each_write_rule_is_needed shows the refusal without it)",
    ("inference.networking.k8s.io", "inferencepools", "delete"):
        "only when spec.routing.inferencePool turns Disabled (tests/cluster/test_inferencepool.py); this "
        "story's LLMDeployments keep the default, Auto, and get their InferencePool (get, create, patch)",
    ("batch", "jobs", "patch"):
        "a batch Job's spec.suspend is written only when the batch planner releases or pauses a Job "
        "labelled for the LLMDeployment; this story has no Job (e2e/test_batch.py::test_16 runs Jobs "
        "under the operator, and tests/operator against kmock)",
    # spec.scaleTargetRef (rbac.scaleTargets): this story's LLMDeployment creates its own workload;
    # tests/cluster/test_scale_targets.py shows the operator using them as the chart's
    # ServiceAccount (deployments and leaderworkersets). StatefulSets are granted for the same use.
    **{(group, f"{resource}/scale", verb): "used by spec.scaleTargetRef (tests/cluster/test_scale_targets.py)"
       for group, resource in (("apps", "deployments"), ("apps", "statefulsets"),
                               ("leaderworkerset.x-k8s.io", "leaderworkersets"))
       for verb in ("get", "patch")},
}

Rule = tuple[str, str, str]


def granted(roles: list[dict[str, Any]]) -> set[Rule]:
    """(apiGroup, resource[/subresource], verb) of every rule of ``roles``."""
    return {(g, r, v) for role in roles for rule in role["rules"]
            for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}


def used(cluster: LocalCluster, username: str) -> tuple[set[Rule], list[str]]:
    """The permissions ``username`` exercised, read from the audit log, and its refused requests.

    A server-side apply is a PATCH; when it created the object (201) it was also authorised as
    ``create`` (kube-apiserver ``handlers/patch.go``: the create path runs ``withAuthorization``
    with a create attribute), so it counts as both.
    """
    rules: set[Rule] = set()
    refused = []
    for event in operator_requests(cluster, username):
        ref = event.get("objectRef") or {}
        code = (event.get("responseStatus") or {}).get("code")
        if code == 403:
            refused.append(describe(event))
            continue
        if "resource" not in ref:
            continue  # discovery (/apis, /version): allowed for every authenticated user
        resource = ref["resource"] + (f"/{ref['subresource']}" if ref.get("subresource") else "")
        rules.add((ref.get("apiGroup", ""), resource, event["verb"]))
        if event["verb"] == "patch" and code == 201:
            rules.add((ref.get("apiGroup", ""), resource, "create"))
    return rules, refused


def operator_requests(cluster: LocalCluster, username: str) -> list[dict[str, Any]]:
    """Audit events of the requests the operator processes made as ``username`` (the test's own
    calls with the same token carry :data:`TEST_USER_AGENT` and are left out)."""
    return [e for e in cluster.audit_events(username) if e.get("userAgent") != TEST_USER_AGENT]


def describe(event: dict[str, Any]) -> str:
    """One line for an audit event: verb, resource, object, status code, client."""
    ref = event.get("objectRef") or {}
    resource = ref.get("resource", event.get("requestURI", "?")) + (
        f"/{ref['subresource']}" if ref.get("subresource") else "")
    code = (event.get("responseStatus") or {}).get("code")
    return (f"{event['verb']} {resource} {ref.get('namespace', '')}/{ref.get('name', '')} -> {code} "
            f"({event.get('userAgent', '?')})")


def window_open_now() -> dict[str, str]:
    """A UTC trough window from the last full hour to two hours later: open while the test runs."""
    hour = time.gmtime().tm_hour
    return {"start": f"{(hour + 23) % 24:02d}:00", "end": f"{(hour + 2) % 24:02d}:00", "timezone": "UTC"}


def llmdeployment(namespace: str, *, min_replicas: int = 1, max_replicas: int = 4, batch: bool = True) -> dict[str, Any]:
    """The user's manifest as it sits in Git: mock engine (restricted Pod Security), 1 s ticks."""
    spec: dict[str, Any] = {
        "model": {"name": "chat", "preset": "llama-3.1-8b"},
        "engine": {"type": "mock", "image": "llmscale:dev"},
        "replicas": {"min": min_replicas, "max": max_replicas},
        "scaling": {"tickSeconds": 1},
        "headroom": {"replicas": 1, "coldStartSeconds": 1},
    }
    if batch:
        spec["batch"] = {"replicas": 1, "windows": [window_open_now()]}
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "LLMDeployment",
            "metadata": {"name": "chat", "namespace": namespace}, "spec": spec}


@dataclass
class Install:
    """One chart install run as its ServiceAccount."""

    docs: list[dict[str, Any]]
    username: str
    kubeconfig: Path
    operators: list[OperatorProcess]

    def roles(self) -> list[dict[str, Any]]:
        """The operator's roles: not the users' roles aggregated into view/edit/admin."""
        return [d for d in self.docs if d["kind"] in {"ClusterRole", "Role"}
                and not any(k.startswith("rbac.authorization.k8s.io/aggregate-to-")
                            for k in d["metadata"].get("labels", {}))]

    def client(self) -> kubernetes.client.ApiClient:
        """An API client with the operator's token, for the test's own calls (marked by User-Agent)."""
        api = kubernetes.config.new_client_from_config(config_file=str(self.kubeconfig))
        api.user_agent = TEST_USER_AGENT
        return api


def install(cluster: LocalCluster, helm: Path, tmp: Path, release_ns: str, sets: list[str], operators: int) -> Install:
    docs = render_chart(helm, release_ns, *sets)
    cluster.create_namespace(release_ns)
    cluster.apply([d for d in docs if d["kind"] in RBAC_KINDS], field_manager="helm")
    kubeconfig = cluster.service_account_kubeconfig(release_ns, "llmscale", tmp / "sa.kubeconfig")
    env = container_env(docs)
    ops: list[OperatorProcess] = []
    try:
        for i in range(operators):
            ops.append(start_operator(env, kubeconfig, tmp / f"operator-{i}.log"))
    except BaseException:
        for op in ops:
            op.stop()
        raise
    return Install(docs, f"system:serviceaccount:{release_ns}:llmscale", kubeconfig, ops)


def deployment(cluster: LocalCluster, namespace: str, name: str) -> Any:
    try:
        return kubernetes.client.AppsV1Api(cluster.api).read_namespaced_deployment(name, namespace)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def get_llmdep(cluster: LocalCluster, namespace: str, name: str = "chat") -> dict[str, Any]:
    obj: dict[str, Any] = kubernetes.client.CustomObjectsApi(cluster.api).get_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, name)
    return obj


def events(cluster: LocalCluster, namespace: str, reason: str) -> list[Any]:
    got = kubernetes.client.CoreV1Api(cluster.api).list_namespaced_event(
        namespace, field_selector=f"involvedObject.kind=LLMDeployment,reason={reason}")
    return list(got.items)


def owners_of(obj: Any, *path: str) -> set[str]:
    """Field managers whose managedFields contain the nested field ``path`` (``f:``-prefixed keys)."""
    out = set()
    for entry in obj.metadata.managed_fields or ():
        node = entry.fields_v1 or {}
        for key in path:
            node = node.get(f"f:{key}") if isinstance(node, dict) else None
        if node is not None:
            out.add(entry.manager)
    return out


def assert_no_request_refused(cluster: LocalCluster, inst: Install) -> None:
    """No request of the operator's ServiceAccount was answered 403, per the API server's audit
    log (``responseStatus.code`` of each request, ``user.username`` of its sender)."""
    requests = operator_requests(cluster, inst.username)
    assert requests, f"no request of {inst.username} in the audit log"
    refused = [describe(e) for e in requests if (e.get("responseStatus") or {}).get("code") == 403]
    assert refused == [], f"requests of {inst.username} refused: {refused}"


def peer_priorities(cluster: LocalCluster, peering: str) -> dict[str, int]:
    """Kopf peer id -> priority of the live peers in ClusterKopfPeering ``peering`` (each Kopf
    process keeps ``status.<id> = {priority, lastseen, lifetime}`` there and nulls it on exit)."""
    obj = kubernetes.client.CustomObjectsApi(cluster.api).get_cluster_custom_object(
        "kopf.dev", "v1", "clusterkopfpeerings", peering)
    return {peer: int(info["priority"]) for peer, info in (obj.get("status") or {}).items() if info}


def tick_count(op: OperatorProcess) -> float:
    """llmscale_signal_read_errors_total for serving/chat on the operator's own /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{op.port}/metrics", timeout=5) as r:
        text = r.read().decode()
    return sum(s.value for family in text_string_to_metric_families(text) for s in family.samples
               if s.name == "llmscale_signal_read_errors_total"
               and s.labels.get("namespace") == SERVING and s.labels.get("name") == "chat")


def assert_every_permission_used(cluster: LocalCluster, inst: Install) -> None:
    exercised, refused = used(cluster, inst.username)
    assert refused == [], f"requests of {inst.username} refused: {refused}"
    grants = granted(inst.roles())
    assert exercised, f"no request of {inst.username} in the audit log"
    assert exercised <= grants, f"used but not granted (audit log misread?): {exercised - grants}"
    assert grants - exercised == set(NOT_A_REQUEST), (
        f"granted but never used, and not explained in NOT_A_REQUEST: {grants - exercised - set(NOT_A_REQUEST)}")


# --------------------------------------------------------------------------------------------
# Cluster-wide install, two replicas with leader election
# --------------------------------------------------------------------------------------------

SERVING = "serving"


@pytest.fixture(scope="class")
def clusterwide(cluster: LocalCluster, helm: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Install]:
    """The chart's cluster-wide install (ClusterRole) with leader election, two replicas and the
    GPUs-free read (operator.readNodes, off by default); the LLMDeployments' namespace enforces the
    "restricted" Pod Security Standard."""
    cluster.create_namespace(SERVING, {"pod-security.kubernetes.io/enforce": "restricted",
                                       "pod-security.kubernetes.io/enforce-version": "latest"})
    inst = install(cluster, helm, tmp_path_factory.mktemp("clusterwide"), "llmscale-system",
                   ["leaderElection.enabled=true", "replicaCount=2", "operator.readNodes=true"], operators=2)
    try:
        yield inst
    finally:
        for op in inst.operators:
            op.stop()


@pytest.mark.usefixtures("clusterwide")
class TestClusterWideInstall:
    """Ordered steps of one story: Argo CD creates and changes the LLMDeployment, Flux takes over."""

    def test_the_service_accounts_rights_suffice_for_children_with_status(self, cluster: LocalCluster) -> None:
        cluster.apply([llmdeployment(SERVING)], "argocd-controller", force=True)
        svc = kubernetes.client.CoreV1Api(cluster.api)
        wait_for("Service serving/chat", lambda: svc.read_namespaced_service("chat", SERVING))
        wait_for("PDB serving/chat",
                 lambda: kubernetes.client.PolicyV1Api(cluster.api).read_namespaced_pod_disruption_budget("chat", SERVING))
        # 1 + headroom 1 = 2 interactive replicas. The batch pool is sized from its Jobs' backlog:
        # with no Job outstanding it stays at 0 even inside the open window (docs/batch.md).
        wait_for("Deployment chat at 2 replicas", lambda: (d := deployment(cluster, SERVING, "chat")) and d.spec.replicas == 2)
        wait_for("Deployment chat-batch at 0 replicas",
                 lambda: (d := deployment(cluster, SERVING, "chat-batch")) and d.spec.replicas == 0)
        # Pod Security admission ("restricted") admits the mock engine's pods: the ReplicaSets made them.
        wait_for("2 interactive pods admitted under restricted Pod Security", lambda: len(svc.list_namespaced_pod(
            SERVING, label_selector="llmscale.dev/deployment=chat,llmscale.dev/pool=interactive").items) == 2)
        wait_for("status.replicas with every pod ready after its cold start",
                 lambda: {"desired": 2, "ready": 2, "batch": 0, "batchReady": 0}.items()
                 <= get_llmdep(cluster, SERVING)["status"]["replicas"].items())
        conditions = {c["type"]: c for c in get_llmdep(cluster, SERVING)["status"]["conditions"]}
        assert conditions["MetricsAvailable"]["status"] == "False"  # Prometheus refused: unknown, not zero
        assert conditions["BatchWindowOpen"]["status"] == "True"
        assert conditions["BatchBacklog"]["status"] == "False", conditions["BatchBacklog"]

    def test_the_standby_peered_replica_takes_over_when_the_working_one_stops(self, cluster: LocalCluster,
                                                                       clusterwide: Install) -> None:
        """Each replica drew its own priority (the peering object's status lists both); the lower
        one stands by (Kopf pauses it) and resumes when the higher one stops. Whether a replica
        works is read from its own /metrics: each tick fails to read signals (Prometheus refuses
        connections here) and counts it in llmscale_signal_read_errors_total."""
        ops = clusterwide.operators
        (peering,) = [d["metadata"]["name"] for d in clusterwide.docs if d["kind"] == "ClusterKopfPeering"]
        peers = wait_for("both replicas in the peering object", lambda: (
            p if len(p := peer_priorities(cluster, peering)) == 2 else None))
        assert len(set(peers.values())) == 2, f"two replicas drew the same priority: {peers}"
        wait_for("a replica to tick", lambda: any(tick_count(op) > 0 for op in ops))
        before = [tick_count(op) for op in ops]
        time.sleep(3)  # three 1 s ticks
        ticked = [tick_count(op) > n for op, n in zip(ops, before, strict=True)]
        assert sorted(ticked) == [False, True], f"exactly one replica must tick: {ticked}"
        high, low = (ops[0], ops[1]) if ticked[0] else (ops[1], ops[0])
        mark = tick_count(low)
        high.stop()  # Kopf removes itself from the peering object on the way out
        left = wait_for("the stopped replica to leave the peering object", lambda: (
            p if len(p := peer_priorities(cluster, peering)) == 1 else None))
        assert list(left.values()) == [min(peers.values())], (
            f"the replica that worked was not the one of higher priority: {peers} -> {left}")
        wait_for("the lower-priority replica to resume and tick", lambda: tick_count(low) > mark)

    def test_argo_cd_reapplying_the_manifest_changes_nothing(self, cluster: LocalCluster) -> None:
        steady = {"desired": 2, "ready": 2, "batch": 0, "batchReady": 0}
        wait_for("a steady status", lambda: steady.items() <= get_llmdep(cluster, SERVING)["status"]["replicas"].items())
        before = get_llmdep(cluster, SERVING)
        cluster.apply([llmdeployment(SERVING)], "argocd-controller", force=True)  # a sync of unchanged Git
        time.sleep(3)  # three ticks of the operator
        after = get_llmdep(cluster, SERVING)
        assert after["metadata"]["generation"] == before["metadata"]["generation"]
        assert steady.items() <= after["status"]["replicas"].items()
        assert set(after["status"]) == set(before["status"])  # nothing of the status was removed
        assert after["metadata"]["finalizers"] == ["llmscale.dev/finalizer"]
        assert "llmscale.dev/last-handled-configuration" in after["metadata"]["annotations"]
        assert deployment(cluster, SERVING, "chat").spec.replicas == 2
        assert deployment(cluster, SERVING, "chat-batch").spec.replicas == 0

    def test_a_raised_min_from_git_is_applied_while_signals_are_unknown(self, cluster: LocalCluster) -> None:
        cluster.apply([llmdeployment(SERVING, min_replicas=3)], "argocd-controller", force=True)
        wait_for("Deployment chat at 3 replicas", lambda: deployment(cluster, SERVING, "chat").spec.replicas == 3)
        wait_for("status.replicas.desired 3",
                 lambda: get_llmdep(cluster, SERVING)["status"]["replicas"]["desired"] == 3)
        wait_for("a ScaledUp Event 2 -> 3", lambda: [e for e in events(cluster, SERVING, "ScaledUp")
                                                   if "serving/chat from 2 to 3 replicas" in e.message])

    def test_removing_spec_batch_in_git_deletes_the_batch_deployment(self, cluster: LocalCluster) -> None:
        cluster.apply([llmdeployment(SERVING, min_replicas=3, batch=False)], "argocd-controller", force=True)
        wait_for("Deployment chat-batch deleted", lambda: deployment(cluster, SERVING, "chat-batch") is None)
        wait_for("a BatchPoolRemoved Event", lambda: events(cluster, SERVING, "BatchPoolRemoved"))
        assert deployment(cluster, SERVING, "chat").spec.replicas == 3

    def test_flux_takes_over_without_a_fight(self, cluster: LocalCluster) -> None:
        manifest = llmdeployment(SERVING, min_replicas=3, batch=False)
        generation = get_llmdep(cluster, SERVING)["metadata"]["generation"]
        cluster.apply([manifest], "kustomize-controller", force=True)
        assert get_llmdep(cluster, SERVING)["metadata"]["generation"] == generation
        # A change in Flux's Git: the operator re-applies the children and keeps its replicas.
        manifest["spec"]["replicas"]["max"] = 5
        cluster.apply([manifest], "kustomize-controller", force=True)
        wait_for("status.observedGeneration to follow the new generation",
                 lambda: get_llmdep(cluster, SERVING)["status"]["observedGeneration"] == generation + 1)
        time.sleep(2)
        assert deployment(cluster, SERVING, "chat").spec.replicas == 3
        assert get_llmdep(cluster, SERVING)["status"]["replicas"]["desired"] == 3

    def test_managed_fields_give_spec_to_gitops_status_to_llmscale(self, cluster: LocalCluster) -> None:
        objects = kubernetes.client.CustomObjectsApi(cluster.api)
        body = objects.get_namespaced_custom_object(GROUP, VERSION, SERVING, PLURAL, "chat")
        entries = body["metadata"]["managedFields"]
        spec_writers = {e["manager"] for e in entries if "f:spec" in e["fieldsV1"]}
        assert spec_writers and spec_writers <= GITOPS_MANAGERS, spec_writers
        assert all(e["operation"] == "Apply" for e in entries if "f:spec" in e["fieldsV1"])
        operator_entries = [e for e in entries if e["manager"] in OPERATOR_MANAGERS]
        assert operator_entries
        for e in operator_entries:
            if e.get("subresource") == "status":
                assert set(e["fieldsV1"]) == {"f:status"}, e
                continue
            # Kopf's bookkeeping on the main resource: its annotations and its finalizer, nothing else.
            assert set(e["fieldsV1"]) == {"f:metadata"}, e
            meta = e["fieldsV1"]["f:metadata"]
            assert set(meta) <= {"f:annotations", "f:finalizers"}, meta
            assert {k for k in meta.get("f:annotations", {}) if k != "."} <= {
                "f:llmscale.dev/last-handled-configuration", "f:llmscale.dev/kopf-managed"}
            assert {k for k in meta.get("f:finalizers", {}) if k != "."} <= {'v:"llmscale.dev/finalizer"'}
        child = deployment(cluster, SERVING, "chat")
        assert owners_of(child, "spec", "replicas") == {"llmscale"}

    def test_every_pod_or_deployment_read_is_selected_by_the_api_server(self, cluster: LocalCluster,
                                                                clusterwide: Install) -> None:
        """Issue 11, case 11: the pod and Deployment indexes filtered labels in the operator, so
        every pod event of the cluster streamed to it. Every list and watch of pods and Deployments
        the operator sent carries the label selector (the audit log's requestURI)."""
        reads = [e for e in operator_requests(cluster, clusterwide.username)
                 if e["verb"] in ("list", "watch") and (e.get("objectRef") or {}).get("resource") in ("pods", "deployments")]
        assert {e["objectRef"]["resource"] for e in reads} == {"pods", "deployments"}, [describe(e) for e in reads]
        def query(e: dict[str, Any]) -> dict[str, list[str]]:
            return urllib.parse.parse_qs(urllib.parse.urlsplit(e["requestURI"]).query)

        # The GPUs free (llmscale.controller.gpusfree): a paginated list of the bound pods every 15 s,
        # by field selector, never a watch: the one read of every pod the operator makes.
        gpus_free = [e for e in reads if query(e).get("fieldSelector") == [BOUND_PODS]]
        assert gpus_free and all(e["verb"] == "list" and query(e).get("limit") for e in gpus_free), \
            [describe(e) for e in gpus_free]
        unselected = [e["requestURI"] for e in reads if e not in gpus_free
                      and query(e).get("labelSelector") != ["app.kubernetes.io/managed-by=llmscale"]]
        assert unselected == [], unselected

    def test_no_request_was_refused(self, cluster: LocalCluster, clusterwide: Install) -> None:
        assert_no_request_refused(cluster, clusterwide)

    def test_every_permission_was_used(self, cluster: LocalCluster, clusterwide: Install) -> None:
        assert_every_permission_used(cluster, clusterwide)

    @pytest.mark.parametrize(
        ("verb", "group", "resource", "namespace"),
        [
            pytest.param("delete", "", "nodes", None, id="delete-nodes"),
            pytest.param("get", "", "secrets", SERVING, id="get-secrets"),
            pytest.param("list", "", "secrets", None, id="list-secrets"),
            pytest.param("create", "", "pods", SERVING, id="create-pods"),
            pytest.param("create", "", "configmaps", SERVING, id="create-configmaps"),
            pytest.param("update", "llmscale.dev", "llmdeployments", SERVING, id="replace-llmdeployments"),
            pytest.param("delete", "llmscale.dev", "llmdeployments", SERVING, id="delete-llmdeployments"),
            pytest.param("create", "", "serviceaccounts/token", "llmscale-system", id="mint-tokens"),
            pytest.param("create", "rbac.authorization.k8s.io", "clusterrolebindings", None, id="bind-roles"),
            pytest.param("patch", "", "nodes/status", None, id="patch-node-status"),
            pytest.param("delete", "", "pods", SERVING, id="delete-pods"),
        ],
    )
    def test_forbidden_verbs_are_refused(self, clusterwide: Install, verb: str, group: str, resource: str,
                                         namespace: str | None) -> None:
        api = clusterwide.client()
        res, _, sub = resource.partition("/")
        review = kubernetes.client.AuthorizationV1Api(api).create_self_subject_access_review({
            "spec": {"resourceAttributes": {"verb": verb, "group": group, "resource": res, "subresource": sub,
                                            "namespace": namespace}}})
        assert review.status.allowed is False, review.status

    def test_real_calls_outside_the_job_get_403(self, cluster: LocalCluster, clusterwide: Install) -> None:
        """Refused with the operator's own token; the audit log records each refusal (code 403 for
        this username), which is what assert_no_request_refused looks for in the operator's
        requests: the check can see a refusal."""
        api = clusterwide.client()
        core = kubernetes.client.CoreV1Api(api)
        calls = {
            "delete node": lambda: core.delete_node("gpu-node-0"),
            "read secret": lambda: core.read_namespaced_secret("anything", SERVING),
            "create pod": lambda: core.create_namespaced_pod(SERVING, {
                "metadata": {"name": "x"}, "spec": {"containers": [{"name": "x", "image": "llmscale:dev"}]}}),
            "delete LLMDeployment": lambda: kubernetes.client.CustomObjectsApi(api).delete_namespaced_custom_object(
                GROUP, VERSION, SERVING, PLURAL, "chat"),
        }
        for what, call in calls.items():
            with pytest.raises(ApiException) as caught:
                call()
            assert caught.value.status == 403, what

        def audited_refusals() -> list[dict[str, Any]]:
            return [e for e in cluster.audit_events(clusterwide.username) if e.get("userAgent") == TEST_USER_AGENT
                    and (e.get("responseStatus") or {}).get("code") == 403]

        refusals = wait_for("the refusals in the audit log", lambda: (r if len(r := audited_refusals()) >= len(calls)
                                                                     else None), 10)
        assert {(e["verb"], e["objectRef"]["resource"]) for e in refusals} >= {
            ("delete", "nodes"), ("get", "secrets"), ("create", "pods"), ("delete", "llmdeployments")}

    def test_rbac_cannot_keep_the_operator_off_the_spec(self, clusterwide: Install) -> None:
        """Kopf's annotations and finalizer need ``patch`` on the LLMDeployment, and RBAC has no
        field-level rules, so the same verb could write spec: what keeps the operator off the spec is
        its code, shown by managedFields (test_managed_fields_give_spec_to_gitops_status_to_llmscale)."""
        review = kubernetes.client.AuthorizationV1Api(clusterwide.client()).create_self_subject_access_review({
            "spec": {"resourceAttributes": {"verb": "patch", "group": GROUP, "resource": PLURAL, "namespace": SERVING}}})
        assert review.status.allowed is True


# --------------------------------------------------------------------------------------------
# Namespaced install (Role per watched namespace + read-only discovery), leader election on
# --------------------------------------------------------------------------------------------

TEAM, OUTSIDE = "team-a", "team-b"


@pytest.fixture(scope="class")
def namespaced(cluster: LocalCluster, helm: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Install]:
    for ns in (TEAM, OUTSIDE):
        cluster.create_namespace(ns, {"pod-security.kubernetes.io/enforce": "restricted"})
    inst = install(cluster, helm, tmp_path_factory.mktemp("namespaced"), "llmscale-ns",
                   ["watch.allNamespaces=false", f"watch.namespaces={{{TEAM}}}", "leaderElection.enabled=true"],
                   operators=1)
    try:
        yield inst
    finally:
        for op in inst.operators:
            op.stop()


@pytest.mark.usefixtures("namespaced")
class TestNamespacedInstall:
    def test_whole_job_in_the_watched_namespace(self, cluster: LocalCluster, namespaced: Install) -> None:
        cluster.apply([llmdeployment(TEAM)], "argocd-controller", force=True)
        wait_for("Deployment team-a/chat-batch", lambda: deployment(cluster, TEAM, "chat-batch"))
        wait_for("status.replicas", lambda: get_llmdep(cluster, TEAM).get("status", {}).get("replicas"))
        cluster.apply([llmdeployment(TEAM, min_replicas=3, batch=False)], "argocd-controller", force=True)
        wait_for("Deployment team-a/chat at 3 replicas", lambda: deployment(cluster, TEAM, "chat").spec.replicas == 3)
        wait_for("Deployment team-a/chat-batch deleted", lambda: deployment(cluster, TEAM, "chat-batch") is None)
        assert_no_request_refused(cluster, namespaced)
        assert_every_permission_used(cluster, namespaced)

    def test_an_unwatched_namespace_is_out_of_reach(self, namespaced: Install) -> None:
        api = namespaced.client()
        with pytest.raises(ApiException) as caught:
            kubernetes.client.AppsV1Api(api).patch_namespaced_deployment(
                "x", OUTSIDE, {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x"}},
                field_manager="llmscale", _content_type="application/apply-patch+yaml")
        assert caught.value.status == 403
        with pytest.raises(ApiException) as caught:
            kubernetes.client.CustomObjectsApi(api).list_cluster_custom_object(GROUP, VERSION, PLURAL)
        assert caught.value.status == 403
        with pytest.raises(ApiException) as caught:
            kubernetes.client.CoreV1Api(api).list_namespaced_secret(TEAM)
        assert caught.value.status == 403


# --------------------------------------------------------------------------------------------
# Is each write rule needed? Take one away and write a child as the operator does.
# --------------------------------------------------------------------------------------------

LAB = "rbac-lab"


@pytest.fixture(scope="module")
def lab(cluster: LocalCluster, helm: Path) -> dict[str, Any]:
    """Namespace ``rbac-lab`` with an LLMDeployment to own children, and the chart's namespaced Role
    for it. The installs above have stopped by now (class fixtures), so no operator acts here."""
    cluster.create_namespace(LAB)
    owner: dict[str, Any] = kubernetes.client.CustomObjectsApi(cluster.api).create_namespaced_custom_object(
        GROUP, VERSION, LAB, PLURAL, llmdeployment(LAB, batch=False))
    # The chart's namespaced work rules, to take one rule away from at a time.
    docs = render_chart(helm, "llmscale-system", "watch.allNamespaces=false", f"watch.namespaces={{{LAB}}}")
    (role,) = [d for d in docs if d["kind"] == "Role"]
    return {"owner": owner, "role": role}


def _service(owner: dict[str, Any], name: str) -> dict[str, Any]:
    meta = owner["metadata"]
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "namespace": LAB, "ownerReferences": [{
                "apiVersion": f"{GROUP}/{VERSION}", "kind": "LLMDeployment", "name": meta["name"],
                "uid": meta["uid"], "controller": True, "blockOwnerDeletion": True}]},
            "spec": {"ports": [{"name": "http", "port": 8000}]}}


@pytest.mark.parametrize(
    ("sa", "without", "message"),
    [
        pytest.param("all-rules", None, None, id="chart-rules-suffice"),
        pytest.param("no-create", ("", "services", "create"), 'cannot create resource "services"', id="without-create"),
        pytest.param("no-finalizers", ("llmscale.dev", "llmdeployments/finalizers", "update"),
                     "cannot set blockOwnerDeletion", id="without-owner-finalizers-update"),
    ],
)
def test_each_write_rule_is_needed(cluster: LocalCluster, lab: dict[str, Any], tmp_path: Path,
                                   sa: str, without: Rule | None, message: str | None) -> None:
    """A server-side apply that creates a child is authorised as ``create`` (patch alone is refused)
    and, with blockOwnerDeletion, needs ``update`` on the owner's ``finalizers`` (admission)."""
    rules = []
    for rule in lab["role"]["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                verbs = [v for v in rule["verbs"] if (group, resource, v) != without]
                if verbs:
                    rules.append({"apiGroups": [group], "resources": [resource], "verbs": verbs})
    cluster.apply([
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": sa, "namespace": LAB}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": sa, "namespace": LAB},
         "rules": rules},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": sa, "namespace": LAB},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": sa},
         "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": LAB}]},
    ], field_manager="test")
    api = kubernetes.config.new_client_from_config(
        config_file=str(cluster.service_account_kubeconfig(LAB, sa, tmp_path / "kubeconfig")))
    core = kubernetes.client.CoreV1Api(api)
    name = f"svc-{sa}"
    apply = {"field_manager": "llmscale", "force": True, "_content_type": "application/apply-patch+yaml"}

    def ssa() -> Any:
        return core.patch_namespaced_service(name, LAB, _service(lab["owner"], name), **apply)

    # New RBAC objects reach the authorizer's cache within a moment: wait until the binding is seen
    # (patch is granted in every case), so that a refusal below is about the missing rule only.
    authz = kubernetes.client.AuthorizationV1Api(api)
    wait_for(f"RBAC of ServiceAccount {LAB}/{sa}", lambda: authz.create_self_subject_access_review({"spec": {
        "resourceAttributes": {"verb": "patch", "resource": "services", "namespace": LAB}}}).status.allowed)
    if message is None:
        wait_for("the apply as the chart's rules", ssa, 10)
        return
    with pytest.raises(ApiException) as caught:
        ssa()
    assert caught.value.status == 403
    assert message in json.loads(caught.value.body)["message"], caught.value.body
    # The same apply on an object that exists already is a plain patch: allowed without `create`.
    if without == ("", "services", "create"):
        cluster.apply([_service(lab["owner"], name)], field_manager="admin")
        wait_for("the apply to an existing Service", ssa, 10)
