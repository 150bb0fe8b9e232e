"""The operator's HTTP session to the API server: one aiohttp connection pool for Kopf's watch
streams and requests, with a limit that can never deadlock.

Kopf's own session has no limit (``aiohttp.TCPConnector(limit=0)``, Kopf 1.45
``kopf/_cogs/clients/auth.py``): in a creation burst of 1,000 LLMDeployments the operator held
about 1,000 TLS connections to the API server, one per status patch in flight, most of its peak
memory (issue 14). Kopf accepts a session of our own from a login handler
(``kopf.AiohttpSession``); :func:`session_login` returns one built from the same credentials Kopf
would use (:func:`connection_info`: CA, client certificate and key, bearer token or basic auth;
the same ``kopf/<version>`` User-Agent, which Kopf adds to any session that has none), whose
connector holds at most :attr:`ConnectionBudget.limit` connections.

A watch stream holds its connection for its whole life, so the limit is the number of streams Kopf
opens (:func:`connection_budget`, from the registry and the namespaces served) plus
``settings.api_requests`` for everything else (patches, Events, the LIST before each watch, the
peering heartbeat): requests beyond that wait for a free connection instead of opening one.
Where the namespaces served are not known in advance (a pattern such as ``team-*`` with cluster
scanning: a namespace created later gets its own streams), the pool is left unbounded as Kopf
leaves it, and the login says so.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
import kopf
import kubernetes.client

from llmscale.controller.settings import OperatorSettings
from llmscale.controller.slimbodies import SlimResponse

__all__ = [
    "PEERING_RESOURCES",
    "ConnectionBudget",
    "PeeringFirst",
    "connection_budget",
    "connection_info",
    "exact_namespaces",
    "is_peering_keepalive",
    "session_login",
    "wait_trace",
    "watched_resources",
]

_LOG = logging.getLogger(__name__)

#: Peering resources Kopf may watch in each namespace served (or once, cluster-wide): both
#: ``kopfpeerings.kopf.dev`` and the legacy ``kopfpeerings.zalando.org`` where both CRDs are
#: installed (Kopf 1.45 ``kopf/_core/engines/peering.py``, ``guess_selectors``).
PEERING_RESOURCES = 2

#: Sessions remembered per login: Kopf's vault keeps the last 3 invalidated credentials of a login
#: handler and ignores them when returned again (``kopf/_cogs/structs/credentials.py``,
#: ``Vault.invalidate``), one more for the current one.
_REMEMBERED_SESSIONS = 4


@dataclass(frozen=True, slots=True)
class ConnectionBudget:
    """How many connections to the API server the operator may hold.

    Attributes:
        streams: watch streams Kopf opens (each holds a connection for its whole life); ``None``
            when the namespaces served are not known in advance.
        requests: connections for concurrent requests besides the streams (>= 1).
    """

    streams: int | None
    requests: int

    @property
    def limit(self) -> int:
        """The connector's limit: ``streams + requests``; 0 (aiohttp: no limit) when ``streams`` is
        unknown."""
        return 0 if self.streams is None else self.streams + self.requests


def watched_resources(registry: kopf.OperatorRegistry) -> int:
    """Return the number of distinct resources the registry's handlers and indexes watch (one watch
    stream each per namespace served).

    The same union of selectors Kopf watches (Kopf 1.45 ``kopf/_core/reactor/observation.py``,
    ``revise_resources``: indexing, watching, spawning and changing handlers); several handlers
    or indexes on one resource share its stream.
    """
    selectors = (registry._indexing.get_all_selectors() | registry._watching.get_all_selectors()
                 | registry._spawning.get_all_selectors() | registry._changing.get_all_selectors())
    return len(selectors)


def exact_namespaces(patterns: tuple[str, ...]) -> frozenset[str] | None:
    """Return the namespace names ``patterns`` name exactly, or ``None`` when one of them is a
    pattern (``*``, ``?``, ``[``, a negation ``!`` or a comma-separated list; Kopf 1.45
    ``kopf/_cogs/structs/references.py``, ``select_specific_namespaces`` and ``match_namespace``).
    """
    if any(any(c in p for c in "*?[!,") for p in patterns):
        return None
    return frozenset(patterns)


def connection_budget(registry: kopf.OperatorRegistry, settings: OperatorSettings) -> ConnectionBudget:
    """Return the connections the operator needs: a stream per watched resource per namespace
    served (once per resource cluster-wide with ``all_namespaces``), the peering streams, the
    Namespace and CRD watches of cluster scanning, plus ``settings.api_requests``.

    With ``cluster_scanning`` off Kopf serves only the namespaces named exactly (patterns are
    ignored); with it on, a pattern may match namespaces created later, so the streams are
    unknown (``None``).
    """
    resources = watched_resources(registry)
    peering = 0 if settings.peering is None else PEERING_RESOURCES
    # Kopf's resource observer watches CRDs; its namespace observer watches Namespaces unless it
    # serves the whole cluster (kopf/_core/reactor/observation.py).
    observers = 0 if not settings.cluster_scanning else 1 if settings.all_namespaces else 2
    if settings.all_namespaces:
        return ConnectionBudget(resources + peering + observers, settings.api_requests)
    names = exact_namespaces(settings.namespaces)
    if names is None:
        if settings.cluster_scanning:
            return ConnectionBudget(None, settings.api_requests)
        # Kopf's own rule without scanning (``select_specific_namespaces``): ``[`` is no pattern
        # there, so such a name is watched as it is and its streams are counted.
        names = frozenset(p for p in settings.namespaces if not any(c in p for c in "*?!,"))
    return ConnectionBudget(len(names) * (resources + peering) + observers, settings.api_requests)


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


def wait_trace(waited: Callable[[float], None]) -> aiohttp.TraceConfig:
    """Return an aiohttp trace that calls ``waited(seconds)`` once for every request that waited for
    a free connection of the pool: from the first ``on_connection_queued_start`` to the connection
    obtained (``on_connection_reuseconn``) or being opened (``on_connection_create_start``), or to the request's
    failure (``on_request_exception``: a wait cancelled or timed out is still reported). A request
    that found a connection free is not reported.

    Not from ``queued_start`` to ``queued_end``: a request woken by a freed connection that another
    takes first queues again (aiohttp 3.14 ``connector.py``, ``_wait_for_available_connection``),
    so one long wait would read as several short ones.

    Why it is measured: Kopf's peering keep-alive goes through the same pool, and Kopf sends it
    5–10 s before the peer's lifetime ends (Kopf 1.45 ``kopf/_core/engines/peering.py``,
    ``keepalive``). A wait longer than that, with ``replicaCount > 1``, lets a standby take the
    lead while this replica still works; ``llmscale_api_connection_wait_seconds`` shows how close
    a burst comes.
    """
    trace = aiohttp.TraceConfig()

    async def queued(_session: Any, ctx: Any, _params: Any) -> None:
        if getattr(ctx, "queued_at", None) is None:
            ctx.queued_at = asyncio.get_running_loop().time()

    async def done(_session: Any, ctx: Any, _params: Any) -> None:
        start = getattr(ctx, "queued_at", None)
        if start is not None:
            ctx.queued_at = None
            waited(asyncio.get_running_loop().time() - start)

    trace.on_connection_queued_start.append(queued)
    trace.on_connection_reuseconn.append(done)
    trace.on_connection_create_start.append(done)  # the wait ends; the TLS handshake is not it
    trace.on_request_exception.append(done)
    return trace


#: API groups of Kopf's peering resources (``kopf.dev``, and the legacy ``zalando.org``).
_PEERING_GROUPS = ("kopf.dev", "zalando.org")
#: Set while the connector looks for a connection for a peering keep-alive (:class:`PeeringFirst`).
_KEEPALIVE: contextvars.ContextVar[bool] = contextvars.ContextVar("llmscale_peering_keepalive", default=False)


def is_peering_keepalive(method: str, path: str) -> bool:
    """Whether a request is Kopf's peering keep-alive: a ``PATCH`` of a ``KopfPeering`` or
    ``ClusterKopfPeering`` (``kopf.dev`` or the legacy ``zalando.org``; Kopf 1.45
    ``kopf/_core/engines/peering.py``, ``touch``)."""
    parts = path.strip("/").split("/")
    if method.upper() != "PATCH" or "apis" not in parts:
        return False
    # After the server's own path, if any (``https://rancher/k8s/clusters/c-1/apis/...``).
    parts = parts[len(parts) - 1 - parts[::-1].index("apis"):]
    if len(parts) < 5 or parts[1] not in _PEERING_GROUPS:
        return False
    return parts[3] == "clusterkopfpeerings" or (parts[3] == "namespaces" and parts[5:6] == ["kopfpeerings"])


class PeeringFirst(aiohttp.TCPConnector):
    """A connector whose limit never holds back Kopf's peering keep-alive.

    The keep-alive goes through the same pool as the status patches, and Kopf sends it 5–10 s
    before this replica's peering lifetime ends (Kopf 1.45 ``kopf/_core/engines/peering.py``,
    ``keepalive``). In issue 14's creation burst of 1,000 objects (``benchmarks/scale.py``), 1,037
    requests waited more than 5 s for a connection, up to 10 s: with ``replicaCount > 1`` a
    standby could have taken the lead while this replica still worked. A keep-alive takes an idle
    connection if there is one and otherwise opens its own at once, beyond the limit (one more
    connection while it lasts, closed when it is released); every other request waits its turn as
    before.

    How: aiohttp asks ``_available_connections`` before queueing a request (aiohttp 3.14
    ``connector.py``, ``BaseConnector.connect``); while :meth:`connect` serves a keep-alive it
    answers one. ``tests/operator/test_apisession.py`` fails if aiohttp stops asking.
    """

    async def connect(self, req: aiohttp.ClientRequest, traces: Any, timeout: aiohttp.ClientTimeout) -> Any:
        token = _KEEPALIVE.set(is_peering_keepalive(req.method, req.url.path))
        try:
            return await super().connect(req, traces, timeout)
        finally:
            _KEEPALIVE.reset(token)

    def _available_connections(self, key: Any) -> int:
        if _KEEPALIVE.get():
            return 1
        return int(super()._available_connections(key))

    def _release(self, key: Any, protocol: Any, *, should_close: bool = False) -> None:
        # A connection released while the pool holds more than its limit (the keep-alive's own)
        # is closed, not kept idle: an idle one would be reused by the next request without a
        # limit check (``connect`` takes an idle connection first) and the pool would stay over.
        over = bool(self.limit) and len(self._acquired) > self.limit
        super()._release(key, protocol, should_close=should_close or over)


def _session(
    info: kopf.ConnectionInfo, limit: int, waited: Callable[[float], None] | None = None
) -> kopf.AiohttpSession:
    """An aiohttp session as Kopf builds one for ``info`` (``APIContext.__init__``), with a
    connector of at most ``limit`` connections (0: no limit; the peering keep-alive never waits,
    :class:`PeeringFirst`), reporting queue waits to ``waited``; LLMDeployments reach Kopf
    without ``managedFields`` (:class:`~llmscale.controller.slimbodies.SlimResponse`)."""
    connector = PeeringFirst(limit=limit, ssl=info.as_ssl_context())
    session = aiohttp.ClientSession(connector=connector, headers=info.as_http_headers(),
                                    proxy=info.proxy_url, trust_env=info.trust_env, response_class=SlimResponse,
                                    trace_configs=[wait_trace(waited)] if waited is not None else None)
    return kopf.AiohttpSession(server=info.server, default_namespace=info.default_namespace,
                               aiohttp_session=session)


def session_login(
    config: Callable[[Any], kubernetes.client.Configuration],
    budget: Callable[[], ConnectionBudget],
    waited: Callable[[Any], Callable[[float], None]] | None = None,
) -> Callable[..., Awaitable[kopf.AiohttpSession]]:
    """Return a Kopf login handler that logs in with a bounded session.

    Args:
        config: the official client's configuration, from Kopf's ``memo``.
        budget: the connections allowed, asked at each login (the registry is complete by then).
        waited: from Kopf's ``memo``, what to call with the seconds each request waited for a
            free connection (:func:`wait_trace`); ``None``: not measured.

    Returns:
        An async ``on.login`` handler returning a ``kopf.AiohttpSession``. Kopf closes a session
        when its credentials are invalidated (a 401) and at exit (``Vault._flush_caches``); a
        re-login with the same credentials returns the session already handed out for them, which
        Kopf's vault recognises as invalid and does not retry, as it does for a ``ConnectionInfo``
        returned twice, so no session is opened that the vault would never close.
    """
    handed: OrderedDict[kopf.ConnectionInfo, kopf.AiohttpSession] = OrderedDict()

    async def login(*, memo: Any, **_: Any) -> kopf.AiohttpSession:
        info = connection_info(config(memo))
        if info in handed:
            return handed[info]
        allowed = budget()
        if allowed.streams is None:
            _LOG.info("Left connections to the API server unbounded: a namespace pattern may match "
                      "namespaces created later")
        else:
            _LOG.info(f"Limited connections to the API server to {allowed.limit}: {allowed.streams} watch "
                      f"streams and {allowed.requests} requests")
        handed[info] = _session(info, allowed.limit, None if waited is None else waited(memo))
        while len(handed) > _REMEMBERED_SESSIONS:
            handed.popitem(last=False)
        return handed[info]

    return login
