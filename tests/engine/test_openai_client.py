"""The mock engine through the real ``openai`` client: completions and chat, streaming or not,
usage counts, and errors raised as the client raises them against vLLM."""

from __future__ import annotations

import json
import math
from typing import Any

import openai
import pytest

from llmscale.engine.server import DEFAULT_OUTPUT_TOKENS

MODEL = "llama-3.1-8b"


@pytest.fixture(scope="module")
def client(engine_8b: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=engine_8b.v1, api_key="unused", max_retries=0, timeout=30)


def words(text: str) -> int:
    return len(text.split())


def test_a_completion_reports_its_token_usage(client: openai.OpenAI) -> None:
    prompt = "The quick brown fox jumps over the lazy dog."  # 44 bytes -> 11 tokens
    r = client.completions.create(model=MODEL, prompt=prompt, max_tokens=7)
    assert r.object == "text_completion" and r.model == MODEL and r.id.startswith("cmpl-")
    assert r.usage is not None
    assert (r.usage.prompt_tokens, r.usage.completion_tokens, r.usage.total_tokens) == (11, 7, 18)
    assert r.choices[0].finish_reason == "length"
    assert words(r.choices[0].text) == 7


def test_completion_prompt_given_as_token_ids_is_exact(client: openai.OpenAI) -> None:
    r = client.completions.create(model=MODEL, prompt=list(range(1234)), max_tokens=3)
    assert r.usage is not None and r.usage.prompt_tokens == 1234


def test_completion_streams_one_token_per_chunk_then_usage_then_done(
    engine_8b: Any, client: openai.OpenAI
) -> None:
    stream = client.completions.create(
        model=MODEL, prompt="x" * 40, max_tokens=12, stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)
    content = [c for c in chunks if c.choices]
    usage = [c for c in chunks if not c.choices]
    assert sum(words(c.choices[0].text) for c in content) == 12
    assert [c.choices[0].finish_reason for c in content][-1] == "length"
    assert all(c.choices[0].finish_reason is None for c in content[:-1])
    assert len(usage) == 1 and usage[0].usage is not None
    assert (usage[0].usage.prompt_tokens, usage[0].usage.completion_tokens) == (10, 12)


def test_stream_without_include_usage_sends_no_usage_chunk(client: openai.OpenAI) -> None:
    chunks = list(client.completions.create(model=MODEL, prompt="hello", max_tokens=4, stream=True))
    assert all(c.choices for c in chunks)
    assert sum(words(c.choices[0].text) for c in chunks) == 4


def test_chat_completion_counts_template_tokens(client: openai.OpenAI) -> None:
    r = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello there!"}],
        max_completion_tokens=5,
    )
    # 5 priming + (5 + ceil(9/4)=3) + (5 + ceil(12/4)=3) = 21 prompt tokens.
    assert r.usage is not None and (r.usage.prompt_tokens, r.usage.completion_tokens) == (21, 5)
    assert r.object == "chat.completion" and r.id.startswith("chatcmpl-")
    assert r.choices[0].message.role == "assistant"
    assert words(r.choices[0].message.content or "") == 5
    assert r.choices[0].finish_reason == "length"


def test_chat_stream_announces_role_then_deltas(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "hi"}],
        max_tokens=6,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    content = [c for c in chunks if c.choices]
    assert sum(words(c.choices[0].delta.content or "") for c in content) == 6
    assert content[-1].choices[0].finish_reason == "length"
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 6


def test_without_max_tokens_the_model_stops_at_its_default_length(client: openai.OpenAI) -> None:
    r = client.completions.create(model=MODEL, prompt="hi")
    assert r.usage is not None and r.usage.completion_tokens == DEFAULT_OUTPUT_TOKENS
    assert r.choices[0].finish_reason == "stop"
    r2 = client.completions.create(model=MODEL, prompt="hi", extra_body={"min_tokens": 300})
    assert r2.usage is not None and r2.usage.completion_tokens == 300


def test_unknown_model_is_not_found(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as exc:
        client.completions.create(model="gpt-5", prompt="hi", max_tokens=1)
    assert exc.value.status_code == 404
    assert exc.value.body == {
        "message": "The model `gpt-5` does not exist.",
        "type": "NotFoundError",
        "param": "model",
        "code": 404,
    }


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        pytest.param(
            {"prompt": [1] * 8000, "max_tokens": 500},
            "maximum context length is 8192",
            id="prompt+max_tokens",
        ),
        pytest.param(
            {"prompt": [1] * 9000, "max_tokens": 1}, "your request has 9000 input tokens", id="prompt-alone"
        ),
        pytest.param({"prompt": "hi", "max_tokens": 0}, "at least 1", id="zero-max-tokens"),
    ],
)
def test_bad_requests_raise_bad_request_error(
    client: openai.OpenAI, kwargs: dict[str, Any], fragment: str
) -> None:
    with pytest.raises(openai.BadRequestError) as exc:
        client.completions.create(model=MODEL, **kwargs)
    assert exc.value.status_code == 400
    assert fragment in exc.value.message
    assert isinstance(exc.value.body, dict) and exc.value.body["type"] == "BadRequestError"


def test_the_models_endpoint_lists_the_served_model(client: openai.OpenAI) -> None:
    (model,) = client.models.list().data
    assert model.id == MODEL and model.owned_by == "vllm"
    assert model.model_extra is not None and model.model_extra["max_model_len"] == 8192


def test_the_health_endpoint_answers_empty_ok(engine_8b: Any) -> None:
    status, body, _ = engine_8b.get("/health")
    assert (status, body) == (200, b"")


def test_the_version_endpoint_answers_a_three_part_version(engine_8b: Any) -> None:
    status, body, _ = engine_8b.get("/version")
    assert status == 200 and json.loads(body)["version"].count(".") == 2


def test_prompt_token_rule_is_four_bytes_per_token(client: openai.OpenAI) -> None:
    for text in ["a", "abcd", "abcde", "é" * 3, "word " * 25]:
        r = client.completions.create(model=MODEL, prompt=text, max_tokens=1)
        assert r.usage is not None and r.usage.prompt_tokens == math.ceil(len(text.encode()) / 4)
