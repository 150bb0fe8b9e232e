"""Signals: Prometheus access and per-engine metric profiles. The only place PromQL lives.

- :mod:`.snapshot` — :class:`SignalSnapshot`, what the policy sees (pure).
- :mod:`.profiles` — one module per engine's metric names, and the sorted registry.
- :mod:`.queries` — the PromQL, built from a profile and a pool (pure).
- :mod:`.prometheus` — :class:`PrometheusSignalReader`, the HTTP shell (imported lazily here so
  that pure callers such as the simulator do not load ``requests``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from llmscale.signals.profiles import PROFILES, MetricProfile, get_profile
from llmscale.signals.queries import PoolTarget, SelectorLabels, batched_query, signal_queries
from llmscale.signals.snapshot import SignalSnapshot

if TYPE_CHECKING:
    from llmscale.signals.prometheus import PrometheusSignalReader, ReaderSettings, parse_answer

__all__ = [
    "PROFILES",
    "MetricProfile",
    "PoolTarget",
    "PrometheusSignalReader",
    "ReaderSettings",
    "SelectorLabels",
    "SignalSnapshot",
    "batched_query",
    "get_profile",
    "parse_answer",
    "signal_queries",
]

_LAZY = {"PrometheusSignalReader", "ReaderSettings", "parse_answer"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from llmscale.signals import prometheus

        return getattr(prometheus, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
