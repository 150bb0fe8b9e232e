"""The operator's session to the API server: a connection limit of the watch streams plus a request
budget, derived from the registry and the namespaces served (issue 14), and Kopf's re-login
closing each session it drops (Kopf's own vault and API context, not stand-ins)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import kopf
import kubernetes.client
import pytest
from kopf._cogs.clients.auth import APIContext
from kopf._cogs.structs.credentials import Vault
from tests.aioserve import serving

from llmscale.controller.apisession import (
    PEERING_RESOURCES,
    ConnectionBudget,
    connection_budget,
    connection_info,
    exact_namespaces,
    is_peering_keepalive,
    session_login,
    watched_resources,
)
from llmscale.controller.handlers import build_registry
from llmscale.controller.settings import OperatorSettings

#: llmscale's registry watches LLMDeployments, Deployments, pods, Jobs, HPAs and ScaledObjects.
OURS = 6


def _settings(**kw: Any) -> OperatorSettings:
    return OperatorSettings(**kw)


def test_the_registry_watches_one_stream_per_resource_not_per_index() -> None:
    assert watched_resources(build_registry(_settings(namespaces=("a",)))) == OURS
    registry = kopf.OperatorRegistry()
    kopf.index("", "v1", "pods", id="one", registry=registry)(lambda **_: None)
    kopf.index("", "v1", "pods", id="two", registry=registry)(lambda **_: None)
    kopf.on.create("apps", "v1", "deployments", registry=registry)(lambda **_: None)
    kopf.on.login(registry=registry)(lambda **_: None)  # activities hold no stream
    assert watched_resources(registry) == 2


@pytest.mark.parametrize(("settings", "streams"), [
    # A stream per resource and peering resource per namespace, plus the CRD and Namespace watches.
    (dict(namespaces=("a",)), 1 * (OURS + PEERING_RESOURCES) + 2),
    (dict(namespaces=("a", "b", "c"), api_requests=2), 3 * (OURS + PEERING_RESOURCES) + 2),
    (dict(namespaces=("a", "b", "a")), 2 * (OURS + PEERING_RESOURCES) + 2),
    (dict(namespaces=("a", "b"), standalone=True), 2 * OURS + 2),
    (dict(namespaces=("a", "b"), standalone=True, cluster_scanning=False, api_requests=1), 2 * OURS),
    # Cluster-wide: one stream per resource whatever the number of namespaces, and no Namespace watch.
    (dict(all_namespaces=True), OURS + PEERING_RESOURCES + 1),
    (dict(all_namespaces=True, standalone=True, cluster_scanning=False), OURS),
    # Without scanning Kopf serves only the names given exactly; patterns are ignored.
    (dict(namespaces=("a", "team-*"), cluster_scanning=False), 1 * (OURS + PEERING_RESOURCES)),
])
def test_the_limit_is_the_streams_plus_the_requests(settings: dict[str, Any], streams: int) -> None:
    s = _settings(**settings)
    budget = connection_budget(build_registry(s), s)
    assert budget == ConnectionBudget(streams, s.api_requests)
    assert budget.limit == streams + s.api_requests


def test_the_limit_follows_the_registry() -> None:
    s = _settings(namespaces=("a", "b"), standalone=True, cluster_scanning=False, api_requests=3)
    registry = kopf.OperatorRegistry()
    kopf.on.create("llmscale.dev", "v1alpha1", "llmdeployments", registry=registry)(lambda **_: None)
    assert connection_budget(registry, s).limit == 2 * 1 + 3


@pytest.mark.parametrize("pattern", ["team-*", "team-?", "team-[ab]", "!kube-system", "a,b"])
def test_a_namespace_pattern_with_scanning_leaves_the_pool_unbounded(pattern: str) -> None:
    s = _settings(namespaces=("a", pattern))
    budget = connection_budget(build_registry(s), s)
    assert budget.streams is None and budget.limit == 0  # aiohttp: no limit, as Kopf's own session
    assert exact_namespaces(("a", pattern)) is None
    assert exact_namespaces(("a", "b-1")) == frozenset({"a", "b-1"})


def test_without_scanning_the_streams_follow_kopfs_own_rule_for_exact_names() -> None:
    # Kopf 1.45 select_specific_namespaces: without scanning, "[" is no pattern and the name is
    # watched as it is; the patterns with "*", "?", "!" or "," are dropped (review).
    s = _settings(namespaces=("a", "team-[ab]", "team-*"), cluster_scanning=False)
    one = _settings(namespaces=("a",), cluster_scanning=False)
    streams = connection_budget(build_registry(s), s).streams
    assert streams is not None and streams == 2 * connection_budget(build_registry(one), one).streams


def test_the_request_budget_is_at_least_one() -> None:
    with pytest.raises(ValueError, match="api_requests"):
        _settings(namespaces=("a",), api_requests=0)


def _config(token: str) -> kubernetes.client.Configuration:
    config = kubernetes.client.Configuration(host="https://127.0.0.1:6443")
    config.api_key = {"authorization": token}
    config.api_key_prefix = {"authorization": "Bearer"}
    return config


async def test_the_login_session_has_the_connection_limit_the_credentials_kopfs_user_agent() -> None:
    config = _config("t0k3n")
    login = session_login(lambda memo: config, lambda: ConnectionBudget(10, 2))
    ctx = await login(memo=None)
    try:
        assert isinstance(ctx, kopf.AiohttpSession) and ctx.server == "https://127.0.0.1:6443"
        session = ctx.aiohttp_session
        assert isinstance(session.connector, aiohttp.TCPConnector) and session.connector.limit == 12
        assert session.headers["Authorization"] == "Bearer t0k3n"
        # Kopf names its session after itself (managedFields say `kopf`, docs/operator.md).
        assert APIContext(ctx).session.headers["User-Agent"].startswith("kopf/")
    finally:
        await ctx.aiohttp_session.close()


async def test_basic_auth_is_kept() -> None:
    config = kubernetes.client.Configuration(host="https://127.0.0.1:6443", username="u", password="p")
    info = connection_info(config)
    assert info.username == "u" and info.password == "p"
    ctx = await session_login(lambda memo: config, lambda: ConnectionBudget(1, 1))(memo=None)
    try:
        assert ctx.aiohttp_session.headers["Authorization"] == aiohttp.encode_basic_auth("u", "p")
    finally:
        await ctx.aiohttp_session.close()


def test_client_certificates_are_kept() -> None:
    certs = kubernetes.client.Configuration(host="https://h:6443")
    certs.cert_file, certs.key_file, certs.ssl_ca_cert = "/c.crt", "/c.key", "/ca.crt"
    info = connection_info(certs)
    assert (info.certificate_path, info.private_key_path, info.ca_path) == ("/c.crt", "/c.key", "/ca.crt")


@contextlib.asynccontextmanager
async def _after_a_401() -> AsyncIterator[tuple[Any, Any, Vault, Any, asyncio.Task[Any]]]:
    """A login handed to Kopf's vault, then a 401 on its credentials: the config, the login, the
    vault, the first session's context and the vault's wait for a re-login. Closes the vault."""
    config = _config("first")
    login = session_login(lambda memo: config, lambda: ConnectionBudget(4, 1))
    vault = Vault()
    first = await login(memo=None)
    await vault.populate({"login": first})
    key, info, context = await anext(aiter(vault.extended(APIContext, "contexts")))
    assert context.session is first.aiohttp_session
    # A 401: Kopf's vault drops the credentials, closes their session and waits for a re-login.
    waiting = asyncio.create_task(vault.invalidate(key, info, exc=RuntimeError("401 Unauthorized")))
    await asyncio.sleep(0)
    try:
        yield config, login, vault, first, waiting
    finally:
        waiting.cancel()
        with contextlib.suppress(asyncio.CancelledError, kopf.LoginError):
            await waiting
        await vault.close()


async def _fail_the_same_credentials(login: Any, vault: Vault, first: Any, waiting: asyncio.Task[Any]) -> None:
    # The same credentials again: the session already handed out (closed), which the vault ignores,
    # as it ignores a ConnectionInfo returned twice; no new session is opened for them.
    assert await login(memo=None) is first
    await vault.populate({"login": first})
    assert vault.is_empty()
    with pytest.raises(kopf.LoginError):
        await waiting


async def test_a_relogin_closes_the_old_session() -> None:
    async with _after_a_401() as (_, _, _, first, _):
        assert first.aiohttp_session.closed


async def test_a_relogin_never_reopens_failed_credentials() -> None:
    async with _after_a_401() as (_, login, vault, first, waiting):
        await _fail_the_same_credentials(login, vault, first, waiting)


async def test_a_refreshed_token_gets_a_new_open_session_with_the_same_limit() -> None:
    async with _after_a_401() as (config, login, vault, first, waiting):
        await _fail_the_same_credentials(login, vault, first, waiting)
        config.api_key = {"authorization": "second"}
        second = await login(memo=None)
        assert second is not first and not second.aiohttp_session.closed
        assert second.aiohttp_session.connector is not None and second.aiohttp_session.connector.limit == 5
        await vault.populate({"login": second})
        _, _, context = await anext(aiter(vault.extended(APIContext, "contexts")))
        assert context.session is second.aiohttp_session
        await vault.close()  # the operator's exit
        assert second.aiohttp_session.closed


@contextlib.asynccontextmanager
async def _slow_server(delay_s: float) -> AsyncIterator[str]:
    """A real aiohttp server on 127.0.0.1 that answers every method and path "ok" after
    ``delay_s`` seconds; yields its base URL."""
    from aiohttp import web

    async def slow(_request: web.Request) -> web.Response:
        await asyncio.sleep(delay_s)
        return web.Response(text="ok")

    async with serving(slow) as base:
        yield base


@contextlib.asynccontextmanager
async def _one_connection() -> AsyncIterator[tuple[aiohttp.ClientSession, list[float]]]:
    """The login's session with one request connection (no streams), and the waits it reports."""
    waits: list[float] = []
    ctx = await session_login(lambda memo: _config("t"), lambda: ConnectionBudget(0, 1), lambda memo: waits.append)(
        memo=None)
    try:
        yield ctx.aiohttp_session, waits
    finally:
        await ctx.aiohttp_session.close()


