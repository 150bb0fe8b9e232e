"""LLMDeployment bodies without ``metadata.managedFields`` or ``status``, as Kopf reads them.

Kopf keeps the newest body of every object with a timer (``DaemonsMemory.live_fresh_body``, Kopf
1.45), parsed from the watch stream. The session Kopf is given (:mod:`llmscale.controller.apisession`)
answers with :class:`SlimResponse`, which edits the objects of :data:`SLIM_RESOURCES` in watch
lines and JSON answers (the LIST before a watch, a patch's answer) before Kopf parses them:
``managedFields`` are dropped (nothing reads them; Kopf diffs its own
``last-handled-configuration``), and ``status`` moves to :data:`STATUSES`, one compressed JSON
document per object uid, read back with :func:`status_of`. Kopf itself never reads an
LLMDeployment's status (its progress and diff base are annotations, :mod:`.handlers`). Jobs keep
both: llmscale reads who manages a Job from its ``managedFields`` (:mod:`llmscale.policy.batch.jobs`).
Sizes and costs: docs/operator.md, "Scale".
"""

from __future__ import annotations

import json
import zlib
from collections.abc import AsyncIterator, Collection, Mapping
from typing import Any

import aiohttp

from llmscale.api import GROUP, PLURAL

__all__ = ["SLIM_RESOURCES", "STATUSES", "SlimResponse", "StatusStore", "resource_of", "slim_line", "slim_list",
           "slim_object", "slims", "status_of"]

#: Resources (API group, plural) whose objects reach Kopf without ``metadata.managedFields``.
SLIM_RESOURCES: frozenset[tuple[str, str]] = frozenset({(GROUP, PLURAL)})


class StatusStore:
    """The newest ``status`` of each object the session read, by ``metadata.uid``, as zlib-compressed
    compact JSON (an LLMDeployment's 19 conditions and figures: ~24 KB of Python objects, ~2 KB here),
    with the object's namespace (for :meth:`keep_only`).

    One store a process: an operator runs one session, whose answers write it on the event loop's
    thread (tests run several operators in one process; their objects' uids differ). :meth:`get`
    parses a fresh copy each time, so callers may keep or change what it returns."""

    def __init__(self) -> None:
        self._by_uid: dict[str, tuple[str, bytes]] = {}

    def put(self, uid: str, status: Any, namespace: str = "") -> None:
        """Keep ``status`` (any JSON value) as the newest of object ``uid`` in ``namespace``."""
        self._by_uid[uid] = (namespace, zlib.compress(json.dumps(status, separators=(",", ":")).encode(), 1))

    def drop(self, uid: str) -> None:
        """Forget object ``uid`` (deleted); nothing happens for one never kept."""
        self._by_uid.pop(uid, None)

    def keep_only(self, uids: Collection[str], namespace: str | None) -> None:
        """Forget every object of ``namespace`` (``None``: of every namespace) whose uid is not in
        ``uids``: what a whole LIST says is gone, deleted while no watch ran (Kopf's own memory of
        such an object is not told either)."""
        for uid in [u for u, (ns, _) in self._by_uid.items() if namespace in (None, ns) and u not in uids]:
            del self._by_uid[uid]

    def get(self, uid: str) -> Any:
        """The newest status kept for ``uid``, parsed afresh, or ``None`` where none is kept."""
        kept = self._by_uid.get(uid)
        return None if kept is None else json.loads(zlib.decompress(kept[1]))

    def __len__(self) -> int:
        return len(self._by_uid)


#: The statuses this process's sessions moved out of the bodies they handed Kopf.
STATUSES = StatusStore()


def status_of(body: Mapping[str, Any]) -> dict[str, Any] | None:
    """The ``status`` of an LLMDeployment ``body`` as Kopf hands it over: the body's own where it has
    one (an object not read through :class:`SlimResponse`), else the newest :data:`STATUSES` keeps
    for its uid, else ``None`` (no status written yet)."""
    status = body.get("status")
    if isinstance(status, Mapping):
        return dict(status)
    uid = (body.get("metadata") or {}).get("uid")
    kept = STATUSES.get(uid) if isinstance(uid, str) else None
    return kept if isinstance(kept, dict) else None


def resource_of(path: str) -> tuple[str, str] | None:
    """The (API group, plural) an API server path addresses — ``/apis/GROUP/VERSION/[namespaces/NS/]
    PLURAL[/NAME[/SUBRESOURCE]]``, or ``/api/v1/...`` for the core group ``""`` — or ``None`` for
    any other path (discovery, ``/version``)."""
    parts = [part for part in path.split("/") if part]
    if parts[:1] == ["api"]:
        group, rest = "", parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 3:
        group, rest = parts[1], parts[3:]
    else:
        return None
    if len(rest) >= 3 and rest[0] == "namespaces":
        rest = rest[2:]
    return (group, rest[0]) if rest else None


