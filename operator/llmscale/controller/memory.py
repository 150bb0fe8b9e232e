"""What the operator remembers of each LLMDeployment between ticks (Kopf's per-object memo), and
how the policy memory in it is restored after a restart and carried after a tick.

Two clocks, never mixed: fields ending in ``_loop_s`` are event-loop seconds
(``asyncio.get_running_loop().time()``, monotonic, for scheduling and throttling); the signal
history and the policy memory hold wall-clock seconds since the epoch (the policy's ``now``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass, field, replace
from typing import Any

from llmscale.controller.observe import PoolObservation
from llmscale.controller.status.statuspatch import status_patch
from llmscale.policy.livefit import LiveRecord
from llmscale.policy.types import Decision, PolicyMemory
from llmscale.signals.snapshot import SignalSnapshot

__all__ = ["MEMO_KEY", "ObjectMemory", "memory_after", "object_memory"]

#: Key of :class:`ObjectMemory` in Kopf's per-object memo.
MEMO_KEY = "llmscale"


#: How long a scale this process wrote is taken over an index that still shows the count before it:
#: at least 10 s, and two of the object's ticks (the tick passes it). A watch event arrives within a
#: second or two; a write that never shows (undone by someone at once, or lost with the watch) is not
#: believed longer than this.
SCALE_ECHO_S = 10.0


@dataclass
class ObjectMemory:
    """Per-LLMDeployment state kept in memory.

    Attributes:
        history: signal snapshots, oldest first (wall-clock ``observed_at``), kept by
            :func:`llmscale.policy.history.record_snapshot`.
        policy_memory: the policy's memory after the last tick (``None`` until the first tick,
            which starts from ``status.policyState`` — what survived a restart).
        next_tick_loop_s: loop time when the next tick is due.
        last_status_write_loop_s: loop time of the last status write (``None``: not in this process).
        last_invalid: the last InvalidSpec message reported (to post its Warning Event once).
        children_applied_loop_s: loop time the children were last applied by create/update/resume.
        children_missing_since_loop_s: loop time a tick first found the interactive Deployment
            missing (``None`` while it exists).
        children_applying: an apply of the children is in flight (queued behind other writes in
            a creation burst, it may take longer than a tick); a tick does not apply them again
            meanwhile.
        apply_error: the API server's answer to the last failed apply of a child (``None`` once
            one passes), for the ``ChildrenApplied`` condition and one Event per distinct answer.
        other_autoscalers: the HPAs and ScaledObjects last seen targeting a child Deployment
            (one Event per change).
        stalled_reported: the pods last reported stalled (a Warning Event is posted once per stall).
        wake_refused: why the wake query was last refused unsent (a Warning Event is posted once
            per refusal; ``None``: it was not).
        failed_reported: the pods last reported failed (a ``FailedPod`` Warning Event once per pod).
        rollout_reported: the reason the rollout was last reported unable to finish (``None``: it
            was not; a ``RolloutStuck`` Warning Event once per reason).
        rollout_fit: the interactive Deployment's rollout made to fit (``maxSurge: 0,
            maxUnavailable: 1``) until it completes (:func:`llmscale.controller.rollout.rollout_fits`).
        jobs_elsewhere: the labelled Jobs last found managed by another controller (an
            ``OtherJobManager`` Warning Event once per Job).
        last_advice: ``(interactive, batch)`` replicas last advised in ``Advisory`` mode (to post
            its Event once per new advice).
        last_target_error: the last message of a ``spec.scaleTargetRef`` that could not be read
            (to post its Warning Event once).
        pools: per pool, what the headline numbers are folded from (:mod:`llmscale.controller.observe`).
        applied_interactive / applied_batch: replicas the children were last applied with by
            create/update/resume, for the first tick before the Deployments show in the index
            (``None``: none applied).
        job_errors: batch Job name -> the API server's answer to the last refused write of its
            ``spec.suspend`` (one Warning Event per distinct answer; cleared once a write passes).
        scaled: pool -> ``(olds, new, loop_s)`` of this process's unconfirmed scales of the pool's
            Deployment, until the Deployments index shows something else than the counts before
            them (read-your-writes: a tick that runs before the watch brings a scale decides on
            ``new``, not on an old count again).
        live_record: the live calibration's windows and fits (:mod:`llmscale.controller.livefit`;
            ``None`` before the first tick).
        upgrade_reported: ``upgraded_at`` of the last engine upgrade posted as an ``EngineUpgraded``
            Event (``None``: none).
        routing_served: whether the cluster served InferencePool when ``spec.routing`` was last
            carried out (:mod:`llmscale.controller.routing`; ``None``: not yet): a tick that finds the
            answer changed (the extension installed after the LLMDeployment) carries it out again.
        routing_next_loop_s: loop time when the tick carries ``spec.routing`` out again (``None``:
            ensure has not carried it out yet); routing_outcome: what it did last.
        routing_error: the API server's answer to the last refused read or write of the
            InferencePool (``None``: none), shown in ``ChildrenApplied`` beside ``apply_error``.
    """

    history: tuple[SignalSnapshot, ...] = ()
    policy_memory: PolicyMemory | None = None
    next_tick_loop_s: float = 0.0
    last_status_write_loop_s: float | None = None
    last_invalid: str | None = None
    children_applied_loop_s: float | None = None
    children_missing_since_loop_s: float | None = None
    children_applying: bool = False
    apply_error: str | None = None
    other_autoscalers: tuple[str, ...] = ()
    stalled_reported: frozenset[str] = frozenset()
    wake_refused: str | None = None
    failed_reported: frozenset[str] = frozenset()
    rollout_reported: str | None = None
    rollout_fit: bool = False
    jobs_elsewhere: frozenset[str] = frozenset()
    last_advice: tuple[int, int] | None = None
    last_target_error: str | None = None
    pools: dict[str, PoolObservation] = field(default_factory=dict)
    applied_interactive: int | None = None
    applied_batch: int | None = None
    job_errors: dict[str, str] = field(default_factory=dict)
    scaled: dict[str, tuple[frozenset[int], int, float]] = field(default_factory=dict)
    live_record: LiveRecord | None = None
    routing_served: bool | None = None
    routing_next_loop_s: float | None = None
    routing_outcome: str | None = None
    routing_error: str | None = None
    upgrade_reported: float | None = None

    def replicas_seen(self, pool: str, indexed: int | None, loop_now: float, echo_s: float = SCALE_ECHO_S
                      ) -> int | None:
        """Return the replicas to decide on for ``pool``: ``indexed`` (the Deployments index), or
        the count this process last scaled the pool to while the index still shows a count from
        before its unconfirmed scales (a watch event not arrived yet; ``None``, no Deployment yet,
        stands for 0), within ``echo_s`` of the last of them. Any other value in the index (someone
        else scaled, or the watch caught up) is taken as it is and ends the wait."""
        last = self.scaled.get(pool)
        if last is None:
            return indexed
        olds, new, at = last
        if (indexed if indexed is not None else 0) in olds and loop_now - at < echo_s:
            return new
        del self.scaled[pool]
        return indexed

    def note_scaled(self, pool: str, old: int, new: int, loop_now: float) -> None:
        """Remember this process's scale of ``pool`` from ``old`` to ``new`` (for
        :meth:`replicas_seen`): the counts before it still unconfirmed stay stale counts too."""
        last = self.scaled.get(pool)
        olds = (last[0] if last is not None else frozenset()) | {old}
        self.scaled[pool] = (frozenset(olds - {new}), new, loop_now)

    def write_status(self, patch_status: MutableMapping[str, Any], previous: Mapping[str, Any],
                     desired: Mapping[str, Any], *, refresh_seconds: float | None) -> bool:
        """Put into ``patch_status`` (Kopf's ``patch.status``) what changed from ``previous`` to
        ``desired`` (:func:`~llmscale.controller.status.statuspatch.status_patch`: a material change at
        once, the rest at most every ``refresh_seconds`` loop seconds) and note when; return whether
        anything was written. Must run inside the event loop."""
        loop_now = asyncio.get_running_loop().time()
        changes = status_patch(previous, desired, now=loop_now, last_written_at=self.last_status_write_loop_s,
                               refresh_seconds=refresh_seconds)
        if changes:
            patch_status.update(changes)
            self.last_status_write_loop_s = loop_now
        return bool(changes)

    def restored_policy_memory(self, status: Mapping[str, Any] | None, now: float | None = None,
                               current: int | None = None) -> PolicyMemory:
        """Return the policy memory to decide with: this process's, else the one saved in
        ``status.policyState`` (after a restart), else an empty one.

        The saved memory is written only when it changes materially
        (:func:`llmscale.controller.status.statuspatch.memory_material`): every recommendation made after the
        write had the count of the saved newest one. So on a restart at ``now`` that count is taken
        as held until ``now`` (a recommendation ``(now, count)`` is added): the stabilisation windows
        then see the counts they saw before the restart, for at least as long.

        The pool's size is written before the status that records its scale event, so a process
        killed between the two leaves a saved memory without that event. When ``current`` (the
        interactive pool's size now; ``None`` where the operator does not apply, as in ``Advisory``
        mode) differs from the saved memory's ``replicas``, the difference is taken as a scale event
        at ``now``: the rate limits then hold for a period from the restart, never scale twice.

        Args:
            status: the object's ``status`` as read from the API server.
            now: the wall clock, seconds since the epoch; ``None`` adds nothing.
            current: the interactive pool's replicas as they are now.
        """
        if self.policy_memory is not None:
            return self.policy_memory
        memory = PolicyMemory.from_dict((status or {}).get("policyState"))
        if now is None:
            return memory
        if memory.recommendations and memory.recommendations[-1][0] < now:
            memory = replace(memory, recommendations=(*memory.recommendations, (now, memory.recommendations[-1][1])))
        if current is not None and memory.replicas is not None and current != memory.replicas:
            memory = replace(memory, scale_events=(*memory.scale_events, (now, current - memory.replicas)),
                             replicas=current)
        return memory


def object_memory(memo: Any) -> ObjectMemory:
    """Return the :class:`ObjectMemory` in Kopf's per-object ``memo``, creating it on first use."""
    state = memo.get(MEMO_KEY)
    if not isinstance(state, ObjectMemory):
        state = ObjectMemory()
        memo[MEMO_KEY] = state
    return state


def memory_after(previous: PolicyMemory, decision: Decision, interactive_applied: bool) -> PolicyMemory:
    """Return the policy memory to keep after a tick.

    The policy memory (recommendations and scale events) is the interactive pool's alone, and
    ``decision.memory`` assumes the decided interactive size was applied. So it is kept when the
    interactive pool's apply succeeded or was not needed, whatever happened to the batch pool; when
    the interactive apply failed the scale did not happen, and ``previous`` is kept so that the
    rate limits are not consumed by a change that never took place.

    Args:
        previous: the memory the decision was made with.
        decision: the policy's decision.
        interactive_applied: whether the interactive pool now has ``decision.interactive_replicas``
            (its apply succeeded, or nothing had to change).
    """
    return decision.memory if interactive_applied else previous
