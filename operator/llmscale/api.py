"""The ``LLMDeployment`` API (``llmscale.dev/v1alpha1``): spec and status as pydantic v2 models.

These models are the single source of truth: the CRD in ``crds/`` is generated from them by
``llmscale crd`` (see :mod:`llmscale.crd`), the operator parses objects with them, and the simulator
reads the same manifest a user applies.

Field names in Python are snake_case; on the wire (YAML, the Kubernetes API) they are camelCase
aliases. Every field carries a description (it becomes ``kubectl explain`` text), a unit in its name
or description, and a default where one is sensible so that a minimal spec applies.

Pure module: no Kubernetes, Kopf or Prometheus imports.
"""

from __future__ import annotations

import importlib.resources
import re
from datetime import time as dtime
from functools import lru_cache
from typing import Any, Literal

from pydantic import AliasGenerator, BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.alias_generators import to_camel

__all__ = [
    "API_VERSION",
    "DAYS_OF_WEEK",
    "GPU_PRESET_NAMES",
    "GROUP",
    "KIND",
    "MODEL_PRESET_NAMES",
    "MODES",
    "NAME_MAX_LENGTH",
    "NAME_PATTERN",
    "NAME_RULE",
    "PLURAL",
    "SHORT_NAME",
    "VERSION",
    "AcceleratorSpec",
    "BatchJobStatus",
    "BatchSpec",
    "BatchStatus",
    "CalibrationSpec",
    "Condition",
    "CostSpec",
    "DecisionStatus",
    "EndpointPickerRef",
    "EngineSpec",
    "HeadroomSpec",
    "LLMDeployment",
    "LLMDeploymentSpec",
    "LLMDeploymentStatus",
    "ModelArchitecture",
    "ModelSpec",
    "PoolLedger",
    "PoolReport",
    "PoolReports",
    "ReplicaStatus",
    "ReplicasSpec",
    "ResourcesSpec",
    "RoutingSpec",
    "ScaleDownBehavior",
    "ScaleTargetRef",
    "ScalingBehavior",
    "ScalingSpec",
    "ScalingTargets",
    "ScheduledMinimum",
    "SignalStatus",
    "SloSpec",
    "TroughWindow",
    "UsageLedger",
    "WakeSpec",
    "iana_timezones",
    "name_problem",
]

GROUP = "llmscale.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "LLMDeployment"
PLURAL = "llmdeployments"
SINGULAR = "llmdeployment"
SHORT_NAME = "llmdep"

#: Model presets known to :mod:`llmscale.model` (a test checks the two lists agree).
MODEL_PRESET_NAMES: tuple[str, ...] = (
    "llama-3.1-8b",
    "llama-3.1-70b",
    "mistral-7b",
    "qwen2.5-7b",
    "qwen2.5-72b",
    "mixtral-8x7b",
)
#: GPU presets known to :mod:`llmscale.model` (a test checks the two lists agree).
GPU_PRESET_NAMES: tuple[str, ...] = ("a100-80gb", "h100-sxm", "h200", "l40s", "b200", "l4", "a10", "a100-40gb",
                                     "h100-pcie", "h100-nvl", "mi300x")

DAYS_OF_WEEK: tuple[str, ...] = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")

#: ``spec.mode`` values: ``Active`` writes the replicas it decides; ``Advisory`` computes and reports
#: them (status, Events, metrics) and writes nothing to the workload; ``Paused`` holds and reports.
MODES: tuple[str, ...] = ("Active", "Advisory", "Paused")

_HHMM = r"^([01][0-9]|2[0-3]):[0-5][0-9]$"
# DNS-1123 label: what a Kubernetes object name of a Deployment/Service must be.
_DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
# DNS-1123 subdomain: the name of most Kubernetes objects (a Deployment, a LeaderWorkerSet).
_DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
# apiVersion: "v1" (the core group) or "<group>/<version>" (apps/v1, leaderworkerset.x-k8s.io/v1).
_API_VERSION = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?v[0-9]+((alpha|beta)[0-9]+)?$"
_KIND = r"^[A-Z][A-Za-z0-9]*$"


#: ``metadata.name`` of an LLMDeployment: a DNS-1035 label (the Service ``<name>`` needs one: lower
#: case letters, digits and ``-``, starting with a letter, ending with a letter or digit) ...
NAME_PATTERN = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
#: ... of at most 57 characters, so that ``<name>-batch`` (the batch pool's Deployment and batch
#: Service, DESIGN.md) is a DNS-1035 label of at most 63 too.
NAME_MAX_LENGTH = 63 - len("-batch")
#: The CEL rule the CRD puts on ``metadata.name`` (CEL rules at the schema's root may read
#: ``self.metadata.name``: Kubernetes docs, "Validation rules"). A name the Kubernetes API accepts
#: for an LLMDeployment (a DNS-1123 subdomain, up to 253 characters, ``70b-chat``) would otherwise
#: fail only later, at the Service.
NAME_RULE: dict[str, str] = {
    "rule": f"self.metadata.name.matches('{NAME_PATTERN}') && size(self.metadata.name) <= {NAME_MAX_LENGTH}",
    "message": f"metadata.name must be a DNS-1035 label of at most {NAME_MAX_LENGTH} characters (lower-case "
    "letters, digits and '-', starting with a letter and ending with a letter or digit): it names the "
    "Service <name> and the Deployment and Service <name>-batch",
    "fieldPath": ".metadata.name",
    "reason": "FieldValueInvalid",
}


def name_problem(name: str) -> str | None:
    """Return why ``name`` cannot name an LLMDeployment (:data:`NAME_RULE`'s message), or ``None``."""
    if len(name) <= NAME_MAX_LENGTH and re.match(NAME_PATTERN, name):
        return None
    return NAME_RULE["message"]


@lru_cache(maxsize=1)
def iana_timezones() -> tuple[str, ...]:
    """Return the IANA zone names shipped by the pinned ``tzdata`` package, sorted.

    The list comes from the package (not the host's ``/usr/share/zoneinfo``) so that the generated
    CRD is the same on every machine; ``tzdata`` is pinned in ``pyproject.toml``.
    """
    text = importlib.resources.files("tzdata").joinpath("zones").read_text(encoding="utf-8")
    return tuple(sorted(set(text.split())))


