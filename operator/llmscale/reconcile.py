"""Pure builders of the operator shell: child manifests, pool state, status and conditions.

Nothing here talks to the API server or reads a clock: the Kopf handlers in
:mod:`llmscale.handlers` gather the inputs (the LLMDeployment body, index contents, the time) and
apply what these functions return. Every manifest is a plain dict in the wire format, ready for
server-side apply.

Children of an LLMDeployment ``<name>`` (DESIGN.md): Deployment ``<name>`` (interactive pool),
Deployment ``<name>-batch`` (only when ``spec.batch`` is set), Service ``<name>`` (the interactive
pool) and PodDisruptionBudget ``<name>``; all labelled and owned by the LLMDeployment.
"""

from __future__ import annotations

import copy
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Literal

from llmscale.api import (
    API_VERSION,
    KIND,
    Condition,
    DecisionStatus,
    LLMDeploymentSpec,
    LLMDeploymentStatus,
    ReplicaStatus,
    SignalStatus,
)
from llmscale.policy.types import ConditionResult, Decision, PoolState
from llmscale.signals.snapshot import SignalSnapshot

__all__ = [
    "BATCH",
    "CONDITION_TYPES",
    "INTERACTIVE",
    "LABEL_DEPLOYMENT",
    "LABEL_INSTANCE",
    "LABEL_MANAGED_BY",
    "LABEL_NAME",
    "LABEL_POOL",
    "MANAGER",
    "OWNED_STATUS_KEYS",
    "PodPhase",
    "Pool",
    "UnsupportedSpecError",
    "batch_deployment_name",
    "build_status",
    "child_manifests",
    "classify_pod",
    "deployment_manifest",
    "engine_command",
    "initial_replicas",
    "invalid_status",
    "labels",
    "merge_conditions",
    "merge_patch",
    "owner_reference",
    "pdb_manifest",
    "pod_template",
    "pool_state",
    "ready_condition",
    "rfc3339",
    "selector_labels",
    "service_manifest",
    "status_patch",
    "termination_grace_seconds",
]

Pool = Literal["interactive", "batch"]
INTERACTIVE: Pool = "interactive"
BATCH: Pool = "batch"

MANAGER = "llmscale"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_NAME = "app.kubernetes.io/name"
LABEL_INSTANCE = "app.kubernetes.io/instance"
LABEL_DEPLOYMENT = "llmscale.dev/deployment"
LABEL_POOL = "llmscale.dev/pool"

#: Read by the local cluster's KWOK stage (e2e/cluster/kwok-stages.yaml) to delay Ready.
ANNOTATION_COLD_START = "llmscale.dev/cold-start-seconds"

#: Conditions the operator maintains on ``status.conditions``, in display order.
CONDITION_TYPES: tuple[str, ...] = (
    "Ready",
    "MetricsAvailable",
    "AbleToScale",
    "ScalingLimited",
    "BatchWindowOpen",
    "PolicyStateReadable",
)

#: Top-level ``status`` keys the operator owns; any other key (e.g. Kopf's own) is never touched.
OWNED_STATUS_KEYS: tuple[str, ...] = (
    "observedGeneration",
    "replicas",
    "signals",
    "lastDecision",
    "conditions",
    "policyState",
)

# Status keys whose change alone does not justify a write before the refresh interval: live
# signal values change on every tick, the policy memory grows on every tick, and the decision time
# moves with them. ``("lastDecision", "at")`` is a nested path.
_VOLATILE_STATUS_PATHS: tuple[tuple[str, ...], ...] = (("signals",), ("policyState",), ("lastDecision", "at"))

# Probe cadence. The startup probe covers the cold start with 50 % margin: a 180 s cold start
# gets 27 × 10 s = 270 s before the kubelet restarts the container; a slow disk or a cold page
# cache easily adds a third to a weight read, and a restart throws the whole cold start away.
_STARTUP_PERIOD_S = 10
_STARTUP_MARGIN = 1.5
_STARTUP_MIN_FAILURES = 6  # at least one minute, even for a "0 s" cold start
_READINESS_PERIOD_S = 5
_LIVENESS_PERIOD_S = 15
_LIVENESS_FAILURES = 4  # one minute of failed /health before a restart: a long prefill can stall it

