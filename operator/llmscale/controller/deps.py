"""What the handlers are given rather than build: the writer, the signal source and its fleet
reader, the policy, the metrics, the settings and the wall clock, injected through Kopf's
operator-wide ``memo`` (key ``deps``). ``llmscale run`` builds the real ones; tests pass a writer
pointed at a mock API server, a canned signal source (or the real reader on a canned Prometheus)
and a fake clock, and nothing is monkey-patched.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import kopf
import kubernetes.client

from llmscale.api import LLMDeploymentSpec
from llmscale.controller.gpusfree import GpuReader
from llmscale.controller.manifests.children import PriorityClasses
from llmscale.controller.metrics import OperatorMetrics
from llmscale.controller.scaletarget import ScaleClient
from llmscale.controller.settings import OperatorSettings
from llmscale.controller.signals.fleet import FleetReader, SignalSource
from llmscale.controller.writer import ChildWriter, InferencePools
from llmscale.policy.types import Decision, PolicyMemory, PoolState
from llmscale.signals.snapshot import SignalSnapshot

__all__ = ["Decider", "Dependencies", "SignalSource", "dependencies"]


#: The policy's entry point: ``decide(spec, history, state, memory, now) -> Decision`` with the
#: signal history oldest first and ``now`` in seconds since the epoch (llmscale.policy).
Decider = Callable[[LLMDeploymentSpec, Sequence[SignalSnapshot], PoolState, PolicyMemory, float], Decision]


@dataclass
class Dependencies:
    """What the handlers need, injected through Kopf's ``memo`` (key ``deps``).

    Attributes:
        settings: operator settings.
        writer: server-side apply of children.
        signals: the signal source.
        decide: the scaling policy.
        metrics: the operator's metrics.
        kube_config: the ``kubernetes.client.Configuration`` Kopf logs in with (the same
            credentials as ``writer``).
        clock: wall-clock seconds since the epoch, for the policy, the signal reads and the times
            written in status (the shell reads the clock; the policy never does). Tests pass a
            fake. Scheduling and throttling use the event loop's clock instead.
        scales: reads and writes the ``/scale`` of workloads named by ``spec.scaleTargetRef``
            (``None``: such LLMDeployments are reported as not scalable).
        gpus: the shared read of the GPUs free for the batch planner
            (:mod:`llmscale.controller.gpusfree`; ``None``: unknown, nothing is released onto idle
            GPUs and batch pools are not bounded by GPUs free).
        inference_pools: reads and writes InferencePools (:mod:`llmscale.controller.routing`;
            ``None``: none is ever applied).
    """

    settings: OperatorSettings
    writer: ChildWriter
    signals: SignalSource
    fleet: FleetReader
    decide: Decider
    metrics: OperatorMetrics
    kube_config: kubernetes.client.Configuration
    clock: Callable[[], float]
    scales: ScaleClient | None = None
    gpus: GpuReader | None = None
    inference_pools: InferencePools | None = None

    @property
    def priority_classes(self) -> PriorityClasses:
        """The pools' PriorityClasses from the settings."""
        return PriorityClasses(self.settings.interactive_priority_class, self.settings.batch_priority_class)


def dependencies(memo: Any) -> Dependencies:
    """Return the :class:`Dependencies` in Kopf's ``memo``.

    Raises:
        kopf.PermanentError: the memo has none (the operator was started without ``llmscale run``'s
            ``serve``).
    """
    deps = memo.get("deps") if isinstance(memo, Mapping) else getattr(memo, "deps", None)
    if not isinstance(deps, Dependencies):
        raise kopf.PermanentError("llmscale handlers need memo.deps (a Dependencies); see llmscale.commands.run")
    return deps
