"""The engine pod template of one pool: container command, GPUs, probes, drain and security.

Pure: a plain dict in the wire format, used by :mod:`llmscale.controller.children` inside each
Deployment. The numbers (probe cadence, drain time, the mock engine's user) are worked out in the
comments at their constants.
"""

from __future__ import annotations

import math
from typing import Any

from llmscale.api import LLMDeploymentSpec
from llmscale.controller.names import ANNOTATION_COLD_START, Pool, labels

__all__ = ["UnsupportedSpecError", "engine_command", "pod_template", "termination_grace_seconds"]

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
