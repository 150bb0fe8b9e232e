"""The engine pod template of one pool: container command, GPUs, probes, drain and security.

Pure: a plain dict in the wire format, used by :mod:`llmscale.controller.manifests.children` inside each
Deployment. The numbers (probe cadence, drain time, the mock engine's user) are worked out in the
comments at their constants.
"""

from __future__ import annotations

import math
from typing import Any

from llmscale.api import LLMDeploymentSpec
from llmscale.controller.manifests.names import ANNOTATION_COLD_START, Pool, labels
from llmscale.signals.profiles import get_profile

__all__ = [
    "DRAIN_SCRIPT",
    "UnsupportedSpecError",
    "drain_command",
    "engine_command",
    "longest_generation_seconds",
    "pod_template",
    "progress_deadline_seconds",
    "termination_grace_seconds",
]

# Probe cadence. The startup probe covers the cold start with 50 % margin: a 180 s cold start
# gets 27 × 10 s = 270 s before the kubelet restarts the container; a slow disk or a cold page
# cache easily adds a third to a weight read, and a restart throws the whole cold start away.
_STARTUP_PERIOD_S = 10
_STARTUP_MARGIN = 1.5
_STARTUP_MIN_FAILURES = 6  # at least one minute, even for a "0 s" cold start
_READINESS_PERIOD_S = 5
_LIVENESS_PERIOD_S = 15
_LIVENESS_FAILURES = 4  # one minute of failed /health before a restart: a long prefill can stall it

# Drain. A pod being deleted (scale-down, rollout, eviction) leaves its Service's endpoints at once
# (a terminating endpoint is not "ready"), but kube-proxy and gateways learn it within seconds, and
# the pinned vLLM v0.11 aborts every request in flight on SIGTERM (its --shutdown-timeout came with
# vLLM PR #36666, 2026; SGLang drains on SIGTERM since sgl-project/sglang PR #1838). So the kubelet
# must not send SIGTERM while a generation runs: the preStop hook (DRAIN_SCRIPT) first waits
# _ENDPOINT_DELAY_S for the endpoint removal to reach every router, then polls the engine's own
# /metrics until its running + waiting requests are 0, and only then returns; SIGTERM follows,
# and a graceful engine (the mock, SGLang) has nothing left to finish.
#
# The grace period bounds all of it, so it is sized for the longest generation the spec allows:
# a request whose prompt and output fill the context limit, at the ITL SLO, after a first token at
# the TTFT SLO: ttft + context × itl. With the defaults (8,192 tokens, 2 s, 0.1 s) that is
# 15 + ceil(2 + 819.2) + 10 = 847 s; the sample's 2,048-token context gives 232 s. It is an upper
# bound, not a wait: an idle pod leaves after the endpoint delay. _GRACE_MAX_S caps it at one hour
# (a 32,768-token context at 0.1 s ITL, 3,294 s, still fits; a 131,072-token one is cut after an
# hour of a single stream): past that a scale-down would hold a GPU for hours for one answer.
# Cluster tools may cut it shorter: the Cluster Autoscaler evicts with at most
# --max-graceful-termination-sec (600 s by default), `kubectl drain` with its --timeout.
_ENDPOINT_DELAY_S = 15
_SHUTDOWN_MARGIN_S = 10  # SIGTERM to exit once idle: the engine's own shutdown
_GRACE_MIN_S = 60
_GRACE_MAX_S = 3600
# Rollout progress (Deployment spec.progressDeadlineSeconds): a rolling update (maxSurge 1,
# maxUnavailable 0) progresses each time a new pod turns available, one cold start after it was
# created; the startup probe allows 1.5 cold starts before a restart. With Kubernetes' default of
# 600 s, a 900 s cold start is reported as ProgressDeadlineExceeded although nothing is wrong. The
# deadline is 2 cold starts (one for scheduling, image pull and a slow weight read on top of the
# probe's 1.5) plus 60 s, never below Kubernetes' default: 1,860 s for a 900 s cold start, 600 s
# for the default 180 s one.
_PROGRESS_COLD_STARTS = 2
_PROGRESS_EXTRA_S = 60
_PROGRESS_MIN_S = 600

