"""The Helm chart: lint, render under each supported combination of values, and check the contract
with the operator (environment variables, ports, RBAC, labels the signals module selects on)."""

from __future__ import annotations

import json
import re
import shutil
import tomllib
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from tests.deploy.helpers import CHART, ROOT, VARIANTS, by_kind, parse_docs, run
from tests.settings_samples import SAMPLES

from llmscale.controller.settings import ENV_VARS, OperatorSettings, load_settings, setting_names
from llmscale.signals.queries import SelectorLabels


def template(helm: Path, *sets: str, ok: bool = True) -> Any:
    args: list[str | Path] = [helm, "template", "llmscale", CHART, "--namespace", "llmscale-system"]
    for s in sets:
        args += ["--set", s]
    proc = run(args, ok=ok)
    return parse_docs(proc.stdout) if ok else proc


def operator_container(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (deployment,) = by_kind(docs, "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return container


#: The ClusterRole of the GPUs free (operator.readNodes, llmscale.controller.gpusfree): list only.
NODE_RULES = {("", "nodes", "list"), ("", "pods", "list")}


def work_roles(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The operator's ClusterRoles but the GPUs-free one (``<release>-nodes``): not the users'
    ``-view``/``-edit`` roles aggregated into the built-in ones."""
    return [r for r in by_kind(docs, "ClusterRole")
            if not r["metadata"]["name"].endswith(("-nodes", "-view", "-edit"))]


def rules(role: dict[str, Any]) -> set[tuple[str, str, str]]:
    return {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


@pytest.mark.parametrize("sets", [pytest.param(v, id=k) for k, v in VARIANTS.items()])
def test_helm_lint_strict_passes(helm: Path, sets: list[str]) -> None:
    args: list[str | Path] = [helm, "lint", "--strict", CHART]
    for s in sets:
        args += ["--set", s]
    run(args)


@pytest.mark.parametrize("sets", [pytest.param(v, id=k) for k, v in VARIANTS.items()])
def test_every_rendered_object_is_namespaced_in_the_release(helm: Path, sets: list[str]) -> None:
    docs = template(helm, *sets)
    cluster_scoped = {"ClusterRole", "ClusterRoleBinding", "ClusterKopfPeering", "PriorityClass"}
    watched = {"serving", "batch"}
    for doc in docs:
        ns = doc["metadata"].get("namespace")
        if doc["kind"] in cluster_scoped:
            assert ns is None, doc["metadata"]
        elif doc["kind"] in {"Role", "RoleBinding", "KopfPeering"}:
            assert ns in watched, doc["metadata"]
        else:
            assert ns == "llmscale-system", doc["metadata"]
    assert len(by_kind(docs, "Deployment")) == 1


def test_defaults_render_the_expected_objects(helm: Path) -> None:
    kinds = sorted(d["kind"] for d in template(helm))
    assert kinds == ["ClusterKopfPeering", "ClusterRole", "ClusterRole", "ClusterRole", "ClusterRoleBinding",
                     "Deployment", "NetworkPolicy", "PriorityClass", "PriorityClass", "PriorityClass", "Service",
                     "ServiceAccount"]


def test_users_roles_aggregate_into_the_built_in_ones(helm: Path) -> None:
    """Issue 22: llmscale-view into view/edit/admin, llmscale-edit into edit/admin (never status)."""
    roles = {d["metadata"]["name"]: d for d in template(helm) if d["kind"] == "ClusterRole"}
    aggregated = {name: {k.rsplit("-", 1)[-1] for k in d["metadata"]["labels"] if "aggregate-to-" in k}
                  for name, d in roles.items()}
    assert aggregated["llmscale-view"] == {"view", "edit", "admin"}
    assert aggregated["llmscale-edit"] == {"edit", "admin"}
    assert [r["resources"] for r in roles["llmscale-edit"]["rules"]] == [["llmdeployments"]]


def test_the_admission_policy_is_opt_in(helm: Path) -> None:
    """The ValidatingAdmissionPolicy and its binding only with admissionPolicy.enabled."""
    assert not [d for d in template(helm) if d["kind"].startswith("ValidatingAdmissionPolicy")]
    on = template(helm, "admissionPolicy.enabled=true", "admissionPolicy.allowHostPath=true")
    (policy,) = [d for d in on if d["kind"] == "ValidatingAdmissionPolicy"]
    (binding,) = [d for d in on if d["kind"] == "ValidatingAdmissionPolicyBinding"]
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert binding["spec"]["validationActions"] == ["Deny"]
    assert not any("hostPath" in v["expression"] for v in policy["spec"]["validations"]), "allowed: no rule"


def test_operator_environment_is_what_llmscale_run_reads(helm: Path) -> None:
    """Every LLMSCALE_* the chart sets is a known variable, and the operator's own
    load_settings accepts the rendered environment as it would in the pod."""
    for sets, expect_all in ((VARIANTS["defaults"], True), (VARIANTS["namespaced"], False)):
        container = operator_container(template(helm, *sets, "leaderElection.enabled=true"))
        env = {e["name"]: e["value"] for e in container["env"]}
        assert set(env) <= set(ENV_VARS), set(env) - set(ENV_VARS)
        settings = load_settings(None, env)
        assert settings.all_namespaces is expect_all
        assert settings.namespaces == (() if expect_all else ("serving", "batch"))
        assert settings.peering_name == "llmscale"
        assert settings.prometheus_url == "http://prometheus.monitoring.svc:9090"
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        assert ports["metrics"] == settings.metrics_port
        assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
        assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
        assert container["args"] == ["run"]


def _env(docs: list[dict[str, Any]]) -> dict[str, str]:
    """The operator container's literal environment (variables taken from Secrets left out)."""
    return {e["name"]: e["value"] for e in operator_container(docs)["env"] if "value" in e}


@pytest.mark.parametrize("names", [pytest.param(n, id=n.field) for n in setting_names()])
def test_every_setting_is_reachable_by_its_helm_value(helm: Path, names: Any) -> None:
    """Setting a setting's Helm value renders its LLMSCALE_* variable, and the operator reads the
    value back (tests/settings_samples.py has one non-default value per setting). Secrets are
    rendered as references to a Secret, never as values."""
    sample = SAMPLES[names.field]
    args: list[str | Path] = [helm, "template", "llmscale", CHART, "--namespace", "llmscale-system"]
    for pair in sample.helm:
        args += ["--set", pair]
    if not sample.helm:
        # --set-json: `--set x=2.5` would hand the chart the string "2.5" (Helm parses only ints).
        value = sample.raw if isinstance(sample.value, str | Path) else sample.value
        args += ["--set-json", f"{names.helm}={json.dumps(value)}"]
    docs = parse_docs(run(args).stdout)
    if names.helm.endswith("Secret"):
        (entry,) = [e for e in operator_container(docs)["env"] if e["name"] == names.env]
        assert "value" not in entry
        secret = dict(pair.removeprefix(names.helm + ".").split("=") for pair in sample.helm if names.helm in pair)
        assert entry["valueFrom"]["secretKeyRef"] == secret
        return
    env = _env(docs)
    assert names.env in env
    assert getattr(load_settings(None, env), names.field) == sample.value


def test_chart_defaults_are_the_operators_defaults(helm: Path) -> None:
    """values.yaml repeats every default of OperatorSettings, but for what the chart installs: it
    watches all namespaces (the bare operator none until told), names the peering object it creates
    (mandatory peering) and passes the PriorityClasses it creates."""
    assert load_settings(None, _env(template(helm))) == OperatorSettings(
        all_namespaces=True, peering_name="llmscale", interactive_priority_class="llmscale-interactive",
        batch_priority_class="llmscale-batch")


def test_peered_by_default_so_a_second_operator_pauses(helm: Path) -> None:
    """Issue 11, case 15: with the chart's operator standalone, an `llmscale run` beside it wrote
    replicas too. The chart's operator is in peering `llmscale` by default (the object is created
    with it), which an `llmscale run` joins by default."""
    docs = template(helm)
    settings = load_settings(None, _env(docs))
    assert not settings.standalone and settings.peering == "llmscale"
    (peering,) = by_kind(docs, "ClusterKopfPeering")
    assert peering["metadata"]["name"] == "llmscale"
    assert load_settings(None, _env(template(helm, *VARIANTS["standalone"]))).standalone


def test_priority_classes_put_interactive_above_batch(helm: Path) -> None:
    classes = {d["metadata"]["name"]: d for d in by_kind(template(helm), "PriorityClass")}
    interactive, batch = classes["llmscale-interactive"], classes["llmscale-batch"]
    assert interactive["value"] > batch["value"] > 0
    assert interactive["preemptionPolicy"] == "PreemptLowerPriority" and batch["preemptionPolicy"] == "Never"
    assert not interactive["globalDefault"] and not batch["globalDefault"]
    assert by_kind(template(helm, "priorityClasses.create=false"), "PriorityClass") == []


def test_operator_pod_is_locked_down(helm: Path) -> None:
    docs = template(helm)
    (deployment,) = by_kind(docs, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    sc = operator_container(docs)["securityContext"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["runAsUser"] != 0
    assert {"name": "tmp", "mountPath": "/tmp"} in operator_container(docs)["volumeMounts"]
    res = operator_container(docs)["resources"]
    assert res["requests"] and res["limits"]
    assert deployment["spec"]["strategy"]["type"] == "RollingUpdate"  # peered: a surge replica pauses
    (standalone,) = by_kind(template(helm, *VARIANTS["standalone"]), "Deployment")
    assert standalone["spec"]["strategy"]["type"] == "Recreate"


WORK_RULES = {
    ("llmscale.dev", "llmdeployments", "list"), ("llmscale.dev", "llmdeployments", "watch"),
    ("llmscale.dev", "llmdeployments", "patch"), ("llmscale.dev", "llmdeployments/status", "patch"),
    ("llmscale.dev", "llmdeployments/finalizers", "update"),
    ("apps", "deployments", "list"), ("apps", "deployments", "watch"), ("apps", "deployments", "create"),
    ("apps", "deployments", "patch"), ("apps", "deployments", "delete"),
    ("", "services", "create"), ("", "services", "patch"), ("", "services", "delete"),
    ("batch", "jobs", "list"), ("batch", "jobs", "watch"), ("batch", "jobs", "patch"),
    ("policy", "poddisruptionbudgets", "create"), ("policy", "poddisruptionbudgets", "patch"),
    *(("inference.networking.k8s.io", "inferencepools", verb) for verb in ("get", "create", "patch", "delete")),
    ("", "pods", "list"), ("", "pods", "watch"), ("", "pods", "patch"), ("", "events", "create"),
    ("autoscaling", "horizontalpodautoscalers", "list"), ("autoscaling", "horizontalpodautoscalers", "watch"),
    ("keda.sh", "scaledobjects", "list"), ("keda.sh", "scaledobjects", "watch"),
    # spec.scaleTargetRef: the workloads of rbac.scaleTargets (defaults), through /scale only
    *{(group, f"{resource}/scale", verb)
      for group, resource in (("apps", "deployments"), ("apps", "statefulsets"),
                              ("leaderworkerset.x-k8s.io", "leaderworkersets"))
      for verb in ("get", "patch")},
}
#: The start-up check for a live operator in the peering of the other scope (llmscale.controller.peers).
CHECK_NAMESPACED_PEERS = {("kopf.dev", "kopfpeerings", "list")}
CHECK_CLUSTER_PEERS = {("kopf.dev", "clusterkopfpeerings", "get")}
CRD_RULES = {("apiextensions.k8s.io", "customresourcedefinitions", v) for v in ("list", "watch")}


def test_cluster_rbac_is_exactly_the_documented_rules(helm: Path) -> None:
    peering = {("kopf.dev", "clusterkopfpeerings", v) for v in ("list", "watch", "patch")}
    for variant in ("defaults", "leader-election-cluster"):
        (role,) = work_roles(template(helm, *VARIANTS[variant]))
        assert rules(role) == WORK_RULES | CRD_RULES | peering | CHECK_NAMESPACED_PEERS, variant
    (role,) = work_roles(template(helm, *VARIANTS["standalone"]))
    assert rules(role) == WORK_RULES | CRD_RULES | CHECK_CLUSTER_PEERS | CHECK_NAMESPACED_PEERS


def test_namespaced_rbac_is_roles_in_watched_namespaces_plus_read_only_discovery(helm: Path) -> None:
    docs = template(helm, *VARIANTS["leader-election-namespaced"])
    (role,) = by_kind(docs, "Role")
    assert role["metadata"]["namespace"] == "serving"
    assert rules(role) == WORK_RULES | {("kopf.dev", "kopfpeerings", v) for v in ("list", "watch", "patch")}
    (discovery,) = work_roles(docs)
    assert rules(discovery) == CRD_RULES | {("", "namespaces", "list"), ("", "namespaces", "watch")} | CHECK_CLUSTER_PEERS
    (peering,) = by_kind(docs, "KopfPeering")
    assert peering["metadata"] == peering["metadata"] | {"name": "llmscale", "namespace": "serving"}
    sa = by_kind(docs, "ServiceAccount")[0]["metadata"]["name"]
    for binding in by_kind(docs, "RoleBinding") + by_kind(docs, "ClusterRoleBinding"):
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa, "namespace": "llmscale-system"}]
    two = template(helm, *VARIANTS["namespaced"])
    assert sorted(r["metadata"]["namespace"] for r in by_kind(two, "Role")) == ["batch", "serving"]


def test_rbac_never_grants_wildcards_secrets_or_nodes(helm: Path) -> None:
    """No wildcard, secret or ConfigMap anywhere; nodes only listed, by the GPUs-free ClusterRole."""
    for sets in VARIANTS.values():
        for role in work_roles(template(helm, *sets)) + by_kind(template(helm, *sets), "Role"):
            for group, resource, verb in rules(role):
                assert "*" not in (group, resource, verb), role["metadata"]["name"]
                assert resource not in {"secrets", "nodes", "configmaps", "serviceaccounts/token"}, resource


@pytest.mark.parametrize("sets", [pytest.param(v, id=k) for k, v in VARIANTS.items()])
def test_the_gpus_free_read_is_off_by_default(helm: Path, sets: list[str]) -> None:
    default = template(helm, *sets)
    assert not [r for r in by_kind(default, "ClusterRole") if r["metadata"]["name"].endswith("-nodes")]
    assert _env(default)["LLMSCALE_READ_NODES"] == "false"
    off = template(helm, *sets, "operator.readNodes=false")
    assert not [r for r in by_kind(off, "ClusterRole") if r["metadata"]["name"].endswith("-nodes")]
    assert _env(off)["LLMSCALE_READ_NODES"] == "false"


@pytest.mark.parametrize("sets", [pytest.param(v, id=k) for k, v in VARIANTS.items()])
def test_the_gpus_free_read_may_only_list_nodes_with_pods(helm: Path, sets: list[str]) -> None:
    docs = template(helm, *sets, "operator.readNodes=true")
    (nodes,) = [r for r in by_kind(docs, "ClusterRole") if r["metadata"]["name"].endswith("-nodes")]
    assert rules(nodes) == NODE_RULES
    (binding,) = [b for b in by_kind(docs, "ClusterRoleBinding") if b["roleRef"]["name"] == nodes["metadata"]["name"]]
    assert binding["subjects"][0]["name"] == by_kind(docs, "ServiceAccount")[0]["metadata"]["name"]


def test_cluster_peering_object_with_leader_election(helm: Path) -> None:
    docs = template(helm, *VARIANTS["leader-election-cluster"])
    (peering,) = by_kind(docs, "ClusterKopfPeering")
    assert peering["metadata"]["name"] == "llmscale"
    (pdb,) = by_kind(docs, "PodDisruptionBudget")
    assert pdb["spec"]["maxUnavailable"] == 1
    (deployment,) = by_kind(docs, "Deployment")
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"]["type"] == "RollingUpdate"


def _labelmap(regex: str, source: str) -> str | None:
    m = re.fullmatch(regex, source)
    return m.expand(r"\1") if m else None


def test_pod_monitor_relabelling_produces_the_labels_signals_selects_on(helm: Path) -> None:
    """The PodMonitor's labelmap turns the engine pods' labels into the names
    llmscale.signals.queries.SelectorLabels expects (Prometheus writes llmscale.dev/deployment as
    __meta_kubernetes_pod_label_llmscale_dev_deployment)."""
    docs = template(helm, *VARIANTS["monitoring"])
    (pm,) = by_kind(docs, "PodMonitor")
    assert pm["spec"]["selector"]["matchLabels"] == {"app.kubernetes.io/managed-by": "llmscale"}
    assert pm["spec"]["namespaceSelector"] == {"any": True}
    (endpoint,) = pm["spec"]["podMetricsEndpoints"]
    relabel = endpoint["relabelings"]
    (labelmap,) = [r for r in relabel if r.get("action") == "labelmap"]
    expected = SelectorLabels()
    for pod_label, target in (("llmscale.dev/deployment", expected.deployment), ("llmscale.dev/pool", expected.pool)):
        meta = "__meta_kubernetes_pod_label_" + re.sub(r"[^a-zA-Z0-9_]", "_", pod_label)
        assert _labelmap(labelmap["regex"], meta) == target
    assert {"sourceLabels": ["__meta_kubernetes_namespace"], "targetLabel": expected.namespace} in relabel
    ns = template(helm, *VARIANTS["monitoring"], *VARIANTS["namespaced"])
    assert by_kind(ns, "PodMonitor")[0]["spec"]["namespaceSelector"] == {"matchNames": ["serving", "batch"]}


def test_prometheus_rule_uses_the_operators_metric_names(helm: Path) -> None:
    from llmscale.controller.metrics import OperatorMetrics

    # Series names as exposed: counters get _total, histograms _bucket/_sum/_count (Prometheus
    # text format; prometheus-client). Labelled metrics have no samples before first use.
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}
    exposed = {
        family.name + suffix
        for family in OperatorMetrics().registry.collect()
        for suffix in suffixes[family.type]
    }
    from llmscale.signals.drift import engine_names

    # The drift alerts on the engines' counters (llmscale.signals.drift) use their names instead.
    engine = {n for f in ("prefix_cache_hits_total", "prefix_cache_queries_total", "preemptions_total",
                          "requests_total") for n in engine_names(f)}
    (rule,) = by_kind(template(helm, *VARIANTS["monitoring"]), "PrometheusRule")
    for r in [r for group in rule["spec"]["groups"] for r in group["rules"]]:
        # Not label names: matchers and by/on clauses dropped first.
        bare = re.sub(r"\b(by|on|without|ignoring) \([^)]*\)", "", re.sub(r"\{[^}]*\}", "", r["expr"]))
        used = set(re.findall(r"\bllmscale_[a-z0-9_]+", bare))
        assert used or any(name in r["expr"] for name in engine), r["alert"]
        assert used <= exposed, used - exposed


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        pytest.param(["replicaCount=2", "leaderElection.enabled=false"], "leaderElection",
                     id="two-replicas-without-peering"),
        pytest.param(["watch.allNamespaces=false"], "namespaces", id="namespaced-without-namespaces"),
        pytest.param(["watch.namespaces={a}"], "watch", id="both-scopes"),
        pytest.param(["operator.logLevel=LOUD"], "logLevel", id="bad-log-level"),
        pytest.param(["operator.prometheusUrl=prometheus:9090"], "prometheusUrl", id="url-without-scheme"),
        pytest.param(["securityContext.readOnlyRootFilesystem=false"], "readOnlyRootFilesystem", id="writable-root"),
        pytest.param(["unknownKey=1"], "unknownKey", id="unknown-key"),
    ],
)
def test_bad_values_are_refused(helm: Path, sets: list[str], message: str) -> None:
    proc = template(helm, *sets, ok=False)
    assert proc.returncode != 0
    assert message in proc.stderr, proc.stderr


