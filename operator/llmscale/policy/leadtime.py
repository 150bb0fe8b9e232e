"""Lead time: how long a replica asked for now takes to serve, measured from the pods themselves.

A replica asked for now is Ready one cold start later (weights read, kernels compiled, CUDA graphs
captured), so the warm headroom and the forecast look that far ahead. ``spec.headroom.coldStartSeconds``
is the user's estimate; once pods have started, their own creation → Ready durations replace it:
:func:`lead_time` is the 90th percentile of the recent ones (one slow node should not set the
headroom, nine in ten starts should be covered by it).

Pure: durations in, seconds out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["COLD_START_QUANTILE", "COLD_START_SAMPLES", "LeadTime", "cold_start_p90", "lead_time"]

#: The quantile of the measured cold starts taken as the lead time: 0.9.
COLD_START_QUANTILE = 0.9

#: How many recent cold starts a pool's lead time is measured over (the shell keeps at most these):
#: 20, enough for a P90 with two samples above it, few enough to follow a new node type within a day.
COLD_START_SAMPLES = 20


@dataclass(frozen=True, slots=True)
class LeadTime:
    """A pool's lead time and where it came from.

    Attributes:
        seconds: the lead time, seconds.
        measured: how many measured cold starts it is the P90 of (0: the configured prior).
    """

    seconds: float
    measured: int = 0

    def describe(self) -> str:
        """One phrase for a reason line, e.g. ``lead time 312 s (P90 of 7 measured cold starts)``."""
        if self.measured:
            return f"lead time {self.seconds:.0f} s (P90 of {self.measured} measured cold starts)"
        return f"lead time {self.seconds:.0f} s (spec.headroom.coldStartSeconds; no cold start measured yet)"


def cold_start_p90(measured_s: Sequence[float]) -> tuple[float, int] | None:
    """Return the P90 of a pool's recent measured cold starts and how many it is taken over.

    The one definition of a measured cold start figure: the policy's lead time (:func:`lead_time`)
    and ``status.pools.<pool>.coldStartP90Seconds`` (:mod:`llmscale.controller.state.coldstart`) both
    come from here, so the two never disagree on the same starts.

    Args:
        measured_s: creation → Ready durations, seconds, oldest first; only the last
            :data:`COLD_START_SAMPLES` count, and values that are not finite and non-negative are
            ignored (a clock skew between nodes can make one negative).

    Returns:
        ``(seconds, count)``, the :data:`COLD_START_QUANTILE` quantile with numpy's linear
        interpolation (``[280, 300, 310, 900]`` → 717 s: 310 + 0.7 × (900 − 310)); ``None`` when
        no valid value is left.
    """
    valid = [float(x) for x in measured_s[-COLD_START_SAMPLES:] if math.isfinite(x) and x >= 0]
    if not valid:
        return None
    return float(np.quantile(np.asarray(valid), COLD_START_QUANTILE)), len(valid)


def lead_time(measured_s: Sequence[float], prior_s: float) -> LeadTime:
    """Return the lead time of a pool: the P90 of its recent measured cold starts, else the prior.

    Args:
        measured_s: creation → Ready durations of the pool's recent pods, seconds, oldest first
            (:func:`cold_start_p90` says which count).
        prior_s: ``spec.headroom.coldStartSeconds``, used while nothing is measured.

    Returns:
        A :class:`LeadTime` (seconds). E.g. ``[280, 300, 310, 900]`` → 717 s; ``[]`` with prior
        300 → 300 s.
    """
    p90 = cold_start_p90(measured_s)
    if p90 is None:
        return LeadTime(max(float(prior_s), 0.0), 0)
    return LeadTime(*p90)