def slims(path: str) -> bool:
    """Whether an API server path addresses one of :data:`SLIM_RESOURCES`, after the server's own
    path if it has one (``https://rancher/k8s/clusters/c-1/apis/...``, even one named ``api``):
    any ``api``/``apis`` segment from which the rest reads as such a resource."""
    parts = [part for part in path.split("/") if part]
    return any(resource_of("/".join(parts[i:])) in SLIM_RESOURCES
               for i, part in enumerate(parts) if part in ("api", "apis"))


def slim_object(obj: Any, store: StatusStore | None = None, *, keep_status: bool = False) -> Any:
    """``obj`` (a parsed object, a list of them with ``items``, or a watch event with ``object``)
    with ``metadata.managedFields`` removed and ``status`` moved to ``store`` (default
    :data:`STATUSES`) under the object's uid, in place; returns ``obj``.

    An object with a uid and no status is dropped from ``store``, and so is a ``DELETED`` event's
    object; an object without a uid keeps its status (a watch's ``ERROR`` event carries a ``Status``
    whose ``status`` is a word); anything else is unchanged. With ``keep_status`` (a write's answer,
    which Kopf checks against its patch) the status is also left in place, and stored unless the
    object is being deleted (the answer to the patch that removes the last finalizer)."""
    if not isinstance(obj, dict):
        return obj
    store = STATUSES if store is None else store
    for inner in (obj.get("object"), *(obj.get("items") or ())):
        if isinstance(inner, dict):
            slim_object(inner, store, keep_status=keep_status)
    metadata = obj.get("metadata")
    if isinstance(metadata, dict):
        metadata.pop("managedFields", None)
        uid = metadata.get("uid")
        if isinstance(uid, str):
            deleting = keep_status and metadata.get("deletionTimestamp") is not None
            if "status" in obj and not deleting:
                store.put(uid, obj["status"] if keep_status else obj.pop("status"), str(metadata.get("namespace") or ""))
            else:
                store.drop(uid)
    inner = obj.get("object")
    if obj.get("type") == "DELETED" and isinstance(inner, dict) and isinstance(inner.get("metadata"), dict):
        uid = inner["metadata"].get("uid")
        if isinstance(uid, str):
            store.drop(uid)
    return obj


def slim_list(answer: Any, path: str, store: StatusStore | None = None) -> Any:
    """A GET answer of ``path`` through :func:`slim_object`; when it is a whole LIST (``items``, no
    ``metadata.continue``), every object of its scope that it lacks is also forgotten
    (:meth:`StatusStore.keep_only`). Returns ``answer``."""
    store = STATUSES if store is None else store
    slim_object(answer, store)
    items = answer.get("items") if isinstance(answer, dict) else None
    if isinstance(items, list) and not (answer.get("metadata") or {}).get("continue"):
        parts = [part for part in path.split("/") if part]  # a LIST's path ends [namespaces/NS/]PLURAL
        namespace = parts[-2] if len(parts) >= 3 and parts[-3] == "namespaces" else None
        uids = {item["metadata"]["uid"] for item in items if isinstance(item, dict)
                and isinstance(item.get("metadata"), dict) and isinstance(item["metadata"].get("uid"), str)}
        store.keep_only(uids, namespace)
    return answer


def slim_line(line: bytes, store: StatusStore | None = None) -> bytes:
    """One JSON line of a watch stream through :func:`slim_object`; a line that is not JSON
    unchanged (Kopf reports what it cannot parse). Every line is read, whatever it names: a line
    without a status still drops the one kept."""
    try:
        event = json.loads(line)
    except ValueError:
        return line
    return json.dumps(slim_object(event, store), separators=(",", ":")).encode()


class _SlimLines:
    """A response's content whose ``iter_chunked`` (how Kopf reads a watch stream, Kopf 1.45
    ``kopf/_cogs/clients/api.py``, ``iter_jsonlines``) yields whole lines, each through
    :func:`slim_line`; everything else is the aiohttp stream's own."""

    def __init__(self, content: aiohttp.StreamReader) -> None:
        self._content = content

    def __getattr__(self, name: str) -> Any:
        return getattr(self._content, name)

    async def iter_chunked(self, n: int) -> AsyncIterator[bytes]:
        rest = b""
        async for chunk in self._content.iter_chunked(n):
            *lines, rest = (rest + chunk).split(b"\n")
            if lines:
                yield b"".join(slim_line(line) + b"\n" for line in lines)
        if rest:
            yield slim_line(rest)


class SlimResponse(aiohttp.ClientResponse):
    """An aiohttp response that passes the objects of :data:`SLIM_RESOURCES` through
    :func:`slim_object` (any other resource's answer is untouched); the answer to a write keeps its
    status in place too."""

    async def start(self, connection: Any) -> SlimResponse:
        await super().start(connection)
        if slims(self.url.path) and self.url.query.get("watch") == "true":
            self.content = _SlimLines(self.content)  # type: ignore[assignment]
        return self

    async def json(self, **kwargs: Any) -> Any:
        answer = await super().json(**kwargs)
        if not slims(self.url.path):
            return answer
        return slim_list(answer, self.url.path) if self.method == "GET" else slim_object(answer, keep_status=True)
