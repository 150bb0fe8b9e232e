"""The Kopf wiring of the operator: thin handlers on a registry built per process, Kopf's own
settings for llmscale, and the login that shares the official client's credentials
(:mod:`llmscale.controller.apisession`: a session with a bounded connection pool).

Each handler only takes Kopf's keyword arguments, fetches the injected
:class:`~llmscale.controller.deps.Dependencies` (``memo.deps``) and the object's
:class:`~llmscale.controller.memory.ObjectMemory`, and calls the room that does the work:

- indexes of llmscale's Deployments and pods (:mod:`llmscale.controller.indexes`), and of the
  placeholder Deployments and pods of the node headroom (:mod:`llmscale.controller.placeholders`);
- create / update(spec) / resume: :func:`llmscale.controller.ensure.ensure_children`;
- a timer every ``settings.tick_base_seconds``: :func:`llmscale.controller.tick.tick`, which runs
  when the object's own ``spec.scaling.tickSeconds`` is due;
- delete: drop the object's metric series and kept status and stop reading its pools;
- startup / cleanup: start and stop the fleet signal reader (:mod:`llmscale.controller.signals.fleet`).

The registry is built by :func:`build_registry` (no import-time decorators), so tests and
``llmscale run`` each get a fresh one with their own settings. The operator never writes an
LLMDeployment's spec: only ``status`` (through Kopf's status patch) and Kopf's own bookkeeping
annotations on the object.
"""

from __future__ import annotations

import logging
from typing import Any

import kopf

from llmscale.api import GROUP, PLURAL, VERSION
from llmscale.controller.apisession import connection_budget, session_login
from llmscale.controller.deps import dependencies
from llmscale.controller.ensure import ensure_children
from llmscale.controller.indexes import (
    DEPLOYMENTS_INDEX,
    HPAS_INDEX,
    JOBS_INDEX,
    POD_COSTS_INDEX,
    PODS_INDEX,
    ROLLOUTS_INDEX,
    SCALED_OBJECTS_INDEX,
    index_deployments,
    index_hpas,
    index_jobs,
    index_pod_costs,
    index_pods,
    index_rollouts,
    index_scaled_objects,
)
from llmscale.controller.manifests.names import LABEL_MANAGED_BY, MANAGER
from llmscale.controller.memory import object_memory
from llmscale.controller.placeholders import (
    LABEL_PLACEHOLDER,
    PLACEHOLDER_DEPLOYMENTS_INDEX,
    PLACEHOLDER_PODS_INDEX,
    index_placeholder_deployments,
    index_placeholder_pods,
)
from llmscale.controller.settings import OperatorSettings
from llmscale.controller.slimbodies import STATUSES
from llmscale.controller.tick import tick
from llmscale.policy.batch.jobs import LABEL_DEPLOYMENT as JOB_LABEL

__all__ = ["build_registry", "configure_kopf"]

_Logger = logging.Logger | logging.LoggerAdapter[Any]


async def _children(
    *, body: kopf.Body, namespace: str | None, name: str, patch: kopf.Patch, memo: Any, logger: _Logger,
    llmscale_deployments: Any = None, **_: Any,
) -> None:
    """create/update(spec)/resume: apply every child, keep the replicas the operator set."""
    assert namespace is not None, "LLMDeployment is a namespaced kind"
    await ensure_children(dependencies(memo), object_memory(memo), body=body, namespace=namespace, name=name,
                          patch=patch, logger=logger, deployments=llmscale_deployments)


