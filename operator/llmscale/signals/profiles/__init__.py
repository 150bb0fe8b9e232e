"""Engine metric profiles: one module per engine, one sorted registry.

``spec.engine.metricsProfile`` (or the engine's own default, see
:meth:`llmscale.api.EngineSpec.profile`) names the profile; :func:`get_profile` returns it.
"""

from __future__ import annotations

from types import MappingProxyType

from llmscale.signals.profiles import sglang, vllm, vllm_legacy
from llmscale.signals.profiles.base import MetricProfile

__all__ = ["PROFILES", "MetricProfile", "get_profile"]

#: Every known profile by name, sorted by name. Read-only.
PROFILES: MappingProxyType[str, MetricProfile] = MappingProxyType(
    {p.name: p for p in sorted((sglang.PROFILE, vllm.PROFILE, vllm_legacy.PROFILE), key=lambda p: p.name)}
)


def get_profile(name: str) -> MetricProfile:
    """Return the metric profile called ``name``.

    Raises:
        KeyError: no profile has that name; the message lists the known ones.
    """
    try:
        return PROFILES[name]
    except KeyError:
        raise KeyError(f"Unknown metric profile {name!r}; known: {', '.join(PROFILES)}") from None
