"""Who may write LLMDeployments, and what an LLMDeployment may ask for — as an unprivileged user
on a real kube-apiserver (issue 22, case 3; docs/security.md).

The chart's ClusterRoles ``llmscale-view`` and ``llmscale-edit`` are aggregated into the built-in
``view``/``edit``/``admin``: ``alice``, bound to ``edit`` in namespace ``ml`` only, may write
LLMDeployments there (and not their status), nowhere else; ``bob``, bound to ``view``, may read
them only. The optional ValidatingAdmissionPolicy (``admissionPolicy.enabled``) then refuses what
would make an LLMDeployment stronger than its author should be: a ServiceAccount off the
allow-list, a sidecar, a Secret volume or environment from a Secret, a hostPath; and allows the
plain LLMDeployment and an allowed ServiceAccount. Requests are made with the admin's credentials
impersonating the user (``kubectl --as``): the API server authorises them as that user.
"""

from __future__ import annotations

import copy
import json
import re
import subprocess
from pathlib import Path
from typing import Any

import kubernetes.client
import kubernetes.config
import pytest
import yaml
from tests.cluster.helpers import LocalCluster, render_chart, wait_for

from llmscale.api import LLMDeploymentSpec, ScaleTargetRef
from llmscale.controller.manifests.podtemplate import pod_template
from llmscale.controller.scaletarget import KubernetesScaleClient, ScaleTargetError

pytestmark = pytest.mark.slow

NS, OTHER = "ml", "ml-other"
ALLOWED_SA = "engine-reader"


def manifest(name: str, template: dict[str, Any] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "model": {"name": "chat", "preset": "llama-3.1-8b"},
        "engine": {"type": "mock", "image": "llmscale:dev"},
        "replicas": {"min": 1, "max": 2},
    }
    if template is not None:
        spec["template"] = template
    return {"apiVersion": "llmscale.dev/v1alpha1", "kind": "LLMDeployment",
            "metadata": {"name": name, "namespace": NS}, "spec": spec}


def as_user(cluster: LocalCluster, user: str, *args: str, body: dict[str, Any] | None = None) -> subprocess.CompletedProcess[str]:
    return cluster.kubectl(f"--as={user}", *args, input=json.dumps(body) if body else None, check=False)


