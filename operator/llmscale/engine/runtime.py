"""The engine core loop: runs the pure :class:`~llmscale.engine.scheduler.Scheduler` in real time.

Engine time is the event loop's clock scaled by ``time_scale``: ``engine_s = (loop.time() - t0) ×
time_scale``. Each step is planned at its start time, then the loop sleeps until the step's end in
wall time (``t0 + end_s / time_scale``) and only then hands out the step's tokens, so a client sees
each token when the modelled GPU would have produced it.

Steps follow each other back to back in engine time (the next starts where the last ended) while
there is work, as on a GPU: Python's own overhead and the event loop's timer granularity (about
1 ms) shift *when* a step is delivered, never how long the engine says it took, and delays do not
add up because every sleep aims at an absolute target. When the engine is idle it waits on an
event (no CPU spent) and the next step starts at the new request's arrival.

If the process falls behind (steps shorter in wall time than its own overhead: ``--time-scale`` too
high for the load), engine time runs slower than ``wall × time_scale``; the loop logs a warning.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from llmscale.engine.metrics import EngineMetrics
from llmscale.engine.scheduler import EngineRequest, FinishedRequest, Scheduler, StepResult, TokenEvent

__all__ = ["EngineCore", "RequestHandle"]

log = logging.getLogger("llmscale.engine")

#: Wall seconds between throughput log lines while busy (vLLM logs every 10 s).
LOG_INTERVAL_WALL_S = 10.0
#: Wall seconds of lag behind the modelled schedule that trigger a warning.
LAG_WARNING_WALL_S = 1.0


@dataclass(slots=True)
class RequestHandle:
    """The server's side of one request: tokens as they are sampled, then the finish record.

    ``events`` yields :class:`TokenEvent` items and, last, one :class:`FinishedRequest`.
    """

    request: EngineRequest
    events: asyncio.Queue[TokenEvent | FinishedRequest] = field(default_factory=asyncio.Queue)
    finished: FinishedRequest | None = None


class EngineCore:
    """Owns the scheduler, the metrics and the per-request queues; :meth:`run` is the engine loop.

    Args:
        scheduler: the pure scheduler.
        metrics: the Prometheus series to update after every step.
        time_scale: engine seconds per wall second (> 0); 1 is real time.
    """

    def __init__(self, scheduler: Scheduler, metrics: EngineMetrics, time_scale: float = 1.0) -> None:
        if time_scale <= 0:
            raise ValueError(f"time_scale must be positive, got {time_scale}")
        self.scheduler = scheduler
        self.metrics = metrics
        self.time_scale = time_scale
        self._handles: dict[str, RequestHandle] = {}
        self._wake = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        self._t0 = self._loop.time()
        self._prev_end = 0.0
        # Throughput log accumulators (engine tokens since the last line).
        self._log_prompt = 0
        self._log_gen = 0
        self._log_engine_t = 0.0
        self._log_wall_t = self._t0
        self._last_lag_warning = -1e9

    def restart_clock(self) -> None:
        """Make engine time 0 now (called when the server starts listening, after the cold start).

        Raises:
            RuntimeError: requests were already submitted.
        """
        if self._handles or self.scheduler.num_waiting or self.scheduler.num_running:
            raise RuntimeError("restart_clock() called with requests in flight")
        self._t0 = self._log_wall_t = self._loop.time()
        self._prev_end = self._log_engine_t = 0.0

    def now(self) -> float:
        """Engine time now, seconds since the core started."""
        return (self._loop.time() - self._t0) * self.time_scale

    def submit(
        self, request_id: str, prompt_tokens: int, max_tokens: int, finish_reason: str
    ) -> RequestHandle:
        """Queue a request arriving now and return its handle.

        Raises:
            ValueError: as :meth:`Scheduler.add` (the server validates first, so this is a bug).
        """
        req = EngineRequest(request_id, prompt_tokens, max_tokens, self.now(), finish_reason)
        self.scheduler.add(req)
        handle = RequestHandle(req)
        self._handles[request_id] = handle
        self.metrics.set_idle_gauges(
            self.scheduler.num_running, self.scheduler.num_waiting, self.scheduler.kv_cache_usage
        )
        self._wake.set()
        return handle

    def abort(self, request_id: str) -> None:
        """Drop a request whose client went away; no-op once it has finished."""
        handle = self._handles.pop(request_id, None)
        if handle is None:
            return
        finished = self.scheduler.abort(request_id, self.now())
        if finished is not None:
            self.metrics.record_finished(finished)
            log.info("Aborted request %s after %d output tokens", request_id, finished.output_tokens)
        self.metrics.set_idle_gauges(
            self.scheduler.num_running, self.scheduler.num_waiting, self.scheduler.kv_cache_usage
        )

    async def run(self) -> None:
        """The engine loop; runs until cancelled."""
        while True:
            start = self._next_start()
            if start is None:
                self._wake.clear()
                if self._next_start() is None:
                    await self._wake.wait()
                continue
            step = self.scheduler.step(start)
            if step is None:  # nothing admissible (should not happen when has_work): wait for news
                self._wake.clear()
                await self._wake.wait()
                continue
            wall_end = self._t0 + step.end_s / self.time_scale
            delay = wall_end - self._loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            else:
                await asyncio.sleep(0)  # let the HTTP handlers run even when behind
                if (
                    -delay > LAG_WARNING_WALL_S
                    and self._loop.time() - self._last_lag_warning > LOG_INTERVAL_WALL_S
                ):
                    self._last_lag_warning = self._loop.time()
                    log.warning(
                        "Engine fell %.1f s (wall) behind the modelled schedule: lower --time-scale", -delay
                    )
            self._prev_end = step.end_s
            self._publish(step)

    def _next_start(self) -> float | None:
        sched = self.scheduler
        if sched.has_work(self._prev_end):
            return self._prev_end
        head = sched.next_arrival_s()
        if head is not None and head <= self.now():
            return max(self._prev_end, head)
        return None

    def _publish(self, step: StepResult) -> None:
        self.metrics.record_step(step)
        # The step was planned before it slept; a request aborted meanwhile already left the
        # scheduler, so the gauges come from the scheduler as it is now.
        sched = self.scheduler
        self.metrics.set_idle_gauges(sched.num_running, sched.num_waiting, sched.kv_cache_usage)
        for t in step.tokens:
            handle = self._handles.get(t.request_id)
            if handle is not None:
                handle.events.put_nowait(t)
        for f in step.finished:
            handle = self._handles.pop(f.request_id, None)
            if handle is not None:
                handle.finished = f
                handle.events.put_nowait(f)
        for rid in step.preempted:
            log.debug("Preempted request %s: KV cache full", rid)
        self._log_prompt += step.new_prompt_tokens
        self._log_gen += len(step.tokens)
        self._maybe_log(step)

    def _maybe_log(self, step: StepResult) -> None:
        wall = self._loop.time()
        if wall - self._log_wall_t < LOG_INTERVAL_WALL_S:
            return
        span = step.end_s - self._log_engine_t
        if span > 0 and (self._log_prompt or self._log_gen):
            # vLLM's LoggingStatLogger line, throughput per engine second.
            log.info(
                "Engine 000: Avg prompt throughput: %.1f tokens/s, Avg generation throughput: %.1f tokens/s, "
                "Running: %d reqs, Waiting: %d reqs, GPU KV cache usage: %.1f%%, Prefix cache hit rate: 0.0%%",
                self._log_prompt / span,
                self._log_gen / span,
                step.num_running,
                step.num_waiting,
                step.kv_cache_usage * 100,
            )
        self._log_prompt = self._log_gen = 0
        self._log_engine_t = step.end_s
        self._log_wall_t = wall
