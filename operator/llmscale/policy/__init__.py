"""The scaling policy: pure functions from (spec, signal history, pool state, memory, now) to a
:class:`Decision`. No I/O and no clock; the operator and the simulator run the same code.

See :func:`decide` for the algorithm, :mod:`llmscale.policy.clamps` for its clamps and
``docs/policy.md`` for every reason and condition.
"""

from llmscale.policy.core import FALLBACK_KV_CACHE_TARGET, decide, headroom_replicas, kv_cache_target
from llmscale.policy.history import (
    append_snapshot,
    history_seconds,
    record_snapshot,
    slim_snapshot,
    trim_history,
)
from llmscale.policy.leadtime import LeadTime, lead_time
from llmscale.policy.types import (
    CapacityCorrection,
    Clamped,
    ConditionResult,
    Decision,
    PolicyMemory,
    PoolState,
    RateSeries,
    Reason,
    SeasonalHistory,
)
from llmscale.policy.windows import (
    batch_window_open,
    describe_window,
    local_time,
    open_interval,
    scheduled_minimum,
)

__all__ = [
    "FALLBACK_KV_CACHE_TARGET",
    "CapacityCorrection",
    "Clamped",
    "ConditionResult",
    "Decision",
    "LeadTime",
    "PolicyMemory",
    "PoolState",
    "RateSeries",
    "Reason",
    "SeasonalHistory",
    "append_snapshot",
    "batch_window_open",
    "decide",
    "describe_window",
    "headroom_replicas",
    "history_seconds",
    "kv_cache_target",
    "lead_time",
    "local_time",
    "open_interval",
    "record_snapshot",
    "scheduled_minimum",
    "slim_snapshot",
    "trim_history",
]
