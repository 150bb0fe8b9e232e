"""The headline numbers' pure parts: cold start, GPU ledger, SLO minutes, and when status is written."""

from __future__ import annotations

import copy
import dataclasses
import itertools
import math

import pytest

from llmscale.controller.memory import ObjectMemory
from llmscale.controller.observe import pool_report
from llmscale.controller.state.coldstart import ColdStarts, pod_start_seconds
from llmscale.controller.state.gpuledger import GpuLedger, LivePod
from llmscale.controller.state.servicerecord import ServiceRecord, judge_minute
from llmscale.controller.status.statuspatch import (
    FIGURES_SETTLE_SECONDS,
    figures_material,
    memory_material,
    status_patch,
)
from llmscale.policy.leadtime import lead_time
from llmscale.policy.types import PolicyMemory
from llmscale.signals.minute import MinuteSample
from llmscale.signals.snapshot import CarriedRead, PodSignals, SignalSnapshot

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z, a whole hour


# -- cold start -----------------------------------------------------------------------------------


def test_cold_start_is_creation_to_ready() -> None:
    created, ready = pod_start_seconds(
        {"creationTimestamp": "2026-01-01T00:00:00Z"},
        {"conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:03:05Z"}]},
    )
    assert (created, ready) == (T0, T0 + 185)
    assert pod_start_seconds({"creationTimestamp": "2026-01-01T00:00:00Z"},
                             {"conditions": [{"type": "Ready", "status": "False"}]})[1] is None


def _cold_starts_of_four_pods() -> ColdStarts:
    starts = ColdStarts(keep=3)
    starts.observe([("a", T0, T0 + 100), ("b", T0, T0 + 200), ("c", T0, None), ("d", None, T0)])
    starts.observe([("a", T0, T0 + 999)])  # the same pod flapping Ready counts with its first start
    return starts


def test_cold_starts_count_each_pod_once() -> None:
    starts = _cold_starts_of_four_pods()
    assert len(starts) == 2 and starts.p90_seconds() == pytest.approx(190)  # 100 + 0.9 × (200 − 100)


def test_cold_starts_keep_the_newest() -> None:
    starts = _cold_starts_of_four_pods()
    starts.observe([("e", T0 + 10, T0 + 310), ("f", T0 + 20, T0 + 420)])
    assert sorted(starts.starts) == ["b", "e", "f"]  # "a" was the oldest Ready
    assert starts.p90_seconds() == pytest.approx(380)


def test_no_cold_start_has_no_p90() -> None:
    assert ColdStarts().p90_seconds() is None


@pytest.mark.parametrize("seconds", [[185.0], [280.0, 300.0, 310.0, 900.0], [float(s) for s in range(100, 3100, 100)]])
def test_the_status_cold_start_agrees_with_the_policy_lead_time(seconds: list[float]) -> None:
    """``coldStartP90Seconds`` and ``leadTimeSeconds`` are one figure on the same starts (one
    definition, :func:`llmscale.policy.leadtime.cold_start_p90`), also past the sample count."""
    starts = ColdStarts()
    starts.observe((f"pod-{i}", T0 + i, T0 + i + s) for i, s in enumerate(seconds))
    assert starts.p90_seconds() == pytest.approx(lead_time(seconds, prior_s=180.0).seconds)


# -- GPU ledger -----------------------------------------------------------------------------------


def test_gpu_hours_survive_a_restart_through_the_saved_ledger() -> None:
    ledger = GpuLedger()
    ledger.observe({"a": LivePod(T0, 4), "b": LivePod(T0, 4)}, T0)
    assert ledger.observe({"a": LivePod(T0, 4), "b": LivePod(T0, 4)}, T0 + 1800) is False
    # b goes away after 1 h: 4 GPU-hours closed; a lives on.
    assert ledger.observe({"a": LivePod(T0, 4)}, T0 + 3600) is True
    assert ledger.total_s(T0 + 7200) / 3600 == pytest.approx(4 + 8)
    # A new process: the live pod comes from the index with its creation time, the closed one from status.
    restored = GpuLedger.from_dict(ledger.to_dict())
    restored.observe({"a": LivePod(T0, 4)}, T0 + 7200)
    assert restored.total_s(T0 + 7200) == pytest.approx(ledger.total_s(T0 + 7200))
    assert restored.window_s(T0 + 7200) == pytest.approx(ledger.window_s(T0 + 7200))


