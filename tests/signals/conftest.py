"""A canned Prometheus: an aiohttp server on 127.0.0.1 that answers the reader's queries with set bodies.

The reader under test talks to it through prometheus-api-client and ``requests`` — real HTTP,
nothing of ours is patched. ``/api/v1/query`` answers by query group (the reader sends one query
per group: ``pods``, ``rates``, ``pools``; anything else, such as the interval probe, is ``other``);
``/api/v1/targets`` answers a set body.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web
from tests.aioserve import serving_app

from llmscale.localcluster.ports import free_port
from llmscale.signals.queries import GROUPS, SIGNAL_LABEL

#: Prometheus's evaluation time in the canned answers, seconds since the epoch.
EVAL_S = 1_700_000_000.0
#: The pool the canned answers describe.
POOL = {"namespace": "ml", "llmscale_dev_deployment": "chat", "llmscale_dev_pool": "interactive"}


@dataclass
class Answer:
    """One canned HTTP answer."""

    status: int = 200
    body: str = ""
    delay_s: float = 0.0


def vector_body(result: list[Any]) -> str:
    """Return a Prometheus instant-vector success body holding ``result``."""
    return json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}})


def series(signal: str, value: str, eval_s: float = EVAL_S, **labels: str) -> dict[str, Any]:
    """One answer series of ``signal`` for POOL (labels override or add, e.g. ``pod="a"``)."""
    return {"metric": {**POOL, SIGNAL_LABEL: signal, **labels}, "value": [eval_s, value]}


def group_of(query: str) -> str:
    """The group a query answers, from the signal stamps it carries."""
    for group, signals in GROUPS.items():
        if f'"{SIGNAL_LABEL}", "{signals[0]}"' in query:
            return group
    return "other"


@dataclass
class CannedPrometheus:
    """The canned server's state: answers to give per group (the last repeats) and requests seen."""

    url: str = ""
    answers: dict[str, list[Answer]] = field(default_factory=dict)
    targets: Answer = field(
        default_factory=lambda: Answer(
            body=json.dumps(
                {
                    "status": "success",
                    "data": {
                        "activeTargets": [
                            {"labels": {**POOL, "pod": "a"}, "scrapeInterval": "15s", "health": "up"}
                        ],
                        "droppedTargets": [],
                    },
                }
            )
        )
    )
    queries: list[str] = field(default_factory=list)
    groups: list[str] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)  # path and query string of each /api/v1/query request
    targets_calls: int = 0
    in_flight: list[str] = field(default_factory=list)  # groups of the queries being answered now
    most_in_flight: int = 0  # the most queries answered at once
    alongside: list[tuple[str, list[str]]] = field(default_factory=list)  # (group, others in flight) per arrival
    by_text: dict[str, list[Answer]] = field(default_factory=dict)  # answers to queries holding a text

    def answer_containing(self, text: str, *answers: Answer) -> None:
        """Give these answers to the next requests whose query holds ``text`` (before any group's)."""
        self.by_text[text] = list(answers)

    def answer(self, *answers: Answer, group: str | None = None) -> None:
        """Give these answers to the next requests of ``group`` (every group when ``None``), in order."""
        for g in [group] if group else [*GROUPS, "other"]:
            self.answers[g] = list(answers)

    def vector(self, result: list[Any], status: int = 200) -> Answer:
        """Return a success answer holding ``result``."""
        return Answer(status=status, body=vector_body(result))

    def raw(self, body: str, status: int = 200, delay_s: float = 0.0) -> Answer:
        """Return an answer with this exact body."""
        return Answer(status=status, body=body, delay_s=delay_s)


@pytest.fixture
async def canned() -> AsyncIterator[CannedPrometheus]:
    state = CannedPrometheus()
    state.answer(Answer(body=vector_body([])))

    async def reply(answer: Answer) -> web.Response:
        if answer.delay_s:
            await asyncio.sleep(answer.delay_s)
        return web.Response(status=answer.status, text=answer.body, content_type="application/json")

    async def query(request: web.Request) -> web.Response:
        params = await request.post() if request.method == "POST" else request.query
        text = str(params.get("query", ""))
        group = group_of(text)
        state.queries.append(text)
        state.groups.append(group)
        state.headers.append(dict(request.headers))
        state.paths.append(request.path_qs)
        answers = next((a for t, a in state.by_text.items() if t in text), state.answers[group])
        state.alongside.append((group, list(state.in_flight)))
        state.in_flight.append(group)
        state.most_in_flight = max(state.most_in_flight, len(state.in_flight))
        try:
            return await reply(answers.pop(0) if len(answers) > 1 else answers[0])
        finally:
            state.in_flight.remove(group)

    async def targets(request: web.Request) -> web.Response:
        state.targets_calls += 1
        state.headers.append(dict(request.headers))
        return await reply(state.targets)

    app = web.Application()
    app.router.add_route("*", "/api/v1/query", query)
    app.router.add_get("/api/v1/targets", targets)
    async with serving_app(app) as state.url:
        yield state


@pytest.fixture
def refused_url() -> str:
    """A URL on 127.0.0.1 where nothing listens (a port just bound and released)."""
    port = free_port()
    return f"http://127.0.0.1:{port}"
