"""HTTP client of one engine: streamed completions timed token by token, and its running batch.

Each request sends random token ids (``/v1/completions`` takes a list of ids; random so that
the prefix cache never turns a measured prefill into a cache hit) and asks for exactly
``output_tokens`` with ``ignore_eos``. ``logprobs: 0`` makes vLLM list the tokens of each streamed
chunk, so a chunk that carries several tokens (the API server merges deltas when the client reads
late) splits its gap evenly among them; an engine that sends no logprobs counts one token a chunk.
One read from the socket is one arrival: events that waited in the buffer while this process was
off the CPU share the read's gap, never a gap of zero each. Times come from the event loop's
monotonic clock.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass

import aiohttp
import numpy as np
from prometheus_client.parser import text_string_to_metric_families

__all__ = ["EngineClient", "EngineInfo", "EngineUnreachable", "Stream"]

#: Token ids sent as prompts are drawn from [PROMPT_ID_LOW, PROMPT_ID_HIGH): clear of the special
#: tokens at the bottom of every vocabulary, and below the smallest vocabulary likely (2,048).
PROMPT_ID_LOW, PROMPT_ID_HIGH = 100, 1000

#: Gauges of the running batch, by engine: vLLM, SGLang.
RUNNING_GAUGES = ("vllm:num_requests_running", "sglang:num_running_reqs")


class EngineUnreachable(RuntimeError):
    """The engine did not answer, or not as an OpenAI-compatible server."""


@dataclass(frozen=True, slots=True)
class EngineInfo:
    """What ``/v1/models`` says: the served name and its context limit (tokens; ``None`` if unsaid)."""

    model: str
    max_model_len: int | None


@dataclass(frozen=True, slots=True)
class Stream:
    """One streamed request.

    Attributes:
        sent_at: when it left, seconds on the loop's clock.
        prompt_tokens / output_tokens: sizes asked for.
        status: HTTP status, 0 when the connection failed.
        ttft_s: time to the first streamed token, seconds (``None``: none came).
        gaps_s: the inter-token gaps after the first token, one per token, seconds.
    """

    sent_at: float
    prompt_tokens: int
    output_tokens: int
    status: int
    ttft_s: float | None
    gaps_s: tuple[float, ...]

    @property
    def ok(self) -> bool:
        """Answered 200 with a first token."""
        return self.status == 200 and self.ttft_s is not None


class EngineClient:
    """One engine at ``base_url`` (``http://host:port``), over ``session``.

    Prompts are random token ids from ``prompt_rng``, by default fresh entropy for each client: a
    prompt an engine served before (an earlier run with the same seed) would be answered from its
    prefix cache and time a prefill that never ran.
    """

    def __init__(
        self,
        base_url: str,
        session: aiohttp.ClientSession,
        model: str | None = None,
        prompt_rng: np.random.Generator | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.session = session
        self.model = model or ""
        self.prompt_rng = prompt_rng if prompt_rng is not None else np.random.default_rng()

    async def probe(self, timeout_s: float = 10.0) -> EngineInfo:
        """Read ``/v1/models``; remember the served model (the first, unless one was given).

        Raises:
            EngineUnreachable: no connection, a non-200 answer, or no model listed.
        """
        url = f"{self.base_url}/v1/models"
        try:
            async with self.session.get(url, timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
                if resp.status != 200:
                    raise EngineUnreachable(f"GET {url} answered HTTP {resp.status}")
                body = await resp.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:  # ValueError: bad JSON, a host IDNA refuses
            raise EngineUnreachable(f"cannot reach {url}: {exc or type(exc).__name__}") from None
        data = body.get("data") if isinstance(body, dict) else None
        cards = [c for c in data if isinstance(c, dict) and c.get("id")] if isinstance(data, list) else []
        if not cards:
            raise EngineUnreachable(f"GET {url} lists no model (no data[].id in its answer)")
        card = next((c for c in cards if c.get("id") == self.model), None) if self.model else cards[0]
        if card is None:
            raise EngineUnreachable(f"{url} does not serve {self.model!r}; it serves {[c.get('id') for c in cards]}")
        self.model = str(card["id"])
        limit = card.get("max_model_len")
        return EngineInfo(self.model, limit if isinstance(limit, int) and limit > 0 else None)

    async def complete(
        self,
        prompt_tokens: int,
        output_tokens: int,
        on_gap: Callable[[float, float], None] | None = None,
    ) -> Stream:
        """Send one streamed completion and time its tokens; ``on_gap(now, gap_s)`` is called for
        each token after the first as it arrives (so a caller that cancels keeps what came)."""
        loop = asyncio.get_running_loop()
        ids = self.prompt_rng.integers(PROMPT_ID_LOW, PROMPT_ID_HIGH, size=max(1, prompt_tokens)).tolist()
        body = {
            "model": self.model,
            "prompt": ids,
            "max_tokens": max(1, output_tokens),
            "ignore_eos": True,
            "stream": True,
            "logprobs": 0,
        }
        start = loop.time()
        ttft: float | None = None
        gaps: list[float] = []
        last = start
        status = 0
        try:
            async with self.session.post(f"{self.base_url}/v1/completions", json=body) as resp:
                status = resp.status
                if status != 200:
                    await resp.read()
                else:
                    pending = b""
                    async for data in resp.content.iter_any():
                        now = loop.time()
                        *lines, pending = (pending + data).split(b"\n")
                        n = sum(_tokens_of(raw) for raw in lines)
                        if n == 0:
                            continue
                        if ttft is None:
                            # Tokens merged into the first arrival came apart unseen: no gaps for them.
                            ttft = now - start
                        else:
                            gaps.extend([(now - last) / n] * n)
                            if on_gap is not None:
                                for _ in range(n):
                                    on_gap(now, (now - last) / n)
                        last = now
        except (aiohttp.ClientError, TimeoutError, ValueError):  # ValueError: an event that is not JSON
            status = 0
        return Stream(start, prompt_tokens, output_tokens, status, ttft, tuple(gaps))

    async def running(self) -> float | None:
        """The engine's running requests now (sum over its engines), or ``None`` when unreadable."""
        try:
            async with self.session.get(f"{self.base_url}/metrics", timeout=aiohttp.ClientTimeout(total=5)) as resp:
                if resp.status != 200:
                    return None
                text = await resp.text()
        except (aiohttp.ClientError, TimeoutError):
            return None
        total: float | None = None
        try:
            for family in text_string_to_metric_families(text):
                if family.name in RUNNING_GAUGES:
                    for sample in family.samples:
                        total = (total or 0.0) + float(sample.value)
        except ValueError:  # not Prometheus text (an HTML page at /metrics): unreadable, not fatal
            return None
        return total


def _tokens_of(raw: bytes) -> int:
    """Tokens one server-sent event line carries: its logprobs' token count, else 1 for a chunk
    with text, else 0 (a comment, ``[DONE]``, a finish reason alone, a usage chunk)."""
    line = raw.strip()
    if not line.startswith(b"data: ") or line == b"data: [DONE]":
        return 0
    choices = json.loads(line[6:]).get("choices") or []
    if not choices:
        return 0
    lp = choices[0].get("logprobs")
    if isinstance(lp, dict) and lp.get("tokens"):
        return len(lp["tokens"])
    return 1 if choices[0].get("text") or lp is not None else 0