class _Model(BaseModel):
    """Base: camelCase on the wire, snake_case in Python, unknown fields rejected."""

    model_config = ConfigDict(
        alias_generator=AliasGenerator(alias=to_camel),
        populate_by_name=True,
        extra="forbid",
        frozen=True,
        use_attribute_docstrings=True,
    )

    def to_wire(self) -> dict[str, Any]:
        """Return the object as the Kubernetes API spells it (camelCase, no unset optionals)."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


# --------------------------------------------------------------------------------------------
# spec.model
# --------------------------------------------------------------------------------------------


class ModelArchitecture(_Model):
    """An explicit transformer architecture, with the field names of a Hugging Face ``config.json``
    where one exists. Used instead of ``spec.model.preset`` for models llmscale has no preset for."""

    num_hidden_layers: int = Field(ge=1, le=1024)
    """Transformer layers (``num_hidden_layers`` in config.json)."""
    num_attention_heads: int = Field(ge=1, le=1024)
    """Query heads per layer (``num_attention_heads``)."""
    num_key_value_heads: int = Field(ge=1, le=1024)
    """KV heads per layer (``num_key_value_heads``; equal to the attention heads without GQA)."""
    head_dim: int = Field(ge=1, le=4096)
    """Dimension of one attention head (``head_dim``, or hidden_size / num_attention_heads)."""
    hidden_size: int | None = Field(default=None, ge=1)
    """Model width (``hidden_size``); informative."""
    parameters: int = Field(ge=1_000_000)
    """Total parameter count (weights read per decode step for a dense model)."""
    active_parameters: int | None = Field(default=None, ge=1_000_000)
    """Parameters active per token for a mixture-of-experts model (FLOPs); defaults to ``parameters``."""


class CalibrationSpec(_Model):
    """The performance model's efficiencies as measured on a live engine (``llmscale calibrate --url``
    writes this block). Every figure that comes from the roofline model — the capacity note, the
    load signal's capacity, the simulator — then uses them instead of the planning defaults
    (bandwidth 0.8, compute 0.5, no overheads). docs/calibrate.md tells how they are fitted."""

    bandwidth_efficiency: float = Field(gt=0, le=1)
    """Achieved share of the accelerator's peak memory bandwidth in a decode step, 0–1."""
    compute_efficiency: float = Field(gt=0, le=1)
    """Achieved share of the accelerator's dense peak FLOP/s in a compute-bound step, 0–1."""
    step_overhead_seconds: float = Field(default=0.0, ge=0, le=10)
    """Fixed time every engine step costs beyond its bytes and FLOPs (scheduling, kernel launches),
    seconds."""
    sequence_overhead_seconds: float = Field(default=0.0, ge=0, le=1)
    """Time each decoding sequence adds to a step beyond its bytes and FLOPs (sampling, detokenising
    and streaming its token), seconds."""
    attention_efficiency: float | None = Field(default=None, gt=0, le=1)
    """Achieved share of peak FLOP/s in attention, 0–1; unset: attention FLOPs not modelled (they
    matter for small models and long prompts)."""
    source: str | None = Field(default=None, max_length=1024)
    """Where and when it was measured (the engine URL, its image or version, the date); informative."""


