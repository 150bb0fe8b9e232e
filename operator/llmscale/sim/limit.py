"""A limit that is a limit (issue 27, item 5): per minute, the fewest replicas with which the
simulator itself meets that minute's SLO.

The oracle (:class:`~llmscale.sim.baselines.Oracle`) sizes each minute from a steady-state
calibration, and a policy can beat it by a few per cent, so it is not a lower bound. The limit
here is searched in the simulator: for ``n`` = ``low`` … ``high`` the whole trace runs on a static
fleet of ``n`` replicas, and minute ``m`` needs the smallest ``n`` whose run met it
(:func:`llmscale.sim.report.minute_scores`). Clairvoyant and a cold start ahead: the ``limit``
policy is the oracle's rule on these needs (every replica asked for one cold start before its
minute, kept while it is needed again within one), so its GPU-hours are what the limit costs.

A static fleet too small for an earlier minute carries that minute's backlog into the next ones,
so after a fall the searched need can read higher than a steady state would: the limit errs on the
generous side there, never below what the simulator can do at that size.

The ``reactive`` reference is the same needs without the clairvoyance: each minute's need known
as that minute begins and asked for at once, so its replicas land a cold start later. What it
misses after a step is what a cold start costs any policy that learns of the step when it comes.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from numpy.typing import NDArray

from llmscale.sim.baselines import Oracle, StaticReplicas
from llmscale.sim.fleet import SimResult, simulate
from llmscale.sim.report import minute_scores
from llmscale.sim.runner import Scenario

__all__ = ["Reactive", "limit_policy", "minute_limit", "reactive_policy"]


def _static_run(sc: Scenario, n: int) -> SimResult:
    fleet = sc.fleet_config(n)
    return simulate(
        sc.trace,
        StaticReplicas(n),
        sc.model,
        engine=sc.engine,
        fleet=fleet,
        context_limit_tokens=sc.spec.model.context_limit_tokens,
        itl_slo_s=sc.spec.slo.itl_p95_seconds,
    )


def minute_limit(
    sc: Scenario, low: int = 1, high: int | None = None, progress: Callable[[int], None] | None = None
) -> tuple[NDArray[np.int64], int]:
    """Return ``(need, unmet)``: per minute of the trace (from its start), the fewest replicas whose
    static run met that minute, and how many minutes no size up to ``high`` met (their need is
    ``high``).

    Args:
        sc: the scenario (its trace, engine, SLO).
        low: the smallest size tried (the search starts there), ≥ 1.
        high: the largest; default ``spec.replicas.max``. The search stops at the first size that
            meets every minute.
        progress: called with each size as it starts.

    Raises:
        ValueError: ``low`` < 1 or ``high`` < ``low``.
    """
    high = sc.spec.replicas.max if high is None else high
    if low < 1 or high < low:
        raise ValueError("need 1 ≤ low ≤ high")
    need: NDArray[np.int64] | None = None
    for n in range(low, high + 1):
        if progress is not None:
            progress(n)
        meets, _, _, _ = minute_scores(_static_run(sc, n), sc.spec.slo)
        if need is None:
            need = np.full(meets.shape, -1, dtype=np.int64)
        m = min(len(need), len(meets))
        newly = (need[:m] < 0) & meets[:m]
        need[:m][newly] = n
        if (need >= 0).all():
            break
    assert need is not None
    unmet = int((need < 0).sum())
    need[need < 0] = high
    return need, unmet


def limit_policy(sc: Scenario, need: NDArray[np.int64]) -> Oracle:
    """The ``limit`` policy: the oracle's rule (a cold start ahead) on the searched needs."""
    r = sc.spec.replicas
    lim = Oracle(need, sc.trace.start_s, sc.spec.headroom.cold_start_seconds, r.min, r.max,
                 tick_s=float(sc.spec.scaling.tick_seconds))
    lim.name = "limit"  # type: ignore[misc]
    return lim


class Reactive(Oracle):
    """The searched needs without clairvoyance: at ``t`` it asks for the largest need of the
    minutes from one cold start back to the minute holding ``t`` (it learns a minute's need as
    the minute begins, and keeps a replica for a cold start after its need has passed, as the
    oracle keeps one that is needed again within a cold start). A reference, not a bound: a policy
    that adds capacity for the backlog its late replicas land on can meet more minutes."""

    name = "reactive"
    reason = "reactive: each minute's need known as the minute begins"

    def desired_at(self, t: float) -> int:
        """Replicas it asks for at ``t`` (before bounds)."""
        a = min(max(int((t - self.start_s) // 60.0), 0), len(self.need) - 1)
        back = max(a - math.ceil(self.cold_start_s / 60.0), 0)
        return int(self.need[back : a + 1].max())


def reactive_policy(sc: Scenario, need: NDArray[np.int64]) -> Oracle:
    """The ``reactive`` reference on the searched needs (:class:`Reactive`)."""
    r = sc.spec.replicas
    return Reactive(need, sc.trace.start_s, sc.spec.headroom.cold_start_seconds, r.min, r.max,
                    tick_s=float(sc.spec.scaling.tick_seconds))
