"""The arrival rate one lead time ahead: seasonal (a day and a week ago) and the recent trend.

A replica asked for now serves one lead time later (:mod:`llmscale.policy.leadtime`), so the pool
must be sized for the rate *then*: two minutes into the morning ramp is too late to start it. The
forecast multiplies today's rate by the growth seen over the same stretch of time a period ago
(multiplicative seasonality, as Holt–Winters models it: a day that runs at 80 % of yesterday still
grows like yesterday did), for a day and for a week, and adds the recent trend when
``spec.headroom.growthFactor`` asks for it. It only ever raises the rate: a fall is left to the
scale-down stabilisation window.

Pure: rates in, a rate out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from llmscale.policy.types import RateSeries, SeasonalHistory
from llmscale.signals.snapshot import SignalSnapshot

__all__ = ["SEASONAL_SMOOTHING_S", "Forecast", "forecast_rate", "seasonal_growth", "trend_slope"]

#: Seconds averaged on each side of a seasonal ratio (the rate before "the same time" a period ago,
#: and the rate one lead time after it): five minutes, so one unusual minute a day ago cannot set
#: today's pool.
SEASONAL_SMOOTHING_S = 300.0

# A past rate below one request a minute says nothing about growth.
_MIN_BASE_RPS = 1.0 / 60.0

# Fewest per-minute means for a trend, and the bin width (the rate window).
_MIN_TREND_POINTS = 3
_TREND_BIN_S = 60.0


@dataclass(frozen=True, slots=True)
class Forecast:
    """The arrival rate one lead time ahead.

    Attributes:
        rate_rps: requests/s forecast for ``now + lead``, ≥ the current rate.
        seasonal_growth: the growth ratio a day or a week ago over the same stretch (the larger);
            ``None`` when no period's history covers it.
        trend_rps: what the trend adds, requests/s (0 when off or falling).
        line: the phrase for the reason line.
    """

    rate_rps: float
    seasonal_growth: float | None
    trend_rps: float
    line: str


def seasonal_growth(series: RateSeries | None, period_s: float, now: float, lead_s: float) -> float | None:
    """The growth ratio one ``period_s`` ago: mean rate over ``[t + lead − w, t + lead]`` over the
    mean over ``[t − w, t]``, ``t = now − period``, ``w`` = :data:`SEASONAL_SMOOTHING_S`.

    Returns:
        The ratio, or ``None`` when the series is missing, does not cover both stretches, or the
        earlier rate is under one request a minute.
    """
    if series is None:
        return None
    t = now - period_s
    w = SEASONAL_SMOOTHING_S
    base = series.mean(t - w, t)
    ahead = series.mean(t + lead_s - w, t + lead_s)
    if base is None or ahead is None or base < _MIN_BASE_RPS:
        return None
    ratio = ahead / base
    return ratio if math.isfinite(ratio) else None


def trend_slope(history: Sequence[SignalSnapshot], now: float, span_s: float) -> float | None:
    """Least-squares slope (requests/s per second) of the per-minute mean finished-request rate over
    the last ``span_s`` seconds; ``None`` with fewer than :data:`_MIN_TREND_POINTS` minutes spanning
    half of it."""
    bins: dict[int, list[tuple[float, float]]] = {}
    for s in history:
        rate = s.workload.request_rate
        if rate is None or not math.isfinite(rate) or rate < 0 or not now - span_s <= s.observed_at <= now:
            continue
        bins.setdefault(int((now - s.observed_at) // _TREND_BIN_S), []).append((s.observed_at, min(rate, 1e12)))
    means = sorted((sum(p[0] for p in b) / len(b), sum(p[1] for p in b) / len(b)) for b in bins.values())
    if len(means) < _MIN_TREND_POINTS or means[-1][0] - means[0][0] < span_s / 2:
        return None
    t = np.array([m[0] - means[0][0] for m in means])
    y = np.array([m[1] for m in means])
    slope = float(np.polyfit(t, y, 1)[0])
    return slope if math.isfinite(slope) else None


def forecast_rate(
    rate_rps: float,
    history: Sequence[SignalSnapshot],
    seasonal: SeasonalHistory | None,
    now: float,
    lead_s: float,
    growth_factor: float,
) -> Forecast:
    """Return the arrival rate one lead time ahead.

    ``max(λ, λ × max(growth a day ago, growth a week ago), λ + growthFactor × slope × lead)``:
    today's rate ``λ`` grown as it grew over the same stretch a period ago, and by the recent trend
    (the least-squares slope of the last lead time's per-minute rates) when ``growth_factor`` > 0.

    E.g. λ = 20 requests/s at 07:55, yesterday 10 at 07:50–07:55 and 12.5 at 07:55–08:00 (lead 300 s):
    growth 1.25, forecast 25 requests/s.

    Args:
        rate_rps: the arrival rate now, requests/s.
        history: snapshots (for the trend), oldest first.
        seasonal: the rates a day and a week ago, or ``None``.
        now: seconds since the epoch.
        lead_s: the lead time, seconds.
        growth_factor: ``spec.headroom.growthFactor`` (0: no trend).
    """
    lam = max(rate_rps, 0.0)
    growth = [
        g
        for g in (
            seasonal_growth(seasonal.day, seasonal.day_offset_s, now, lead_s) if seasonal else None,
            seasonal_growth(seasonal.week, seasonal.week_offset_s, now, lead_s) if seasonal else None,
        )
        if g is not None
    ]
    best = max(growth) if growth else None
    seasonal_rate = lam * best if best is not None and best > 1 else lam
    trend = 0.0
    if growth_factor > 0 and lead_s > 0:
        slope = trend_slope(history, now, lead_s)
        if slope is not None and slope > 0:
            trend = growth_factor * slope * lead_s
    rate = max(lam, seasonal_rate, lam + trend)
    parts = []
    if best is not None:
        parts.append(f"× {best:.2f} as a period ago over the same {lead_s:.0f} s")
    else:
        parts.append("no seasonal history")
    if growth_factor > 0:
        parts.append(f"trend {trend:+.2f}/s")
    return Forecast(rate, best, trend, f"forecast {rate:.2f} requests/s in {lead_s:.0f} s ({', '.join(parts)})")
