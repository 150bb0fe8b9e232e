"""Kopf handlers of the operator: thin — gather, decide, apply, record.

The handlers are registered on a registry built by :func:`build_registry` (no import-time
decorators, so tests and ``llmscale run`` each get a fresh registry with their own settings).
Everything they depend on arrives through Kopf's ``memo`` as a :class:`Dependencies`: the
Kubernetes writer, the signal source, the policy's ``decide``, the clock, the metrics. Tests inject
a writer pointed at a mock API server and a canned signal source; nothing is monkey-patched.

Handlers:

- indexes of llmscale's Deployments (``spec.replicas``) and pods (ready/starting/unschedulable),
  so a tick costs no API read;
- create/update(spec)/resume of an LLMDeployment: server-side apply of the children
  (:func:`llmscale.reconcile.child_manifests`), keeping the replicas the operator already set;
  deleting ``<name>-batch`` when ``spec.batch`` is removed;
- a timer every ``settings.tick_base_seconds`` that runs each object's tick when its
  ``spec.scaling.tickSeconds`` is due: read signals, build :class:`PoolState`, ``decide``, apply
  replicas on change, record an Event per scale, patch status on change.

The operator never writes an LLMDeployment's spec: only ``status`` (through Kopf's status patch)
and Kopf's own bookkeeping annotations on the object.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import kopf
import kubernetes.client
import pydantic
from kubernetes.client.exceptions import ApiException
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from llmscale.api import GROUP, PLURAL, VERSION, LLMDeploymentSpec
from llmscale.policy.types import Decision, PolicyMemory, PoolState, Reason
from llmscale.reconcile import (
    BATCH,
    INTERACTIVE,
    LABEL_DEPLOYMENT,
    LABEL_MANAGED_BY,
    LABEL_POOL,
    MANAGER,
    PodPhase,
    Pool,
    UnsupportedSpecError,
    batch_deployment_name,
    build_status,
    child_manifests,
    classify_pod,
    deployment_manifest,
    initial_replicas,
    invalid_status,
    owner_reference,
    pool_state,
    status_patch,
)
from llmscale.settings import OperatorSettings
from llmscale.signals.profiles import MetricProfile, get_profile
from llmscale.signals.queries import PoolTarget
from llmscale.signals.snapshot import SignalSnapshot

__all__ = [
    "ChildWriter",
    "Decider",
    "Dependencies",
    "KubernetesWriter",
    "ObjectMemory",
    "OperatorMetrics",
    "SignalSource",
    "build_registry",
    "configure_kopf",
    "connection_info",
]

_Logger = logging.Logger | logging.LoggerAdapter[Any]
_EVENT_MESSAGE_MAX = 1000
# A Deployment we applied shows up in the index within milliseconds (the watch event); one still
# missing after this many seconds was deleted by someone else and is applied again.
_CHILDREN_GRACE_S = 10.0  # Event.message is cut by the API server past 1 KiB; keep it whole


class SignalSource(Protocol):
    """Where the tick reads an LLMDeployment's signals: in production
    :class:`llmscale.signals.prometheus.PrometheusSignalReader`, which has this method."""

    async def read(self, profile: MetricProfile, target: PoolTarget, now: float) -> SignalSnapshot:
        """Return the newest signals of one pool; unknown values are ``None``, never zero.

        Args:
            profile: the metric profile of ``spec.engine.profile()`` (``vllm``, ``vllm-legacy``,
                ``sglang``).
            target: namespace, LLMDeployment name and pool.
            now: seconds since the epoch.

        Raises:
            Exception: any failure to read; the tick records it as an unknown snapshot (the
                Prometheus reader itself returns such snapshots rather than raising).
        """
        ...


#: The policy's entry point: ``decide(spec, history, state, memory, now) -> Decision`` with the
#: signal history oldest first and ``now`` in seconds since the epoch (llmscale.policy).
Decider = Callable[[LLMDeploymentSpec, Sequence[SignalSnapshot], PoolState, PolicyMemory, float], Decision]


class ChildWriter(Protocol):
    """Writes children of LLMDeployments to the API server."""

    async def apply(self, manifest: Mapping[str, Any]) -> None:
        """Server-side apply ``manifest`` (a Deployment, Service or PodDisruptionBudget)."""
        ...

    async def delete(self, api_version: str, kind: str, namespace: str, name: str) -> bool:
        """Delete one object; return ``False`` when it did not exist."""
        ...


class KubernetesWriter:
    """:class:`ChildWriter` over the official (synchronous) Kubernetes client, run in threads.

    Every write is a server-side apply (``PATCH`` with ``application/apply-patch+yaml``) with the
    field manager from settings and ``force=True``: llmscale owns the fields it sends and takes
    them back from any other manager (e.g. a ``kubectl scale`` on the child Deployment), and
    never touches fields it does not send. Source: Kubernetes docs, "Server-Side Apply".

    Args:
        api_client: a configured ``kubernetes.client.ApiClient``.
        field_manager: the field manager name (``llmscale``).
    """

    def __init__(self, api_client: kubernetes.client.ApiClient, field_manager: str = MANAGER) -> None:
        self.api_client = api_client
        self.field_manager = field_manager
        self._apps = kubernetes.client.AppsV1Api(api_client)
        self._core = kubernetes.client.CoreV1Api(api_client)
        self._policy = kubernetes.client.PolicyV1Api(api_client)

    def _apply_sync(self, manifest: Mapping[str, Any]) -> None:
        kind = manifest["kind"]
        name, namespace = manifest["metadata"]["name"], manifest["metadata"]["namespace"]
        options: dict[str, Any] = {
            "field_manager": self.field_manager,
            "force": True,
            "_content_type": "application/apply-patch+yaml",
        }
        if kind == "Deployment":
            self._apps.patch_namespaced_deployment(name, namespace, dict(manifest), **options)
        elif kind == "Service":
            self._core.patch_namespaced_service(name, namespace, dict(manifest), **options)
        elif kind == "PodDisruptionBudget":
            self._policy.patch_namespaced_pod_disruption_budget(name, namespace, dict(manifest), **options)
        else:
            raise ValueError(f"llmscale does not apply objects of kind {kind}")

    async def apply(self, manifest: Mapping[str, Any]) -> None:
        """Server-side apply one child.

        Raises:
            kubernetes.client.exceptions.ApiException: the API server refused the apply.
            ValueError: a kind llmscale does not create.
        """
        await asyncio.to_thread(self._apply_sync, manifest)

    def _delete_sync(self, kind: str, namespace: str, name: str) -> bool:
        if kind != "Deployment":
            raise ValueError(f"llmscale does not delete objects of kind {kind}")
        try:
            self._apps.delete_namespaced_deployment(name, namespace, propagation_policy="Background")
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True

    async def delete(self, api_version: str, kind: str, namespace: str, name: str) -> bool:
        """Delete one child Deployment (background propagation: its pods go after it).

        Raises:
            kubernetes.client.exceptions.ApiException: any refusal other than 404.
        """
        return await asyncio.to_thread(self._delete_sync, kind, namespace, name)


class OperatorMetrics:
    """The operator's own Prometheus metrics, on a registry of their own (tests get fresh ones).

    - ``llmscale_decisions_total{direction, reason}``: ticks that decided, by direction (``up``,
      ``down``, ``hold``, ``invalid``) and the last clamp that changed the count
      (``Decision.clamped_by``, e.g. ``ScaleUpLimit``, ``ScaleDownStabilized``; ``DesiredWithinRange``
      when none did), or ``InvalidSpec``.
    - ``llmscale_desired_replicas{namespace, name, pool}`` / ``llmscale_ready_replicas{...}``.
    - ``llmscale_signal_read_errors_total{namespace, name}``: failed or timed-out signal reads.
    - ``llmscale_apply_errors_total{kind}``: refused server-side applies.
    - ``llmscale_tick_duration_seconds``: one tick, signal read to status, in seconds.
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.decisions = Counter(
            "llmscale_decisions", "Scaling decisions by direction and the reason of the last clamp that bit",
            ["direction", "reason"], registry=self.registry,
        )
        self.desired = Gauge(
            "llmscale_desired_replicas", "Replicas the operator set, per LLMDeployment pool",
            ["namespace", "name", "pool"], registry=self.registry,
        )
        self.ready = Gauge(
            "llmscale_ready_replicas", "Ready replicas, per LLMDeployment pool",
            ["namespace", "name", "pool"], registry=self.registry,
        )
        self.signal_errors = Counter(
            "llmscale_signal_read_errors", "Signal reads that failed or timed out",
            ["namespace", "name"], registry=self.registry,
        )
        self.apply_errors = Counter(
            "llmscale_apply_errors", "Server-side applies refused by the API server",
            ["kind"], registry=self.registry,
        )
        # Buckets: a tick is one Prometheus query (~10-100 ms) and at most two applies; 10 s is
        # the default signal timeout.
        self.tick_duration = Histogram(
            "llmscale_tick_duration_seconds", "Duration of one tick (read, decide, apply, status)",
            buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0), registry=self.registry,
        )

    def forget(self, namespace: str, name: str) -> None:
        """Drop the per-object series of a deleted LLMDeployment."""
        for pool in (INTERACTIVE, BATCH):
            for gauge in (self.desired, self.ready):
                with contextlib.suppress(KeyError):
                    gauge.remove(namespace, name, pool)
        with contextlib.suppress(KeyError):
            self.signal_errors.remove(namespace, name)


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
        clock: wall-clock seconds since the epoch for the policy and status times (the shell
            reads the clock; the policy never does). Tests pass a fake.
    """

    settings: OperatorSettings
    writer: ChildWriter
    signals: SignalSource
    decide: Decider
    metrics: OperatorMetrics
    kube_config: kubernetes.client.Configuration
    clock: Callable[[], float]


@dataclass
class ObjectMemory:
    """Per-LLMDeployment state kept in memory (Kopf's per-object memo, key ``llmscale``).

    Attributes:
        history: signal snapshots, oldest first, trimmed to ``signal_history_seconds``.
        policy_memory: the policy's memory after the last tick (``None`` until the first tick,
            which starts from ``status.policyState`` — what survived a restart).
        next_tick_at: loop time (seconds) when the next tick is due.
        last_status_write: loop time of the last status write (``None``: not in this process).
        last_invalid: the last InvalidSpec message reported (to post its Warning Event once).
        children_applied_at: loop time the children were last applied by create/update/resume.
    """

    history: collections.deque[SignalSnapshot] = field(default_factory=collections.deque)
    policy_memory: PolicyMemory | None = None
    next_tick_at: float = 0.0
    last_status_write: float | None = None
    last_invalid: str | None = None
    children_applied_at: float | None = None


# --------------------------------------------------------------------------------------------
# Small helpers
# --------------------------------------------------------------------------------------------


def _deps(memo: Any) -> Dependencies:
    deps = memo.get("deps") if isinstance(memo, Mapping) else getattr(memo, "deps", None)
    if not isinstance(deps, Dependencies):
        raise kopf.PermanentError("llmscale handlers need memo.deps (a Dependencies); see llmscale.commands.run")
    return deps


def _object_memory(memo: Any) -> ObjectMemory:
    state = memo.get("llmscale")
    if not isinstance(state, ObjectMemory):
        state = ObjectMemory()
        memo["llmscale"] = state
    return state


def _parse_spec(body: Mapping[str, Any]) -> LLMDeploymentSpec:
    return LLMDeploymentSpec.model_validate(dict(body.get("spec") or {}))


def _short(exc: pydantic.ValidationError) -> str:
    """One line per validation error: ``spec.model.preset: Input should be ...``."""
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in ("spec", *err.get("loc", ())))
        parts.append(f"{loc}: {err.get('msg', '')}")
    return "; ".join(parts)[:_EVENT_MESSAGE_MAX]


def _first(index: Any, key: tuple[str, str, str]) -> Any:
    store = index.get(key) if index is not None else None
    if not store:
        return None
    return next(iter(store))


def _phases(index: Any, key: tuple[str, str, str]) -> list[PodPhase]:
    store = index.get(key) if index is not None else None
    return list(store) if store else []


def _clip(message: str) -> str:
    return message if len(message) <= _EVENT_MESSAGE_MAX else message[: _EVENT_MESSAGE_MAX - 1] + "…"


async def _apply_all(deps: Dependencies, manifests: Sequence[Mapping[str, Any]]) -> None:
    for manifest in manifests:
        try:
            await deps.writer.apply(manifest)
        except ApiException as exc:
            deps.metrics.apply_errors.labels(manifest["kind"]).inc()
            what = f"{manifest['kind']} {manifest['metadata']['namespace']}/{manifest['metadata']['name']}"
            # 4xx other than conflicts and throttling will fail the same way again: permanent.
            if exc.status is not None and 400 <= exc.status < 500 and exc.status not in (409, 429):
                raise kopf.PermanentError(f"API server refused {what}: {exc.status} {exc.reason}") from exc
            raise kopf.TemporaryError(f"API server failed on {what}: {exc.status} {exc.reason}", delay=10) from exc


def _report_invalid(
    deps: Dependencies, mem: ObjectMemory, body: kopf.Body, patch: kopf.Patch, logger: _Logger, message: str
) -> None:
    """Mark the object ``Ready=False/InvalidSpec`` (status written on change only) and post one
    Warning Event per distinct message."""
    meta = body.get("metadata", {})
    previous = dict(body.get("status") or {})
    now = deps.clock()
    desired = invalid_status(message, meta.get("generation"), previous, now)
    loop_now = asyncio.get_running_loop().time()
    changes = status_patch(previous, desired, now=loop_now, last_written_at=mem.last_status_write,
                           refresh_seconds=deps.settings.status_refresh_seconds)
    if changes:
        patch.status.update(changes)
        mem.last_status_write = loop_now
    if mem.last_invalid != message:
        mem.last_invalid = message
        kopf.warn(body, reason="InvalidSpec", message=_clip(message))
        logger.warning(f"Rejected LLMDeployment {meta.get('namespace')}/{meta.get('name')}: {message}")
    deps.metrics.decisions.labels("invalid", "InvalidSpec").inc()


# --------------------------------------------------------------------------------------------
# Handlers
# --------------------------------------------------------------------------------------------


def connection_info(config: kubernetes.client.Configuration) -> kopf.ConnectionInfo:
    """Return Kopf's credentials from the official client's configuration, so that Kopf and the
    writer talk to the same API server as the same user (after a token refresh where the
    configuration has a refresh hook, e.g. in-cluster service account tokens)."""
    hook = getattr(config, "refresh_api_key_hook", None)
    if callable(hook):
        hook(config)
    header = config.get_api_key_with_prefix("BearerToken") or config.get_api_key_with_prefix("authorization")
    parts = header.split(" ", 1) if header else []
    scheme, token = (None, None) if not parts else (None, parts[0]) if len(parts) == 1 else (parts[0], parts[1])
    return kopf.ConnectionInfo(
        server=config.host,
        ca_path=config.ssl_ca_cert,
        insecure=not config.verify_ssl,
        username=config.username or None,
        password=config.password or None,
        scheme=scheme,
        token=token,
        certificate_path=config.cert_file,
        private_key_path=config.key_file,
    )


async def _login(*, memo: Any, **_: Any) -> kopf.ConnectionInfo:
    return connection_info(_deps(memo).kube_config)


def _index_deployments(
    *, namespace: str | None, name: str, labels: Mapping[str, str], spec: kopf.Spec, **_: Any
) -> dict[tuple[str, str, str], int]:
    owner, pool = labels.get(LABEL_DEPLOYMENT), labels.get(LABEL_POOL)
    if not owner or not namespace or pool not in (INTERACTIVE, BATCH):
        return {}
    expected = owner if pool == INTERACTIVE else batch_deployment_name(owner)
    if name != expected:
        return {}
    replicas = spec.get("replicas")
    # An omitted spec.replicas is defaulted to 1 by the API server; keep that reading.
    return {(namespace, owner, pool): int(replicas) if replicas is not None else 1}


def _index_pods(
    *, namespace: str | None, labels: Mapping[str, str], meta: kopf.Meta, status: kopf.Status, **_: Any
) -> dict[tuple[str, str, str], PodPhase]:
    owner, pool = labels.get(LABEL_DEPLOYMENT), labels.get(LABEL_POOL)
    if not owner or not namespace or pool not in (INTERACTIVE, BATCH):
        return {}
    phase = classify_pod(meta, status)
    return {} if phase is None else {(namespace, owner, pool): phase}


async def _reconcile_children(
    *, body: kopf.Body, namespace: str | None, name: str, patch: kopf.Patch, memo: Any, logger: _Logger,
    llmscale_deployments: Any = None, **_: Any,
) -> None:
    """create/update(spec)/resume: apply every child, keep the replicas the operator set."""
    assert namespace is not None, "LLMDeployment is a namespaced kind"
    deps = _deps(memo)
    mem = _object_memory(memo)
    try:
        spec = _parse_spec(body)
        current = _first(llmscale_deployments, (namespace, name, INTERACTIVE))
        current_batch = _first(llmscale_deployments, (namespace, name, BATCH))
        interactive = current if current is not None else initial_replicas(spec)
        batch = current_batch if current_batch is not None else 0
        manifests = child_manifests(body, spec, interactive, batch)
    except pydantic.ValidationError as exc:
        _report_invalid(deps, mem, body, patch, logger, _short(exc))
        raise kopf.PermanentError(f"Invalid spec: {_short(exc)}") from None
    except UnsupportedSpecError as exc:
        _report_invalid(deps, mem, body, patch, logger, str(exc))
        raise kopf.PermanentError(str(exc)) from None
    mem.last_invalid = None
    await _apply_all(deps, manifests)
    mem.children_applied_at = asyncio.get_running_loop().time()
    kinds = ", ".join(
        f"{m['kind']} {m['metadata']['name']}" + (f" ({m['spec']['replicas']} replicas)" if m["kind"] == "Deployment" else "")
        for m in manifests
    )
    logger.info(f"Applied children of LLMDeployment {namespace}/{name}: {kinds}")
    batch_name = batch_deployment_name(name)
    if (
        spec.batch is None
        and current_batch is not None
        and await deps.writer.delete("apps/v1", "Deployment", namespace, batch_name)
    ):
        logger.info(f"Deleted Deployment {namespace}/{batch_name}: spec.batch was removed")
        kopf.info(body, reason="BatchPoolRemoved", message=f"Deleted Deployment {batch_name}: spec.batch was removed")


async def _forget(*, namespace: str | None, name: str, memo: Any, **_: Any) -> None:
    _deps(memo).metrics.forget(namespace or "", name)


def _direction(old: int, new: int) -> str:
    return "up" if new > old else "down" if new < old else "hold"


async def _tick(
    *, body: kopf.Body, namespace: str | None, name: str, patch: kopf.Patch, memo: Any, logger: _Logger,
    llmscale_deployments: Any = None, llmscale_pods: Any = None, **_: Any,
) -> None:
    """One scaling tick of one LLMDeployment, when its ``spec.scaling.tickSeconds`` is due."""
    assert namespace is not None, "LLMDeployment is a namespaced kind"
    deps = _deps(memo)
    mem = _object_memory(memo)
    loop = asyncio.get_running_loop()
    if loop.time() < mem.next_tick_at:
        return
    try:
        spec = _parse_spec(body)
    except pydantic.ValidationError as exc:
        mem.next_tick_at = loop.time() + deps.settings.tick_base_seconds
        _report_invalid(deps, mem, body, patch, logger, _short(exc))
        return
    mem.next_tick_at = loop.time() + spec.scaling.tick_seconds
    started = loop.time()
    key_i, key_b = (namespace, name, INTERACTIVE), (namespace, name, BATCH)
    current_i = _first(llmscale_deployments, key_i)
    current_b = _first(llmscale_deployments, key_b)
    if current_i is None:
        # No interactive Deployment in the index. Right after create/resume that is the watch
        # catching up with our own apply (milliseconds); long after, someone deleted it: apply
        # the children again. The tick decides once the Deployment is back in the index.
        applied_at = mem.children_applied_at
        if applied_at is not None and loop.time() - applied_at > _CHILDREN_GRACE_S:
            logger.warning(f"Found Deployment {namespace}/{name} missing: applying the children again")
            await _reconcile_children(body=body, namespace=namespace, name=name, patch=patch, memo=memo,
                                      logger=logger, llmscale_deployments=llmscale_deployments)
        return
    state = pool_state(current_i, current_b, _phases(llmscale_pods, key_i), _phases(llmscale_pods, key_b))

    now = deps.clock()
    try:
        snapshot = await asyncio.wait_for(
            deps.signals.read(get_profile(spec.engine.profile()), PoolTarget(namespace, name, INTERACTIVE), now),
            timeout=deps.settings.signal_timeout_seconds,
        )
    except Exception as exc:  # any failure of the source is "unknown", never zero
        logger.warning(f"Failed to read signals of LLMDeployment {namespace}/{name}: {exc!r}")
        snapshot = SignalSnapshot(observed_at=now, error=f"signal read failed: {exc!r}")
    if snapshot.error is not None:
        # The Prometheus reader logs its own failures; count every incomplete read here.
        deps.metrics.signal_errors.labels(namespace, name).inc()
    history = mem.history
    if not history or snapshot.error is not None or snapshot.observed_at > history[-1].observed_at:
        history.append(snapshot)
    while history and history[0].observed_at < now - deps.settings.signal_history_seconds:
        history.popleft()

    memory = mem.policy_memory
    if memory is None:
        memory = PolicyMemory.from_dict((body.get("status") or {}).get("policyState"))
        if memory.unreadable is not None:
            # Once per start: the policy reports it in PolicyStateReadable while it matters.
            dropped = f"Dropped unreadable part of status.policyState of LLMDeployment {namespace}/{name}"
            kopf.warn(body, reason=Reason.PolicyStateUnreadable, message=_clip(f"{dropped}: {memory.unreadable}"))
            logger.warning(f"{dropped}: {memory.unreadable}")
    decision = deps.decide(spec, tuple(history), state, memory, now)

    owner = owner_reference(body)
    applied_i, applied_b, applied_ok = state.interactive_replicas, state.batch_replicas, True
    changes: list[tuple[Pool, int, int]] = []
    # An invalid decision (no signal known) holds the current size, but spec.replicas.min/max still
    # apply (policy.decide's contract): a raised min must scale up even while Prometheus is down.
    # Anything else an invalid decision returns is the current size, so comparing is enough.
    if decision.interactive_replicas != state.interactive_replicas:
        changes.append((INTERACTIVE, state.interactive_replicas, decision.interactive_replicas))
    target_b = decision.batch_replicas if spec.batch is not None else 0
    if spec.batch is not None and (current_b is None or target_b != state.batch_replicas):
        changes.append((BATCH, state.batch_replicas, target_b))
    reasons = "; ".join(decision.reasons) or "no reason given"
    pool: Pool
    for pool, old, new in changes:
        try:
            await _apply_all(deps, [deployment_manifest(name, namespace, spec, pool, new, owner)])
        except (kopf.PermanentError, kopf.TemporaryError) as exc:
            applied_ok = False
            logger.error(f"Failed to scale {pool} pool of LLMDeployment {namespace}/{name} to {new}: {exc}")
            continue
        if pool == INTERACTIVE:
            applied_i = new
            what = f"LLMDeployment {namespace}/{name} from {old} to {new} replicas"
        else:
            applied_b = new
            what = f"batch pool of LLMDeployment {namespace}/{name} from {old} to {new} replicas"
        if old != new:
            logger.info(_clip(f"Scaled {what}: {reasons}"))
            kopf.info(body, reason="ScaledUp" if new > old else "ScaledDown", message=_clip(f"Scaled {what}: {reasons}"))
    # A failed apply did not happen: keep the previous memory so rate limits are not consumed.
    mem.policy_memory = decision.memory if applied_ok else memory

    direction = _direction(state.interactive_replicas, applied_i)
    deps.metrics.decisions.labels(direction, decision.clamped_by).inc()
    deps.metrics.desired.labels(namespace, name, INTERACTIVE).set(applied_i)
    deps.metrics.ready.labels(namespace, name, INTERACTIVE).set(state.interactive_ready)
    deps.metrics.desired.labels(namespace, name, BATCH).set(applied_b)
    deps.metrics.ready.labels(namespace, name, BATCH).set(state.batch_ready)

    previous = dict(body.get("status") or {})
    desired = build_status(
        decision=decision, snapshot=snapshot, state=state, applied_interactive=applied_i,
        applied_batch=applied_b, generation=body.get("metadata", {}).get("generation"),
        previous=previous, now=now,
    )
    desired["policyState"] = mem.policy_memory.to_dict()
    loop_now = loop.time()
    update = status_patch(previous, desired, now=loop_now, last_written_at=mem.last_status_write,
                          refresh_seconds=deps.settings.status_refresh_seconds)
    if update:
        patch.status.update(update)
        mem.last_status_write = loop_now
    mem.last_invalid = None
    deps.metrics.tick_duration.observe(loop.time() - started)
    logger.debug(f"Ticked LLMDeployment {namespace}/{name}: {applied_i} interactive, {applied_b} batch; {reasons}")


# --------------------------------------------------------------------------------------------
# Registry and Kopf settings
# --------------------------------------------------------------------------------------------


def build_registry(settings: OperatorSettings) -> kopf.OperatorRegistry:
    """Return a fresh Kopf registry with llmscale's handlers.

    The timer fires every ``settings.tick_base_seconds`` (Kopf's timer interval is fixed per
    handler); each object ticks when its own ``spec.scaling.tickSeconds`` is due.
    """
    registry = kopf.OperatorRegistry()
    managed = {LABEL_MANAGED_BY: MANAGER}
    kopf.on.login(registry=registry)(_login)
    kopf.index("apps", "v1", "deployments", id="llmscale_deployments", labels=managed,
               registry=registry)(_index_deployments)
    kopf.index("", "v1", "pods", id="llmscale_pods", labels=managed, registry=registry)(_index_pods)
    for decorator in (kopf.on.create, kopf.on.resume):
        decorator(GROUP, VERSION, PLURAL, id="children", registry=registry)(_reconcile_children)
    kopf.on.update(GROUP, VERSION, PLURAL, id="children", field="spec", registry=registry)(_reconcile_children)
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
    kopf_settings.scanning.disabled = not settings.cluster_scanning
    kopf_settings.peering.standalone = settings.standalone
    if settings.peering_name is not None:
        # Asked-for peering is mandatory: two replicas must never both scale because the
        # peering object was missing.
        kopf_settings.peering.name = settings.peering_name
        kopf_settings.peering.mandatory = True
        kopf_settings.peering.clusterwide = settings.all_namespaces
        # Kopf pauses every peer of equal priority; `llmscale run` draws a random one per process
        # (settings.with_peering_priority). 0 is Kopf's own default.
        kopf_settings.peering.priority = settings.peering_priority or 0
    return kopf_settings
