"""The mock engine's HTTP server: vLLM's OpenAI-compatible API on aiohttp.

Routes (as vLLM's ``vllm/entrypoints/openai/api_server.py``):

* ``POST /v1/completions`` and ``POST /v1/chat/completions`` — streaming (server-sent events,
  ``data: {json}\\n\\n`` chunks, an optional usage chunk when ``stream_options.include_usage`` is
  true, then ``data: [DONE]``) or one JSON body.
* ``GET /v1/models``, ``GET /health`` (200, empty body), ``GET /version``, ``GET /metrics``.

Draining (:class:`Traffic`): once :meth:`Traffic.drain` is called (``llmscale engine`` does it on
SIGTERM), new generation requests get 503 and ``/health`` answers 503 so that readiness drops,
while the requests already in flight run to their end (``[DONE]`` included); ``/metrics`` keeps
answering, so Prometheus and a preStop hook can watch the running requests fall to 0.

Errors use vLLM's body, ``{"error": {"message", "type", "param", "code"}}`` (``ErrorResponse`` in
``vllm/entrypoints/openai/engine/protocol.py``), so the ``openai`` client raises
``BadRequestError`` (400) and ``NotFoundError`` (404) as it does against vLLM.

Output length: ``max_tokens`` (or chat's ``max_completion_tokens``) tokens exactly, finish reason
``length``. Without it the mock's "model" emits EOS after :data:`DEFAULT_OUTPUT_TOKENS` tokens
(finish reason ``stop``; ``min_tokens`` raises that floor), or, with ``ignore_eos``, runs to the
context limit (``length``), as vLLM does.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from llmscale import __version__
from llmscale.engine.runtime import EngineCore, RequestHandle
from llmscale.engine.scheduler import FinishedRequest, TokenEvent
from llmscale.engine.tokenizer import chat_prompt_tokens, filler_text, prompt_tokens

__all__ = ["DEFAULT_OUTPUT_TOKENS", "VLLM_COMPAT_VERSION", "EngineInfo", "Traffic", "build_app"]

log = logging.getLogger("llmscale.engine")

#: Output tokens before the mock "model" emits EOS when a request sets no ``max_tokens``. A
#: chat reply of a few paragraphs; requests that need an exact length set ``max_tokens``.
DEFAULT_OUTPUT_TOKENS = 256

#: The vLLM release whose API and metric names the mock follows (reported by ``/version``).
VLLM_COMPAT_VERSION = "0.11.0"

ENGINE_KEY = web.AppKey("engine", EngineCore)


@dataclass(frozen=True, slots=True)
class EngineInfo:
    """What the HTTP layer needs to know about the engine.

    Attributes:
        served_model_name: the only model name requests may ask for.
        model_root: the model preset the engine simulates (``/v1/models`` ``root``).
        max_model_len: context limit, tokens.
        created: Unix time of start (``created`` of ``/v1/models``), seconds.
    """

    served_model_name: str
    model_root: str
    max_model_len: int
    created: int


INFO_KEY = web.AppKey("info", EngineInfo)


class Traffic:
    """The generation requests the server is answering, and whether it is draining.

    A request counts from the moment it is accepted until its response is fully written (the
    last SSE chunk and ``[DONE]`` of a stream), so :meth:`wait_idle` returning means no client
    is left waiting for a byte. Must be created inside the running event loop.
    """

    def __init__(self) -> None:
        self.in_flight = 0
        self.draining = False
        self._idle = asyncio.Event()
        self._idle.set()

    def drain(self) -> None:
        """Refuse new generation requests (503) and fail ``/health`` from now on."""
        self.draining = True

    def started(self) -> None:
        """Count one accepted request."""
        self.in_flight += 1
        self._idle.clear()

    def finished(self) -> None:
        """Count one request whose response is complete (or whose client went away)."""
        self.in_flight -= 1
        if self.in_flight == 0:
            self._idle.set()

    async def wait_idle(self) -> None:
        """Return once no generation request is in flight."""
        await self._idle.wait()


TRAFFIC_KEY = web.AppKey("traffic", Traffic)


class _RequestError(Exception):
    def __init__(self, status: int, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param


_ERROR_TYPES = {
    400: "BadRequestError",
    404: "NotFoundError",
    500: "InternalServerError",
    503: "ServiceUnavailableError",
}


def _error_response(status: int, message: str, param: str | None = None) -> web.Response:
    body = {
        "error": {
            "message": message,
            "type": _ERROR_TYPES.get(status, "BadRequestError"),
            "param": param,
            "code": status,
        }
    }
    return web.json_response(body, status=status)


@dataclass(frozen=True, slots=True)
class _Parsed:
    request_id: str
    prompt_tokens: int
    max_tokens: int
    finish_reason: str
    stream: bool
    include_usage: bool
    model: str


def _int_field(body: dict[str, Any], name: str) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise _RequestError(400, f"{name} must be an integer", name)
    return value


def _parse(body: Any, info: EngineInfo, chat: bool) -> _Parsed:
    if not isinstance(body, dict):
        raise _RequestError(400, "The request body must be a JSON object")
    model = body.get("model")
    if model is None:
        model = info.served_model_name
    if model != info.served_model_name:
        raise _RequestError(404, f"The model `{model}` does not exist.", "model")
    try:
        if chat:
            n_prompt = chat_prompt_tokens(body.get("messages"))  # type: ignore[arg-type]
        else:
            if "prompt" not in body:
                raise _RequestError(400, "Field required: prompt", "prompt")
            n_prompt = prompt_tokens(body["prompt"])
    except ValueError as exc:
        raise _RequestError(400, str(exc), "messages" if chat else "prompt") from exc
    if body.get("n", 1) not in (None, 1):
        raise _RequestError(400, "The mock engine supports only n=1", "n")
    limit = info.max_model_len
    if n_prompt >= limit:
        raise _RequestError(
            400,
            f"This model's maximum context length is {limit} tokens. However, your request has "
            f"{n_prompt} input tokens. Please reduce the length of the input messages.",
            "messages" if chat else "prompt",
        )
    max_tokens = _int_field(body, "max_completion_tokens") if chat else None
    if max_tokens is None:
        max_tokens = _int_field(body, "max_tokens")
    min_tokens = _int_field(body, "min_tokens") or 0
    if max_tokens is not None:
        if max_tokens < 1:
            raise _RequestError(400, f"max_tokens must be at least 1, got {max_tokens}.", "max_tokens")
        if n_prompt + max_tokens > limit:
            raise _RequestError(
                400,
                f"'max_tokens' or 'max_completion_tokens' is too large: {max_tokens}. This model's maximum "
                f"context length is {limit} tokens and your request has {n_prompt} input tokens "
                f"({max_tokens} > {limit} - {n_prompt}).",
                "max_tokens",
            )
        if min_tokens > max_tokens:
            raise _RequestError(
                400,
                f"min_tokens must be less than or equal to max_tokens={max_tokens}, got {min_tokens}.",
                "min_tokens",
            )
        n_out, reason = max_tokens, "length"
    elif body.get("ignore_eos"):
        n_out, reason = limit - n_prompt, "length"
    else:
        n_out = min(max(DEFAULT_OUTPUT_TOKENS, min_tokens), limit - n_prompt)
        reason = "stop" if n_out < limit - n_prompt else "length"
    stream = bool(body.get("stream", False))
    opts = body.get("stream_options") or {}
    if not isinstance(opts, dict):
        raise _RequestError(400, "stream_options must be an object", "stream_options")
    if opts and not stream:
        raise _RequestError(400, "Stream options can only be defined when `stream=True`.", "stream_options")
    prefix = "chatcmpl" if chat else "cmpl"
    return _Parsed(
        request_id=f"{prefix}-{uuid.uuid4().hex}",
        prompt_tokens=n_prompt,
        max_tokens=n_out,
        finish_reason=reason,
        stream=stream,
        include_usage=bool(opts.get("include_usage", False)),
        model=model,
    )


def _usage(prompt: int, completion: int) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt,
        "total_tokens": prompt + completion,
        "completion_tokens": completion,
        "prompt_tokens_details": None,
    }


def _sse(obj: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


async def _generate(request: web.Request, chat: bool) -> web.StreamResponse:
    traffic = request.app[TRAFFIC_KEY]
    if traffic.draining:
        return _error_response(503, "The server is shutting down and accepts no new requests")
    traffic.started()
    try:
        return await _accepted(request, chat)
    finally:
        traffic.finished()


async def _accepted(request: web.Request, chat: bool) -> web.StreamResponse:
    core = request.app[ENGINE_KEY]
    info = request.app[INFO_KEY]
    try:
        body = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        return _error_response(400, "The request body is not valid JSON")
    try:
        p = _parse(body, info, chat)
    except _RequestError as exc:
        return _error_response(exc.status, exc.message, exc.param)

    handle = core.submit(p.request_id, p.prompt_tokens, p.max_tokens, p.finish_reason)
    created = int(time.time())
    try:
        if p.stream:
            return await _stream(request, handle, p, created, chat)
        return await _complete(handle, p, created, chat)
    finally:
        if handle.finished is None:
            core.abort(p.request_id)


async def _next(handle: RequestHandle) -> TokenEvent | FinishedRequest:
    return await handle.events.get()


async def _complete(handle: RequestHandle, p: _Parsed, created: int, chat: bool) -> web.Response:
    while True:
        event = await _next(handle)
        if isinstance(event, FinishedRequest):
            break
    text = filler_text(0, event.output_tokens)
    if chat:
        choice: dict[str, Any] = {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": text,
                "refusal": None,
                "annotations": None,
                "audio": None,
                "function_call": None,
                "tool_calls": [],
                "reasoning_content": None,
            },
            "logprobs": None,
            "finish_reason": event.finish_reason,
            "stop_reason": None,
        }
        obj = "chat.completion"
    else:
        choice = {
            "index": 0,
            "text": text,
            "logprobs": None,
            "finish_reason": event.finish_reason,
            "stop_reason": None,
            "prompt_logprobs": None,
        }
        obj = "text_completion"
    return web.json_response(
        {
            "id": p.request_id,
            "object": obj,
            "created": created,
            "model": p.model,
            "choices": [choice],
            "usage": _usage(p.prompt_tokens, event.output_tokens),
            "system_fingerprint": None,
            "service_tier": None,
            "prompt_logprobs": None,
            "kv_transfer_params": None,
        }
    )


async def _stream(
    request: web.Request, handle: RequestHandle, p: _Parsed, created: int, chat: bool
) -> web.StreamResponse:
    resp = web.StreamResponse(
        headers={"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache"}
    )
    await resp.prepare(request)
    obj = "chat.completion.chunk" if chat else "text_completion"

    def chunk(choices: list[dict[str, Any]], usage: dict[str, Any] | None = None) -> bytes:
        return _sse(
            {
                "id": p.request_id,
                "object": obj,
                "created": created,
                "model": p.model,
                "choices": choices,
                "usage": usage,
            }
        )

    if chat:  # vLLM's first chat chunk announces the role
        await resp.write(
            chunk(
                [
                    {
                        "index": 0,
                        "delta": {"role": "assistant", "content": ""},
                        "logprobs": None,
                        "finish_reason": None,
                    }
                ]
            )
        )
    sent = 0
    finished: FinishedRequest | None = None
    while finished is None:
        event = await _next(handle)
        # Deliver every token already sampled in one chunk, as vLLM's output processor merges
        # deltas when the client reads slower than the engine steps.
        tokens = 0
        while True:
            if isinstance(event, FinishedRequest):
                finished = event
                break
            tokens += 1
            if handle.events.empty():
                break
            event = handle.events.get_nowait()
        reason = finished.finish_reason if finished is not None else None
        text = filler_text(sent, tokens)
        sent += tokens
        if chat:
            choice: dict[str, Any] = {
                "index": 0,
                "delta": {"content": text},
                "logprobs": None,
                "finish_reason": reason,
                "stop_reason": None,
            }
        else:
            choice = {
                "index": 0,
                "text": text,
                "logprobs": None,
                "finish_reason": reason,
                "stop_reason": None,
            }
        await resp.write(chunk([choice]))
    if p.include_usage:
        await resp.write(chunk([], _usage(p.prompt_tokens, sent)))
    await resp.write(b"data: [DONE]\n\n")
    await resp.write_eof()
    return resp


async def completions(request: web.Request) -> web.StreamResponse:
    """``POST /v1/completions``."""
    return await _generate(request, chat=False)


async def chat_completions(request: web.Request) -> web.StreamResponse:
    """``POST /v1/chat/completions``."""
    return await _generate(request, chat=True)


async def models(request: web.Request) -> web.Response:
    """``GET /v1/models``: the served model, shaped as vLLM's ``ModelList``."""
    info = request.app[INFO_KEY]
    card = {
        "id": info.served_model_name,
        "object": "model",
        "created": info.created,
        "owned_by": "vllm",
        "root": info.model_root,
        "parent": None,
        "max_model_len": info.max_model_len,
        "permission": [
            {
                "id": f"modelperm-{uuid.uuid4().hex}",
                "object": "model_permission",
                "created": info.created,
                "allow_create_engine": False,
                "allow_sampling": True,
                "allow_logprobs": True,
                "allow_search_indices": False,
                "allow_view": True,
                "allow_fine_tuning": False,
                "organization": "*",
                "group": None,
                "is_blocking": False,
            }
        ],
    }
    return web.json_response({"object": "list", "data": [card]})


