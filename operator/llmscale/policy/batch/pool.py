"""The batch pool of :func:`~llmscale.policy.decide` (step 9): trough windows, interactive first.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from llmscale.api import LLMDeploymentSpec
from llmscale.policy.types import ConditionResult, PolicyMemory, PoolState, Reason
from llmscale.policy.windows import batch_window_open, describe_window, local_time

__all__ = ["batch_pool"]


def batch_pool(
    spec: LLMDeploymentSpec, state: PoolState, memory: PolicyMemory, desired_interactive: int, now: float
) -> tuple[int, ConditionResult, str, tuple[int, int] | None]:
    """Step 8: batch replicas, the BatchWindowOpen condition, its line and the yield to remember.

    Interactive first: while a trough window is open and interactive pods cannot be scheduled, the
    batch pool gives up as many replicas as are unschedulable — once for the same pods (the yield
    is remembered with the interactive size it was made for, and grows only when that size does).
    It takes them back as the interactive pool shrinks below that size, and all of them when the
    window closes.
    """
    if spec.batch is None:
        msg = "no batch pool (spec.batch is not set)"
        return 0, ConditionResult("False", Reason.NoBatchPool, msg), msg, None
    window = batch_window_open(spec.batch.windows, now)
    if window is None:
        first = spec.batch.windows[0]
        local = local_time(now, first.timezone)
        listed = "; ".join(describe_window(w) for w in spec.batch.windows)
        msg = f"no trough window open (local {local:%a %H:%M %Z}; windows: {listed}): batch pool 0 replicas"
        return 0, ConditionResult("False", Reason.OutsideTroughWindows, msg), msg, None
    local = local_time(now, window.timezone)
    given, at = memory.batch_yield or (0, 0)
    current = state.interactive_replicas
    if given and current < at:  # the interactive pool shrank: take back what it no longer holds
        given = max(given - (at - current), 0)
        at = current
    pending = state.interactive_unschedulable
    if pending > 0 and (given == 0 or current > at):
        given, at = given + pending, max(current, desired_interactive)
    given = min(given, spec.batch.replicas)
    replicas = spec.batch.replicas - given
    opened = f"trough window {describe_window(window)} is open (local {local:%a %H:%M %Z})"
    if given:
        msg = (
            f"{opened}, but {given} of its {spec.batch.replicas} replicas are given to the interactive pool "
            f"({pending} interactive pods unschedulable): batch pool {replicas} replicas"
        )
        return replicas, ConditionResult("True", Reason.YieldedToInteractive, msg), msg, (given, at)
    msg = f"{opened}: batch pool {replicas} replicas"
    return replicas, ConditionResult("True", Reason.InsideTroughWindow, msg), msg, None