class ModelSpec(_Model):
    """The model the replicas serve and how its weights and KV cache are stored."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "has(self.preset) != has(self.architecture)",
                    "message": "spec.model: set exactly one of preset and architecture",
                }
            ]
        }
    )

    name: str = Field(min_length=1, max_length=253)
    """Served model name (the OpenAI ``model`` field clients send, vLLM's ``--served-model-name``)."""
    preset: Literal[MODEL_PRESET_NAMES] | None = None  # type: ignore[valid-type]
    """Architecture preset from llmscale's model table (see ``llmscale plan --help``)."""
    architecture: ModelArchitecture | None = None
    """Explicit architecture when no preset fits."""
    weight_dtype: Literal["bf16", "fp16", "fp8"] = "bf16"
    """Storage type of the weights: 2 bytes per parameter for bf16/fp16, 1 for fp8."""
    kv_cache_dtype: Literal["bf16", "fp16", "fp8"] = "bf16"
    """Storage type of the KV cache (vLLM ``--kv-cache-dtype``): 2 or 1 bytes per element."""
    context_limit_tokens: int = Field(default=8192, ge=256, le=2_097_152)
    """Longest prompt + output a request may have, in tokens (vLLM ``--max-model-len``)."""
    calibration: CalibrationSpec | None = None
    """Efficiencies measured on a live engine (``llmscale calibrate``); unset: the planning defaults."""

    @model_validator(mode="after")
    def _one_of_preset_or_architecture(self) -> ModelSpec:
        if (self.preset is None) == (self.architecture is None):
            raise ValueError("spec.model: set exactly one of preset and architecture")
        return self


# --------------------------------------------------------------------------------------------
# spec.engine, spec.resources, spec.replicas, spec.slo
# --------------------------------------------------------------------------------------------


class EngineSpec(_Model):
    """The inference engine each replica runs, and how llmscale reads its metrics."""

    type: Literal["vllm", "sglang", "mock"] = "vllm"
    """Engine: ``vllm``, ``sglang``, or ``mock`` (llmscale's mock GPU engine, which speaks vLLM)."""
    image: str = Field(default="vllm/vllm-openai:v0.32.0", min_length=1)
    """Container image of the engine."""
    args: list[str] = Field(default_factory=list, max_length=128)
    """Extra command-line arguments appended to the engine's own."""
    port: int = Field(default=8000, ge=1, le=65535)
    """Container port of the OpenAI-compatible HTTP server and ``/metrics``."""
    metrics_profile: Literal["vllm", "vllm-legacy", "sglang"] | None = None
    """Metric names to query: ``vllm`` (V1 names), ``vllm-legacy`` (pre-V1 names) or ``sglang``.
    Defaults to the engine's own (``mock`` speaks ``vllm``)."""
    startup_seconds: int | None = Field(default=None, ge=60, le=86_400)
    """Longest a replica may take from container start to its first healthy ``/health`` before the
    kubelet restarts it (the startup probe's budget), seconds. Default: 1.5 × ``spec.headroom.coldStartSeconds``.
    Raise it when the first start downloads the weights (141 GB for a 70B model in bf16) and a
    restart would begin the download again."""

    def profile(self) -> str:
        """Return the metric profile in force: the explicit one, else the engine's own."""
        if self.metrics_profile is not None:
            return self.metrics_profile
        return "sglang" if self.type == "sglang" else "vllm"


class AcceleratorSpec(_Model):
    """An accelerator that is not a preset, as the roofline model sees it (per device). Figures are
    the datasheet's peaks; what an engine achieves of them is ``spec.model.calibration``'s job. A CPU
    is described the same way (its RAM share, its memory bandwidth, its FLOP/s)."""

    name: str = Field(min_length=1, max_length=63)
    """A name for reports, e.g. ``l4`` or ``cpu-2core``."""
    memory_bytes: int = Field(ge=1 << 20)
    """Device memory, bytes (for a CPU: the memory given to the engine)."""
    memory_bandwidth_bytes_per_second: float = Field(gt=0)
    """Peak memory bandwidth, bytes/s."""
    dense_flops: float = Field(gt=0)
    """Dense 16-bit peak, FLOP/s (no 2:4 sparsity)."""
    fp8_dense_flops: float | None = Field(default=None, gt=0)
    """Dense FP8 peak, FLOP/s; unset: ``denseFlops`` (no FP8 units)."""


class ResourcesSpec(_Model):
    """Accelerators of one replica."""

    gpus_per_replica: int = Field(default=1, ge=1, le=64)
    """GPUs per replica (tensor parallel size); requested as ``nvidia.com/gpu``."""
    gpu_type: Literal[GPU_PRESET_NAMES] = "h100-sxm"  # type: ignore[valid-type]
    """GPU preset (memory, bandwidth, FLOP/s) used by the performance model."""
    accelerator: AcceleratorSpec | None = None
    """An accelerator that is not a preset; when set it replaces ``gpuType`` in the performance model."""
    gpu_resource_name: str = Field(default="nvidia.com/gpu", min_length=1)
    """Extended resource name the pods request (the device plugin's)."""


class ReplicasSpec(_Model):
    """Bounds of the interactive pool."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "self.min <= self.max",
                    "message": "spec.replicas.min must be less than or equal to spec.replicas.max",
                },
                {
                    "rule": "!has(self.schedule) || self.schedule.all(s, s.min <= self.max)",
                    "message": "spec.replicas.schedule[].min must be less than or equal to spec.replicas.max",
                },
            ]
        }
    )

    min: int = Field(default=1, ge=0, le=10_000)
    """Fewest interactive replicas, headroom included."""
    max: int = Field(default=8, ge=1, le=10_000)
    """Most interactive replicas, headroom included."""
    schedule: list[ScheduledMinimum] = Field(default_factory=list, max_length=32)
    """Calendar floors: at least ``min`` interactive replicas while a window is open (the same daily
    windows as ``spec.batch.windows``), asked for one lead time (the measured cold start) before it
    opens so that they are Ready when it does. Scheduled pre-warming for a known morning ramp."""

    @model_validator(mode="after")
    def _min_le_max(self) -> ReplicasSpec:
        if self.min > self.max:
            raise ValueError("spec.replicas.min must be less than or equal to spec.replicas.max")
        for i, floor in enumerate(self.schedule):
            if floor.min > self.max:
                raise ValueError(
                    f"spec.replicas.schedule[{i}].min ({floor.min}) must be less than or equal to spec.replicas.max"
                )
        return self


class SloSpec(_Model):
    """The latency promise: what goodput counts as delivered."""

    ttft_p95_seconds: float = Field(default=2.0, gt=0, le=600)
    """Time to first token at p95, in seconds."""
    itl_p95_seconds: float = Field(default=0.1, gt=0, le=60)
    """Inter-token latency at p95, in seconds."""


# --------------------------------------------------------------------------------------------
# spec.scaling
# --------------------------------------------------------------------------------------------


class ScalingTargets(_Model):
    """Per-replica targets of the three leading signals. Each signal proposes
    ``ceil(ready × observed / target)`` replicas (the HPA rule); the largest proposal wins."""

    queue_depth_per_replica: float = Field(default=3.0, gt=0, le=10_000)
    """Waiting requests (``vllm:num_requests_waiting``) per ready replica."""
    kv_cache_utilization: float | None = Field(default=None, gt=0, le=1)
    """Fraction of the paged KV cache in use (``vllm:kv_cache_usage_perc``), 0–1. Unset: 0.9 (the cache
    guards its own limit) while the load signal sizes the pool from the arrival rate and the live
    mix; without an arrival rate, the KV use of one replica at the SLO's capacity from the
    performance model (0.098 for Llama-3.1-70B bf16 on 4 × H100 at ITL 100 ms — see docs/policy.md)."""
    preemptions_per_second_per_replica: float = Field(default=0.05, gt=0, le=1000)
    """Preemptions per second per ready replica (``rate(vllm:num_preemptions_total[1m])``)."""


class ScalingBehavior(_Model):
    """How fast the pool may change in one direction (the HPA's ``behavior`` in brief)."""

    # 120 s for scale-up (scale-down overrides it below): a rise must last 8 ticks before the pool
    # pays a cold start for it. On the benchmark (Llama-3.1-70B on 4 × H100, 300 s cold start, Azure
    # trace day, docs/policy.md) single long prompts move a replica's KV use by a third between
    # scrapes; with no window llmscale made 190 scale events a day for 552 GPU-h, with 120 s 16 events
    # for 482 GPU-h, both meeting the SLO in 100 % of minutes. The warm headroom covers the wait.
    stabilization_window_seconds: int = Field(default=120, ge=0, le=86_400)
    """The policy acts on the most conservative recommendation of this many past seconds
    (the highest one when scaling down, the lowest one when scaling up). Scale-up default 120 s:
    a rise must last two minutes before the pool pays a minutes-long cold start for it."""
    max_replicas_per_period: int = Field(default=4, ge=1, le=10_000)
    """Largest change in replicas allowed within ``periodSeconds``."""
    period_seconds: int = Field(default=60, ge=1, le=3600)
    """Length of the rate-limit period, in seconds."""


class ScaleDownBehavior(ScalingBehavior):
    """How fast the pool may shrink. Same fields as scale-up, gentler defaults of its own, so that
    ``scaleDown: {periodSeconds: 30}`` keeps the 300 s stabilisation instead of dropping it to 0."""

    # 300 s is the HPA's default scale-down stabilisation (kube-controller-manager
    # --horizontal-pod-autoscaler-downscale-stabilization); one replica a minute drains gently.
    stabilization_window_seconds: int = Field(default=300, ge=0, le=86_400)
    """The policy acts on the highest recommendation of this many past seconds, so a brief dip in
    demand does not remove a replica that takes minutes to bring back."""
    max_replicas_per_period: int = Field(default=1, ge=1, le=10_000)
    """Largest decrease in replicas allowed within ``periodSeconds``."""


class WakeSpec(_Model):
    """A demand signal that exists while the pool has no replica, so that a pool scaled to zero
    wakes up: a gateway's or router's count of requests waiting for the pool, or their rate
    (docs/policy.md, "Scale to zero and back")."""

    query: str = Field(min_length=1, max_length=4096)
    """PromQL instant query whose value (summed over its series) is the demand in front of the pool,
    e.g. ``sum(gateway_pending_requests{namespace="$namespace", service="$name"})``; ``$namespace`` and
    ``$name`` are replaced by the LLMDeployment's own. Every selector must carry
    ``namespace="$namespace"`` (the query reads only its own namespace; otherwise it is refused and
    not sent, docs/security.md). No series reads as unknown (the pool then stays where it is): end
    the query with ``or vector(0)`` if no series means no demand."""
    threshold: float = Field(default=0.0, ge=0, le=1_000_000)
    """At zero replicas the pool wakes (to one replica of demand plus the warm headroom) when the
    query's value is above this; at or below it, with the engines idle, the pool may scale to zero
    once the scale-down stabilisation window has passed."""


class ScalingSpec(_Model):
    """Targets, behaviour and cadence of the scaling policy."""

    targets: ScalingTargets = Field(default_factory=ScalingTargets)
    """Per-replica targets of the leading signals."""
    scale_up: ScalingBehavior = Field(default_factory=ScalingBehavior)
    """Scale-up behaviour: 120 s stabilisation, up to 4 replicas a minute by default."""
    scale_down: ScaleDownBehavior = Field(default_factory=ScaleDownBehavior)
    """Scale-down behaviour: 300 s stabilisation, 1 replica a minute by default."""
    tolerance: float = Field(default=0.1, ge=0, lt=1)
    """Ratio band around a target within which a signal proposes no change (the HPA's 0.1)."""
    tick_seconds: float = Field(default=15.0, ge=1, le=3600)
    """How often the operator reads signals and decides, in seconds."""
    metrics_max_age_seconds: float = Field(default=90.0, ge=1, le=86_400)
    """Signals older than this are stale: the policy holds replicas rather than read them as zero."""
    wake: WakeSpec | None = None
    """The demand signal that wakes a pool at zero replicas; required with ``spec.replicas.min: 0``
    (with no replica, no engine reports, and nothing else could wake it)."""


class HeadroomSpec(_Model):
    """Warm replicas kept ready above demand, because a cold start takes minutes."""

    # 0 by default: the load signal sizes each minute for the SLO at the live rate and mix (its
    # margin is the minute's own fluctuation), and the forecast one lead time ahead is the headroom
    # for growth. On the four benchmark workloads (docs/policy.md, "Choosing defaults") a standing
    # spare replica cost 7-39 % more GPU-hours to lift minutes meeting the SLO from 99.1-99.7 % to 100 %.
    replicas: int = Field(default=0, ge=0, le=1000)
    """Ready replicas always kept above demand: a floor under the headroom the forecast sizes (the
    replicas the arrival rate one lead time ahead needs beyond today's). 0 by default; set 1 when the
    engines export no request counters (the leading signals alone then size the pool) or for margin."""
    cold_start_seconds: float = Field(default=180.0, ge=0, le=7200)
    """Expected time from pod creation to Ready (weights read, kernels compiled, CUDA graphs): the
    lead time until pods have been measured (then the P90 of their measured cold starts)."""
    # Off by default: the seasonal forecast (a day and a week ago) carries the daily shape; the trend
    # of the last minutes follows bursts more than ramps (per-minute means of a 60 s rate window).
    growth_factor: float = Field(default=0.0, ge=0, le=10)
    """Trend headroom: the forecast also adds this multiple of the arrival rate's growth projected
    over one lead time (least-squares slope of the per-minute finished-request rate over the last
    lead time; without a request rate, of the KV-cache need). 1 covers a steady ramp; 0 (default)
    turns it off: the seasonal forecast covers a daily ramp."""
    warm_nodes: bool = False
    """Keep GPU nodes for the warm headroom too: low-priority placeholder pods shaped like one replica
    (its GPU and CPU/memory requests, node selector, tolerations, affinity and topology spread) hold
    room for as many more replicas as the headroom the policy computes; a real replica preempts one
    the instant it needs the node, and the placeholder goes Pending, which is what makes a cluster
    autoscaler add the next node ahead of need. Off by default: placeholders keep GPUs reserved
    (docs/operator.md, "Node headroom"). Only for pods llmscale creates (not with scaleTargetRef)."""


# --------------------------------------------------------------------------------------------
# spec.scaleTargetRef
# --------------------------------------------------------------------------------------------


class ScaleTargetRef(_Model):
    """An existing workload llmscale scales through its ``/scale`` subresource instead of creating
    one: a Deployment, a StatefulSet, a LeaderWorkerSet, or any resource with that subresource, in
    the LLMDeployment's namespace. llmscale then writes only its replica count (server-side apply
    on ``/scale``), reads its pods by the selector ``/scale`` reports, owns nothing and deletes
    nothing."""

    api_version: str = Field(pattern=_API_VERSION, min_length=2, max_length=253)
    """API group and version of the workload, e.g. ``apps/v1`` or ``leaderworkerset.x-k8s.io/v1``."""
    kind: str = Field(pattern=_KIND, min_length=1, max_length=63)
    """Kind of the workload, e.g. ``Deployment``, ``StatefulSet``, ``LeaderWorkerSet``."""
    name: str = Field(pattern=_DNS_SUBDOMAIN, min_length=1, max_length=253)
    """Name of the workload (same namespace as the LLMDeployment)."""

    def __str__(self) -> str:
        return f"{self.api_version} {self.kind} {self.name}"


# --------------------------------------------------------------------------------------------
# spec.batch, spec.cost
# --------------------------------------------------------------------------------------------


class TroughWindow(_Model):
    """A daily window of low interactive traffic in which the batch pool runs.
    ``end`` before ``start`` means the window crosses midnight (e.g. 22:00–06:00)."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {"rule": "self.start != self.end", "message": "start and end of a trough window must differ"}
            ]
        }
    )

    # max_length bounds the cost the API server estimates for the CEL rule above (k8s rejects CRDs
    # whose rules have unbounded cost; an unbounded string is costed at the 3 MiB request limit).
    start: str = Field(pattern=_HHMM, min_length=5, max_length=5)
    """Local opening time, ``HH:MM`` (24-hour)."""
    end: str = Field(pattern=_HHMM, min_length=5, max_length=5)
    """Local closing time, ``HH:MM`` (24-hour); earlier than ``start`` to cross midnight."""
    timezone: Literal[iana_timezones()] = "UTC"  # type: ignore[valid-type]
    """IANA time zone of ``start`` and ``end`` (e.g. ``Europe/London``); DST is followed."""
    days: list[Literal[DAYS_OF_WEEK]] = Field(  # type: ignore[valid-type]
        default_factory=lambda: list(DAYS_OF_WEEK), min_length=1, max_length=7
    )
    """Days on which the window opens (the day of ``start``; a midnight-crossing window runs on)."""

    @field_validator("start", "end")
    @classmethod
    def _well_formed(cls, value: str) -> str:
        if not re.fullmatch(_HHMM, value):
            raise ValueError(f"{value!r} is not HH:MM")
        return value

    @model_validator(mode="after")
    def _not_empty(self) -> TroughWindow:
        if self.start == self.end:
            raise ValueError("start and end of a trough window must differ")
        return self

    def start_time(self) -> dtime:
        """Return ``start`` as a :class:`datetime.time`."""
        hh, mm = self.start.split(":")
        return dtime(int(hh), int(mm))

    def end_time(self) -> dtime:
        """Return ``end`` as a :class:`datetime.time`."""
        hh, mm = self.end.split(":")
        return dtime(int(hh), int(mm))


class ScheduledMinimum(TroughWindow):
    """A calendar floor of the interactive pool: a daily window (the rules of a trough window: local
    ``start``/``end`` in ``timezone`` on ``days``, crossing midnight when ``end`` is earlier, DST
    followed) in which the pool keeps at least ``min`` replicas."""

    min: int = Field(ge=0, le=10_000)
    """Fewest interactive replicas while the window is open (headroom included)."""


class BatchSpec(_Model):
    """A batch pool (Deployment ``<name>-batch``, Service ``<name>-batch``) sized from the backlog of
    batch Jobs labelled ``llmscale.dev/deployment: <name>``, which llmscale releases inside trough
    windows, earlier onto idle GPUs, and before a window when a deadline needs it (docs/batch.md)."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "self.minReplicas <= (has(self.maxReplicas) ? self.maxReplicas : self.replicas)",
                    "message": "spec.batch.minReplicas must be less than or equal to spec.batch.maxReplicas "
                    "(spec.batch.replicas when maxReplicas is unset)",
                }
            ]
        }
    )

    windows: list[TroughWindow] = Field(min_length=1, max_length=32)
    """Trough windows in which waiting Jobs are released; outside them only Jobs whose deadline
    cannot wait, or that run on idle GPUs, keep batch replicas."""
    replicas: int = Field(default=1, ge=0, le=10_000)
    """Most batch replicas when ``maxReplicas`` is unset. Kept for specs written before Jobs, when it
    was the fixed size of the pool inside a window; the pool is now sized from the backlog (0 when
    no Job is outstanding, even inside a window)."""
    min_replicas: int = Field(default=0, ge=0, le=10_000)
    """Fewest batch replicas while a Job is released (a released Job always gets at least one
    unless the maximum is 0); 0 with no Job outstanding, whatever this says."""
    max_replicas: int | None = Field(default=None, ge=0, le=10_000)
    """Most batch replicas; unset: ``replicas``. The pool is the backlog's tokens ÷ one replica's
    throughput ÷ the time left, within ``minReplicas``–``maxReplicas`` and the GPUs free."""
    completion_window_seconds: int = Field(default=86_400, ge=60, le=31 * 86_400)
    """Deadline of a Job without the ``llmscale.dev/deadline`` annotation, in seconds after its
    creation: 86400 (24 h) is the only completion window the OpenAI Batch API offers."""
    release_on_idle_capacity: bool = True
    """Release Jobs before a window onto GPUs the interactive pool leaves idle: only while its
    signals are fresh, its latency within ``spec.slo``, none of its pods unschedulable, and GPUs
    stay free for a warm headroom more of interactive replicas. Batch gives them back first. Needs
    the GPUs free, which the operator reads from the nodes (cluster-wide list of nodes and pods:
    Helm value operator.readNodes, off by default); without them only windows and deadlines release
    Jobs."""
    scale_target_ref: ScaleTargetRef | None = None
    """The existing workload of the batch pool, scaled through ``/scale`` (required with
    ``spec.scaleTargetRef``, which makes llmscale create no workload; not allowed without it)."""

    @model_validator(mode="after")
    def _min_le_max(self) -> BatchSpec:
        if self.min_replicas > self.most_replicas():
            raise ValueError(
                "spec.batch.minReplicas must be less than or equal to spec.batch.maxReplicas "
                "(spec.batch.replicas when maxReplicas is unset)"
            )
        return self

    def most_replicas(self) -> int:
        """Return the upper bound of the batch pool: ``maxReplicas``, else ``replicas``."""
        return self.replicas if self.max_replicas is None else self.max_replicas


