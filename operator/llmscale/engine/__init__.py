"""The mock GPU engine: an HTTP server that vLLM's clients, Prometheus and the operator cannot tell
from a vLLM OpenAI server, driven in real time by the performance model (:mod:`llmscale.model`).

* :mod:`~llmscale.engine.scheduler` — pure vLLM V1-style scheduler (time as an argument).
* :mod:`~llmscale.engine.runtime` — the engine loop that runs it against the event loop's clock.
* :mod:`~llmscale.engine.server` — the aiohttp OpenAI API, ``/health``, ``/version``, ``/metrics``.
* :mod:`~llmscale.engine.metrics` — vLLM V1 Prometheus series.
* :mod:`~llmscale.engine.tokenizer` — deterministic token counting and filler output.
* :mod:`~llmscale.engine.main` — sizing from the model, cold start, serving (``llmscale engine``).
"""

from llmscale.engine.main import EngineSettings, build_core, serve
from llmscale.engine.scheduler import (
    BLOCK_SIZE_TOKENS,
    EngineRequest,
    FinishedRequest,
    Scheduler,
    SchedulerConfig,
    StepCostModel,
    StepResult,
    TokenEvent,
)

__all__ = [
    "BLOCK_SIZE_TOKENS",
    "EngineRequest",
    "EngineSettings",
    "FinishedRequest",
    "Scheduler",
    "SchedulerConfig",
    "StepCostModel",
    "StepResult",
    "TokenEvent",
    "build_core",
    "serve",
]
