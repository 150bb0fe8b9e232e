"""Signals: Prometheus access and per-engine metric profiles. The only place PromQL lives.

- :mod:`.snapshot` — :class:`SignalSnapshot` (with :class:`PodSignals`, :class:`WorkloadMix`,
  :class:`RateWindow`), what the policy sees (pure).
- :mod:`.profiles` — one module per engine's metric names, and the sorted registry.
- :mod:`.queries` — the PromQL, built from a profile (pure): fleet-wide, a constant number of
  queries per tick.
- :mod:`.config` — :class:`ReaderSettings` and :class:`PrometheusAuth`, the typed settings (pure).
- :mod:`.window` — the rate window from the scrape interval (pure).
- :mod:`.answer`, :mod:`.assemble` — answers split per pool and pod, then one snapshot per pool
  (pure).
- :mod:`.pastrates` — :class:`PastRates`, each pool's request rate a day or a week ago, split from
  a range query (pure; the seasonal forecast's history).
- :mod:`.auth` — credentials and TLS for ``requests``.
- :mod:`.prometheus` — :class:`PrometheusSignalReader`, the HTTP shell (imported lazily here so
  that pure callers such as the simulator do not load ``requests``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from llmscale.signals.config import PrometheusAuth, ReaderSettings
from llmscale.signals.profiles import PROFILES, MetricProfile, get_profile
from llmscale.signals.queries import PoolRequest, PoolTarget, SelectorLabels, fleet_queries, signal_queries
from llmscale.signals.snapshot import PodSignals, RateWindow, SignalSnapshot, WorkloadMix

if TYPE_CHECKING:
    from llmscale.signals.prometheus import PrometheusSignalReader

__all__ = [
    "PROFILES",
    "MetricProfile",
    "PodSignals",
    "PoolRequest",
    "PoolTarget",
    "PrometheusAuth",
    "PrometheusSignalReader",
    "RateWindow",
    "ReaderSettings",
    "SelectorLabels",
    "SignalSnapshot",
    "WorkloadMix",
    "fleet_queries",
    "get_profile",
    "signal_queries",
]

_LAZY = {"PrometheusSignalReader"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from llmscale.signals import prometheus

        return getattr(prometheus, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
