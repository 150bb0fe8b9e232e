"""One simulated engine replica: continuous batching in coarse, exact-enough leaps.

The replica follows the same rules as the mock engine's step-by-step scheduler
(:mod:`llmscale.engine.scheduler`, after vLLM V1's ``vllm/v1/core/sched/scheduler.py``):
continuous batching under ``max_num_seqs``, a per-step token budget ``max_num_batched_tokens``
shared by decodes (one token each) and chunked prefill, FCFS admission while the KV cache has room,
and recompute preemption of the newest running request when the cache is full.

What makes it fast is that it never plans one decode step at a time when nothing can change.
Between two events (an arrival at this replica, a completion, the cache filling up) a pure-decode
batch is fixed, so the replica leaps over all those steps at once:

- a global step counter ``steps`` counts engine steps; a request that joined the decode batch at
  step ``s0`` with ``c0`` tokens of context has ``c0 + (steps − s0)`` tokens of KV and finishes at
  step ``s0 + remaining``, so completions come off a heap keyed by step, and the KV in use is
  ``kv_base + ndec × steps`` with ``kv_base = Σ (c0 − s0)`` — O(1) bookkeeping per step leap;
- the leap's step time is the model's step time at the *middle* of the leap's KV growth, exact for
  the memory-bound roofline (linear in KV tokens) and within one regime change otherwise;
- an arrival in the middle of a leap cuts it at the end of the step in flight (the new request
  joins the next step, as in vLLM).

Steps that carry prefill tokens (a new prompt, a chunk of a long one, a recomputation) are planned
one at a time, with the decodes riding along — that is where TTFT comes from.

Not modelled (as in the mock engine): prefix caching, speculative decoding, priorities; the KV
cache is counted in tokens rather than 16-token blocks (≤ 15 tokens per request of difference).
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

__all__ = ["EngineConfig", "ReplicaEngine", "RequestTable", "StepCostModel", "roofline_coefficients"]

IDLE, MIXED, DECODE = 0, 1, 2


class StepCostModel(Protocol):
    """What a replica needs of the performance model (:class:`llmscale.model.ReplicaModel` fits)."""

    @property
    def kv_cache_capacity_tokens(self) -> int:
        """Tokens of KV cache the replica holds."""
        ...

    def step_time(self, decode_seqs: int, kv_tokens_read: float, prefill_tokens: int = 0) -> float:
        """Seconds of one engine step (see :meth:`llmscale.model.ReplicaModel.step_time`)."""
        ...


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """Scheduler limits of every simulated replica, named as vLLM's engine arguments.

    Attributes:
        max_num_seqs: most requests in the running batch. 256 is vLLM's ``SchedulerConfig``
            default (recent releases raise it to 1024 on H100-class GPUs for the OpenAI server).
        max_num_batched_tokens: token budget of one step (decodes + prefill chunks). 8192 is vLLM
            V1's default for the OpenAI server with chunked prefill (``vllm/engine/arg_utils.py``).
        kv_capacity_tokens: KV-cache size in tokens; ``None`` = the cost model's
            ``kv_cache_capacity_tokens``.
    """

    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    kv_capacity_tokens: int | None = None

    def __post_init__(self) -> None:
        if self.max_num_seqs < 1 or self.max_num_batched_tokens < 1:
            raise ValueError("max_num_seqs and max_num_batched_tokens must be positive")
        if self.max_num_batched_tokens <= self.max_num_seqs:
            raise ValueError("max_num_batched_tokens must exceed max_num_seqs (room for prefill)")


def roofline_coefficients(cost: StepCostModel) -> tuple[float, float, float] | None:
    """Return ``(weight_s, kv_s_per_token, compute_s_per_token)`` when ``cost.step_time`` is the
    roofline ``max(weight_s + kv × kv_s_per_token, (decode + prefill) × compute_s_per_token)``,
    else ``None``.

    The coefficients are read off the public ``step_time`` at a few points and then checked at
    others (to 1e-9 relative), so a model of another form is simply called instead: the
    replica inlines the arithmetic only when it is provably the same function. Saves a Python call
    per step leap (about a tenth of a day's run).
    """
    w = float(cost.step_time(0, 0, 0))
    big = 1_000_000
    kv = (float(cost.step_time(0, big, 0)) - w) / big
    comp = float(cost.step_time(big, 0, 0)) / big
    if w <= 0 or kv < 0 or comp <= 0:
        return None
    for d, k, p in ((1, 1000, 0), (64, 80_000, 0), (256, 300_000, 512), (8, 10_000, 8000), (0, 0, 1), (3, 7, 200)):
        want = float(cost.step_time(d, k, p))
        got = max(w + k * kv, (d + p) * comp)
        if abs(got - want) > 1e-9 * max(abs(want), 1e-12):
            return None
    return w, kv, comp


class RequestTable:
    """Per-request columns shared by the replicas of one simulation (plain lists: fast to index).

    Inputs: ``arrival`` (s since the epoch), ``prompt``, ``output`` (tokens). Filled in while the
    simulation runs: ``first_token`` and ``finish`` (s since the epoch; −1 until they happen),
    ``preemptions`` (count), ``replica`` (index of the replica that served it, −1 if none); and the
    scheduler's working state ``generated``, ``need`` (tokens to prefill), ``start_step``,
    ``ctx0`` and ``finish_step``.
    """

    __slots__ = (
        "arrival",
        "ctx0",
        "finish",
        "finish_step",
        "first_token",
        "generated",
        "need",
        "output",
        "preemptions",
        "prompt",
        "replica",
        "start_step",
    )

    def __init__(self, arrival: list[float], prompt: list[int], output: list[int]) -> None:
        n = len(arrival)
        if not (len(prompt) == len(output) == n):
            raise ValueError("RequestTable columns have different lengths")
        self.arrival = arrival
        self.prompt = prompt
        self.output = output
        self.first_token: list[float] = [-1.0] * n
        self.finish: list[float] = [-1.0] * n
        self.preemptions: list[int] = [0] * n
        self.replica: list[int] = [-1] * n
        self.generated: list[int] = [0] * n
        self.need: list[int] = [0] * n
        self.start_step: list[int] = [0] * n
        self.ctx0: list[int] = [0] * n
        self.finish_step: list[int] = [-1] * n

    def __len__(self) -> int:
        return len(self.arrival)


FinishHook = Callable[["ReplicaEngine", int, float], None]
FirstTokenHook = Callable[[int, float], None]


class ReplicaEngine:
    """The scheduler of one replica, advanced by events in simulated time (seconds since the epoch).

    Protocol with the caller (the fleet's event loop): :meth:`add` a request at time ``t``; each
    call that returns a time asks the caller to call :meth:`on_event` at that time (a later answer
    replaces an earlier one — the caller keeps a version number); ``None`` means nothing new to
    wake up for. Completions are reported through ``on_finish(replica, request, t)`` and first
    tokens through ``on_first_token(request, t)``.

    Raises (constructor):
        ValueError: the KV cache holds no tokens.
    """

    __slots__ = (
        "_act",
        "_chunks",
        "_heap",
        "_lin",
        "_on_finish",
        "_on_first",
        "_prefilling",
        "_running",
        "_seg_dt",
        "_seg_n",
        "_seg_t0",
        "_step_time",
        "_table",
        "busy_until",
        "capacity",
        "index",
        "kv_base",
        "kv_reserved",
        "max_batched",
        "max_seqs",
        "ndec",
        "outstanding",
        "preemptions",
        "steps",
        "waiting",
    )

    def __init__(
        self,
        index: int,
        table: RequestTable,
        cost: StepCostModel,
        config: EngineConfig,
        on_finish: FinishHook,
        on_first_token: FirstTokenHook | None = None,
    ) -> None:
        self.index = index
        self._table = table
        self._step_time = cost.step_time
        self._lin = roofline_coefficients(cost)
        self.capacity = int(config.kv_capacity_tokens or cost.kv_cache_capacity_tokens)
        if self.capacity <= 0:
            raise ValueError("The KV cache holds no tokens: the model does not fit")
        self.max_seqs = config.max_num_seqs
        self.max_batched = config.max_num_batched_tokens
        self._on_finish = on_finish
        self._on_first = on_first_token
        self.waiting: deque[int] = deque()
        self._prefilling: dict[int, int] = {}  # request -> prompt tokens still to compute
        self._running: dict[int, None] = {}  # decode batch, in admission order
        self._heap: list[tuple[int, int]] = []  # (finish step, request)
        self._chunks: list[tuple[int, int]] = []
        self.steps = 0
        self.kv_base = 0
        self.ndec = 0
        self.kv_reserved = 0
        self.outstanding = 0
        self.preemptions = 0
        self._act = IDLE
        self._seg_t0 = 0.0
        self._seg_dt = 0.0
        self._seg_n = 0
        self.busy_until = 0.0

    # ------------------------------------------------------------------ gauges

    @property
    def num_waiting(self) -> int:
        """Requests not yet scheduled (``vllm:num_requests_waiting``)."""
        return len(self.waiting)

    @property
    def num_running(self) -> int:
        """Requests in the batch, prefilling or decoding (``vllm:num_requests_running``)."""
        return self.ndec + len(self._prefilling)

    def kv_usage(self, t: float) -> float:
        """Fraction of the KV cache in use at ``t`` (``vllm:kv_cache_usage_perc``), 0–1."""
        steps = self.steps
        if self._act == DECODE and self._seg_dt > 0:
            steps += min(self._seg_n, int((t - self._seg_t0) / self._seg_dt))
        used = self.kv_base + self.ndec * steps + self.kv_reserved
        return min(1.0, used / self.capacity)

    @property
    def idle(self) -> bool:
        """True when the replica has no request at all."""
        return self.outstanding == 0

    # ------------------------------------------------------------------ inputs

    def add(self, req: int, t: float) -> float | None:
        """Queue request ``req`` arriving at ``t``; return the time to wake the replica, or ``None``
        when the wake-up already scheduled stands."""
        self.waiting.append(req)
        self.outstanding += 1
        act = self._act
        if act == IDLE:
            return self._plan(t)
        if act == DECODE:
            # Cut the leap at the end of the step in flight: the request joins the next step.
            k = int((t - self._seg_t0) / self._seg_dt) + 1
            if k < self._seg_n:
                self._seg_n = k
                self.busy_until = self._seg_t0 + k * self._seg_dt
                return self.busy_until
        return None

    def on_event(self) -> float | None:
        """Finish the activity that ends at ``busy_until`` and plan the next; return its end time
        (``None`` when the replica went idle)."""
        t = self.busy_until
        act = self._act
        if act == DECODE:
            self.steps += self._seg_n
            self._pop_finished(t)
        elif act == MIXED:
            self._commit_mixed(t)
        return self._plan(t)

    # ------------------------------------------------------------------ internals

    def _finish(self, req: int, t: float) -> None:
        self.outstanding -= 1
        self._table.finish[req] = t
        self._on_finish(self, req, t)

    def _pop_finished(self, t: float) -> None:
        heap, running, tab, steps = self._heap, self._running, self._table, self.steps
        fstep = tab.finish_step
        while heap and heap[0][0] <= steps:
            fs, r = heapq.heappop(heap)
            if fstep[r] != fs or r not in running:
                continue  # stale: the request was preempted after this entry was pushed
            del running[r]
            self.ndec -= 1
            self.kv_base -= tab.ctx0[r] - tab.start_step[r]
            tab.generated[r] = tab.output[r]
            fstep[r] = -1
            self._finish(r, t)

    def _commit_mixed(self, t: float) -> None:
        self.steps += 1  # every decode in the step produced one token
        self._pop_finished(t)
        tab = self._table
        pre = self._prefilling
        steps = self.steps
        for r, take in self._chunks:
            left = pre[r] - take
            if left > 0:
                pre[r] = left
                continue
            del pre[r]
            self.kv_reserved -= tab.need[r]
            tab.generated[r] += 1  # the step that completes a prefill samples a token
            if tab.first_token[r] < 0:
                tab.first_token[r] = t
                if self._on_first is not None:
                    self._on_first(r, t)
            remaining = tab.output[r] - tab.generated[r]
            if remaining <= 0:
                tab.finish_step[r] = -1
                self._finish(r, t)
                continue
            tab.start_step[r] = steps
            tab.ctx0[r] = tab.need[r]
            fs = steps + remaining
            tab.finish_step[r] = fs
            heapq.heappush(self._heap, (fs, r))
            self._running[r] = None
            self.kv_base += tab.need[r] - steps
            self.ndec += 1
        self._chunks = []

    def _preempt_newest(self) -> None:
        """Recompute preemption (vLLM V1): the newest decode request frees its KV and goes back to
        the front of the waiting queue; it re-prefills prompt + generated tokens later."""
        tab = self._table
        r = next(reversed(self._running))
        del self._running[r]
        self.ndec -= 1
        self.kv_base -= tab.ctx0[r] - tab.start_step[r]
        tab.generated[r] += self.steps - tab.start_step[r]
        tab.finish_step[r] = -1
        tab.preemptions[r] += 1
        self.preemptions += 1
        self.waiting.appendleft(r)

    def _plan(self, t: float) -> float | None:
        tab = self._table
        cap = self.capacity
        # Room for every decode's next token, else preempt the newest (as often as needed).
        while self.ndec and self.kv_base + self.ndec * (self.steps + 1) + self.kv_reserved > cap:
            self._preempt_newest()
        ndec = self.ndec
        kv_dec = self.kv_base + ndec * self.steps
        budget = self.max_batched - ndec
        chunks: list[tuple[int, int]] = []
        p = 0
        pre = self._prefilling
        if pre:
            for r, left in pre.items():
                take = left if left < budget - p else budget - p
                if take <= 0:
                    break
                chunks.append((r, take))
                p += take
        waiting = self.waiting
        if waiting and p < budget:
            used = kv_dec + self.kv_reserved + ndec  # after the decodes' new tokens
            nseq = ndec + len(pre)
            prompt, generated, need_col = tab.prompt, tab.generated, tab.need
            while waiting and p < budget and nseq < self.max_seqs:
                r = waiting[0]
                need = prompt[r] + generated[r]
                if used + need > cap:
                    break  # FCFS: later requests do not overtake the head
                waiting.popleft()
                need_col[r] = need
                pre[r] = need
                self.kv_reserved += need
                used += need
                nseq += 1
                take = need if need < budget - p else budget - p
                chunks.append((r, take))
                p += take
        lin = self._lin
        if p > 0:
            self._chunks = chunks
            self._act = MIXED
            if lin is not None:
                mem = lin[0] + kv_dec * lin[1]
                comp = (ndec + p) * lin[2]
                self.busy_until = t + (mem if mem >= comp else comp)
            else:
                self.busy_until = t + self._step_time(ndec, kv_dec, p)
            return self.busy_until
        if ndec == 0:
            self._act = IDLE
            return None
        # A pure-decode leap up to the next completion or the step that would overflow the cache.
        heap, fstep, running = self._heap, tab.finish_step, self._running
        while fstep[heap[0][1]] != heap[0][0] or heap[0][1] not in running:
            heapq.heappop(heap)
        n = heap[0][0] - self.steps
        free = cap - kv_dec - self.kv_reserved
        n_kv = free // ndec
        if n_kv < n:
            n = max(1, n_kv)
        kv_mid = kv_dec + ndec * n * 0.5
        if lin is not None:
            mem = lin[0] + kv_mid * lin[1]
            comp = ndec * lin[2]
            dt = mem if mem >= comp else comp
        else:
            dt = self._step_time(ndec, kv_mid, 0)
        self._act = DECODE
        self._seg_t0 = t
        self._seg_dt = dt
        self._seg_n = n
        self.busy_until = t + n * dt
        return self.busy_until