async def test_requests_that_wait_for_a_connection_are_measured() -> None:
    # Issue 14: Kopf's peering keep-alive shares the bounded pool; how long requests queue for a
    # connection is reported (llmscale_api_connection_wait_seconds), requests that found one free
    # are not. A real aiohttp server, one connection, three requests of 0.2 s each at once.
    async with _slow_server(0.2) as base, _one_connection() as (session, waits):
        async def get() -> str:
            async with session.get(f"{base}/") as response:
                return await response.text()

        assert await asyncio.gather(get(), get(), get()) == ["ok"] * 3
        assert len(waits) == 2, waits
        assert min(waits) >= 0.15 and 0.35 <= max(waits) < 2.0, waits
        waits.clear()
        assert await get() == "ok"
        assert waits == [], "a request that found a free connection did not wait"


async def test_a_wait_that_times_out_is_reported_once_with_its_length() -> None:
    # Review of issue 14: a wait cancelled or timed out never reached queued_end and went
    # unreported; it is reported at the request's failure, once.
    async with _slow_server(0.5) as base, _one_connection() as (session, waits):
        holder = asyncio.create_task(session.get(f"{base}/"))
        await asyncio.sleep(0.05)  # the one connection is taken
        with pytest.raises(asyncio.TimeoutError):
            await session.get(f"{base}/", timeout=aiohttp.ClientTimeout(total=0.2))
        assert len(waits) == 1 and 0.15 <= waits[0] < 0.45, waits
        (await holder).release()


