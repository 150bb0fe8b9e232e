"""The operator's pure builders: child manifests, pod templates, pool state, status, conditions."""

from __future__ import annotations

from typing import Any

import pytest

from llmscale.api import LLMDeploymentSpec
from llmscale.controller.manifests.children import (
    PriorityClasses,
    child_manifests,
    deployment_manifest,
    initial_replicas,
)
from llmscale.controller.manifests.podtemplate import (
    UnsupportedSpecError,
    engine_command,
    pod_template,
    termination_grace_seconds,
)
from llmscale.controller.state.pods import (
    classify_pod,
    cold_start,
    pod_failure,
    pool_state,
    recent_cold_starts,
)
from llmscale.controller.status.build import build_status, invalid_status
from llmscale.controller.status.conditions import merge_conditions, ready_condition
from llmscale.controller.status.statuspatch import merge_patch, status_patch
from llmscale.policy.types import ConditionResult, Decision, PolicyMemory, PoolState, Reason
from llmscale.signals.snapshot import SignalSnapshot

BODY = {"metadata": {"name": "chat", "namespace": "serving", "uid": "u-1", "generation": 3}}
T0 = 1717416000.0  # 2024-06-03T12:00:00Z


def spec(**overrides: Any) -> LLMDeploymentSpec:
    data: dict[str, Any] = {"model": {"name": "meta-llama/Llama-3.1-8B-Instruct", "preset": "llama-3.1-8b"}}
    data.update(overrides)
    return LLMDeploymentSpec.model_validate(data)


def args_of(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


# ------------------------------------------------------------------------------------------
# Children
# ------------------------------------------------------------------------------------------


def _children() -> list[dict[str, Any]]:
    children = child_manifests(BODY, spec(batch={"windows": [{"start": "22:00", "end": "06:00"}]}), 3, 0)
    assert [(c["kind"], c["metadata"]["name"]) for c in children] == [
        ("Service", "chat"), ("PodDisruptionBudget", "chat"), ("Service", "chat-batch"), ("Deployment", "chat"),
        ("Deployment", "chat-batch"),
    ]
    return children


def test_every_child_carries_the_five_labels() -> None:
    for child in _children():
        pool = "batch" if child["metadata"]["name"] == "chat-batch" else "interactive"
        assert child["metadata"]["namespace"] == "serving"
        assert child["metadata"]["labels"] == {
            "app.kubernetes.io/managed-by": "llmscale",
            "app.kubernetes.io/name": "vllm",
            "app.kubernetes.io/instance": "chat",
            "llmscale.dev/deployment": "chat",
            "llmscale.dev/pool": pool,
        }


def test_every_child_has_a_controller_owner_reference() -> None:
    for child in _children():
        assert child["metadata"]["ownerReferences"] == [{
            "apiVersion": "llmscale.dev/v1alpha1", "kind": "LLMDeployment", "name": "chat", "uid": "u-1",
            "controller": True, "blockOwnerDeletion": True,
        }]


def test_no_batch_deployment_without_spec_batch() -> None:
    kinds = [c["metadata"]["name"] for c in child_manifests(BODY, spec(), 2, 0) if c["kind"] == "Deployment"]
    assert kinds == ["chat"]
    assert [c["metadata"]["name"] for c in child_manifests(BODY, spec(), 2, 0) if c["kind"] == "Service"] == ["chat"]


def test_the_batch_service_selects_the_batch_pool_only_on_the_engine_port() -> None:
    children = child_manifests(BODY, spec(engine={"port": 9000}, batch={"windows": [{"start": "22:00", "end": "06:00"}]}),
                               2, 1)
    service = next(c for c in children if c["kind"] == "Service" and c["metadata"]["name"] == "chat-batch")
    batch = next(c for c in children if c["kind"] == "Deployment" and c["metadata"]["name"] == "chat-batch")
    assert service["spec"]["selector"] == {"llmscale.dev/deployment": "chat", "llmscale.dev/pool": "batch"}
    assert service["spec"]["selector"].items() <= batch["spec"]["template"]["metadata"]["labels"].items()
    assert service["spec"]["ports"] == [{"name": "http", "port": 9000, "targetPort": "http", "protocol": "TCP"}]
    interactive = next(c for c in children if c["kind"] == "Deployment" and c["metadata"]["name"] == "chat")
    # The interactive pods never match it: batch work reaches only the batch pool.
    assert not service["spec"]["selector"].items() <= interactive["spec"]["template"]["metadata"]["labels"].items()


def test_every_selector_of_the_children_chooses_the_interactive_pool_only() -> None:
    service, pdb, deployment = child_manifests(BODY, spec(engine={"port": 9000}), 2, 0)
    selector = {"llmscale.dev/deployment": "chat", "llmscale.dev/pool": "interactive"}
    assert service["spec"]["selector"] == selector
    assert service["spec"]["ports"] == [{"name": "http", "port": 9000, "targetPort": "http", "protocol": "TCP"}]
    assert pdb["spec"] == {"maxUnavailable": 1, "unhealthyPodEvictionPolicy": "AlwaysAllow",
                           "selector": {"matchLabels": selector}}
    # The Deployment's selector is immutable, so it leaves out the engine name.
    assert deployment["spec"]["selector"] == {"matchLabels": selector}
    assert deployment["spec"]["template"]["metadata"]["labels"]["llmscale.dev/pool"] == "interactive"


def test_replicas_are_always_sent_so_server_side_apply_never_resets_them() -> None:
    assert deployment_manifest("chat", "serving", spec(), "interactive", 0, {})["spec"]["replicas"] == 0
    with pytest.raises(ValueError, match="replicas"):
        deployment_manifest("chat", "serving", spec(), "interactive", -1, {})


def test_an_object_without_uid_cannot_own_children() -> None:
    with pytest.raises(ValueError, match="uid"):
        child_manifests({"metadata": {"name": "chat", "namespace": "serving"}}, spec(), 2, 0)


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        pytest.param({}, 1, id="defaults: one of demand, no standing spare"),
        pytest.param({"headroom": {"replicas": 3}}, 4, id="more headroom"),
        pytest.param({"replicas": {"min": 5, "max": 8}}, 5, id="min above demand plus headroom"),
        pytest.param({"replicas": {"min": 0, "max": 1}, "headroom": {"replicas": 2},
                      "scaling": {"wake": {"query": "sum(gateway_pending)"}}}, 1, id="capped at max"),
    ],
)
def test_initial_replicas(overrides: dict[str, Any], expected: int) -> None:
    assert initial_replicas(spec(**overrides)) == expected


