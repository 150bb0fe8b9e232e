"""The batch client over real HTTP against a canned OpenAI-style server (aiohttp on 127.0.0.1).

The server answers each request as its ``custom_id``'s script says (a list of statuses, one per
attempt, or a delay), and records every attempt: what was retried, what was not, how long a
``Retry-After`` held a retry back, and what a stop left for the next run.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections import defaultdict
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from tenacity import AsyncRetrying, RetryCallState
from tests.aioserve import serving_app

from llmscale.batch.client import BackoffWait, ClientSettings, _Retryable, endpoint_url, run_batch
from llmscale.batch.progress import make_reporter
from llmscale.batch.requests import BatchRequest
from llmscale.batch.results import OutputError, ResultsFile


@dataclass
class Canned:
    """``scripts[custom_id]``: statuses to answer, one per attempt (then 200); ``delay_s`` before each."""

    scripts: dict[str, list[int]] = field(default_factory=dict)
    retry_after: str | None = None
    delay_s: float = 0.0
    attempts: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    url: str = ""

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.json()
        cid = body["custom_id_echo"]
        self.attempts[cid].append(time.monotonic())
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        script = self.scripts.get(cid, [])
        n = len(self.attempts[cid]) - 1
        status = script[n] if n < len(script) else 200
        headers = {"x-request-id": f"req-{cid}-{n}"}
        if status == 429 and self.retry_after is not None:
            headers["Retry-After"] = self.retry_after
        if status >= 400:
            return web.json_response(
                {"error": {"message": f"scripted {status}"}}, status=status, headers=headers
            )
        return web.json_response({"id": f"cmpl-{cid}", "path": request.path}, headers=headers)


@pytest.fixture
async def canned() -> AsyncIterator[Canned]:
    server = Canned()
    app = web.Application()
    app.router.add_post("/v1/completions", server.handle)
    app.router.add_post("/v1/chat/completions", server.handle)
    async with serving_app(app) as server.url:
        yield server


def requests(n: int, url: str = "/v1/completions") -> list[BatchRequest]:
    return [BatchRequest(i + 1, f"r{i}", url, {"prompt": "hi", "custom_id_echo": f"r{i}"}) for i in range(n)]


def settings(url: str, **kw: Any) -> ClientSettings:
    base: dict[str, Any] = {"concurrency": 4, "backoff_base_s": 0.01, "backoff_max_s": 0.05, "grace_s": 5.0}
    return ClientSettings(url=url, **{**base, **kw})


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines()]


async def test_every_request_is_sent_once_with_its_status_in_its_result(canned: Canned, tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    with ResultsFile.open(out) as results:
        stats = await run_batch(requests(20), results, settings(canned.url), reporter=make_reporter("off"))
    assert (stats.succeeded, stats.failed, stats.remaining, stats.retries) == (20, 0, 0, 0)
    got = lines(out)
    assert sorted(r["custom_id"] for r in got) == sorted(f"r{i}" for i in range(20))
    first = next(r for r in got if r["custom_id"] == "r0")
    assert first["response"] == {
        "status_code": 200,
        "request_id": "req-r0-0",
        "body": {"id": "cmpl-r0", "path": "/v1/completions"},
    }


@pytest.mark.parametrize(
    ("script", "attempts", "status"),
    [
        pytest.param([503, 502, 500], 4, 200, id="5xx-retried"),
        pytest.param([429, 429], 3, 200, id="429-retried"),
        pytest.param([408], 2, 200, id="408-retried"),
        pytest.param([400], 1, 400, id="400-is-the-result"),
        pytest.param([404], 1, 404, id="404-is-the-result"),
        pytest.param([422, 500], 1, 422, id="422-not-retried"),
    ],
)
async def test_what_is_retried(
    canned: Canned, tmp_path: Path, script: list[int], attempts: int, status: int
) -> None:
    canned.scripts["r0"] = script
    with ResultsFile.open(tmp_path / "out.jsonl") as results:
        stats = await run_batch(requests(1), results, settings(canned.url), reporter=make_reporter("off"))
    assert len(canned.attempts["r0"]) == attempts
    [written] = lines(tmp_path / "out.jsonl")
    assert written["response"]["status_code"] == status
    assert (stats.succeeded, stats.failed) == ((1, 0) if status == 200 else (0, 1))


async def test_out_of_attempts_is_left_for_a_rerun(canned: Canned, tmp_path: Path) -> None:
    canned.scripts["r1"] = [503] * 10
    out = tmp_path / "out.jsonl"
    with ResultsFile.open(out) as results:
        stats = await run_batch(
            requests(3), results, settings(canned.url, max_attempts=3), reporter=make_reporter("off")
        )
    assert (stats.gave_up, stats.remaining, len(canned.attempts["r1"])) == (1, 1, 3)
    assert sorted(r["custom_id"] for r in lines(out)) == ["r0", "r2"]
    # The server recovers: the rerun sends only r1.
    canned.scripts["r1"] = []
    with ResultsFile.open(out) as results:
        again = await run_batch(requests(3), results, settings(canned.url), reporter=make_reporter("off"))
    assert (again.already_done, again.succeeded, again.remaining) == (2, 1, 0)
    assert len(canned.attempts["r0"]) == 1 and len(canned.attempts["r2"]) == 1
    assert sorted(r["custom_id"] for r in lines(out)) == ["r0", "r1", "r2"]


async def test_connection_refused_is_retried_then_left(tmp_path: Path) -> None:
    # A port nothing listens on: bind one and close it.
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()
    with ResultsFile.open(tmp_path / "out.jsonl") as results:
        stats = await run_batch(
            requests(2),
            results,
            settings(f"http://127.0.0.1:{port}", max_attempts=3),
            reporter=make_reporter("off"),
        )
    assert (stats.gave_up, stats.retries, stats.remaining) == (2, 4, 2)
    assert (tmp_path / "out.jsonl").read_text() == ""


async def test_retry_after_holds_the_retry_back(canned: Canned, tmp_path: Path) -> None:
    canned.scripts["r0"] = [429]
    canned.retry_after = "0.3"
    with ResultsFile.open(tmp_path / "out.jsonl") as results:
        await run_batch(
            requests(1), results, settings(canned.url, backoff_max_s=1.0), reporter=make_reporter("off")
        )
    first, second = canned.attempts["r0"]
    assert second - first >= 0.3


async def _stopped_after_a_round(canned: Canned, out: Path) -> Any:
    canned.delay_s = 0.3
    stop = asyncio.Event()
    with ResultsFile.open(out) as results:
        task = asyncio.create_task(
            run_batch(requests(40), results, settings(canned.url), reporter=make_reporter("off"), stop=stop)
        )
        while len(canned.attempts) < 6:  # the second round of 4 is in flight
            await asyncio.sleep(0.01)
        stop.set()
        return await task


async def test_stop_lets_the_requests_in_flight_finish_without_new_ones(canned: Canned, tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    stats = await _stopped_after_a_round(canned, out)
    sent = len(canned.attempts)
    assert stats.stopped and stats.cancelled == 0
    assert stats.succeeded == sent == len(lines(out)) < 40  # in flight finished, nothing new started


async def test_a_rerun_after_a_stop_sends_each_remaining_request_once(canned: Canned, tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    await _stopped_after_a_round(canned, out)
    sent = len(canned.attempts)
    with ResultsFile.open(out) as results:
        rest = await run_batch(
            requests(40), results, settings(canned.url, concurrency=40), reporter=make_reporter("off")
        )
    assert (rest.already_done, rest.succeeded, rest.remaining) == (sent, 40 - sent, 0)
    ids = [r["custom_id"] for r in lines(out)]
    assert sorted(ids) == sorted(f"r{i}" for i in range(40))  # every one exactly once
    assert all(len(v) == 1 for v in canned.attempts.values())


async def _stopped_past_the_grace(canned: Canned, out: Path) -> Any:
    canned.delay_s = 2.0
    stop = asyncio.Event()
    with ResultsFile.open(out) as results:
        task = asyncio.create_task(
            run_batch(
                requests(3),
                results,
                settings(canned.url, grace_s=0.1),
                reporter=make_reporter("off"),
                stop=stop,
            )
        )
        while len(canned.attempts) < 3:
            await asyncio.sleep(0.01)
        stop.set()
        return await task


async def test_once_the_grace_runs_out_the_requests_in_flight_are_cancelled(canned: Canned, tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    stats = await _stopped_past_the_grace(canned, out)
    assert (stats.stopped, stats.cancelled, stats.remaining) == (True, 3, 3)
    assert out.read_text() == ""


async def test_a_cancelled_request_is_sent_again_by_the_rerun(canned: Canned, tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    await _stopped_past_the_grace(canned, out)
    canned.delay_s = 0.0
    with ResultsFile.open(out) as results:
        rest = await run_batch(requests(3), results, settings(canned.url), reporter=make_reporter("off"))
    assert rest.succeeded == 3 and len(lines(out)) == 3


async def test_a_full_disk_stops_the_run(canned: Canned) -> None:
    with ResultsFile.open(Path("/dev/full")) as results, pytest.raises(OutputError, match="cannot append"):
        await run_batch(requests(10), results, settings(canned.url), reporter=make_reporter("off"))
    assert len(canned.attempts) < 10  # it stopped at the first failed write


def _failed_attempt(number: int, error: BaseException) -> RetryCallState:
    state = RetryCallState(retry_object=AsyncRetrying(), fn=None, args=(), kwargs={})
    state.attempt_number = number
    state.set_exception((type(error), error, None))
    return state


def test_backoff_is_full_jitter_under_a_doubling_ceiling() -> None:
    random.seed(7)  # tenacity draws from the module's generator
    wait = BackoffWait(1.0, 60.0)
    for attempt, ceiling in [(1, 1.0), (2, 2.0), (3, 4.0), (6, 32.0), (7, 60.0), (200, 60.0)]:
        draws = [wait(_failed_attempt(attempt, _Retryable("HTTP 503"))) for _ in range(300)]
        assert min(draws) >= 0 and max(draws) <= ceiling
        assert max(draws) > 0.8 * ceiling  # spread over the whole range, not bunched at the ceiling


@pytest.mark.parametrize(
    ("retry_after", "low", "high"),
    [
        pytest.param(None, 0.0, 1.0, id="none: the jitter alone"),
        pytest.param(5.0, 5.0, 5.0, id="a floor above the jitter"),
        pytest.param(0.0, 0.0, 1.0, id="zero: the jitter"),
        pytest.param(3600.0, 60.0, 60.0, id="capped at backoffMax"),
    ],
)
def test_retry_after_is_a_floor_capped_at_the_most(retry_after: float | None, low: float, high: float) -> None:
    wait = BackoffWait(1.0, 60.0)
    draws = [wait(_failed_attempt(1, _Retryable("HTTP 429", retry_after))) for _ in range(100)]
    assert low <= min(draws) and max(draws) <= high


def test_endpoint_url() -> None:
    assert endpoint_url("http://h:8000", "/v1/completions") == "http://h:8000/v1/completions"
    assert endpoint_url("http://h:8000/", "/v1/completions") == "http://h:8000/v1/completions"
    assert endpoint_url("http://h:8000/v1", "/v1/completions") == "http://h:8000/v1/completions"
    assert endpoint_url("http://gw/llm/", "/v1/embeddings") == "http://gw/llm/v1/embeddings"


@pytest.mark.parametrize(
    "kw", [{"concurrency": 0}, {"max_attempts": 0}, {"grace_s": -1.0}, {"request_timeout_s": 0.0}]
)
def test_settings_are_checked(kw: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        ClientSettings(url="http://h", **kw)
