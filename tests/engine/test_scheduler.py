"""The pure scheduler: vLLM V1 order of work, chunked prefill, paged KV cache, preemption, and the
steady-load fidelity of the issue's "done when" (decode throughput and ITL within 5 % of the model).

Scenario tests use :class:`LinearCost`, a cost model whose step times can be worked by hand; the
fidelity tests use the real :class:`llmscale.model.ReplicaModel`.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmscale.engine.scheduler import (
    EngineRequest,
    FinishedRequest,
    Scheduler,
    SchedulerConfig,
    StepResult,
)
from llmscale.model import GPU_PRESETS, MODEL_PRESETS, ReplicaModel


@dataclass(frozen=True)
class LinearCost:
    """Step time = 10 ms + 1 µs per KV token read + 100 µs per prefill token (hand-checkable)."""

    kv_cache_capacity_tokens: int = 16 * 1000

    def step_time(self, decode_seqs: int, kv_tokens_read: int, prefill_tokens: int = 0, prefill_pairs: float | None = None) -> float:
        return 0.010 + 1e-6 * kv_tokens_read + 1e-4 * prefill_tokens


def run_to_idle(s: Scheduler, now: float = 0.0, limit: int = 100_000) -> list[StepResult]:
    """Step back to back from ``now`` until nothing is left (the engine loop without the clock)."""
    steps: list[StepResult] = []
    for _ in range(limit):
        r = s.step(now)
        if r is None:
            nxt = s.next_arrival_s()
            if nxt is None:
                return steps
            now = max(now, nxt)
            continue
        steps.append(r)
        now = r.end_s
    raise AssertionError("scheduler did not drain")


def cfg(**kw: int) -> SchedulerConfig:
    base = {
        "num_gpu_blocks": 1000,
        "max_num_seqs": 256,
        "max_num_batched_tokens": 8192,
        "max_model_len": 4096,
    }
    base.update(kw)
    return SchedulerConfig(**base)


# ---------------------------------------------------------------------------------------------
# Scenarios with hand-worked numbers
# ---------------------------------------------------------------------------------------------


def test_single_request_prefill_then_decode_timing() -> None:
    s = Scheduler(cfg(), LinearCost())
    s.add(EngineRequest("a", prompt_tokens=100, max_tokens=3, arrival_s=0.0))
    steps = run_to_idle(s)
    # Step 1: prefill 100 tokens: 10 ms + 100 × 0.1 ms = 20 ms, first token at 0.020.
    # Step 2: decode at context 101: 10 ms + 101 µs; step 3: context 102: 10 ms + 102 µs.
    assert [r.prefill_tokens for r in steps] == [100, 0, 0]
    assert [r.decode_seqs for r in steps] == [0, 1, 1]
    assert [r.kv_tokens_read for r in steps] == [0, 101, 102]
    assert steps[0].tokens[0].ttft_s == pytest.approx(0.020)
    assert steps[1].tokens[0].itl_s == pytest.approx(0.010101)
    assert steps[2].tokens[0].itl_s == pytest.approx(0.010102)
    (done,) = steps[2].finished
    assert (done.finish_reason, done.output_tokens, done.prompt_tokens) == ("length", 3, 100)
    assert done.e2e_s == pytest.approx(0.020 + 0.010101 + 0.010102)
    assert done.queue_s == 0.0
    assert steps[-1].kv_cache_usage == 0.0  # blocks freed at finish


def test_long_prompt_is_chunked_across_steps() -> None:
    s = Scheduler(cfg(max_num_batched_tokens=100), LinearCost())
    s.add(EngineRequest("a", prompt_tokens=250, max_tokens=1, arrival_s=0.0))
    steps = run_to_idle(s)
    # 250 prompt tokens under a 100-token budget: chunks of 100, 100, 50; the token comes after the last.
    assert [r.prefill_tokens for r in steps] == [100, 100, 50]
    assert [len(r.tokens) for r in steps] == [0, 0, 1]
    assert steps[2].tokens[0].ttft_s == pytest.approx(0.020 + 0.020 + 0.015)
    assert steps[-1].new_prompt_tokens == 250


def test_running_decodes_are_scheduled_before_a_new_prefill_chunk() -> None:
    s = Scheduler(cfg(max_num_batched_tokens=100), LinearCost())
    s.add(EngineRequest("old", prompt_tokens=10, max_tokens=50, arrival_s=0.0))
    first = s.step(0.0)
    assert first is not None and first.prefill_tokens == 10
    s.add(EngineRequest("new", prompt_tokens=500, max_tokens=1, arrival_s=first.end_s))
    mixed = s.step(first.end_s)
    # The running request's decode token comes first; the new prompt gets the other 99 tokens.
    assert mixed is not None
    assert (mixed.decode_seqs, mixed.prefill_tokens) == (1, 99)
    assert [t.request_id for t in mixed.tokens] == ["old"]


def test_max_num_seqs_caps_the_running_batch() -> None:
    s = Scheduler(cfg(max_num_seqs=2), LinearCost())
    for rid in "abc":
        s.add(EngineRequest(rid, prompt_tokens=16, max_tokens=4, arrival_s=0.0))
    steps = run_to_idle(s)
    assert max(r.num_running for r in steps) == 2
    assert steps[0].num_waiting == 1
    # "c" starts only after "a" and "b" finish, so it waits four steps.
    c_first = next(i for i, r in enumerate(steps) for t in r.tokens if t.request_id == "c")
    assert c_first == 4


def test_fcfs_head_of_line_blocks_a_smaller_later_request() -> None:
    # 10 blocks = 160 tokens. "big" holds 8 blocks; "wide" needs 5 and must wait; "tiny" needs 1
    # and would fit, but FCFS admission stops at the first request that does not.
    s = Scheduler(cfg(num_gpu_blocks=10, max_model_len=160), LinearCost())
    s.add(EngineRequest("big", prompt_tokens=120, max_tokens=5, arrival_s=0.0))
    s.add(EngineRequest("wide", prompt_tokens=70, max_tokens=1, arrival_s=0.0))
    s.add(EngineRequest("tiny", prompt_tokens=4, max_tokens=1, arrival_s=0.0))
    r = s.step(0.0)
    assert r is not None
    assert r.prefill_tokens == 120 and r.num_running == 1 and r.num_waiting == 2


def test_future_arrivals_are_not_scheduled_early() -> None:
    s = Scheduler(cfg(), LinearCost())
    s.add(EngineRequest("later", prompt_tokens=8, max_tokens=1, arrival_s=5.0))
    assert not s.has_work(4.9)
    assert s.step(4.9) is None
    assert s.has_work(5.0)
    r = s.step(5.0)
    assert r is not None and r.tokens[0].ttft_s == pytest.approx(0.010 + 8e-4)


def test_queue_time_counts_from_arrival_to_first_schedule() -> None:
    s = Scheduler(cfg(max_num_seqs=1), LinearCost())
    s.add(EngineRequest("a", prompt_tokens=10, max_tokens=2, arrival_s=0.0))
    s.add(EngineRequest("b", prompt_tokens=10, max_tokens=1, arrival_s=0.0))
    steps = run_to_idle(s)
    b = next(f for r in steps for f in r.finished if f.request_id == "b")
    a_end = next(r.end_s for r in steps for f in r.finished if f.request_id == "a")
    assert b.queue_s == pytest.approx(a_end)


def _two_requests_on_four_blocks() -> tuple[Scheduler, list[StepResult]]:
    # 4 blocks (64 tokens). "a" (prompt 16) and "b" (prompt 16) each hold 1 block after prefill and
    # grow one block per 16 tokens. When "a" needs its 3rd block... worked below step by step.
    s = Scheduler(cfg(num_gpu_blocks=4, max_model_len=64), LinearCost())
    s.add(EngineRequest("a", prompt_tokens=16, max_tokens=40, arrival_s=0.0))
    s.add(EngineRequest("b", prompt_tokens=16, max_tokens=40, arrival_s=0.0))
    steps = run_to_idle(s)
    return s, steps


def _first_preemption(steps: list[StepResult]) -> int:
    preempting = [r for r in steps if r.preempted]
    assert preempting, "the cache must run out"
    return steps.index(preempting[0])


def test_the_newest_running_request_is_preempted() -> None:
    _, steps = _two_requests_on_four_blocks()
    preempting = [r for r in steps if r.preempted]
    assert preempting, "the cache must run out"
    # The first preemption evicts the newest request, "b", never the oldest.
    assert preempting[0].preempted[0] == "b"
    # At that moment the cache was full (4 of 4 blocks in use just before).
    idx = steps.index(preempting[0])
    assert steps[idx - 1].kv_cache_usage == 1.0


def test_a_preempted_request_is_recomputed() -> None:
    _, steps = _two_requests_on_four_blocks()
    idx = _first_preemption(steps)
    # After preemption "b" is recomputed: a prefill of its prompt plus the tokens it had produced.
    b_tokens_before = sum(1 for r in steps[:idx] for t in r.tokens if t.request_id == "b")
    recompute = next(r for r in steps[idx + 1 :] if r.prefill_tokens > 0)
    assert recompute.prefill_tokens == 16 + b_tokens_before


def test_preempted_or_not_every_request_delivers_every_token_once_in_order() -> None:
    _, steps = _two_requests_on_four_blocks()
    for rid in "ab":
        idxs = [t.index for r in steps for t in r.tokens if t.request_id == rid]
        assert idxs == list(range(1, 41))


def test_every_preemption_is_counted() -> None:
    s, steps = _two_requests_on_four_blocks()
    fin = {f.request_id: f for r in steps for f in r.finished}
    assert fin["b"].num_preemptions >= 1 and fin["a"].num_preemptions == 0
    assert s.num_preemptions_total == sum(len(r.preempted) for r in steps)


def _aborted() -> tuple[Scheduler, StepResult, FinishedRequest | None]:
    s = Scheduler(cfg(), LinearCost())
    s.add(EngineRequest("a", prompt_tokens=100, max_tokens=10, arrival_s=0.0))
    r = s.step(0.0)
    assert r is not None and s.kv_cache_usage > 0
    return s, r, s.abort("a", r.end_s)


def test_abort_reports_the_abort() -> None:
    s, r, f = _aborted()
    assert f is not None and f.finish_reason == "abort" and f.output_tokens == 1
    assert s.abort("a", r.end_s) is None


def test_abort_frees_the_blocks() -> None:
    s, r, _ = _aborted()
    assert s.kv_cache_usage == 0 and not s.has_work(r.end_s)


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        pytest.param(
            {"max_model_len": 2048, "num_gpu_blocks": 100}, "KV cache", id="max-model-len-over-cache"
        ),
        pytest.param({"max_num_seqs": 0}, "positive", id="zero-seqs"),
    ],
)
def test_config_refuses_impossible_limits(kw: dict[str, int], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        cfg(**kw)


def test_request_over_context_limit_is_refused() -> None:
    s = Scheduler(cfg(max_model_len=128), LinearCost())
    with pytest.raises(ValueError, match="max_model_len"):
        s.add(EngineRequest("a", prompt_tokens=100, max_tokens=29, arrival_s=0.0))


def _run_requests(
    reqs: list[tuple[int, int, float]], blocks: int, budget: int, seqs: int
) -> tuple[Scheduler, list[StepResult]]:
    s = Scheduler(
        cfg(num_gpu_blocks=blocks, max_num_batched_tokens=budget, max_num_seqs=seqs, max_model_len=16 * 20),
        LinearCost(),
    )
    for i, (p, n, t) in enumerate(sorted(reqs, key=lambda r: r[2])):
        s.add(EngineRequest(f"r{i}", prompt_tokens=p, max_tokens=n, arrival_s=t))
    return s, run_to_idle(s)


#: Requests ``(prompt tokens, max tokens, arrival s)`` and an engine's blocks, step budget and sequences.
REQUEST_RUNS = given(
    reqs=st.lists(
        st.tuples(st.integers(1, 200), st.integers(1, 60), st.floats(0, 2.0)), min_size=1, max_size=25
    ),
    blocks=st.integers(20, 60),
    budget=st.integers(16, 512),
    seqs=st.integers(1, 16),
)


@settings(max_examples=60, deadline=None)
@REQUEST_RUNS
def test_every_request_gets_exactly_its_tokens(
    reqs: list[tuple[int, int, float]], blocks: int, budget: int, seqs: int
) -> None:
    _, steps = _run_requests(reqs, blocks, budget, seqs)
    got: dict[str, list[int]] = {}
    for r in steps:
        for t in r.tokens:
            got.setdefault(t.request_id, []).append(t.index)
    by_id = {f"r{i}": n for i, (_, n, _) in enumerate(sorted(reqs, key=lambda r: r[2]))}
    assert {k: v for k, v in got.items()} == {k: list(range(1, n + 1)) for k, n in by_id.items()}


@settings(max_examples=60, deadline=None)
@REQUEST_RUNS
def test_the_blocks_sequences_step_budget_never_overflow(
    reqs: list[tuple[int, int, float]], blocks: int, budget: int, seqs: int
) -> None:
    s, steps = _run_requests(reqs, blocks, budget, seqs)
    for r in steps:
        assert 0.0 <= r.kv_cache_usage <= 1.0
        assert r.num_running <= seqs
        assert r.prefill_tokens + r.decode_seqs <= budget
    assert s.kv_cache_usage == 0.0


# ---------------------------------------------------------------------------------------------
# Steady-load fidelity against the performance model (issue 3, "done when")
# ---------------------------------------------------------------------------------------------

RM_8B_H100 = ReplicaModel(arch=MODEL_PRESETS["llama-3.1-8b"], gpu=GPU_PRESETS["h100-sxm"])


@pytest.mark.parametrize("batch", [1, 8, 32, 64, 256])
def test_steady_decode_matches_the_model_within_5_percent(batch: int) -> None:
    prompt, out = 512, 400
    s = Scheduler(SchedulerConfig.from_cost_model(RM_8B_H100, max_model_len=8192), RM_8B_H100)
    for i in range(batch):
        s.add(EngineRequest(f"r{i}", prompt_tokens=prompt, max_tokens=out, arrival_s=0.0))
    steps = run_to_idle(s)
    # Steady state: steps where the whole batch decodes and no prompt is being prefilled (with 8192
    # batched tokens per step, prompts of 32+ requests take a few mixed steps first).
    decode = [r for r in steps if r.decode_seqs == batch and r.prefill_tokens == 0]
    assert len(decode) >= out - 1 - (batch * prompt) // 8192 - 1
    itls = [t.itl_s for r in decode for t in r.tokens]
    assert len(itls) == batch * len(decode) and None not in itls
    measured_itl = sum(x for x in itls if x is not None) / len(itls)
    measured_tput = sum(len(r.tokens) for r in decode) / sum(r.duration_s for r in decode)
    # The k-th output token is sampled by a decode over a context of prompt + k − 1 tokens, so each
    # step's predicted time follows from the token indexes a client sees, not the scheduler's books.
    predicted = [
        RM_8B_H100.decode_step_time(batch, prompt + sum(t.index for t in r.tokens) / batch - 1)
        for r in decode
    ]
    predicted_itl = sum(predicted) / len(predicted)
    assert measured_itl == pytest.approx(predicted_itl, rel=0.05)
    assert measured_tput == pytest.approx(batch / predicted_itl, rel=0.05)
    # And the whole run against the closed form at the mean context (prompt + out/2).
    assert predicted_itl == pytest.approx(RM_8B_H100.decode_step_time(batch, prompt + out / 2), rel=0.05)


def test_preemptions_appear_once_the_kv_cache_is_full() -> None:
    # Llama-3.1-8B on an H100 holds ~467k tokens of KV. 256 requests of 1000 + 1000 tokens need
    # 512k at their end: the cache fills part-way through decode and the newest are preempted.
    rm = RM_8B_H100
    s = Scheduler(SchedulerConfig.from_cost_model(rm, max_model_len=8192), rm)
    n, prompt, out = 256, 1000, 1000
    assert n * (prompt + out) > rm.kv_cache_capacity_tokens
    for i in range(n):
        s.add(EngineRequest(f"r{i}", prompt_tokens=prompt, max_tokens=out, arrival_s=0.0))
    steps = run_to_idle(s)
    first = next(i for i, r in enumerate(steps) if r.preempted)
    assert steps[first - 1].kv_cache_usage > 0.99  # full just before the first preemption
    assert all(not r.preempted for r in steps[:first])
    assert sum(len(r.preempted) for r in steps) > 0
    # Same load with a cache that fits it: no preemption at all.
    s2 = Scheduler(SchedulerConfig.from_cost_model(rm, max_model_len=8192), rm)
    for i in range(200):
        s2.add(EngineRequest(f"r{i}", prompt_tokens=prompt, max_tokens=out, arrival_s=0.0))
    assert 200 * (prompt + out) < rm.kv_cache_capacity_tokens
    assert all(not r.preempted for r in run_to_idle(s2))