# Drain: the preStop sleep lets the endpoints controller and kube-proxy drop the pod from the
# Service before the engine sees SIGTERM (endpoint propagation takes seconds); then in-flight
# requests finish. A long answer at the ITL SLO takes ttft + tokens × itl: 2 s + 2,048 × 0.1 s
# = 207 s with the default SLO. 2,048 output tokens is a common max_tokens cap of chat front
# ends; longer generations are cut at the grace period.
_PRESTOP_SLEEP_S = 15
_DRAIN_OUTPUT_TOKENS = 2048
_GRACE_MIN_S = 60
_GRACE_MAX_S = 900


# The mock engine runs as the image's non-root user (Dockerfile: USER 65532:65532) and writes only
# to /tmp, so its pods meet the "restricted" Pod Security Standard (Kubernetes docs, "Pod Security
# Standards": runAsNonRoot, allowPrivilegeEscalation=false, capabilities drop ALL, seccomp
# RuntimeDefault). vLLM and SGLang pods get none of this: their images (vllm/vllm-openai,
# lmsysorg/sglang) run as root and write to the root filesystem (Hugging Face cache, Triton and
# torch.compile caches under ~/.cache); forcing a non-root user or a read-only root breaks them, so
# their namespaces enforce "baseline" (manifests/samples/namespace.yaml).
_MOCK_UID = 65532
_MOCK_TMP_SIZE = "64Mi"  # the mock engine writes nothing but Python's and matplotlib's scratch files


class UnsupportedSpecError(ValueError):
    """A spec that validates against the API but that the operator cannot turn into pods
    (e.g. the mock engine with an explicit architecture instead of a preset)."""


PodPhase = Literal["ready", "starting", "unschedulable"]


# --------------------------------------------------------------------------------------------
# Names, labels, owner references
# --------------------------------------------------------------------------------------------


def batch_deployment_name(name: str) -> str:
    """Return the batch pool's Deployment name, ``<name>-batch`` (DESIGN.md)."""
    return f"{name}-batch"


def selector_labels(name: str, pool: Pool) -> dict[str, str]:
    """Return the labels that select one pool's pods.

    Kept to the two labels that never change for the object's life, because a Deployment's
    ``spec.selector`` is immutable (changing the engine type must not break the apply).
    """
    return {LABEL_DEPLOYMENT: name, LABEL_POOL: pool}


def labels(name: str, engine: str, pool: Pool) -> dict[str, str]:
    """Return the five labels every object llmscale creates carries (DESIGN.md).

    Args:
        name: the LLMDeployment's name.
        engine: ``spec.engine.type`` (``vllm``, ``sglang`` or ``mock``).
        pool: ``interactive`` or ``batch``.
    """
    return {
        LABEL_MANAGED_BY: MANAGER,
        LABEL_NAME: engine,
        LABEL_INSTANCE: name,
        **selector_labels(name, pool),
    }


def owner_reference(body: Mapping[str, Any]) -> dict[str, Any]:
    """Return the ``ownerReferences`` entry that makes a child belong to the LLMDeployment.

    ``controller: true`` marks llmscale as the one managing controller; ``blockOwnerDeletion``
    makes foreground deletion of the LLMDeployment wait for its children.

    Raises:
        ValueError: the body has no ``metadata.name`` or ``metadata.uid``.
    """
    meta = body.get("metadata", {})
    name, uid = meta.get("name"), meta.get("uid")
    if not name or not uid:
        raise ValueError("an owner reference needs metadata.name and metadata.uid")
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "name": name,
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _metadata(name: str, namespace: str, obj_labels: Mapping[str, str], owner: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": namespace,
        "labels": dict(obj_labels),
        "ownerReferences": [dict(owner)],
    }