ReplicasSpec.model_rebuild()


class CostSpec(_Model):
    """Prices used for cost per million tokens in status, plans and reports."""

    gpu_hour_usd: float = Field(default=2.5, ge=0, le=1000)
    """Price of one GPU for one hour, in USD."""


class EndpointPickerRef(_Model):
    """The Gateway API Inference Extension's endpoint picker (EPP) an InferencePool hands each
    request to: a Service in the LLMDeployment's namespace, deployed with the extension's own
    ``inferencepool`` chart."""

    service: str | None = Field(default=None, pattern=_DNS_LABEL, min_length=1, max_length=63)
    """Name of the endpoint picker's Service. Default: ``<name>-epp``, the name cut to 40
    characters (the extension's chart's name for a release named after the LLMDeployment)."""
    port: int = Field(default=9002, ge=1, le=65535)
    """Its gRPC (ext-proc) port: 9002 in the extension's chart."""


class RoutingSpec(_Model):
    """How requests reach the interactive pool's replicas (docs/operator.md, "Routing by prefix")."""

    inference_pool: Literal["Auto", "Disabled"] = "Auto"
    """``Auto`` (default): where the API server serves ``InferencePool``
    (``inference.networking.k8s.io/v1``, the Gateway API Inference Extension), apply one named
    after the LLMDeployment over the interactive pool's pods, so that the extension's endpoint
    picker routes each request by cached prefix and load; elsewhere nothing. An InferencePool of
    that name that llmscale does not own is left alone. ``Disabled``: apply none (and delete the
    one llmscale applied)."""
    endpoint_picker: EndpointPickerRef = Field(default_factory=EndpointPickerRef)
    """The endpoint picker the InferencePool names."""


