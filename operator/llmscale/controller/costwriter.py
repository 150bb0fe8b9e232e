"""Writing the pods' deletion costs (:mod:`llmscale.controller.state.deletioncost`) during a tick: one
server-side apply of the annotation per pod whose cost changed, each on its own; a refusal is
logged and counted, never raised — a stale cost only makes a scale-down pick a busier pod.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from kubernetes.client.exceptions import ApiException

from llmscale.controller.deps import Dependencies
from llmscale.controller.state.deletioncost import ANNOTATION, cost_updates, pod_costs
from llmscale.signals.snapshot import SignalSnapshot

__all__ = ["write_deletion_costs"]


async def write_deletion_costs(
    deps: Dependencies,
    namespace: str,
    annotated: Mapping[str, int | None],
    snapshot: SignalSnapshot,
    *,
    scaling_down: bool,
    logger: logging.Logger | logging.LoggerAdapter[Any],
) -> dict[str, int]:
    """Annotate the pool's Ready pods with their deletion cost where it changed; return what was
    written (``{pod: cost}``).

    Args:
        deps: the injected dependencies (the writer, the metrics).
        namespace: the pods' namespace.
        annotated: each Ready pod's cost as annotated now (the pod-costs index).
        snapshot: the pool's signals (per-pod loads and prefix-cache hits in ``snapshot.pods``).
        scaling_down: the tick is about to lower the pool's replicas: every changed cost is
            written, not only the meaningful changes.
        logger: the object's logger.
    """
    costs = pod_costs(snapshot, annotated)
    if not costs:
        return {}
    written: dict[str, int] = {}
    for pod, cost in cost_updates(annotated, costs, exact=scaling_down).items():
        try:
            await deps.writer.annotate_pod(namespace, pod, {ANNOTATION: str(cost)})
        except ApiException as exc:
            deps.metrics.apply_errors.labels("Pod").inc()
            if exc.status != 404:  # a pod that just went needs no cost
                logger.warning(f"Failed to set the deletion cost of pod {namespace}/{pod}: {exc.status} {exc.reason}")
            continue
        written[pod] = cost
    if written:
        logger.debug(f"Set deletion costs of pods in {namespace}: {written}")
    return written
