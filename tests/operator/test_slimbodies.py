"""LLMDeployments reach Kopf without ``metadata.managedFields`` (issue 26: 38 of a body's 70 KB of
Python objects) and with their ``status`` kept compressed beside it (24 KB), through the login's own
session, read as Kopf reads them; other resources keep both (a Job's fields say who manages it)."""

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
from llmscale.controller.slimbodies import (
    STATUSES,
    StatusStore,
    resource_of,
    slim_line,
    slim_list,
    slim_object,
    slims,
    status_of,
)

LLMD = "/apis/llmscale.dev/v1alpha1/namespaces/team-a/llmdeployments"
JOBS = "/apis/batch/v1/namespaces/llmdeployments/jobs"  # a namespace named like the resource


def _object(name: str, status: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "llmscale.dev/v1alpha1", "kind": "LLMDeployment",
        "metadata": {"name": name, "namespace": "team-a", "resourceVersion": "7", "uid": f"uid-{name}",
                     "annotations": {"a": "b"},
                     "managedFields": [{"manager": "kopf", "operation": "Update", "subresource": "status",
                                        "fieldsType": "FieldsV1",
                                        "fieldsV1": {"f:status": {"f:conditions": {".": {}}}}}]},
        "spec": {"replicas": {"min": 1, "max": 3}},
        "status": status or {"conditions": [{"type": "Ready", "status": "True"}]},
    }


def _as_kopf_sees(obj: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    out["metadata"].pop("managedFields", None)
    out.pop("status", None)
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


def test_an_object_a_list_an_event_lose_managed_fields_with_the_status_kept_aside() -> None:
    store = StatusStore()
    one = _object("chat", {"conditions": [{"type": "Ready", "status": "False"}], "replicas": 3})
    assert slim_object(copy.deepcopy(one), store) == _as_kopf_sees(one)
    assert store.get("uid-chat") == one["status"]
    listed = {"kind": "LLMDeploymentList", "metadata": {"resourceVersion": "9"}, "items": [one, _object("b")]}
    assert slim_object(copy.deepcopy(listed), store)["items"] == [_as_kopf_sees(one), _as_kopf_sees(_object("b"))]
    assert store.get("uid-b") == _object("b")["status"]
    event = {"type": "MODIFIED", "object": _object("chat")}
    assert slim_object(copy.deepcopy(event), store) == {"type": "MODIFIED", "object": _as_kopf_sees(one)}
    assert store.get("uid-chat") == _object("chat")["status"], "the newest status is kept"
    for other in (None, 3, "text", [one], {"metadata": "not a mapping"}):
        assert slim_object(copy.deepcopy(other), store) == other
    assert len(store) == 2


def test_a_deleted_object_is_forgotten_another_kept() -> None:
    store = StatusStore()
    slim_object({"items": [_object("a"), _object("b")]}, store)
    slim_object({"type": "DELETED", "object": _object("a")}, store)
    assert store.get("uid-a") is None
    assert store.get("uid-b") == _object("b")["status"]
    store.drop("uid-never-seen")
    assert len(store) == 1


def test_an_object_read_without_a_status_has_none_kept() -> None:
    # Its status was cleared, or the uid is seen again (a test API server's objects).
    store = StatusStore()
    slim_object(_object("a"), store)
    bare = _object("a")
    del bare["status"]
    slim_object({"type": "MODIFIED", "object": bare}, store)
    assert store.get("uid-a") is None


def test_the_answer_to_a_write_keeps_its_status_in_place() -> None:
    # Kopf checks a patch's answer against its patch: a missing status reads as an inconsistency.
    store, written = StatusStore(), _object("a", {"replicas": 7})
    answer = slim_object(copy.deepcopy(written), store, keep_status=True)
    assert answer["status"] == {"replicas": 7}
    assert "managedFields" not in answer["metadata"]
    assert store.get("uid-a") == {"replicas": 7}


def test_an_object_without_a_uid_keeps_its_status() -> None:
    # A watch's ERROR event carries a Status object (its status is a word, and it has no uid).
    store = StatusStore()
    gone = {"type": "ERROR", "object": {"kind": "Status", "metadata": {}, "status": "Failure", "code": 410}}
    assert slim_object(copy.deepcopy(gone), store) == gone
    no_uid = _object("x")
    del no_uid["metadata"]["uid"]
    assert slim_object(copy.deepcopy(no_uid), store)["status"] == no_uid["status"]
    assert len(store) == 0


def test_the_status_of_a_body_its_own_else_the_kept_one() -> None:
    STATUSES.put("uid-kept", {"replicas": 4})
    try:
        assert status_of({"metadata": {"uid": "uid-kept"}}) == {"replicas": 4}
        assert status_of({"metadata": {"uid": "uid-kept"}, "status": {"replicas": 5}}) == {"replicas": 5}
        assert status_of({"metadata": {"uid": "uid-unknown"}}) is None
        assert status_of({"metadata": {}}) is None
        assert status_of({}) is None
        mine = status_of({"metadata": {"uid": "uid-kept"}})
        assert mine is not None
        mine["replicas"] = 9  # a caller's copy: the kept status is unchanged
        assert status_of({"metadata": {"uid": "uid-kept"}}) == {"replicas": 4}
    finally:
        STATUSES.drop("uid-kept")


def test_a_line_that_is_not_json_is_passed_as_it_is() -> None:
    broken = b'{"type": "ADDED", "object": {"metadata": {"managedFields": ['
    assert slim_line(broken, StatusStore()) is broken


@pytest.mark.parametrize("kind", ["ADDED", "MODIFIED", "DELETED"])
def test_a_line_naming_neither_field_still_drops_the_kept_status(kind: str) -> None:
    # A test API server's objects carry no managedFields, and may reuse a uid.
    store = StatusStore()
    slim_object(_object("x"), store)
    plain = json.dumps({"type": kind, "object": _as_kopf_sees(_object("x"))}).encode()
    assert json.loads(slim_line(plain, store)) == json.loads(plain)
    assert store.get("uid-x") is None


def test_the_answer_removing_the_last_finalizer_keeps_no_status() -> None:
    # The delete handler forgot the object; the finalizer patch's answer must not bring it back.
    store = StatusStore()
    slim_object(_object("x"), store)
    deleting = _object("x")
    deleting["metadata"]["deletionTimestamp"] = "2026-12-06T12:00:00Z"
    answer = slim_object(copy.deepcopy(deleting), store, keep_status=True)
    assert answer["status"] == deleting["status"]
    assert store.get("uid-x") is None


def _in(name: str, namespace: str) -> dict[str, Any]:
    obj = _object(name, {"replicas": len(name)})
    obj["metadata"]["namespace"] = namespace
    return obj


def test_a_whole_list_forgets_what_it_lacks_in_its_scope_only() -> None:
    store = StatusStore()
    slim_object({"items": [_in("a", "team-a"), _in("b", "team-a"), _in("c", "team-b")]}, store)
    paged = {"metadata": {"continue": "next"}, "items": [_in("a", "team-a")]}
    slim_list(paged, "/apis/llmscale.dev/v1alpha1/namespaces/team-a/llmdeployments", store)
    assert len(store) == 3, "a page is not the whole list"
    slim_list({"metadata": {}, "items": [_in("a", "team-a")]},
              "/apis/llmscale.dev/v1alpha1/namespaces/team-a/llmdeployments", store)
    assert (store.get("uid-a"), store.get("uid-b"), store.get("uid-c")) == ({"replicas": 1}, None, {"replicas": 1})
    slim_list({"items": [_in("a", "team-a")]}, "/apis/llmscale.dev/v1alpha1/llmdeployments", store)
    assert store.get("uid-c") is None, "a cluster-wide list speaks for every namespace"
    assert store.get("uid-a") == {"replicas": 1}


_JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
                     max_leaves=12)