#: The preStop hook's program (``python3 -c DRAIN_SCRIPT URL NAMES DELAY``), standard library only,
#: so that it runs in the vLLM, SGLang and llmscale images alike: sleep ``DELAY`` seconds (endpoint
#: propagation), then read ``URL`` (the engine's ``/metrics``) every second until the samples of the
#: comma-separated metric ``NAMES`` (running and waiting requests of the engine's profile) sum to 0.
#: It returns at once when the engine does not answer (not started yet, or gone): nothing can be in
#: flight then.
DRAIN_SCRIPT = """\
import sys, time, urllib.request
url, names, delay = sys.argv[1], set(sys.argv[2].split(",")), float(sys.argv[3])
time.sleep(delay)
while True:
    try:
        text = urllib.request.urlopen(url, timeout=5).read().decode()
    except Exception:
        sys.exit(0)
    busy = 0.0
    for line in text.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in names:
            busy += float(line[line.index("}") + 1:].split()[0] if "}" in line else line.split()[1])
    if busy == 0:
        sys.exit(0)
    time.sleep(1)
"""


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


#: The engines' current entry points (``engine_command``).
VLLM_COMMAND = ("vllm", "serve")
SGLANG_COMMAND = ("sglang", "serve")


def _vllm_weights(name: str, args: list[str]) -> tuple[str, list[str]]:
    """``vllm serve``'s positional model: the last ``--model PATH`` (or ``--model=PATH``) of the
    spec's args, removed from them, else ``name``."""
    weights, rest, i = name, [], 0
    while i < len(args):
        arg = args[i]
        if arg == "--model" and i + 1 < len(args):
            weights, i = args[i + 1], i + 2
            continue
        if arg.startswith("--model="):
            weights = arg.removeprefix("--model=")
        else:
            rest.append(arg)
        i += 1
    return weights, rest


def engine_command(spec: LLMDeploymentSpec) -> tuple[list[str], list[str]]:
    """Return ``(command, args)`` of the engine container for ``spec.engine.type``.

    ``spec.model.name`` is both the weights to load and the served name. To load weights from a
    path, append ``--model PATH`` (vLLM, mock) or ``--model-path PATH`` (SGLang) to
    ``spec.engine.args``: SGLang and the mock parse arguments with argparse, where the last
    occurrence wins; for vLLM the last ``--model`` of the args becomes ``vllm serve``'s positional
    model and leaves the args (``vllm serve`` refuses a positional model beside ``--model``).

    - ``vllm``: ``vllm serve <model>`` (the entry point of every ``vllm/vllm-openai`` image since
      vLLM 0.5; ``python3 -m vllm.entrypoints.openai.api_server`` warns that it is deprecated) with
      ``--served-model-name``, ``--max-model-len``, ``--tensor-parallel-size``, ``--kv-cache-dtype``
      (``auto`` keeps the weight type, ``fp8``), ``--dtype`` or ``--quantization fp8``, ``--port``.
      Source: vLLM ``vllm/entrypoints/cli/serve.py`` and ``vllm/utils/argparse_utils.py`` (0.32).
    - ``sglang``: ``sglang serve`` (the ``sglang`` console script; ``python3 -m
      sglang.launch_server`` warns that ``sglang serve`` is the recommended entry point) with
      ``--model-path``, ``--served-model-name``, ``--context-length``, ``--tp-size``,
      ``--kv-cache-dtype`` (``auto``/``fp8_e4m3``), ``--host 0.0.0.0`` (SGLang binds 127.0.0.1 by
      default), ``--port`` and ``--enable-metrics`` (SGLang exports no Prometheus metrics without
      it). Source: SGLang 0.5.23 ``sglang/cli/serve.py``, ``sglang/srt/arg_groups/fields/``.
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
        weights, extra = _vllm_weights(model.name, extra)
        args = [
            weights,
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
        return list(VLLM_COMMAND), args + extra
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
        return list(SGLANG_COMMAND), args + extra
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


def longest_generation_seconds(spec: LLMDeploymentSpec) -> float:
    """Return the seconds of the longest generation the spec allows at its SLO: a first token at
    ``ttftP95Seconds``, then a whole context (``contextLimitTokens``, prompt included, as the
    engine's ``max_model_len`` bounds prompt + output) at ``itlP95Seconds`` a token.

    2 + 8,192 × 0.1 = 821.2 s with the defaults.
    """
    return spec.slo.ttft_p95_seconds + spec.model.context_limit_tokens * spec.slo.itl_p95_seconds


def termination_grace_seconds(spec: LLMDeploymentSpec) -> int:
    """Return ``terminationGracePeriodSeconds``: the endpoint delay, the longest generation and the
    engine's shutdown, ``15 + ceil(ttftP95 + contextLimitTokens × itlP95) + 10``, clamped to
    60–3,600 s (847 s with the defaults). See the comment at ``_ENDPOINT_DELAY_S`` for the numbers
    and the cap.
    """
    drain = _ENDPOINT_DELAY_S + math.ceil(longest_generation_seconds(spec)) + _SHUTDOWN_MARGIN_S
    return max(_GRACE_MIN_S, min(_GRACE_MAX_S, drain))


def progress_deadline_seconds(spec: LLMDeploymentSpec) -> int:
    """Return the Deployment's ``progressDeadlineSeconds``: ``max(600, ceil(2 × coldStartSeconds) +
    60)`` (1,860 s for a 900 s cold start), at least ``spec.engine.startupSeconds + 60`` when that is
    set. See the comment at ``_PROGRESS_COLD_STARTS``."""
    derived = math.ceil(_PROGRESS_COLD_STARTS * spec.headroom.cold_start_seconds) + _PROGRESS_EXTRA_S
    if spec.engine.startup_seconds is not None:  # a longer startup budget: a rollout may wait for it
        derived = max(derived, spec.engine.startup_seconds + _PROGRESS_EXTRA_S)
    return max(_PROGRESS_MIN_S, derived)


def drain_command(spec: LLMDeploymentSpec) -> list[str]:
    """Return the preStop command: :data:`DRAIN_SCRIPT` run by ``python3`` against the engine's
    ``http://127.0.0.1:<port>/metrics``, waiting for the running and waiting requests of the
    engine's metric profile (``vllm:num_requests_running``/``_waiting``, or SGLang's
    ``sglang:num_running_reqs``/``num_queue_reqs``) to reach 0 after a 15 s endpoint delay."""
    profile = get_profile(spec.engine.profile())
    url = f"http://127.0.0.1:{spec.engine.port}/metrics"
    return ["python3", "-c", DRAIN_SCRIPT, url, f"{profile.running},{profile.waiting}", str(_ENDPOINT_DELAY_S)]


def _startup_failure_threshold(cold_start_s: float, budget_s: int | None = None) -> int:
    """The startup probe's failures: ``spec.engine.startupSeconds`` when set, else 1.5 cold starts."""
    if budget_s is not None:
        return max(_STARTUP_MIN_FAILURES, math.ceil(budget_s / _STARTUP_PERIOD_S))
    return max(_STARTUP_MIN_FAILURES, math.ceil(cold_start_s * _STARTUP_MARGIN / _STARTUP_PERIOD_S))


