"""The seasonal history in the tick: the operator (``llmscale.commands.run.serve``: Kopf, the official
client, the fleet reader, the real policy behind a recording wrapper) against kmock's API server,
with a canned signal source that also answers — or fails — the read of past request rates.

What the tick hands ``decide``: ``PoolState.seasonal`` with the pool's rates a day and a week ago
when the source answers them, and ``None`` when it fails or cannot read them — the tick still decides
(the forecast falls back to the trend).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tests.operator.test_operator_kmock import (
    LLMDEPLOYMENTS,
    NAMESPACE,
    NOON,
    ApplyingEmulator,
    CannedSignals,
    eventually,
    llmdeployment,
    ticks,
)

from llmscale.api import LLMDeploymentSpec
from llmscale.policy import PolicyMemory, PoolState, decide
from llmscale.policy.types import Decision
from llmscale.signals.pastrates import PastRates
from llmscale.signals.queries import PoolRequest, PoolTarget
from llmscale.signals.snapshot import SignalSnapshot

CHAT = PoolTarget(NAMESPACE, "chat", "interactive")


@dataclass
class SeasonalSignals(CannedSignals):
    """Canned signals that also answer past request rates (a flat 3 requests/s), or fail them."""

    past_fail: bool = False
    past_asked: list[tuple[float, float]] = field(default_factory=list)

    async def read_past_rates(
        self, pools: Sequence[PoolRequest], start_s: float, end_s: float, step_s: float = 60.0, *, now: float
    ) -> Mapping[PoolTarget, PastRates]:
        self.past_asked.append((start_s, end_s))
        if self.past_fail:
            raise ConnectionRefusedError("canned Prometheus is down")
        size = int((end_s - start_s) // step_s) + 1
        return {r.target: PastRates(start_s, step_s, (3.0,) * size) for r in pools}


@dataclass
class RecordingDecide:
    """The real policy, recording the PoolState of every decision."""

    states: list[PoolState] = field(default_factory=list)

    def __call__(self, spec: LLMDeploymentSpec, history: Sequence[SignalSnapshot], state: PoolState,
                 memory: PolicyMemory, now: float) -> Decision:
        self.states.append(state)
        return decide(spec, history, state, memory, now)


async def test_the_tick_hands_decide_the_seasonal_history(
    kube: ApplyingEmulator, start_operator: Callable[..., Any]
) -> None:
    kube.objects[LLMDEPLOYMENTS, NAMESPACE, "chat"] = llmdeployment()
    signals, recording = SeasonalSignals(), RecordingDecide()
    await start_operator(signals, decider=recording)
    state = await eventually(lambda: next((s for s in recording.states if s.seasonal is not None), None),
                             what="a decision with seasonal history")
    assert state.seasonal.day is not None and state.seasonal.week is not None
    assert (state.seasonal.day_offset_s, state.seasonal.week_offset_s) == (86_400.0, 604_800.0)
    # The stretch the forecast reads: 5 min before the same time yesterday, a lead time after.
    assert state.seasonal.day.mean(NOON - 86_400.0 - 300, NOON - 86_400.0) == 3.0
    assert sorted(end - start for start, end in signals.past_asked[:2]) == [2400.0, 2400.0]


async def _ticks_with_a_failing_seasonal_read(
    kube: ApplyingEmulator, start_operator: Callable[..., Any]
) -> RecordingDecide:
    kube.objects[LLMDEPLOYMENTS, NAMESPACE, "chat"] = llmdeployment()
    signals, recording = SeasonalSignals(past_fail=True), RecordingDecide()
    op = await start_operator(signals, decider=recording)
    await eventually(lambda: signals.past_asked, what="a seasonal read")
    await eventually(lambda: ticks(op) >= 3, what="three ticks")
    return recording


async def test_a_failing_seasonal_read_leaves_seasonal_none(
    kube: ApplyingEmulator, start_operator: Callable[..., Any]
) -> None:
    recording = await _ticks_with_a_failing_seasonal_read(kube, start_operator)
    assert all(s.seasonal is None for s in recording.states)


async def test_the_tick_still_decides_past_a_failing_seasonal_read(
    kube: ApplyingEmulator, start_operator: Callable[..., Any]
) -> None:
    recording = await _ticks_with_a_failing_seasonal_read(kube, start_operator)
    assert recording.states


async def test_a_source_without_past_rates_leaves_seasonal_none(
    kube: ApplyingEmulator, start_operator: Callable[..., Any]
) -> None:
    kube.objects[LLMDEPLOYMENTS, NAMESPACE, "chat"] = llmdeployment()
    recording = RecordingDecide()
    op = await start_operator(CannedSignals(), decider=recording)
    await eventually(lambda: ticks(op) >= 3, what="three ticks")
    assert recording.states and all(s.seasonal is None for s in recording.states)