@pytest.mark.parametrize(
    ("method", "path", "keepalive"),
    [
        ("PATCH", "/apis/kopf.dev/v1/namespaces/ml/kopfpeerings/llmscale", True),
        ("PATCH", "/apis/kopf.dev/v1/clusterkopfpeerings/llmscale", True),
        ("PATCH", "/apis/zalando.org/v1/namespaces/ml/kopfpeerings/llmscale", True),
        ("PATCH", "/apis/kopf.dev/v1/namespaces/ml/kopfpeerings/llmscale/status", True),
        ("PATCH", "/k8s/clusters/c-1/apis/kopf.dev/v1/clusterkopfpeerings/llmscale", True),  # a server path
        ("GET", "/apis/kopf.dev/v1/namespaces/ml/kopfpeerings", False),  # the watch: a counted stream
        ("PATCH", "/apis/llmscale.dev/v1alpha1/namespaces/ml/llmdeployments/chat/status", False),
        ("PATCH", "/api/v1/namespaces/kopfpeerings/pods/p", False),  # a namespace of that name
    ],
)
def test_which_requests_are_the_peering_keepalive(method: str, path: str, keepalive: bool) -> None:
    assert is_peering_keepalive(method, path) is keepalive


async def test_the_peering_keepalive_never_waits_for_a_connection() -> None:
    # Issue 14's 1,000 burst: 1,037 requests waited over 5 s for a connection of the bounded pool,
    # past the margin of Kopf's peering keep-alive. With the one request connection taken and a
    # status patch queued behind it, the keep-alive goes through at once; the status patch waits.
    async with _slow_server(0.4) as base, _one_connection() as (session, waits):
        loop = asyncio.get_running_loop()

        async def timed(method: str, path: str) -> float:
            start = loop.time()
            async with session.request(method, base + path) as response:
                await response.text()
            return loop.time() - start

        holder = asyncio.create_task(timed("GET", "/api/v1/pods"))
        await asyncio.sleep(0.05)
        queued = asyncio.create_task(timed("PATCH", "/apis/llmscale.dev/v1alpha1/namespaces/ml/llmdeployments/c/status"))
        await asyncio.sleep(0.05)
        keepalive = await timed("PATCH", "/apis/kopf.dev/v1/namespaces/ml/kopfpeerings/llmscale")
        assert keepalive < 0.6, f"the keep-alive waited for the pool ({keepalive:.2f} s)"
        assert await queued > 0.6, "the status patch waited its turn"
        await holder
        assert len(waits) == 1, waits  # the status patch only
        # The keep-alive's own connection was closed, not kept idle for the next request to reuse
        # past the limit (connect() takes an idle connection before any limit check).
        connector = session.connector
        assert isinstance(connector, aiohttp.TCPConnector)
        held = len(connector._acquired) + sum(len(idle) for idle in connector._conns.values())
        assert held <= connector.limit, held
