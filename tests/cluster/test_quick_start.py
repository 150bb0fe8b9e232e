"""The README's Quick start for a GPU cluster, command by command, against the local cluster.

Each command of the block runs as written, except: ``git clone`` (the test runs in the checkout),
``helm install`` (rendered by ``helm template`` with the same arguments and ``--include-crds``,
then applied server-side, which is what Helm does on a cluster) and ``kubectl get -w`` (run once,
not watched). ``REGISTRY`` is a made-up registry. The Prometheus Operator's real PodMonitor CRD
(tests/cluster/data/) stands in for kube-prometheus-stack's.

Then: the PodMonitor is among those kube-prometheus-stack's Prometheus selects (the API server
evaluates its ``podMonitorSelector``, ``release: kube-prometheus-stack``); the operator gets the one
Prometheus URL the README and docs/gpu-cluster.md use everywhere; one LLMDeployment, not six, came
from the samples, and it needs no PersistentVolumeClaim.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes.client
import pytest
import yaml
from kubernetes.client.exceptions import ApiException
from tests.cluster.helpers import ROOT, LocalCluster, wait_for

from llmscale import __version__

pytestmark = pytest.mark.slow

README = ROOT / "README.md"
PODMONITOR_CRD = ROOT / "tests/cluster/data/monitoring.coreos.com_podmonitors.yaml"
#: kube-prometheus-stack's Prometheus selects PodMonitors by the label release=<its Helm release>
#: (podMonitorSelectorNilUsesHelmValues, the chart's default); the README names the release.
KPS_SELECTOR = "release=kube-prometheus-stack"
REGISTRY = "registry.example.com/you"


def quick_start_commands(text: str) -> list[list[str]]:
    """The commands of the README's Quick start block that installs on a cluster (the ``sh`` block
    holding ``helm install``), continuation lines joined, split as the shell would."""
    quick = text[text.index("## Quick start"):text.index("\n## ", text.index("## Quick start") + 1)]
    blocks = re.findall(r"```sh\n(.*?)```", quick, re.S)
    (block,) = [b for b in blocks if "helm install" in b]
    joined = block.replace("\\\n", " ")
    commands = []
    for line in joined.splitlines():
        words = shlex.split(line, comments=True)
        if words:
            commands.append([os.path.expandvars(w) for w in words])
    return commands


def test_the_quick_start_parses_into_one_install() -> None:
    commands = quick_start_commands(README.read_text())
    assert commands[0][:2] == ["git", "clone"]
    assert [c[:2] for c in commands].count(["helm", "install"]) == 1


def test_the_quick_start_applies_one_sample() -> None:
    commands = quick_start_commands(README.read_text())
    applied = [w for c in commands if c[:2] == ["kubectl", "apply"] for w in c if w.startswith("manifests/")]
    assert applied == ["manifests/samples/namespace.yaml", "manifests/samples/chat.yaml"]
    assert not [c for c in commands if "-k" in c], "no kustomize directory: one sample, not every sample"


def _urls(text: str) -> set[str]:
    return set(re.findall(r"operator\.prometheusUrl=(\S+?)(?:\s|\\|$)", text))


def test_one_prometheus_url_everywhere() -> None:
    """The README's commands and the GPU-cluster walkthrough name the same Prometheus URL."""
    urls = _urls(README.read_text()) | _urls((ROOT / "docs/gpu-cluster.md").read_text())
    assert urls == {"http://prometheus-operated.monitoring.svc:9090"}, urls


@pytest.fixture
def podmonitor_crd(cluster: LocalCluster) -> Iterator[None]:
    cluster.kubectl("apply", "--server-side", "-f", str(PODMONITOR_CRD))
    wait_for("the PodMonitor CRD Established", lambda: cluster.kubectl(
        "wait", "--for=condition=Established", "--timeout=30s", "crd/podmonitors.monitoring.coreos.com",
        check=False).returncode == 0, 60)
    yield
    cluster.kubectl("delete", "-f", str(PODMONITOR_CRD), "--ignore-not-found", "--wait=false")


def _gone(cluster: LocalCluster, namespace: str) -> bool:
    try:
        kubernetes.client.CoreV1Api(cluster.api).read_namespace(namespace)
    except ApiException as exc:
        if exc.status == 404:
            return True
        raise
    return False


