"""``llmscale engine``: run the mock GPU engine (speaks vLLM's OpenAI API and metrics)."""

from __future__ import annotations

import argparse
import asyncio
import logging

__all__ = ["add_arguments", "main"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the engine's flags (named and defaulted as vLLM's ``vllm serve`` flags where they exist)."""
    from llmscale.model import GPU_PRESETS, MODEL_PRESETS

    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="port to listen on (default 8000, as vLLM)")
    parser.add_argument(
        "--model", required=True, choices=sorted(MODEL_PRESETS), help="model preset to simulate"
    )
    parser.add_argument("--gpu", required=True, choices=sorted(GPU_PRESETS), help="GPU preset to simulate")
    parser.add_argument("--gpus", type=int, default=1, help="GPUs per replica, tensor parallel (default 1)")
    parser.add_argument(
        "--served-model-name", default=None, help="model name clients send (default: --model)"
    )
    parser.add_argument(
        "--cold-start-seconds",
        type=float,
        default=0.0,
        help="engine seconds before the server listens (weights load, graph capture); default 0",
    )
    parser.add_argument(
        "--time-scale",
        type=float,
        default=1.0,
        help="engine seconds per wall second: 10 runs 10× faster than real time (default 1)",
    )
    parser.add_argument(
        "--max-num-seqs",
        type=int,
        default=None,
        help="most running requests (default as vLLM: 1024 on H100/H200/B200, 256 on A100/L40S)",
    )
    parser.add_argument(
        "--max-num-batched-tokens",
        type=int,
        default=None,
        help="token budget per step with chunked prefill (default as vLLM: 8192 on H100/H200/B200, 2048 on A100/L40S)",
    )
    parser.add_argument(
        "--max-model-len",
        type=int,
        default=None,
        help="context limit in tokens (default: the model's, capped to the KV cache)",
    )
    parser.add_argument(
        "--gpu-memory-utilization",
        type=float,
        default=0.9,
        help="share of GPU memory for weights and KV cache (vLLM default 0.9)",
    )
    parser.add_argument(
        "--num-gpu-blocks-override",
        type=int,
        default=None,
        help="fix the KV cache at this many 16-token blocks (as vLLM's flag; small values force preemption)",
    )
    parser.add_argument(
        "--dtype",
        dest="weight_dtype",
        default="bf16",
        choices=["bf16", "fp16", "fp8"],
        help="weight storage type (default bf16)",
    )
    parser.add_argument(
        "--kv-cache-dtype",
        default="bf16",
        choices=["bf16", "fp16", "fp8"],
        help="KV-cache storage type (default bf16)",
    )
    parser.add_argument(
        "--metrics-names",
        choices=["current", "legacy"],
        default="current",
        help="vLLM metric names: current (kv_cache_usage_perc, inter_token_latency_seconds) or legacy "
        "(gpu_cache_usage_perc, time_per_output_token_seconds)",
    )
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])


def main(args: argparse.Namespace) -> int:
    """Run the engine until SIGINT/SIGTERM; return the exit status: 0 after a clean stop, 2 on a
    configuration it refuses (unknown preset, a model that does not fit, inconsistent limits), 1
    when it cannot listen on ``--host``/``--port``."""
    from llmscale.engine.main import EngineSettings, serve

    logging.basicConfig(
        level=getattr(logging, args.log_level.upper()),
        format="%(levelname)s %(asctime)s [%(name)s] %(message)s",
        datefmt="%m-%d %H:%M:%S",
    )
    settings = EngineSettings(
        model=args.model,
        gpu=args.gpu,
        host=args.host,
        port=args.port,
        gpus=args.gpus,
        served_model_name=args.served_model_name,
        cold_start_s=args.cold_start_seconds,
        time_scale=args.time_scale,
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        max_model_len=args.max_model_len,
        gpu_memory_utilization=args.gpu_memory_utilization,
        num_gpu_blocks_override=args.num_gpu_blocks_override,
        weight_dtype=args.weight_dtype,
        kv_cache_dtype=args.kv_cache_dtype,
        metrics_names=args.metrics_names,
    )
    try:
        asyncio.run(serve(settings))
    except (KeyError, ValueError) as exc:
        # str(KeyError) wraps its message in quotes; the message itself is what the user needs.
        reason = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        logging.getLogger("llmscale.engine").error("Refused to start engine: %s", reason)
        return 2
    except (OSError, OverflowError) as exc:
        # A taken or impossible --host/--port: one line, as vLLM's own bind failure, not a traceback.
        logging.getLogger("llmscale.engine").error(
            "Refused to start engine: could not listen on %s:%s: %s", args.host, args.port, exc
        )
        return 1
    return 0