async def health(request: web.Request) -> web.Response:
    """``GET /health``: 200 with an empty body once serving (the server only listens then); 503
    while draining, so that the readiness probe takes the pod out of its Service."""
    return web.Response(status=503 if request.app[TRAFFIC_KEY].draining else 200)


async def version(_: web.Request) -> web.Response:
    """``GET /version``: the vLLM release the mock follows, plus llmscale's own version."""
    return web.json_response({"version": VLLM_COMPAT_VERSION, "llmscale_mock": __version__})


async def metrics(request: web.Request) -> web.Response:
    """``GET /metrics``: Prometheus text exposition."""
    core = request.app[ENGINE_KEY]
    return web.Response(body=core.metrics.exposition(), headers={"Content-Type": CONTENT_TYPE_LATEST})


def build_app(core: EngineCore, info: EngineInfo, traffic: Traffic | None = None) -> web.Application:
    """Return the aiohttp application serving ``core``; the caller runs ``core.run()`` alongside
    and drains through ``traffic`` (a new one when ``None``; must be called in the event loop)."""
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app[ENGINE_KEY] = core
    app[INFO_KEY] = info
    app[TRAFFIC_KEY] = traffic if traffic is not None else Traffic()
    app.router.add_post("/v1/completions", completions)
    app.router.add_post("/v1/chat/completions", chat_completions)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/health", health)
    app.router.add_get("/version", version)
    app.router.add_get("/metrics", metrics)
    return app


async def start_engine_task(core: EngineCore) -> asyncio.Task[None]:
    """Start ``core.run()`` as a task (cancel it to stop the engine)."""
    return asyncio.get_running_loop().create_task(core.run(), name="llmscale-engine-core")


async def stop_task(task: asyncio.Task[None]) -> None:
    """Cancel ``task`` and wait for it."""
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
