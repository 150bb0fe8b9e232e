"""The headline numbers of a pool at a tick: GPU-hours, SLO minutes, goodput, cost, utilisation and
the measured cold start, folded from the pod index, the tick's snapshot and the fleet reader's
judged minutes. Pure (time is an argument); the tick writes the result to status and metrics.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from llmscale.api import LLMDeploymentSpec
from llmscale.controller.indexes import IndexedPod
from llmscale.controller.state.coldstart import ColdStarts
from llmscale.controller.state.gpuledger import GpuLedger, LivePod
from llmscale.controller.state.servicerecord import PoolFigures, ServiceRecord, judge_minute
from llmscale.controller.state.timestamps import rfc3339
from llmscale.signals.minute import MinuteSample
from llmscale.signals.snapshot import SignalSnapshot

__all__ = ["JudgedMinute", "PoolObservation", "observe_pool", "pool_report"]


@dataclass(frozen=True, slots=True)
class JudgedMinute:
    """A minute folded in at this tick: its sample and whether it met the SLO (``None``: not judged)."""

    sample: MinuteSample
    met: bool | None


@dataclass
class PoolObservation:
    """What the operator keeps per pool between ticks for the headline numbers.

    Attributes:
        ledger: GPU-seconds (the part of pods gone is saved in ``status.usageLedger``).
        record: rolling minute and hour sums (memory only).
        cold_starts: the recent starts.
        restored: whether the ledger was read back from status (once per process).
    """

    ledger: GpuLedger = field(default_factory=GpuLedger)
    record: ServiceRecord = field(default_factory=ServiceRecord)
    cold_starts: ColdStarts = field(default_factory=ColdStarts)
    restored: bool = False


def observe_pool(
    obs: PoolObservation,
    *,
    spec: LLMDeploymentSpec,
    pods: Iterable[IndexedPod],
    snapshot: SignalSnapshot | None,
    minutes: Iterable[MinuteSample],
    judged: bool,
    saved_ledger: Mapping[str, Any] | None,
    now: float,
    max_gap_s: float,
) -> tuple[PoolFigures, bool, list[JudgedMinute]]:
    """Fold one tick into ``obs`` and return ``(figures, ledger_changed, minutes_folded)``.

    Args:
        obs: the pool's observation; updated in place.
        spec: the LLMDeployment's spec (SLO, cost, GPU resource name).
        pods: the pool's live pods (the pod index).
        snapshot: the pool's signal snapshot this tick (``None`` when not read).
        minutes: minute samples of the pool from the fleet reader (already folded ones are skipped).
        judged: whether the pool has an SLO (the interactive pool).
        saved_ledger: ``status.usageLedger.<pool>``, read back on the first tick of the process.
        now: seconds since the epoch.
        max_gap_s: longest time between ticks billed at the current GPU count (two ticks).
    """
    changed = False
    if not obs.restored:
        obs.ledger = GpuLedger.from_dict(saved_ledger)
        obs.restored = True
    resource = spec.resources.gpu_resource_name
    pods = list(pods)
    live = {}
    for pod in pods:
        gpus = dict(pod.requests).get(resource, 0.0)
        if gpus > 0 and pod.created_s is not None:
            live[pod.name] = LivePod(pod.created_s, gpus)
    changed = obs.ledger.observe(live, now) or changed
    obs.cold_starts.observe((p.name, p.created_s, p.ready_s) for p in pods)
    folded: list[JudgedMinute] = []
    for sample in sorted(minutes, key=lambda m: m.end_s):
        met = judge_minute(sample, spec.slo.ttft_p95_seconds, spec.slo.itl_p95_seconds) if judged else None
        if obs.record.add_minute(sample, met):
            folded.append(JudgedMinute(sample, met))
    obs.record.add_tick(now, obs.ledger.gpus_now(), snapshot, max_gap_s)
    figures = obs.record.figures(now, gpu_hour_usd=spec.cost.gpu_hour_usd, judged=judged)
    figures = replace(
        figures,
        gpu_hours_24h=obs.ledger.window_s(now) / 3600.0,
        gpu_hours_since_creation=obs.ledger.total_s(now) / 3600.0,
        cold_start_p90_seconds=obs.cold_starts.p90_seconds(),
        cold_starts_measured=len(obs.cold_starts),
        gpus=obs.ledger.gpus_now(),
    )
    return figures, changed, folded


def _sig(value: float | None, digits: int = 3) -> float | None:
    """``value`` to ``digits`` significant digits (``None`` stays ``None``)."""
    if value is None:
        return None
    return float(f"{value:.{digits}g}")


def pool_report(figures: PoolFigures, now: float) -> dict[str, Any]:
    """Return ``status.pools.<pool>`` for ``figures`` in wire format, rounded for people: shares
    to 0.1 point, rates and prices to three significant digits, GPU-hours to 0.01."""
    def rounded(value: float | None, places: int) -> float | None:
        return None if value is None else round(value, places)

    report = {
        "sloAttainment1hPercent": rounded(figures.slo_attainment_1h_percent, 1),
        "sloAttainment24hPercent": rounded(figures.slo_attainment_24h_percent, 1),
        "minutesJudged1h": figures.minutes_judged_1h or None,
        "minutesJudged24h": figures.minutes_judged_24h or None,
        "goodputTokensPerSecond": _sig(figures.goodput_tokens_per_second),
        "tokensPerSecond": _sig(figures.tokens_per_second),
        "gpuHours24h": rounded(figures.gpu_hours_24h, 2),
        "gpuHoursSinceCreation": rounded(figures.gpu_hours_since_creation, 2),
        "usdPerMillionTokens": _sig(figures.usd_per_million_tokens),
        "busyShare": rounded(figures.busy_share, 3),
        "kvCacheUtilizationMean": rounded(figures.kv_cache_utilization_mean, 3),
        "coldStartP90Seconds": rounded(figures.cold_start_p90_seconds, 1),
        "coldStartsMeasured": figures.cold_starts_measured or None,
        "gpus": figures.gpus,
        "asOf": rfc3339(now),
    }
    return {k: v for k, v in report.items() if v is not None}
