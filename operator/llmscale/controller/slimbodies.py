"""LLMDeployment bodies without ``metadata.managedFields``, as Kopf reads them from the API server.

Kopf keeps the newest body of every object with a timer (``DaemonsMemory.live_fresh_body``, Kopf
1.45), parsed from the watch stream. An LLMDeployment's ``managedFields`` list every status leaf
its writers set, one dict per leaf: 38 of the body's 70 KB of Python objects (issue 26), which
neither Kopf nor llmscale reads (Kopf diffs its own ``last-handled-configuration``). The session
Kopf is given (:mod:`llmscale.controller.apisession`) answers with :class:`SlimResponse`, which
drops them from the objects of the resources named in :data:`SLIM_RESOURCES` — in watch lines and
in JSON answers (the LIST before a watch, a patch's answer) — before Kopf parses them. Jobs keep
theirs: llmscale reads who manages a Job from them (:mod:`llmscale.policy.batch.jobs`).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp

from llmscale.api import GROUP, PLURAL

__all__ = ["SLIM_RESOURCES", "SlimResponse", "resource_of", "slim_line", "slim_object", "slims"]

#: Resources (API group, plural) whose objects reach Kopf without ``metadata.managedFields``.
SLIM_RESOURCES: frozenset[tuple[str, str]] = frozenset({(GROUP, PLURAL)})

_MARK = b'"managedFields"'


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


def slim_object(obj: Any) -> Any:
    """``obj`` (a parsed object, a list of them with ``items``, or a watch event with ``object``)
    with ``metadata.managedFields`` removed in place; anything else unchanged. Returns ``obj``."""
    if not isinstance(obj, dict):
        return obj
    for inner in (obj.get("object"), *(obj.get("items") or ())):
        if isinstance(inner, dict):
            slim_object(inner)
    metadata = obj.get("metadata")
    if isinstance(metadata, dict):
        metadata.pop("managedFields", None)
    return obj


def slim_line(line: bytes) -> bytes:
    """One JSON line of a watch stream without ``managedFields``; a line that names none, or is
    not JSON, unchanged (Kopf reports what it cannot parse)."""
    if _MARK not in line:
        return line
    try:
        event = json.loads(line)
    except ValueError:
        return line
    return json.dumps(slim_object(event), separators=(",", ":")).encode()


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
    """An aiohttp response that drops ``managedFields`` from the objects of :data:`SLIM_RESOURCES`
    (any other resource's answer is untouched)."""

    async def start(self, connection: Any) -> SlimResponse:
        await super().start(connection)
        if slims(self.url.path) and self.url.query.get("watch") == "true":
            self.content = _SlimLines(self.content)  # type: ignore[assignment]
        return self

    async def json(self, **kwargs: Any) -> Any:
        answer = await super().json(**kwargs)
        return slim_object(answer) if slims(self.url.path) else answer
