"""Reading a batch input: the OpenAI batch file format, every problem named by its line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from llmscale.batch.requests import BatchInputError, parse_requests, read_requests, select_shard


def line(**fields: Any) -> str:
    request = {
        "custom_id": "a",
        "method": "POST",
        "url": "/v1/chat/completions",
        "body": {"model": "chat", "messages": [{"role": "user", "content": "hi"}]},
    }
    request.update(fields)
    return json.dumps({k: v for k, v in request.items() if v is not ...})


def test_the_three_endpoints_are_read_in_order_past_blank_lines() -> None:
    lines = [
        line(custom_id="chat"),
        "",
        "   ",
        line(custom_id="text", url="/v1/completions", body={"model": "chat", "prompt": "hi"}),
        line(custom_id="emb", url="/v1/embeddings", body={"model": "e", "input": "hi"}, extra="kept by vLLM"),
    ]
    got = parse_requests(lines, "in.jsonl")
    assert [(r.line, r.custom_id, r.url) for r in got] == [
        (1, "chat", "/v1/chat/completions"),
        (4, "text", "/v1/completions"),
        (5, "emb", "/v1/embeddings"),
    ]
    assert got[1].body == {"model": "chat", "prompt": "hi"}


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        pytest.param([line(), '{"custom_id": "b", '], "in.jsonl:2: not JSON", id="bad-json"),
        pytest.param(
            [line(), line()], "in.jsonl:2: duplicate custom_id 'a' (first on line 1)", id="duplicate"
        ),
        pytest.param(["[1, 2]"], "in.jsonl:1: a request must be a JSON object, not list", id="not-object"),
        pytest.param([line(custom_id=...)], "in.jsonl:1: custom_id must be a non-empty string", id="no-id"),
        pytest.param([line(custom_id="")], "custom_id must be a non-empty string", id="empty-id"),
        pytest.param([line(custom_id=7)], "custom_id must be a non-empty string", id="numeric-id"),
        pytest.param([line(method="GET")], "in.jsonl:1: method must be POST, not 'GET'", id="get"),
        pytest.param([line(url="/v1/responses")], "url must be one of", id="unknown-endpoint"),
        pytest.param([line(url="v1/completions")], "url must be one of", id="relative-url"),
        pytest.param([line(body="hi")], "body must be a JSON object", id="body-string"),
        pytest.param([line(body=...)], "body must be a JSON object", id="no-body"),
        pytest.param(
            [line(body={"model": "chat", "messages": [], "stream": True})],
            "stream is not supported in a batch",
            id="stream",
        ),
    ],
)
def test_every_problem_names_its_line(lines: list[str], message: str) -> None:
    with pytest.raises(BatchInputError) as caught:
        parse_requests(lines, "in.jsonl")
    assert message in str(caught.value)


def test_read_requests_file_errors(tmp_path: Path) -> None:
    with pytest.raises(BatchInputError, match=r"missing.jsonl: cannot read"):
        read_requests(tmp_path / "missing.jsonl")
    latin = tmp_path / "latin.jsonl"
    latin.write_bytes(line().encode() + b"\n\xe9\n")
    with pytest.raises(BatchInputError, match="not UTF-8"):
        read_requests(latin)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert read_requests(empty) == []


def _ten_requests() -> list[Any]:
    return parse_requests([line(custom_id=f"r{i}") for i in range(10)])


def test_shards_split_by_position() -> None:
    assert [r.custom_id for r in select_shard(_ten_requests(), 1, 3)] == ["r1", "r4", "r7"]


def test_shards_cover_everything() -> None:
    requests = _ten_requests()
    shards = [select_shard(requests, i, 3) for i in range(3)]
    assert sorted(r.custom_id for s in shards for r in s) == sorted(r.custom_id for r in requests)


def test_a_shard_index_out_of_range_is_refused() -> None:
    with pytest.raises(ValueError, match="not in"):
        select_shard(_ten_requests(), 3, 3)
