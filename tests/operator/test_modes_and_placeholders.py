"""The pure parts of spec.mode, spec.scaleTargetRef and the node headroom: the ScalingActive
condition, the memory kept when nothing is written, the pods of a workload and the placeholder
Deployment (the behaviour on a real API server is in tests/cluster/)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from llmscale.api import LLMDeploymentSpec
from llmscale.controller.manifests.merge import merge_template
from llmscale.controller.manifests.names import INTERACTIVE
from llmscale.controller.manifests.podtemplate import pod_template
from llmscale.controller.placeholders import placeholder_manifest, placeholder_state
from llmscale.controller.scaletarget import pods_of
from llmscale.controller.status.mode import memory_without_scaling, mode_condition, writes_workload
from llmscale.policy import PolicyMemory, PoolState, decide
from llmscale.signals.queries import PoolTarget, selector

MODEL = {"name": "chat", "preset": "llama-3.1-8b"}
REF = {"apiVersion": "apps/v1", "kind": "Deployment", "name": "vllm"}


@pytest.mark.parametrize(
    ("mode", "status", "reason", "writes"),
    [("Active", "True", "Active", True), ("Advisory", "False", "Advisory", False), ("Paused", "False", "Paused", False)],
)
def test_scaling_active_says_the_mode(mode: str, status: str, reason: str, writes: bool) -> None:
    spec = LLMDeploymentSpec.model_validate({"model": MODEL, "mode": mode, "scaleTargetRef": REF})
    cond = mode_condition(spec, current=2, decided=5)
    assert (cond.status, cond.reason) == (status, reason)
    assert writes_workload(spec) is writes
    assert "apps/v1 Deployment vllm" in cond.message
    if mode == "Advisory":
        assert "advises 5" in cond.message and "has 2" in cond.message


def test_the_default_mode_is_active() -> None:
    assert LLMDeploymentSpec.model_validate({"model": MODEL}).mode == "Active"


def test_memory_without_scaling_keeps_recommendations_drops_this_scale_event() -> None:
    # Signals unknown, spec.replicas.min 3 over 1 replica: the decision scales 1 -> 3 at t=100.
    spec = LLMDeploymentSpec.model_validate({"model": MODEL, "replicas": {"min": 3}})
    earlier = PolicyMemory(recommendations=((90.0, 2),), scale_events=((50.0, 1),))
    decision = decide(spec, [], PoolState(interactive_replicas=1, interactive_ready=1), earlier, 100.0)
    assert (100.0, 2) in decision.memory.scale_events
    kept = memory_without_scaling(decision, now=100.0)
    assert kept.recommendations == decision.memory.recommendations
    assert kept.scale_events == ((50.0, 1),), "no scale happened: the rate limits must not count one"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        pytest.param({"template": {}, "scaleTargetRef": REF}, "with spec.scaleTargetRef it creates none", id="template"),
        pytest.param({"scaleTargetRef": REF, "batch": {"windows": [{"start": "22:00", "end": "06:00"}]}},
                     "spec.batch.scaleTargetRef is required", id="batch-needs-target"),
        pytest.param({"batch": {"windows": [{"start": "22:00", "end": "06:00"}], "scaleTargetRef": REF}},
                     "not allowed without it", id="batch-target-alone"),
        pytest.param({"scaleTargetRef": REF, "headroom": {"warmNodes": True}}, "warmNodes", id="warm-nodes"),
        pytest.param({"scaleTargetRef": {**REF, "kind": "deployment"}}, "should match pattern", id="kind-case"),
        pytest.param({"scaleTargetRef": {**REF, "apiVersion": "apps"}}, "should match pattern", id="no-version"),
    ],
)
def test_the_models_refuse_what_the_api_server_refuses(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        LLMDeploymentSpec.model_validate({"model": MODEL, **spec})


def pod(name: str, *, ready: bool = False, scheduled: bool = True, deleting: bool = False) -> dict[str, Any]:
    conditions = [{"type": "Ready", "status": "True" if ready else "False"}]
    if not scheduled:
        conditions.append({"type": "PodScheduled", "status": "False", "reason": "Unschedulable"})
    meta: dict[str, Any] = {"name": name}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "status": {"phase": "Running", "conditions": conditions}}


def _pods_of_every_kind() -> Any:
    return pods_of([pod("b", ready=True), pod("a"), pod("c", scheduled=False), pod("d", ready=True, deleting=True)])


def test_a_workloads_terminating_pods_are_left_out() -> None:
    assert _pods_of_every_kind().names == ("a", "b", "c")


def test_a_workloads_pods_are_classified() -> None:
    got = _pods_of_every_kind()
    assert (got.count("ready"), got.count("starting"), got.count("unschedulable")) == (1, 1, 1)


def test_a_workloads_pods_carry_what_the_pool_figures_need() -> None:
    """The pods of a ``scaleTargetRef`` workload are kept as the pods index keeps llmscale's own
    (creation and Ready times, GPU requests), so GPU-hours, the cold start and the lead time come
    from them too."""
    ready = pod("vllm-1", ready=True)
    ready["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
    ready["status"]["conditions"][0]["lastTransitionTime"] = "2026-01-01T00:04:10Z"
    ready["spec"] = {"containers": [{"name": "engine", "resources": {"requests": {"nvidia.com/gpu": "4", "cpu": "8"}}}]}
    got = pods_of([ready, pod("vllm-2")])
    first = got.pods[0]
    assert (first.name, first.phase, first.ready_s - first.created_s) == ("vllm-1", "ready", 250.0)
    assert dict(first.requests) == {"nvidia.com/gpu": 4.0}
    assert got.pods[1].ready_s is None


def test_a_workloads_pods_are_selected_by_name() -> None:
    assert selector(PoolTarget("ml", "chat", "interactive", pods=("vllm-a.1", "vllm-b"))) == (
        'namespace="ml", pod=~"^(?:vllm-a\\\\.1|vllm-b)$"')


def test_a_pools_pods_are_selected_by_labels_without_a_workload() -> None:
    assert "llmscale_dev_deployment" in selector(PoolTarget("ml", "chat", "interactive"))


def test_a_pool_targets_pod_names_leave_its_identity_alone() -> None:
    assert PoolTarget("ml", "chat", "interactive", pods=("x",)) == PoolTarget("ml", "chat", "interactive")


def _placeholder() -> tuple[dict[str, Any], Callable[[int], dict[str, Any]]]:
    """The placeholder Deployment of two replicas, and a maker of it for another count."""
    spec = LLMDeploymentSpec.model_validate({
        "model": MODEL, "resources": {"gpusPerReplica": 4}, "headroom": {"warmNodes": True},
        "template": {"spec": {
            "nodeSelector": {"gpu": "h100"},
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}}},
            "containers": [{"name": "engine", "resources": {"requests": {"cpu": "16", "memory": "128Gi"}}}],
            "volumes": [{"name": "shm", "emptyDir": {"medium": "Memory"}}],
        }},
    })
    template = merge_template(pod_template("chat", spec, INTERACTIVE), spec.template, "nvidia.com/gpu")
    owner = {"apiVersion": "llmscale.dev/v1alpha1", "kind": "LLMDeployment", "name": "chat", "uid": "u"}
    manifest = placeholder_manifest("chat", "ml", spec, template, 2, owner, priority_class="low", image="pause")

    def make(replicas: int) -> dict[str, Any]:
        return placeholder_manifest("chat", "ml", spec, template, replicas, owner, priority_class="low", image="pause")

    return manifest, make


def test_a_placeholder_is_shaped_like_one_replica() -> None:
    manifest, make = _placeholder()
    assert manifest["metadata"]["name"] == "chat-placeholder" and manifest["spec"]["replicas"] == 2
    pod_spec = manifest["spec"]["template"]["spec"]
    assert pod_spec["nodeSelector"] == {"gpu": "h100"} and pod_spec["tolerations"] and pod_spec["affinity"]
    (container,) = pod_spec["containers"]
    assert container["image"] == "pause"
    assert container["resources"] == {"requests": {"nvidia.com/gpu": "4", "cpu": "16", "memory": "128Gi"},
                                      "limits": {"nvidia.com/gpu": "4"}}
    assert "volumes" not in pod_spec, "nothing of the engine's own but its size and placement"
    labels = manifest["spec"]["template"]["metadata"]["labels"]
    assert "llmscale.dev/pool" not in labels, "neither the Service nor the pool's pod count sees a placeholder"
    assert manifest["spec"]["selector"]["matchLabels"] == {"llmscale.dev/deployment": "chat",
                                                            "llmscale.dev/placeholder": "true"}
    with pytest.raises(ValueError):
        make(-1)


def test_a_placeholder_preempts_nothing() -> None:
    manifest, _ = _placeholder()
    pod_spec = manifest["spec"]["template"]["spec"]
    assert pod_spec["priorityClassName"] == "low" and pod_spec["terminationGracePeriodSeconds"] == 0


def test_placeholder_state_from_the_indexes() -> None:
    deployments = {("ml", "chat"): [3]}
    pods = {("ml", "chat"): ["running", "pending", "pending"]}
    state = placeholder_state(deployments, pods, ("ml", "chat"))
    assert (state.replicas, state.running, state.pending) == (3, 1, 2)
    assert placeholder_state(None, None, ("ml", "chat")).replicas is None
