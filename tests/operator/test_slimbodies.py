"""LLMDeployments reach Kopf without ``metadata.managedFields`` (issue 26: 38 of a body's 70 KB of
Python objects), through the login's own session, read as Kopf reads them; other resources keep
theirs (a Job's say who manages it)."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
from collections.abc import AsyncIterator
from typing import Any

import kubernetes.client
import pytest
from hypothesis import given
from hypothesis import strategies as st
from kopf._cogs.clients.api import iter_jsonlines
from tests.aioserve import serving

from llmscale.controller.apisession import ConnectionBudget, session_login
from llmscale.controller.slimbodies import resource_of, slim_line, slim_object, slims

LLMD = "/apis/llmscale.dev/v1alpha1/namespaces/team-a/llmdeployments"
JOBS = "/apis/batch/v1/namespaces/llmdeployments/jobs"  # a namespace named like the resource


def _object(name: str, status: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "llmscale.dev/v1alpha1", "kind": "LLMDeployment",
        "metadata": {"name": name, "namespace": "team-a", "resourceVersion": "7",
                     "annotations": {"a": "b"},
                     "managedFields": [{"manager": "kopf", "operation": "Update", "subresource": "status",
                                        "fieldsType": "FieldsV1",
                                        "fieldsV1": {"f:status": {"f:conditions": {".": {}}}}}]},
        "spec": {"replicas": {"min": 1, "max": 3}},
        "status": status or {"conditions": [{"type": "Ready", "status": "True"}]},
    }


def _without_managed_fields(obj: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    out["metadata"].pop("managedFields", None)
    return out


@pytest.mark.parametrize(("path", "resource"), [
    (LLMD, ("llmscale.dev", "llmdeployments")),
    (LLMD + "/chat", ("llmscale.dev", "llmdeployments")),
    (LLMD + "/chat/status", ("llmscale.dev", "llmdeployments")),
    ("/apis/llmscale.dev/v1alpha1/llmdeployments", ("llmscale.dev", "llmdeployments")),
    (JOBS, ("batch", "jobs")),
    ("/api/v1/namespaces/llmdeployments/pods/p", ("", "pods")),
    ("/api/v1/namespaces", ("", "namespaces")),
    ("/api/v1/namespaces/team-a", ("", "namespaces")),
    ("/apis/llmscale.dev/v1alpha1", None),
    ("/version", None),
    ("/", None),
])
def test_the_resource_of_a_path(path: str, resource: tuple[str, str] | None) -> None:
    assert resource_of(path) == resource


@pytest.mark.parametrize(("path", "slim"), [
    (LLMD, True),
    (LLMD + "/chat/status", True),
    ("/k8s/clusters/c-1" + LLMD, True),  # behind a server path (Rancher)
    ("/api" + LLMD, True),  # a server path that is itself named api
    ("/apis/llmscale.dev/v1alpha1/namespaces/apis/llmdeployments", True),
    (JOBS, False),
    ("/apis/batch/v1/namespaces/apis/jobs", False),
    ("/k8s/clusters/c-1/api/v1/namespaces/llmdeployments/pods", False),
])
def test_which_paths_are_slimmed(path: str, slim: bool) -> None:
    assert slims(path) is slim


def test_an_object_a_list_an_event_lose_managed_fields_only() -> None:
    one = _object("chat")
    assert slim_object(copy.deepcopy(one)) == _without_managed_fields(one)
    listed = {"kind": "LLMDeploymentList", "metadata": {"resourceVersion": "9"}, "items": [one, _object("b")]}
    assert slim_object(copy.deepcopy(listed))["items"] == [_without_managed_fields(one),
                                                             _without_managed_fields(_object("b"))]
    event = {"type": "MODIFIED", "object": one}
    assert slim_object(copy.deepcopy(event)) == {"type": "MODIFIED", "object": _without_managed_fields(one)}
    for other in (None, 3, "text", [one], {"metadata": "not a mapping"}):
        assert slim_object(copy.deepcopy(other)) == other


def test_a_line_without_the_field_or_not_json_is_passed_as_it_is() -> None:
    plain = json.dumps({"type": "ADDED", "object": _without_managed_fields(_object("x"))}).encode()
    assert slim_line(plain) is plain
    broken = b'{"type": "ADDED", "object": {"metadata": {"managedFields": ['
    assert slim_line(broken) is broken


_JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
                     max_leaves=12)


@given(status=st.dictionaries(st.text(max_size=8), _JSON, max_size=4), kind=st.sampled_from(["ADDED", "MODIFIED"]))
def test_a_slimmed_line_parses_to_the_same_event_without_managed_fields(status: dict[str, Any], kind: str) -> None:
    obj = _object("x", status)
    line = json.dumps({"type": kind, "object": obj}).encode()
    assert json.loads(slim_line(line)) == {"type": kind, "object": _without_managed_fields(obj)}


@contextlib.asynccontextmanager
async def _api_server(chunk: int) -> AsyncIterator[str]:
    """A real aiohttp server on 127.0.0.1: a watch (``?watch=true``) of LLMDeployments or Jobs
    streams three events, ``chunk`` bytes per write (lines split across writes); a GET without
    ``watch`` answers a LIST of two; yields its base URL."""
    from aiohttp import web

    async def handle(request: web.Request) -> web.StreamResponse:
        if request.query.get("watch") != "true":
            return web.json_response({"kind": "List", "items": [_object("a"), _object("b")]})
        response = web.StreamResponse()
        response.content_type = "application/json"
        await response.prepare(request)
        body = b"".join(json.dumps({"type": "MODIFIED", "object": _object(f"o{i}")}).encode() + b"\n"
                        for i in range(3))
        for start in range(0, len(body), chunk):
            await response.write(body[start:start + chunk])
            await asyncio.sleep(0)
        await response.write_eof()
        return response

    async with serving(handle, "GET") as base:
        yield base


@pytest.mark.parametrize("chunk", [7, 300, 1 << 20])
async def test_kopf_reads_llmdeployments_without_managed_fields_jobs_with_theirs(chunk: int) -> None:
    config = kubernetes.client.Configuration(host="https://127.0.0.1:6443")
    login = session_login(lambda memo: config, lambda: ConnectionBudget(0, 2))
    session = (await login(memo=None)).aiohttp_session
    try:
        async with _api_server(chunk) as base:
            for path, slim in ((LLMD, True), (JOBS, False)):
                # As Kopf 1.45 reads a watch stream (kopf/_cogs/clients/api.py, stream).
                async with session.get(f"{base}{path}", params={"watch": "true"}) as response:
                    events = [json.loads(line.decode("utf-8")) async for line in iter_jsonlines(response.content)]
                assert [e["object"]["metadata"]["name"] for e in events] == ["o0", "o1", "o2"]
                assert all(("managedFields" in e["object"]["metadata"]) is not slim for e in events), path
                # As Kopf reads a LIST or a patch's answer.
                async with session.get(f"{base}{path}") as response:
                    listed = await response.json()
                assert [("managedFields" in item["metadata"]) is not slim for item in listed["items"]] == [True] * 2
    finally:
        await session.close()