# --------------------------------------------------------------------------------------------
# Pod template
# --------------------------------------------------------------------------------------------


def _number(value: float) -> str:
    """Format seconds without a needless ``.0`` (``180.0`` -> ``"180"``, ``2.5`` -> ``"2.5"``)."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))


_VLLM_DTYPE = {"bf16": "bfloat16", "fp16": "float16"}
_SGLANG_KV = {"fp8": "fp8_e4m3"}


def engine_command(spec: LLMDeploymentSpec) -> tuple[list[str], list[str]]:
    """Return ``(command, args)`` of the engine container for ``spec.engine.type``.

    ``spec.model.name`` is both the weights to load and the served name. To load weights from a
    path, append ``--model PATH`` (vLLM, mock) or ``--model-path PATH`` (SGLang) to
    ``spec.engine.args``: the engines parse arguments with argparse, where the last occurrence wins.

    - ``vllm``: ``python3 -m vllm.entrypoints.openai.api_server`` (vLLM's OpenAI server module,
      present in every ``vllm/vllm-openai`` image) with ``--model``, ``--served-model-name``,
      ``--max-model-len``, ``--tensor-parallel-size``, ``--kv-cache-dtype`` (``auto`` keeps the
      weight type, ``fp8``), ``--dtype`` or ``--quantization fp8``, ``--port``.
    - ``sglang``: ``python3 -m sglang.launch_server`` with ``--model-path``, ``--served-model-name``,
      ``--context-length``, ``--tp-size``, ``--kv-cache-dtype`` (``auto``/``fp8_e4m3``),
      ``--host 0.0.0.0`` (SGLang binds 127.0.0.1 by default), ``--port`` and ``--enable-metrics``
      (SGLang exports no Prometheus metrics without it). Source: SGLang ``server_args.py``.
    - ``mock``: ``llmscale engine --model <preset> --gpu <gpu preset> --port <port>
      --cold-start-seconds <headroom.coldStartSeconds>`` plus the served name, GPUs, context
      limit, dtypes, metric names (``legacy`` for the ``vllm-legacy`` profile) and
      ``--host 0.0.0.0`` (the mock binds 127.0.0.1 by default).

    ``spec.engine.args`` are appended last in every case.

    Raises:
        UnsupportedSpecError: ``mock`` without ``spec.model.preset`` (the mock engine simulates
            presets only).
    """
    model, engine = spec.model, spec.engine
    port = str(engine.port)
    extra = list(engine.args)
    if engine.type == "vllm":
        args = [
            "--model", model.name,
            "--served-model-name", model.name,
            "--max-model-len", str(model.context_limit_tokens),
            "--tensor-parallel-size", str(spec.resources.gpus_per_replica),
            "--kv-cache-dtype", "fp8" if model.kv_cache_dtype == "fp8" else "auto",
        ]
        if model.weight_dtype == "fp8":
            args += ["--quantization", "fp8"]
        else:
            args += ["--dtype", _VLLM_DTYPE[model.weight_dtype]]
        args += ["--port", port]
        return ["python3", "-m", "vllm.entrypoints.openai.api_server"], args + extra
    if engine.type == "sglang":
        args = [
            "--model-path", model.name,
            "--served-model-name", model.name,
            "--context-length", str(model.context_limit_tokens),
            "--tp-size", str(spec.resources.gpus_per_replica),
            "--kv-cache-dtype", _SGLANG_KV.get(model.kv_cache_dtype, "auto"),
        ]
        if model.weight_dtype == "fp8":
            args += ["--quantization", "fp8"]
        else:
            args += ["--dtype", _VLLM_DTYPE[model.weight_dtype]]
        args += ["--host", "0.0.0.0", "--port", port, "--enable-metrics"]
        return ["python3", "-m", "sglang.launch_server"], args + extra
    if model.preset is None:
        raise UnsupportedSpecError(
            "spec.engine.type mock needs spec.model.preset: the mock engine simulates presets only"
        )
    args = [
        "engine",
        "--model", str(model.preset),
        "--gpu", str(spec.resources.gpu_type),
        "--gpus", str(spec.resources.gpus_per_replica),
        "--served-model-name", model.name,
        "--max-model-len", str(model.context_limit_tokens),
        "--dtype", model.weight_dtype,
        "--kv-cache-dtype", model.kv_cache_dtype,
        "--metrics-names", "legacy" if engine.profile() == "vllm-legacy" else "current",
        "--host", "0.0.0.0",
        "--port", port,
        "--cold-start-seconds", _number(spec.headroom.cold_start_seconds),
    ]
    return ["llmscale"], args + extra


def termination_grace_seconds(spec: LLMDeploymentSpec) -> int:
    """Return ``terminationGracePeriodSeconds``: the preStop sleep plus time to drain a long answer.

    ``15 + ceil(ttftP95 + 2048 × itlP95)``, clamped to 60–900 s; 222 s with the default SLO
    (2 s, 0.1 s). See the constants' comment for the numbers.
    """
    drain = spec.slo.ttft_p95_seconds + _DRAIN_OUTPUT_TOKENS * spec.slo.itl_p95_seconds
    return max(_GRACE_MIN_S, min(_GRACE_MAX_S, _PRESTOP_SLEEP_S + math.ceil(drain)))


def _startup_failure_threshold(cold_start_s: float) -> int:
    return max(_STARTUP_MIN_FAILURES, math.ceil(cold_start_s * _STARTUP_MARGIN / _STARTUP_PERIOD_S))


def pod_template(name: str, spec: LLMDeploymentSpec, pool: Pool) -> dict[str, Any]:
    """Return the pod template of one pool's Deployment.

    One container ``engine`` (see :func:`engine_command`) requesting
    ``gpusPerReplica`` × ``gpuResourceName`` (requests equal limits, as extended resources
    require); a startup probe on ``GET /health`` with ``failureThreshold × 10 s ≥ 1.5 × cold
    start``, readiness every 5 s and liveness every 15 s on the same path (vLLM and SGLang both
    answer ``/health`` once the model is loaded); a preStop sleep and a grace period sized by
    :func:`termination_grace_seconds`; annotations for the KWOK cold start and Prometheus scraping.

    The mock engine's pod also meets the "restricted" Pod Security Standard: non-root UID/GID
    65532 (the image's user), no privilege escalation, every capability dropped, seccomp
    ``RuntimeDefault``, a read-only root filesystem and an ``emptyDir`` on ``/tmp``. vLLM and
    SGLang pods are left as their images need them (root, writable root filesystem); see the
    comment at ``_MOCK_UID``.

    Raises:
        UnsupportedSpecError: see :func:`engine_command`.
    """
    command, args = engine_command(spec)
    port = spec.engine.port
    gpus = {spec.resources.gpu_resource_name: str(spec.resources.gpus_per_replica)}

    def probe(period: int, failures: int, timeout: int) -> dict[str, Any]:
        return {
            "httpGet": {"path": "/health", "port": "http"},
            "periodSeconds": period,
            "failureThreshold": failures,
            "timeoutSeconds": timeout,
        }

    container: dict[str, Any] = {
        "name": "engine",
        "image": spec.engine.image,
        "command": command,
        "args": args,
        "ports": [{"name": "http", "containerPort": port, "protocol": "TCP"}],
        "resources": {"requests": dict(gpus), "limits": dict(gpus)},
        "startupProbe": probe(_STARTUP_PERIOD_S, _startup_failure_threshold(spec.headroom.cold_start_seconds), 5),
        "readinessProbe": probe(_READINESS_PERIOD_S, 3, 3),
        "livenessProbe": probe(_LIVENESS_PERIOD_S, _LIVENESS_FAILURES, 5),
        "lifecycle": {"preStop": {"exec": {"command": ["sleep", str(_PRESTOP_SLEEP_S)]}}},
    }
    pod_spec: dict[str, Any] = {
        "containers": [container],
        "terminationGracePeriodSeconds": termination_grace_seconds(spec),
    }
    if spec.engine.type == "mock":
        container["securityContext"] = {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        }
        container["volumeMounts"] = [{"name": "tmp", "mountPath": "/tmp"}]
        pod_spec["securityContext"] = {
            "runAsNonRoot": True,
            "runAsUser": _MOCK_UID,
            "runAsGroup": _MOCK_UID,
            "seccompProfile": {"type": "RuntimeDefault"},
        }
        pod_spec["volumes"] = [{"name": "tmp", "emptyDir": {"sizeLimit": _MOCK_TMP_SIZE}}]
    return {
        "metadata": {
            "labels": labels(name, spec.engine.type, pool),
            "annotations": {
                ANNOTATION_COLD_START: _number(spec.headroom.cold_start_seconds),
                "prometheus.io/scrape": "true",
                "prometheus.io/port": str(port),
                "prometheus.io/path": "/metrics",
            },
        },
        "spec": pod_spec,
    }


# --------------------------------------------------------------------------------------------
# Child manifests
# --------------------------------------------------------------------------------------------


def initial_replicas(spec: LLMDeploymentSpec) -> int:
    """Return the interactive replicas of a new Deployment, before any signal has been read.

    One replica of demand (nothing is known yet, and zero would leave the first request waiting
    a whole cold start) plus ``headroom.replicas``, at least ``replicas.min``, at most
    ``replicas.max``: 2 with the defaults (min 1, headroom 1, max 8).
    """
    return min(spec.replicas.max, max(spec.replicas.min, 1 + spec.headroom.replicas))


def deployment_manifest(
    name: str,
    namespace: str,
    spec: LLMDeploymentSpec,
    pool: Pool,
    replicas: int,
    owner: Mapping[str, Any],
) -> dict[str, Any]:
    """Return one pool's Deployment for server-side apply.

    ``replicas`` is always included: under server-side apply, leaving out a field this manager
    owned would release it and the API server would reset it to the default of 1. The caller
    passes the replicas the operator last set (or the policy's new value).

    The rollout surges one pod and never removes a ready one first (``maxUnavailable: 0``), so
    a template change keeps serving capacity at the price of one spare GPU per rollout step.

    Raises:
        UnsupportedSpecError: see :func:`engine_command`.
        ValueError: ``replicas`` is negative.
    """
    if replicas < 0:
        raise ValueError(f"replicas must be >= 0, got {replicas}")
    deploy_name = name if pool == INTERACTIVE else batch_deployment_name(name)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _metadata(deploy_name, namespace, labels(name, spec.engine.type, pool), owner),
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": selector_labels(name, pool)},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "template": pod_template(name, spec, pool),
        },
    }


def service_manifest(
    name: str, namespace: str, spec: LLMDeploymentSpec, owner: Mapping[str, Any]
) -> dict[str, Any]:
    """Return Service ``<name>``: port ``spec.engine.port`` to the interactive pool's ``http`` port."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(name, namespace, labels(name, spec.engine.type, INTERACTIVE), owner),
        "spec": {
            "selector": selector_labels(name, INTERACTIVE),
            "ports": [{"name": "http", "port": spec.engine.port, "targetPort": "http", "protocol": "TCP"}],
        },
    }


def pdb_manifest(name: str, namespace: str, spec: LLMDeploymentSpec, owner: Mapping[str, Any]) -> dict[str, Any]:
    """Return PodDisruptionBudget ``<name>`` for the interactive pool: ``maxUnavailable: 1``.

    A node drain then evicts one engine at a time, so in-flight work and the KV cache of at most
    one replica are lost at once and the warm headroom absorbs it. ``maxUnavailable`` (not
    ``minAvailable``) keeps working as the pool scales.
    """
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": _metadata(name, namespace, labels(name, spec.engine.type, INTERACTIVE), owner),
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": selector_labels(name, INTERACTIVE)}},
    }


