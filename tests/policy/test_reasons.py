"""Every reason code is a :class:`Reason` member, spelt as on the wire and documented."""

from __future__ import annotations

import re
from pathlib import Path

from hypothesis import given, settings
from tests.strategies import decide_inputs

from llmscale.api import LLMDeploymentSpec
from llmscale.policy import PolicyMemory, PoolState, Reason, decide
from llmscale.policy.signal_health import engines_stalled_condition, rate_window_condition
from llmscale.signals.snapshot import SignalSnapshot

DOCS = Path(__file__).resolve().parents[2] / "docs" / "policy.md"
# A row of the conditions table: | Condition | status | `Reason` | message |
ROW = re.compile(r"^\| (\w+) \| (True|False|Unknown) \| `(\w+)` \|", re.MULTILINE)

#: Which condition each reason belongs to (MetricsPartial is in two: the signal state and the floor).
CONDITIONS = {
    "MetricsAvailable": {
        Reason.MetricsFresh,
        Reason.MetricsPartial,
        Reason.MetricsStale,
        Reason.MetricsMissing,
        Reason.LatencyUnknown,
        Reason.PartialAnswer,
        Reason.WakeQueryOnly,
    },
    "AbleToScale": {Reason.ReadyForNewScale, Reason.ScaleUpStabilized, Reason.ScaleDownStabilized},
    "ScalingLimited": {
        Reason.DesiredWithinRange,
        Reason.ScaleUpLimit,
        Reason.ScaleDownLimit,
        Reason.InsufficientCapacity,
        Reason.TooFewReplicas,
        Reason.TooManyReplicas,
        Reason.ScheduledMinimum,
        Reason.MetricsPartial,
        Reason.StalledPods,
    },
    # llmscale.policy.signal_health, set by the operator from the snapshot
    "EnginesStalled": {Reason.StalledPods, Reason.NoStalledPods, Reason.StallCheckOff},
    "RateWindowFits": {
        Reason.WindowFits,
        Reason.WindowTooShort,
        Reason.WindowBelowAdvice,
        Reason.ScrapeIntervalUnknown,
    },
    "BatchWindowOpen": {
        Reason.InsideTroughWindow,
        Reason.YieldedToInteractive,
        Reason.OutsideTroughWindows,
        Reason.NoBatchPool,
    },
    "PolicyStateReadable": {Reason.PolicyStateRead, Reason.PolicyStateUnreadable},
    "CapacityModel": {Reason.LiveWorkloadMix, Reason.DefaultWorkloadMix},
    "Diagnosis": {
        Reason.WithinSLO,
        Reason.PrefillInterference,
        Reason.PreemptionPressure,
        Reason.Queueing,
        Reason.LatencyAboveSLO,
        Reason.DiagnosisUnknown,
    },
    # llmscale.policy.batch.plan (tests/policy/test_batch_properties.py checks plan_batch keeps to these)
    "BatchBacklog": {
        Reason.BacklogEmpty,
        Reason.BacklogWaiting,
        Reason.BacklogRunning,
        Reason.BatchYieldedToInteractive,
        Reason.NoBatchPool,
    },
    "DeadlineAtRisk": {
        Reason.DeadlinesOnTrack,
        Reason.DeadlineProjectedLate,
        Reason.DeadlinePassed,
        Reason.BatchSizeUnknown,
    },
}


def test_members_are_spelt_as_on_the_wire() -> None:
    for member in Reason:
        assert member.name == member.value == str(member) == f"{member}"


def test_every_reason_is_documented_in_its_condition() -> None:
    documented = {(cond, reason) for cond, _, reason in ROW.findall(DOCS.read_text(encoding="utf-8"))}
    expected = {(cond, str(reason)) for cond, reasons in CONDITIONS.items() for reason in reasons}
    assert expected <= documented, sorted(expected - documented)
    # No table row names a reason the policy does not have.
    assert {reason for _, reason in documented} <= {str(r) for r in Reason}
    assert set().union(*CONDITIONS.values()) == set(Reason)


@settings(max_examples=150, deadline=None)
@given(decide_inputs())
def test_each_condition_uses_its_own_reasons(
    args: tuple[LLMDeploymentSpec, list[SignalSnapshot], PoolState, PolicyMemory, float],
) -> None:
    d = decide(*args)
    got = {
        "MetricsAvailable": d.metrics_available,
        "AbleToScale": d.able_to_scale,
        "ScalingLimited": d.scaling_limited,
        "BatchWindowOpen": d.batch_window_open,
        "PolicyStateReadable": d.policy_state_readable,
        "CapacityModel": d.capacity_model,
        "Diagnosis": d.diagnosis,
    }
    snap = args[1][-1] if args[1] else None
    got["EnginesStalled"] = engines_stalled_condition(snap)
    got["RateWindowFits"] = rate_window_condition(snap)
    for name, cond in got.items():
        assert isinstance(cond.reason, Reason) and cond.reason in CONDITIONS[name], (name, cond)
    # AbleToScale stays True (the HPA's convention); ScalingLimited is True exactly when a limit bit.
    assert d.able_to_scale.status == "True"
    assert (d.scaling_limited.status == "True") == (d.scaling_limited.reason is not Reason.DesiredWithinRange)
    # clamped_by names the last clamp that changed the count: a limit if one bit, else a window.
    if d.scaling_limited.status == "True":
        assert d.clamped_by is d.scaling_limited.reason
    elif d.able_to_scale.reason is not Reason.ReadyForNewScale:
        assert d.clamped_by is d.able_to_scale.reason
    else:
        assert d.clamped_by is Reason.DesiredWithinRange