def test_gpu_hours_of_the_last_day_leave_old_pods_out() -> None:
    ledger = GpuLedger()
    ledger.observe({"old": LivePod(T0, 1)}, T0)
    ledger.observe({}, T0 + 10 * 3600)  # ran 10 h, gone
    day = 86_400
    assert ledger.window_s(T0 + 10 * 3600) / 3600 == pytest.approx(10)
    assert ledger.window_s(T0 + day + 5 * 3600) / 3600 == pytest.approx(5)  # hours 5-10 are in the window
    assert ledger.total_s(T0 + 3 * day) / 3600 == pytest.approx(10)
    assert GpuLedger.from_dict({"closedGpuSeconds": "x", "closedHours": [[1, "y"], "z"]}).total_s(T0) == 0


# -- SLO minutes ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sample", "met"),
    [
        pytest.param(MinuteSample(T0, 1.0, 0.05, 30, 900, 0), True, id="both-within"),
        pytest.param(MinuteSample(T0, 2.5, 0.05, 30, 900, 0), False, id="ttft-over"),
        pytest.param(MinuteSample(T0, 1.0, 0.1 + 1e-12, 30, 900, 0), True, id="itl-at-the-bucket-bound"),
        pytest.param(MinuteSample(T0, 1.0, 0.25, 30, 900, 0), False, id="itl-over"),
        pytest.param(MinuteSample(T0, None, None, 0, 0, 0), True, id="idle-minute-meets"),
        pytest.param(MinuteSample(T0, None, 0.05, 0, 500, 3), False, id="queue-never-emptied-no-first-token"),
        pytest.param(MinuteSample(T0), None, id="no-series-not-judged"),
    ],
)
def test_a_minute_is_judged_as_the_simulator_does(sample: MinuteSample, met: bool | None) -> None:
    assert judge_minute(sample, ttft_target_s=2.0, itl_target_s=0.1) == met


def _ten_minutes_on_two_gpus() -> ServiceRecord:
    record = ServiceRecord()
    for minute in range(1, 11):  # 10 minutes, the 3rd and 4th missed, 600 tokens each
        sample = MinuteSample(T0 + 60 * minute, 1.0, 0.05, 10, 600, 0)
        record.add_minute(sample, met=minute not in (3, 4))
    assert record.add_minute(MinuteSample(T0 + 600), met=True) is False  # a minute counts once
    busy = SignalSnapshot(observed_at=T0, pods=(PodSignals("a", running_requests=2, kv_cache_utilization=0.4),
                                               PodSignals("b", running_requests=0, kv_cache_utilization=0.2)))
    for tick in range(0, 601, 15):
        record.add_tick(T0 + tick, gpus=2, snapshot=busy, max_gap_s=60)
    return record


def test_slo_attainment_over_the_hour() -> None:
    record = _ten_minutes_on_two_gpus()
    f = record.figures(T0 + 600, gpu_hour_usd=3.0, judged=True)
    assert f.slo_attainment_1h_percent == pytest.approx(80.0) and f.minutes_judged_1h == 10
    assert record.figures(T0 + 600 + 3600, gpu_hour_usd=3.0, judged=True).slo_attainment_1h_percent is None
    assert record.figures(T0 + 600, gpu_hour_usd=3.0, judged=False).slo_attainment_1h_percent is None


def test_goodput_over_the_hour() -> None:
    f = _ten_minutes_on_two_gpus().figures(T0 + 600, gpu_hour_usd=3.0, judged=True)
    assert f.tokens_per_second == pytest.approx(10.0)
    assert f.goodput_tokens_per_second == pytest.approx(8.0)


def test_cost_per_million_tokens_over_the_hour() -> None:
    f = _ten_minutes_on_two_gpus().figures(T0 + 600, gpu_hour_usd=3.0, judged=True)
    # 2 GPUs × 600 s = 1/3 GPU-hour = 1 USD, over 6,000 tokens
    assert f.usd_per_million_tokens == pytest.approx(1.0 / 0.006)


def test_utilisation_over_the_hour() -> None:
    f = _ten_minutes_on_two_gpus().figures(T0 + 600, gpu_hour_usd=3.0, judged=True)
    assert f.busy_share == pytest.approx(0.5) and f.kv_cache_utilization_mean == pytest.approx(0.3)


