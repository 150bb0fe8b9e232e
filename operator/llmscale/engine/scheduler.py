"""A vLLM V1-style continuous-batching scheduler over a paged KV cache. Pure: time is an argument.

The mock engine and its tests drive this class; it never sleeps, reads a clock or does I/O. One call
to :meth:`Scheduler.step` plans one engine iteration starting at ``now`` (seconds of engine time),
asks the cost model how long the modelled GPU takes for it, and returns everything that happened at
the step's end: tokens sampled, requests finished, requests preempted, and the gauges after it.

The order of work follows vLLM's ``vllm/v1/core/sched/scheduler.py`` (``Scheduler.schedule``):

1. **Running requests first**, in admission order. Each asks for the tokens it is behind by
   (``num_tokens - num_computed_tokens``: 1 for a decode, a prompt chunk for a prefill that did not
   fit in an earlier step), capped by what is left of ``max_num_batched_tokens``. If the KV blocks
   for those tokens are not free, the **newest** running request is preempted (``running.pop()``):
   its blocks are freed, its computed tokens reset to 0 and it goes back to the *front* of the
   waiting queue, to be recomputed (prompt + tokens generated so far) when it is admitted again.
   This repeats until the allocation succeeds or the request preempted itself.
2. **Then waiting requests**, FCFS, only if nothing was preempted in this step, while the token
   budget lasts and fewer than ``max_num_seqs`` run. A request whose blocks are not free stops
   admission (FCFS: later requests do not overtake it). A prompt larger than the remaining budget
   is admitted with a chunk of it (chunked prefill) and finishes its prefill in later steps.

A request samples one token at the end of every step after which it has no uncomputed tokens left
(the last prefill chunk or a decode), so TTFT and ITL are consequences of the load, not inputs.

Blocks follow vLLM's ``KVCacheManager.allocate_slots``: a request holds
``ceil((num_computed_tokens + new_tokens) / block_size)`` blocks; the newly sampled token's KV is
written by the *next* step, so it needs no block until then.

Not modelled: prefix caching (every query misses), speculative decoding, priorities, LoRA.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Protocol

__all__ = [
    "BLOCK_SIZE_TOKENS",
    "FINISH_REASONS",
    "EngineRequest",
    "FinishedRequest",
    "Scheduler",
    "SchedulerConfig",
    "StepCostModel",
    "StepResult",
    "TokenEvent",
]

#: Tokens per paged-attention block: vLLM's default ``--block-size`` on CUDA (``CacheConfig``).
BLOCK_SIZE_TOKENS = 16

#: Values of the ``finished_reason`` label, in vLLM's order (``vllm/v1/engine/__init__.py``,
#: ``FINISH_REASON_STRINGS``). The mock produces ``stop``, ``length`` and ``abort``.
FINISH_REASONS: tuple[str, ...] = ("stop", "length", "abort", "error", "repetition")


class StepCostModel(Protocol):
    """What the scheduler needs of the performance model (``llmscale.model.ReplicaModel`` fits)."""

    @property
    def kv_cache_capacity_tokens(self) -> int:
        """Tokens of KV cache that fit in GPU memory after weights and activations."""
        ...

    def step_time(
        self, decode_seqs: int, kv_tokens_read: int, prefill_tokens: int = 0, prefill_pairs: float | None = None
    ) -> float:
        """Seconds of one engine step: ``decode_seqs`` decodes reading ``kv_tokens_read`` tokens
        of KV cache in total, plus ``prefill_tokens`` prompt tokens (chunked prefill) with
        ``prefill_pairs`` query-key pairs (``Σ c·e + c²/2`` over the chunks; ``None``: one chunk alone)."""
        ...


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    """Limits of the scheduler, named and defaulted as vLLM's engine arguments.

    Attributes:
        num_gpu_blocks: KV-cache blocks of ``block_size`` tokens in GPU memory.
        max_num_seqs: most requests running at once (vLLM's OpenAI server: 256 on A100/L40S,
            1024 on H100-class GPUs; see ``llmscale.engine.main.vllm_batch_defaults``).
        max_num_batched_tokens: token budget of one step, shared by decodes and prefill chunks
            (vLLM's OpenAI server: 2048 on A100/L40S, 8192 on H100-class GPUs).
        max_model_len: most tokens (prompt + output) of one request.
        block_size: tokens per KV block (16, vLLM's CUDA default).

    Raises:
        ValueError: a limit is not positive, or one request of ``max_model_len`` tokens would not
            fit in the whole cache (vLLM refuses to start in that case too).
    """

    num_gpu_blocks: int
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    max_model_len: int = 8192
    block_size: int = BLOCK_SIZE_TOKENS

    def __post_init__(self) -> None:
        for name in (
            "num_gpu_blocks",
            "max_num_seqs",
            "max_num_batched_tokens",
            "max_model_len",
            "block_size",
        ):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        capacity = self.num_gpu_blocks * self.block_size
        if self.max_model_len > capacity:
            raise ValueError(
                f"The model's max seq len ({self.max_model_len}) is larger than the maximum number of "
                f"tokens that can be stored in KV cache ({capacity}); lower --max-model-len"
            )

    @classmethod
    def from_cost_model(cls, cost: StepCostModel, **overrides: int) -> SchedulerConfig:
        """Size the cache from ``cost.kv_cache_capacity_tokens`` (whole blocks only)."""
        block_size = overrides.get("block_size", BLOCK_SIZE_TOKENS)
        overrides.setdefault("num_gpu_blocks", cost.kv_cache_capacity_tokens // block_size)
        return cls(**overrides)


@dataclass(frozen=True, slots=True)
class EngineRequest:
    """A generation request as the engine core sees it.

    Attributes:
        request_id: unique id.
        prompt_tokens: prompt length, tokens (≥ 1).
        max_tokens: tokens to generate, ≥ 1; the request finishes after that many.
        arrival_s: engine time the request arrived, seconds. It is not scheduled before then.
        finish_reason: reason reported when ``max_tokens`` is reached: ``length`` (the cap, as vLLM
            reports it) or ``stop`` (the mock's stand-in for the model emitting EOS).
    """

    request_id: str
    prompt_tokens: int
    max_tokens: int
    arrival_s: float
    finish_reason: str = "length"


@dataclass(frozen=True, slots=True)
class TokenEvent:
    """One output token sampled for ``request_id`` at ``time_s`` (the end of its step).

    ``index`` counts output tokens from 1; ``ttft_s`` is set on the first token, ``itl_s`` (seconds
    since the previous token of this request) on every later one.
    """

    request_id: str
    index: int
    time_s: float
    ttft_s: float | None = None
    itl_s: float | None = None


@dataclass(frozen=True, slots=True)
class FinishedRequest:
    """Latencies of a finished request, seconds of engine time, as vLLM's ``FinishedRequestStats``.

    ``queue_s`` = first scheduled − arrival; ``prefill_s`` = first token − first scheduled;
    ``decode_s`` = last token − first token; ``inference_s`` = finish − first scheduled;
    ``e2e_s`` = finish − arrival. Times of a request aborted before they happened are 0.
    """

    request_id: str
    finish_reason: str
    prompt_tokens: int
    output_tokens: int
    max_tokens: int
    e2e_s: float
    queue_s: float
    prefill_s: float
    decode_s: float
    inference_s: float
    num_preemptions: int


@dataclass(frozen=True, slots=True)
class StepResult:
    """What one engine step did; all times are engine seconds.

    Attributes:
        start_s / end_s: when the step began and ended (``end_s - start_s`` is the modelled time).
        decode_seqs: requests that decoded one token in this step.
        kv_tokens_read: context tokens of those decodes, summed (KV read by attention).
        prefill_tokens: prompt (or recomputed) tokens processed in this step.
        tokens: tokens sampled at ``end_s``.
        finished: requests that finished at ``end_s``.
        preempted: ids of requests preempted while planning this step.
        new_prompt_tokens: prompt tokens of requests that produced their first token in this step
            (what ``vllm:prompt_tokens_total`` counts).
        prefix_cache_queries: prompt tokens looked up in the prefix cache by requests admitted in this
            step (vLLM counts every admission); there are never hits here.
        num_running / num_waiting / kv_cache_usage: gauges after the step (usage is a 0..1 fraction
            of blocks in use).
    """

    start_s: float
    end_s: float
    decode_seqs: int
    kv_tokens_read: int
    prefill_tokens: int
    tokens: tuple[TokenEvent, ...]
    finished: tuple[FinishedRequest, ...]
    preempted: tuple[str, ...]
    new_prompt_tokens: int
    prefix_cache_queries: int
    num_running: int
    num_waiting: int
    kv_cache_usage: float

    @property
    def duration_s(self) -> float:
        """Modelled GPU time of the step, seconds."""
        return self.end_s - self.start_s


@dataclass(slots=True)
class _Seq:
    """Mutable state of one request inside the scheduler."""

    req: EngineRequest
    output_tokens: int = 0
    num_computed: int = 0
    blocks: int = 0
    num_preemptions: int = 0
    first_scheduled_s: float | None = None
    first_token_s: float | None = None
    last_token_s: float | None = None

    @property
    def num_tokens(self) -> int:
        return self.req.prompt_tokens + self.output_tokens


class Scheduler:
    """Continuous batching under ``max_num_seqs`` and ``max_num_batched_tokens`` with a paged KV cache.

    Usage: :meth:`add` requests (any time), then call :meth:`step` with the engine time the next step
    starts; it returns ``None`` when there is nothing to run at that time. Deterministic: the same
    calls give the same results.
    """

    def __init__(self, config: SchedulerConfig, cost: StepCostModel) -> None:
        self.config = config
        self.cost = cost
        self._waiting: deque[_Seq] = deque()
        self._running: list[_Seq] = []
        self._by_id: dict[str, _Seq] = {}
        self._free_blocks = config.num_gpu_blocks
        self.num_preemptions_total = 0

    # -- inputs ------------------------------------------------------------------------------------

    def add(self, request: EngineRequest) -> None:
        """Queue ``request`` (FCFS by call order; callers add in arrival order).

        Raises:
            ValueError: duplicate id, non-positive lengths, or prompt + max_tokens over max_model_len.
        """
        if request.request_id in self._by_id:
            raise ValueError(f"Request {request.request_id} is already queued")
        if request.prompt_tokens < 1 or request.max_tokens < 1:
            raise ValueError("prompt_tokens and max_tokens must be at least 1")
        if request.prompt_tokens + request.max_tokens > self.config.max_model_len:
            raise ValueError(
                f"Request {request.request_id} needs {request.prompt_tokens + request.max_tokens} tokens, "
                f"over max_model_len {self.config.max_model_len}"
            )
        seq = _Seq(request)
        self._by_id[request.request_id] = seq
        self._waiting.append(seq)

    def abort(self, request_id: str, now: float) -> FinishedRequest | None:
        """Drop a request (client went away) and free its blocks; ``None`` if it already finished."""
        seq = self._by_id.pop(request_id, None)
        if seq is None:
            return None
        if seq in self._running:
            self._running.remove(seq)
        else:
            self._waiting.remove(seq)
        self._free(seq)
        return self._finished(seq, "abort", now)

    # -- state -------------------------------------------------------------------------------------

    @property
    def num_running(self) -> int:
        """Requests in the running batch."""
        return len(self._running)

    @property
    def num_waiting(self) -> int:
        """Requests queued (new or preempted), including ones whose arrival time is still ahead."""
        return len(self._waiting)

    @property
    def kv_cache_usage(self) -> float:
        """Fraction of KV blocks in use, 0..1 (vLLM's ``BlockPool.get_usage``)."""
        return 1.0 - self._free_blocks / self.config.num_gpu_blocks

    def has_work(self, now: float) -> bool:
        """Whether :meth:`step` at ``now`` would run anything (running requests or arrived waiters)."""
        return bool(self._running) or (bool(self._waiting) and self._waiting[0].req.arrival_s <= now)

    def next_arrival_s(self) -> float | None:
        """Arrival time of the head of the waiting queue, or ``None`` when it is empty."""
        return self._waiting[0].req.arrival_s if self._waiting else None

    # -- the step ----------------------------------------------------------------------------------

    def step(self, now: float) -> StepResult | None:
        """Plan and run one engine step starting at ``now`` (engine seconds); ``None`` if idle."""
        cfg = self.config
        budget = cfg.max_num_batched_tokens
        scheduled: list[tuple[_Seq, int]] = []
        preempted: list[str] = []
        queries = 0

        # 1. Running requests, oldest first; preempt the newest when blocks run out.
        i = 0
        while i < len(self._running) and budget > 0:
            seq = self._running[i]
            n = min(seq.num_tokens - seq.num_computed, budget)
            if n <= 0:
                i += 1
                continue
            ok = self._allocate(seq, n)
            while not ok:
                victim = self._running.pop()
                self._preempt(victim)
                preempted.append(victim.req.request_id)
                if victim is seq:
                    break
                ok = self._allocate(seq, n)
            if not ok:
                break
            scheduled.append((seq, n))
            budget -= n
            i += 1

        # 2. Waiting requests, FCFS, only when this step preempted nothing.
        if not preempted:
            while self._waiting and budget > 0 and len(self._running) < cfg.max_num_seqs:
                seq = self._waiting[0]
                if seq.req.arrival_s > now:
                    break
                n = min(seq.num_tokens - seq.num_computed, budget)
                if not self._allocate(seq, n):
                    break
                self._waiting.popleft()
                self._running.append(seq)
                if seq.first_scheduled_s is None:
                    seq.first_scheduled_s = now
                queries += seq.num_tokens
                scheduled.append((seq, n))
                budget -= n

        if not scheduled:
            return None

        decode_seqs = 0
        kv_read = 0
        prefill = 0
        pairs = 0.0  # a chunk attends to its prompt's earlier tokens and to itself
        for seq, n in scheduled:
            if n == 1 and seq.output_tokens > 0 and seq.num_computed == seq.num_tokens - 1:
                decode_seqs += 1
                kv_read += seq.num_tokens
            else:
                prefill += n
                pairs += n * seq.num_computed + n * n / 2.0
        end = now + self.cost.step_time(decode_seqs, kv_read, prefill, pairs)

        tokens: list[TokenEvent] = []
        finished: list[FinishedRequest] = []
        new_prompt = 0
        for seq, n in scheduled:
            seq.num_computed += n
            if seq.num_computed < seq.num_tokens:
                continue  # a prefill chunk: no token yet
            seq.output_tokens += 1
            if seq.first_token_s is None:
                seq.first_token_s = end
                new_prompt += seq.req.prompt_tokens
                tokens.append(
                    TokenEvent(seq.req.request_id, seq.output_tokens, end, ttft_s=end - seq.req.arrival_s)
                )
            else:
                assert seq.last_token_s is not None
                tokens.append(
                    TokenEvent(seq.req.request_id, seq.output_tokens, end, itl_s=end - seq.last_token_s)
                )
            seq.last_token_s = end
            if seq.output_tokens >= seq.req.max_tokens:
                self._running.remove(seq)
                self._free(seq)
                del self._by_id[seq.req.request_id]
                finished.append(self._finished(seq, seq.req.finish_reason, end))

        return StepResult(
            start_s=now,
            end_s=end,
            decode_seqs=decode_seqs,
            kv_tokens_read=kv_read,
            prefill_tokens=prefill,
            tokens=tuple(tokens),
            finished=tuple(finished),
            preempted=tuple(preempted),
            new_prompt_tokens=new_prompt,
            prefix_cache_queries=queries,
            num_running=len(self._running),
            num_waiting=len(self._waiting),
            kv_cache_usage=self.kv_cache_usage,
        )

    # -- helpers -----------------------------------------------------------------------------------

    def _allocate(self, seq: _Seq, new_tokens: int) -> bool:
        need = math.ceil((seq.num_computed + new_tokens) / self.config.block_size) - seq.blocks
        if need > self._free_blocks:
            return False
        if need > 0:
            self._free_blocks -= need
            seq.blocks += need
        return True

    def _free(self, seq: _Seq) -> None:
        self._free_blocks += seq.blocks
        seq.blocks = 0

    def _preempt(self, seq: _Seq) -> None:
        # vLLM's _preempt_request: free the blocks, forget the computed tokens (recompute later),
        # and put the request at the head of the waiting queue.
        self._free(seq)
        seq.num_computed = 0
        seq.num_preemptions += 1
        self.num_preemptions_total += 1
        self._waiting.appendleft(seq)

    @staticmethod
    def _finished(seq: _Seq, reason: str, now: float) -> FinishedRequest:
        arrival = seq.req.arrival_s
        sched = seq.first_scheduled_s
        first = seq.first_token_s
        last = seq.last_token_s
        return FinishedRequest(
            request_id=seq.req.request_id,
            finish_reason=reason,
            prompt_tokens=seq.req.prompt_tokens,
            output_tokens=seq.output_tokens,
            max_tokens=seq.req.max_tokens,
            e2e_s=now - arrival,
            queue_s=(sched - arrival) if sched is not None else 0.0,
            prefill_s=(first - sched) if first is not None and sched is not None else 0.0,
            decode_s=(last - first) if last is not None and first is not None else 0.0,
            inference_s=(now - sched) if sched is not None else 0.0,
            num_preemptions=seq.num_preemptions,
        )