def child_manifests(
    body: Mapping[str, Any],
    spec: LLMDeploymentSpec,
    interactive_replicas: int,
    batch_replicas: int,
) -> list[dict[str, Any]]:
    """Return every child of the LLMDeployment ``body`` for server-side apply, in apply order.

    The Service and the PodDisruptionBudget come first so that pods are covered by both from the
    moment they exist; the batch Deployment only when ``spec.batch`` is set.

    Raises:
        UnsupportedSpecError: see :func:`engine_command`.
        ValueError: the body lacks name, namespace or uid.
    """
    meta = body.get("metadata", {})
    name, namespace = meta.get("name"), meta.get("namespace")
    if not name or not namespace:
        raise ValueError("an LLMDeployment needs metadata.name and metadata.namespace")
    owner = owner_reference(body)
    children = [
        service_manifest(name, namespace, spec, owner),
        pdb_manifest(name, namespace, spec, owner),
        deployment_manifest(name, namespace, spec, INTERACTIVE, interactive_replicas, owner),
    ]
    if spec.batch is not None:
        children.append(deployment_manifest(name, namespace, spec, BATCH, batch_replicas, owner))
    return children


# --------------------------------------------------------------------------------------------
# Pool state from pods
# --------------------------------------------------------------------------------------------


def _condition_status(status: Mapping[str, Any], type_: str) -> Mapping[str, Any] | None:
    for cond in status.get("conditions") or ():
        if cond.get("type") == type_:
            return cond  # type: ignore[no-any-return]
    return None


