"""The output file as the checkpoint: read back, torn last line cut, damage refused, one writer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmscale.batch.results import OutputError, ResultsFile, error_result, response_result


def result(custom_id: str) -> bytes:
    return json.dumps(response_result(custom_id, 200, "req", {"ok": True})).encode() + b"\n"


def test_results_are_appended_line_by_line_to_a_new_file(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    with ResultsFile.open(path) as results:
        assert results.done == set()
        results.append(response_result("a", 200, "cmpl-1", {"choices": []}))
        results.append(error_result("b", "unreachable", "no answer"))
        assert results.done == {"a", "b"}
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert lines[0]["response"] == {"status_code": 200, "request_id": "cmpl-1", "body": {"choices": []}}
    assert lines[0]["error"] is None and lines[0]["id"].startswith("batch_req_")
    assert lines[1]["response"] is None and lines[1]["error"] == {
        "code": "unreachable",
        "message": "no answer",
    }


def test_reopen_reads_back_the_done_ids(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    path.write_bytes(result("a") + result("b") + b"\n")
    with ResultsFile.open(path) as results:
        assert (results.done, results.torn_bytes, results.duplicates) == ({"a", "b"}, 0, 0)


def _with_a_torn_last_line(path: Path) -> None:
    whole = result("a")
    torn = result("b")[:37]  # a SIGKILL or crash in the middle of a write
    path.write_bytes(whole + torn)


def test_a_torn_last_line_is_cut(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    _with_a_torn_last_line(path)
    with ResultsFile.open(path) as results:
        assert results.torn_bytes == 37


def test_a_torn_last_lines_request_runs_again(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    _with_a_torn_last_line(path)
    with ResultsFile.open(path) as results:
        assert results.done == {"a"}
        results.append(response_result("b", 200, "req", {}))
    assert [json.loads(x)["custom_id"] for x in path.read_text().splitlines()] == ["a", "b"]


DAMAGED = pytest.mark.parametrize(
    ("content", "message"),
    [
        pytest.param(b"not json\n" + result("a"), "out.jsonl:1: not a result line", id="garbage-first"),
        pytest.param(
            result("a") + b'{"no": "id"}\n', "out.jsonl:2: not a result line (no custom_id)", id="no-id"
        ),
        pytest.param(
            result("a") + b"[1]\n", "out.jsonl:2: not a result line (no custom_id)", id="not-object"
        ),
    ],
)


def _open_refused(path: Path, content: bytes, message: str) -> None:
    path.write_bytes(content)
    with pytest.raises(OutputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        ResultsFile.open(path)


@DAMAGED
def test_a_damaged_file_is_refused(tmp_path: Path, content: bytes, message: str) -> None:
    _open_refused(tmp_path / "out.jsonl", content, message)


@DAMAGED
def test_a_damaged_file_is_left_alone(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "out.jsonl"
    _open_refused(path, content, message)
    assert path.read_bytes() == content


def test_repeated_id_is_counted_not_refused(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    path.write_bytes(result("a") + result("a"))
    with ResultsFile.open(path) as results:
        assert (results.done, results.duplicates) == ({"a"}, 1)


def test_a_second_writer_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    with ResultsFile.open(path), pytest.raises(OutputError, match="another batch run is writing"):
        ResultsFile.open(path)
    with ResultsFile.open(path):  # the lock went with the first writer
        pass


def test_unopenable_path(tmp_path: Path) -> None:
    with pytest.raises(OutputError, match="cannot open for appending"):
        ResultsFile.open(tmp_path / "no-such-dir" / "out.jsonl")


def test_a_failed_write_is_an_error_not_a_result() -> None:
    """/dev/full accepts the open and fails every write with ENOSPC, as a full disk does."""
    with ResultsFile.open(Path("/dev/full")) as results:
        with pytest.raises(OutputError, match="cannot append a result"):
            results.append(response_result("a", 200, "req", {}))
        assert results.done == set()
