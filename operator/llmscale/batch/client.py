"""Send a batch's requests to an OpenAI-compatible server and write each result exactly once.

:func:`run_batch` keeps ``concurrency`` requests in flight (that many workers share one aiohttp
session), writes each result to the :class:`~llmscale.batch.results.ResultsFile` as soon as it
arrives, and retries what may succeed later:

- **Retried** (by ``tenacity``): connection errors (refused, reset, server disconnected), the
  request timeout, HTTP 408, 429 and every 5xx. The wait before retry ``n`` (1, 2, …) is drawn
  uniformly from ``[0, min(backoffMax, backoffBase × 2^(n−1))]``: exponential backoff with "full
  jitter" (tenacity's ``wait_random_exponential``; Marc Brooker, "Exponential Backoff And Jitter",
  AWS Architecture Blog, 2015), which spreads the retries of many clients that failed together; a
  ``Retry-After`` of some seconds (429/503) is a floor, capped at ``backoffMax``. After
  ``maxAttempts`` the request is left without a result: a rerun tries it again.
- **Not retried**: any other status (a 400 for a prompt over the context limit, a 404 for a
  wrong model) is the request's result, written with its status and body, as the OpenAI Batch API
  does.

**Stopping** (SIGTERM, e.g. the Job was suspended; SIGINT): no new request is sent, retries still
waiting give up, and the requests in flight have ``grace_s`` to finish and be written; whatever is
still in flight then is cancelled and sent again by the next run. Nothing written is lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import uuid
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from prometheus_client import CollectorRegistry, Counter, Gauge
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception_type,
    stop_after_attempt,
    wait_random_exponential,
)
from tenacity.wait import wait_base

from llmscale.batch.progress import Reporter
from llmscale.batch.requests import BatchRequest
from llmscale.batch.results import OutputError, ResultsFile, response_result

__all__ = [
    "RETRY_STATUSES",
    "BackoffWait",
    "BatchMetrics",
    "ClientSettings",
    "RunStats",
    "endpoint_url",
    "run_batch",
]

log = logging.getLogger("llmscale.batch")

#: HTTP statuses below 500 that are retried: request timeout and too many requests.
RETRY_STATUSES = frozenset({408, 429})


@dataclass(frozen=True, slots=True)
class ClientSettings:
    """How :func:`run_batch` sends requests.

    Attributes:
        url: base URL of the server, e.g. ``http://chat-batch:8000`` (the ``<name>-batch`` Service);
            each request's ``url`` is appended (a base ending in ``/v1`` is accepted too).
        concurrency: requests in flight at once. vLLM schedules up to ``--max-num-seqs`` at a time
            and queues the rest, so a few times the pool's replicas × running batch keeps it busy.
        max_attempts: tries per request before it is left for a rerun (first try included).
        backoff_base_s: first backoff ceiling, seconds.
        backoff_max_s: largest backoff ceiling, seconds.
        request_timeout_s: one attempt's whole time, seconds (a long generation must fit).
        grace_s: after a stop, seconds the requests in flight get to finish. Keep it below the
            pod's ``terminationGracePeriodSeconds`` (30 s by default) so the kubelet's SIGKILL comes
            after the last result is written.
        api_key: sent as ``Authorization: Bearer …`` when set (vLLM's ``--api-key``).
    """

    url: str
    concurrency: int = 64
    max_attempts: int = 10
    backoff_base_s: float = 1.0
    backoff_max_s: float = 60.0
    request_timeout_s: float = 600.0
    grace_s: float = 25.0
    api_key: str | None = None

    def __post_init__(self) -> None:
        if self.concurrency < 1 or self.max_attempts < 1:
            raise ValueError("concurrency and max_attempts must be at least 1")
        if (
            self.backoff_base_s < 0
            or self.backoff_max_s < 0
            or self.grace_s < 0
            or self.request_timeout_s <= 0
        ):
            raise ValueError("backoff, grace and timeout must not be negative (timeout positive)")


@dataclass
class RunStats:
    """What one run did.

    Attributes:
        total: requests in this run (the shard).
        already_done: of them, with a result in the output before the run started.
        succeeded: results written with a 2xx status.
        failed: results written with another status (not retried).
        retries: attempts that were retried.
        gave_up: requests left without a result after ``max_attempts``.
        stopped: the run was stopped (SIGTERM/SIGINT) before it could finish.
        cancelled: requests in flight when the grace period ran out (sent again next run).
    """

    total: int
    already_done: int
    succeeded: int = 0
    failed: int = 0
    retries: int = 0
    gave_up: int = 0
    stopped: bool = False
    cancelled: int = 0

    @property
    def remaining(self) -> int:
        """Requests still without a result."""
        return self.total - self.already_done - self.succeeded - self.failed


@dataclass
class BatchMetrics:
    """Prometheus metrics of a run, in their own registry (serve it with
    ``prometheus_client.start_http_server(port, registry=metrics.registry)``).

    ``llmscale_batch_requests`` (requests in this run), ``llmscale_batch_requests_done`` (with a
    result, those of earlier runs included: what the operator reads as the Job's progress),
    ``llmscale_batch_results_total{outcome="succeeded|failed"}`` and ``llmscale_batch_retries_total``.
    """

    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self) -> None:
        self.requests = Gauge("llmscale_batch_requests", "Requests in this batch run", registry=self.registry)
        self.done = Gauge(
            "llmscale_batch_requests_done",
            "Requests with a result in the output file",
            registry=self.registry,
        )
        self.results = Counter(
            "llmscale_batch_results", "Results written by this run", ["outcome"], registry=self.registry
        )
        self.retries = Counter("llmscale_batch_retries", "Attempts retried", registry=self.registry)


class _Retryable(Exception):
    """An attempt that may succeed later: why it failed, and the server's ``Retry-After`` in seconds."""

    def __init__(self, cause: str, retry_after_s: float | None = None) -> None:
        super().__init__(cause)
        self.retry_after_s = retry_after_s


class _Stopped(Exception):
    """The run was stopped while the request waited for its next attempt."""


class BackoffWait(wait_base):
    """Full jitter under a doubling ceiling (tenacity's ``wait_random_exponential``), with a
    ``Retry-After`` of the failed attempt as a floor; both capped at ``max_s`` (seconds)."""

    def __init__(self, base_s: float, max_s: float) -> None:
        self.jitter = wait_random_exponential(multiplier=base_s, max=max_s)
        self.max_s = max_s

    def __call__(self, retry_state: RetryCallState) -> float:
        delay = float(self.jitter(retry_state))
        failed = retry_state.outcome.exception() if retry_state.outcome is not None else None
        if isinstance(failed, _Retryable) and failed.retry_after_s is not None:
            delay = max(delay, min(failed.retry_after_s, self.max_s))
        return delay


def endpoint_url(base: str, path: str) -> str:
    """Join the server's base URL and a request's endpoint path; a base ending in ``/v1`` is
    accepted (``http://h:8000/v1`` + ``/v1/completions`` → ``http://h:8000/v1/completions``)."""
    base = base.rstrip("/")
    if base.endswith("/v1") and path.startswith("/v1/"):
        base = base[: -len("/v1")]
    return base + path


def _retry_after_s(value: str | None) -> float | None:
    # Only the delta-seconds form; an HTTP-date (rare from inference servers) is ignored.
    if value is None:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None
    return seconds if seconds >= 0 else None


def _body(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return raw.decode("utf-8", errors="replace")


@dataclass
class _Run:
    requests: deque[BatchRequest]
    results: ResultsFile
    settings: ClientSettings
    stats: RunStats
    reporter: Reporter
    stop: asyncio.Event
    metrics: BatchMetrics | None
    fatal: OutputError | None = None
    in_flight: int = 0

    async def worker(self, session: aiohttp.ClientSession) -> None:
        while self.requests and not self.stop.is_set():
            request = self.requests.popleft()
            self.in_flight += 1
            try:
                result = await self.send(session, request)
            finally:
                self.in_flight -= 1
            if result is None:
                continue
            try:
                self.results.append(result)
            except OutputError as exc:
                self.fatal = exc
                self.stop.set()
                return
            ok = 200 <= result["response"]["status_code"] < 300
            if ok:
                self.stats.succeeded += 1
            else:
                self.stats.failed += 1
            self.reporter.advance(ok)
            if self.metrics is not None:
                self.metrics.results.labels("succeeded" if ok else "failed").inc()
                self.metrics.done.inc()

    async def send(self, session: aiohttp.ClientSession, request: BatchRequest) -> dict[str, Any] | None:
        """One request until it has a result (returned) or is left for a rerun (``None``)."""
        url = endpoint_url(self.settings.url, request.url)
        timeout = aiohttp.ClientTimeout(total=self.settings.request_timeout_s)

        async def attempt() -> dict[str, Any]:
            if self.stop.is_set():
                raise _Stopped
            try:
                async with session.post(url, json=request.body, timeout=timeout) as response:
                    raw = await response.read()
                    status = response.status
                    if status not in RETRY_STATUSES and status < 500:
                        body = _body(raw)
                        request_id = response.headers.get("x-request-id") or (
                            body.get("id")
                            if isinstance(body, dict) and isinstance(body.get("id"), str)
                            else None
                        )
                        return response_result(
                            request.custom_id, status, request_id or f"batch-{uuid.uuid4().hex}", body
                        )
                    raise _Retryable(f"HTTP {status}", _retry_after_s(response.headers.get("Retry-After")))
            except (aiohttp.ClientError, TimeoutError) as exc:  # connection, payload, redirect errors
                raise _Retryable(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__) from exc

        async def sleep(delay: float) -> None:
            # A stop cuts the wait short; the next attempt then raises _Stopped.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stop.wait(), delay)

        def before_sleep(state: RetryCallState) -> None:
            self.stats.retries += 1
            if self.metrics is not None:
                self.metrics.retries.inc()
            log.debug("Retrying batch request %s in %.2f s: %s", request.custom_id,
                      state.upcoming_sleep, _cause(state))

        def give_up(state: RetryCallState) -> None:
            self.stats.gave_up += 1
            log.warning("Gave up on batch request %s after %d attempts: %s; a rerun sends it again",
                        request.custom_id, state.attempt_number, _cause(state))

        retrying = AsyncRetrying(
            stop=stop_after_attempt(self.settings.max_attempts),
            wait=BackoffWait(self.settings.backoff_base_s, self.settings.backoff_max_s),
            retry=retry_if_exception_type(_Retryable),
            sleep=sleep,
            before_sleep=before_sleep,
            retry_error_callback=give_up,
        )
        try:
            result: dict[str, Any] | None = await retrying(attempt)
        except _Stopped:
            return None
        return result


def _cause(state: RetryCallState) -> str:
    failed = state.outcome.exception() if state.outcome is not None else None
    return str(failed) if failed is not None else "unknown"


async def run_batch(
    requests: list[BatchRequest],
    results: ResultsFile,
    settings: ClientSettings,
    *,
    reporter: Reporter,
    stop: asyncio.Event | None = None,
    metrics: BatchMetrics | None = None,
) -> RunStats:
    """Send every request of ``requests`` that has no result in ``results`` yet and write each
    result (module docstring: retries and stopping).

    Args:
        requests: the run's requests (validated; one shard of the input).
        results: the output file, opened; its ``done`` ids are skipped.
        settings: URL, concurrency, retry and stop settings.
        reporter: progress display.
        stop: set it to stop the run gracefully (the command sets it on SIGTERM and SIGINT).
        metrics: Prometheus metrics to update, if served.

    Returns:
        The :class:`RunStats`.

    Raises:
        OutputError: a result could not be written (disk full, I/O error); the run stopped at once
            (results written before it are kept).
    """
    stop = stop or asyncio.Event()
    todo = deque(r for r in requests if r.custom_id not in results.done)
    stats = RunStats(total=len(requests), already_done=len(requests) - len(todo))
    if metrics is not None:
        metrics.requests.set(stats.total)
        metrics.done.set(stats.already_done)
    run = _Run(todo, results, settings, stats, reporter, stop, metrics)
    reporter.start(stats.total, stats.already_done)
    headers = {"Authorization": f"Bearer {settings.api_key}"} if settings.api_key else None
    connector = aiohttp.TCPConnector(limit=settings.concurrency)
    try:
        async with aiohttp.ClientSession(connector=connector, headers=headers) as session:
            workers = [
                asyncio.create_task(run.worker(session)) for _ in range(min(settings.concurrency, len(todo)))
            ]
            everything = asyncio.gather(*workers)
            stopping = asyncio.create_task(stop.wait())
            try:
                racing: set[asyncio.Future[Any]] = {everything, stopping}
                await asyncio.wait(racing, return_when=asyncio.FIRST_COMPLETED)
                if not everything.done():
                    # Stopped: no new request starts; the ones in flight get the grace period.
                    stats.stopped = run.fatal is None
                    try:
                        await asyncio.wait_for(asyncio.shield(everything), settings.grace_s)
                    except TimeoutError:
                        stats.cancelled = run.in_flight
                        for task in workers:
                            task.cancel()
                        await asyncio.gather(*workers, return_exceptions=True)
                else:
                    everything.result()  # re-raise a worker's unexpected error
            finally:
                stopping.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await stopping
    finally:
        reporter.close()
    if run.fatal is not None:
        raise run.fatal
    return stats