def test_a_carried_snapshot_is_not_folded_into_the_utilisation_again() -> None:
    # Review of issue 14: the fleet reader publishes a pool's last good snapshot again through a
    # failed read (``carried``); its pods were folded in when it was read, so they are not again.
    busy = SignalSnapshot(observed_at=T0, pods=(PodSignals("a", running_requests=2, kv_cache_utilization=0.9),))
    idle = SignalSnapshot(observed_at=T0 + 15, pods=(PodSignals("a", running_requests=0, kv_cache_utilization=0.1),))
    carried = dataclasses.replace(busy, carried=CarriedRead("ttft query failed: timed out", 1, T0 + 30))
    record = ServiceRecord()
    for tick, snapshot in ((0, busy), (15, idle), (30, carried), (45, carried)):
        record.add_tick(T0 + tick, gpus=1, snapshot=snapshot, max_gap_s=60)
    f = record.figures(T0 + 60, gpu_hour_usd=3.0, judged=False)
    assert f.busy_share == pytest.approx(0.5) and f.kv_cache_utilization_mean == pytest.approx(0.5)


def test_cost_per_million_tokens_of_a_steady_pool_stays_put_between_minutes() -> None:
    """Issue 14: tokens arrive a minute at a time, GPU time at every tick; the figure must not
    climb through each minute (past the 10 % status deadband while the history is short)."""
    record = ServiceRecord()
    by_minute: dict[float, list[float]] = {}
    for tick in range(0, 15 * 60 + 1, 15):  # a 15 s tick, each minute read 5 s after it ends
        now = T0 + 7 + tick  # ticks not aligned to the minute: gaps straddle its boundaries
        end = math.floor((now - 5) / 60) * 60
        if end > T0:
            record.add_minute(MinuteSample(end, 1.0, 0.05, 10, 600, 0), met=True)
        record.add_tick(now, gpus=1, snapshot=None, max_gap_s=60)
        usd = record.figures(now, gpu_hour_usd=3.0, judged=True).usd_per_million_tokens
        if usd is not None:
            by_minute.setdefault(end, []).append(usd)
    # Between two minutes read, the figure does not move at all ...
    assert all(max(v) == pytest.approx(min(v), rel=1e-9) for v in by_minute.values()), by_minute
    # ... and it converges on 1 GPU-minute at 3 USD/h (0.05 USD) per 600 tokens, from the first
    # minute on (whose GPU time began at the first tick, 7 s in).
    firsts = [v[0] for _, v in sorted(by_minute.items())]
    assert firsts[-1] == pytest.approx(0.05 / 600e-6, rel=0.01)
    assert all(abs(b - a) / a < 0.1 for a, b in itertools.pairwise(firsts[1:])), firsts


def test_gpu_time_of_a_tick_gap_lands_in_the_minutes_it_spans() -> None:
    record = ServiceRecord()
    record.add_tick(T0 + 50, gpus=2, snapshot=None, max_gap_s=60)
    record.add_tick(T0 + 70, gpus=2, snapshot=None, max_gap_s=60)
    record.add_minute(MinuteSample(T0 + 60, generation_tokens=1000), met=True)
    # 10 s of the gap before the minute's end, 10 s after it: only the first are priced
    assert record.figures(T0 + 70, gpu_hour_usd=3.6, judged=True).usd_per_million_tokens == pytest.approx(
        2 * 10 * 0.001 / 1000e-6)


# -- when status is written ---------------------------------------------------------------------------


def _status(message: str, recs: list[list[float]], events: list[list[float]], slo: float, usd: float,
            queue: float) -> dict[str, object]:
    return {
        "replicas": {"desired": 3, "ready": 3},
        "signals": {"queueDepth": queue},
        "lastDecision": {"at": "x", "interactiveReplicas": 3, "reasons": [f"queue depth {queue} over 3 ready"]},
        "conditions": [{"type": "MetricsAvailable", "status": "True", "reason": "MetricsFresh",
                        "message": message}],
        "pools": {"interactive": {"sloAttainment1hPercent": slo, "usdPerMillionTokens": usd, "gpuHours24h": queue}},
        "policyState": {"recommendations": recs, "scaleEvents": events},
    }