def _helm_install(cluster: LocalCluster, helm: Path, words: list[str]) -> list[dict[str, Any]]:
    """``helm install`` as ``helm template`` with the same arguments, applied as Helm would."""
    args = [w for w in words[2:] if w != "--create-namespace"]
    namespace = args[args.index("--namespace") + 1]
    proc = subprocess.run([str(helm), "template", *args, "--include-crds"], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    docs = [d for d in yaml.safe_load_all(proc.stdout) if d]
    if _gone(cluster, namespace):
        cluster.create_namespace(namespace)
    cluster.apply([d for d in docs if d["kind"] == "CustomResourceDefinition"], "helm", force=True)
    cluster.apply([{**d, "metadata": {"namespace": namespace, **d["metadata"]}}
                   if d["kind"] not in CLUSTER_SCOPED else d
                   for d in docs if d["kind"] != "CustomResourceDefinition"], "helm")
    return docs


def _cells(header: str, row: str) -> dict[str, str]:
    """kubectl's table row by the header's column positions (a blank cell stays a blank)."""
    starts = [m.start() for m in re.finditer(r"\S+", header)]
    names = header.split()
    ends = [*starts[1:], None]
    return {n: row[a:b].strip() for n, a, b in zip(names, starts, ends, strict=True)}


CLUSTER_SCOPED = {"ClusterRole", "ClusterRoleBinding", "PriorityClass", "ClusterKopfPeering", "Namespace"}


def test_the_quick_start_runs_on_the_local_cluster(cluster: LocalCluster, helm: Path, podmonitor_crd: None,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REGISTRY", REGISTRY)
    commands = quick_start_commands(README.read_text())
    rendered: list[dict[str, Any]] = []
    outputs: list[str] = []
    namespaces: list[str] = []
    try:
        for words in commands:
            if words[:2] == ["git", "clone"]:
                continue  # the checkout is this repository (the same line's `cd` goes into it)
            if words[:2] == ["helm", "install"]:
                rendered = _helm_install(cluster, helm, words)
                namespaces.append(words[words.index("--namespace") + 1])
                continue
            assert words[0] == "kubectl", words
            # Paths are the checkout's (the README runs from its root); a watch is read once.
            args = [str(ROOT / w) if w.startswith("manifests/") else w for w in words[1:] if w != "-w"]
            outputs.append(cluster.kubectl(*args).stdout)
            if "namespace.yaml" in " ".join(words):
                namespaces.append("llm-serving")

        custom = kubernetes.client.CustomObjectsApi(cluster.api)
        # kube-prometheus-stack's Prometheus finds the PodMonitor: the API server runs its selector.
        selected = cluster.kubectl("get", "podmonitors.monitoring.coreos.com", "-A", "-l", KPS_SELECTOR,
                                   "-o", "jsonpath={.items[*].metadata.name}").stdout.split()
        assert selected == ["llmscale-engines"], selected
        (pm,) = [d for d in rendered if d["kind"] == "PodMonitor"]
        stored = custom.get_namespaced_custom_object("monitoring.coreos.com", "v1", "llmscale-system",
                                                     "podmonitors", "llmscale-engines")
        assert stored["spec"]["selector"] == pm["spec"]["selector"]
        assert stored["spec"]["namespaceSelector"] == {"any": True}

        (deploy,) = [d for d in rendered if d["kind"] == "Deployment"]
        (container,) = deploy["spec"]["template"]["spec"]["containers"]
        assert container["image"] == f"{REGISTRY}/llmscale:{__version__}"
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert {env["LLMSCALE_PROMETHEUS_URL"]} == _urls(README.read_text())
        apps = kubernetes.client.AppsV1Api(cluster.api)
        assert apps.read_namespaced_deployment("llmscale", "llmscale-system").spec.template.spec.containers[0].image \
            == container["image"]

        got = custom.list_namespaced_custom_object("llmscale.dev", "v1alpha1", "llm-serving", "llmdeployments")["items"]
        assert [o["metadata"]["name"] for o in got] == ["chat"]
        volumes = got[0]["spec"]["template"]["spec"]["volumes"]
        assert not [v for v in volumes if "persistentVolumeClaim" in v], volumes
        assert kubernetes.client.CoreV1Api(cluster.api).read_namespaced_secret("hf-token", "llm-serving")
        assert re.search(r"^chat\s", outputs[-1], re.M), outputs[-1]
        # The printer columns, as kubectl prints them: the bounds beside the count (the HPA's
        # MINPODS/MAXPODS), the queue target with -o wide; spec defaults fill what chat leaves out.
        header, row = outputs[-1].splitlines()[:2]
        assert header.split()[:5] == ["NAME", "READY", "MIN", "MAX", "DESIRED"], header
        cells = _cells(header, row)  # empty status cells are blank: read by column position
        assert (cells["NAME"], cells["MIN"], cells["MAX"]) == ("chat", "2", "12"), cells
        wide = cluster.kubectl("get", "llmdep", "chat", "-n", "llm-serving", "-o", "wide").stdout.splitlines()
        cols = wide[0].split()
        assert "QUEUE-TARGET" in cols, cols
    finally:
        cleanup = [d for d in rendered if d["kind"] not in {"CustomResourceDefinition", "Namespace"}]
        if cleanup:
            cluster.kubectl("delete", "--ignore-not-found", "--wait=false", "-n", "llmscale-system", "-f", "-",
                            input=yaml.safe_dump_all(cleanup), check=False)
        for ns in namespaces:
            cluster.kubectl("delete", "namespace", ns, "--ignore-not-found", "--wait=false", check=False)
        for ns in namespaces:
            wait_for(f"namespace {ns} deleted", lambda ns=ns: _gone(cluster, ns), 90)