def create(cluster: LocalCluster, user: str, body: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    return as_user(cluster, user, "create", "--dry-run=server", "-f", "-", body=body)


@pytest.fixture(scope="module")
def tenancy(cluster: LocalCluster, helm: Path) -> LocalCluster:
    for ns in (NS, OTHER):
        cluster.create_namespace(ns)
    docs = render_chart(helm, "llmscale-tenancy", "admissionPolicy.enabled=true",
                        f"admissionPolicy.serviceAccounts={{{ALLOWED_SA}}}",
                        f"admissionPolicy.namespaceSelector.matchLabels.kubernetes\\.io/metadata\\.name={NS}",
                        release="llmscale")
    kinds = {"ClusterRole", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
    users = [d for d in docs if d["kind"] in kinds and d["metadata"]["name"] != "llmscale"]
    assert {d["metadata"]["name"] for d in users} >= {"llmscale-view", "llmscale-edit", "llmscale-llmdeployments"}
    cluster.apply(users, field_manager="helm")
    for user, role in (("alice", "edit"), ("bob", "view")):
        cluster.apply([{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                        "metadata": {"name": f"{user}-{role}", "namespace": NS},
                        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
                        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]}],
                      field_manager="test")
    # Aggregation is asynchronous (the controller manager's clusterrole-aggregation controller), and
    # so is the policy's compilation: wait until alice may create and a refused case is refused.
    wait_for("edit aggregates llmscale-edit", lambda: as_user(
        cluster, "alice", "auth", "can-i", "create", "llmdeployments.llmscale.dev", "-n", NS).returncode == 0, 60)
    sidecar = manifest("probe", {"spec": {"containers": [{"name": "x", "image": "busybox"}]}})
    wait_for("the admission policy in force", lambda: create(cluster, "alice", sidecar).returncode != 0, 60)
    return cluster


def test_the_built_in_roles_carry_llmdeployment_rights_in_their_namespace_only(tenancy: LocalCluster) -> None:
    def can(user: str, verb: str, resource: str, ns: str, subresource: str = "") -> bool:
        extra = [f"--subresource={subresource}"] if subresource else []
        return as_user(tenancy, user, "auth", "can-i", verb, resource, "-n", ns, *extra).returncode == 0

    llmd = "llmdeployments.llmscale.dev"
    assert can("alice", "create", llmd, NS) and can("alice", "delete", llmd, NS)
    assert not can("alice", "create", llmd, OTHER), "a RoleBinding in ml grants nothing in ml-other"
    assert can("alice", "get", llmd, NS, "status")
    assert not can("alice", "patch", llmd, NS, "status"), "status is the operator's"
    assert can("bob", "list", llmd, NS) and can("bob", "get", llmd, NS, "status")
    assert not can("bob", "create", llmd, NS)
    assert create(tenancy, "alice", manifest("chat")).returncode == 0
    refused = create(tenancy, "bob", manifest("chat"))
    assert refused.returncode != 0 and "forbidden" in refused.stderr.lower()


SECRET_ENV = {"name": "engine", "env": [{"name": "DB", "valueFrom": {"secretKeyRef": {"name": "db-creds", "key": "p"}}}]}

REFUSED = [
    pytest.param({"spec": {"serviceAccountName": "ml-deployer"}}, "serviceAccountName must be unset or one of",
                 id="issue-22-service-account-off-the-list"),
    pytest.param({"spec": {"serviceAccount": "ml-deployer"}}, "serviceAccountName must be unset", id="deprecated-field"),
    pytest.param({"spec": {"containers": [{"name": "exfil", "image": "curlimages/curl"}]}}, "besides the engine",
                 id="issue-22-sidecar"),
    pytest.param({"spec": {"initContainers": [{"name": "init", "image": "busybox"}]}}, "besides the engine",
                 id="init-container"),
    pytest.param({"spec": {"volumes": [{"name": "db", "secret": {"secretName": "db-creds"}}]}}, "may not mount a Secret",
                 id="issue-22-secret-volume"),
    pytest.param({"spec": {"volumes": [{"name": "db", "projected": {"sources": [{"secret": {"name": "db-creds"}}]}}]}},
                 "may not mount a Secret", id="projected-secret"),
    pytest.param({"spec": {"containers": [SECRET_ENV]}}, "environment from a Secret", id="env-from-secret-key"),
    pytest.param({"spec": {"containers": [{"name": "engine", "envFrom": [{"secretRef": {"name": "db-creds"}}]}]}},
                 "environment from a Secret", id="env-from-secret"),
    pytest.param({"spec": {"volumes": [{"name": "root", "hostPath": {"path": "/"}}]}}, "hostPath", id="host-path"),
]


@pytest.mark.parametrize(("template", "why"), REFUSED)
def test_the_admission_policy_refuses_what_would_widen_an_llmdeployment(
    tenancy: LocalCluster, template: dict[str, Any], why: str
) -> None:
    refused = create(tenancy, "alice", manifest("chat", copy.deepcopy(template)))
    assert refused.returncode != 0, refused.stdout
    assert "ValidatingAdmissionPolicy" in refused.stderr and why in refused.stderr, refused.stderr


ALLOWED = [
    pytest.param(None, id="no-template"),
    pytest.param({"spec": {"serviceAccountName": ALLOWED_SA}}, id="allowed-service-account"),
    pytest.param({"spec": {"containers": [{"name": "engine", "env": [{"name": "A", "value": "1"}]}]}},
                 id="engine-env"),
    pytest.param({"spec": {"volumes": [{"name": "cache", "emptyDir": {}}],
                           "nodeSelector": {"gpu": "h100"}}}, id="emptydir-and-node-selector"),
    pytest.param({"metadata": {"labels": {"team": "ml"}}}, id="labels-only"),
]


@pytest.mark.parametrize("template", ALLOWED)
def test_the_admission_policy_allows_an_ordinary_llmdeployment(tenancy: LocalCluster, template: dict[str, Any] | None) -> None:
    allowed = create(tenancy, "alice", manifest("chat", copy.deepcopy(template)))
    assert allowed.returncode == 0, allowed.stderr


def test_the_policy_applies_only_where_bound(tenancy: LocalCluster) -> None:
    # The binding's namespaceSelector names ml only: the admin's own create in ml-other is not judged.
    body = manifest("chat", {"spec": {"serviceAccountName": "ml-deployer"}})
    body["metadata"]["namespace"] = OTHER
    done = tenancy.kubectl("create", "--dry-run=server", "-f", "-", input=yaml.safe_dump(body), check=False)
    assert done.returncode == 0, done.stderr


# --------------------------------------------------------------------------------------------
# Pod Security: the operator's pod passes "restricted", the engine pods "baseline" (issue 22)
# --------------------------------------------------------------------------------------------

RESTRICTED, BASELINE = "psa-restricted", "psa-baseline"


@pytest.fixture(scope="module")
def psa(cluster: LocalCluster) -> LocalCluster:
    for ns, level in ((RESTRICTED, "restricted"), (BASELINE, "baseline")):
        cluster.create_namespace(ns, {"pod-security.kubernetes.io/enforce": level,
                                      "pod-security.kubernetes.io/enforce-version": "latest"})
    return cluster


def dry_run_pod(cluster: LocalCluster, namespace: str, name: str, pod: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    body = {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": pod.get("metadata", {}).get("labels", {})},
            "spec": {k: v for k, v in pod["spec"].items() if k != "priorityClassName"}}
    return cluster.kubectl("create", "--dry-run=server", "-f", "-", input=json.dumps(body), check=False)


def test_the_operator_pod_passes_restricted(psa: LocalCluster, helm: Path) -> None:
    docs = render_chart(helm, RESTRICTED)
    (operator,) = [d for d in docs if d["kind"] == "Deployment"]
    psa.apply([d for d in docs if d["kind"] == "ServiceAccount"], field_manager="helm")
    admitted = dry_run_pod(psa, RESTRICTED, "operator", operator["spec"]["template"])
    assert admitted.returncode == 0, admitted.stderr
    # The namespace does enforce: the same pod adding a capability is refused.
    loose = copy.deepcopy(operator["spec"]["template"])
    loose["spec"]["containers"][0]["securityContext"]["capabilities"] = {"add": ["NET_ADMIN"]}
    refused = dry_run_pod(psa, RESTRICTED, "operator", loose)
    assert refused.returncode != 0 and 'violates PodSecurity "restricted' in refused.stderr, refused.stderr


@pytest.mark.parametrize(("engine", "namespace", "admitted"), [
    pytest.param("vllm", BASELINE, True, id="vllm-baseline"),
    pytest.param("sglang", BASELINE, True, id="sglang-baseline"),
    pytest.param("mock", RESTRICTED, True, id="mock-restricted"),
    pytest.param("vllm", RESTRICTED, False, id="vllm-not-restricted"),
])
def test_engine_pods_pass_their_pod_security_level(psa: LocalCluster, engine: str, namespace: str, admitted: bool) -> None:
    spec = LLMDeploymentSpec.model_validate({"model": {"name": "chat", "preset": "llama-3.1-8b"}, "engine": {"type": engine}})
    done = dry_run_pod(psa, namespace, f"{engine}-engine", pod_template("chat", spec, "interactive"))
    assert (done.returncode == 0) == admitted, done.stderr


# --------------------------------------------------------------------------------------------
# spec.scaleTargetRef only to workloads that opt in with a label (operator.scaleTargetLabel)
# --------------------------------------------------------------------------------------------

OPT_IN = ("llmscale.dev/scalable", "true")


def _workloads(cluster: LocalCluster) -> None:
    for kind, name, labels in (("StatefulSet", "postgres", {}), ("Deployment", "web", dict([OPT_IN]))):
        cluster.apply([{
            "apiVersion": "apps/v1", "kind": kind,
            "metadata": {"name": name, "namespace": NS, "labels": labels},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                     **({"serviceName": name} if kind == "StatefulSet" else {}),
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"containers": [{"name": "c", "image": "registry.example/none:1"}]}}},
        }], field_manager="test")