def test_a_steady_hold_writes_nothing() -> None:
    old = _status("newest sample 3 s old", [[T0, 3]], [], 100.0, 1.20, 1.0)
    new = _status("newest sample 12 s old", [[T0, 3], [T0 + 15, 3]], [], 100.0, 1.25, 2.5)
    assert status_patch(old, new, now=100.0, last_written_at=None, refresh_seconds=None) is None
    # With a refresh interval the live values are written at most that often.
    assert status_patch(old, new, now=100.0, last_written_at=95.0, refresh_seconds=10) is None
    assert status_patch(old, new, now=100.0, last_written_at=80.0, refresh_seconds=10) is not None


@pytest.mark.parametrize(
    "change",
    [
        pytest.param({"replicas": {"desired": 4, "ready": 3}}, id="replicas"),
        pytest.param({"conditions": [{"type": "MetricsAvailable", "status": "False", "reason": "MetricsStale",
                                      "message": "newest sample 120 s old"}]}, id="condition-status"),
        pytest.param({"conditions": [{"type": "MetricsAvailable", "status": "True", "reason": "MetricsFresh",
                                      "message": "every signal read"}]}, id="condition-message-words"),
        pytest.param({"policyState": {"recommendations": [[T0, 3], [T0 + 15, 4]], "scaleEvents": []}},
                     id="new-recommended-count"),
        pytest.param({"policyState": {"recommendations": [[T0, 3]], "scaleEvents": [[T0 + 15, 1]]}},
                     id="new-scale-event"),
        pytest.param({"pools": {"interactive": {"sloAttainment1hPercent": 100.0, "usdPerMillionTokens": 1.2,
                                                "busyShare": 0.5}}}, id="a-figure-appeared"),
        pytest.param({"pools": {"interactive": {"sloAttainment1hPercent": 100.0}, "batch": {}}}, id="a-pool-appeared"),
        pytest.param({"usageLedger": {"interactive": {"closedGpuSeconds": 3600}}}, id="a-pod-went-away"),
    ],
)
def test_what_a_reader_acts_on_is_written_at_once(change: dict[str, object]) -> None:
    old = _status("newest sample 3 s old", [[T0, 3]], [], 100.0, 1.20, 1.0)
    steady = _status("newest sample 12 s old", [[T0, 3]], [], 100.0, 1.20, 2.0)
    assert status_patch(old, steady, now=100.0, last_written_at=99.0, refresh_seconds=None) is None
    patch = status_patch(old, {**steady, **change}, now=100.0, last_written_at=99.0, refresh_seconds=None)
    assert patch is not None
    assert patch["signals"] == {"queueDepth": 2.0}  # the volatile parts ride along


def _reasons(*reasons: str) -> dict[str, object]:
    status = _status("newest sample 3 s old", [[T0, 1]], [], 100.0, 1.20, 0.0)
    status["lastDecision"] = {"at": "x", "interactiveReplicas": 1, "reasons": list(reasons)}
    return status


#: Two reasons of one steady hold, ticks apart (the 100-object scale benchmark): only the load
#: signal's explanation between subject and verdict differs.
STEADY_LOAD = (
    "load: arrivals 0.20 requests/s (finished) needs 1 replicas at the SLO (bound by none, burstiness ×1.0 "
    "requests, ×1.0 prompt tokens): 1.1 × the rate needs 1, within 10% of current demand 1: holds 1",
    "load: arrivals 0.20 requests/s, the mean of the last 3 windows (this one 0.21/s: microbursts are the "
    "burstiness's to size) needs 1 replicas at the SLO (bound by none, burstiness ×1.0 requests, ×1.0 prompt "
    "tokens): 1.1 × the rate needs 1, within 10% of current demand 1: holds 1",
)


def test_a_reasons_explanation_changing_its_wording_is_not_material() -> None:
    old, new = _reasons(STEADY_LOAD[0], "demand 1 replicas (load)"), _reasons(STEADY_LOAD[1], "demand 1 replicas (load)")
    assert status_patch(old, new, now=100.0, last_written_at=99.0, refresh_seconds=None) is None
    assert status_patch(new, old, now=100.0, last_written_at=99.0, refresh_seconds=None) is None