# ------------------------------------------------------------------------------------------
# Pod template
# ------------------------------------------------------------------------------------------


def test_gpu_request_is_the_resource_name_times_gpus_per_replica() -> None:
    container = pod_template("chat", spec(resources={"gpusPerReplica": 4, "gpuResourceName": "amd.com/gpu"}),
                             "interactive")["spec"]["containers"][0]
    assert container["resources"] == {"requests": {"amd.com/gpu": "4"}, "limits": {"amd.com/gpu": "4"}}


@pytest.mark.parametrize(
    ("cold_start", "failures"),
    [
        pytest.param(180.0, 27, id="180 s cold start: 27 x 10 s = 270 s"),
        pytest.param(600.0, 90, id="10 min cold start: 900 s"),
        pytest.param(0.0, 6, id="no cold start: still one minute"),
        pytest.param(7.0, 6, id="short cold start: the one-minute floor"),
    ],
)
def test_startup_probe_covers_150_percent_of_a_cold_start(cold_start: float, failures: int) -> None:
    template = pod_template("chat", spec(headroom={"coldStartSeconds": cold_start}), "interactive")
    probe = template["spec"]["containers"][0]["startupProbe"]
    assert probe["failureThreshold"] == failures
    assert probe["failureThreshold"] * probe["periodSeconds"] >= 1.5 * cold_start
    assert probe["httpGet"] == {"path": "/health", "port": "http"}


def _batch_template() -> dict[str, Any]:
    return pod_template("chat", spec(engine={"port": 8001}, headroom={"coldStartSeconds": 90}), "batch")


def test_the_pod_template_probes_the_engines_health_on_its_port() -> None:
    container = _batch_template()["spec"]["containers"][0]
    assert container["readinessProbe"]["httpGet"]["path"] == "/health"
    assert container["livenessProbe"]["httpGet"]["path"] == "/health"
    assert container["ports"] == [{"name": "http", "containerPort": 8001, "protocol": "TCP"}]


def test_the_pod_templates_metadata_carries_the_cold_start_scrape_eviction_annotations_with_the_pool_label() -> None:
    template = _batch_template()
    assert template["metadata"]["annotations"] == {
        "llmscale.dev/cold-start-seconds": "90",
        "prometheus.io/scrape": "true",
        "prometheus.io/port": "8001",
        "prometheus.io/path": "/metrics",
        "karpenter.sh/do-not-disrupt": "true",
        "cluster-autoscaler.kubernetes.io/safe-to-evict": "false",
    }
    assert template["metadata"]["labels"]["llmscale.dev/pool"] == "batch"


def test_the_grace_period_lets_the_pre_stop_hook_wait_for_the_requests_in_flight() -> None:
    template = _batch_template()
    # Default SLO and context: 15 s endpoint delay + ceil(2 s + 8192 x 0.1 s) + 10 s = 847 s.
    assert template["spec"]["terminationGracePeriodSeconds"] == 847
    command = template["spec"]["containers"][0]["lifecycle"]["preStop"]["exec"]["command"]
    assert command[:2] == ["python3", "-c"]
    assert command[3:] == ["http://127.0.0.1:8001/metrics", "vllm:num_requests_running,vllm:num_requests_waiting", "15"]


