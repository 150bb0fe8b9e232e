"""The writer of children: server-side apply (and delete) of Deployments, Services and
PodDisruptionBudgets, the deletion-cost annotation of pods and ``spec.suspend`` of batch Jobs,
through the official Kubernetes client, with a refusal reported as :class:`ApplyRefused` that says
whether retrying can help; and of InferencePools (:class:`KubernetesInferencePools`), a kind only
some clusters serve, so it is asked for by discovery first.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import kubernetes.client
import urllib3
from kubernetes.client.exceptions import ApiException

from llmscale.controller.kubecalls import APPLY, MERGE_PATCH, request
from llmscale.controller.manifests.inferencepool import (
    INFERENCE_POOL_GROUP,
    INFERENCE_POOL_PLURAL,
    INFERENCE_POOL_VERSION,
)
from llmscale.controller.manifests.names import MANAGER
from llmscale.controller.metrics import OperatorMetrics

__all__ = [
    "Applier",
    "ApplyRefused",
    "ChildWriter",
    "InferencePools",
    "KubernetesInferencePools",
    "KubernetesWriter",
    "apply_manifests",
]


class Applier(Protocol):
    """Server-side applies manifests."""

    async def apply(self, manifest: Mapping[str, Any]) -> None:
        """Server-side apply ``manifest``."""
        ...


class ChildWriter(Applier, Protocol):
    """Writes children of LLMDeployments to the API server."""

    async def apply(self, manifest: Mapping[str, Any]) -> None:
        """Server-side apply ``manifest`` (a Deployment, Service or PodDisruptionBudget)."""
        ...

    async def delete(self, api_version: str, kind: str, namespace: str, name: str) -> bool:
        """Delete one object; return ``False`` when it did not exist."""
        ...

    async def annotate_pod(self, namespace: str, name: str, annotations: Mapping[str, str]) -> None:
        """Set ``annotations`` on one pod (server-side apply of those keys only)."""
        ...

    async def suspend_job(self, namespace: str, name: str, suspend: bool) -> None:
        """Set ``spec.suspend`` of one batch Job (server-side apply of that field only)."""
        ...

    async def remove_pod_annotations(self, namespace: str, name: str, keys: Sequence[str]) -> None:
        """Remove ``keys`` from one pod's annotations (a JSON merge patch: whoever set them)."""
        ...


