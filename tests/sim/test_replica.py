"""One simulated replica against the performance model and against the mock engine's
step-by-step scheduler (a real component: llmscale.engine.scheduler, after vLLM V1)."""

from __future__ import annotations

import bisect

import numpy as np
import pytest

from llmscale.engine.scheduler import EngineRequest, Scheduler, SchedulerConfig
from llmscale.model import GPU_PRESETS, MODEL_PRESETS, ReplicaModel
from llmscale.model.vllm_defaults import ITL_BUCKETS_S, TTFT_BUCKETS_S
from llmscale.sim.latency import LatencyRecorder, histogram_quantile
from llmscale.sim.replica import EngineConfig, ReplicaEngine, RequestTable, roofline_coefficients

MODEL = ReplicaModel(arch=MODEL_PRESETS["llama-3.1-8b"], gpu=GPU_PRESETS["h100-sxm"])


def _run_replica(
    arrival: list[float],
    prompt: list[int],
    output: list[int],
    model: object = MODEL,
    latency: LatencyRecorder | None = None,
    itl_slo_s: float = float("inf"),
    table: RequestTable | None = None,
    **cfg: int,
) -> tuple[RequestTable, ReplicaEngine]:
    """Drive one ReplicaEngine through its event protocol with a tiny loop (no fleet)."""
    import heapq

    table = table or RequestTable(arrival, prompt, output)
    done: list[int] = []

    def first(r: int, t: float) -> None:
        if latency is not None:
            latency.add_ttft(t, t - arrival[r])

    eng = ReplicaEngine(0, table, model, EngineConfig(**cfg), lambda e, r, t: done.append(r), first,  # type: ignore[arg-type]
                        latency=latency, itl_slo_s=itl_slo_s)
    wake: float | None = None
    i = 0
    version = 0
    heap: list[tuple[float, int]] = []
    while i < len(arrival) or heap:
        ta = arrival[i] if i < len(arrival) else float("inf")
        if heap and heap[0][0] <= ta:
            _t, v = heapq.heappop(heap)
            if v != version:
                continue
            wake = eng.on_event()
        else:
            wake = eng.add(i, ta)
            i += 1
        if wake is not None:
            version += 1
            heapq.heappush(heap, (wake, version))
    assert sorted(done) == list(range(len(arrival))), "every request finishes exactly once"
    return table, eng


SATURATED_B, SATURATED_P, SATURATED_O = 128, 1000, 2000


def _saturated_decode() -> tuple[np.ndarray, np.ndarray]:
    """128 requests arrive together: 1000-token prompts, 2000 tokens out each. After the prefill
    the batch decodes in lock step; the model says one step of B=128 at context C takes
    step_time(128, 128 × C). Mean context over the decode ≈ 1000 + 1000. First tokens, finishes."""
    b, p, o = SATURATED_B, SATURATED_P, SATURATED_O
    table, _ = _run_replica([0.0] * b, [p] * b, [o] * b)
    return np.array(table.first_token), np.array(table.finish)


def test_a_saturated_decode_batch_runs_at_the_models_step_time() -> None:
    b, p, o = SATURATED_B, SATURATED_P, SATURATED_O
    first, finish = _saturated_decode()
    itl = (finish - first) / (o - 1)
    expected_itl = MODEL.decode_step_time(b, p + o / 2)
    assert float(np.mean(itl)) == pytest.approx(expected_itl, rel=0.05)


def test_a_saturated_decode_batch_runs_at_the_models_throughput() -> None:
    b, p, o = SATURATED_B, SATURATED_P, SATURATED_O
    first, finish = _saturated_decode()
    decode_tok_s = b * (o - 1) / (finish.max() - first.max())
    assert decode_tok_s == pytest.approx(MODEL.throughput_tok_s(b, p + o / 2), rel=0.05)


@pytest.mark.parametrize("batch", [pytest.param(8, id="B8"), pytest.param(64, id="B64"), pytest.param(256, id="B256")])
def test_itl_matches_the_model_at_several_batch_sizes(batch: int) -> None:
    # Short prompts: the whole batch prefills in one step (256 × 30 < 8192 tokens), so every
    # request's ITL is the pure decode step of the batch.
    p, o = 30, 400
    table, _ = _run_replica([0.0] * batch, [p] * batch, [o] * batch)
    itl = (np.array(table.finish) - np.array(table.first_token)) / (o - 1)
    assert float(np.median(itl)) == pytest.approx(MODEL.decode_step_time(batch, p + o / 2), rel=0.05)