def test_the_pod_template_sets_no_priority_class_by_default() -> None:
    assert "priorityClassName" not in _batch_template()["spec"]


@pytest.mark.parametrize(
    ("overrides", "grace"),
    [
        pytest.param({"slo": {"ttftP95Seconds": 0.5, "itlP95Seconds": 0.001}, "model": {
            "name": "m", "preset": "llama-3.1-8b", "contextLimitTokens": 2048}}, 60, id="tight SLO: the 60 s floor"),
        pytest.param({"slo": {"ttftP95Seconds": 10, "itlP95Seconds": 1.0}}, 3600, id="loose SLO: the one-hour cap"),
        pytest.param({"model": {"name": "m", "preset": "llama-3.1-8b", "contextLimitTokens": 2048}}, 232,
                     id="2048-token context: 15 + 207 + 10"),
    ],
)
def test_grace_period_is_clamped(overrides: dict[str, Any], grace: int) -> None:
    assert termination_grace_seconds(spec(**overrides)) == grace


def test_sglang_drain_waits_on_sglang_metric_names() -> None:
    s = spec(engine={"type": "sglang", "image": "lmsysorg/sglang:v0.5.0", "port": 30000})
    command = pod_template("chat", s, "interactive")["spec"]["containers"][0]["lifecycle"]["preStop"]["exec"]["command"]
    assert command[3:] == ["http://127.0.0.1:30000/metrics", "sglang:num_running_reqs,sglang:num_queue_reqs", "15"]


def test_pools_get_their_priority_classes() -> None:
    classes = PriorityClasses("llmscale-interactive", "llmscale-batch")
    s = spec(batch={"windows": [{"start": "22:00", "end": "06:00"}]})
    deployments = [c for c in child_manifests(BODY, s, 2, 1, classes) if c["kind"] == "Deployment"]
    assert [d["spec"]["template"]["spec"]["priorityClassName"] for d in deployments] == [
        "llmscale-interactive", "llmscale-batch"]