# --------------------------------------------------------------------------------------------
# spec
# --------------------------------------------------------------------------------------------


#: Why ``spec.replicas.min: 0`` needs ``spec.scaling.wake`` (the CEL rule and the model say the same).
_MIN_ZERO_NEEDS_WAKE = (
    "spec.replicas.min 0 needs spec.scaling.wake.query: with no replica no engine reports, so only a "
    "demand signal in front of the pool (a gateway's queue or request rate) can wake it; set one or "
    "raise spec.replicas.min"
)


class LLMDeploymentSpec(_Model):
    """Desired state of an LLMDeployment: a pool of LLM inference replicas that llmscale scales on
    queue depth, KV-cache utilisation and preemptions, with warm headroom and batch troughs."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "!has(self.replicas) || self.replicas.min > 0 || "
                    "(has(self.scaling) && has(self.scaling.wake))",
                    "fieldPath": ".replicas.min",
                    "message": _MIN_ZERO_NEEDS_WAKE,
                },
                {
                    "rule": "!(has(self.scaleTargetRef) && has(self.template))",
                    "message": "spec.template shapes the pods llmscale creates; with spec.scaleTargetRef "
                    "it creates none (change the workload's own template instead)",
                },
                {
                    "rule": "!has(self.batch) || has(self.scaleTargetRef) == has(self.batch.scaleTargetRef)",
                    "message": "spec.batch.scaleTargetRef is required with spec.scaleTargetRef and not "
                    "allowed without it",
                },
                {
                    "rule": "!(has(self.scaleTargetRef) && self.headroom.warmNodes)",
                    "message": "spec.headroom.warmNodes needs pods llmscale creates; it is not "
                    "available with spec.scaleTargetRef",
                },
            ]
        }
    )

    model: ModelSpec
    """The served model."""
    engine: EngineSpec = Field(default_factory=EngineSpec)
    """The inference engine and its metric profile."""
    resources: ResourcesSpec = Field(default_factory=ResourcesSpec)
    """Accelerators per replica."""
    replicas: ReplicasSpec = Field(default_factory=ReplicasSpec)
    """Bounds of the interactive pool."""
    slo: SloSpec = Field(default_factory=SloSpec)
    """Latency promise (p95 TTFT and ITL)."""
    scaling: ScalingSpec = Field(default_factory=ScalingSpec)
    """Scaling targets, behaviour and tick."""
    headroom: HeadroomSpec = Field(default_factory=HeadroomSpec)
    """Warm replicas kept above demand."""
    batch: BatchSpec | None = None
    """Optional batch pool and the backlog of batch Jobs it serves (docs/batch.md)."""
    cost: CostSpec = Field(default_factory=CostSpec)
    """Prices."""
    routing: RoutingSpec = Field(default_factory=RoutingSpec)
    """How requests reach the replicas: an InferencePool where the cluster has the Gateway API
    Inference Extension."""
    mode: Literal[MODES] = "Active"  # type: ignore[valid-type]
    """``Active`` (default): write the replicas decided. ``Advisory``: decide and report everything
    (status, Events, metrics) but write nothing to the workload, to run beside another autoscaler
    (KEDA, an HPA) and compare. ``Paused``: hold the workload as it is and report."""
    scale_target_ref: ScaleTargetRef | None = None
    """Scale an existing workload through its ``/scale`` subresource instead of creating one."""
    template: dict[str, Any] | None = None
    """A pod template (``metadata.labels``, ``metadata.annotations`` and a Pod ``spec``) merged over
    the pod llmscale generates, as a strategic merge patch: containers, env, volumes, volume
    mounts, ports and image pull secrets by name (key), maps key by key, the rest replaced. The
    engine container is the one named ``engine``; its command and arguments, image, probes, the
    GPU request and llmscale's labels and annotations stay llmscale's, and a template that sets
    them differently is refused, naming the field (docs/operator.md, "The pod template")."""

    @model_validator(mode="after")
    def _consistent_targets(self) -> LLMDeploymentSpec:
        if self.scale_target_ref is not None and self.template is not None:
            raise ValueError("spec.template shapes the pods llmscale creates; with spec.scaleTargetRef "
                             "it creates none (change the workload's own template instead)")
        if self.batch is not None and (self.scale_target_ref is None) != (self.batch.scale_target_ref is None):
            raise ValueError("spec.batch.scaleTargetRef is required with spec.scaleTargetRef and not "
                             "allowed without it")
        if self.scale_target_ref is not None and self.headroom.warm_nodes:
            raise ValueError("spec.headroom.warmNodes needs pods llmscale creates; it is not "
                             "available with spec.scaleTargetRef")
        return self

    @model_validator(mode="after")
    def _zero_needs_wake(self) -> LLMDeploymentSpec:
        if self.replicas.min == 0 and self.scaling.wake is None:
            raise ValueError(_MIN_ZERO_NEEDS_WAKE)
        return self


# --------------------------------------------------------------------------------------------
# status
# --------------------------------------------------------------------------------------------


class _Status(BaseModel):
    """Base of status models: camelCase, tolerant of fields written by newer versions."""

    model_config = ConfigDict(
        alias_generator=AliasGenerator(alias=to_camel),
        populate_by_name=True,
        extra="ignore",
        use_attribute_docstrings=True,
    )

    def to_wire(self) -> dict[str, Any]:
        """Return the object as the Kubernetes API spells it (camelCase, no unset optionals)."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


