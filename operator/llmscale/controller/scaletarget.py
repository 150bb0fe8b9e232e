"""Existing workloads scaled through their ``/scale`` subresource (``spec.scaleTargetRef``).

llmscale reads the workload's ``/scale`` (replicas and the pod selector it reports), lists the pods
that selector matches, and writes nothing but ``spec.replicas`` of ``/scale`` — a server-side apply
of an ``autoscaling/v1`` ``Scale`` with its own field manager, so the API server records llmscale
as the manager of the workload's ``spec.replicas`` and of nothing else. A custom resource's
``/scale`` refuses server-side apply (kube-apiserver answers 500, see :func:`_apply_unsupported`):
there llmscale sends a JSON merge patch of ``spec.replicas`` with the same field manager, which
the managed fields record the same way (operation ``Update`` instead of ``Apply``). It sets no owner
reference, and deleting the LLMDeployment deletes nothing. This is how the HPA scales any
resource with a ``/scale`` subresource (Deployment, StatefulSet, ReplicaSet, LeaderWorkerSet, an
Argo Rollout...): the resource is found by discovery from ``apiVersion`` and ``kind``
(``kubernetes.dynamic``, the official client's discovery cache).

The pods a LeaderWorkerSet's ``/scale`` selects are its group leaders (``status.hpaPodSelector``):
one per replica, the pod that serves the engine's HTTP API and ``/metrics``. A replica is the whole
group, so llmscale lists every pod of the LeaderWorkerSet (label ``leaderworkerset.sigs.k8s.io/name``)
and folds each group into one replica (:func:`pods_of` with :data:`LWS_GROUP_LABEL`): named after its
leader (whose series the signals read), Ready only when every pod of it is, unschedulable or failed
when any pod is (a worker stuck Unschedulable is no longer invisible), and its GPUs the sum over its
pods (a leader and a worker of 8 GPUs are billed 16, ``gpusPerReplica``, not 8).
"""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import kubernetes.client
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import DynamicApiError, ResourceNotFoundError

from llmscale.api import ScaleTargetRef
from llmscale.controller.indexes import IndexedPod, indexed_pod
from llmscale.controller.kubecalls import pages
from llmscale.controller.manifests.names import MANAGER
from llmscale.controller.state.pods import PodPhase

#: The LeaderWorkerSet API group, and the labels its controller sets on every pod of a group
#: (sigs.k8s.io/lws ``api/leaderworkerset/v1``: ``SetNameLabelKey``, ``GroupIndexLabelKey``,
#: ``WorkerIndexLabelKey``; the leader is worker 0).
LWS_GROUP = "leaderworkerset.x-k8s.io"
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
LWS_GROUP_LABEL = "leaderworkerset.sigs.k8s.io/group-index"
LWS_WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
LWS_SIZE_ANNOTATION = "leaderworkerset.sigs.k8s.io/size"

__all__ = [
    "FAILED_GET_SCALE",
    "FAILED_UPDATE_SCALE",
    "LWS_GROUP_LABEL",
    "KubernetesScaleClient",
    "ScaleClient",
    "ScaleReading",
    "ScaleTargetError",
    "TargetPods",
    "pods_of",
    "read_target",
]

#: ``ScalingActive`` reasons of a workload llmscale cannot read or write (the HPA's spelling,
#: ``pkg/controller/podautoscaler/horizontal.go``).
FAILED_GET_SCALE = "FailedGetScale"
FAILED_UPDATE_SCALE = "FailedUpdateScale"


class ScaleTargetError(Exception):
    """The workload's ``/scale`` could not be read or written.

    Attributes:
        reason: :data:`FAILED_GET_SCALE` or :data:`FAILED_UPDATE_SCALE`.
        message: what failed, naming the workload and the API server's answer.
    """

    def __init__(self, reason: str, message: str) -> None:
        self.reason, self.message = reason, message
        super().__init__(message)


@dataclass(frozen=True, slots=True)
class ScaleReading:
    """What a workload's ``/scale`` says.

    Attributes:
        replicas: ``spec.replicas`` (the count whoever scales it set).
        selector: ``status.selector``, a label selector string (``a=b,c in (d)``) of its pods;
            ``None`` while the workload's controller has not reported one.
    """

    replicas: int
    selector: str | None


