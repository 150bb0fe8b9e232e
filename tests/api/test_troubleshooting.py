"""docs/troubleshooting.md has a row for every reason of every condition the operator writes: the
policy's (the rows of docs/policy.md), ``Ready`` and ``ScalingActive`` (the shell's)."""

from __future__ import annotations

import re
from pathlib import Path

from llmscale.controller.failedpods import PODS_HEALTHY, PODS_HEALTHY_REASONS
from llmscale.controller.jobowners import SOLE_JOB_MANAGER, SOLE_JOB_MANAGER_REASONS
from llmscale.controller.livefit import ENGINE_CALIBRATED, ENGINE_CALIBRATED_REASONS
from llmscale.controller.rollout import ROLLOUT_PROGRESSING, ROLLOUT_REASONS
from llmscale.controller.slobuckets import SLO_TARGETS_ON_BUCKETS, SLO_TARGETS_REASONS
from llmscale.controller.status.conditions import CONDITION_TYPES, READY_REASONS
from llmscale.controller.status.mode import SCALING_ACTIVE_REASONS

DOCS = Path(__file__).resolve().parents[2] / "docs"
ROW = re.compile(r"^\| (\w+) \| (True|False|Unknown) \| `(\w+)` \|", re.MULTILINE)


def rows(name: str) -> set[tuple[str, str]]:
    return {(cond, reason) for cond, _, reason in ROW.findall((DOCS / name).read_text(encoding="utf-8"))}


def test_every_policy_condition_reason_pair_has_a_row() -> None:
    policy = rows("policy.md")
    assert policy, "docs/policy.md lost its conditions table"
    assert policy <= rows("troubleshooting.md"), sorted(policy - rows("troubleshooting.md"))


def test_every_shell_condition_reason_pair_has_a_row() -> None:
    shell = {("Ready", r) for r in READY_REASONS} | {("ScalingActive", r) for r in SCALING_ACTIVE_REASONS}
    shell |= {(PODS_HEALTHY, r) for r in PODS_HEALTHY_REASONS} | {(ROLLOUT_PROGRESSING, r) for r in ROLLOUT_REASONS}
    shell |= {(SOLE_JOB_MANAGER, r) for r in SOLE_JOB_MANAGER_REASONS}
    shell |= {(SLO_TARGETS_ON_BUCKETS, r) for r in SLO_TARGETS_REASONS}
    shell |= {(ENGINE_CALIBRATED, r) for r in ENGINE_CALIBRATED_REASONS}
    assert shell <= rows("troubleshooting.md"), sorted(shell - rows("troubleshooting.md"))


def test_no_row_names_a_condition_the_operator_does_not_write() -> None:
    written = set(CONDITION_TYPES) | {"BatchBacklog", "DeadlineAtRisk"}
    assert {cond for cond, _ in rows("troubleshooting.md")} <= written