def _poisson(rate: float, seconds: float, seed: int) -> tuple[list[float], list[int], list[int]]:
    rng = np.random.default_rng(seed)
    n = rng.poisson(rate * seconds)
    t = np.sort(rng.uniform(0, seconds, n))
    prompt = rng.integers(100, 3000, n)
    out = rng.integers(2, 600, n)
    return t.tolist(), prompt.tolist(), out.tolist()


def _run_mock_engine(
    arrival: list[float], prompt: list[int], output: list[int], model: ReplicaModel = MODEL, **cfg: int
) -> tuple[np.ndarray, np.ndarray]:
    sched = Scheduler(SchedulerConfig.from_cost_model(model, **cfg), model)
    for i, (a, pr, o) in enumerate(zip(arrival, prompt, output, strict=True)):
        sched.add(EngineRequest(str(i), pr, o, a))
    ttft = np.full(len(arrival), np.nan)
    tpot = np.full(len(arrival), np.nan)
    first: dict[str, float] = {}
    now = 0.0
    left = len(arrival)
    while left:
        res = sched.step(now)
        if res is None:
            nxt = sched.next_arrival_s()
            assert nxt is not None
            now = max(now, nxt)
            continue
        for tok in res.tokens:
            if tok.ttft_s is not None:
                ttft[int(tok.request_id)] = tok.ttft_s
                first[tok.request_id] = tok.time_s
        for f in res.finished:
            k = int(f.request_id)
            if f.output_tokens > 1:
                tpot[k] = (res.end_s - first[f.request_id]) / (f.output_tokens - 1)
            left -= 1
        now = res.end_s
    return ttft, tpot


@pytest.mark.parametrize("rate", [pytest.param(4.0, id="light"), pytest.param(9.0, id="busy")])
def test_latencies_agree_with_the_mock_engines_step_by_step_scheduler(rate: float) -> None:
    arrival, prompt, output = _poisson(rate, 240.0, seed=3)
    table, _ = _run_replica(arrival, prompt, output, max_num_batched_tokens=2048)
    ttft_ref, tpot_ref = _run_mock_engine(arrival, prompt, output, max_num_batched_tokens=2048)
    a = np.array(arrival)
    ttft = np.array(table.first_token) - a
    out = np.array(output)
    tpot = np.where(out > 1, (np.array(table.finish) - np.array(table.first_token)) / np.maximum(out - 1, 1), np.nan)
    assert float(np.mean(tpot)) == pytest.approx(float(np.nanmean(tpot_ref)), rel=0.05)
    assert float(np.nanpercentile(tpot, 95)) == pytest.approx(float(np.nanpercentile(tpot_ref, 95)), rel=0.05)
    assert float(np.mean(ttft)) == pytest.approx(float(np.mean(ttft_ref)), rel=0.10)
    assert float(np.median(ttft)) == pytest.approx(float(np.median(ttft_ref)), rel=0.10)


