"""``spec.routing`` carried out (llmscale.controller.routing) against a fake of the API server's
InferencePools: each outcome, and a refusal reported as the children's are. The same against a
real API server with the extension's CRD: tests/cluster/test_inferencepool.py."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import kopf
import kubernetes.client
import pytest
from tests.operator.test_tick import FakeInferencePools, llmdeployment

from llmscale.controller.manifests.inferencepool import default_picker
from llmscale.controller.metrics import OperatorMetrics
from llmscale.controller.routing import sync_inference_pool
from llmscale.controller.spec import read_spec
from llmscale.controller.writer import ApplyRefused

LOG = logging.getLogger("test_routing")
NS, NAME = "serving", "chat"


def sync(pools: Any, **routing: Any) -> str:
    raw = llmdeployment(**({"routing": routing} if routing else {}))
    body = kopf.Body(raw)
    return asyncio.run(sync_inference_pool(pools, OperatorMetrics(), body, read_spec(body), namespace=NS,
                                           name=NAME, logger=LOG))


def test_without_a_client_nothing_is_done() -> None:
    assert sync(None) == "none"


def test_a_cluster_without_the_extension_gets_nothing() -> None:
    pools = FakeInferencePools(is_served=False)
    assert sync(pools) == "not-served"
    assert pools.objects == {}


def test_the_pool_is_applied_owned_with_the_endpoint_picker_of_the_spec() -> None:
    pools = FakeInferencePools(is_served=True)
    assert sync(pools, endpointPicker={"service": "shared-epp", "port": 9102}) == "applied"
    pool = pools.objects[NS, NAME]
    assert pool["metadata"]["ownerReferences"][0]["uid"] == llmdeployment()["metadata"]["uid"]
    assert pool["spec"]["endpointPickerRef"] == {"name": "shared-epp", "port": {"number": 9102},
                                                 "failureMode": "FailOpen"}
    assert sync(pools) == "applied"  # applied again on every ensure: server-side apply is idempotent
    assert pools.objects[NS, NAME]["spec"]["endpointPickerRef"]["name"] == f"{NAME}-epp"


@pytest.mark.parametrize(("routing", "outcome"), [({}, "not-ours"), ({"inferencePool": "Disabled"}, "none")],
                         ids=["auto", "disabled"])
def test_a_pool_someone_else_owns_is_never_written_nor_deleted(routing: dict[str, Any], outcome: str) -> None:
    theirs = {"metadata": {"name": NAME, "namespace": NS, "ownerReferences": [{"uid": "someone-else"}]}}
    pools = FakeInferencePools(is_served=True, objects={(NS, NAME): theirs})
    assert sync(pools, **routing) == outcome  # Disabled: no warning either, as the docs promise
    assert pools.objects[NS, NAME] is theirs and pools.applies == 0


def _disable(pools: FakeInferencePools) -> str:
    sync(pools)
    return sync(pools, inferencePool="Disabled")


def test_disabled_deletes_ours() -> None:
    pools = FakeInferencePools(is_served=True)
    assert _disable(pools) == "deleted"
    assert pools.objects == {}


def test_disabled_once_deleted_has_nothing_to_do() -> None:
    pools = FakeInferencePools(is_served=True)
    _disable(pools)
    assert sync(pools, inferencePool="Disabled") == "none"


class Refusing(FakeInferencePools):
    async def read(self, namespace: str, name: str) -> dict[str, Any] | None:
        raise kubernetes.client.ApiException(status=403, reason="Forbidden")


def test_a_refusal_is_reported_as_a_childs() -> None:
    with pytest.raises(ApplyRefused, match=f"InferencePool {NS}/{NAME}: 403 Forbidden") as info:
        sync(Refusing(is_served=True))
    assert info.value.permanent


def test_a_pool_as_wanted_is_read_not_written() -> None:
    pools = FakeInferencePools(is_served=True)
    assert sync(pools) == "applied"
    assert sync(pools) == "unchanged" and pools.applies == 1
    pools.objects[NS, NAME]["spec"]["targetPorts"] = [{"number": 1}]  # edited by hand
    assert sync(pools) == "applied" and pools.objects[NS, NAME]["spec"]["targetPorts"] == [{"number": 8000}]


@pytest.mark.parametrize(("name", "picker"), [("chat", "chat-epp"), ("a" * 57, "a" * 40 + "-epp")])
def test_the_default_picker_is_named_as_the_extensions_chart_names_it(name: str, picker: str) -> None:
    assert default_picker(name) == picker
