"""Signals: Prometheus access and per-engine metric profiles. The only place PromQL lives."""

from llmscale.signals.snapshot import SignalSnapshot

__all__ = ["SignalSnapshot"]