async def test_scale_targets_must_opt_in_when_the_operator_says_so(
    tenancy: LocalCluster, helm: Path, tmp_path: Path
) -> None:
    """Issue 22, case 3: with operator.scaleTargetLabel the operator's own ServiceAccount (the
    chart's RBAC, its token only) reads and scales the labelled Deployment and refuses the
    StatefulSet postgres, naming the label; without the setting it would scale postgres."""
    release_ns = "llmscale-optin"
    docs = render_chart(helm, release_ns, f"operator.scaleTargetLabel={OPT_IN[0]}={OPT_IN[1]}", release="optin")
    tenancy.create_namespace(release_ns)
    tenancy.apply([d for d in docs if d["kind"] in {"ServiceAccount", "ClusterRole", "ClusterRoleBinding"}
                   and not d["metadata"]["name"].endswith(("-view", "-edit"))], field_manager="helm")
    _workloads(tenancy)
    token = tenancy.service_account_kubeconfig(release_ns, "optin-llmscale", tmp_path / "sa.kubeconfig")
    api = kubernetes.config.new_client_from_config(config_file=str(token))
    guarded = KubernetesScaleClient(api, opt_in=OPT_IN)
    web = ScaleTargetRef.model_validate({"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"})
    postgres = ScaleTargetRef.model_validate({"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "postgres"})

    assert (await guarded.read(NS, web)).replicas == 1
    await guarded.write(NS, web, 2)
    assert (await guarded.read(NS, web)).replicas == 2
    for attempt in (guarded.read(NS, postgres), guarded.write(NS, postgres, 0)):
        with pytest.raises(ScaleTargetError, match=re.escape("does not carry the label llmscale.dev/scalable=true")):
            await attempt
    got = kubernetes.client.AppsV1Api(tenancy.api).read_namespaced_stateful_set("postgres", NS)
    assert got.spec.replicas == 1, "postgres was not scaled"
    # The risk the setting closes: the same token without it reads postgres's /scale.
    assert (await KubernetesScaleClient(api).read(NS, postgres)).replicas == 1