async def _tick(
    *, body: kopf.Body, namespace: str | None, name: str, patch: kopf.Patch, memo: Any, logger: _Logger,
    llmscale_deployments: Any = None, llmscale_pods: Any = None, llmscale_pod_costs: Any = None,
    llmscale_hpas: Any = None, llmscale_scaled_objects: Any = None, llmscale_placeholder_deployments: Any = None,
    llmscale_placeholder_pods: Any = None, llmscale_jobs: Any = None, llmscale_rollouts: Any = None, **_: Any,
) -> None:
    """The base timer: one scaling tick of one LLMDeployment when its own tick is due."""
    assert namespace is not None, "LLMDeployment is a namespaced kind"
    await tick(dependencies(memo), object_memory(memo), body=body, namespace=namespace, name=name, patch=patch,
               logger=logger, deployments=llmscale_deployments, pods=llmscale_pods, costs=llmscale_pod_costs,
               hpas=llmscale_hpas, scaled_objects=llmscale_scaled_objects,
               placeholder_deployments=llmscale_placeholder_deployments,
               placeholder_pods=llmscale_placeholder_pods, jobs=llmscale_jobs, rollouts=llmscale_rollouts)


async def _forget(*, namespace: str | None, name: str, uid: str | None, memo: Any, **_: Any) -> None:
    deps = dependencies(memo)
    deps.metrics.forget(namespace or "", name)
    deps.fleet.forget(namespace or "", name)
    if uid:
        STATUSES.drop(uid)


async def _start_reading(*, memo: Any, **_: Any) -> None:
    dependencies(memo).fleet.start()


async def _stop_reading(*, memo: Any, **_: Any) -> None:
    deps = dependencies(memo)
    await deps.fleet.stop()
    if deps.gpus is not None:
        await deps.gpus.stop()


def build_registry(settings: OperatorSettings) -> kopf.OperatorRegistry:
    """Return a fresh Kopf registry with llmscale's handlers.

    The timer fires every ``settings.tick_base_seconds`` (Kopf's timer interval is fixed per
    handler); each object ticks when its own ``spec.scaling.tickSeconds`` is due.
    """
    # Kopf passes each index to the handlers as a keyword argument named after its id:
    # llmscale_deployments, llmscale_pods, llmscale_pod_costs, llmscale_hpas,
    # llmscale_scaled_objects, llmscale_jobs and llmscale_rollouts in _children and _tick, and the placeholder indexes
    # in _tick.
    registry = kopf.OperatorRegistry()
    managed = {LABEL_MANAGED_BY: MANAGER}
    kopf.on.login(registry=registry)(session_login(
        lambda memo: dependencies(memo).kube_config, lambda: connection_budget(registry, settings),
        lambda memo: dependencies(memo).metrics.api_connection_wait.observe))
    kopf.on.startup(id="fleet-reader", registry=registry)(_start_reading)
    kopf.on.cleanup(id="fleet-reader", registry=registry)(_stop_reading)
    kopf.index("apps", "v1", "deployments", id=DEPLOYMENTS_INDEX, labels=managed,
               registry=registry)(index_deployments)
    kopf.index("apps", "v1", "deployments", id=ROLLOUTS_INDEX, labels=managed, registry=registry)(index_rollouts)
    kopf.index("", "v1", "pods", id=PODS_INDEX, labels=managed, registry=registry)(index_pods)
    kopf.index("", "v1", "pods", id=POD_COSTS_INDEX, labels=managed, registry=registry)(index_pod_costs)
    # Every HPA and ScaledObject of the watched namespaces: they are not ours, so no label
    # selects them; the ScaledObject index is served only where KEDA's CRD exists.
    kopf.index("autoscaling", "v2", "horizontalpodautoscalers", id=HPAS_INDEX, registry=registry)(index_hpas)
    kopf.index("keda.sh", "v1alpha1", "scaledobjects", id=SCALED_OBJECTS_INDEX,
               registry=registry)(index_scaled_objects)
    placeholders = {**managed, LABEL_PLACEHOLDER: "true"}
    kopf.index("apps", "v1", "deployments", id=PLACEHOLDER_DEPLOYMENTS_INDEX, labels=placeholders,
               registry=registry)(index_placeholder_deployments)
    kopf.index("", "v1", "pods", id=PLACEHOLDER_PODS_INDEX, labels=placeholders,
               registry=registry)(index_placeholder_pods)
    # Batch Jobs are the users' objects: selected by the label that names their LLMDeployment
    # (docs/batch.md), server-side (configure_kopf).
    kopf.index("batch", "v1", "jobs", id=JOBS_INDEX, labels={JOB_LABEL: kopf.PRESENT},
               registry=registry)(index_jobs)
    for decorator in (kopf.on.create, kopf.on.resume):
        decorator(GROUP, VERSION, PLURAL, id="children", registry=registry)(_children)
    kopf.on.update(GROUP, VERSION, PLURAL, id="children", field="spec", registry=registry)(_children)
    kopf.on.delete(GROUP, VERSION, PLURAL, id="forget", optional=True, registry=registry)(_forget)
    kopf.timer(GROUP, VERSION, PLURAL, id="tick", interval=settings.tick_base_seconds,
               registry=registry)(_tick)
    return registry


