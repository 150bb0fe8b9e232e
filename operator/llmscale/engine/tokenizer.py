"""The mock engine's tokenizer: deterministic token counts for prompts, filler text for outputs.

The mock has no vocabulary, so it counts instead of encoding:

* **Text**: one token per 4 bytes of UTF-8, rounded up (``ceil(len(utf8) / 4)``; an empty string is
  0 tokens). English BPE vocabularies average about 4 characters per token (OpenAI's tokenizer
  guide: "one token generally corresponds to ~4 characters of text for common English text"), so
  prompt lengths land near what a real tokenizer would count; they are exact when the prompt is
  given as token ids.
* **Token ids**: a ``prompt`` that is a list of integers (the OpenAI completions API allows it) is
  that many tokens, exactly. Load generators replaying a trace use this to send a request of exactly
  ``ContextTokens`` prompt tokens.
* **Chat**: each message costs its content's tokens plus :data:`CHAT_TOKENS_PER_MESSAGE` for the
  chat template's role header and end-of-turn markers, and the whole prompt
  :data:`CHAT_TOKENS_PRIMING` for the begin-of-text token and the assistant header that opens the
  reply (Llama 3's template: ``<|start_header_id|>role<|end_header_id|>\\n\\n…<|eot_id|>`` is 5
  tokens around each message; ``<|begin_of_text|>`` plus the empty assistant header is 5).

Output tokens are filler words, one word per token, each a common English word that is a single
token in the Llama 3 and GPT-4 vocabularies, so a client that re-tokenises the text with a real
tokenizer counts close to the ``usage.completion_tokens`` the engine reports.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "BYTES_PER_TOKEN",
    "CHAT_TOKENS_PER_MESSAGE",
    "CHAT_TOKENS_PRIMING",
    "chat_prompt_tokens",
    "count_text_tokens",
    "filler_text",
    "prompt_tokens",
]

#: Bytes of UTF-8 per counted token (see the module docstring for the source).
BYTES_PER_TOKEN = 4
#: Template tokens around each chat message (Llama 3 chat template: 5).
CHAT_TOKENS_PER_MESSAGE = 5
#: Template tokens once per chat prompt: begin-of-text and the open assistant header (Llama 3: 5).
CHAT_TOKENS_PRIMING = 5

# Common English words, each one token (with its leading space) in Llama 3's and cl100k's BPE.
_FILLER = (
    " the",
    " of",
    " and",
    " to",
    " a",
    " in",
    " is",
    " that",
    " for",
    " it",
    " as",
    " was",
    " with",
    " be",
    " on",
    " not",
    " he",
    " by",
    " are",
    " this",
)


def count_text_tokens(text: str) -> int:
    """Tokens in ``text``: ``ceil(utf8 bytes / 4)``; 0 for an empty string."""
    return math.ceil(len(text.encode("utf-8")) / BYTES_PER_TOKEN)


def prompt_tokens(prompt: Any) -> int:
    """Tokens of a completions ``prompt``: a string, a list of token ids, or a one-element list of either.

    Raises:
        ValueError: any other shape (a batch of several prompts is not supported by the mock).
    """
    if isinstance(prompt, str):
        return count_text_tokens(prompt)
    if isinstance(prompt, list):
        if prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
            return len(prompt)
        if len(prompt) == 1:
            return prompt_tokens(prompt[0])
    raise ValueError("prompt must be a string, a list of token ids, or a list holding one of those")


def _content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI content parts: [{"type": "text", "text": "..."}]
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    raise ValueError("message content must be a string or a list of content parts")


def chat_prompt_tokens(messages: Sequence[Mapping[str, Any]]) -> int:
    """Tokens of a chat prompt after the template (see the module docstring).

    Raises:
        ValueError: ``messages`` is empty or a message is not an object with a valid ``content``.
    """
    if not isinstance(messages, list) or not messages:
        raise ValueError("messages must be a non-empty list")
    total = CHAT_TOKENS_PRIMING
    for m in messages:
        if not isinstance(m, Mapping):
            raise ValueError("each message must be an object")
        total += CHAT_TOKENS_PER_MESSAGE + count_text_tokens(_content_text(m.get("content")))
    return total


def filler_text(first_index: int, count: int) -> str:
    """Text of output tokens ``first_index .. first_index + count - 1`` (0-based), one word each."""
    return "".join(_FILLER[i % len(_FILLER)] for i in range(first_index, first_index + count))
