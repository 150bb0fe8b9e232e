"""Roofline model of one inference replica: step time from bytes read and FLOPs.

One engine step of continuous batching (vLLM V1, SGLang) runs every running sequence through the
model once: each decode sequence produces one token, and with chunked prefill a slice of prompt
tokens rides in the same step. The step is bound either by memory — every weight is read once
(shared by the batch) and every decode sequence reads its whole KV cache — or by compute — two
FLOPs per active parameter per token (one multiply, one add; Kaplan et al., "Scaling Laws for
Neural Language Models", 2020, §2.1). The step takes the larger of the two times (the roofline:
Williams, Waterman, Patterson, CACM 2009).

Attention FLOPs (``4·layers·heads·head_dim`` per query-key pair, ~10 % of prefill FLOPs at an 8k
prompt on Llama-3.1-8B) count only when ``attention_efficiency`` is set (a calibration fits it where
they show). Not modelled (each makes the model optimistic by a few per cent in its regime):
tensor-parallel all-reduce time, scheduler and sampling overhead (0 until a calibration fits
``step_overhead_s`` and ``seq_overhead_s``), and the
mixture-of-experts saving at tiny batches (all experts are counted as read each step, exact once
a batch touches every expert, i.e. from about 16 sequences for Mixtral's top-2 of 8).

Pure module: numbers in, numbers out; no clock, no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any, overload

import numpy as np
from numpy.typing import NDArray

from llmscale.model.presets import GPU, ModelArch, dtype_bytes, gpu_of

if TYPE_CHECKING:  # pragma: no cover
    from llmscale.api import LLMDeploymentSpec

__all__ = [
    "BLOCK_SIZE_TOKENS",
    "DEFAULT_BANDWIDTH_EFFICIENCY",
    "DEFAULT_COMPUTE_EFFICIENCY",
    "DEFAULT_GPU_MEMORY_UTILIZATION",
    "ModelDoesNotFit",
    "ReplicaModel",
]

#: Tokens per paged-attention block: vLLM's default ``--block-size`` on CUDA
#: (``EngineArgs.block_size`` in ``vllm/engine/arg_utils.py``). Cache capacity is a whole number of blocks.
BLOCK_SIZE_TOKENS = 16

#: Fraction of peak memory bandwidth a decode step achieves. A plain device-to-device copy reaches
#: roughly 90 % of the datasheet bandwidth on HBM GPUs, and a whole decode step (many kernels, small
#: GEMVs, paged KV gathers, launch gaps only partly hidden by CUDA graphs) loses more. 0.8 is a
#: planning value, not a measurement: calibrate it against a measured ITL at batch 1, where
#: ITL ≈ weight_bytes / (bandwidth × efficiency).
DEFAULT_BANDWIDTH_EFFICIENCY = 0.8

#: Fraction of dense tensor-core peak a large-batch step achieves (model FLOPs utilisation, MFU).
#: Well-tuned large matrix work reaches 40–60 % MFU (Chowdhery et al., "PaLM", 2022, Table 3: 46.2 %
#: for PaLM 540B training); prefill with chunked batches is of the same kind. 0.5 is the middle of
#: that range; calibrate it against a measured prefill time of a long prompt.
DEFAULT_COMPUTE_EFFICIENCY = 0.5

#: vLLM's default ``--gpu-memory-utilization`` (``EngineArgs`` in ``vllm/engine/arg_utils.py``): the share of device
#: memory the engine may use for weights, activations and the KV cache.
DEFAULT_GPU_MEMORY_UTILIZATION = 0.9

Number = int | float


class ModelDoesNotFit(ValueError):
    """The weights (and reserve) leave no room for a KV cache, or not one sequence at the context
    limit fits: vLLM would refuse to start."""


@dataclass(frozen=True)
class ReplicaModel:
    """One engine replica: a model on ``gpus`` GPUs (tensor parallel), with its roofline times.

    Tensor parallelism splits weights and KV cache evenly, so memory, bandwidth and FLOP/s simply
    add up across ``gpus`` (communication time is not modelled).

    Attributes:
        arch: the model.
        gpu: the GPU type.
        gpus: GPUs per replica (tensor-parallel size).
        weight_dtype: storage type of the weights (``bf16``, ``fp16``, ``fp8``).
        kv_dtype: storage type of the KV cache (vLLM ``--kv-cache-dtype``).
        bandwidth_efficiency: achieved / peak memory bandwidth (see
            :data:`DEFAULT_BANDWIDTH_EFFICIENCY` for why 0.8).
        compute_efficiency: achieved / peak dense FLOP/s (see :data:`DEFAULT_COMPUTE_EFFICIENCY`).
        gpu_memory_utilization: share of device memory the engine may use (vLLM's 0.9 default).
        reserve_bytes_per_gpu: bytes per GPU held back from the KV cache for activations, CUDA
            graphs and non-torch allocations (vLLM measures these with a profiling run); 0 by
            default because the planner cannot know them in advance — set it from an engine's
            startup log ("Available KV cache memory") to match a real deployment.
        step_overhead_s: fixed seconds every step costs beyond the roofline (scheduler, kernel
            launches); 0 by default, fitted by ``llmscale calibrate`` (:mod:`llmscale.model.fit`).
        seq_overhead_s: seconds each decoding sequence adds to a step beyond its bytes and FLOPs
            (sampling, detokenising and streaming its token: the API server's share, large on a
            CPU where it shares the cores); 0 by default, fitted likewise. A step takes
            ``step_overhead + decode_seqs × seq_overhead + attention + max(memory, compute)``.
        attention_efficiency: achieved share of peak FLOP/s in attention (``QKᵀ`` and ``AV``),
            0–1; ``None`` (default): attention FLOPs are not modelled (a few per cent of a large
            model's step). When set, a step adds ``4 × layers × heads × head_dim × (KV tokens read
            + prefill pairs)`` FLOPs at that efficiency — what dominates a small model's long
            prompts. A prompt chunk of ``c`` tokens after ``e`` earlier tokens of its prompt (its
            earlier chunks, a cached prefix) has ``c·e + c²/2`` pairs, so a prompt's attention
            grows with the square of its whole length however it is chunked.
    """

    arch: ModelArch
    gpu: GPU
    gpus: int = 1
    weight_dtype: str = "bf16"
    kv_dtype: str = "bf16"
    bandwidth_efficiency: float = DEFAULT_BANDWIDTH_EFFICIENCY
    compute_efficiency: float = DEFAULT_COMPUTE_EFFICIENCY
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION
    reserve_bytes_per_gpu: int = 0
    step_overhead_s: float = 0.0
    seq_overhead_s: float = 0.0
    attention_efficiency: float | None = None

    def __post_init__(self) -> None:
        if self.gpus < 1:
            raise ValueError(f"gpus must be at least 1, got {self.gpus}")
        for name in ("bandwidth_efficiency", "compute_efficiency", "gpu_memory_utilization"):
            value = getattr(self, name)
            if not 0 < value <= 1:
                raise ValueError(f"{name} must be in (0, 1], got {value}")
        if self.reserve_bytes_per_gpu < 0:
            raise ValueError("reserve_bytes_per_gpu must not be negative")
        if self.attention_efficiency is not None and not 0 < self.attention_efficiency <= 1:
            raise ValueError(f"attention_efficiency must be in (0, 1], got {self.attention_efficiency}")
        for name in ("step_overhead_s", "seq_overhead_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be finite and ≥ 0, got {value}")
        dtype_bytes(self.weight_dtype)  # raises ValueError on an unknown type
        dtype_bytes(self.kv_dtype)

    @classmethod
    def from_spec(cls, spec: LLMDeploymentSpec, **overrides: Any) -> ReplicaModel:
        """Build the replica an ``LLMDeployment`` spec describes; ``overrides`` replace any field.

        The accelerator is ``spec.resources.accelerator`` when set, else the ``gpuType`` preset;
        the efficiencies and the per-step overhead are ``spec.model.calibration``'s when set, else
        the planning defaults.

        Raises:
            TypeError: an override names no field.
        """
        kwargs: dict[str, Any] = {
            "arch": ModelArch.from_spec(spec.model),
            "gpu": gpu_of(spec.resources),
            "gpus": spec.resources.gpus_per_replica,
            "weight_dtype": spec.model.weight_dtype,
            "kv_dtype": spec.model.kv_cache_dtype,
        }
        cal = spec.model.calibration
        if cal is not None:
            kwargs["bandwidth_efficiency"] = cal.bandwidth_efficiency
            kwargs["compute_efficiency"] = cal.compute_efficiency
            kwargs["step_overhead_s"] = cal.step_overhead_seconds
            kwargs["seq_overhead_s"] = cal.sequence_overhead_seconds
            kwargs["attention_efficiency"] = cal.attention_efficiency
        names = {f.name for f in fields(cls)}
        unknown = set(overrides) - names
        if unknown:
            raise TypeError(f"ReplicaModel has no field(s) {sorted(unknown)}")
        kwargs.update(overrides)
        return cls(**kwargs)

    def with_changes(self, **changes: Any) -> ReplicaModel:
        """Return a copy with some fields replaced (e.g. ``kv_dtype="fp8"``)."""
        return replace(self, **changes)

    # ---------------------------------------------------------------- sizes (bytes, tokens)

    @cached_property
    def kv_bytes_per_token(self) -> int:
        """KV-cache bytes one token occupies: 2 (K and V) × layers × KV heads × head_dim × bytes.

        E.g. Llama-3.1-8B in bf16: 2 × 32 × 8 × 128 × 2 = 131,072 bytes (128 KiB).
        """
        a = self.arch
        return 2 * a.num_hidden_layers * a.num_key_value_heads * a.head_dim * dtype_bytes(self.kv_dtype)

    @cached_property
    def weight_bytes(self) -> int:
        """Bytes of all weights: parameters × bytes per weight (all GPUs together)."""
        return self.arch.parameters * dtype_bytes(self.weight_dtype)

    @cached_property
    def usable_memory_bytes(self) -> int:
        """Memory the engine may use on all GPUs: gpus × memory × utilisation, bytes."""
        return int(self.gpus * self.gpu.memory_bytes * self.gpu_memory_utilization)

    @cached_property
    def kv_cache_bytes(self) -> int:
        """Bytes left for the KV cache: usable memory − weights − reserve; negative = does not fit."""
        return self.usable_memory_bytes - self.weight_bytes - self.gpus * self.reserve_bytes_per_gpu

    @cached_property
    def fits(self) -> bool:
        """True when the weights leave room for at least one KV block."""
        return self.kv_cache_capacity_tokens > 0

    @cached_property
    def kv_cache_capacity_tokens(self) -> int:
        """Tokens the paged KV cache holds: ``kv_cache_bytes // kv_bytes_per_token``, floored to
        whole 16-token blocks (vLLM ``num_gpu_blocks × block_size``); 0 when nothing fits."""
        if self.kv_cache_bytes <= 0:
            return 0
        blocks = self.kv_cache_bytes // (self.kv_bytes_per_token * BLOCK_SIZE_TOKENS)
        return int(blocks * BLOCK_SIZE_TOKENS)

    @cached_property
    def kv_cache_capacity_blocks(self) -> int:
        """Whole 16-token blocks in the KV cache (vLLM's ``num_gpu_blocks``)."""
        return self.kv_cache_capacity_tokens // BLOCK_SIZE_TOKENS

    def max_concurrent_sequences(self, context_limit_tokens: int) -> int:
        """Sequences that can hold a full ``context_limit_tokens`` context in the cache at once.

        Each takes ``ceil(limit / 16)`` blocks; returns ``capacity_blocks // that`` (0 when not one
        fits — vLLM then refuses to start with that ``--max-model-len``).

        Raises:
            ValueError: ``context_limit_tokens`` < 1.
        """
        if context_limit_tokens < 1:
            raise ValueError("context_limit_tokens must be at least 1")
        blocks_per_seq = -(-context_limit_tokens // BLOCK_SIZE_TOKENS)
        return self.kv_cache_capacity_blocks // blocks_per_seq

    # ---------------------------------------------------------------- rates (bytes/s, FLOP/s)

    @cached_property
    def effective_bandwidth_bytes_s(self) -> float:
        """Achieved memory bandwidth of the replica: peak × gpus × efficiency, bytes/s."""
        return self.gpu.hbm_bandwidth_bytes_s * self.gpus * self.bandwidth_efficiency

    @cached_property
    def peak_flops(self) -> float:
        """Dense tensor-core peak per GPU for the weight type: FP8 for fp8 weights (W8A8 on
        Hopper and later), else BF16; FLOP/s."""
        return self.gpu.fp8_dense_flops if dtype_bytes(self.weight_dtype) == 1 else self.gpu.bf16_dense_flops

    @cached_property
    def effective_flops(self) -> float:
        """Achieved FLOP/s of the replica: peak × gpus × efficiency."""
        return self.peak_flops * self.gpus * self.compute_efficiency

    @cached_property
    def flops_per_token(self) -> float:
        """FLOPs to push one token through the linear layers: 2 × active parameters."""
        return 2.0 * self.arch.active_parameters

    @cached_property
    def _weight_time_s(self) -> float:
        return self.weight_bytes / self.effective_bandwidth_bytes_s

    @cached_property
    def _kv_time_per_token_s(self) -> float:
        return self.kv_bytes_per_token / self.effective_bandwidth_bytes_s

    @cached_property
    def _compute_time_per_token_s(self) -> float:
        return self.flops_per_token / self.effective_flops

    @cached_property
    def attention_flops_per_token_pair(self) -> float:
        """Attention FLOPs of one query token against one context token over all layers:
        ``4 × layers × heads × head_dim`` (``QKᵀ`` and ``AV``, a multiply and an add each)."""
        a = self.arch
        return 4.0 * a.num_hidden_layers * a.num_attention_heads * a.head_dim

    @cached_property
    def _attention_time_per_pair_s(self) -> float:
        if self.attention_efficiency is None:
            return 0.0
        return self.attention_flops_per_token_pair / (self.peak_flops * self.gpus * self.attention_efficiency)

    # ---------------------------------------------------------------- times (seconds)

    @overload
    def step_time(
        self, decode_seqs: Number, kv_tokens_read: Number, prefill_tokens: Number = 0, prefill_pairs: Number | None = None
    ) -> float: ...

    @overload
    def step_time(
        self,
        decode_seqs: NDArray[Any] | Number,
        kv_tokens_read: NDArray[Any] | Number,
        prefill_tokens: NDArray[Any] | Number = 0,
        prefill_pairs: NDArray[Any] | Number | None = None,
    ) -> NDArray[np.float64] | float: ...

    def step_time(
        self,
        decode_seqs: NDArray[Any] | Number,
        kv_tokens_read: NDArray[Any] | Number,
        prefill_tokens: NDArray[Any] | Number = 0,
        prefill_pairs: NDArray[Any] | Number | None = None,
    ) -> NDArray[np.float64] | float:
        """Seconds of one engine step.

        ``step_overhead_s + decode_seqs × seq_overhead_s + max(memory, compute)`` with
        ``memory = (weight_bytes + kv_tokens_read × kv_bytes_per_token) / effective_bandwidth`` and
        ``compute = 2 × active_parameters × (decode_seqs + prefill_tokens) / effective_flops``.
        An empty step still reads every weight once.

        Args:
            decode_seqs: sequences producing one token this step.
            kv_tokens_read: KV-cache tokens the step reads (sum of the decode sequences' contexts).
            prefill_tokens: prompt tokens computed this step (chunked prefill), 0 for pure decode.
            prefill_pairs: query-key pairs of those prompt tokens, ``Σ c·e + c²/2`` over the
                step's chunks (``c`` tokens after ``e`` earlier tokens of the same prompt); ``None``
                (default): one chunk with nothing before it, ``prefill_tokens² / 2``. Only the
                attention term reads it.

        Returns:
            A float for scalar arguments (plain float arithmetic, cheap enough for every engine
            step); an array of the broadcast shape when any argument is a numpy array.
        """
        if (
            isinstance(decode_seqs, (int, float))
            and isinstance(kv_tokens_read, (int, float))
            and isinstance(prefill_tokens, (int, float))
            and (prefill_pairs is None or isinstance(prefill_pairs, (int, float)))
        ):
            memory = self._weight_time_s + kv_tokens_read * self._kv_time_per_token_s
            compute = (decode_seqs + prefill_tokens) * self._compute_time_per_token_s
            pairs = prefill_tokens * prefill_tokens / 2.0 if prefill_pairs is None else prefill_pairs
            attention = (kv_tokens_read + pairs) * self._attention_time_per_pair_s
            return (
                float(memory if memory >= compute else compute)
                + self.step_overhead_s
                + decode_seqs * self.seq_overhead_s
                + attention
            )
        memory_a = (
            self._weight_time_s + np.asarray(kv_tokens_read, dtype=np.float64) * self._kv_time_per_token_s
        )
        compute_a = (
            np.asarray(decode_seqs, dtype=np.float64) + np.asarray(prefill_tokens, dtype=np.float64)
        ) * self._compute_time_per_token_s
        overhead = self.step_overhead_s + np.asarray(decode_seqs, dtype=np.float64) * self.seq_overhead_s
        if self._attention_time_per_pair_s:
            p = np.asarray(prefill_tokens, dtype=np.float64)
            kv = np.asarray(kv_tokens_read, dtype=np.float64)
            pairs_a = p * p / 2.0 if prefill_pairs is None else np.asarray(prefill_pairs, dtype=np.float64)
            overhead = overhead + (kv + pairs_a) * self._attention_time_per_pair_s
        return np.maximum(memory_a, compute_a) + overhead

    @overload
    def decode_step_time(self, batch: Number, mean_context_tokens: Number) -> float: ...

    @overload
    def decode_step_time(
        self, batch: NDArray[Any] | Number, mean_context_tokens: NDArray[Any] | Number
    ) -> NDArray[np.float64] | float: ...

    def decode_step_time(
        self, batch: NDArray[Any] | Number, mean_context_tokens: NDArray[Any] | Number
    ) -> NDArray[np.float64] | float:
        """Seconds of a pure decode step of ``batch`` sequences at ``mean_context_tokens`` each:
        ``step_time(batch, batch × mean_context_tokens, 0)``. This is the inter-token latency (ITL)
        every sequence in the batch sees."""
        return self.step_time(batch, batch * mean_context_tokens, 0)

    def prefill_time(self, prompt_tokens: Number) -> float:
        """Seconds to prefill ``prompt_tokens`` in one step with no decode alongside:
        ``step_time(0, 0, prompt_tokens)``. Compute-bound above the compute ridge (a few hundred
        tokens); shorter prompts still pay one read of the weights."""
        return self.step_time(0, 0, prompt_tokens)

    # ---------------------------------------------------------------- derived figures

    def memory_knee_batch(self, mean_context_tokens: float) -> float:
        """The knee: batch at which the step's KV-cache reads equal its weight reads,
        ``weight_bytes / (C × kv_bytes_per_token)``; beyond it KV reads are most of each step, so
        ITL grows about linearly with the batch and throughput flattens. Sequences (fractional)."""
        return self.weight_bytes / (mean_context_tokens * self.kv_bytes_per_token)

    def compute_ridge_batch(self) -> float:
        """The compute ridge: batch at which a decode step would turn compute-bound counting weight
        reads only (the textbook roofline ridge), ``weight_time / compute_time_per_token`` =
        ``weight_bytes × effective_flops / (2 × active_parameters × effective_bandwidth)``.
        Sequences (fractional)."""
        return self._weight_time_s / self._compute_time_per_token_s

    def throughput_asymptote_tok_s(self, mean_context_tokens: float) -> float:
        """Decode tokens/s as the batch grows without bound at context C: the smaller of the
        KV-bound rate ``effective_bandwidth / (C × kv_bytes_per_token)`` and the compute-bound rate
        ``effective_flops / (2 × active_parameters)``. Tokens/s (memory limits not applied)."""
        kv_rate = self.effective_bandwidth_bytes_s / (mean_context_tokens * self.kv_bytes_per_token)
        compute_rate = self.effective_flops / self.flops_per_token
        return min(kv_rate, compute_rate)

    def kv_read_fraction(self, batch: Number, mean_context_tokens: Number) -> float:
        """Share of a decode step's bytes that are KV-cache reads at ``batch``:
        ``B·C·kv / (weight_bytes + B·C·kv)``; 0.5 at the knee. Fraction 0–1."""
        kv = batch * mean_context_tokens * self.kv_bytes_per_token
        return float(kv / (self.weight_bytes + kv))

    def per_user_tok_s(self, batch: Number, mean_context_tokens: Number) -> float:
        """Decode speed each sequence sees at ``batch``: 1 / decode step time, tokens/s."""
        return 1.0 / self.decode_step_time(batch, mean_context_tokens)

    def throughput_tok_s(self, batch: Number, mean_context_tokens: Number) -> float:
        """Decode tokens/s of the whole replica at ``batch``: batch / decode step time."""
        return batch / self.decode_step_time(batch, mean_context_tokens)

    def max_batch_at_speed(self, min_tok_s_per_user: float, mean_context_tokens: float) -> int:
        """Largest whole batch whose per-user decode speed is at least ``min_tok_s_per_user``
        (memory limits not applied); 0 when even batch 1 is slower.

        Solved in closed form from the step time ``max(memory, compute)`` ≤ ``1 / floor``:
        ``B ≤ (1/floor − weight_time) / (C × kv_time_per_token)`` and
        ``B ≤ (1/floor) / compute_time_per_token``.

        Raises:
            ValueError: ``min_tok_s_per_user`` ≤ 0.
        """
        if min_tok_s_per_user <= 0:
            raise ValueError("min_tok_s_per_user must be positive")
        budget = 1.0 / min_tok_s_per_user - self.step_overhead_s
        if budget < self._weight_time_s:
            return 0
        by_memory = (budget - self._weight_time_s) / (
            mean_context_tokens * self._kv_time_per_token_s + self.seq_overhead_s
        )
        by_compute = budget / (self._compute_time_per_token_s + self.seq_overhead_s)
        # Guard against float round-off at the boundary: step down until the batch really meets it.
        b = math.floor(min(by_memory, by_compute) * (1 + 1e-12))
        while b > 0 and self.per_user_tok_s(b, mean_context_tokens) < min_tok_s_per_user:
            b -= 1
        return max(b, 0)
