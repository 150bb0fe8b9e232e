"""kustomize: the base is rendered from the chart, every overlay renders with ``kubectl kustomize``,
and every LLMDeployment (samples and overlays) is valid for the operator's own models."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.deploy.helpers import ROOT, by_kind, parse_docs, run

from llmscale.api import LLMDeployment
from llmscale.controller.spec import read_spec

TARGETS = ["manifests/base", "manifests/overlays/dev", "manifests/overlays/production", "manifests/samples"]


def kustomize(kubectl: Path, target: str) -> list[dict[str, Any]]:
    return parse_docs(run([kubectl, "kustomize", ROOT / target]).stdout)


def operator_image(docs: list[dict[str, Any]]) -> str:
    (deployment,) = by_kind(docs, "Deployment")
    return str(deployment["spec"]["template"]["spec"]["containers"][0]["image"])


def test_base_is_rendered_from_the_current_chart(helm: Path) -> None:
    proc = run([ROOT / "tools" / "render-kustomize-base.sh", "--check"], ok=False, env={"HELM": str(helm), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("target", TARGETS)
def test_renders(kubectl: Path, target: str) -> None:
    assert kustomize(kubectl, target)


def test_the_base_holds_the_whole_install_without_helm_labels(kubectl: Path) -> None:
    docs = kustomize(kubectl, "manifests/base")
    kinds = sorted(d["kind"] for d in docs)
    assert kinds.count("CustomResourceDefinition") == 3
    for kind in ("Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Deployment", "Service"):
        assert kind in kinds
    assert not [d for d in docs if "helm.sh/chart" in d["metadata"].get("labels", {})]
    assert operator_image(docs) == "ghcr.io/llmscale/llmscale:0.1.0"


def test_dev_runs_the_local_operator_image_with_debug_logs_on_every_namespace(kubectl: Path) -> None:
    docs = kustomize(kubectl, "manifests/overlays/dev")
    assert operator_image(docs) == "llmscale:dev"
    (deployment,) = by_kind(docs, "Deployment")
    env = {e["name"]: e["value"] for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["LLMSCALE_LOG_LEVEL"] == "DEBUG"
    assert env["LLMSCALE_ALL_NAMESPACES"] == "1"


def test_dev_samples_run_mock_engines(kubectl: Path) -> None:
    docs = kustomize(kubectl, "manifests/overlays/dev")
    deps = [LLMDeployment.model_validate(d) for d in by_kind(docs, "LLMDeployment")]
    assert sorted(d.metadata["name"] for d in deps) == ["chat", "summarise"]
    for dep in deps:
        assert dep.spec.engine.type == "mock"
        assert dep.spec.engine.image == "llmscale:dev"
        assert dep.spec.engine.args == []
        assert dep.spec.model.preset is not None, "the mock engine simulates presets only"
        assert dep.spec.template is None, "the samples' GPU-node templates are dropped"
    assert not by_kind(docs, "PersistentVolumeClaim")


def test_production_pins_the_release_without_samples(kubectl: Path) -> None:
    docs = kustomize(kubectl, "manifests/overlays/production")
    assert operator_image(docs) == "ghcr.io/llmscale/llmscale:0.1.0"
    assert not by_kind(docs, "LLMDeployment")


def test_production_sets_prometheus(kubectl: Path) -> None:
    (deployment,) = by_kind(kustomize(kubectl, "manifests/overlays/production"), "Deployment")
    env = {e["name"]: e["value"] for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["LLMSCALE_PROMETHEUS_URL"] == "http://prometheus-k8s.monitoring.svc:9090"


def test_monitoring_component_applies_to_an_overlay(kubectl: Path, tmp_path: Path) -> None:
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        f"resources: [{os.path.relpath(ROOT / 'manifests/overlays/production', overlay)}]\n"
        f"components: [{os.path.relpath(ROOT / 'manifests/components/monitoring', overlay)}]\n"
    )
    docs = parse_docs(run([kubectl, "kustomize", "--load-restrictor=LoadRestrictionsNone", overlay]).stdout)
    assert {d["kind"] for d in docs} >= {"ServiceMonitor", "PodMonitor", "PrometheusRule"}


SAMPLES = sorted((ROOT / "manifests/samples").glob("*.yaml"))
NOT_LLMDEPLOYMENTS = {"kustomization.yaml", "namespace.yaml", "model-cache.yaml"}


@pytest.mark.parametrize("path", [pytest.param(p, id=p.name) for p in SAMPLES if p.name not in NOT_LLMDEPLOYMENTS])
def test_sample_is_a_valid_llmdeployment(path: Path) -> None:
    """Each sample passes the models and the operator's own reading (spec.template merged)."""
    (doc,) = parse_docs(path.read_text())
    dep = LLMDeployment.model_validate(doc)
    assert (dep.spec.model.preset is None) != (dep.spec.model.architecture is None)
    read_spec(doc)


def test_every_sample_is_in_the_kustomization() -> None:
    listed = set(yaml.safe_load((ROOT / "manifests/samples/kustomization.yaml").read_text())["resources"])
    assert listed == {p.name for p in SAMPLES} - {"kustomization.yaml"}


def test_samples_cover_what_real_users_run() -> None:
    deps = {p.stem: LLMDeployment.model_validate(parse_docs(p.read_text())[0])
            for p in SAMPLES if p.name not in NOT_LLMDEPLOYMENTS}
    assert deps["chat"].spec.batch is None
    assert deps["batch-trough"].spec.batch is not None
    assert any(w.end_time() < w.start_time() for w in deps["batch-trough"].spec.batch.windows), "an overnight window"
    assert deps["sglang"].spec.engine.type == "sglang"
    # vLLM with the gated model's token, its own download volume (no storage class needed: the
    # Quick start's sample) and /dev/shm, placed on GPU nodes; the 70B sample shares the RWX cache.
    chat = deps["chat"].spec.template or {}
    (engine,) = chat["spec"]["containers"]
    assert {e["name"]: e.get("valueFrom") for e in engine["env"]}["HF_TOKEN"] == {
        "secretKeyRef": {"name": "hf-token", "key": "token"}}
    volumes = {v["name"]: v for v in chat["spec"]["volumes"]}
    assert "emptyDir" in volumes["model-cache"]
    assert not [v for v in volumes.values() if "persistentVolumeClaim" in v]
    big = {v["name"]: v for v in (deps["llama-70b-tp4"].spec.template or {})["spec"]["volumes"]}
    assert big["model-cache"]["persistentVolumeClaim"]["claimName"] == "model-cache"
    assert volumes["shm"]["emptyDir"]["medium"] == "Memory"
    assert {m["mountPath"] for m in engine["volumeMounts"]} >= {"/dev/shm"}
    assert chat["spec"]["tolerations"] and chat["spec"]["affinity"]
    # Tensor parallel over 4 GPUs, with nodes kept for the headroom.
    assert deps["llama-70b-tp4"].spec.resources.gpus_per_replica == 4
    assert deps["llama-70b-tp4"].spec.headroom.warm_nodes
    # Existing workloads: a Deployment (starting in Advisory mode) and a multi-node LeaderWorkerSet.
    existing = deps["existing-deployment"].spec
    assert existing.scale_target_ref is not None and existing.scale_target_ref.kind == "Deployment"
    assert existing.mode == "Advisory"
    lws = deps["lws-multinode"].spec
    assert lws.scale_target_ref is not None and lws.scale_target_ref.kind == "LeaderWorkerSet"
    assert lws.resources.gpus_per_replica == 16
