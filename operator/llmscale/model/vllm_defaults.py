"""vLLM's defaults that the mock engine and the simulator share: the scheduler limits vLLM's OpenAI
server picks for a GPU, and the bucket boundaries of its latency histograms.

Keeping them in one pure module means the simulator scores a minute with exactly the histogram the
mock engine (and vLLM) exports and the operator's ``histogram_quantile`` reads.

Pure module: constants and arithmetic only.
"""

from __future__ import annotations

from llmscale.model.presets import GPU

__all__ = ["ITL_BUCKETS_S", "PREFIX_CACHING_DEFAULT", "TTFT_BUCKETS_S", "vllm_batch_defaults"]

#: ``vllm:time_to_first_token_seconds`` bucket upper bounds, seconds (vLLM 0.11,
#: ``vllm/v1/metrics/loggers.py``, ``PrometheusStatLogger``); a ``+Inf`` bucket follows.
TTFT_BUCKETS_S: tuple[float, ...] = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
)

#: ``vllm:inter_token_latency_seconds`` (legacy ``vllm:time_per_output_token_seconds``) bucket upper
#: bounds, seconds (same source); a ``+Inf`` bucket follows. One observation per output token after
#: the first: the gap since the request's previous token.
ITL_BUCKETS_S: tuple[float, ...] = (
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)

#: vLLM V1 turns automatic prefix caching on by default (``--enable-prefix-caching``;
#: ``--no-enable-prefix-caching`` turns it off).
PREFIX_CACHING_DEFAULT = True


def vllm_batch_defaults(gpu: GPU) -> tuple[int, int]:
    """vLLM's OpenAI-server defaults ``(max_num_seqs, max_num_batched_tokens)`` for a GPU.

    From ``EngineArgs.get_batch_defaults`` in ``vllm/engine/arg_utils.py`` (vLLM 0.10–0.11): a GPU
    with at least 70 GiB of memory that is not an A100 (H100, H200, B200) gets 1024 sequences and
    8192 tokens per step; others (A100, L40S) 256 and 2048 ("large max_num_batched_tokens for
    A100 reduces throughput", vLLM PR #17885). ``max_num_seqs`` is then capped at
    ``max_num_batched_tokens``.
    """
    if gpu.memory_bytes >= 70 * 2**30 and "a100" not in gpu.name:
        seqs, tokens = 1024, 8192
    else:
        seqs, tokens = 256, 2048
    return min(seqs, tokens), tokens
