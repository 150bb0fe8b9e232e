"""The live calibration in the shell: the EngineCalibrated condition while it measures, once it is
used, and after an engine upgrade, with the EngineUpgraded Event posted once."""

from __future__ import annotations

import logging
from typing import Any

import kopf
import pytest
from tests.policy.test_livefit import SPEC, _minute, _truth

from llmscale.controller.livefit import SIZED, live_calibration, note_live_calibration
from llmscale.controller.memory import ObjectMemory
from llmscale.model import ReplicaModel
from llmscale.signals.minute import MinuteSample

BODY = {"metadata": {"namespace": "ml", "name": "chat"}}


def _minutes(truth: ReplicaModel, first: int, batches: tuple[float, ...]) -> list[MinuteSample]:
    return [_minute(truth, 60.0 * (first + k), b) for k, b in enumerate(batches)]


def test_measuring_then_calibrated_then_upgraded_with_one_event(monkeypatch: pytest.MonkeyPatch) -> None:
    events: list[dict[str, Any]] = []
    monkeypatch.setattr(kopf, "info", lambda body, **kw: events.append(kw))
    log = logging.getLogger("test")
    mem = ObjectMemory()
    cond, fit = live_calibration(mem, SPEC, _minutes(_truth(0.004), 1, (2, 8)), 120.0)
    assert (cond.status, cond.reason, fit) == ("False", "Measuring", None)
    cond, fit = live_calibration(mem, SPEC, _minutes(_truth(0.004), 3, (32, 4, 16, 64)), 360.0)
    assert (cond.status, cond.reason) == ("True", "Calibrated") and fit is not None
    assert "bandwidth" in cond.message and "(model " in cond.message
    assert cond.message.endswith(SIZED)  # what the policy takes of the fit
    note_live_calibration(mem, BODY, log, cond)
    assert events == []
    # The engine's args change: its windows start again, the old calibration is kept.
    upgraded = SPEC.model_copy(update={"engine": SPEC.engine.model_copy(update={"image": "vllm/vllm-openai:v0.99"})})
    cond, fit = live_calibration(mem, upgraded, _minutes(_truth(0.004), 7, (8,)), 420.0)
    assert (cond.status, cond.reason, fit) == ("False", "Measuring", None) and "since the engine changed" in cond.message
    cond, fit = live_calibration(mem, upgraded, _minutes(_truth(0.002, bw=0.6), 8, (2, 8, 32, 4, 16, 64)), 900.0)
    assert (cond.status, cond.reason) == ("True", "EngineUpgraded") and fit is not None
    assert cond.message.startswith("After the engine upgrade: ITL at batch 1 ")
    note_live_calibration(mem, BODY, log, cond)
    note_live_calibration(mem, BODY, log, cond)
    assert [e["reason"] for e in events] == ["EngineUpgraded"]
    assert "ml/chat" in events[0]["message"]


def test_a_rollout_refits_nothing_keeping_the_last_fit() -> None:
    mem = ObjectMemory()
    live_calibration(mem, SPEC, _minutes(_truth(0.004), 1, (2, 8, 32, 4, 16)), 300.0)
    fitted = mem.live_record
    assert fitted is not None and fitted.last is not None and fitted.last.used
    cond, fit = live_calibration(mem, SPEC, _minutes(_truth(0.02), 6, (8,)), 370.0, rolling_out=True)
    assert mem.live_record is not None and mem.live_record.last is fitted.last  # not refitted
    assert mem.live_record.windows is fitted.windows
    assert (cond.reason, fit) == ("Calibrated", fitted.last.fit)
