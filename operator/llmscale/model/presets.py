"""GPU and model presets of the performance model, each with the source of its figures.

GPU figures are the vendors' datasheet values: *dense* tensor-core throughput (the datasheets print
the 2:4-sparsity figure first, marked with an asterisk; dense is half of it), peak memory bandwidth and
memory capacity. Model figures come from each model's Hugging Face ``config.json``; the parameter
counts are the totals of the published safetensors weights, which :func:`estimate_parameters`
reproduces exactly from the config (a test checks it).

Pure module: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from llmscale.api import ModelSpec, ResourcesSpec

__all__ = [
    "DTYPE_BYTES",
    "GPU",
    "GPU_PRESETS",
    "MODEL_PRESETS",
    "ModelArch",
    "dtype_bytes",
    "estimate_parameters",
    "gpu_of",
]

GiB = 1 << 30

#: Bytes per element of each storage type (weights or KV cache). ``fp8`` covers vLLM's
#: ``fp8``/``fp8_e4m3``/``fp8_e5m2`` cache types; ``fp16``/``bf16`` are 2 bytes; ``fp32`` 4.
DTYPE_BYTES: dict[str, int] = {
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
    "int8": 1,
    "bf16": 2,
    "bfloat16": 2,
    "fp16": 2,
    "float16": 2,
    "half": 2,
    "fp32": 4,
    "float32": 4,
}


def dtype_bytes(dtype: str) -> int:
    """Return the bytes per element of a storage type (``"bf16"`` → 2, ``"fp8"`` → 1).

    Raises:
        ValueError: for a type not in :data:`DTYPE_BYTES`; the message lists the known ones.
    """
    try:
        return DTYPE_BYTES[dtype.lower()]
    except KeyError:
        known = ", ".join(sorted(DTYPE_BYTES))
        raise ValueError(f"Unknown dtype {dtype!r}; known: {known}") from None


@dataclass(frozen=True)
class GPU:
    """One accelerator as the roofline model sees it.

    Attributes:
        name: preset key, e.g. ``"h100-sxm"``.
        memory_bytes: device memory, bytes. NVIDIA's "80GB" of HBM is 80 GiB (an A100-80GB reports
            81920 MiB in ``nvidia-smi``), so datasheet capacities are read as GiB.
        hbm_bandwidth_bytes_s: peak memory bandwidth, bytes/s (datasheet, decimal TB/s).
        bf16_dense_flops: dense BF16 tensor-core peak, FLOP/s (no 2:4 sparsity).
        fp8_dense_flops: dense FP8 tensor-core peak, FLOP/s; on a GPU without FP8 tensor cores
            (A100) the BF16 figure, because FP8 weights then run through weight-only kernels
            (vLLM's Marlin) at the BF16 rate.
        source: citation of the figures.
        resource_name: the device plugin's extended resource (``spec.resources.gpuResourceName``).
    """

    name: str
    memory_bytes: int
    hbm_bandwidth_bytes_s: float
    bf16_dense_flops: float
    fp8_dense_flops: float
    source: str
    resource_name: str = "nvidia.com/gpu"


#: GPU presets; keys equal :data:`llmscale.api.GPU_PRESET_NAMES`.
GPU_PRESETS: dict[str, GPU] = {
    g.name: g
    for g in (
        GPU(
            name="a100-80gb",
            memory_bytes=80 * GiB,
            hbm_bandwidth_bytes_s=2.039e12,
            bf16_dense_flops=312e12,
            fp8_dense_flops=312e12,
            source=(
                "NVIDIA A100 Tensor Core GPU datasheet (nvidia-a100-datasheet-us-nvidia-1758950-r4), "
                "A100 80GB SXM column: 80GB HBM2e, 2,039 GB/s, BF16 Tensor Core 312 TFLOPS dense "
                "(624 with sparsity); no FP8 tensor cores, so the FP8 figure is the BF16 one"
            ),
        ),
        GPU(
            name="h100-sxm",
            memory_bytes=80 * GiB,
            hbm_bandwidth_bytes_s=3.35e12,
            bf16_dense_flops=989.4e12,
            fp8_dense_flops=1978.9e12,
            source=(
                "NVIDIA H100 Tensor Core GPU datasheet, H100 SXM column: 80GB HBM3, 3.35 TB/s, "
                "BF16 Tensor Core 1,979 TFLOPS and FP8 3,958 TFLOPS with sparsity, i.e. 989.4 and "
                "1,978.9 TFLOPS dense"
            ),
        ),
        GPU(
            name="h200",
            memory_bytes=141 * GiB,
            hbm_bandwidth_bytes_s=4.8e12,
            bf16_dense_flops=989.4e12,
            fp8_dense_flops=1978.9e12,
            source=(
                "NVIDIA H200 Tensor Core GPU datasheet, H200 SXM column: 141GB HBM3e, 4.8 TB/s, "
                "BF16 1,979 TFLOPS and FP8 3,958 TFLOPS with sparsity (989.4 and 1,978.9 dense)"
            ),
        ),
        GPU(
            name="l40s",
            memory_bytes=48 * GiB,
            hbm_bandwidth_bytes_s=864e9,
            bf16_dense_flops=362.05e12,
            fp8_dense_flops=733e12,
            source=(
                "NVIDIA L40S GPU datasheet: 48GB GDDR6 with ECC, 864 GB/s, BF16 Tensor Core "
                "362.05 TFLOPS dense (733 with sparsity), FP8 733 TFLOPS dense (1,466 with sparsity)"
            ),
        ),
        GPU(
            name="b200",
            memory_bytes=180 * GiB,
            hbm_bandwidth_bytes_s=8e12,
            bf16_dense_flops=2.25e15,
            fp8_dense_flops=4.5e15,
            source=(
                "NVIDIA DGX B200 datasheet, per GPU (totals ÷ 8): 1,440GB HBM3e → 180GB, 64 TB/s → "
                "8 TB/s, FP8 72 PFLOPS and FP16/BF16 36 PFLOPS with sparsity → 4.5 and 2.25 PFLOPS "
                "dense"
            ),
        ),
        GPU(
            name="l4",
            memory_bytes=24 * GiB,
            hbm_bandwidth_bytes_s=300e9,
            bf16_dense_flops=121e12,
            fp8_dense_flops=242.5e12,
            source=(
                "NVIDIA L4 Tensor Core GPU datasheet: 24GB GDDR6, 300 GB/s, BF16 242 TFLOPS and FP8 485 "
                "TFLOPS with sparsity, i.e. 121 and 242.5 dense"
            ),
        ),
        GPU(
            name="a10",
            memory_bytes=24 * GiB,
            hbm_bandwidth_bytes_s=600e9,
            bf16_dense_flops=125e12,
            fp8_dense_flops=125e12,
            source=(
                "NVIDIA A10 Tensor Core GPU datasheet: 24GB GDDR6, 600 GB/s, BF16 Tensor Core 125 TFLOPS "
                "dense (250 with sparsity); no FP8 tensor cores, so the FP8 figure is the BF16 one. AWS's "
                "A10G (g5 instances) is a variant whose tensor throughput AWS does not publish: declare it "
                "with spec.resources.accelerator if it matters"
            ),
        ),
        GPU(
            name="a100-40gb",
            memory_bytes=40 * GiB,
            hbm_bandwidth_bytes_s=1.555e12,
            bf16_dense_flops=312e12,
            fp8_dense_flops=312e12,
            source=(
                "NVIDIA A100 Tensor Core GPU datasheet, A100 40GB SXM column: 40GB HBM2, 1,555 GB/s, BF16 "
                "Tensor Core 312 TFLOPS dense (624 with sparsity); no FP8 tensor cores"
            ),
        ),
        GPU(
            name="h100-pcie",
            memory_bytes=80 * GiB,
            hbm_bandwidth_bytes_s=2.0e12,
            bf16_dense_flops=756e12,
            fp8_dense_flops=1513e12,
            source=(
                "NVIDIA H100 Tensor Core GPU datasheet, H100 PCIe column: 80GB HBM2e, 2 TB/s, BF16 1,513 "
                "TFLOPS and FP8 3,026 TFLOPS with sparsity, i.e. 756 and 1,513 dense"
            ),
        ),
        GPU(
            name="h100-nvl",
            memory_bytes=94 * GiB,
            hbm_bandwidth_bytes_s=3.9e12,
            bf16_dense_flops=835.5e12,
            fp8_dense_flops=1670.5e12,
            source=(
                "NVIDIA H100 Tensor Core GPU datasheet, H100 NVL column (per GPU): 94GB HBM3, 3.9 TB/s, "
                "BF16 1,671 TFLOPS and FP8 3,341 TFLOPS with sparsity, i.e. 835.5 and 1,670.5 dense"
            ),
        ),
        GPU(
            name="mi300x",
            memory_bytes=192 * GiB,
            hbm_bandwidth_bytes_s=5.3e12,
            bf16_dense_flops=1307.4e12,
            fp8_dense_flops=2614.9e12,
            source=(
                "AMD Instinct MI300X accelerator data sheet: 192GB HBM3, 5.3 TB/s peak, BF16 1,307.4 TFLOPS "
                "and FP8 2,614.9 TFLOPS dense (twice that with structured sparsity); its device plugin "
                "resource is amd.com/gpu"
            ),
            resource_name="amd.com/gpu",
        ),
    )
}


def gpu_of(resources: ResourcesSpec) -> GPU:
    """The accelerator of ``spec.resources``: its ``accelerator`` when set (hardware that is not a
    preset, a CPU included), else the ``gpuType`` preset."""
    acc = resources.accelerator
    if acc is None:
        return GPU_PRESETS[resources.gpu_type]
    return GPU(
        name=acc.name,
        memory_bytes=acc.memory_bytes,
        hbm_bandwidth_bytes_s=acc.memory_bandwidth_bytes_per_second,
        bf16_dense_flops=acc.dense_flops,
        fp8_dense_flops=acc.fp8_dense_flops or acc.dense_flops,
        source="spec.resources.accelerator",
    )


def _int(config: Mapping[str, Any], key: str, default: int | None = None) -> int:
    value = config.get(key)
    if value is None:
        if default is None:
            raise ValueError(f"config.json lacks {key!r}")
        return default
    return int(value)


def estimate_parameters(config: Mapping[str, Any]) -> tuple[int, int]:
    """Count the parameters of a Llama-family decoder from its Hugging Face ``config.json``.

    Counted, per layer: Q and O projections (``hidden × heads·head_dim`` each), K and V
    (``hidden × kv_heads·head_dim`` each), biases on Q, K, V when ``attention_bias`` is true or the
    ``model_type`` is ``qwen2`` (Qwen2 always has them, see transformers'
    ``models/qwen2/modeling_qwen2.py``), a gated MLP of three ``hidden × intermediate`` matrices
    (SwiGLU, as in Llama, Mistral, Qwen2 and each Mixtral expert), two RMSNorm weight vectors;
    then the final norm, the token embedding (``vocab × hidden``) and the LM head (the same
    matrix again unless ``tie_word_embeddings`` is true; absent means untied, the Llama default).
    A Mixtral-style mixture of experts (``num_local_experts`` E, ``num_experts_per_tok`` k) has E
    MLPs plus a ``hidden × E`` router per layer; k of them are *active* per token. Shared experts
    (Qwen-MoE, DeepSeek) and other layouts are not modelled: give ``parameters`` explicitly then.

    Reproduces the published counts exactly (e.g. Llama-3.1-8B 8,030,261,248; Mixtral-8x7B
    46,702,792,704); see ``tests/model``.

    Returns:
        ``(parameters, active_parameters)``, counts.

    Raises:
        ValueError: when a required field (``hidden_size``, ``intermediate_size``, ``vocab_size``,
            ``num_hidden_layers``, ``num_attention_heads``) is missing.
    """
    hidden = _int(config, "hidden_size")
    layers = _int(config, "num_hidden_layers")
    heads = _int(config, "num_attention_heads")
    kv_heads = _int(config, "num_key_value_heads", heads)
    head_dim = _int(config, "head_dim", hidden // heads)
    intermediate = _int(config, "intermediate_size")
    vocab = _int(config, "vocab_size")
    experts = _int(config, "num_local_experts", 1)
    active_experts = _int(config, "num_experts_per_tok", experts) if experts > 1 else 1
    tied = bool(config.get("tie_word_embeddings", False))
    bias = bool(config.get("attention_bias", False)) or config.get("model_type") == "qwen2"

    q_out, kv_out = heads * head_dim, kv_heads * head_dim
    attention = hidden * q_out * 2 + hidden * kv_out * 2 + ((q_out + 2 * kv_out) if bias else 0)
    mlp = 3 * hidden * intermediate
    router = hidden * experts if experts > 1 else 0
    norms = 2 * hidden
    embeddings = vocab * hidden * (1 if tied else 2) + hidden  # + final norm
    total = layers * (attention + experts * mlp + router + norms) + embeddings
    active = layers * (attention + active_experts * mlp + router + norms) + embeddings
    return total, active


@dataclass(frozen=True)
class ModelArch:
    """A decoder-only transformer as the roofline model sees it.

    Attributes:
        name: preset key or a user's name.
        num_hidden_layers: transformer layers.
        num_attention_heads: query heads per layer.
        num_key_value_heads: KV heads per layer (grouped-query attention when fewer than the query
            heads).
        head_dim: dimension of one head.
        hidden_size: model width.
        parameters: total parameters (all weights are read each decode step, all experts included).
        active_parameters: parameters each token multiplies through (FLOPs = 2 × this per token);
            equal to ``parameters`` for a dense model.
        source: citation of the figures.
    """

    name: str
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    hidden_size: int
    parameters: int
    active_parameters: int
    source: str

    @classmethod
    def from_hf_config(cls, config: Mapping[str, Any], name: str = "custom") -> ModelArch:
        """Build an architecture from the fields of a Hugging Face ``config.json``.

        ``num_key_value_heads`` defaults to ``num_attention_heads`` (no GQA) and ``head_dim`` to
        ``hidden_size // num_attention_heads`` (the transformers convention). ``parameters`` and
        ``active_parameters`` may be given as extra keys (config.json has no parameter count);
        otherwise they are estimated by :func:`estimate_parameters`.

        Raises:
            ValueError: a required field is missing or not a positive integer.
        """
        heads = _int(config, "num_attention_heads")
        hidden = _int(config, "hidden_size")
        params = config.get("parameters")
        active = config.get("active_parameters")
        if params is None:
            params, estimated_active = estimate_parameters(config)
            active = estimated_active if active is None else active
            how = "parameters estimated from config.json by llmscale.model.estimate_parameters"
        else:
            how = "parameters given in the config"
        arch = cls(
            name=name,
            num_hidden_layers=_int(config, "num_hidden_layers"),
            num_attention_heads=heads,
            num_key_value_heads=_int(config, "num_key_value_heads", heads),
            head_dim=_int(config, "head_dim", hidden // heads),
            hidden_size=hidden,
            parameters=int(params),
            active_parameters=int(params if active is None else active),
            source=f"Hugging Face config.json ({how})",
        )
        for field in (
            "num_hidden_layers",
            "num_attention_heads",
            "num_key_value_heads",
            "head_dim",
            "hidden_size",
            "parameters",
            "active_parameters",
        ):
            if getattr(arch, field) < 1:
                raise ValueError(f"config.json: {field} must be a positive integer")
        return arch

    @classmethod
    def from_spec(cls, spec: ModelSpec) -> ModelArch:
        """Return the architecture of ``spec.model``: its preset, else its explicit architecture.

        Raises:
            ValueError: neither is set (the API model already rejects that).
        """
        if spec.preset is not None:
            return MODEL_PRESETS[spec.preset]
        a = spec.architecture
        if a is None:
            raise ValueError("spec.model: set exactly one of preset and architecture")
        return cls(
            name=spec.name,
            num_hidden_layers=a.num_hidden_layers,
            num_attention_heads=a.num_attention_heads,
            num_key_value_heads=a.num_key_value_heads,
            head_dim=a.head_dim,
            hidden_size=a.hidden_size or a.num_attention_heads * a.head_dim,
            parameters=a.parameters,
            active_parameters=a.active_parameters or a.parameters,
            source="spec.model.architecture",
        )


def _hf(name: str, repo: str, config: dict[str, Any]) -> ModelArch:
    arch = ModelArch.from_hf_config(config, name=name)
    src = (
        f"Hugging Face {repo} config.json: {arch.num_hidden_layers} layers, "
        f"{arch.num_attention_heads} attention heads, {arch.num_key_value_heads} KV heads, "
        f"head_dim {arch.head_dim}, hidden {arch.hidden_size}; {arch.parameters:,} parameters "
        f"(safetensors total, equal to the count from config.json)"
    )
    if arch.active_parameters != arch.parameters:
        src += f", {arch.active_parameters:,} active per token"
    return ModelArch(**{**arch.__dict__, "source": src})


#: The config.json fields the presets are built from (verbatim values from the Hub).
PRESET_CONFIGS: dict[str, tuple[str, dict[str, Any]]] = {
    "llama-3.1-8b": (
        "meta-llama/Llama-3.1-8B",
        {
            "model_type": "llama",
            "hidden_size": 4096,
            "intermediate_size": 14336,
            "num_hidden_layers": 32,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "head_dim": 128,
            "vocab_size": 128256,
            "tie_word_embeddings": False,
            "attention_bias": False,
        },
    ),
    "llama-3.1-70b": (
        "meta-llama/Llama-3.1-70B",
        {
            "model_type": "llama",
            "hidden_size": 8192,
            "intermediate_size": 28672,
            "num_hidden_layers": 80,
            "num_attention_heads": 64,
            "num_key_value_heads": 8,
            "head_dim": 128,
            "vocab_size": 128256,
            "tie_word_embeddings": False,
            "attention_bias": False,
        },
    ),
    "mistral-7b": (
        "mistralai/Mistral-7B-Instruct-v0.3",
        {
            "model_type": "mistral",
            "hidden_size": 4096,
            "intermediate_size": 14336,
            "num_hidden_layers": 32,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "head_dim": 128,
            "vocab_size": 32768,
            "tie_word_embeddings": False,
        },
    ),
    "qwen2.5-7b": (
        "Qwen/Qwen2.5-7B-Instruct",
        {
            "model_type": "qwen2",
            "hidden_size": 3584,
            "intermediate_size": 18944,
            "num_hidden_layers": 28,
            "num_attention_heads": 28,
            "num_key_value_heads": 4,
            "vocab_size": 152064,
            "tie_word_embeddings": False,
        },
    ),
    "qwen2.5-72b": (
        "Qwen/Qwen2.5-72B-Instruct",
        {
            "model_type": "qwen2",
            "hidden_size": 8192,
            "intermediate_size": 29568,
            "num_hidden_layers": 80,
            "num_attention_heads": 64,
            "num_key_value_heads": 8,
            "vocab_size": 152064,
            "tie_word_embeddings": False,
        },
    ),
    "mixtral-8x7b": (
        "mistralai/Mixtral-8x7B-Instruct-v0.1",
        {
            "model_type": "mixtral",
            "hidden_size": 4096,
            "intermediate_size": 14336,
            "num_hidden_layers": 32,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "vocab_size": 32000,
            "num_local_experts": 8,
            "num_experts_per_tok": 2,
            "tie_word_embeddings": False,
        },
    ),
}

#: Model presets; keys equal :data:`llmscale.api.MODEL_PRESET_NAMES`.
MODEL_PRESETS: dict[str, ModelArch] = {
    name: _hf(name, repo, config) for name, (repo, config) in PRESET_CONFIGS.items()
}