@dataclass(frozen=True, slots=True)
class TargetPods:
    """The pods of a workload, found by its selector.

    Attributes:
        pods: the live pods (not terminating, not finished), sorted by name, as the pods index
            keeps llmscale's own (phase, creation and Ready times, extended-resource requests):
            the pool figures (GPU-hours, cold start) and the lead time come from them.
    """

    pods: tuple[IndexedPod, ...] = ()

    @property
    def names(self) -> tuple[str, ...]:
        """Names of the live pods."""
        return tuple(pod.name for pod in self.pods)

    @property
    def phases(self) -> tuple[PodPhase, ...]:
        """:func:`~llmscale.controller.state.pods.classify_pod` of each live pod."""
        return tuple(pod.phase for pod in self.pods)

    def count(self, phase: PodPhase) -> int:
        """Return how many pods are in ``phase``."""
        return Counter(self.phases)[phase]


class ScaleClient(Protocol):
    """Reads and writes workloads' ``/scale`` and lists their pods."""

    async def read(self, namespace: str, ref: ScaleTargetRef) -> ScaleReading:
        """Return the workload's ``/scale``.

        Raises:
            ScaleTargetError: (:data:`FAILED_GET_SCALE`) the kind is not served, has no ``/scale``,
                the workload does not exist, or the API server refused.
        """
        ...

    async def write(self, namespace: str, ref: ScaleTargetRef, replicas: int) -> None:
        """Server-side apply ``spec.replicas`` of the workload's ``/scale``.

        Raises:
            ScaleTargetError: (:data:`FAILED_UPDATE_SCALE`) the API server refused.
        """
        ...

    async def pods(self, namespace: str, selector: str, group_label: str | None = None) -> TargetPods:
        """Return the live pods ``selector`` matches in ``namespace`` (with ``group_label``, one
        replica per value of that label: :func:`pods_of`).

        Raises:
            ScaleTargetError: (:data:`FAILED_GET_SCALE`) the list was refused.
        """
        ...


def _apply_unsupported(exc: ApiException | DynamicApiError) -> bool:
    """Whether a refused server-side apply on ``/scale`` is the API server's known failure for
    custom resources: kube-apiserver (measured on v1.36.3) answers 500 "request to convert CR to an
    invalid group/version: autoscaling/v1" to an apply of a custom resource's ``/scale``, while a
    merge patch or an update of the same ``Scale`` works (the HPA updates ``/scale``)."""
    text = f"{getattr(exc, 'body', '')} {exc}"
    return exc.status == 500 and "convert CR" in text


def _answer(exc: Exception) -> str:
    if isinstance(exc, ApiException | DynamicApiError):
        return f"{exc.status} {exc.reason}"
    return f"{type(exc).__name__}: {exc}"