def _mock_engine_histograms(
    arrival: list[float], prompt: list[int], output: list[int], target_s: float, **cfg: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The step-by-step scheduler's TTFT and ITL bucket counts (as ``EngineMetrics`` observes them)
    and each request's gaps over ``target_s``."""
    sched = Scheduler(SchedulerConfig.from_cost_model(MODEL, **cfg), MODEL)
    for i, (a, pr, o) in enumerate(zip(arrival, prompt, output, strict=True)):
        sched.add(EngineRequest(str(i), pr, o, a))
    ttft = np.zeros(len(TTFT_BUCKETS_S) + 1)
    itl = np.zeros(len(ITL_BUCKETS_S) + 1)
    slow = np.zeros(len(arrival), dtype=np.int64)
    now, left = 0.0, len(arrival)
    while left:
        res = sched.step(now)
        if res is None:
            nxt = sched.next_arrival_s()
            assert nxt is not None
            now = max(now, nxt)
            continue
        for tok in res.tokens:
            if tok.ttft_s is not None:
                ttft[bisect.bisect_left(TTFT_BUCKETS_S, tok.ttft_s)] += 1
            if tok.itl_s is not None:
                itl[bisect.bisect_left(ITL_BUCKETS_S, tok.itl_s)] += 1
                slow[int(tok.request_id)] += tok.itl_s > target_s
        left -= len(res.finished)
        now = res.end_s
    return ttft, itl, slow


@pytest.mark.parametrize("rate", [pytest.param(6.0, id="busy"), pytest.param(11.0, id="near-saturation")])
def test_per_token_latency_histograms_match_the_mock_engines_scheduler(rate: float) -> None:
    # Each decode step gives every running sequence one gap of the step's length, and a step that
    # carries a prefill chunk stretches them all: the simulator's leaps must add up to the same
    # histogram the engine's per-token observations give, bucket for bucket (within 2 %: a leap runs
    # at the step time of its middle KV size, which moves a few gaps across a bucket boundary).
    arrival, prompt, output = _poisson(rate, 240.0, seed=5)
    target = 0.05  # a bucket boundary of vLLM's ITL histogram
    rec = LatencyRecorder(0.0, 100_000.0)
    table, eng = _run_replica(arrival, prompt, output, latency=rec, itl_slo_s=target, max_num_batched_tokens=2048)
    ttft_ref, itl_ref, slow_ref = _mock_engine_histograms(arrival, prompt, output, target, max_num_batched_tokens=2048)
    assert eng.preemptions == 0
    sim_ttft = rec.counts("ttft").sum(axis=0)
    sim_itl = rec.counts("itl").sum(axis=0)
    assert sim_itl.sum() == itl_ref.sum() == sum(o - 1 for o in output)
    assert sim_ttft.sum() == ttft_ref.sum() == len(arrival)
    np.testing.assert_allclose(sim_itl, itl_ref, rtol=0.02, atol=50)
    np.testing.assert_allclose(sim_ttft, ttft_ref, rtol=0.1, atol=15)
    for q in (0.5, 0.95, 0.99):
        assert float(histogram_quantile(q, ITL_BUCKETS_S, sim_itl)) == pytest.approx(
            float(histogram_quantile(q, ITL_BUCKETS_S, itl_ref)), rel=0.02
        )
        # TTFT: a few thousand samples, so a handful of requests moves an interpolated p99 by a few %
        assert float(histogram_quantile(q, TTFT_BUCKETS_S, sim_ttft)) == pytest.approx(
            float(histogram_quantile(q, TTFT_BUCKETS_S, ttft_ref)), rel=0.05
        )
    # per request: the gaps over the target, counted in O(1) per request, agree with the tokens'
    sim_slow = np.array(table.slow_gaps)
    assert slow_ref.sum() > 1000
    assert sim_slow.sum() == pytest.approx(slow_ref.sum(), rel=0.01)
    assert np.abs(sim_slow - slow_ref).sum() <= 0.02 * slow_ref.sum()  # mostly ±1 at a boundary


def test_a_preempted_request_records_one_gap_across_its_recomputation() -> None:
    # A cache of 48,000 tokens under 8 requests/s: requests are preempted and recomputed. Every
    # output token after the first still gives exactly one gap, and the per-request count of gaps
    # over the target equals the histogram's count above it (0.1 s is a bucket boundary).
    arrival, prompt, output = _poisson(8.0, 240.0, seed=5)
    rec = LatencyRecorder(0.0, 100_000.0)
    table, eng = _run_replica(arrival, prompt, output, latency=rec, itl_slo_s=0.1,
                              max_num_batched_tokens=2048, kv_capacity_tokens=48_000)
    assert eng.preemptions > 0
    itl = rec.counts("itl").sum(axis=0)
    assert itl.sum() == sum(o - 1 for o in output)
    over = int(itl[ITL_BUCKETS_S.index(0.1) + 1 :].sum())
    assert sum(table.slow_gaps) == over > 0


def _overfilled_cache() -> tuple[RequestTable, ReplicaEngine]:
    """A cache of 20,000 tokens, 30 requests of 300 + 600 tokens: they all start, their contexts
    grow to 27,000 tokens."""
    n = 30
    return _run_replica([0.0] * n, [300] * n, [600] * n, kv_capacity_tokens=20_000)


def test_preemption_happens_when_the_kv_cache_fills() -> None:
    table, eng = _overfilled_cache()
    assert eng.preemptions > 0
    pre = np.array(table.preemptions)
    # vLLM preempts the newest: the first admitted requests are never preempted.
    assert pre[:10].sum() == 0 and pre[-10:].sum() > 0


def test_every_preempted_request_still_finishes() -> None:
    # The newest are recomputed later and all finish.
    table, eng = _overfilled_cache()
    assert all(f > 0 for f in table.finish)
    assert eng.outstanding == 0 and eng.kv_base + eng.ndec * eng.steps + eng.kv_reserved == 0


def test_no_preemption_while_the_cache_has_room() -> None:
    _table, eng = _run_replica([0.0] * 30, [300] * 30, [600] * 30)
    assert eng.preemptions == 0


def test_max_num_seqs_caps_the_running_batch() -> None:
    table, _eng = _run_replica([0.0] * 20, [100] * 20, [50] * 20, max_num_seqs=4)
    first = sorted(table.first_token)
    # five waves of four: the fifth first token comes after the first wave finished
    assert first[4] >= min(table.finish) - 1e-12


class _Quadratic:
    """A step time of another form than the roofline's."""

    kv_cache_capacity_tokens = 10_000

    def step_time(self, decode_seqs: int, kv_tokens_read: float, prefill_tokens: int = 0, prefill_pairs: float | None = None) -> float:
        return 0.01 + 1e-12 * kv_tokens_read**2 + 1e-5 * (decode_seqs + prefill_tokens)


def test_roofline_coefficients_reproduce_the_model() -> None:
    coef = roofline_coefficients(MODEL)
    assert coef is not None
    w, kv, c = coef
    assert MODEL.step_time(17, 12_345, 300) == pytest.approx(max(w + 12_345 * kv, 317 * c), rel=1e-12)


def test_roofline_coefficients_refuse_other_forms() -> None:
    assert roofline_coefficients(_Quadratic()) is None


def test_a_replica_runs_a_model_of_another_form() -> None:
    # It calls step_time itself.
    table, _ = _run_replica([0.0, 0.1], [100, 100], [10, 10], model=_Quadratic())
    assert all(f > 0 for f in table.finish)


#: MODEL with an attention term (a calibration of a small model fits one): attention is no longer
#: free, so how a chunk counts the tokens of its prompt before it shows in every TTFT.
ATTENTION = MODEL.with_changes(attention_efficiency=0.05)


def _lone_prompt_time(model: ReplicaModel, prompt: int, budget: int) -> float:
    """A lone prompt's chunk steps, each attending to the chunks before it."""
    total, done = 0.0, 0
    while done < prompt:
        c = min(budget, prompt - done)
        total += model.step_time(0, 0, c, c * done + c * c / 2.0)
        done += c
    return total


@pytest.mark.parametrize("prompt", [1000, 2048, 5000, 8000])
def test_a_lone_long_prompts_chunks_attend_to_the_ones_before_them(prompt: int) -> None:
    table, _ = _run_replica([0.0], [prompt], [2], model=ATTENTION, max_num_batched_tokens=2048)
    ttft_ref, _ = _run_mock_engine([0.0], [prompt], [2], model=ATTENTION, max_num_batched_tokens=2048)
    want = _lone_prompt_time(ATTENTION, prompt, 2048)
    assert table.first_token[0] == pytest.approx(want, rel=1e-9)
    assert ttft_ref[0] == pytest.approx(want, rel=1e-9)


@pytest.mark.parametrize("budget", [512, 2048, 4096])
def test_chunking_leaves_a_prompts_attention_as_a_whole_prompts(budget: int) -> None:
    """The attention of 8,000 tokens in chunks is the attention of 8,000 tokens at once."""
    def attention(chunk: int) -> float:
        return _lone_prompt_time(ATTENTION, 8000, chunk) - _lone_prompt_time(MODEL, 8000, chunk)

    assert attention(budget) == pytest.approx(attention(8000), rel=1e-9)


@pytest.mark.parametrize("rate", [pytest.param(4.0, id="light"), pytest.param(9.0, id="busy")])
def test_with_attention_latencies_agree_with_the_mock_engines_scheduler(rate: float) -> None:
    arrival, prompt, output = _poisson(rate, 120.0, seed=5)
    table, _ = _run_replica(arrival, prompt, output, model=ATTENTION, max_num_batched_tokens=2048)
    ttft_ref, _ = _run_mock_engine(arrival, prompt, output, model=ATTENTION, max_num_batched_tokens=2048)
    ttft = np.array(table.first_token) - np.array(arrival)
    assert float(np.mean(ttft)) == pytest.approx(float(np.mean(ttft_ref)), rel=0.10)
    assert float(np.percentile(ttft, 95)) == pytest.approx(float(np.percentile(ttft_ref, 95)), rel=0.10)
