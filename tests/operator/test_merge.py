"""``spec.template`` merged over the generated pod: what is merged, what is replaced, what is refused.

Each case states the template and the field it expects; the generated pod is the real one of a
spec (vLLM, or the mock engine, whose pod has a security context and a /tmp volume of its own).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from llmscale.api import LLMDeploymentSpec
from llmscale.controller.manifests.merge import TemplateConflict, merge_template
from llmscale.controller.manifests.names import INTERACTIVE
from llmscale.controller.manifests.podtemplate import pod_template

GPU = "nvidia.com/gpu"


def spec(engine: str = "vllm", template: dict[str, Any] | None = None) -> LLMDeploymentSpec:
    return LLMDeploymentSpec.model_validate({
        "model": {"name": "chat", "preset": "llama-3.1-8b"},
        "engine": {"type": engine},
        "resources": {"gpusPerReplica": 2},
        **({"template": template} if template is not None else {}),
    })


def merged(template: dict[str, Any], engine: str = "vllm") -> dict[str, Any]:
    s = spec(engine, template)
    return merge_template(pod_template("chat", s, INTERACTIVE), s.template, GPU)


def engine_of(pod: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in pod["spec"]["containers"] if c["name"] == "engine")


def test_no_template_is_the_generated_pod() -> None:
    s = spec()
    generated = pod_template("chat", s, INTERACTIVE)
    assert merge_template(generated, None, GPU) == generated


def test_the_generated_pod_merged_over_itself_is_unchanged() -> None:
    for engine in ("vllm", "sglang", "mock"):
        s = spec(engine)
        generated = pod_template("chat", s, INTERACTIVE)
        assert merge_template(generated, generated, GPU) == generated, engine


def test_neither_input_is_changed() -> None:
    template = {"spec": {"containers": [{"name": "engine", "env": [{"name": "A", "value": "1"}]}]}}
    s = spec(template=template)
    generated = pod_template("chat", s, INTERACTIVE)
    before, template_before = copy.deepcopy(generated), copy.deepcopy(s.template)
    merge_template(generated, s.template, GPU)
    assert generated == before and s.template == template_before


def test_the_templates_env_volumes_mounts_join_the_engine_container() -> None:
    pod = merged({"spec": {
        "containers": [{"name": "engine",
                        "env": [{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}}],
                        "volumeMounts": [{"name": "shm", "mountPath": "/dev/shm"}]}],
        "volumes": [{"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}}],
    }})
    engine = engine_of(pod)
    assert engine["env"] == [{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}}]
    assert engine["volumeMounts"] == [{"name": "shm", "mountPath": "/dev/shm"}]
    assert pod["spec"]["volumes"] == [{"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}}]
    assert engine["args"][:2] == ["chat", "--served-model-name"], "the generated arguments stay"


def test_resources_merge_key_by_key_around_the_gpu() -> None:
    engine = engine_of(merged({"spec": {"containers": [{"name": "engine", "resources": {
        "requests": {"cpu": "8", "memory": "64Gi"}, "limits": {"memory": "64Gi", GPU: 2}}}]}}))
    assert engine["resources"] == {"requests": {GPU: "2", "cpu": "8", "memory": "64Gi"},
                                   "limits": {GPU: 2, "memory": "64Gi"}}


def test_a_port_is_added_by_container_port() -> None:
    engine = engine_of(merged({"spec": {"containers": [{"name": "engine", "ports": [
        {"containerPort": 9400, "name": "nccl"}]}]}}))
    assert [p["containerPort"] for p in engine["ports"]] == [8000, 9400]


def _merged_pod_fields() -> dict[str, Any]:
    return merged({
        "metadata": {"labels": {"team": "a"}, "annotations": {"owner": "b"}},
        "spec": {"nodeSelector": {"pool": "h100"},
                 "tolerations": [{"key": GPU, "operator": "Exists", "effect": "NoSchedule"}],
                 "priorityClassName": "llm-interactive", "serviceAccountName": "vllm",
                 "runtimeClassName": "nvidia", "imagePullSecrets": [{"name": "registry"}],
                 "terminationGracePeriodSeconds": 600},
    })


def test_maps_merge() -> None:
    pod = _merged_pod_fields()
    assert pod["metadata"]["labels"]["team"] == "a" and pod["metadata"]["labels"]["llmscale.dev/pool"] == "interactive"
    assert pod["metadata"]["annotations"]["owner"] == "b"
    assert pod["spec"]["nodeSelector"] == {"pool": "h100"}


def test_plain_lists_are_replaced() -> None:
    pod = _merged_pod_fields()
    assert pod["spec"]["tolerations"] == [{"key": GPU, "operator": "Exists", "effect": "NoSchedule"}]
    assert pod["spec"]["imagePullSecrets"] == [{"name": "registry"}]


def test_the_templates_plain_fields_win() -> None:
    pod = _merged_pod_fields()
    assert (pod["spec"]["priorityClassName"], pod["spec"]["serviceAccountName"], pod["spec"]["runtimeClassName"]) == (
        "llm-interactive", "vllm", "nvidia")
    assert pod["spec"]["terminationGracePeriodSeconds"] == 600, "not llmscale's: the template wins"


def test_a_volume_of_the_same_name_keeps_only_the_templates_source() -> None:
    """volumes merge with retainKeys: the mock's /tmp emptyDir replaced by the template's hostPath."""
    pod = merged({"spec": {"volumes": [{"name": "tmp", "hostPath": {"path": "/scratch"}}]}}, engine="mock")
    assert pod["spec"]["volumes"] == [{"name": "tmp", "hostPath": {"path": "/scratch"}}]


def test_the_generated_security_context_can_be_tightened() -> None:
    pod = merged({"spec": {"securityContext": {"fsGroup": 2000}}}, engine="mock")
    assert pod["spec"]["securityContext"]["fsGroup"] == 2000
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True


def _merged_with_extra_containers() -> dict[str, Any]:
    return merged({"spec": {
        "initContainers": [{"name": "fetch", "image": "busybox", "command": ["true"]}],
        "containers": [{"name": "router", "image": "envoyproxy/envoy:v1.31"}],
    }})


def test_sidecars_are_added_after_the_engine() -> None:
    assert [c["name"] for c in _merged_with_extra_containers()["spec"]["containers"]] == ["engine", "router"]


def test_init_containers_are_added() -> None:
    assert _merged_with_extra_containers()["spec"]["initContainers"][0]["name"] == "fetch"


@pytest.mark.parametrize(
    ("template", "field", "hint"),
    [
        pytest.param({"spec": {"containers": [{"name": "engine", "args": ["--model", "x"]}]}},
                     "spec.template.spec.containers[engine].args", "spec.engine.args", id="args"),
        pytest.param({"spec": {"containers": [{"name": "engine", "command": ["python3", "-m", "vllm.entrypoints.openai.api_server"]}]}},
                     "spec.template.spec.containers[engine].command", "spec.model", id="command"),
        pytest.param({"spec": {"containers": [{"name": "engine", "image": "my/vllm:1"}]}},
                     "spec.template.spec.containers[engine].image", "spec.engine.image", id="image"),
        pytest.param({"spec": {"containers": [{"name": "engine", "readinessProbe": {"periodSeconds": 1}}]}},
                     "spec.template.spec.containers[engine].readinessProbe", "coldStartSeconds", id="readiness"),
        pytest.param({"spec": {"containers": [{"name": "engine", "startupProbe": {"failureThreshold": 1}}]}},
                     "spec.template.spec.containers[engine].startupProbe", "coldStartSeconds", id="startup"),
        pytest.param({"spec": {"containers": [{"name": "engine", "livenessProbe": {"periodSeconds": 1}}]}},
                     "spec.template.spec.containers[engine].livenessProbe", "coldStartSeconds", id="liveness"),
        pytest.param({"spec": {"containers": [{"name": "engine", "ports": [{"containerPort": 8000, "name": "api"}]}]}},
                     "spec.template.spec.containers[engine].ports", "spec.engine.port", id="http-port"),
        pytest.param({"spec": {"containers": [{"name": "engine", "resources": {"limits": {GPU: 8}}}]}},
                     f'spec.template.spec.containers[engine].resources.limits["{GPU}"]', "gpusPerReplica", id="gpus"),
        pytest.param({"metadata": {"labels": {"llmscale.dev/pool": "batch"}}},
                     'spec.template.metadata.labels["llmscale.dev/pool"]', "select", id="pool-label"),
        pytest.param({"metadata": {"annotations": {"llmscale.dev/cold-start-seconds": "1"}}},
                     'spec.template.metadata.annotations["llmscale.dev/cold-start-seconds"]', "cold start",
                     id="cold-start-annotation"),
        pytest.param({"spec": {"containers": [{"name": "vllm", "env": [{"name": "A", "value": "1"}]}]}},
                     "spec.template.spec.containers[vllm].image", "named 'engine'", id="sidecar-without-image"),
    ],
)
def test_what_llmscale_owns_is_refused_naming_the_field(template: dict[str, Any], field: str, hint: str) -> None:
    with pytest.raises(TemplateConflict) as caught:
        merged(template)
    assert caught.value.field == field
    assert str(caught.value).startswith(f"{field}: ") and hint in str(caught.value)


def test_repeating_what_llmscale_sets_is_not_a_conflict() -> None:
    s = spec()
    engine = engine_of(pod_template("chat", s, INTERACTIVE))
    pod = merged({"metadata": {"labels": {"llmscale.dev/pool": "interactive"}},
                  "spec": {"containers": [{"name": "engine", "image": engine["image"], "args": engine["args"],
                                           "resources": {"limits": {GPU: 2}}}]}})
    assert engine_of(pod)["args"] == engine["args"]