class ReplicaStatus(_Status):
    """Replica counts of the pools."""

    desired: int | None = None
    """Interactive replicas the operator asked for (demand + headroom, clamped)."""
    ready: int | None = None
    """Interactive replicas Ready now."""
    headroom: int | None = None
    """Warm replicas above demand in ``desired``."""
    batch: int | None = None
    """Batch replicas the operator asked for (0 outside trough windows)."""
    batch_ready: int | None = None
    """Batch replicas Ready now."""
    lead_time_seconds: float | None = None
    """The lead time the headroom and the forecast look ahead: the 90th percentile of the measured
    creation → Ready times of recent interactive pods, or ``spec.headroom.coldStartSeconds`` before
    any was measured, seconds."""
    current: int | None = None
    """Interactive replicas the workload has now (``spec.replicas``, or ``/scale``); differs from
    ``desired`` in ``Advisory`` and ``Paused`` mode, where llmscale writes nothing."""
    placeholders: int | None = None
    """Placeholder pods asked for, to keep nodes for the headroom (``spec.headroom.warmNodes``)."""
    placeholders_running: int | None = None
    """Placeholder pods holding a node now; the others are Pending, waiting for a node."""


class SignalStatus(_Status):
    """The last signal snapshot the policy saw. Absent values were unknown (not zero)."""

    observed_at: str | None = None
    """RFC 3339 time of the newest sample in the snapshot."""
    queue_depth: float | None = None
    """Waiting requests summed over ready replicas."""
    running_requests: float | None = None
    """Running requests summed over ready replicas."""
    kv_cache_utilization: float | None = None
    """Mean KV-cache utilisation over ready replicas, 0–1."""
    preemption_rate: float | None = None
    """Preemptions per second summed over ready replicas."""
    ttft_p95_seconds: float | None = None
    """Time to first token at p95 over the last minute, seconds."""
    itl_p95_seconds: float | None = None
    """Inter-token latency at p95 over the last minute, seconds."""


