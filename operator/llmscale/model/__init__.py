"""The engine performance model: a roofline model of one LLM inference replica.

Decode step time from bytes read (weights + KV cache) and FLOPs, prefill cost, KV bytes per
token, KV-cache capacity, and GPU and model presets with cited sources. Used by the capacity
planner (:mod:`llmscale.planner`), the mock engine and the simulator. Pure: numbers in, numbers
out, numpy for curves.
"""

from llmscale.model.batch import BatchThroughput, batch_throughput
from llmscale.model.capacity import (
    DEFAULT_SHAPE,
    Burstiness,
    EngineLimits,
    FleetNeed,
    LengthDistribution,
    ReplicaPoint,
    WorkloadShape,
    capacity_per_replica,
    engine_limits,
    fleet_need,
    max_batched_tokens_for_itl,
    replica_point,
)
from llmscale.model.presets import (
    DTYPE_BYTES,
    GPU,
    GPU_PRESETS,
    MODEL_PRESETS,
    ModelArch,
    dtype_bytes,
    estimate_parameters,
)
from llmscale.model.roofline import (
    BLOCK_SIZE_TOKENS,
    DEFAULT_BANDWIDTH_EFFICIENCY,
    DEFAULT_COMPUTE_EFFICIENCY,
    DEFAULT_GPU_MEMORY_UTILIZATION,
    ModelDoesNotFit,
    ReplicaModel,
)

__all__ = [
    "BLOCK_SIZE_TOKENS",
    "DEFAULT_BANDWIDTH_EFFICIENCY",
    "DEFAULT_COMPUTE_EFFICIENCY",
    "DEFAULT_GPU_MEMORY_UTILIZATION",
    "DEFAULT_SHAPE",
    "DTYPE_BYTES",
    "GPU",
    "GPU_PRESETS",
    "MODEL_PRESETS",
    "BatchThroughput",
    "Burstiness",
    "EngineLimits",
    "FleetNeed",
    "LengthDistribution",
    "ModelArch",
    "ModelDoesNotFit",
    "ReplicaModel",
    "ReplicaPoint",
    "WorkloadShape",
    "batch_throughput",
    "capacity_per_replica",
    "dtype_bytes",
    "engine_limits",
    "estimate_parameters",
    "fleet_need",
    "max_batched_tokens_for_itl",
    "replica_point",
]