def configure_kopf(settings: OperatorSettings) -> kopf.OperatorSettings:
    """Return Kopf's own settings for llmscale.

    Kopf's bookkeeping (the last handled spec, handler progress) is kept in annotations under
    ``llmscale.dev/`` — the status schema of the CRD has no room for Kopf's ``status.kopf``, and
    an annotation never touches the user's spec. Events are posted from INFO up, so every scale
    and every rejected spec is an Event.
    """
    kopf_settings = kopf.OperatorSettings()
    kopf_settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="llmscale.dev")
    kopf_settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix="llmscale.dev", key="last-handled-configuration"
    )
    # Kopf puts a finalizer on objects with timers so that it can stop them before deletion;
    # name it after llmscale so `kubectl get -o yaml` says whose it is.
    kopf_settings.persistence.finalizer = "llmscale.dev/finalizer"
    kopf_settings.posting.level = logging.INFO
    # Kopf's own per-handler Events ("Handler 'children' succeeded", posted from its log lines):
    # off unless asked for; llmscale's own Events (kopf.info/kopf.warn) are posted either way.
    kopf_settings.posting.loggers = settings.kopf_events
    # Pods and Deployments are selected by the API server, not filtered here: the indexes' own
    # `labels=` filter is applied by Kopf after an event arrived, so without this every pod event
    # of the cluster (or of the watched namespaces) would stream to the operator and cost it a
    # worker per object. Kopf sends these as `labelSelector` on its list and watch requests
    # (kopf/_cogs/clients/watching.py); other watches (LLMDeployments, HPAs, ScaledObjects,
    # peering) are not affected.
    selector = f"{LABEL_MANAGED_BY}={MANAGER}"
    kopf_settings.watching.label_selectors["v1", "pods"] = selector
    kopf_settings.watching.label_selectors["apps", "v1", "deployments"] = selector
    # Jobs: only those labelled for an LLMDeployment (an existence selector), never every Job.
    kopf_settings.watching.label_selectors["batch", "v1", "jobs"] = JOB_LABEL
    kopf_settings.scanning.disabled = not settings.cluster_scanning
    kopf_settings.peering.standalone = settings.standalone
    if settings.peering is not None:
        # A named peering is mandatory: two replicas must never both scale because the peering
        # object was missing. Unnamed, Kopf joins `llmscale` where it exists and runs alone where
        # it does not (auto-detection), so that a workstation run beside an installed operator
        # pauses one of the two rather than make two writers.
        kopf_settings.peering.name = settings.peering
        kopf_settings.peering.mandatory = settings.peering_name is not None
        kopf_settings.peering.clusterwide = settings.all_namespaces
        # Kopf pauses every peer of equal priority; `llmscale run` draws a random one per process
        # (settings.with_peering_priority). 0 is Kopf's own default.
        kopf_settings.peering.priority = settings.peering_priority or 0
    return kopf_settings