@given(status=st.dictionaries(st.text(max_size=8), _JSON, max_size=4), kind=st.sampled_from(["ADDED", "MODIFIED"]))
def test_a_slimmed_line_parses_to_the_same_event_without_either_field(status: dict[str, Any], kind: str) -> None:
    obj, store = _object("x", status), StatusStore()
    line = json.dumps({"type": kind, "object": obj}).encode()
    assert json.loads(slim_line(line, store)) == {"type": kind, "object": _as_kopf_sees(obj)}
    assert store.get("uid-x") == obj["status"]


@contextlib.asynccontextmanager
async def _api_server(chunk: int) -> AsyncIterator[str]:
    """A real aiohttp server on 127.0.0.1: a watch (``?watch=true``) of LLMDeployments or Jobs
    streams three events, each with a status of its own, ``chunk`` bytes per write (lines split
    across writes); a GET without ``watch`` answers a LIST of two; a PATCH answers the patched
    object; yields its base URL."""
    from aiohttp import web

    async def handle(request: web.Request) -> web.StreamResponse:
        if request.method == "PATCH":
            return web.json_response(_object("p", await request.json()))
        if request.query.get("watch") != "true":
            return web.json_response({"kind": "List", "items": [_object("a"), _object("b")]})
        response = web.StreamResponse()
        response.content_type = "application/json"
        await response.prepare(request)
        body = b"".join(json.dumps({"type": "MODIFIED", "object": _object(f"o{i}", {"replicas": i})}).encode() + b"\n"
                        for i in range(3))
        for start in range(0, len(body), chunk):
            await response.write(body[start:start + chunk])
            await asyncio.sleep(0)
        await response.write_eof()
        return response

    async with serving(handle) as base:
        yield base


@pytest.mark.parametrize("chunk", [7, 300, 1 << 20])
async def test_kopf_reads_llmdeployments_slimmed_jobs_whole(chunk: int) -> None:
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
                assert all(("status" in e["object"]) is not slim for e in events), path
                assert [status_of(e["object"]) for e in events] == [{"replicas": i} for i in range(3)]
                # As Kopf reads a LIST or a patch's answer.
                async with session.get(f"{base}{path}") as response:
                    listed = await response.json()
                assert [("managedFields" in item["metadata"]) is not slim for item in listed["items"]] == [True] * 2
                assert [("status" in item) is not slim for item in listed["items"]] == [True] * 2
                # As Kopf reads a patch's answer, which it checks against the patch.
                STATUSES.drop("uid-p")
                async with session.patch(f"{base}{path}/p", json={"replicas": 5}) as response:
                    patched = await response.json()
                assert patched["status"] == {"replicas": 5}
                assert ("managedFields" in patched["metadata"]) is not slim
                assert STATUSES.get("uid-p") == ({"replicas": 5} if slim else None)
    finally:
        await session.close()
        for uid in ("uid-a", "uid-b", "uid-o0", "uid-o1", "uid-o2", "uid-p"):
            STATUSES.drop(uid)
