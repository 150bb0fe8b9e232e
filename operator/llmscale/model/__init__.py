"""The engine performance model: a roofline model of one LLM inference replica.

Decode step time from bytes read (weights + KV cache) and FLOPs, prefill cost, KV bytes per
token, KV-cache capacity, and GPU and model presets with cited sources. Used by the capacity
planner (:mod:`llmscale.planner`), the mock engine and the simulator. Pure: numbers in, numbers
out, numpy for curves.
"""

from llmscale.model.batch import BatchThroughput, batch_throughput
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
from llmscale.model.slo import SloOperatingPoint, mean_itl_s, slo_operating_point

__all__ = [
    "BLOCK_SIZE_TOKENS",
    "DEFAULT_BANDWIDTH_EFFICIENCY",
    "DEFAULT_COMPUTE_EFFICIENCY",
    "DEFAULT_GPU_MEMORY_UTILIZATION",
    "DTYPE_BYTES",
    "GPU",
    "GPU_PRESETS",
    "MODEL_PRESETS",
    "BatchThroughput",
    "ModelArch",
    "ModelDoesNotFit",
    "ReplicaModel",
    "SloOperatingPoint",
    "batch_throughput",
    "dtype_bytes",
    "estimate_parameters",
    "mean_itl_s",
    "slo_operating_point",
]
