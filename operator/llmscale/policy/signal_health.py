"""What a snapshot says about the signals themselves: which signals the policy uses are unknown and
why, the latency guard switched off by a missing histogram, stalled engines, and whether the rate
window fits the scrape interval. Pure: no I/O, no clock.

:func:`~llmscale.policy.decide` words ``MetricsAvailable`` with :func:`why_unknown` and
:func:`latency_guard_off`; the operator adds two conditions of its own from the same snapshot,
``EnginesStalled`` (:func:`engines_stalled_condition`) and ``RateWindowFits``
(:func:`rate_window_condition``), and the policy holds scale-downs while an engine hangs
(:func:`llmscale.policy.clamps.no_scale_down_while_stalled`). docs/policy.md lists every reason.
"""

from __future__ import annotations

from collections.abc import Sequence

from llmscale.policy.types import ConditionResult, Reason
from llmscale.signals.snapshot import SignalSnapshot

__all__ = [
    "LATENCY_WINDOW_S",
    "SIGNAL_FIELDS",
    "WAKE_SIGNAL",
    "engines_stalled_condition",
    "latency_guard_off",
    "latency_window_s",
    "rate_window_condition",
    "why_unknown",
]

#: Seconds of traffic the lagging p95 latencies summarise when the snapshot does not say: the
#: signals' default rate window (``1m``; the simulator's p95 looks back 60 s too).
LATENCY_WINDOW_S = 60.0

#: The name the policy gives the wake query's value (``spec.scaling.wake``) in reasons and conditions.
WAKE_SIGNAL = "wake query"

#: Snapshot field of each signal the policy uses, by the name its reason lines give it.
SIGNAL_FIELDS: dict[str, str] = {
    "queue depth": "queue_depth",
    "KV-cache utilisation": "kv_cache_utilization",
    "preemption rate": "preemption_rate",
    "TTFT p95": "ttft_p95_s",
    "ITL p95": "itl_p95_s",
    WAKE_SIGNAL: "wake_demand",
}


def _reason(snap: SignalSnapshot | None, name: str) -> str:
    """Why one signal (by its reason-line name) is unknown in ``snap``."""
    if snap is None:
        return "no snapshot"
    field = SIGNAL_FIELDS.get(name)
    if field is not None and field in snap.unknown:
        return snap.unknown[field]
    if name == "KV-cache utilisation" and snap.kv_cache_utilization is not None:
        # Known, but a mean over no ready replica says nothing about how many are needed.
        return "a mean over no ready replica"
    if field is not None and getattr(snap, field) is not None:
        return "a value that is not a measurement (negative)"
    return snap.error or "no value"


def why_unknown(snap: SignalSnapshot | None, names: Sequence[str]) -> str:
    """Return each unknown signal of ``names`` with its reason, signals of one reason together.

    E.g. ``queue depth, KV-cache utilisation unknown: no pod of ml/chat pool interactive exports
    vllm:num_requests_waiting; preemption rate unknown: rate window 10s is shorter than two scrape
    intervals …``. The reasons are the snapshot's own (``SignalSnapshot.unknown``, else its
    ``error``).

    Args:
        snap: the snapshot judged (``None``: none yet).
        names: the signals' reason-line names (keys of :data:`SIGNAL_FIELDS`).
    """
    by_reason: dict[str, list[str]] = {}
    for name in names:
        by_reason.setdefault(_reason(snap, name), []).append(name)
    return "; ".join(f"{', '.join(group)} unknown: {why}" for why, group in by_reason.items())


def partial_answer(snap: SignalSnapshot, ready_pods: int) -> str | None:
    """Return why the snapshot's sums may be partial, or ``None``.

    Partial: Prometheus answered with ``warnings`` (Thanos or Mimir with partial response on: HTTP
    200, ``store B unavailable``, series of some pods missing), or fewer pods reported than are
    Ready (``replicas_reporting`` + the stalled pods left out ``< ready_pods``): a sum over 4 of 8 pods reads as half the load, and
    a pool scaled down on it pays cold starts when the store comes back. Such a snapshot scales up
    on what it shows, never down. A sleeping engine (``SignalSnapshot.sleeping_pods``) is left out
    of the sums as well: it is not room (its empty queue) and not idle capacity to remove, so a
    pool with one scales up on its awake pods' signals and never down.
    """
    parts = []
    if snap.warnings:
        parts.append(f"Prometheus answered with warnings ({'; '.join(snap.warnings)[:300]})")
    # A stalled engine's pod is left out on purpose (and holds the pool itself: StalledPods).
    if snap.sleeping_pods:
        parts.append(f"{len(snap.sleeping_pods)} pod(s) asleep ({', '.join(snap.sleeping_pods[:5])}): "
                     "neither capacity nor idle replicas to remove")
    # Failing pods are not counted: the tick judged them failed, so they are not in ``ready_pods``.
    if 0 < snap.replicas_reporting + len(snap.stalled_pods) + len(snap.sleeping_pods) < ready_pods:
        parts.append(f"{snap.replicas_reporting} of {ready_pods} Ready pods reported")
    return " and ".join(parts) if parts else None


