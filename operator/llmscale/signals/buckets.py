"""An SLO target against a histogram's buckets: what a p95 read by ``histogram_quantile`` can and
cannot say about it.

``histogram_quantile`` finds the bucket ``(lo, hi]`` where the quantile's rank falls and
interpolates linearly inside it, as if the observations were spread evenly there. The bucket is
exact; the place inside it is a guess. So a p95 compared with a target that is a bucket bound is
exact, and one compared with a target inside a bucket is exact only when it lands outside that
bucket. vLLM's TTFT buckets put the default 2 s SLO inside ``(1, 2.5]``: a minute of 90 requests
at 0.8 s and 10 at 2.4 s reads p95 1.75 s (met; truly 10 % missed), one of 80 at 0.8 s and 20 at
1.2 s reads 2.125 s (breached; truly 1.2 s).

What is certain, from the bucket counts alone (the rank falls in the bucket the quantile lands in):
a p95 at most ``lo`` means at least 95 % of the observations were at most ``lo`` < target — *met*;
a p95 above ``hi`` means more than 5 % were above ``hi`` > target — *missed*; anything in
``(lo, hi]`` is *inside* the interpolation error and can be either. Pure module.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

__all__ = ["Verdict", "WideBucket", "judge_quantile", "scaled", "wide_bucket"]

#: Relative slack of "on a bound" and "at most": ITL's 100 ms is a bound, where the interpolated
#: quantile can land a hair above it in floating point.
_EPS = 1e-9

Verdict = Literal["met", "missed", "inside"]


@dataclass(frozen=True, slots=True)
class WideBucket:
    """The histogram bucket ``(lo, hi]`` an SLO target lies strictly inside, seconds.

    Attributes:
        lo / hi: the bucket's bounds (``hi`` is ``inf`` above the last finite bound).
        target: the SLO target, seconds.
    """

    lo: float
    hi: float
    target: float

    @property
    def error_s(self) -> float:
        """The largest interpolation error of a p95 read in this bucket, seconds: the true
        quantile and the interpolated one both lie in ``(lo, hi]`` (``inf`` for the last bucket)."""
        return self.hi - self.lo

    @property
    def nearest_bound(self) -> float:
        """The bucket bound nearest the target, the stricter one (``lo``) on a tie or when ``hi``
        is ``inf``, never 0 (below the first bound: ``hi``): a target there is judged exactly."""
        if self.lo <= 0.0:
            return self.hi
        if math.isinf(self.hi) or self.target - self.lo <= self.hi - self.target:
            return self.lo
        return self.hi


def _is_bound(target: float, bounds: Sequence[float]) -> bool:
    return any(math.isclose(target, b, rel_tol=_EPS) for b in bounds)


def wide_bucket(target: float, bounds: Sequence[float] | None) -> WideBucket | None:
    """Return the bucket ``target`` lies strictly inside, or ``None`` when it is a bound (judged
    exactly) or the bounds are unknown (``None`` or empty).

    Args:
        target: the SLO target, seconds (> 0).
        bounds: the histogram's finite bucket upper bounds, ascending, seconds (a ``+Inf`` bucket
            follows, and an implicit lower bound of 0 precedes).
    """
    if not bounds or _is_bound(target, bounds):
        return None
    lo = max((b for b in bounds if b < target), default=0.0)
    hi = min((b for b in bounds if b > target), default=math.inf)
    return WideBucket(lo, hi, target)


def judge_quantile(value: float, target: float, bounds: Sequence[float] | None) -> Verdict:
    """Return whether a ``histogram_quantile`` ``value`` certainly met ``target``, certainly
    missed it, or lies inside the interpolation error of the bucket holding the target.

    With the bounds unknown or the target on a bound the comparison is plain (``value <= target``
    is met). Above the last finite bound Prometheus answers that bound itself, so a value equal to
    ``lo`` of a last, infinite bucket is inside too.

    Examples (vLLM's TTFT buckets, target 2 s, bucket ``(1, 2.5]``): 0.9 → met; 1.75 → inside
    (truly 10 % may be above 2 s); 2.125 → inside (truly p95 may be 1.2 s); 3.1 → missed.
    """
    bucket = wide_bucket(target, bounds)
    if bucket is None:
        return "met" if value <= target * (1 + _EPS) else "missed"
    if math.isinf(bucket.hi):
        return "met" if value < bucket.lo * (1 - _EPS) else "inside"
    if value <= bucket.lo * (1 + _EPS):
        return "met"
    if value > bucket.hi * (1 + _EPS):
        return "missed"
    return "inside"


def scaled(bounds: Sequence[float] | None, divisor: float | None) -> tuple[float, ...] | None:
    """The bounds of a quantile divided by ``divisor`` (ITL per token under speculative decoding:
    a per-step p95 in ``(lo, hi]`` over ``k`` tokens a step lies in ``(lo/k, hi/k]``); unchanged
    when ``divisor`` is ``None``."""
    if bounds is None:
        return None
    if divisor is None or not divisor > 0:
        return tuple(bounds)
    return tuple(b / divisor for b in bounds)
