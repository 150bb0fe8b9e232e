"""Prefix caching where the trace carries block hashes: hits skip prefill, the cache is bounded by
the KV cache and evicts the least recently used blocks, and the counters are vLLM's."""

from __future__ import annotations

import numpy as np
import pytest

from llmscale.model import GPU_PRESETS, MODEL_PRESETS, ReplicaModel
from llmscale.sim.baselines import StaticReplicas
from llmscale.sim.fleet import FleetConfig, SimResult, simulate
from llmscale.sim.replica import EngineConfig, ReplicaEngine, RequestTable
from llmscale.sim.trace import Trace

MODEL = ReplicaModel(arch=MODEL_PRESETS["llama-3.1-8b"], gpu=GPU_PRESETS["h100-sxm"])
T0 = 1_700_000_000.0


def _conversation_trace(n: int = 300, shared: int = 6, own: int = 2, gap_s: float = 0.4) -> Trace:
    """Every request: the same ``shared`` leading blocks (a system prompt and a long shared context),
    then ``own`` blocks of its own; 512-token blocks."""
    blocks = shared + own
    ids = np.concatenate([np.concatenate((np.arange(shared), 1000 + i * own + np.arange(own))) for i in range(n)])
    offsets = np.arange(0, n * blocks + 1, blocks, dtype=np.int64)
    t = T0 + gap_s * np.arange(n, dtype=np.float64)
    return Trace(t, np.full(n, blocks * 512, np.int64), np.full(n, 20, np.int64), np.zeros(n, bool), T0,
                 float(gap_s * n), "conversation", offsets, ids.astype(np.int64))


def _run(trace: Trace, caching: bool) -> SimResult:
    return simulate(trace, StaticReplicas(1), MODEL,
                    engine=EngineConfig(max_num_batched_tokens=8192, enable_prefix_caching=caching),
                    fleet=FleetConfig(cold_start_s=0, initial_replicas=1, min_replicas=1, max_replicas=1),
                    context_limit_tokens=16_384, itl_slo_s=0.1)


def _with_and_without_caching() -> tuple[Trace, SimResult, SimResult]:
    trace = _conversation_trace()
    return trace, _run(trace, True), _run(trace, False)


def test_cached_prefixes_are_counted_as_vllm_counts_them() -> None:
    trace, on, off = _with_and_without_caching()
    # every request after the first finds the 6 shared blocks: 3,072 of its 4,096 prompt tokens
    assert on.prefix_cache_queries_tokens == int(trace.prompt_tokens.sum())
    assert on.prefix_cache_hits_tokens == 3072 * (len(trace) - 1)
    assert off.prefix_cache_queries_tokens == off.prefix_cache_hits_tokens == 0


def test_cached_prefixes_skip_prefill() -> None:
    trace, on, off = _with_and_without_caching()
    ttft_on = np.asarray(on.requests.first_token) - trace.arrival_s
    ttft_off = np.asarray(off.requests.first_token) - trace.arrival_s
    # a quarter of the prompt to prefill: TTFT falls to about a quarter (the weights still stream)
    assert float(np.median(ttft_on[1:])) < 0.4 * float(np.median(ttft_off[1:]))


def test_a_trace_without_hashes_models_no_cache() -> None:
    trace = _conversation_trace()
    plain = Trace(trace.arrival_s, trace.prompt_tokens, trace.output_tokens, trace.is_batch, trace.start_s,
                  trace.duration_s)
    res = _run(plain, True)
    assert res.prefix_cache_queries_tokens == res.prefix_cache_hits_tokens == 0


def _thirteen_requests_one_at_a_time() -> tuple[list[int], int, list[int]]:
    """The prefix hits of each request, the most blocks ever cached, and the requests done."""
    # A KV cache of 10 blocks (5,120 tokens); requests of 2 blocks each, one at a time.
    def request_ids(k: int) -> list[int]:
        return [2 * k, 2 * k + 1]

    order = [0, 1, 2, 3, 4, 0, 5, 6, 7, 8, 9, 1, 0]
    ids = np.array([b for k in order for b in request_ids(k)], dtype=np.int64)
    n = len(order)
    table = RequestTable([10.0 * i for i in range(n)], [1024] * n, [2] * n,
                         hash_offsets=list(range(0, 2 * n + 1, 2)), hash_ids=ids, block_tokens=512)
    done: list[int] = []
    eng = ReplicaEngine(0, table, MODEL, EngineConfig(kv_capacity_tokens=5120, max_num_batched_tokens=2048),
                        lambda e, r, t: done.append(r))
    hits: list[int] = []
    most_cached = 0
    for i in range(n):  # each request alone: drive it to completion before the next arrives
        before = eng.prefix_hits
        wake = eng.add(i, 10.0 * i)
        while wake is not None:
            wake = eng.on_event()
        hits.append(eng.prefix_hits - before)
        most_cached = max(most_cached, eng.prefix_cached_blocks)
    return hits, most_cached, done


def test_the_prefix_cache_is_bounded_by_the_kv_cache() -> None:
    _, most_cached, done = _thirteen_requests_one_at_a_time()
    assert most_cached <= 10
    assert sorted(done) == list(range(13))


def test_the_prefix_cache_evicts_the_least_recently_used() -> None:
    hits, _, _ = _thirteen_requests_one_at_a_time()
    # request 0 again (6th): its blocks are still among the 10 most recent → a hit (1,023 tokens:
    # vLLM always computes the prompt's last token); after five more requests they are evicted,
    # so the 1 at position 12 misses, and the 0 at 13 (touched at 6, then pushed out) misses too.
    assert hits == [0, 0, 0, 0, 0, 1023, 0, 0, 0, 0, 0, 0, 0]


@pytest.mark.parametrize("budget", [8192, 2048])
def test_prefill_of_a_long_prompt_with_a_cached_prefix_starts_after_the_cached_blocks(budget: int) -> None:
    trace = _conversation_trace(n=2, shared=12, own=4, gap_s=5.0)  # 8,192-token prompts, 6,144 shared
    res = simulate(trace, StaticReplicas(1), MODEL,
                   engine=EngineConfig(max_num_batched_tokens=budget),
                   fleet=FleetConfig(cold_start_s=0, initial_replicas=1, min_replicas=1, max_replicas=1),
                   context_limit_tokens=16_384)
    ttft = np.asarray(res.requests.first_token) - trace.arrival_s
    # the second request prefills 2,048 tokens, not 8,192
    assert ttft[1] == pytest.approx(MODEL.step_time(0, 0, 2048), rel=0.02)
    assert ttft[0] > 3 * ttft[1]
