"""Read and validate a batch input file: the OpenAI batch file format.

One JSON object a line (JSON Lines), as the OpenAI Batch API and vLLM's
``vllm.entrypoints.openai.run_batch`` (``BatchRequestInput`` in ``vllm/entrypoints/openai/protocol.py``)
read it::

    {"custom_id": "req-1", "method": "POST", "url": "/v1/chat/completions",
     "body": {"model": "chat", "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 64}}

The whole file is checked before anything is sent, and every problem names its line: a line that
is not a JSON object, a missing or empty ``custom_id``, a ``custom_id`` seen before (naming both
lines), a ``method`` other than ``POST``, a ``url`` other than the three endpoints, a ``body`` that is
not an object, or ``"stream": true`` (a batch result is one response, not a stream). Blank lines are
skipped; other keys are allowed, as vLLM allows them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["ENDPOINTS", "BatchInputError", "BatchRequest", "parse_requests", "read_requests", "select_shard"]

#: Endpoints a batch request may name (those of the OpenAI Batch API that vLLM serves).
ENDPOINTS = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings")


class BatchInputError(ValueError):
    """The input cannot be used; ``str()`` is ``source:line: message`` (line 0: the whole file)."""

    def __init__(self, source: str, line: int, message: str) -> None:
        self.source, self.line, self.message = source, line, message
        super().__init__(f"{source}:{line}: {message}" if line else f"{source}: {message}")


@dataclass(frozen=True, slots=True)
class BatchRequest:
    """One request of the input.

    Attributes:
        line: 1-based line number in the input file.
        custom_id: the caller's key; the result line carries it.
        url: the endpoint path (one of :data:`ENDPOINTS`).
        body: the request body, sent as JSON unchanged.
    """

    line: int
    custom_id: str
    url: str
    body: dict[str, Any]


def _request(obj: Any, line: int, source: str) -> BatchRequest:
    if not isinstance(obj, dict):
        raise BatchInputError(source, line, f"a request must be a JSON object, not {type(obj).__name__}")
    custom_id = obj.get("custom_id")
    if not isinstance(custom_id, str) or not custom_id:
        raise BatchInputError(source, line, "custom_id must be a non-empty string")
    method = obj.get("method")
    if method != "POST":
        raise BatchInputError(source, line, f"method must be POST, not {method!r} (custom_id {custom_id!r})")
    url = obj.get("url")
    if url not in ENDPOINTS:
        raise BatchInputError(
            source, line, f"url must be one of {', '.join(ENDPOINTS)}, not {url!r} (custom_id {custom_id!r})"
        )
    body = obj.get("body")
    if not isinstance(body, dict):
        raise BatchInputError(source, line, f"body must be a JSON object (custom_id {custom_id!r})")
    if body.get("stream"):
        raise BatchInputError(source, line, f"stream is not supported in a batch (custom_id {custom_id!r})")
    return BatchRequest(line=line, custom_id=custom_id, url=url, body=body)


def parse_requests(lines: Iterable[str], source: str = "<input>") -> list[BatchRequest]:
    """Parse and validate the lines of a batch input file (module docstring: the rules).

    Args:
        lines: the file's lines (with or without their newlines).
        source: the file's name, for error messages.

    Returns:
        The requests in file order.

    Raises:
        BatchInputError: the first problem, naming its line.
    """
    requests: list[BatchRequest] = []
    first_line: dict[str, int] = {}
    for number, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as exc:
            raise BatchInputError(source, number, f"not JSON: {exc.msg} at column {exc.colno}") from exc
        request = _request(obj, number, source)
        seen = first_line.get(request.custom_id)
        if seen is not None:
            raise BatchInputError(
                source, number, f"duplicate custom_id {request.custom_id!r} (first on line {seen})"
            )
        first_line[request.custom_id] = number
        requests.append(request)
    return requests


def read_requests(path: Path) -> list[BatchRequest]:
    """Read and validate the batch input file at ``path`` (UTF-8).

    Raises:
        BatchInputError: the file cannot be read or decoded, or a line is invalid.
    """
    try:
        with path.open(encoding="utf-8") as handle:
            return parse_requests(handle, str(path))
    except UnicodeDecodeError as exc:
        raise BatchInputError(str(path), 0, f"not UTF-8: {exc.reason} at byte {exc.start}") from exc
    except OSError as exc:
        raise BatchInputError(str(path), 0, f"cannot read: {exc.strerror or exc}") from exc


def select_shard(requests: Sequence[BatchRequest], index: int, count: int) -> list[BatchRequest]:
    """Return shard ``index`` of ``count``: the requests whose position in the file is ``index``
    modulo ``count`` (an Indexed Job's pod ``JOB_COMPLETION_INDEX`` runs shard ``index``).

    Raises:
        ValueError: ``count < 1`` or ``index`` outside ``[0, count)``.
    """
    if count < 1 or not 0 <= index < count:
        raise ValueError(f"shard index {index} is not in [0, {count})")
    return [r for i, r in enumerate(requests) if i % count == index]
