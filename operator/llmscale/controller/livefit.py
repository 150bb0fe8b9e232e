"""The live calibration in the shell: the ``EngineCalibrated`` condition and the ``EngineUpgraded``
Event (the pure fold and fit: :mod:`llmscale.policy.livefit`).

Each tick folds the interactive pool's judged minutes (the fleet reader's, read in the minute
query: no query of its own) into the object's :class:`~llmscale.policy.livefit.LiveRecord`, fits
again when a minute was added (every minute until the fit is used, then every
:data:`~llmscale.policy.livefit.LIVE_FIT_REFIT_MINUTES`), and hands the fit to the policy (``PoolState.live_fit``) once it is
used. The condition says what was measured; when the engine's type, image or args changed (an
upgrade), the first calibration of the new engine is compared with the last of the old one and
posted once as an ``EngineUpgraded`` Event (the serving runbook's "treat an upgrade as a
release"), and the condition keeps the difference while that engine runs.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import kopf

from llmscale.api import LLMDeploymentSpec
from llmscale.controller.events import clip
from llmscale.controller.memory import ObjectMemory
from llmscale.controller.report import engine_spec_digest
from llmscale.model.fit import EfficiencyFit
from llmscale.policy.livefit import (
    LIVE_FIT_MAX_ERROR,
    LIVE_FIT_MIN_MINUTES,
    advance,
    describe_change,
)
from llmscale.policy.types import ConditionResult
from llmscale.signals.minute import MinuteSample

__all__ = ["ENGINE_CALIBRATED", "ENGINE_CALIBRATED_REASONS", "SIZED", "live_calibration", "note_live_calibration"]

#: The condition type.
ENGINE_CALIBRATED = "EngineCalibrated"
#: What the policy takes of a used fit (llmscale.policy.load.faster_only), said in the condition.
SIZED = ("; the pool is sized with its decode side (bandwidth, overheads) and its prefill side (compute) "
         "each only where it makes no step slower than the prior's (the slower direction is learnt from "
         "the SLO's breaches: CapacityModel)")
#: Its reasons (docs/troubleshooting.md has a row for each).
ENGINE_CALIBRATED_REASONS = ("Measuring", "PoorFit", "Calibrated", "EngineUpgraded")


def live_calibration(mem: ObjectMemory, spec: LLMDeploymentSpec, minutes: Iterable[MinuteSample],
                     now: float, *, rolling_out: bool = False) -> tuple[ConditionResult, EfficiencyFit | None]:
    """Fold ``minutes`` into ``mem.live_record`` (none while ``rolling_out``: the pods run two
    engines), fit again when one was added, and return the ``EngineCalibrated`` condition and the
    fit the policy uses (``None``: the prior as it is)."""
    record = advance(mem.live_record, spec, engine_spec_digest(spec), minutes, now, rolling_out=rolling_out)
    mem.live_record = record
    cal = record.last
    if cal is None:
        upgraded = " since the engine changed" if record.upgraded_at is not None else ""
        return ConditionResult("False", "Measuring", (
            f"{len(record.windows)} of {LIVE_FIT_MIN_MINUTES} minutes with traffic measured{upgraded}: "
            "the model's prior efficiencies are used")), None
    if not cal.used:
        why = (f"{cal.minutes} of {LIVE_FIT_MIN_MINUTES} minutes" if cal.minutes < LIVE_FIT_MIN_MINUTES
               else f"rms error {cal.fit.rms_relative_error:.0%} > {LIVE_FIT_MAX_ERROR:.0%}")
        reason = "Measuring" if cal.minutes < LIVE_FIT_MIN_MINUTES else "PoorFit"
        return ConditionResult("False", reason, f"Not used ({why}): {cal.describe()}"), None
    if record.before is not None:
        change = describe_change(record.before.note, cal.note)
        return ConditionResult("True", "EngineUpgraded",
                               f"After the engine upgrade: {change}; {cal.describe()}{SIZED}"), cal.fit
    text = cal.describe()
    return ConditionResult("True", "Calibrated", text[0].upper() + text[1:] + SIZED), cal.fit


def note_live_calibration(mem: ObjectMemory, body: kopf.Body, logger: logging.Logger | logging.LoggerAdapter[Any],
                          condition: ConditionResult) -> None:
    """Log and post an ``EngineUpgraded`` Event once per upgrade, when the new engine's first
    calibration is used (remembered in ``mem.upgrade_reported``: the upgrade's ``upgraded_at``)."""
    record = mem.live_record
    if (record is None or record.upgraded_at is None or condition.reason != "EngineUpgraded"
            or mem.upgrade_reported == record.upgraded_at):
        return
    meta = body.get("metadata", {})
    message = (f"Measured the upgraded engine of LLMDeployment {meta.get('namespace')}/{meta.get('name')}: "
               f"{condition.message}")
    logger.info(message)
    kopf.info(body, reason="EngineUpgraded", message=clip(message))
    mem.upgrade_reported = record.upgraded_at
