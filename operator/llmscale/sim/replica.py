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

**Latency as vLLM measures it.** Steps run back to back while there is work, so a token sampled at
the end of a step is exactly one step after the same request's previous token: each step of
duration ``d`` gives every sequence that samples a token in it one inter-token gap of ``d`` (a step
that carries a prefill chunk makes every running sequence's gap that long). A leap of ``n`` decode
steps of ``d`` over ``B`` sequences is ``n × B`` gaps of ``d``, recorded in one call into the
fleet's :class:`~llmscale.sim.latency.LatencyRecorder` with vLLM's buckets; a request recomputed
after a preemption records one gap from its last token before the preemption to its next one. Per
request, a counter of the steps longer than the ITL target (per replica, differenced at join and
leave, as ``kv_base`` is) says how many of its gaps missed — O(1) per request.

**Prefix caching** (vLLM's automatic prefix caching, on by default in V1) is modelled when the
trace carries block hashes (the Mooncake format: one id per 512-token prompt block, equal ids for
equal prefixes): each replica keeps an LRU set of cached block ids bounded by its KV cache (in
blocks of the trace's size); an admitted request's longest run of leading blocks found in the set
is not prefilled (at most ``prompt − 1`` tokens: vLLM always computes the last one), its blocks
become the most recent, the oldest are evicted beyond the bound. Queries and hits are counted in
tokens, as ``vllm:prefix_cache_queries_total`` / ``vllm:prefix_cache_hits_total`` count them.
Simplifications: blocks count as cached from admission (not once computed), the bound covers
blocks in use as well as free ones, and a hit's KV still counts against the request's own cache
use (concurrent requests sharing a prefix are not deduplicated).

Not modelled (as in the mock engine): speculative decoding, priorities; the KV cache is counted in
tokens rather than 16-token blocks (≤ 15 tokens per request of difference).
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np
from numpy.typing import NDArray

from llmscale.sim.latency import BIN_S, LatencyRecorder

__all__ = ["EngineConfig", "ReplicaEngine", "RequestTable", "StepCostModel", "roofline_coefficients"]

IDLE, MIXED, DECODE = 0, 1, 2


class StepCostModel(Protocol):
    """What a replica needs of the performance model (:class:`llmscale.model.ReplicaModel` fits)."""

    @property
    def kv_cache_capacity_tokens(self) -> int:
        """Tokens of KV cache the replica holds."""
        ...

    def step_time(
        self, decode_seqs: int, kv_tokens_read: float, prefill_tokens: int = 0, prefill_pairs: float | None = None
    ) -> float:
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
        enable_prefix_caching: reuse cached prompt blocks when the trace carries block hashes
            (vLLM V1's default ``--enable-prefix-caching``).
    """

    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    kv_capacity_tokens: int | None = None
    enable_prefix_caching: bool = True

    def __post_init__(self) -> None:
        if self.max_num_seqs < 1 or self.max_num_batched_tokens < 1:
            raise ValueError("max_num_seqs and max_num_batched_tokens must be positive")
        if self.max_num_batched_tokens < self.max_num_seqs:
            # vLLM refuses this too (SchedulerConfig: max_num_batched_tokens >= max_num_seqs)
            raise ValueError("max_num_batched_tokens must be at least max_num_seqs")


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

    Inputs: ``arrival`` (s since the epoch), ``prompt``, ``output`` (tokens); optionally the prompt
    blocks' hashes as a CSR pair ``hash_offsets`` (``n + 1`` offsets, a list) and ``hash_ids`` (a
    numpy array: a day of Mooncake blocks as Python ints would take gigabytes), blocks of
    ``block_tokens`` tokens. Filled in while the simulation runs: ``first_token`` and ``finish`` (s
    since the epoch; −1 until they happen), ``scheduled`` (when it was first admitted to a step, s
    since the epoch; −1 until then: vLLM's ``request_prefill_time_seconds`` runs from it to the first
    token), ``preemptions`` (count), ``replica`` (index of the replica
    that served it, −1 if none), ``slow_gaps`` (its inter-token gaps longer than the ITL target,
    once finished); and the scheduler's working state ``generated``, ``need`` (KV tokens at admission),
    ``start_step``, ``ctx0`` and ``finish_step``.
    """

    __slots__ = (
        "arrival",
        "block_tokens",
        "ctx0",
        "finish",
        "finish_step",
        "first_token",
        "generated",
        "hash_ids",
        "hash_offsets",
        "need",
        "output",
        "preemptions",
        "prompt",
        "replica",
        "scheduled",
        "slow_gaps",
        "start_step",
    )

    def __init__(
        self,
        arrival: list[float],
        prompt: list[int],
        output: list[int],
        hash_offsets: list[int] | None = None,
        hash_ids: NDArray[np.int64] | None = None,
        block_tokens: int = 512,
    ) -> None:
        n = len(arrival)
        if not (len(prompt) == len(output) == n):
            raise ValueError("RequestTable columns have different lengths")
        if (hash_offsets is None) != (hash_ids is None):
            raise ValueError("hash_offsets and hash_ids come together")
        if hash_offsets is not None and len(hash_offsets) != n + 1:
            raise ValueError("hash_offsets needs one more entry than there are requests")
        self.arrival = arrival
        self.prompt = prompt
        self.output = output
        self.hash_offsets = hash_offsets
        self.hash_ids = hash_ids
        self.block_tokens = int(block_tokens)
        self.slow_gaps: list[int] = [0] * n
        self.first_token: list[float] = [-1.0] * n
        self.finish: list[float] = [-1.0] * n
        self.scheduled: list[float] = [-1.0] * n
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

    Args:
        index: the replica's number in the fleet.
        table: the shared request columns.
        cost: the performance model.
        config: the scheduler limits.
        on_finish / on_first_token: the hooks above.
        latency: where this replica's per-token inter-token gaps go (``None``: not recorded, e.g.
            the batch pool).
        itl_slo_s: the ITL target, seconds: a request's gaps longer than it are counted in
            ``table.slow_gaps``.

    Raises (constructor):
        ValueError: the KV cache holds no tokens.
    """

    __slots__ = (
        "_act",
        "_block_tokens",
        "_cache",
        "_cache_cap",
        "_chunks",
        "_heap",
        "_last_token",
        "_latency",
        "_lin",
        "_on_finish",
        "_on_first",
        "_prefilling",
        "_running",
        "_seg_dt",
        "_seg_n",
        "_seg_t0",
        "_slo",
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
        "prefix_hits",
        "prefix_queries",
        "slow",
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
        *,
        latency: LatencyRecorder | None = None,
        itl_slo_s: float = math.inf,
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
        self._latency = latency
        self._slo = float(itl_slo_s)
        self.waiting: deque[int] = deque()
        self._prefilling: dict[int, int] = {}  # request -> prompt tokens still to compute
        self._running: dict[int, None] = {}  # decode batch, in admission order
        self._heap: list[tuple[int, int]] = []  # (finish step, request)
        self._chunks: list[tuple[int, int]] = []
        self._last_token: dict[int, float] = {}  # preempted request -> time of its last token
        use_cache = config.enable_prefix_caching and table.hash_ids is not None
        self._cache: OrderedDict[int, None] | None = OrderedDict() if use_cache else None
        self._block_tokens = table.block_tokens
        self._cache_cap = self.capacity // max(1, table.block_tokens)
        self.steps = 0
        self.slow = 0  # steps longer than the ITL target, cumulative
        self.kv_base = 0
        self.ndec = 0
        self.kv_reserved = 0
        self.outstanding = 0
        self.preemptions = 0
        self.prefix_queries = 0
        self.prefix_hits = 0
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
    def prefix_cached_blocks(self) -> int:
        """Blocks in the prefix cache (0 when prefix caching is not modelled)."""
        return 0 if self._cache is None else len(self._cache)

    def cached_prefix_blocks(self, req: int) -> int:
        """Leading prompt blocks of request ``req`` in this replica's prefix cache now (a lookup
        for the router: nothing is moved or counted; 0 when prefix caching is not modelled)."""
        cache = self._cache
        tab = self._table
        if cache is None or tab.hash_offsets is None or tab.hash_ids is None:
            return 0
        hit = 0
        for block in tab.hash_ids[tab.hash_offsets[req] : tab.hash_offsets[req + 1]].tolist():
            if block not in cache:
                break
            hit += 1
        return hit

    @property
    def idle(self) -> bool:
        """True when the replica has no request at all."""
        return self.outstanding == 0

    @property
    def recorded_before(self) -> float:
        """Time before which every latency sample of this replica is recorded, seconds since the
        epoch: the start of a decode leap in flight (its steps are recorded when it ends), else inf."""
        return self._seg_t0 if self._act == DECODE else math.inf

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
            n = self._seg_n
            dt = self._seg_dt
            self.steps += n
            if dt > self._slo:
                self.slow += n
            lat = self._latency
            if lat is not None:
                # fast path of LatencyRecorder.add_itl_steps: the whole leap inside one bin
                k0 = int((self._seg_t0 + dt - lat.start_s) // BIN_S)
                if k0 == int((t - lat.start_s) // BIN_S) and 0 <= k0 < lat.bins and t < lat.end_s:
                    lat.itl[k0 * lat.itl_width + bisect_left(lat.itl_bounds, dt)] += n * self.ndec
                else:
                    lat.add_itl_steps(self._seg_t0, dt, n, self.ndec)
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
        slow_gaps = tab.slow_gaps
        while heap and heap[0][0] <= steps:
            fs, r = heapq.heappop(heap)
            if fstep[r] != fs or r not in running:
                continue  # stale: the request was preempted after this entry was pushed
            del running[r]
            self.ndec -= 1
            self.kv_base -= tab.ctx0[r] - tab.start_step[r]
            tab.generated[r] = tab.output[r]
            fstep[r] = -1
            slow_gaps[r] += self.slow
            self._finish(r, t)

    def _commit_mixed(self, t: float) -> None:
        dt = t - self._seg_t0
        self.steps += 1  # every decode in the step produced one token
        if dt > self._slo:
            self.slow += 1
        if self._latency is not None and self.ndec:
            self._latency.add_itl(t, dt, self.ndec)
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
            else:
                # recomputed after a preemption: one gap since its last token before it
                gap = t - self._last_token.pop(r, t)
                if gap > self._slo:
                    tab.slow_gaps[r] += 1
                if self._latency is not None:
                    self._latency.add_itl(t, gap, 1)
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
            tab.slow_gaps[r] -= self.slow  # differenced when it leaves the batch
            self.kv_base += tab.need[r] - steps
            self.ndec += 1
        self._chunks = []

    def _preempt_newest(self, t: float) -> None:
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
        tab.slow_gaps[r] += self.slow
        self._last_token[r] = t
        self.preemptions += 1
        self.waiting.appendleft(r)

    def _cached_tokens(self, r: int, prompt: int, need: int) -> int:
        """Look the prompt's blocks up in the prefix cache, make them the most recent, evict the
        oldest beyond the bound; return the prompt tokens found (at most ``prompt − 1``). ``need``
        (prompt + tokens generated before a preemption) is what vLLM counts as queried."""
        cache = self._cache
        tab = self._table
        assert cache is not None and tab.hash_offsets is not None and tab.hash_ids is not None
        ids = tab.hash_ids[tab.hash_offsets[r] : tab.hash_offsets[r + 1]].tolist()
        hit = 0
        nb = len(ids)
        while hit < nb and ids[hit] in cache:
            cache.move_to_end(ids[hit])
            hit += 1
        for k in range(hit, nb):
            cache[ids[k]] = None
        cap = self._cache_cap
        while len(cache) > cap:
            cache.popitem(last=False)
        cached = min(hit * self._block_tokens, prompt - 1)
        self.prefix_queries += need
        self.prefix_hits += max(cached, 0)
        return max(cached, 0)

    def _plan(self, t: float) -> float | None:
        tab = self._table
        cap = self.capacity
        # Room for every decode's next token, else preempt the newest (as often as needed).
        while self.ndec and self.kv_base + self.ndec * (self.steps + 1) + self.kv_reserved > cap:
            self._preempt_newest(t)
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
            prompt, generated, need_col, scheduled = tab.prompt, tab.generated, tab.need, tab.scheduled
            cache = self._cache
            while waiting and p < budget and nseq < self.max_seqs:
                r = waiting[0]
                need = prompt[r] + generated[r]
                if used + need > cap:
                    break  # FCFS: later requests do not overtake the head
                waiting.popleft()
                need_col[r] = need
                if scheduled[r] < 0:
                    scheduled[r] = t
                compute = need - self._cached_tokens(r, prompt[r], need) if cache is not None else need
                pre[r] = compute
                self.kv_reserved += need
                used += need
                nseq += 1
                take = compute if compute < budget - p else budget - p
                chunks.append((r, take))
                p += take
        lin = self._lin
        if p > 0:
            self._chunks = chunks
            self._act = MIXED
            self._seg_t0 = t
            if lin is not None:
                mem = lin[0] + kv_dec * lin[1]
                comp = (ndec + p) * lin[2]
                self.busy_until = t + (mem if mem >= comp else comp)
            else:
                # Each chunk attends to the tokens of its prompt before it (earlier chunks, a
                # cached prefix) and to itself; ``pre`` holds what is left to compute.
                need_col = tab.need
                pairs = 0.0
                for r, take in chunks:
                    pairs += take * (need_col[r] - pre[r]) + take * take / 2.0
                self.busy_until = t + self._step_time(ndec, kv_dec, p, pairs)
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