@pytest.mark.parametrize(
    ("before", "after"),
    [
        pytest.param(STEADY_LOAD[0], STEADY_LOAD[0].replace(": holds 1", ": proposes 2"), id="the-verdict"),
        pytest.param("queue depth 1.0 over 1 ready replicas = 1.0 per replica < target 2.0: within target",
                     "queue depth 3.0 over 1 ready replicas = 3.0 per replica > target 2.0: 1 beyond target drained "
                     "in the load signal", id="the-subject-crosses-its-target"),
        pytest.param("demand 1 replicas (load)", "demand 1 replicas (preemption rate)", id="a-reason-without-colon"),
        # A time's colon splits nothing: split there, both verdicts read "#".
        pytest.param("batch pool: waits for the window at 22:00", "batch pool: runs before the window at 22:00",
                     id="a-verdict-ending-in-a-time"),
    ],
)
def test_a_reasons_subject_or_verdict_changing_is_material(before: str, after: str) -> None:
    patch = status_patch(_reasons(before), _reasons(after), now=100.0, last_written_at=99.0, refresh_seconds=None)
    assert patch is not None and patch["lastDecision"]["reasons"] == [after]


def test_a_reason_more_or_less_is_material() -> None:
    one, two = _reasons(STEADY_LOAD[0]), _reasons(STEADY_LOAD[0], "demand 1 replicas (load)")
    assert status_patch(one, two, now=100.0, last_written_at=99.0, refresh_seconds=None) is not None
    assert status_patch(two, one, now=100.0, last_written_at=99.0, refresh_seconds=None) is not None


@pytest.mark.parametrize(
    "pools",
    [
        pytest.param({"interactive": {"sloAttainment1hPercent": 98.3, "usdPerMillionTokens": 1.2}}, id="slo-share-moved"),
        pytest.param({"interactive": {"sloAttainment1hPercent": 100.0, "usdPerMillionTokens": 1.5}},
                     id="cost-moved-10-percent"),
    ],
)
def test_a_figure_moving_past_its_deadband_is_written_five_minutes_after_the_last_write(
        pools: dict[str, object]) -> None:
    old = _status("newest sample 3 s old", [[T0, 3]], [], 100.0, 1.20, 1.0)
    moved = {**_status("newest sample 12 s old", [[T0, 3]], [], 100.0, 1.20, 2.0), "pools": pools}
    assert status_patch(old, moved, now=100.0, last_written_at=99.0, refresh_seconds=None) is None
    assert status_patch(old, moved, now=398.0, last_written_at=99.0, refresh_seconds=None) is None
    for written_at in (99.0 - FIGURES_SETTLE_SECONDS, None):  # long ago, or not by this process
        patch = status_patch(old, moved, now=100.0, last_written_at=written_at, refresh_seconds=None)
        assert patch is not None and patch["pools"]["interactive"]
    # It rides along with a material write at once.
    replicas = {**moved, "replicas": {"desired": 4, "ready": 3}}
    patch = status_patch(old, replicas, now=100.0, last_written_at=99.0, refresh_seconds=None)
    assert patch is not None and "pools" in patch


def test_pruned_memory_is_not_material() -> None:
    assert not memory_material({"recommendations": [[T0, 3], [T0 + 15, 3]], "scaleEvents": [[T0, 1]]},
                               {"recommendations": [[T0 + 400, 3]], "scaleEvents": []})


def test_figures_within_their_deadbands_are_not_material() -> None:
    assert not figures_material({"interactive": {"busyShare": 0.5, "goodputTokensPerSecond": 100}},
                                {"interactive": {"busyShare": 0.55, "goodputTokensPerSecond": 109}})


def test_a_new_pools_figures_are_material() -> None:
    assert figures_material({"interactive": {}}, {"interactive": {}, "batch": {}})


def test_another_size_in_the_memory_is_material() -> None:
    saved = {"recommendations": [[T0, 3]], "scaleEvents": [[T0, 1]], "replicas": 3}
    assert memory_material(saved, {**saved, "replicas": 4})
    assert memory_material({"recommendations": [[T0, 3]], "scaleEvents": [[T0, 1]]}, saved)
    assert not memory_material(saved, dict(saved))


@pytest.mark.parametrize(
    ("current", "events"),
    [
        # Killed between the Deployment write (3 -> 4) and the status write: the step counts from now.
        pytest.param(4, ((T0, 1), (T0 + 900, 1)), id="a scale-up the status missed"),
        pytest.param(1, ((T0, 1), (T0 + 900, -2)), id="a scale-down the status missed"),
        pytest.param(3, ((T0, 1),), id="the size the memory ends at: nothing added"),
        pytest.param(None, ((T0, 1),), id="not applied (Advisory): nothing added"),
    ],
)
def test_a_restart_counts_a_size_the_saved_memory_does_not_end_at_as_a_scale_event(
    current: int | None, events: tuple[tuple[float, int], ...],
) -> None:
    status = {"policyState": {"recommendations": [[T0, 3]], "scaleEvents": [[T0, 1]], "replicas": 3}}
    memory = ObjectMemory().restored_policy_memory(status, T0 + 900, current)
    assert memory.scale_events == events
    assert memory.replicas == (current if current is not None else 3)


