"""GPU-hours of a pool from its pods' GPU requests × the time they existed, robust to restarts. Pure.

A pod holds its GPUs from creation (the scheduler reserves them, the node bills them) until it is
gone. The ledger counts, per pool:

- the live pods, from the pod index at each tick: ``gpus × (now − creationTimestamp)``. Nothing of
  them needs saving: after an operator restart the pods are still there with their creation times;
- the pods gone: when a pod seen on one tick is missing on the next, its ``gpus × (gone − created)``
  is added to :attr:`GpuLedger.closed_s` and, split by the hour it was spent in, to
  :attr:`GpuLedger.closed_hours` (the last 25 hours kept). ``gone`` is the tick that first missed it:
  at most one tick late.

Only the second part must survive a restart: it is saved in ``status.usageLedger`` (one small
object per pool) and written with the status — a pod going away changes the pool's counts, which
is written anyway. What is lost: pods deleted while no operator ran, and a pod gone in the last
tick before a crash.

Windows: GPU-hours of the last 24 h add the live pods' time inside the window to the closed
hours that end inside it (the oldest hour counted in proportion), so the figure is exact for live
pods and to the hour for pods gone.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["DAY_S", "GpuLedger", "LivePod"]

DAY_S = 86_400.0
_HOUR_S = 3600.0
#: Hours of closed time kept: the 24 h window plus the hour it starts in.
_KEEP_HOURS = 25


@dataclass(frozen=True, slots=True)
class LivePod:
    """A pod that holds GPUs now: its creation time (seconds since the epoch) and GPU count."""

    created_s: float
    gpus: float


@dataclass
class GpuLedger:
    """GPU-seconds of one pool (see the module docstring).

    Attributes:
        closed_s: GPU-seconds of pods gone, since the LLMDeployment was created.
        closed_hours: ``{hour start (seconds since the epoch): GPU-seconds}`` of pods gone, spent in
            that hour; the last 25 hours.
        live: the pods of the last :meth:`observe`, by name.
    """

    closed_s: float = 0.0
    closed_hours: dict[int, float] = field(default_factory=dict)
    live: dict[str, LivePod] = field(default_factory=dict)

    def observe(self, pods: Mapping[str, LivePod], now: float) -> bool:
        """Fold in the pool's pods at ``now``: a pod of the last call that is missing is closed at
        ``now``. Return whether anything was closed (the saved part changed)."""
        changed = False
        for name, pod in self.live.items():
            if name not in pods:
                self._close(pod, now)
                changed = True
        self.live = dict(pods)
        cutoff = int(now // _HOUR_S * _HOUR_S - (_KEEP_HOURS - 1) * _HOUR_S)
        for hour in [h for h in self.closed_hours if h < cutoff]:
            del self.closed_hours[hour]
            changed = True
        return changed

    def _close(self, pod: LivePod, gone_s: float) -> None:
        start, end = pod.created_s, max(pod.created_s, gone_s)
        self.closed_s += pod.gpus * (end - start)
        start = max(start, end - _KEEP_HOURS * _HOUR_S)
        hour = math.floor(start / _HOUR_S) * _HOUR_S
        while hour < end:
            part = min(end, hour + _HOUR_S) - max(start, hour)
            if part > 0:
                self.closed_hours[int(hour)] = self.closed_hours.get(int(hour), 0.0) + pod.gpus * part
            hour += _HOUR_S

    def gpus_now(self) -> float:
        """GPUs held by the live pods."""
        return sum(p.gpus for p in self.live.values())

    def total_s(self, now: float) -> float:
        """GPU-seconds since the LLMDeployment was created, at ``now``."""
        return self.closed_s + sum(p.gpus * max(0.0, now - p.created_s) for p in self.live.values())

    def window_s(self, now: float, span_s: float = DAY_S) -> float:
        """GPU-seconds in ``(now − span_s, now]`` (live pods exact, pods gone to the hour)."""
        start = now - span_s
        live = sum(p.gpus * max(0.0, now - max(start, p.created_s)) for p in self.live.values())
        closed = 0.0
        for hour, seconds in self.closed_hours.items():
            if hour + _HOUR_S <= start:
                continue
            closed += seconds * min(1.0, (hour + _HOUR_S - start) / _HOUR_S)
        return live + closed

    # -- status.usageLedger -------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """The saved part, for ``status.usageLedger.<pool>``: ``{"closedGpuSeconds": s,
        "closedHours": [[hour_start_s, gpu_seconds], ...]}`` (rounded to the second)."""
        return {
            "closedGpuSeconds": round(self.closed_s, 1),
            "closedHours": [[h, round(s, 1)] for h, s in sorted(self.closed_hours.items())],
        }

    @classmethod
    def from_dict(cls, data: object) -> GpuLedger:
        """Read :meth:`to_dict`'s output back; anything unreadable is dropped (the ledger then
        undercounts the pods gone before, never fails)."""
        if not isinstance(data, Mapping):
            return cls()
        closed = data.get("closedGpuSeconds")
        ledger = cls(closed_s=float(closed) if isinstance(closed, int | float) and math.isfinite(closed) else 0.0)
        for pair in data.get("closedHours") or ():
            if (isinstance(pair, list | tuple) and len(pair) == 2
                    and all(isinstance(v, int | float) and not isinstance(v, bool) for v in pair)):
                ledger.closed_hours[int(pair[0])] = float(pair[1])
        return ledger
