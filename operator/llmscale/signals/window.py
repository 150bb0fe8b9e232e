"""The rate window: derived from the scrape interval, and checked against it.

Pure module: decoded JSON and numbers in, :class:`~llmscale.signals.snapshot.RateWindow` out.

``rate()`` needs at least two samples inside its range, and Prometheus advises a range of at least
four scrape intervals so that one missed scrape does not empty it (Prometheus docs, "Functions —
rate()", and the Prometheus blog "What range should I use with rate()?"). A fixed ``1m`` suits the
usual 15 s scrape; at a 60 s scrape ``rate(x[1m])`` almost never holds two samples and every rate
is empty for ever. So by default the window is ``max(minimum, 4 × scrape interval)``, the interval
read from Prometheus; a window the user sets is kept but checked, and a window too short for the
data is *reported* (``RateWindow.too_short`` and ``problem``), never a silent hold.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from llmscale.signals.queries import SelectorLabels, format_duration, parse_duration
from llmscale.signals.snapshot import RateWindow

__all__ = [
    "ADVISED_INTERVALS",
    "check_samples",
    "choose_window",
    "interval_from_samples",
    "interval_from_targets",
]

#: Scrape intervals a rate window should span (Prometheus's advice; see the module docstring).
ADVISED_INTERVALS = 4
#: Fewest samples ``rate()`` needs in its range.
MIN_SAMPLES = 2


def interval_from_targets(data: Any, labels: SelectorLabels) -> float | None:
    """Return the scrape interval of the engine targets from ``/api/v1/targets``, seconds.

    Args:
        data: the ``data`` object of ``/api/v1/targets`` as decoded JSON
            (``{"activeTargets": [{"labels": {...}, "scrapeInterval": "15s", ...}]}``).
        labels: the selector label names; a target is an engine target when its labels carry a
            non-empty deployment label.

    Returns:
        The longest ``scrapeInterval`` among the engine targets (the window must suit the
        slowest), or ``None`` when there is none or the answer is not understood.
    """
    if not isinstance(data, Mapping) or not isinstance(data.get("activeTargets"), list):
        return None
    longest: float | None = None
    for target in data["activeTargets"]:
        if not isinstance(target, Mapping) or not isinstance(target.get("labels"), Mapping):
            continue
        if not target["labels"].get(labels.deployment):
            continue
        try:
            interval = parse_duration(str(target.get("scrapeInterval", "")))
        except ValueError:
            continue
        longest = interval if longest is None else max(longest, interval)
    return longest


def interval_from_samples(timestamps: Sequence[float]) -> float | None:
    """Return the scrape interval from one series' sample timestamps (seconds), or ``None``.

    The median spacing of consecutive samples: a missed scrape (a double gap) or a restart does
    not move it. ``None`` below two samples.
    """
    gaps = sorted(b - a for a, b in itertools.pairwise(sorted(timestamps)) if b > a)
    if not gaps:
        return None
    return float(statistics.median(gaps))


def choose_window(
    rate_window: str | None,
    min_window_s: float,
    interval_s: float | None,
    interval_source: str,
) -> RateWindow:
    """Return the rate window of a read, and whether the scrape interval lets it work.

    Args:
        rate_window: the window the user set (a PromQL duration), or ``None`` for automatic.
        min_window_s: the shortest automatic window, seconds (60: the steady ``1m`` of a 15 s
            scrape; a shorter window makes the leading signals noisier, not earlier).
        interval_s: the scrape interval, seconds, or ``None`` when unknown.
        interval_source: where ``interval_s`` came from (``set``, ``targets``, ``samples``,
            ``unknown``).

    Returns:
        The window: automatic ``max(min_window_s, 4 × interval_s)`` rounded up to a whole second
        (``min_window_s`` when the interval is unknown), or the one set. ``too_short`` when it
        spans fewer than two intervals (``rate()`` would rarely find two samples); ``problem``
        also when it spans fewer than four.

    Raises:
        ValueError: ``rate_window`` is not a duration.
    """
    auto = rate_window is None
    if rate_window is not None:
        window_s = parse_duration(rate_window)
    elif interval_s is not None:
        window_s = float(math.ceil(max(min_window_s, ADVISED_INTERVALS * interval_s)))
    else:
        window_s = float(math.ceil(min_window_s))
    promql = rate_window if rate_window is not None else format_duration(window_s)
    too_short = False
    problem: str | None = None
    if interval_s is not None:
        advised = format_duration(math.ceil(ADVISED_INTERVALS * interval_s))
        if window_s < MIN_SAMPLES * interval_s:
            too_short = True
            problem = (
                f"rate window {promql} is shorter than two scrape intervals ({interval_s:g} s, from "
                f"{interval_source}): rate() cannot find two samples, so every rate and latency "
                f"quantile is unknown; set the window to at least {advised} or leave it automatic"
            )
        elif window_s < ADVISED_INTERVALS * interval_s:
            problem = (
                f"rate window {promql} spans fewer than {ADVISED_INTERVALS} scrape intervals "
                f"({interval_s:g} s, from {interval_source}): one missed scrape empties it and "
                f"rates are noisy; {advised} or more is advised"
            )
    return RateWindow(
        window_s=window_s,
        promql=promql,
        scrape_interval_s=interval_s,
        interval_source=interval_source if interval_s is not None else "unknown",
        auto=auto,
        too_short=too_short,
        problem=problem,
    )


def check_samples(window: RateWindow, most_samples: float | None) -> RateWindow:
    """Return ``window`` marked too short when the data shows it, where the interval is unknown.

    Args:
        window: the window from :func:`choose_window`.
        most_samples: the most samples any reporting pod's queue-depth series holds in the window,
            or ``None`` when no pod reports.

    With a known interval :func:`choose_window` has decided already (a pod younger than the window
    holds few samples without the window being wrong). Without one, a window in which no pod's
    series holds two samples is too short.
    """
    if window.scrape_interval_s is not None or window.too_short or most_samples is None:
        return window
    if most_samples >= MIN_SAMPLES:
        return window
    return RateWindow(
        window_s=window.window_s,
        promql=window.promql,
        scrape_interval_s=None,
        interval_source="unknown",
        auto=window.auto,
        too_short=True,
        problem=(
            f"rate window {window.promql} holds at most {most_samples:g} sample of any pod's series "
            "(the scrape interval could not be found): rate() needs two, so every rate and latency "
            "quantile is unknown; set a longer window or the scrape interval"
        ),
    )