class KubernetesScaleClient:
    """:class:`ScaleClient` over the official client: discovery and ``/scale`` through
    ``kubernetes.dynamic.DynamicClient`` (created on first use, in a thread: it reads the API
    server's discovery documents), pods through :func:`llmscale.controller.kubecalls.pages`; every
    call in a thread.

    Args:
        api_client: a configured ``kubernetes.client.ApiClient``.
        field_manager: the field manager of the ``/scale`` applies (``llmscale``).
    """

    def __init__(self, api_client: kubernetes.client.ApiClient, field_manager: str = MANAGER,
                 opt_in: tuple[str, str] | None = None) -> None:
        self.api_client = api_client
        self.field_manager = field_manager
        #: ``(label, value)`` a workload must carry before llmscale reads or writes its ``/scale``
        #: (issue 22: an LLMDeployment's author could otherwise scale any workload of a kind in
        #: ``rbac.scaleTargets`` in its namespace, another team's database included); ``None``: any.
        self.opt_in = opt_in
        self._dynamic: DynamicClient | None = None
        self._lock = threading.Lock()
        # (apiVersion, kind) whose /scale refuses server-side apply (custom resources, see
        # _apply_unsupported): written with a merge patch instead.
        self._no_apply: set[tuple[str, str]] = set()

    def _client(self) -> DynamicClient:
        with self._lock:
            if self._dynamic is None:
                self._dynamic = DynamicClient(self.api_client)  # type: ignore[no-untyped-call]
            return self._dynamic

    def _check_opt_in(self, resource: Any, namespace: str, ref: ScaleTargetRef, reason: str) -> None:
        """Raise :class:`ScaleTargetError` unless the workload carries :attr:`opt_in` (or none is set)."""
        if self.opt_in is None:
            return
        label, value = self.opt_in
        try:
            got = self._client().get(resource, name=ref.name, namespace=namespace).to_dict()  # type: ignore[no-untyped-call]
        except (ApiException, DynamicApiError) as exc:
            raise ScaleTargetError(reason, f"could not read {ref.kind} {namespace}/{ref.name}: {_answer(exc)}") from None
        if ((got.get("metadata") or {}).get("labels") or {}).get(label) != value:
            raise ScaleTargetError(
                reason, f"{ref.kind} {namespace}/{ref.name} does not carry the label {label}={value} that lets "
                f"an LLMDeployment scale it (the operator's scale_target_label): not read, not scaled")

    def _scale_resource(self, ref: ScaleTargetRef, namespace: str | None = None,
                        reason: str = FAILED_GET_SCALE) -> Any:
        """The ``/scale`` subresource of ``ref``'s kind; with ``namespace``, after the opt-in check."""
        try:
            resource = self._client().resources.get(api_version=ref.api_version, kind=ref.kind)
        except ResourceNotFoundError:
            raise ScaleTargetError(
                FAILED_GET_SCALE, f"the API server serves no {ref.kind} in {ref.api_version}") from None
        except (ApiException, DynamicApiError) as exc:
            raise ScaleTargetError(FAILED_GET_SCALE, f"discovery of {ref.api_version} failed: {_answer(exc)}") from None
        scale = resource.subresources.get("scale")
        if scale is None:
            raise ScaleTargetError(FAILED_GET_SCALE, f"{ref.kind} ({ref.api_version}) has no /scale subresource")
        if namespace is not None:
            self._check_opt_in(resource, namespace, ref, reason)
        return scale

    def _read_sync(self, namespace: str, ref: ScaleTargetRef) -> ScaleReading:
        scale = self._scale_resource(ref, namespace)
        try:
            got = self._client().get(scale, name=ref.name, namespace=namespace).to_dict()  # type: ignore[no-untyped-call]
        except (ApiException, DynamicApiError) as exc:
            raise ScaleTargetError(
                FAILED_GET_SCALE, f"could not read /scale of {ref.kind} {namespace}/{ref.name}: {_answer(exc)}"
            ) from None
        replicas = (got.get("spec") or {}).get("replicas")
        selector = (got.get("status") or {}).get("selector")
        return ScaleReading(int(replicas or 0), str(selector) if selector else None)

    async def read(self, namespace: str, ref: ScaleTargetRef) -> ScaleReading:
        """See :meth:`ScaleClient.read`."""
        return await asyncio.to_thread(self._read_sync, namespace, ref)

    def _write_sync(self, namespace: str, ref: ScaleTargetRef, replicas: int) -> None:
        try:
            scale = self._scale_resource(ref, namespace, FAILED_UPDATE_SCALE)
        except ScaleTargetError as exc:
            raise ScaleTargetError(FAILED_UPDATE_SCALE, exc.message) from None
        body = {
            "apiVersion": "autoscaling/v1",
            "kind": "Scale",
            "metadata": {"name": ref.name, "namespace": namespace},
            "spec": {"replicas": replicas},
        }
        key = (ref.api_version, ref.kind)
        try:
            if key not in self._no_apply:
                try:
                    self._client().server_side_apply(scale, body=body, name=ref.name, namespace=namespace,  # type: ignore[no-untyped-call]
                                                     field_manager=self.field_manager, force_conflicts=True)
                    return
                except (ApiException, DynamicApiError) as exc:
                    if not _apply_unsupported(exc):
                        raise
                    with self._lock:
                        self._no_apply.add(key)
            self._client().patch(scale, body={"spec": {"replicas": replicas}}, name=ref.name,  # type: ignore[no-untyped-call]
                                 namespace=namespace, content_type="application/merge-patch+json",
                                 field_manager=self.field_manager)
        except (ApiException, DynamicApiError) as exc:
            raise ScaleTargetError(
                FAILED_UPDATE_SCALE,
                f"could not scale {ref.kind} {namespace}/{ref.name} to {replicas}: {_answer(exc)}") from None

    async def write(self, namespace: str, ref: ScaleTargetRef, replicas: int) -> None:
        """See :meth:`ScaleClient.write`."""
        await asyncio.to_thread(self._write_sync, namespace, ref, replicas)

    def _pods_sync(self, namespace: str, selector: str, group_label: str | None = None) -> TargetPods:
        try:
            items = list(pages(self.api_client, "/api/v1/namespaces/{namespace}/pods", path_params={"namespace": namespace},
                               query=[("labelSelector", selector)]))
        except ApiException as exc:
            raise ScaleTargetError(
                FAILED_GET_SCALE, f"could not list the pods of {namespace} selected by {selector!r}: {_answer(exc)}"
            ) from None
        return pods_of(items, group_label)

    async def pods(self, namespace: str, selector: str, group_label: str | None = None) -> TargetPods:
        """See :meth:`ScaleClient.pods`."""
        return await asyncio.to_thread(self._pods_sync, namespace, selector, group_label)