#: API paths of the objects the writer applies, by kind.
_CHILD_PATHS = {
    "Deployment": "/apis/apps/v1/namespaces/{namespace}/deployments/{name}",
    "Service": "/api/v1/namespaces/{namespace}/services/{name}",
    "PodDisruptionBudget": "/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets/{name}",
}
_POD_PATH = "/api/v1/namespaces/{namespace}/pods/{name}"
_JOB_PATH = "/apis/batch/v1/namespaces/{namespace}/jobs/{name}"


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

    def _apply_sync(self, manifest: Mapping[str, Any]) -> None:
        kind = manifest["kind"]
        name, namespace = manifest["metadata"]["name"], manifest["metadata"]["namespace"]
        path = _CHILD_PATHS.get(kind)
        if path is None:
            raise ValueError(f"llmscale does not apply objects of kind {kind}")
        self._apply(path, namespace, name, dict(manifest))

    def _apply(self, path: str, namespace: str, name: str, body: Mapping[str, Any]) -> None:
        request(self.api_client, "PATCH", path, path_params={"namespace": namespace, "name": name},
                query=[("fieldManager", self.field_manager), ("force", True)], body=body, content_type=APPLY)

    async def apply(self, manifest: Mapping[str, Any]) -> None:
        """Server-side apply one child.

        Raises:
            kubernetes.client.exceptions.ApiException: the API server refused the apply.
            ValueError: a kind llmscale does not create.
        """
        await asyncio.to_thread(self._apply_sync, manifest)

    def _annotate_pod_sync(self, namespace: str, name: str, annotations: Mapping[str, str]) -> None:
        body = {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": namespace, "annotations": dict(annotations)}}
        self._apply(_POD_PATH, namespace, name, body)

    async def annotate_pod(self, namespace: str, name: str, annotations: Mapping[str, str]) -> None:
        """Server-side apply ``annotations`` on one pod: this manager owns those keys and nothing
        else of the pod (the ReplicaSet keeps its own fields).

        Raises:
            kubernetes.client.exceptions.ApiException: the API server refused (404 once the pod
                is gone).
        """
        await asyncio.to_thread(self._annotate_pod_sync, namespace, name, annotations)

    def _remove_pod_annotations_sync(self, namespace: str, name: str, keys: Sequence[str]) -> None:
        body = {"metadata": {"annotations": dict.fromkeys(keys)}}
        request(self.api_client, "PATCH", _POD_PATH, path_params={"namespace": namespace, "name": name},
                query=[("fieldManager", self.field_manager)], body=body, content_type=MERGE_PATCH)

    async def remove_pod_annotations(self, namespace: str, name: str, keys: Sequence[str]) -> None:
        """Remove ``keys`` from one pod's annotations with a JSON merge patch (``null`` values): the
        keys come from the pod template, so the ReplicaSet's manager owns them and a server-side
        apply could not drop them.

        Raises:
            kubernetes.client.exceptions.ApiException: the API server refused (404 once the pod
                is gone).
        """
        await asyncio.to_thread(self._remove_pod_annotations_sync, namespace, name, keys)

    def _suspend_job_sync(self, namespace: str, name: str, suspend: bool) -> None:
        body = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": namespace},
                "spec": {"suspend": suspend}}
        self._apply(_JOB_PATH, namespace, name, body)

    async def suspend_job(self, namespace: str, name: str, suspend: bool) -> None:
        """Server-side apply ``spec.suspend`` of one batch Job: this manager owns that field and
        nothing else of the Job (docs/batch.md, the Job contract). ``force=True`` takes the field
        from the manager that created the Job (kubectl, Argo CD, Flux).

        Raises:
            kubernetes.client.exceptions.ApiException: the API server refused (404 once the Job is
                gone).
        """
        await asyncio.to_thread(self._suspend_job_sync, namespace, name, suspend)

    def _delete_sync(self, kind: str, namespace: str, name: str) -> bool:
        try:
            if kind not in ("Deployment", "Service"):
                raise ValueError(f"llmscale does not delete objects of kind {kind}")
            request(self.api_client, "DELETE", _CHILD_PATHS[kind], path_params={"namespace": namespace, "name": name},
                    query=[("propagationPolicy", "Background")] if kind == "Deployment" else ())
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True

    async def delete(self, api_version: str, kind: str, namespace: str, name: str) -> bool:
        """Delete one child Deployment (background propagation: its pods go after it) or Service.

        Raises:
            kubernetes.client.exceptions.ApiException: any refusal other than 404.
        """
        return await asyncio.to_thread(self._delete_sync, kind, namespace, name)


class ApplyRefused(Exception):
    """The API server refused a server-side apply.

    Attributes:
        what: ``<kind> <namespace>/<name>`` of the refused object.
        status: the HTTP status (``None`` when the request never got an answer).
        reason: the API server's reason phrase, followed by its message when it sent one (e.g.
            ``Unprocessable Entity: Service "70b-chat" is invalid: metadata.name: Invalid value:
            ...``), or the error that kept the request from an answer.
        permanent: ``True`` for a 4xx other than 409 (conflict) and 429 (throttled): the same
            apply will be refused again until something else changes (the spec, a quota, a
            policy), so it is retried less often.
    """

    def __init__(self, what: str, status: int | None, reason: str | None) -> None:
        self.what, self.status, self.reason = what, status, reason
        self.permanent = status is not None and 400 <= status < 500 and status not in (409, 429)
        verb = "refused" if self.permanent else "failed on"
        code = f"{status} " if status is not None else ""
        super().__init__(f"API server {verb} {what}: {code}{reason}")


def _answer(exc: ApiException) -> str:
    """The reason phrase and, when the body is a ``Status``, its message."""
    message = None
    with contextlib.suppress(ValueError, TypeError, AttributeError):
        message = json.loads(exc.body or "").get("message")
    return f"{exc.reason}: {message}" if message else str(exc.reason)


async def apply_manifests(
    writer: Applier, manifests: Sequence[Mapping[str, Any]], metrics: OperatorMetrics
) -> None:
    """Server-side apply ``manifests`` in order; stop at the first refusal.

    Every refusal counts in ``llmscale_apply_errors_total{kind}``.

    Raises:
        ApplyRefused: the API server refused one manifest, or the request got no answer (a
            connection error, a timeout); those before it were applied.
    """
    for manifest in manifests:
        meta = manifest["metadata"]
        what = f"{manifest['kind']} {meta['namespace']}/{meta['name']}"
        try:
            await writer.apply(manifest)
        except ApiException as exc:
            metrics.apply_errors.labels(manifest["kind"]).inc()
            raise ApplyRefused(what, exc.status, _answer(exc)) from exc
        except (OSError, urllib3.exceptions.HTTPError) as exc:
            metrics.apply_errors.labels(manifest["kind"]).inc()
            raise ApplyRefused(what, None, f"no answer: {exc!r}") from exc


