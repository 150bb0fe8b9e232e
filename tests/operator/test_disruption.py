"""Issue 21, node autoscalers: a pod in its cold start carries ``karpenter.sh/do-not-disrupt:
"true"`` and ``cluster-autoscaler.kubernetes.io/safe-to-evict: "false"``; once Ready the operator
removes both, unless the user's template set them (the user's value wins)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from kubernetes import client
from tests.cluster.helpers import LocalCluster

from llmscale.api import LLMDeploymentSpec
from llmscale.controller.disruption import (
    COLD_START_ANNOTATIONS,
    DO_NOT_DISRUPT,
    SAFE_TO_EVICT,
    to_release,
    user_set,
)
from llmscale.controller.indexes import IndexedPod, indexed_pod
from llmscale.controller.manifests.merge import merge_template
from llmscale.controller.manifests.podtemplate import pod_template
from llmscale.controller.writer import KubernetesWriter

READY = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
STARTING = {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "True"}]}


def spec(**overrides: Any) -> LLMDeploymentSpec:
    return LLMDeploymentSpec.model_validate({"model": {"name": "chat", "preset": "llama-3.1-8b"}, **overrides})


def test_the_pod_template_protects_the_cold_start() -> None:
    annotations = pod_template("chat", spec(), "interactive")["metadata"]["annotations"]
    assert {k: annotations[k] for k in COLD_START_ANNOTATIONS} == {DO_NOT_DISRUPT: "true", SAFE_TO_EVICT: "false"}


def _spec_saying_disrupt() -> LLMDeploymentSpec:
    return spec(template={"metadata": {"annotations": {DO_NOT_DISRUPT: "false"}}})


def test_a_users_explicit_value_wins() -> None:
    s = _spec_saying_disrupt()
    merged = merge_template(pod_template("chat", s, "interactive"), s.template, "nvidia.com/gpu")
    assert merged["metadata"]["annotations"][DO_NOT_DISRUPT] == "false"


def test_a_users_explicit_value_is_kept_as_theirs() -> None:
    assert user_set(_spec_saying_disrupt()) == frozenset({DO_NOT_DISRUPT})


@pytest.mark.parametrize(
    ("status", "annotations", "kept", "expected"),
    [
        pytest.param(READY, dict(COLD_START_ANNOTATIONS), frozenset(), (DO_NOT_DISRUPT, SAFE_TO_EVICT), id="ready"),
        pytest.param(STARTING, dict(COLD_START_ANNOTATIONS), frozenset(), None, id="in-its-cold-start"),
        pytest.param(READY, dict(COLD_START_ANNOTATIONS), frozenset({SAFE_TO_EVICT}), (DO_NOT_DISRUPT,),
                     id="user-set-one"),
        pytest.param(READY, {DO_NOT_DISRUPT: "false"}, frozenset(), None, id="another-value-is-not-ours"),
        pytest.param(READY, {}, frozenset(), None, id="already-removed"),
    ],
)
def test_ready_pods_lose_the_cold_start_annotations(status: dict[str, Any], annotations: dict[str, str],
                                                     kept: frozenset[str], expected: tuple[str, ...] | None) -> None:
    pod = indexed_pod("chat-1", {"annotations": annotations}, status, {})
    assert pod is not None
    assert to_release([pod], kept).get("chat-1") == expected


@pytest.mark.slow
def test_the_merge_patch_removes_the_template_annotations_on_a_real_api_server(cluster: LocalCluster) -> None:
    namespace = "llmscale-disruption"
    cluster.create_namespace(namespace)
    core = client.CoreV1Api(cluster.api)
    body = {"metadata": {"name": "chat-1", "annotations": {**COLD_START_ANNOTATIONS, "keep": "me"}},
            "spec": {"containers": [{"name": "engine", "image": "example.invalid/engine"}]}}
    # Created under another manager, as a ReplicaSet creates its pods from the template.
    core.create_namespaced_pod(namespace, body, field_manager="kube-controller-manager")
    writer = KubernetesWriter(cluster.api)
    asyncio.run(writer.remove_pod_annotations(namespace, "chat-1", (DO_NOT_DISRUPT, SAFE_TO_EVICT)))
    annotations = core.read_namespaced_pod("chat-1", namespace).metadata.annotations  # type: ignore[union-attr]
    # (The local cluster's pod lifecycle adds annotations of its own: only these keys are checked.)
    assert annotations["keep"] == "me" and DO_NOT_DISRUPT not in annotations and SAFE_TO_EVICT not in annotations
    assert IndexedPod("chat-1", "ready").guarded == ()
