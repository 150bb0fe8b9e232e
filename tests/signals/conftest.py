"""A canned Prometheus: an aiohttp server on 127.0.0.1 that answers /api/v1/query with set bodies.

The reader under test talks to it through prometheus-api-client and ``requests`` — real HTTP,
nothing of ours is patched.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web

#: Prometheus's evaluation time in the canned answers, seconds since the epoch.
EVAL_S = 1_700_000_000.0


@dataclass
class Answer:
    """One canned HTTP answer."""

    status: int = 200
    body: str = ""
    delay_s: float = 0.0


def vector_body(signals: dict[str, str], eval_s: float = EVAL_S, extra: list[Any] | None = None) -> str:
    """Return a Prometheus instant-vector success body with one series per ``signal -> value``."""
    result: list[Any] = [
        {"metric": {"llmscale_signal": name}, "value": [eval_s, value]} for name, value in signals.items()
    ]
    result += extra or []
    return json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}})


@dataclass
class CannedPrometheus:
    """The canned server's state: answers to give (in order; the last one repeats) and requests seen."""

    url: str = ""
    answers: list[Answer] = field(default_factory=lambda: [Answer(body=vector_body({}))])
    queries: list[str] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)

    eval_s: float = EVAL_S

    def answer(self, *answers: Answer) -> None:
        """Give these answers to the next requests, in order; the last one repeats."""
        self.answers = list(answers)

    def vector(self, signals: dict[str, str], extra: list[Any] | None = None, status: int = 200) -> Answer:
        """Return a success answer with one series per ``signal -> value`` (see :func:`vector_body`)."""
        return Answer(status=status, body=vector_body(signals, self.eval_s, extra))

    def raw(self, body: str, status: int = 200, delay_s: float = 0.0) -> Answer:
        """Return an answer with this exact body."""
        return Answer(status=status, body=body, delay_s=delay_s)


@pytest.fixture
async def canned() -> AsyncIterator[CannedPrometheus]:
    state = CannedPrometheus()

    async def query(request: web.Request) -> web.Response:
        params = await request.post() if request.method == "POST" else request.query
        state.queries.append(str(params.get("query", "")))
        state.headers.append(dict(request.headers))
        answer = state.answers.pop(0) if len(state.answers) > 1 else state.answers[0]
        if answer.delay_s:
            await asyncio.sleep(answer.delay_s)
        return web.Response(status=answer.status, text=answer.body, content_type="application/json")

    app = web.Application()
    app.router.add_route("*", "/api/v1/query", query)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    state.url = f"http://127.0.0.1:{port}"
    try:
        yield state
    finally:
        await runner.cleanup()


@pytest.fixture
def refused_url() -> str:
    """A URL on 127.0.0.1 where nothing listens (a port just bound and released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"