class PoolReport(_Status):
    """The headline numbers of one pool (``status.pools.<pool>``): what it delivered and cost.

    Written when a figure a reader acts on moves (docs/operator.md, "When status is written"), so
    the figures are as of ``asOf``; the operator's ``/metrics`` carry them live.
    """

    slo_attainment_1h_percent: float | None = Field(default=None, alias="sloAttainment1hPercent")
    """Share of the last 60 minutes meeting both p95s (TTFT and per-token ITL over the minute,
    from vLLM's histograms, against ``spec.slo``), percent of the minutes judged (interactive pool)."""
    slo_attainment_24h_percent: float | None = Field(default=None, alias="sloAttainment24hPercent")
    """The same over the last 24 hours (to the hour), percent."""
    minutes_judged_1h: int | None = Field(default=None, alias="minutesJudged1h")
    """Minutes the 1 h share is over (minutes Prometheus answered, since the operator started)."""
    minutes_judged_24h: int | None = Field(default=None, alias="minutesJudged24h")
    """Minutes the 24 h share is over."""
    goodput_tokens_per_second: float | None = None
    """Tokens per second generated in minutes that met the SLO, over the last hour."""
    tokens_per_second: float | None = None
    """Tokens per second generated, over the last hour."""
    gpu_hours_24h: float | None = Field(default=None, alias="gpuHours24h")
    """GPU-hours held by the pool's pods (GPU requests × time since creation) in the last 24 hours."""
    gpu_hours_since_creation: float | None = None
    """GPU-hours held by the pool's pods since the LLMDeployment was created."""
    usd_per_million_tokens: float | None = None
    """USD of GPU time (``spec.cost.gpuHourUsd``) per million tokens generated, over the last 24 hours."""
    busy_share: float | None = None
    """Share of the reporting pods with a running request, sampled each tick over the last hour, 0–1."""
    kv_cache_utilization_mean: float | None = None
    """Mean KV-cache utilisation of the reporting pods over the last hour, 0–1."""
    cold_start_p90_seconds: float | None = None
    """Measured cold start: pod creation to Ready, P90 of the recent starts, seconds."""
    cold_starts_measured: int | None = None
    """Starts the cold start P90 is over."""
    gpus: float | None = None
    """GPUs held by the pool's pods now."""
    as_of: str | None = None
    """RFC 3339 time the figures were computed."""