def pod_template(name: str, spec: LLMDeploymentSpec, pool: Pool, priority_class: str | None = None) -> dict[str, Any]:
    """Return the pod template of one pool's Deployment.

    ``priority_class`` is the pool's ``priorityClassName`` (none when ``None``): the interactive
    pool's class is above the batch pool's, so the scheduler preempts batch pods for interactive
    ones when GPUs run out (docs/operator.md, "Interactive first").

    One container ``engine`` (see :func:`engine_command`) requesting
    ``gpusPerReplica`` × ``gpuResourceName`` (requests equal limits, as extended resources
    require); a startup probe on ``GET /health`` with ``failureThreshold × 10 s ≥ 1.5 × cold
    start``, readiness every 5 s and liveness every 15 s on the same path (vLLM and SGLang both
    answer ``/health`` once the model is loaded); a preStop hook that waits until the engine has no
    request left (:func:`drain_command`) and a grace period sized by
    :func:`termination_grace_seconds`; the pool's PriorityClass when one is given;
    annotations for the KWOK cold start and Prometheus scraping, and the ones that keep node
    autoscalers from evicting a pod in its cold start (:mod:`llmscale.controller.disruption`).

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
        "startupProbe": probe(_STARTUP_PERIOD_S, _startup_failure_threshold(
            spec.headroom.cold_start_seconds, spec.engine.startup_seconds), 5),
        "readinessProbe": probe(_READINESS_PERIOD_S, 3, 3),
        "livenessProbe": probe(_LIVENESS_PERIOD_S, _LIVENESS_FAILURES, 5),
        "lifecycle": {"preStop": {"exec": {"command": drain_command(spec)}}},
    }
    pod_spec: dict[str, Any] = {
        "containers": [container],
        "terminationGracePeriodSeconds": termination_grace_seconds(spec),
    }
    if priority_class:
        pod_spec["priorityClassName"] = priority_class
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
                # Kept from node autoscalers through the cold start; removed once Ready
                # (llmscale.controller.disruption).
                "karpenter.sh/do-not-disrupt": "true",
                "cluster-autoscaler.kubernetes.io/safe-to-evict": "false",
                "prometheus.io/scrape": "true",
                "prometheus.io/port": str(port),
                "prometheus.io/path": "/metrics",
            },
        },
        "spec": pod_spec,
    }