def pods_of(pods: Iterable[Mapping[str, Any]], group_label: str | None = None) -> TargetPods:
    """Return the live pods of ``pods`` (wire-format dicts), sorted by name; with ``group_label``,
    the pods sharing its value folded into one replica each (:func:`_fold`)."""
    live: list[IndexedPod] = []
    groups: dict[str, list[tuple[IndexedPod, bool]]] = {}
    sizes: dict[str, int] = {}
    for pod in pods:
        meta = pod.get("metadata") or {}
        entry = indexed_pod(str(meta.get("name", "")), meta, pod.get("status") or {}, pod.get("spec"))
        if entry is None:
            continue
        labels = meta.get("labels") or {}
        if group_label is not None and group_label in labels:
            leader = str(labels.get(LWS_WORKER_INDEX_LABEL, "0")) == "0"
            groups.setdefault(str(labels[group_label]), []).append((entry, leader))
            size = str((meta.get("annotations") or {}).get(LWS_SIZE_ANNOTATION, ""))
            if size.isdigit():
                sizes[str(labels[group_label])] = int(size)
        else:
            live.append(entry)
    live.extend(_fold(members, sizes.get(group)) for group, members in groups.items())
    return TargetPods(tuple(sorted(live, key=lambda p: p.name)))


def _fold(members: list[tuple[IndexedPod, bool]], size: int | None = None) -> IndexedPod:
    """One replica of several pods: named after its leader; failed, else unschedulable, else
    starting when any pod is (or the leader or a worker of its ``size`` is missing); ready when
    every pod is; GPUs summed; created at its first pod, scheduled and Ready at its last."""
    members = sorted(members, key=lambda m: (not m[1], m[0].name))
    pods = [p for p, _ in members]
    leader = pods[0]
    phases = {p.phase for p in pods}
    phase: PodPhase = next((ph for ph in ("failed", "unschedulable", "starting") if ph in phases), "ready")  # type: ignore[assignment]
    if phase == "ready" and (not members[0][1] or (size is not None and len(pods) < size)):
        phase = "starting"  # the leader or a worker is gone (recreated): the group serves nothing yet
    requests: dict[str, float] = {}
    for p in pods:
        for resource, count in p.requests:
            requests[resource] = requests.get(resource, 0.0) + count
    failures = [f"pod {p.name}: {p.failure}" for p in pods if p.failure and p.phase == "failed"]
    unplaced = [p.name for p in pods if p.phase == "unschedulable"]
    created = [p.created_s for p in pods if p.created_s is not None]
    scheduled = [p.scheduled_s for p in pods if p.scheduled_s is not None]
    ready = [p.ready_s for p in pods]
    return leader._replace(
        phase=phase,
        created_s=min(created) if created else None,
        scheduled_s=max(scheduled) if scheduled and not unplaced else None,
        ready_s=max(r for r in ready if r is not None) if phase == "ready" and all(r is not None for r in ready) else None,
        requests=tuple(sorted(requests.items())),
        failure="; ".join(failures) or (f"pod {', '.join(unplaced)} of the group cannot be placed" if unplaced else None),
    )


async def read_target(client: ScaleClient, namespace: str, ref: ScaleTargetRef) -> tuple[ScaleReading, TargetPods]:
    """Return the workload's ``/scale`` and its pods (none while it reports no selector); of a
    LeaderWorkerSet, its groups (every pod of each, folded into one replica).

    Raises:
        ScaleTargetError: see :meth:`ScaleClient.read` and :meth:`ScaleClient.pods`.
    """
    reading = await client.read(namespace, ref)
    if reading.selector is None:
        return reading, TargetPods()
    if ref.kind == "LeaderWorkerSet" and ref.api_version.startswith(LWS_GROUP + "/"):
        return reading, await client.pods(namespace, f"{LWS_NAME_LABEL}={ref.name}", group_label=LWS_GROUP_LABEL)
    return reading, await client.pods(namespace, reading.selector)