class PoolLedger(_Status):
    """GPU time of a pool's pods that are gone, saved so that GPU-hours survive a restart."""

    closed_gpu_seconds: float | None = None
    """GPU-seconds of the pool's pods that are gone, since creation."""
    closed_hours: list[list[float]] = Field(default_factory=list, max_length=30)
    """``[hour start (seconds since the epoch), GPU-seconds]`` of pods gone, spent in that hour (25 h)."""


class UsageLedger(_Status):
    """GPU time of the pods gone, per pool (opaque to users)."""

    interactive: PoolLedger | None = None
    """The interactive pool."""
    batch: PoolLedger | None = None
    """The batch pool."""


class PoolReports(_Status):
    """The headline numbers of each pool."""

    interactive: PoolReport | None = None
    """The interactive pool."""
    batch: PoolReport | None = None
    """The batch pool (only with ``spec.batch``)."""


class DecisionStatus(_Status):
    """The last scaling decision and why."""

    at: str | None = None
    """RFC 3339 time of the decision."""
    interactive_replicas: int | None = None
    """Interactive replicas decided."""
    batch_replicas: int | None = None
    """Batch replicas decided."""
    reasons: list[str] = Field(default_factory=list)
    """One line per step of the decision: signal proposals, headroom, clamps, windows."""


class BatchJobStatus(_Status):
    """One outstanding batch Job as the batch planner sees it (``status.batch.jobs[]``)."""

    name: str
    """The Job's ``metadata.name`` (same namespace as the LLMDeployment)."""
    state: Literal["Waiting", "Running", "Draining", "Done"]
    """``Waiting`` (suspended), ``Running`` (released), ``Draining`` (suspended, pods still
    finishing in-flight requests) or ``Done`` (Complete or Failed)."""
    deadline: str | None = None
    """RFC 3339 deadline: the ``llmscale.dev/deadline`` annotation, else creation +
    ``spec.batch.completionWindowSeconds``."""
    projected_finish: str | None = None
    """RFC 3339 time the planner expects the Job's work to be done; absent when its size is
    unknown or it cannot finish within the planner's horizon."""
    at_risk: bool | None = None
    """True when the projected finish is after the deadline (or the deadline has passed)."""
    outstanding_tokens: int | None = None
    """Prompt + output tokens not yet done; absent when the Job declares no size."""


class BatchStatus(_Status):
    """The batch backlog: Jobs labelled ``llmscale.dev/deployment: <name>``."""

    jobs_waiting: int | None = None
    """Jobs suspended, waiting for a window, idle GPUs or their deadline."""
    jobs_running: int | None = None
    """Jobs released (unsuspended) and not done."""
    jobs_done: int | None = None
    """Jobs Complete or Failed."""
    tokens_outstanding: int | None = None
    """Prompt + output tokens of the Jobs not done, over the Jobs that declare their size."""
    jobs_unknown_size: int | None = None
    """Jobs not done that declare no size (``llmscale.dev/batch-requests`` and token annotations)."""
    next_window_open: str | None = None
    """RFC 3339 time the next trough window opens (absent while one is open)."""
    next_window_close: str | None = None
    """RFC 3339 time the open (or next) trough window closes."""
    jobs: list[BatchJobStatus] = Field(default_factory=list, max_length=50)
    """Outstanding Jobs, earliest deadline first (at most 50)."""


class Condition(_Status):
    """A standard Kubernetes condition (``metav1.Condition``)."""

    type: str
    """``Ready``, ``ScalingActive``, ``MetricsAvailable``, ``RateWindowFits``, ``EnginesStalled``,
    ``AbleToScale``, ``ScalingLimited``, ``BatchWindowOpen``, ``BatchBacklog``, ``DeadlineAtRisk``,
    ``PolicyStateReadable``, ``CapacityModel`` or ``Diagnosis``."""
    status: Literal["True", "False", "Unknown"]
    """Condition status."""
    reason: str
    """CamelCase reason, e.g. ``ScaleUpLimit``."""
    message: str = ""
    """Human-readable detail."""
    last_transition_time: str | None = None
    """RFC 3339 time the status last changed."""
    observed_generation: int | None = None
    """``metadata.generation`` the condition was computed for."""


class LLMDeploymentStatus(_Status):
    """Observed state, written by the operator only."""

    observed_generation: int | None = None
    """``metadata.generation`` of the spec last acted on."""
    replicas: ReplicaStatus = Field(default_factory=ReplicaStatus)
    """Replica counts."""
    signals: SignalStatus = Field(default_factory=SignalStatus)
    """Last signal snapshot."""
    last_decision: DecisionStatus = Field(default_factory=DecisionStatus)
    """Last decision with its reasons."""
    conditions: list[Condition] = Field(
        default_factory=list,
        # As metav1.Condition lists are declared in Kubernetes types: one entry per type, so that
        # server-side apply merges conditions by type instead of replacing the whole list.
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    """Standard conditions."""
    batch: BatchStatus | None = None
    """The batch backlog, the next trough window and each Job's projected finish (only with
    ``spec.batch``)."""
    pools: PoolReports | None = None
    """The headline numbers of each pool: SLO attainment, goodput, GPU-hours, cost per million
    tokens, utilisation and the measured cold start."""
    usage_ledger: UsageLedger | None = None
    """GPU-seconds of the pods gone, per pool, so that GPU-hours survive an operator restart (the
    live pods are counted from their creation times). Opaque to users."""
    policy_state: dict[str, Any] | None = Field(default=None)
    """Policy memory that must survive an operator restart (recommendation history for the
    stabilisation windows, last scale times). Opaque to users; what the operator cannot read back
    is dropped and reported in the PolicyStateReadable condition, never silently reset."""


class LLMDeployment(BaseModel):
    """A whole ``LLMDeployment`` object as read from YAML or the API (metadata kept as a dict)."""

    model_config = ConfigDict(populate_by_name=True, extra="ignore")

    api_version: Literal["llmscale.dev/v1alpha1"] = Field(default="llmscale.dev/v1alpha1", alias="apiVersion")
    kind: Literal["LLMDeployment"] = "LLMDeployment"
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: LLMDeploymentSpec
    status: LLMDeploymentStatus | None = None