def test_pdb_lets_unhealthy_pods_be_evicted() -> None:
    _, pdb, _ = child_manifests(BODY, spec(), 2, 0)
    assert pdb["spec"]["maxUnavailable"] == 1
    assert pdb["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"


@pytest.mark.parametrize(
    ("cold_start", "deadline"),
    [
        pytest.param(900.0, 1860, id="900 s cold start: 2 x 900 + 60"),
        pytest.param(180.0, 600, id="default cold start: Kubernetes' 600 s"),
        pytest.param(7200.0, 14460, id="two-hour cold start"),
    ],
)
def test_progress_deadline_follows_the_cold_start(cold_start: float, deadline: int) -> None:
    (_, _, deployment) = child_manifests(BODY, spec(headroom={"coldStartSeconds": cold_start}), 2, 0)
    assert deployment["spec"]["progressDeadlineSeconds"] == deadline


def test_cold_start_annotation_keeps_fractions() -> None:
    template = pod_template("chat", spec(headroom={"coldStartSeconds": 2.5}), "interactive")
    assert template["metadata"]["annotations"]["llmscale.dev/cold-start-seconds"] == "2.5"


def test_vllm_command() -> None:
    command, argv = engine_command(spec(
        model={"name": "meta-llama/Llama-3.1-70B-Instruct", "preset": "llama-3.1-70b", "kvCacheDtype": "fp8",
               "contextLimitTokens": 32768},
        resources={"gpusPerReplica": 4}, engine={"args": ["--max-num-seqs", "128"]},
    ))
    assert command == ["vllm", "serve"]
    assert argv[0] == "meta-llama/Llama-3.1-70B-Instruct" and "--model" not in argv  # vllm serve's positional
    assert args_of(argv, "--served-model-name") == "meta-llama/Llama-3.1-70B-Instruct"
    assert args_of(argv, "--max-model-len") == "32768"
    assert args_of(argv, "--tensor-parallel-size") == "4"
    assert args_of(argv, "--kv-cache-dtype") == "fp8"
    assert args_of(argv, "--dtype") == "bfloat16"
    assert args_of(argv, "--port") == "8000"
    assert argv[-2:] == ["--max-num-seqs", "128"]  # the user's args come last (argparse: last wins)


@pytest.mark.parametrize(
    ("args", "weights", "rest"),
    [
        pytest.param([], "m", [], id="none: the served name"),
        pytest.param(["--model", "/models/x"], "/models/x", [], id="--model PATH"),
        pytest.param(["--model=/models/x", "--max-num-seqs", "8"], "/models/x", ["--max-num-seqs", "8"], id="--model="),
        pytest.param(["--model", "/a", "--enforce-eager", "--model", "/b"], "/b", ["--enforce-eager"], id="last wins"),
        pytest.param(["--model-impl", "vllm"], "m", ["--model-impl", "vllm"], id="--model-impl is another flag"),
    ],
)
def test_vllm_model_from_the_args_becomes_the_positional(args: list[str], weights: str, rest: list[str]) -> None:
    # vllm serve refuses a positional model beside --model (vllm/utils/argparse_utils.py), so a
    # --model in spec.engine.args, the documented way to load weights from a path, moves there.
    _, argv = engine_command(spec(model={"name": "m", "preset": "llama-3.1-8b"}, engine={"args": args}))
    assert argv[0] == weights and "--model" not in argv and not any(a.startswith("--model=") for a in argv)
    assert args_of(argv, "--served-model-name") == "m"
    assert argv[len(argv) - len(rest):] == rest


def test_vllm_fp8_weights_use_online_quantisation() -> None:
    _, argv = engine_command(spec(model={"name": "m", "preset": "mistral-7b", "weightDtype": "fp8"}))
    assert args_of(argv, "--quantization") == "fp8" and "--dtype" not in argv
    assert args_of(argv, "--kv-cache-dtype") == "auto"


def test_sglang_command() -> None:
    command, argv = engine_command(spec(
        model={"name": "Qwen/Qwen2.5-7B-Instruct", "preset": "qwen2.5-7b", "kvCacheDtype": "fp8"},
        engine={"type": "sglang", "image": "lmsysorg/sglang:v0.5.0", "port": 30000},
        resources={"gpusPerReplica": 2},
    ))
    assert command == ["sglang", "serve"]
    assert args_of(argv, "--model-path") == "Qwen/Qwen2.5-7B-Instruct"
    assert args_of(argv, "--context-length") == "8192"
    assert args_of(argv, "--tp-size") == "2"
    assert args_of(argv, "--kv-cache-dtype") == "fp8_e4m3"
    assert args_of(argv, "--host") == "0.0.0.0"
    assert args_of(argv, "--port") == "30000"
    assert "--enable-metrics" in argv


def test_mock_command() -> None:
    command, argv = engine_command(spec(
        engine={"type": "mock", "image": "llmscale:dev", "metricsProfile": "vllm-legacy"},
        resources={"gpuType": "h200"}, headroom={"coldStartSeconds": 45},
    ))
    assert command == ["llmscale"]
    assert argv[0] == "engine"
    assert args_of(argv, "--model") == "llama-3.1-8b"
    assert args_of(argv, "--gpu") == "h200"
    assert args_of(argv, "--cold-start-seconds") == "45"
    assert args_of(argv, "--served-model-name") == "meta-llama/Llama-3.1-8B-Instruct"
    assert args_of(argv, "--metrics-names") == "legacy"
    assert args_of(argv, "--host") == "0.0.0.0"


def test_mock_engine_needs_a_preset() -> None:
    explicit = spec(
        model={"name": "custom", "architecture": {"numHiddenLayers": 2, "numAttentionHeads": 4,
                                                   "numKeyValueHeads": 4, "headDim": 64, "parameters": 10_000_000}},
        engine={"type": "mock"},
    )
    with pytest.raises(UnsupportedSpecError, match="preset"):
        engine_command(explicit)


def test_the_mock_command_parses_with_llmscale_engine() -> None:
    from llmscale.cli import build_parser

    _, argv = engine_command(spec(engine={"type": "mock"}))
    args = build_parser("engine").parse_args(argv)
    assert args.model == "llama-3.1-8b" and args.host == "0.0.0.0" and args.cold_start_seconds == 180.0


# ------------------------------------------------------------------------------------------
# Pods and pool state
# ------------------------------------------------------------------------------------------


def conditions(**kw: str | tuple[str, str]) -> dict[str, Any]:
    out = []
    for type_, value in kw.items():
        status, reason = value if isinstance(value, tuple) else (value, "")
        out.append({"type": type_, "status": status, "reason": reason})
    return {"phase": "Pending", "conditions": out}


@pytest.mark.parametrize(
    ("metadata", "status", "phase"),
    [
        pytest.param({}, {"phase": "Running", **conditions(Ready="True")}, "ready", id="ready"),
        pytest.param({}, conditions(PodScheduled="True", Ready="False"), "starting", id="in its cold start"),
        pytest.param({}, {}, "starting", id="just created, no status yet"),
        pytest.param({}, conditions(PodScheduled=("False", "Unschedulable")), "unschedulable", id="no free GPU"),
        pytest.param({"deletionTimestamp": "2024-06-03T12:00:00Z"}, conditions(Ready="True"), None, id="terminating"),
        pytest.param({}, {"phase": "Failed"}, None, id="failed"),
        pytest.param({}, {"phase": "Succeeded"}, None, id="succeeded"),
        # Issue 21: live pods that waiting will not make Ready are failed, not starting.
        pytest.param({}, {**conditions(PodScheduled="True", Ready="False"), "containerStatuses": [
            {"name": "engine", "restartCount": 37, "state": {"waiting": {"reason": "CrashLoopBackOff"}},
             "lastState": {"terminated": {"reason": "Error", "exitCode": 1}}}]}, "failed", id="crash-loop-37"),
        pytest.param({}, {**conditions(PodScheduled="True", Ready="False"), "containerStatuses": [
            {"name": "engine", "restartCount": 1, "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]},
            "failed", id="first-back-off"),
        pytest.param({}, {**conditions(PodScheduled="True", Ready="False"), "containerStatuses": [
            {"name": "engine", "restartCount": 3, "state": {"running": {}}}]}, "failed",
            id="running-between-back-offs-3-restarts"),
        pytest.param({}, {**conditions(PodScheduled="True", Ready="False"), "containerStatuses": [
            {"name": "engine", "restartCount": 2, "state": {"running": {}}}]}, "starting", id="2-restarts-tolerated"),
        pytest.param({}, {**conditions(PodScheduled="True", Ready="False"), "containerStatuses": [
            {"name": "engine", "state": {"waiting": {"reason": "ImagePullBackOff"}}}]}, "failed", id="image-pull-back-off"),
        pytest.param({}, {**conditions(PodScheduled="True", Ready="False"), "containerStatuses": [
            {"name": "engine", "state": {"waiting": {"reason": "ErrImagePull"}}}]}, "starting",
            id="first-failed-pull-may-be-a-blip"),
        pytest.param({}, {**conditions(PodScheduled="True", Ready="False"), "containerStatuses": [
            {"name": "engine", "state": {"waiting": {"reason": "CreateContainerConfigError"}}}]}, "failed",
            id="missing-secret"),
        pytest.param({}, {**conditions(PodScheduled="True", Ready="False"), "initContainerStatuses": [
            {"name": "fetch-weights", "restartCount": 5, "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]},
            "failed", id="init-container-crash-loop"),
        pytest.param({}, {**conditions(PodScheduled="True", Ready="False"), "containerStatuses": [
            {"name": "engine", "state": {"waiting": {"reason": "ContainerCreating"}}}]}, "starting",
            id="container-creating"),
        pytest.param({}, {"phase": "Running", **conditions(Ready="True"), "containerStatuses": [
            {"name": "engine", "restartCount": 12, "state": {"running": {}}}]}, "ready", id="ready-after-restarts"),
    ],
)
def test_classify_pod(metadata: dict[str, Any], status: dict[str, Any], phase: str | None) -> None:
    assert classify_pod(metadata, status) == phase


CRASH_LOOP = {**conditions(Ready="False"), "containerStatuses": [
    {"name": "engine", "restartCount": 37, "state": {"waiting": {"reason": "CrashLoopBackOff"}},
     "lastState": {"terminated": {"reason": "Error", "exitCode": 1}}}]}


def test_pod_failure_names_the_container_with_its_last_termination() -> None:
    assert pod_failure({}, CRASH_LOOP) == (
        "container engine CrashLoopBackOff after 37 restarts, last terminated Error (exit code 1)")


def test_a_ready_pod_has_no_failure() -> None:
    assert pod_failure({}, {**CRASH_LOOP, "conditions": [{"type": "Ready", "status": "True"}]}) is None


@pytest.mark.parametrize(
    ("replicas", "phases", "expected"),
    [
        # A rollout's surge pod (maxSurge 1) is the Deployment controller's, not capacity asked for.
        pytest.param(16, ["ready"] * 16 + ["starting"], (16, 0, 0, 0, 1), id="rollout-surge-starting"),
        # Issue 21: 8 replicas hold every GPU; the surge pod is unschedulable for ever.
        pytest.param(8, ["ready"] * 8 + ["unschedulable"], (8, 0, 0, 0, 1), id="rollout-surge-unschedulable"),
        # Raised to 9 while that rollout is stuck: one unschedulable pod is llmscale's.
        pytest.param(9, ["ready"] * 8 + ["unschedulable"] * 2, (8, 0, 1, 0, 1), id="asked-for-and-surge"),
        # A surge pod of a broken image: not a replica to replace.
        pytest.param(4, ["ready"] * 4 + ["failed"], (4, 0, 0, 0, 1), id="rollout-surge-failed"),
        pytest.param(4, ["ready"] * 3 + ["failed"], (3, 0, 0, 1, 0), id="crash-loop-not-starting"),
        pytest.param(5, ["ready"] * 3 + ["starting", "unschedulable"], (3, 1, 1, 0, 0), id="no-surge"),
    ],
)
def test_pool_state_leaves_surge_pods_out(replicas: int, phases: list[Any], expected: tuple[int, ...]) -> None:
    s = pool_state(replicas, None, phases, [])
    assert (s.interactive_ready, s.interactive_starting, s.interactive_unschedulable, s.interactive_failed,
            s.interactive_surge) == expected


def test_pool_state_counts_each_pool() -> None:
    state = pool_state(5, None, ["ready", "ready", "starting", "unschedulable"], ["ready"])
    assert state == PoolState(
        interactive_replicas=5, interactive_ready=2, interactive_starting=1, interactive_unschedulable=1,
        batch_replicas=0, batch_ready=1,
    )


READY_AT = {"phase": "Running", "conditions": [
    {"type": "Ready", "status": "True", "lastTransitionTime": "2024-06-03T12:05:12Z"}]}


@pytest.mark.parametrize(
    ("metadata", "status", "expected"),
    [
        pytest.param({"creationTimestamp": "2024-06-03T12:00:00Z"}, READY_AT, (T0 + 312, 312.0), id="ready-312s"),
        pytest.param({"creationTimestamp": "2024-06-03T12:00:00Z"}, conditions(Ready="False"), None,
                     id="not-ready-yet"),
        pytest.param({}, READY_AT, None, id="no-creation-time"),
        pytest.param({"creationTimestamp": "not a time"}, READY_AT, None, id="unreadable-creation-time"),
        pytest.param({"creationTimestamp": "2024-06-03T12:06:00Z"}, READY_AT, None, id="ready-before-created-skew"),
        pytest.param({"creationTimestamp": "2024-06-03T12:00:00Z"},
                     {"conditions": [{"type": "Ready", "status": "True"}]}, None, id="no-transition-time"),
    ],
)
def test_cold_start_is_creation_to_ready(
    metadata: dict[str, Any], status: dict[str, Any], expected: tuple[float, float] | None
) -> None:
    assert cold_start(metadata, status) == expected


def test_pool_state_carries_the_recent_cold_starts_oldest_first() -> None:
    # Ordered by when each pod became Ready; pods without a measurement are skipped; only the last
    # COLD_START_SAMPLES (20) count.
    starts = [(T0 + 30, 300.0), None, (T0 + 10, 280.0), (T0 + 20, 900.0)]
    state = pool_state(3, None, ["ready", "ready", "starting", "ready"], [], starts)
    assert state.interactive_cold_starts_s == (280.0, 900.0, 300.0)
    assert state.batch_cold_starts_s == ()
    many = [(T0 + i, float(i)) for i in range(30)]
    assert recent_cold_starts(many) == tuple(float(i) for i in range(10, 30))


# ------------------------------------------------------------------------------------------
# Status and conditions
# ------------------------------------------------------------------------------------------


def decision(replicas: int = 4, reasons: tuple[str, ...] = ("queue depth 14 > 3 per replica",)) -> Decision:
    ok = ConditionResult("True", Reason.MetricsFresh, "all leading signals known")
    return Decision(
        interactive_replicas=replicas, batch_replicas=0, demand_replicas=replicas - 1, headroom_replicas=1,
        reasons=reasons, metrics_available=ok,
        able_to_scale=ConditionResult("True", Reason.ReadyForNewScale, "no window"),
        scaling_limited=ConditionResult("False", Reason.DesiredWithinRange, "no limit"),
        batch_window_open=ConditionResult("False", Reason.OutsideTroughWindows, "no window open"),
        policy_state_readable=ConditionResult("True", Reason.PolicyStateRead, "complete"),
        lead_time_s=312.0,
        memory=PolicyMemory(recommendations=((T0, replicas),), scale_events=((T0, 2),)),
    )


SNAPSHOT = SignalSnapshot(observed_at=T0 - 5, queue_depth=14.0, kv_cache_utilization=0.5, preemption_rate=None)


def test_build_status_in_wire_format() -> None:
    state = PoolState(interactive_replicas=2, interactive_ready=2, interactive_starting=0)
    status = build_status(decision=decision(), snapshot=SNAPSHOT, state=state, applied_interactive=4,
                          applied_batch=0, generation=3, previous=None, now=T0)
    assert status["observedGeneration"] == 3
    assert status["replicas"] == {"desired": 4, "ready": 2, "headroom": 1, "batch": 0, "batchReady": 0,
                                  "leadTimeSeconds": 312.0, "current": 4}
    # Unknown signals are absent, not zero.
    assert status["signals"] == {"observedAt": "2024-06-03T11:59:55Z", "queueDepth": 14.0, "kvCacheUtilization": 0.5}
    assert status["lastDecision"] == {"at": "2024-06-03T12:00:00Z", "interactiveReplicas": 4, "batchReplicas": 0,
                                      "reasons": ["queue depth 14 > 3 per replica"]}
    assert status["policyState"] == {"recommendations": [[T0, 4]], "scaleEvents": [[T0, 2]]}
    assert [c["type"] for c in status["conditions"]] == [
        "Ready", "MetricsAvailable", "RateWindowFits", "EnginesStalled", "AbleToScale", "ScalingLimited",
        "BatchWindowOpen", "PolicyStateReadable", "CapacityModel", "Diagnosis",
    ]
    ready = status["conditions"][0]
    assert ready == {"type": "Ready", "status": "True", "reason": "Serving", "message": "2 of 4 replicas ready; 0 starting",
                     "lastTransitionTime": "2024-06-03T12:00:00Z", "observedGeneration": 3}


@pytest.mark.parametrize(
    ("desired", "state", "expected"),
    [
        pytest.param(2, PoolState(2, 2), ("True", "AllReplicasReady"), id="all ready"),
        pytest.param(4, PoolState(4, 1, 3), ("True", "Serving"), id="some ready"),
        pytest.param(2, PoolState(2, 0, 2), ("False", "NoReplicaReady"), id="cold start"),
        pytest.param(2, PoolState(2, 0, 0, 2), ("False", "Unschedulable"), id="waiting for GPUs"),
        pytest.param(0, PoolState(0, 0), ("False", "ScaledToZero"), id="scaled to zero"),
    ],
)
def test_ready_condition(desired: int, state: PoolState, expected: tuple[str, str]) -> None:
    result = ready_condition(desired, state)
    assert (result.status, result.reason) == expected


def test_last_transition_time_moves_only_when_the_status_flips() -> None:
    first = merge_conditions(None, {"Ready": ConditionResult("False", "NoReplicaReady", "0 of 2")}, T0, 1)
    same = merge_conditions(first, {"Ready": ConditionResult("False", "Unschedulable", "0 of 2")}, T0 + 60, 1)
    flipped = merge_conditions(same, {"Ready": ConditionResult("True", "AllReplicasReady", "2 of 2")}, T0 + 120, 1)
    assert same[0]["lastTransitionTime"] == "2024-06-03T12:00:00Z"
    assert same[0]["reason"] == "Unschedulable"
    assert flipped[0]["lastTransitionTime"] == "2024-06-03T12:02:00Z"


def test_conditions_of_other_writers_are_kept() -> None:
    theirs = {"type": "Progressing", "status": "True", "reason": "X", "lastTransitionTime": "2024-01-01T00:00:00Z"}
    merged = merge_conditions([theirs], {"Ready": ConditionResult("True", "AllReplicasReady", "")}, T0, 1)
    assert merged[-1] == theirs


def test_invalid_status_sets_only_the_generation_with_the_ready_condition() -> None:
    previous = {"replicas": {"desired": 3}, "conditions": [
        {"type": "MetricsAvailable", "status": "True", "reason": "SignalsFresh", "lastTransitionTime": "x"}]}
    status = invalid_status("spec.replicas: min must be <= max", 4, previous, T0)
    assert status["observedGeneration"] == 4
    assert status["conditions"][0]["reason"] == "InvalidSpec"
    assert status["conditions"][1]["type"] == "MetricsAvailable"
    patch = status_patch(previous, status, now=0, last_written_at=None, refresh_seconds=60)
    assert patch is not None and "replicas" not in patch  # what invalid_status does not set stays


# ------------------------------------------------------------------------------------------
# Write on change
# ------------------------------------------------------------------------------------------


def test_merge_patch_deletes_dropped_keys_with_none_replacing_lists_whole() -> None:
    old = {"signals": {"queueDepth": 3.0, "kvCacheUtilization": 0.5}, "conditions": [1, 2]}
    new = {"signals": {"kvCacheUtilization": 0.5}, "conditions": [1, 3]}
    assert merge_patch(old, new) == {"signals": {"queueDepth": None}, "conditions": [1, 3]}


def test_merge_patch_of_equal_documents_is_empty() -> None:
    new = {"signals": {"kvCacheUtilization": 0.5}, "conditions": [1, 3]}
    assert merge_patch(new, new) == {}


def make_status(now: float, queue: float, replicas: int = 4) -> dict[str, Any]:
    snap = SignalSnapshot(observed_at=now, queue_depth=queue, kv_cache_utilization=0.5, preemption_rate=0.0)
    return build_status(decision=decision(replicas), snapshot=snap, state=PoolState(replicas, replicas),
                        applied_interactive=replicas, applied_batch=0, generation=1, previous=None, now=T0)


def test_an_identical_status_is_not_written() -> None:
    status = make_status(T0, 2.0)
    assert status_patch(status, status, now=10, last_written_at=None, refresh_seconds=60) is None


def test_a_signals_only_change_waits_for_the_refresh_interval() -> None:
    old, new = make_status(T0, 2.0), make_status(T0 + 15, 3.0)
    assert status_patch(old, new, now=30, last_written_at=0, refresh_seconds=60) is None
    patch = status_patch(old, new, now=61, last_written_at=0, refresh_seconds=60)
    assert patch == {"signals": {"observedAt": "2024-06-03T12:00:15Z", "queueDepth": 3.0}}
    # After a restart the operator has not written yet: write at once.
    assert status_patch(old, new, now=30, last_written_at=None, refresh_seconds=60) is not None


def test_a_replicas_change_is_written_at_once() -> None:
    old, new = make_status(T0, 2.0, replicas=4), make_status(T0, 2.0, replicas=5)
    patch = status_patch(old, new, now=1, last_written_at=0, refresh_seconds=3600)
    assert patch is not None and patch["replicas"]["desired"] == 5


def test_status_keys_of_others_are_left_alone() -> None:
    status = make_status(T0, 2.0)
    previous = {**status, "kopf": {"progress": {}}}
    assert status_patch(previous, status, now=1, last_written_at=None, refresh_seconds=0) is None


@pytest.mark.parametrize("text", ["2026-11-30T13:55:02Z", "2026-11-30T13:55:02+00:00", "2026-11-30T14:55:02+01:00",
                                  "2026-11-30T13:55:02", "2026-11-30T13:55:02.250Z", "not a time", "", None, 5])
def test_one_rfc3339_parser_for_every_metav1_time(text: object) -> None:
    """The cold-start reader and the peering reader read a time exactly as the timestamps module
    does (a time without offset is UTC, never the host's zone: the host here is in New York; junk
    is None)."""
    import os
    import time

    from llmscale.controller.peers import _parse_time
    from llmscale.controller.state.coldstart import parse_time
    from llmscale.controller.state.timestamps import parse_rfc3339

    before = os.environ.get("TZ")
    os.environ["TZ"] = "America/New_York"
    time.tzset()
    try:
        want = parse_rfc3339(text)
        assert parse_time(text) == want
        got = _parse_time(text)
        assert (got.timestamp() if got is not None else None) == want
        if isinstance(text, str) and text.startswith("2026-11-30T1"):
            assert want is not None and abs(want - 1796046902) < 1
    finally:
        if before is None:
            del os.environ["TZ"]
        else:
            os.environ["TZ"] = before
        time.tzset()


@pytest.mark.parametrize(("startup", "cold", "failures", "deadline"), [
    (None, 180, 27, 600),      # 1.5 cold starts of 180 s
    (3600, 180, 360, 3660),    # a first 141 GB download: an hour before the kubelet restarts it
    (60, 900, 6, 1860),        # shorter than the cold start: the spec's word, the floor of 6 kept
])
def test_the_startup_probe_budget_is_settable(startup: int | None, cold: int, failures: int, deadline: int) -> None:
    from llmscale.api import LLMDeploymentSpec
    from llmscale.controller.manifests.names import INTERACTIVE
    from llmscale.controller.manifests.podtemplate import pod_template, progress_deadline_seconds

    engine = {"startupSeconds": startup} if startup is not None else {}
    spec = LLMDeploymentSpec.model_validate({"model": {"name": "m", "preset": "llama-3.1-8b"}, "engine": engine,
                                             "headroom": {"coldStartSeconds": cold}})
    (container,) = pod_template("chat", spec, INTERACTIVE)["spec"]["containers"]
    probe = container["startupProbe"]
    assert probe["failureThreshold"] == failures and probe["periodSeconds"] == 10
    assert progress_deadline_seconds(spec) == deadline


def _sample_engines() -> list[tuple[str, dict[str, Any]]]:
    import yaml
    from tests.cluster.helpers import ROOT

    out = []
    for path in sorted((ROOT / "manifests" / "samples").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") == "LLMDeployment":
                out.append((path.name, doc["spec"].get("engine", {})))
    return out


def _version(image: str) -> tuple[int, ...]:
    return tuple(int(p) for p in image.rsplit(":v", 1)[1].split("-")[0].split("."))


def test_the_samples_run_current_engines() -> None:
    # One vLLM version everywhere: every vLLM sample that names an image names the API's default
    # (vLLM 0.32, the version the real-engine tests run); SGLang at least 0.5.23, whose `sglang
    # serve` the operator starts.
    from llmscale.api import EngineSpec

    default = EngineSpec().image
    assert _version(default) >= (0, 32, 0)
    engines = _sample_engines()
    assert {e.get("type", "vllm") for _, e in engines} >= {"vllm", "sglang"}
    for name, engine in engines:
        image = engine.get("image")
        if image is None:
            continue
        if engine.get("type", "vllm") == "vllm":
            assert image == default, name
        elif engine["type"] == "sglang":
            assert image.startswith("lmsysorg/sglang:") and _version(image) >= (0, 5, 23), name