def classify_pod(metadata: Mapping[str, Any], status: Mapping[str, Any]) -> PodPhase | None:
    """Return what one pod contributes to its pool: ready, starting, unschedulable, or nothing.

    - ``None`` for a terminating pod (``deletionTimestamp`` set) or a finished one (phase
      ``Succeeded``/``Failed``): neither serves nor will serve.
    - ``ready`` when the ``Ready`` condition is ``True``.
    - ``unschedulable`` when ``PodScheduled`` is ``False`` with reason ``Unschedulable`` (e.g. no
      node has a free GPU): the policy stops adding replicas while such pods exist.
    - ``starting`` otherwise: scheduled or about to be, in its cold start.
    """
    if metadata.get("deletionTimestamp") or status.get("phase") in ("Succeeded", "Failed"):
        return None
    ready = _condition_status(status, "Ready")
    if ready is not None and ready.get("status") == "True":
        return "ready"
    scheduled = _condition_status(status, "PodScheduled")
    if scheduled is not None and scheduled.get("status") == "False" and scheduled.get("reason") == "Unschedulable":
        return "unschedulable"
    return "starting"


def pool_state(
    interactive_replicas: int | None,
    batch_replicas: int | None,
    interactive_pods: Iterable[PodPhase],
    batch_pods: Iterable[PodPhase],
) -> PoolState:
    """Return the policy's view of the pools from Deployment replicas and classified pods.

    Args:
        interactive_replicas: ``spec.replicas`` of Deployment ``<name>``; ``None`` when it does not
            exist (yet), read as 0.
        batch_replicas: the same for ``<name>-batch``.
        interactive_pods / batch_pods: :func:`classify_pod` of each live pod of the pool.
    """
    inter, batch = Counter(interactive_pods), Counter(batch_pods)
    return PoolState(
        interactive_replicas=interactive_replicas or 0,
        interactive_ready=inter["ready"],
        interactive_starting=inter["starting"],
        interactive_unschedulable=inter["unschedulable"],
        batch_replicas=batch_replicas or 0,
        batch_ready=batch["ready"],
    )


