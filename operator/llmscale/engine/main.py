"""Start the mock engine: size it from the performance model, wait out the cold start, serve.

As vLLM does, the HTTP server binds only after the weights are "loaded": for
``cold_start_s / time_scale`` wall seconds the port refuses connections, so readiness probes,
Prometheus and load generators see a starting replica exactly as they would see a real one.

On SIGTERM (or SIGINT) the engine drains like a graceful server: it refuses new requests with 503,
fails ``/health`` so that readiness drops, lets every request in flight run to its end, then
exits. A second signal exits at once; so does the kubelet's SIGKILL at the end of the pod's grace
period. (vLLM v0.11, the pinned image, aborts in-flight requests on SIGTERM; its
``--shutdown-timeout`` came later, vLLM PR #36666. The pod template's preStop hook waits for the
running requests to reach 0 before SIGTERM is sent, for every engine: see
:mod:`llmscale.controller.manifests.podtemplate`.)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from dataclasses import dataclass

from aiohttp import web

from llmscale.engine.metrics import EngineMetrics, MetricNames
from llmscale.engine.runtime import EngineCore
from llmscale.engine.scheduler import BLOCK_SIZE_TOKENS, Scheduler, SchedulerConfig
from llmscale.engine.server import (
    VLLM_COMPAT_VERSION,
    EngineInfo,
    Traffic,
    build_app,
    start_engine_task,
    stop_task,
)
from llmscale.model import GPU_PRESETS, MODEL_PRESETS, ReplicaModel
from llmscale.model.vllm_defaults import vllm_batch_defaults

__all__ = ["MAX_POSITION_EMBEDDINGS", "EngineSettings", "build_core", "serve", "vllm_batch_defaults"]

log = logging.getLogger("llmscale.engine")

#: ``max_position_embeddings`` of each model preset's Hugging Face ``config.json`` (the context
#: length vLLM uses when ``--max-model-len`` is not given): Llama 3.1 131072; Mistral-7B-v0.3,
#: Qwen2.5-7B/72B-Instruct and Mixtral-8x7B 32768.
MAX_POSITION_EMBEDDINGS: dict[str, int] = {
    "llama-3.1-8b": 131072,
    "llama-3.1-70b": 131072,
    "mistral-7b": 32768,
    "qwen2.5-7b": 32768,
    "qwen2.5-72b": 32768,
    "mixtral-8x7b": 32768,
}


@dataclass(frozen=True, slots=True)
class EngineSettings:
    """Command-line settings of ``llmscale engine`` (names as vLLM's engine arguments).

    Attributes:
        host / port: where to listen (port 0 picks a free one; tests read it back).
        model / gpu / gpus: the performance-model presets and tensor-parallel size.
        served_model_name: the model name clients send; defaults to ``model``.
        cold_start_s: engine seconds before the server binds (weights load, CUDA graphs).
        time_scale: engine seconds per wall second; 10 runs ten times faster than real time.
        max_num_seqs / max_num_batched_tokens: scheduler limits; ``None`` takes vLLM's default for
            the GPU (:func:`vllm_batch_defaults`).
        max_model_len: context limit, tokens; default the model's ``max_position_embeddings``,
            lowered to what the KV cache holds.
        gpu_memory_utilization: share of GPU memory for weights + KV cache (vLLM's 0.9).
        num_gpu_blocks_override: fix the KV cache at this many 16-token blocks (vLLM's flag of the
            same name; tests use it to fill the cache quickly).
        weight_dtype / kv_cache_dtype: storage types (``bf16``, ``fp8``).
        metrics_names: ``current`` or ``legacy`` metric names.
    """

    model: str
    gpu: str
    host: str = "127.0.0.1"
    port: int = 8000
    gpus: int = 1
    served_model_name: str | None = None
    cold_start_s: float = 0.0
    time_scale: float = 1.0
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    max_model_len: int | None = None
    gpu_memory_utilization: float = 0.9
    num_gpu_blocks_override: int | None = None
    weight_dtype: str = "bf16"
    kv_cache_dtype: str = "bf16"
    metrics_names: MetricNames = "current"

    @property
    def name(self) -> str:
        """The served model name."""
        return self.served_model_name or self.model


def build_core(settings: EngineSettings) -> tuple[EngineCore, EngineInfo, ReplicaModel]:
    """Size the engine from the performance model; must be called inside a running event loop.

    Raises:
        KeyError: unknown model or GPU preset.
        ValueError: the model does not fit, or the limits are inconsistent (as vLLM refuses to start).
    """
    if settings.model not in MODEL_PRESETS:
        raise KeyError(f"Unknown model preset {settings.model!r}; known: {', '.join(sorted(MODEL_PRESETS))}")
    if settings.gpu not in GPU_PRESETS:
        raise KeyError(f"Unknown GPU preset {settings.gpu!r}; known: {', '.join(sorted(GPU_PRESETS))}")
    rm = ReplicaModel(
        arch=MODEL_PRESETS[settings.model],
        gpu=GPU_PRESETS[settings.gpu],
        gpus=settings.gpus,
        weight_dtype=settings.weight_dtype,
        kv_dtype=settings.kv_cache_dtype,
        gpu_memory_utilization=settings.gpu_memory_utilization,
    )
    blocks = settings.num_gpu_blocks_override or rm.kv_cache_capacity_blocks
    if blocks <= 0:
        raise ValueError(
            f"No available memory for the cache blocks: {settings.model} weights "
            f"({rm.weight_bytes / 2**30:.1f} GiB) fill {settings.gpus}× {settings.gpu}; add GPUs or use fp8"
        )
    capacity = blocks * BLOCK_SIZE_TOKENS
    max_len = settings.max_model_len
    if max_len is None:
        max_len = MAX_POSITION_EMBEDDINGS.get(settings.model, 8192)
        if max_len > capacity:
            log.warning(
                "Lowered max_model_len of %s from %d to %d tokens: the KV cache holds no more",
                settings.model,
                max_len,
                capacity,
            )
            max_len = capacity
    default_seqs, default_tokens = vllm_batch_defaults(rm.gpu)
    config = SchedulerConfig(
        num_gpu_blocks=blocks,
        max_num_seqs=settings.max_num_seqs or default_seqs,
        max_num_batched_tokens=settings.max_num_batched_tokens or default_tokens,
        max_model_len=max_len,
    )
    cache_info = {
        "block_size": str(BLOCK_SIZE_TOKENS),
        "cache_dtype": "auto"
        if settings.kv_cache_dtype == settings.weight_dtype
        else settings.kv_cache_dtype,
        "enable_prefix_caching": "True",
        "gpu_memory_utilization": str(settings.gpu_memory_utilization),
        "num_cpu_blocks": "0",
        "num_gpu_blocks": str(blocks),
        "num_gpu_blocks_override": str(settings.num_gpu_blocks_override),
    }
    metrics = EngineMetrics(settings.name, max_len, cache_info, settings.metrics_names)
    core = EngineCore(Scheduler(config, rm), metrics, settings.time_scale)
    info = EngineInfo(settings.name, settings.model, max_len, int(time.time()))
    return core, info, rm


async def serve(settings: EngineSettings, stop: asyncio.Event | None = None) -> None:
    """Run the mock engine until ``stop`` is set, or until it has drained after SIGTERM/SIGINT.

    ``stop`` set by the caller stops at once, whatever is in flight. The first SIGTERM or SIGINT
    starts a drain (module docstring); a second one stops at once.

    Raises:
        KeyError / ValueError: as :func:`build_core`; OSError: the port is taken.
    """
    loop = asyncio.get_running_loop()
    stop = stop or asyncio.Event()
    drain = asyncio.Event()

    def on_signal() -> None:
        if drain.is_set():
            stop.set()
        drain.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, on_signal)

    core, info, rm = build_core(settings)
    cfg = core.scheduler.config
    log.info(
        "Started mock engine for %s (model %s on %d× %s, vLLM %s API), time scale %g",
        info.served_model_name,
        settings.model,
        settings.gpus,
        settings.gpu,
        VLLM_COMPAT_VERSION,
        settings.time_scale,
    )
    log.info(
        "Loading weights of %s: %.2f GiB; KV cache %d blocks of %d tokens (%d tokens, %.2f GiB); "
        "max_model_len %d, max_num_seqs %d, max_num_batched_tokens %d",
        settings.model,
        rm.weight_bytes / 2**30,
        cfg.num_gpu_blocks,
        cfg.block_size,
        cfg.num_gpu_blocks * cfg.block_size,
        cfg.num_gpu_blocks * cfg.block_size * rm.kv_bytes_per_token / 2**30,
        cfg.max_model_len,
        cfg.max_num_seqs,
        cfg.max_num_batched_tokens,
    )
    log.info(
        "Maximum concurrency for %d tokens per request: %.2fx",
        cfg.max_model_len,
        cfg.num_gpu_blocks * cfg.block_size / cfg.max_model_len,
    )
    wall_cold = settings.cold_start_s / settings.time_scale
    if wall_cold > 0:
        # Not listening yet: connections are refused. A signal now has nothing to drain.
        await _first(stop, drain, timeout=wall_cold)
        if stop.is_set() or drain.is_set():
            return
        log.info("Loaded model %s in %.1f s (engine time)", settings.model, settings.cold_start_s)

    # The core's clock starts when serving starts: engine time 0 is the first moment requests can come.
    core.restart_clock()
    task = await start_engine_task(core)
    traffic = Traffic()
    # The drain below waits for every request before the cleanup, so the cleanup's own wait for
    # handlers (aiohttp's shutdown_timeout, 60 s by default) only matters for a forced stop, which
    # must not wait: 1 s.
    runner = web.AppRunner(build_app(core, info, traffic), handler_cancellation=True, access_log=None,
                           shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, settings.host, settings.port)
    try:
        await site.start()
        for sock in runner.addresses:
            log.info(
                "Started vLLM-compatible server for %s on http://%s:%s", info.served_model_name, *sock[:2]
            )
        log.info("Completed application startup: serving %s", info.served_model_name)
        await _first(stop, drain)
        if drain.is_set() and not stop.is_set():
            traffic.drain()
            log.info("Draining mock engine for %s: refused new requests, %d in flight",
                     info.served_model_name, traffic.in_flight)
            idle = asyncio.ensure_future(traffic.wait_idle())
            halt = asyncio.ensure_future(stop.wait())
            await asyncio.wait([idle, halt], return_when=asyncio.FIRST_COMPLETED)
            for pending in (idle, halt):
                pending.cancel()
            if stop.is_set():
                log.warning("Stopped draining mock engine for %s with %d requests in flight",
                            info.served_model_name, traffic.in_flight)
            else:
                log.info("Drained mock engine for %s: no request in flight", info.served_model_name)
        log.info("Stopped mock engine for %s", info.served_model_name)
    finally:
        await runner.cleanup()
        await stop_task(task)


async def _first(*events: asyncio.Event, timeout: float | None = None) -> None:
    """Return when any of ``events`` is set, or after ``timeout`` seconds."""
    waiters = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waiters:
            w.cancel()
