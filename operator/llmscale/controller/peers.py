"""Refusing to be a second writer: before the operator starts, the live Kopf peers it would not
arbitrate with.

Kopf arbitrates between the peers of one peering object (the highest priority works, the others
pause), but it cannot see an operator that is not in that object: a ``--standalone`` one beside a
peered one, or a cluster-wide one (``ClusterKopfPeering``) beside a namespaced one (``KopfPeering``
in a namespace), would both write replicas. So a standalone start looks for live peers in the
peering objects of both scopes, and a peered start in those of the other scope; ``llmscale run``
refuses to start while one exists. A peer is live while ``lastseen + lifetime`` is in the future
(Kopf's rule, ``kopf/_core/engines/peering.py``, class ``Peer``; Kopf removes itself on a clean
exit, and a crashed peer expires after its lifetime, 60 s by default).

What the credentials may not read (403) or what does not exist (404: no peering CRD or object)
holds no peer; any other failure is logged and the start goes on — the check narrows the window
for a mistake, it does not replace peering.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Mapping
from typing import Any

import kubernetes.client
from kubernetes.client.exceptions import ApiException

from llmscale.controller.settings import DEFAULT_PEERING, OperatorSettings
from llmscale.controller.state.timestamps import parse_rfc3339

__all__ = ["PeeringConflict", "check_peering", "conflicting_peers", "live_peers"]

_LOG = logging.getLogger("llmscale.run")
_GROUP, _VERSION = "kopf.dev", "v1"
_GLOB = set("*?[!")


class PeeringConflict(RuntimeError):
    """Another operator holds a peering this one would not take part in; ``str()`` says which."""


def _parse_time(value: Any) -> datetime.datetime | None:
    seconds = parse_rfc3339(value)  # the one metav1.Time parser
    return None if seconds is None else datetime.datetime.fromtimestamp(seconds, datetime.UTC)


def live_peers(status: Mapping[str, Any] | None, now: datetime.datetime) -> list[str]:
    """Return the ids of the live peers in a peering object's ``status``, sorted.

    Args:
        status: ``status`` of a ``KopfPeering``/``ClusterKopfPeering``: peer id ->
            ``{"priority", "lifetime" (seconds), "lastseen" (ISO 8601)}``; Kopf nulls the entry of
            a peer that left.
        now: the current time, timezone-aware.
    """
    out = []
    for peer, info in (status or {}).items():
        if not isinstance(info, Mapping):
            continue
        seen = _parse_time(info.get("lastseen"))
        lifetime = info.get("lifetime", 60)
        if seen is None or isinstance(lifetime, bool) or not isinstance(lifetime, int | float):
            continue
        if seen + datetime.timedelta(seconds=float(lifetime)) > now:
            out.append(str(peer))
    return sorted(out)


def _read(call: Any, *args: Any) -> list[dict[str, Any]]:
    """Objects from one read; none on 403/404."""
    try:
        got = call(*args)
    except ApiException as exc:
        if exc.status in (403, 404):
            return []
        raise
    return list(got.get("items", [got])) if isinstance(got, dict) else []


def _cluster_peerings(api: kubernetes.client.CustomObjectsApi, name: str) -> list[tuple[str, dict[str, Any]]]:
    found = _read(api.get_cluster_custom_object, _GROUP, _VERSION, "clusterkopfpeerings", name)
    return [(f"ClusterKopfPeering {name}", obj) for obj in found]


def _namespaced_peerings(
    api: kubernetes.client.CustomObjectsApi, name: str, namespaces: tuple[str, ...] | None
) -> list[tuple[str, dict[str, Any]]]:
    """KopfPeering ``name`` in ``namespaces`` (``None``: every namespace the credentials can list)."""
    exact = namespaces is not None and all(not (_GLOB & set(ns)) for ns in namespaces)
    if exact:
        assert namespaces is not None
        found = [obj for ns in namespaces
                 for obj in _read(api.get_namespaced_custom_object, _GROUP, _VERSION, ns, "kopfpeerings", name)]
    else:
        found = [obj for obj in _read(api.list_cluster_custom_object, _GROUP, _VERSION, "kopfpeerings")
                 if obj.get("metadata", {}).get("name") == name]
    return [(f"KopfPeering {obj['metadata'].get('namespace')}/{name}", obj) for obj in found]


def conflicting_peers(
    api_client: kubernetes.client.ApiClient, settings: OperatorSettings, now: datetime.datetime
) -> list[str]:
    """Return ``"<peering object>: <peer id>"`` for each live peer this operator would not
    arbitrate with (module docstring), sorted; empty when it may start.

    Blocking (the official client); run it in a thread from async code.

    Raises:
        ApiException: an answer other than 403/404 (the caller logs it and starts).
    """
    api = kubernetes.client.CustomObjectsApi(api_client)
    name = settings.peering or DEFAULT_PEERING
    namespaces = None if settings.all_namespaces else settings.namespaces
    objects: list[tuple[str, dict[str, Any]]] = []
    if settings.standalone or not settings.all_namespaces:
        objects += _cluster_peerings(api, name)
    if settings.standalone or settings.all_namespaces:
        objects += _namespaced_peerings(api, name, None if settings.all_namespaces else namespaces)
    return sorted(f"{what}: {peer}" for what, obj in objects for peer in live_peers(obj.get("status"), now))


def check_peering(api_client: kubernetes.client.ApiClient, settings: OperatorSettings) -> None:
    """Raise :class:`PeeringConflict` when :func:`conflicting_peers` finds any; log and return
    when the check itself fails."""
    try:
        conflicts = conflicting_peers(api_client, settings, datetime.datetime.now(datetime.UTC))
    except (ApiException, OSError) as exc:
        _LOG.warning(f"Failed to check the Kopf peering objects for other operators: {exc}")
        return
    if conflicts:
        mode = "standalone" if settings.standalone else f"in Kopf peering {settings.peering}"
        raise PeeringConflict(
            f"refused to start {mode}: another llmscale operator is live in {'; '.join(conflicts)}, "
            "and both would write the same replicas. Stop it, or run in its peering "
            "(--peering NAME, the same --all-namespaces/--namespace scope)")
