"""Past request rates per pool: the answer to :func:`~llmscale.signals.queries.past_rate_query`.

Pure module: the typed answer, and the split of a ``query_range`` matrix into one grid per pool.
The seasonal forecast (:mod:`llmscale.policy.forecast`) reads these as
:class:`llmscale.policy.types.RateSeries` (the operator converts; signals do not import the policy).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from llmscale.signals.queries import PoolTarget, SelectorLabels

__all__ = ["PastRates", "PastRatesUnread", "past_rates"]


class PastRatesUnread(Exception):
    """A past-rate read got no usable answer; ``why`` says what went wrong (no query URL)."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


@dataclass(frozen=True, slots=True)
class PastRates:
    """One pool's finished-request rate at evenly spaced past instants.

    Attributes:
        start_s: seconds since the epoch of the first value (the range query's ``start``).
        step_s: seconds between values (the range query's ``step``, > 0).
        rates_rps: requests/s at ``start_s + i × step_s``; ``None`` where Prometheus had no sample
            or the value was not a finite, non-negative number.
    """

    start_s: float
    step_s: float
    rates_rps: tuple[float | None, ...]


def past_rates(
    result: Any,
    labels: SelectorLabels,
    pools: Collection[PoolTarget],
    start_s: float,
    end_s: float,
    step_s: float,
) -> dict[PoolTarget, PastRates]:
    """Split a ``query_range`` answer (a matrix) per pool onto the query's grid.

    Args:
        result: ``data.result`` as decoded JSON: a list of ``{"metric": {...}, "values": [[t, "v"], ...]}``.
        labels: the selector label names (``namespace``, deployment, pool) that key the series.
        pools: the pools wanted; series of other pools are ignored.
        start_s / end_s / step_s: the range query's grid, seconds (``step_s`` > 0).

    Returns:
        One :class:`PastRates` per pool of ``pools`` that had a series. A pool with several series
        (a proxy merged answers) is left out rather than guessed.

    Raises:
        PastRatesUnread: ``result`` is not a matrix.
    """
    if not isinstance(result, list):
        raise PastRatesUnread(f"Prometheus answered {type(result).__name__}, not a matrix")
    size = math.floor((end_s - start_s) / step_s + 1e-9) + 1
    wanted = set(pools)
    out: dict[PoolTarget, PastRates] = {}
    seen: set[PoolTarget] = set()
    for item in result:
        if not isinstance(item, Mapping) or not isinstance(item.get("metric"), Mapping):
            continue
        values = item.get("values")
        if not isinstance(values, list):
            raise PastRatesUnread("Prometheus answered a series without values, not a matrix")
        metric = item["metric"]
        target = PoolTarget(
            str(metric.get(labels.namespace, "")),
            str(metric.get(labels.deployment, "")),
            str(metric.get(labels.pool, "")),
        )
        if target not in wanted:
            continue
        if target in seen:
            out.pop(target, None)
            continue
        seen.add(target)
        grid: list[float | None] = [None] * size
        for sample in values:
            try:
                t, value = float(sample[0]), float(sample[1])
            except (TypeError, ValueError, IndexError):
                continue
            i = round((t - start_s) / step_s)
            if 0 <= i < size and math.isfinite(value) and value >= 0:
                grid[i] = value
        out[target] = PastRates(start_s, step_s, tuple(grid))
    return out