def test_values_schema_validates_values_yaml() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    jsonschema.Draft7Validator.check_schema(schema)
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    jsonschema.Draft7Validator(schema).validate(values)
    values["replicaCount"] = 3  # with leader election (the default): fine
    assert not list(jsonschema.Draft7Validator(schema).iter_errors(values))
    values["leaderElection"]["enabled"] = False  # three standalone replicas: refused
    assert list(jsonschema.Draft7Validator(schema).iter_errors(values))


def test_chart_version_follows_the_package() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert chart["version"] == version
    assert chart["appVersion"] == version


def test_notes_render(helm: Path, tmp_path: Path) -> None:
    """NOTES.txt renders (``helm template`` skips it and an install dry run needs a cluster, so a
    copy of the chart renders its text inside a ConfigMap template)."""
    chart = tmp_path / "llmscale"
    shutil.copytree(CHART, chart)
    notes = (chart / "templates" / "NOTES.txt").read_text()
    body = "".join("    " + line + "\n" for line in notes.splitlines())
    (chart / "templates" / "notes.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: notes\ndata:\n  notes: |\n" + body
    )
    for sets, scope in ((VARIANTS["defaults"], "all namespaces"), (VARIANTS["namespaced"], "serving, batch")):
        args: list[str | Path] = [helm, "template", "llmscale", chart, "-n", "llmscale-system",
                                  "--show-only", "templates/notes.yaml"]
        for s in sets:
            args += ["--set", s]
        out = parse_docs(run(args).stdout)[0]["data"]["notes"]
        assert f"watches LLMDeployments in {scope}" in out
        assert "kubectl -n llmscale-system rollout status deployment/llmscale" in out