def latency_guard_off(snap: SignalSnapshot) -> str | None:
    """Return why the latency guard cannot judge this snapshot, or ``None`` when it can.

    A p95 that is unknown only because the window saw no request (``SignalSnapshot.quiet``) is not
    a fault: an idle pool has no TTFT, and there is nothing to guard. Any other unknown p95 (no
    histogram exported or kept, a failed query, a window too short) switches the guard off, and the
    ``MetricsAvailable`` condition says so instead of ``MetricsFresh``.
    """
    missing = [
        name
        for name in ("TTFT p95", "ITL p95")
        if getattr(snap, SIGNAL_FIELDS[name]) is None and SIGNAL_FIELDS[name] not in snap.quiet
    ]
    if not missing:
        return None
    return f"{why_unknown(snap, missing)}: the latency guard is off"


def latency_window_s(snap: SignalSnapshot | None) -> float:
    """Return the seconds of traffic the snapshot's p95 latencies summarise: its rate window
    (``SignalSnapshot.window.window_s``, e.g. 240 s at a 60 s scrape), else :data:`LATENCY_WINDOW_S`.

    A replica added less than this long ago cannot show in the p95 yet, so the latency guard
    waits that long after a scale-up.
    """
    if snap is not None and snap.window is not None:
        return snap.window.window_s
    return LATENCY_WINDOW_S


def engines_stalled_condition(snap: SignalSnapshot | None) -> ConditionResult:
    """Return the ``EnginesStalled`` condition of the interactive pool.

    - ``True/StalledPods`` naming each stalled pod: its engine keeps serving ``/metrics`` with
      busy gauges but generates nothing. Its signals are left out of every aggregate, so it never
      drives a scale-up; it still counts towards the pool's replicas (llmscale does not replace
      it: its liveness probe is what restarts a hung engine), and no replica is removed while it
      hangs (Kubernetes might remove a healthy pod and keep the hung one).
    - ``False/NoStalledPods`` when the stall check ran and found none.
    - ``Unknown/StallCheckOff`` when it could not run: no snapshot, no rate window, the scrape
      interval unknown (the check needs it to count samples) or the window too short.
    """
    if snap is not None and snap.stalled_pods:
        window = snap.window.promql if snap.window is not None else "rate"
        pods = ", ".join(snap.stalled_pods)
        return ConditionResult(
            "True",
            Reason.StalledPods,
            f"pod {pods}: running requests stayed above 0 through the {window} window while no token "
            "was generated (the engine hangs but serves /metrics); its signals are left out, it never "
            "drives a scale-up and no replica is removed while it hangs",
        )
    if snap is None or snap.window is None:
        return ConditionResult(
            "Unknown", Reason.StallCheckOff, "no rate window was reported with the signals: stalls cannot be told"
        )
    if snap.window.scrape_interval_s is None:
        return ConditionResult(
            "Unknown",
            Reason.StallCheckOff,
            "the scrape interval is unknown (not in Prometheus's targets API, no sample spacing): stalls "
            "cannot be told; set --prometheus-scrape-interval",
        )
    if snap.window.too_short:
        return ConditionResult(
            "Unknown", Reason.StallCheckOff, f"the rate window {snap.window.promql} is too short: stalls cannot be told"
        )
    return ConditionResult(
        "False", Reason.NoStalledPods, f"no reporting pod hangs (checked over the {snap.window.promql} window)"
    )


def rate_window_condition(snap: SignalSnapshot | None) -> ConditionResult:
    """Return the ``RateWindowFits`` condition: whether every ``rate()`` window can hold its samples.

    - ``True/WindowFits``: the window spans at least four scrape intervals (Prometheus's advice).
    - ``False/WindowTooShort``: fewer than two intervals (or, the interval unknown, no series held
      two samples): ``rate()`` is empty, so the preemption rate and the latency p95s are unknown,
      and ``MetricsAvailable`` names them with the same reason. A condition, not a silent hold.
    - ``False/WindowBelowAdvice``: two to four intervals: one missed scrape empties it.
    - ``Unknown/ScrapeIntervalUnknown``: the interval could not be read, so the window is unchecked.
    """
    window = snap.window if snap is not None else None
    if window is None:
        return ConditionResult(
            "Unknown", Reason.ScrapeIntervalUnknown, "no rate window was reported with the signals"
        )
    if window.too_short:
        return ConditionResult("False", Reason.WindowTooShort, window.problem or f"rate window {window.promql} too short")
    if window.problem:
        return ConditionResult("False", Reason.WindowBelowAdvice, window.problem)
    if window.scrape_interval_s is None:
        return ConditionResult(
            "Unknown",
            Reason.ScrapeIntervalUnknown,
            f"rate window {window.promql}; the scrape interval could not be read (no targets API, no sample "
            "spacing), so it is unchecked: set --prometheus-scrape-interval",
        )
    how = "automatic" if window.auto else "set"
    return ConditionResult(
        "True",
        Reason.WindowFits,
        f"rate window {window.promql} ({how}) spans {window.window_s / window.scrape_interval_s:g} scrape "
        f"intervals of {window.scrape_interval_s:g} s (from {window.interval_source})",
    )
