"""The size of a batch input, as the annotations of its Job (``llmscale batch size``).

The operator sizes the batch pool from three annotations on the Job (:mod:`llmscale.policy.batch.jobs`):
requests, prompt tokens and output tokens. This module counts them from the input file:

- requests: the lines (after validation);
- prompt tokens: estimated as the mock engine counts them (:mod:`llmscale.engine.tokenizer`: one
  token per 4 bytes of UTF-8, exact for token-id prompts, plus the chat template's tokens), since a
  real tokenizer is not at hand; about right for English text;
- output tokens: each request's ``max_completion_tokens`` or ``max_tokens``, else
  ``default_output_tokens`` (an upper bound: generation stops earlier at an end-of-sequence);
  0 for embeddings.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from llmscale.batch.requests import BatchRequest
from llmscale.engine.tokenizer import chat_prompt_tokens, prompt_tokens
from llmscale.policy.batch.jobs import ANNOTATION_INPUT_TOKENS, ANNOTATION_OUTPUT_TOKENS, ANNOTATION_REQUESTS

__all__ = ["DEFAULT_OUTPUT_TOKENS", "BatchSize", "batch_size"]

#: Output tokens assumed for a request that sets no ``max_tokens``: the mock engine's default
#: (``llmscale.engine.server.DEFAULT_OUTPUT_TOKENS``). vLLM's own default is the rest of the context,
#: so set ``max_tokens`` in the requests for an honest bound.
DEFAULT_OUTPUT_TOKENS = 256


@dataclass(frozen=True, slots=True)
class BatchSize:
    """Requests, prompt tokens and output tokens of an input (or one shard of it)."""

    requests: int
    input_tokens: int
    output_tokens: int

    def annotations(self) -> dict[str, str]:
        """The Job annotations that declare this size."""
        return {
            ANNOTATION_REQUESTS: str(self.requests),
            ANNOTATION_INPUT_TOKENS: str(self.input_tokens),
            ANNOTATION_OUTPUT_TOKENS: str(max(self.output_tokens, 1)),
        }


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _prompt(request: BatchRequest) -> int:
    body = request.body
    try:
        if request.url == "/v1/chat/completions":
            return chat_prompt_tokens(body.get("messages"))  # type: ignore[arg-type]
        return prompt_tokens(body.get("prompt", body.get("input", "")))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return 0  # the server will answer 400; the request costs (almost) nothing


def batch_size(
    requests: Sequence[BatchRequest], default_output_tokens: int = DEFAULT_OUTPUT_TOKENS
) -> BatchSize:
    """Count ``requests`` (module docstring: how each figure is estimated)."""
    prompt = output = 0
    for request in requests:
        prompt += _prompt(request)
        if request.url == "/v1/embeddings":
            continue
        body = request.body
        limit = _int(body.get("max_completion_tokens")) or _int(body.get("max_tokens"))
        output += limit if limit is not None else default_output_tokens
    return BatchSize(len(requests), prompt, output)