def _docs_values(heading: str) -> str:
    """The ``values-*.yaml`` example under ``heading`` in docs/deploy.md (its first YAML block)."""
    text = (ROOT / "docs" / "deploy.md").read_text(encoding="utf-8")
    section = text.split(f"### {heading}\n", 1)[1]
    return section.split("```yaml\n", 1)[1].split("```", 1)[0]


def test_prometheus_credentials_from_a_mounted_secret(helm: Path, tmp_path: Path) -> None:
    """docs/deploy.md's example: the CA and the password come from a Secret mounted read-only, and
    the files the operator is told about are inside that mount; the operator builds an
    authenticated reader from the rendered environment."""
    values = tmp_path / "values-prometheus-auth.yaml"
    values.write_text(_docs_values("Prometheus behind TLS and authentication"))
    args: list[str | Path] = [helm, "template", "llmscale", CHART, "--namespace", "llmscale-system", "-f", values]
    docs = parse_docs(run(args).stdout)
    (deployment,) = by_kind(docs, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    volume = next(v for v in pod["volumes"] if v["name"] == "prometheus-client")
    assert volume["secret"]["secretName"] == "prometheus-client"
    mount = next(m for m in operator_container(docs)["volumeMounts"] if m["name"] == "prometheus-client")
    assert mount["readOnly"] is True
    reader = load_settings(None, _env(docs)).reader_settings()
    for path in (reader.auth.ca_file, reader.auth.password_file):
        assert path is not None and path.is_relative_to(mount["mountPath"]), (path, mount)
    assert reader.auth.username == "llmscale" and reader.auth.password is None, "no secret as a plain value"
    assert "LLMSCALE_PROMETHEUS_PASSWORD" not in {e["name"] for e in operator_container(docs)["env"]}


def test_scale_targets_are_listed_resources_only(helm: Path) -> None:
    """rbac.scaleTargets grants get and patch of <resource>/scale and nothing of the resource itself."""
    (role,) = work_roles(template(helm, "rbac.scaleTargets[0].apiGroup=argoproj.io",
                                  "rbac.scaleTargets[0].resources[0]=rollouts"))
    scale = {r for r in rules(role) if r[1].endswith("/scale")}
    assert scale == {("argoproj.io", "rollouts/scale", "get"), ("argoproj.io", "rollouts/scale", "patch")}
    assert not {r for r in rules(role) if r[0] == "argoproj.io"} - scale


def _placeholder_priority_class(helm: Path) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    classes = {d["metadata"]["name"]: d for d in by_kind(template(helm), "PriorityClass")}
    return classes[OperatorSettings().placeholder_priority_class], classes


def test_placeholder_priority_class_is_below_everything(helm: Path) -> None:
    pc, classes = _placeholder_priority_class(helm)
    assert -10 <= pc["value"] < 0 < classes["llmscale-batch"]["value"], "below both pools and the default 0"
    assert template(helm, "priorityClasses.placeholder.value=-11", ok=False).returncode != 0


def test_placeholder_priority_class_never_preempts(helm: Path) -> None:
    pc, _ = _placeholder_priority_class(helm)
    assert pc["preemptionPolicy"] == "Never" and pc["globalDefault"] is False