class InferencePools(Protocol):
    """Reads and writes InferencePools (``inference.networking.k8s.io/v1``), where they are served."""

    async def served(self) -> bool:
        """Whether the API server serves the kind (discovery, cached a while)."""
        ...

    async def read(self, namespace: str, name: str) -> dict[str, Any] | None:
        """Return the InferencePool, ``None`` when there is none."""
        ...

    async def apply(self, manifest: Mapping[str, Any]) -> None:
        """Server-side apply one InferencePool."""
        ...

    async def delete(self, namespace: str, name: str) -> bool:
        """Delete one InferencePool; return ``False`` when it did not exist."""
        ...


class KubernetesInferencePools:
    """:class:`InferencePools` over the official client's ``CustomObjectsApi``, run in threads.

    Discovery (``GET /apis/inference.networking.k8s.io/v1``, which every authenticated user may
    read) is asked again after ``recheck_s`` seconds of the event loop's clock, so that an
    extension installed (or removed) while the operator runs is noticed within that time. A
    discovery that fails for another reason than 404 keeps the last answer (``False`` before any)
    and is asked again after ``min(60 s, recheck_s)``: never once per call.

    Args:
        api_client: a configured ``kubernetes.client.ApiClient``.
        field_manager: the field manager of the applies (``llmscale``).
        recheck_s: seconds between discoveries.
        group / version / plural: the kind's API (the extension's ``inference.networking.k8s.io``,
            ``v1``, ``inferencepools``; tests name a group nobody serves).
    """

    def __init__(self, api_client: kubernetes.client.ApiClient, field_manager: str = MANAGER,
                 recheck_s: float = 300.0, *, group: str = INFERENCE_POOL_GROUP,
                 version: str = INFERENCE_POOL_VERSION, plural: str = INFERENCE_POOL_PLURAL) -> None:
        self.field_manager = field_manager
        self.recheck_s = recheck_s
        self._api = (group, version, plural)
        self._custom = kubernetes.client.CustomObjectsApi(api_client)
        self._served = False
        self._next_ask: float | None = None

    def _served_sync(self) -> bool:
        try:
            found = self._custom.get_api_resources(self._api[0], self._api[1])
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return any(r.name == self._api[2] for r in found.resources or [])

    async def served(self) -> bool:
        """See :meth:`InferencePools.served`."""
        now = asyncio.get_running_loop().time()
        if self._next_ask is not None and now < self._next_ask:
            return self._served
        try:
            self._served = await asyncio.to_thread(self._served_sync)
        except (ApiException, OSError, urllib3.exceptions.HTTPError):
            self._next_ask = now + min(60.0, self.recheck_s)
            return self._served
        self._next_ask = now + self.recheck_s
        return self._served

    def _read_sync(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            got = self._custom.get_namespaced_custom_object(*self._api[:2], namespace, self._api[2], name)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return got if isinstance(got, dict) else None

    async def read(self, namespace: str, name: str) -> dict[str, Any] | None:
        """See :meth:`InferencePools.read`.

        Raises:
            kubernetes.client.exceptions.ApiException: any refusal other than 404.
        """
        return await asyncio.to_thread(self._read_sync, namespace, name)

    def _apply_sync(self, manifest: Mapping[str, Any]) -> None:
        meta = manifest["metadata"]
        self._custom.patch_namespaced_custom_object(
            *self._api[:2], meta["namespace"], self._api[2], meta["name"],
            dict(manifest), field_manager=self.field_manager, force=True,
            _content_type="application/apply-patch+yaml")

    async def apply(self, manifest: Mapping[str, Any]) -> None:
        """See :meth:`InferencePools.apply` (``force=True``, as :class:`KubernetesWriter`).

        Raises:
            kubernetes.client.exceptions.ApiException: the API server refused the apply.
        """
        await asyncio.to_thread(self._apply_sync, manifest)

    def _delete_sync(self, namespace: str, name: str) -> bool:
        try:
            self._custom.delete_namespaced_custom_object(*self._api[:2], namespace, self._api[2], name)
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True

    async def delete(self, namespace: str, name: str) -> bool:
        """See :meth:`InferencePools.delete`.

        Raises:
            kubernetes.client.exceptions.ApiException: any refusal other than 404.
        """
        return await asyncio.to_thread(self._delete_sync, namespace, name)