def test_a_memory_saved_before_its_size_was_adds_no_scale_event() -> None:
    status = {"policyState": {"recommendations": [[T0, 3]], "scaleEvents": [[T0, 1]]}}
    assert ObjectMemory().restored_policy_memory(status, T0 + 900, 5).scale_events == ((T0, 1),)


def test_this_process_memory_is_not_compared_with_the_pool() -> None:
    own = PolicyMemory(scale_events=((T0, 1),), replicas=3)
    assert ObjectMemory(policy_memory=own).restored_policy_memory({}, T0 + 900, 5) is own


def test_a_restart_reads_the_saved_newest_recommendation_as_held_until_now() -> None:
    status = {"policyState": {"recommendations": [[T0, 5], [T0 + 30, 4]], "scaleEvents": []}}
    memory = ObjectMemory().restored_policy_memory(status, T0 + 900)
    assert memory.recommendations == ((T0, 5), (T0 + 30, 4), (T0 + 900, 4))
    assert ObjectMemory().restored_policy_memory({}, T0).recommendations == ()


def _apply_merge_patch(target: object, patch: object) -> object:
    """RFC 7386: ``patch`` applied to ``target`` (what the API server does with a status patch)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = _apply_merge_patch(out.get(key), value)
    return out


def _young_pool_writes(minutes: int, ready_s: float) -> list[float]:
    """Seconds after creation of each status write of a pool created at T0 + 7 (its GPU billed from
    then), Ready ``ready_s`` after T0 (the first minute's tokens are a partial minute's unless it is
    Ready on a minute), then a steady load of 600 tokens a minute, with a 15 s tick and each minute
    read 5 s after it ends; conditions and replicas never change."""
    record = ServiceRecord()
    status: dict[str, object] = {}
    written_at: float | None = None
    writes: list[float] = []
    for tick in range(0, minutes * 60 + 1, 15):
        now = T0 + 7 + tick
        end = math.floor((now - 5) / 60) * 60
        share = min(1.0, (end - (T0 + ready_s)) / 60)  # of the minute ending at `end`
        if end > T0 and share > 0:
            record.add_minute(MinuteSample(end, 1.0, 0.05, 10 * share, 600 * share, 0), met=True)
        record.add_tick(now, gpus=1, snapshot=None, max_gap_s=60)
        figures = record.figures(now, gpu_hour_usd=3.0, judged=True)
        desired = {"replicas": {"desired": 1, "ready": 1},
                   "conditions": [{"type": "Ready", "status": "True", "reason": "AllReplicasReady", "message": ""}],
                   "pools": {"interactive": pool_report(figures, now)}}
        patch = status_patch(status, desired, now=now, last_written_at=written_at, refresh_seconds=None)
        if patch is not None:
            status = _apply_merge_patch(status, patch)  # type: ignore[assignment]
            written_at = now
            writes.append(now - T0)
    return writes


@pytest.mark.parametrize("ready_s", [90.0, 60.0, 200.0, 400.0])
def test_a_young_pools_settling_figures_are_written_at_most_every_five_minutes(ready_s: float) -> None:
    """Issue 14: a young object's figures converge over its first minutes (a partial first minute
    of tokens, the cold start's GPU time) and each crossed its deadband at another minute: a status
    write every minute (7, 127, 187, 247, 307, 427 and 787 s after creation, Ready at 90 s). A
    figure's move now waits five minutes after the last write (7, 127, 427 and 787 s); a figure
    appearing is still written at once."""
    writes = _young_pool_writes(120, ready_s)
    assert writes[0] == 7  # the first tick writes the conditions
    # The figures appear at the first minute read after Ready; their moves then wait 300 s.
    appeared = min(t for t in writes if t > ready_s)
    settling = [t for t in writes if t > appeared]
    assert all(b - a >= FIGURES_SETTLE_SECONDS for a, b in itertools.pairwise([appeared, *settling])), writes
    # The day's cost still converges on the cold start's share (a move of 10 % is one write, each
    # further apart): at most one write in the second hour.
    assert len([t for t in writes if t > 3600]) <= 1, writes