# --------------------------------------------------------------------------------------------
# Status and conditions
# --------------------------------------------------------------------------------------------


def rfc3339(t: float) -> str:
    """Return ``t`` (seconds since the epoch) as RFC 3339 UTC with second precision, the format
    of ``metav1.Time``."""
    return datetime.fromtimestamp(t, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def ready_condition(desired: int, state: PoolState) -> ConditionResult:
    """Return the ``Ready`` condition of the interactive pool.

    ``True`` once at least one replica serves (reason ``AllReplicasReady`` or ``Serving`` with the
    count of replicas still in their cold start), ``False`` while none does (``NoReplicaReady``,
    or ``Unschedulable`` when pods wait for GPUs) or when the pool is scaled to zero.
    """
    ready = state.interactive_ready
    if desired == 0:
        return ConditionResult("False", "ScaledToZero", "The interactive pool is scaled to zero")
    if ready >= desired:
        return ConditionResult("True", "AllReplicasReady", f"{ready} of {desired} replicas ready")
    starting = f"{state.interactive_starting} starting"
    if state.interactive_unschedulable:
        starting += f", {state.interactive_unschedulable} unschedulable"
    if ready > 0:
        return ConditionResult("True", "Serving", f"{ready} of {desired} replicas ready; {starting}")
    reason = "Unschedulable" if state.interactive_unschedulable else "NoReplicaReady"
    return ConditionResult("False", reason, f"0 of {desired} replicas ready; {starting}")


def merge_conditions(
    previous: Sequence[Mapping[str, Any]] | None,
    current: Mapping[str, ConditionResult],
    now: float,
    generation: int | None,
) -> list[dict[str, Any]]:
    """Return ``status.conditions`` with ``lastTransitionTime`` kept where the status is unchanged.

    ``lastTransitionTime`` moves only when ``status`` flips (metav1.Condition's rule); a new
    reason or message with the same status keeps the old time. Conditions of other types in
    ``previous`` (e.g. written by another tool) are kept, after ours.

    Args:
        previous: the conditions now on the object.
        current: condition type -> result for the types this write sets.
        now: seconds since the epoch.
        generation: ``metadata.generation`` the conditions were computed for.
    """
    prev_by_type = {c.get("type"): c for c in previous or () if isinstance(c, Mapping)}
    out: list[dict[str, Any]] = []
    ordered = [t for t in CONDITION_TYPES if t in current] + [t for t in current if t not in CONDITION_TYPES]
    for type_ in ordered:
        result = current[type_]
        prev = prev_by_type.get(type_)
        since = prev.get("lastTransitionTime") if prev and prev.get("status") == result.status else None
        cond = Condition(
            type=type_,
            status=result.status,
            reason=result.reason,
            message=result.message,
            last_transition_time=since or rfc3339(now),
            observed_generation=generation,
        )
        out.append(cond.to_wire())
    out.extend(dict(c) for t, c in prev_by_type.items() if t not in current and isinstance(t, str))
    return out


def _signals(snapshot: SignalSnapshot | None) -> SignalStatus:
    if snapshot is None:
        return SignalStatus()
    return SignalStatus(
        observed_at=rfc3339(snapshot.observed_at),
        queue_depth=snapshot.queue_depth,
        running_requests=snapshot.running_requests,
        kv_cache_utilization=snapshot.kv_cache_utilization,
        preemption_rate=snapshot.preemption_rate,
        ttft_p95_seconds=snapshot.ttft_p95_s,
        itl_p95_seconds=snapshot.itl_p95_s,
    )


def build_status(
    *,
    decision: Decision,
    snapshot: SignalSnapshot | None,
    state: PoolState,
    applied_interactive: int,
    applied_batch: int,
    generation: int | None,
    previous: Mapping[str, Any] | None,
    now: float,
) -> dict[str, Any]:
    """Return the operator-owned part of ``status`` after a tick, in wire format.

    Args:
        decision: the policy's decision.
        snapshot: the newest signal snapshot (``None`` if none was read).
        state: the pools as observed before the decision was applied.
        applied_interactive / applied_batch: the replicas now set on the Deployments (equal to the
            decision unless applying it failed).
        generation: ``metadata.generation`` acted on.
        previous: the current ``status`` of the object (for ``lastTransitionTime``).
        now: seconds since the epoch.
    """
    status = LLMDeploymentStatus(
        observed_generation=generation,
        replicas=ReplicaStatus(
            desired=applied_interactive,
            ready=state.interactive_ready,
            headroom=decision.headroom_replicas,
            batch=applied_batch,
            batch_ready=state.batch_ready,
        ),
        signals=_signals(snapshot),
        last_decision=DecisionStatus(
            at=rfc3339(now),
            interactive_replicas=decision.interactive_replicas,
            batch_replicas=decision.batch_replicas,
            reasons=list(decision.reasons),
        ),
        conditions=[],
        policy_state=decision.memory.to_dict(),
    ).to_wire()
    status["conditions"] = merge_conditions(
        (previous or {}).get("conditions"),
        {
            "Ready": ready_condition(applied_interactive, state),
            "MetricsAvailable": decision.metrics_available,
            "AbleToScale": decision.able_to_scale,
            "ScalingLimited": decision.scaling_limited,
            "BatchWindowOpen": decision.batch_window_open,
            "PolicyStateReadable": decision.policy_state_readable,
        },
        now,
        generation,
    )
    return status


def invalid_status(
    message: str, generation: int | None, previous: Mapping[str, Any] | None, now: float
) -> dict[str, Any]:
    """Return the status of an object whose spec the operator cannot use: ``Ready=False``,
    reason ``InvalidSpec`` with the validation message; everything else is left as it was."""
    conditions = merge_conditions(
        (previous or {}).get("conditions"),
        {"Ready": ConditionResult("False", "InvalidSpec", message)},
        now,
        generation,
    )
    return {"observedGeneration": generation, "conditions": conditions}


def merge_patch(old: Any, new: Any) -> Any:
    """Return the JSON merge patch (RFC 7386) that turns ``old`` into ``new``; ``{}`` if equal.

    Dicts are diffed key by key (a key missing from ``new`` becomes ``None``, which deletes it);
    anything else, lists included, is replaced whole.
    """
    if not isinstance(old, Mapping) or not isinstance(new, Mapping):
        return copy.deepcopy(new)
    patch: dict[str, Any] = {}
    for key in old.keys() | new.keys():
        if key not in new:
            patch[key] = None
        elif key not in old:
            patch[key] = copy.deepcopy(new[key])
        elif old[key] != new[key]:
            patch[key] = merge_patch(old[key], new[key])
    return patch


def _without(status: Mapping[str, Any], paths: Iterable[tuple[str, ...]]) -> dict[str, Any]:
    out = copy.deepcopy(dict(status))
    for path in paths:
        node: Any = out
        for key in path[:-1]:
            node = node.get(key) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node.pop(path[-1], None)
    return out


def status_patch(
    previous: Mapping[str, Any] | None,
    desired: Mapping[str, Any],
    *,
    now: float,
    last_written_at: float | None,
    refresh_seconds: float,
) -> dict[str, Any] | None:
    """Return the merge patch of ``status`` to write now, or ``None`` when nothing should be written.

    Only :data:`OWNED_STATUS_KEYS` present in ``desired`` are compared; other status keys are left
    alone. A change of replicas, decision or conditions is written at once; a change of only the
    volatile parts (live signals, policy memory, decision time) waits until ``refresh_seconds``
    have passed since ``last_written_at`` (loop-clock seconds; ``None`` = never written).

    Args:
        previous: the object's current ``status``.
        desired: the operator-owned status it should have (e.g. from :func:`build_status`).
        now: the same clock as ``last_written_at``, in seconds.
    """
    old = {k: v for k, v in (previous or {}).items() if k in OWNED_STATUS_KEYS and k in desired}
    new = {k: v for k, v in desired.items() if k in OWNED_STATUS_KEYS}
    patch = merge_patch(old, new)
    if not patch:
        return None
    material = merge_patch(_without(old, _VOLATILE_STATUS_PATHS), _without(new, _VOLATILE_STATUS_PATHS))
    if not material and last_written_at is not None and now - last_written_at < refresh_seconds:
        return None
    return patch  # type: ignore[no-any-return]
