"""The Diagnosis condition from snapshots of each signature, with the remedy the model computes.

The deployment is the benchmark's: Llama-3.1-70B bf16 on 4 × H100-SXM, vLLM's default 8,192-token
step budget, SLO p95 TTFT 2 s and ITL 100 ms. Compute per token: 2 × 70.6 G FLOPs over
4 × 989.4 T × 0.5 = 71.3 µs, so a full 8,192-token step takes ~584 ms and 100 ms allows 1,402
tokens (1,280 on a multiple of 256).
"""

from __future__ import annotations

import re

import pytest

from llmscale.api import EngineSpec, LLMDeploymentSpec, ModelSpec, ReplicasSpec, ResourcesSpec
from llmscale.policy import PolicyMemory, PoolState, Reason, decide
from llmscale.signals.snapshot import SignalSnapshot, WorkloadMix

NOW = 1_717_416_000.0

PREFILL_HEAVY = WorkloadMix(
    request_rate=40.0,
    prompt_tokens_rate=112_560.0,
    prompt_tokens_mean=2814.0,
    prompt_tokens_p95=5000.0,
    generation_tokens_mean=38.0,
    generation_tokens_p95=98.0,
    prefix_cache_hit_rate=0.0,
)


def spec(args: list[str] | None = None, kv_dtype: str = "bf16") -> LLMDeploymentSpec:
    return LLMDeploymentSpec(
        model=ModelSpec(name="chat", preset="llama-3.1-70b", kv_cache_dtype=kv_dtype),  # type: ignore[arg-type]
        resources=ResourcesSpec(gpus_per_replica=4, gpu_type="h100-sxm"),
        replicas=ReplicasSpec(min=1, max=100),
        engine=EngineSpec(args=args or []),
    )


def diagnose(
    *,
    itl: float | None = 0.04,
    ttft: float | None = 0.5,
    kv: float = 0.2,
    queue: float = 0.0,
    preempt: float = 0.0,
    mix: WorkloadMix = PREFILL_HEAVY,
    the_spec: LLMDeploymentSpec | None = None,
    ready: int = 20,
) -> tuple[str, Reason, str]:
    snap = SignalSnapshot(
        NOW,
        queue_depth=queue,
        running_requests=2.0 * ready,
        kv_cache_utilization=kv,
        preemption_rate=preempt,
        ttft_p95_s=ttft,
        itl_p95_s=itl,
        replicas_reporting=ready,
        workload=mix,
    )
    state = PoolState(interactive_replicas=ready, interactive_ready=ready)
    d = decide(the_spec or spec(), [snap], state, PolicyMemory(since=NOW - 3600), NOW)
    return d.diagnosis.status, d.diagnosis.reason, d.diagnosis.message


def test_prefill_interference_names_the_chunk_budget() -> None:
    status, reason, message = diagnose(itl=0.135, kv=0.2, queue=0.0)
    assert (status, reason) == ("True", Reason.PrefillInterference)
    assert message.startswith("ITL p95 135 ms > SLO 100 ms with the KV cache far from full and a short queue: ")
    assert "a 8,192-token chunk step takes ~584 ms > 100 ms: set --max-num-batched-tokens ≤ 1,280" in message


def test_prefill_interference_compares_the_replicas_needed_with_the_chunk_budget_to_those_without() -> None:
    _, _, message = diagnose(itl=0.135, kv=0.2, queue=0.0)
    # 2,814-token prompts in 1,280-token chunks: every chunk within 100 ms, so the ITL no longer
    # breaks; 40 requests/s then need fewer replicas than with 8,192-token steps.
    numbers = re.search(r"the SLO needs (\d+) replicas with it, (\d+) without", message)
    assert numbers is not None
    assert int(numbers[1]) < int(numbers[2])
    assert message.endswith("without, at 40.0 requests/s)")


def test_prefill_interference_with_short_chunks_asks_for_replicas() -> None:
    # --max-num-batched-tokens 1024: a full step (~73 ms) already fits: the chunks come too often.
    _, reason, message = diagnose(itl=0.12, the_spec=spec(["--max-num-batched-tokens", "1024"]))
    assert reason == Reason.PrefillInterference
    assert "a full 1,024-token chunk step takes ~73 ms ≤ 100 ms" in message
    assert "more replicas" in message


def test_preemption_pressure_names_an_fp8_kv_cache() -> None:
    status, reason, message = diagnose(itl=0.3, kv=0.96, preempt=0.4)
    assert (status, reason) == ("True", Reason.PreemptionPressure)
    # 4 × 80 GiB × 0.9 − 141 GB of weights leaves 513,088 tokens at 320 KiB per token; fp8 twice that.
    assert "KV cache 96% full and 0.40 preemptions/s: --kv-cache-dtype fp8 holds 1,026,176 tokens instead of 513,088" in message


def test_preemption_pressure_names_a_max_num_seqs_that_fits() -> None:
    _, _, message = diagnose(itl=0.3, kv=0.96, preempt=0.4)
    assert "--max-num-seqs ≤ " in message


def test_preemption_pressure_on_an_fp8_cache_offers_only_the_batch_size() -> None:
    _, _, fp8 = diagnose(itl=0.3, kv=0.96, preempt=0.4, the_spec=spec(kv_dtype="fp8"))
    assert "--kv-cache-dtype" not in fp8 and "--max-num-seqs ≤ " in fp8


def test_queueing_names_the_replicas_the_load_needs() -> None:
    status, reason, message = diagnose(ttft=4.0, queue=140.0, ready=4)
    assert (status, reason) == ("True", Reason.Queueing)
    assert message.startswith("140 requests wait on 4 ready replicas, beyond 3 per replica: plain queueing, ")
    assert "the load of 40.0 requests/s needs " in message


def test_a_breach_without_a_signature_is_named() -> None:
    status, reason, message = diagnose(ttft=7.1, itl=0.04, kv=0.2, queue=0.0)
    assert (status, reason) == ("True", Reason.LatencyAboveSLO)
    assert message.startswith("TTFT p95 7.10 s > SLO 2.00 s with KV cache 20%, queue 0.0")


def test_within_the_slo() -> None:
    assert diagnose()[:2] == ("False", Reason.WithinSLO)


@pytest.mark.parametrize("p95s", [(None, None)], ids=["no-latency-in-the-window"])
def test_nothing_to_judge_is_unknown(p95s: tuple[None, None]) -> None:
    assert diagnose(itl=p95s[0], ttft=p95s[1])[:2] == ("Unknown", Reason.DiagnosisUnknown)
    stale = SignalSnapshot(NOW - 600, queue_depth=0.0, kv_cache_utilization=0.1, preemption_rate=0.0)
    d = decide(spec(), [stale], PoolState(interactive_replicas=2, interactive_ready=2), PolicyMemory(), NOW)
    assert (d.diagnosis.status, d.diagnosis.reason) == ("Unknown", Reason.DiagnosisUnknown)
