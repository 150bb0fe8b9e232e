"""``llmscale batch run`` end to end: the real command in a subprocess against the real mock engine
over HTTP, stopped by SIGTERM, killed by SIGKILL, rerun, sharded; and its usage errors.

The invariant every case checks: each ``custom_id`` of the input has exactly one result line, and
every line is a whole JSON result.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families
from tests.engine.conftest import Engine

from llmscale.localcluster.ports import free_port

N = 240


def write_input(path: Path, n: int = N, max_tokens: int = 200) -> list[str]:
    """``n`` requests alternating completions and chat, ``max_tokens`` each; returns the ids."""
    ids = []
    with path.open("w") as f:
        for i in range(n):
            cid = f"req-{i:04d}"
            ids.append(cid)
            if i % 2:
                body: dict[str, Any] = {
                    "model": "llama-3.1-8b",
                    "messages": [{"role": "user", "content": f"question {i} " * 40}],
                    "max_tokens": max_tokens,
                }
                url = "/v1/chat/completions"
            else:
                body = {"model": "llama-3.1-8b", "prompt": f"document {i} " * 60, "max_tokens": max_tokens}
                url = "/v1/completions"
            f.write(json.dumps({"custom_id": cid, "method": "POST", "url": url, "body": body}) + "\n")
    return ids


def command(*args: str) -> list[str]:
    return [sys.executable, "-m", "llmscale.cli", "batch", *args]


def batch_run(inp: Path, out: Path, url: str, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        command("run", "--input", str(inp), "--output", str(out), "--url", url, "--progress", "off", *extra),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def results(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.read_text().splitlines()]


def wait_for_lines(out: Path, proc: subprocess.Popen[str], at_least: int, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if out.exists() and out.read_bytes().count(b"\n") >= at_least:
            return
        if proc.poll() is not None:
            raise AssertionError(f"batch run exited {proc.returncode} early:\n{proc.communicate()[0]}")
        time.sleep(0.02)
    proc.kill()
    raise AssertionError(f"fewer than {at_least} results after {timeout_s} s:\n{proc.communicate()[0]}")


def served(engine: Engine) -> float:
    return engine.value("vllm:request_success_total")


def assert_exactly_once(out: Path, ids: list[str]) -> None:
    counts = Counter(r["custom_id"] for r in results(out))
    assert sorted(counts) == sorted(ids)
    assert set(counts.values()) == {1}


def _run_forty(engine: Engine, tmp_path: Path) -> tuple[Path, Path, list[str]]:
    inp, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    ids = write_input(inp, 40, max_tokens=16)
    proc = batch_run(inp, out, engine.base_url)
    log = proc.communicate(timeout=120)[0]
    assert proc.returncode == 0, log
    assert "Completed batch" in log
    return inp, out, ids


def test_a_run_sends_everything(engine: Engine, tmp_path: Path) -> None:
    _, out, ids = _run_forty(engine, tmp_path)
    assert_exactly_once(out, ids)
    for r in results(out):
        assert r["error"] is None and r["response"]["status_code"] == 200
        assert r["response"]["body"]["usage"]["completion_tokens"] == 16


def test_a_rerun_of_a_finished_batch_sends_nothing(engine: Engine, tmp_path: Path) -> None:
    inp, out, ids = _run_forty(engine, tmp_path)
    before = served(engine)
    again = batch_run(inp, out, engine.base_url + "/v1")  # a base URL ending in /v1 works too
    assert again.communicate(timeout=60)[0].count("40 done before") == 1
    assert again.returncode == 0
    assert served(engine) == before  # nothing was sent again
    assert_exactly_once(out, ids)


def _paused_by_sigterm(engine: Engine, tmp_path: Path) -> tuple[Path, Path, list[str], str]:
    inp, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    ids = write_input(inp)
    proc = batch_run(inp, out, engine.base_url, "--concurrency", "4")
    wait_for_lines(out, proc, 12)
    proc.send_signal(signal.SIGTERM)  # what the kubelet sends when the Job is suspended
    log = proc.communicate(timeout=60)[0]
    assert proc.returncode == 75, log
    return inp, out, ids, log


def test_sigterm_pauses_with_75(engine: Engine, tmp_path: Path) -> None:
    _, out, _, log = _paused_by_sigterm(engine, tmp_path)
    assert "Received SIGTERM" in log and "Paused batch" in log
    paused = results(out)  # every line whole: in-flight requests finished and were written
    assert 12 <= len(paused) < N
    assert len({r["custom_id"] for r in paused}) == len(paused)


def test_a_rerun_after_sigterm_finishes(engine: Engine, tmp_path: Path) -> None:
    inp, out, ids, _ = _paused_by_sigterm(engine, tmp_path)
    paused = results(out)
    rerun = batch_run(inp, out, engine.base_url, "--concurrency", "64")
    log = rerun.communicate(timeout=120)[0]
    assert rerun.returncode == 0, log
    assert f"{len(paused)} done before" in log
    assert_exactly_once(out, ids)


def test_sigint_stops_as_gracefully_with_130(engine: Engine, tmp_path: Path) -> None:
    inp, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    ids = write_input(inp, 80)
    proc = batch_run(inp, out, engine.base_url, "--concurrency", "2")
    wait_for_lines(out, proc, 4)
    proc.send_signal(signal.SIGINT)  # Ctrl-C
    log = proc.communicate(timeout=60)[0]
    assert proc.returncode == 130, log
    assert "Received SIGINT" in log and "Traceback" not in log
    assert len({r["custom_id"] for r in results(out)}) == len(results(out)) < len(ids)


def test_after_a_sigkill_with_a_torn_line_every_request_is_done_exactly_once(engine: Engine, tmp_path: Path) -> None:
    inp, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    ids = write_input(inp)
    port = free_port()
    proc = batch_run(
        inp,
        out,
        engine.base_url,
        "--concurrency",
        "8",
        "--metrics-port",
        str(port),
        "--metrics-address",
        "127.0.0.1",
    )
    wait_for_lines(out, proc, 20)
    # The progress the operator can read: the client's own gauge, done results included.
    metrics = {
        s.name: s.value
        for family in text_string_to_metric_families(
            urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
        )
        for s in family.samples
    }
    proc.kill()  # SIGKILL: no handler runs
    log = proc.communicate(timeout=30)[0]
    assert proc.returncode == -signal.SIGKILL, log
    assert metrics["llmscale_batch_requests"] == N, log
    # The gauge moves just after each result is written, so it may trail the file's 20 lines by the
    # results being written at the scrape: at most the concurrency (8).
    assert 20 - 8 <= metrics["llmscale_batch_requests_done"] < N, (metrics, log)
    killed = results(out)
    # A crash in the middle of a write leaves half a line: simulate one for a request not yet done.
    pending = next(i for i in ids if i not in {r["custom_id"] for r in killed})
    with out.open("ab") as f:
        f.write(
            json.dumps({"id": "batch_req_x", "custom_id": pending, "response": {"status_code": 2}}).encode()[
                :40
            ]
        )
    rerun = batch_run(inp, out, engine.base_url, "--concurrency", "64")
    log = rerun.communicate(timeout=120)[0]
    assert rerun.returncode == 0, log
    assert "Cut a torn last line" in log
    assert f"{len(killed)} done before" in log
    assert_exactly_once(out, ids)


def test_shards_of_an_indexed_job_cover_the_input_once(engine: Engine, tmp_path: Path) -> None:
    inp = tmp_path / "in.jsonl"
    ids = write_input(inp, 30, max_tokens=8)
    env_runs = []
    for index in range(3):
        env = {"JOB_COMPLETION_INDEX": str(index), "PATH": "/usr/bin:/bin"}
        env_runs.append(
            subprocess.run(
                command(
                    "run",
                    "--input",
                    str(inp),
                    "--output",
                    str(tmp_path / "out-{shard}.jsonl"),
                    "--url",
                    engine.base_url,
                    "--shards",
                    "3",
                    "--progress",
                    "off",
                ),
                capture_output=True,
                text=True,
                timeout=120,
                env=env,
                check=False,
            )
        )
    assert [r.returncode for r in env_runs] == [0, 0, 0], [r.stderr for r in env_runs]
    counts = Counter(r["custom_id"] for i in range(3) for r in results(tmp_path / f"out-{i}.jsonl"))
    assert sorted(counts) == sorted(ids) and set(counts.values()) == {1}
    assert len(results(tmp_path / "out-1.jsonl")) == 10


def test_prompt_over_the_context_limit_is_a_400_result_not_a_retry(engine: Engine, tmp_path: Path) -> None:
    inp, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    inp.write_text(
        json.dumps(
            {
                "custom_id": "long",
                "method": "POST",
                "url": "/v1/completions",
                "body": {"model": "llama-3.1-8b", "prompt": "x" * 40_000, "max_tokens": 8},
            }
        )
        + "\n"
    )
    proc = subprocess.run(
        command(
            "run",
            "--input",
            str(inp),
            "--output",
            str(out),
            "--url",
            engine.base_url,
            "--progress",
            "plain",
            "--progress-interval",
            "0",
        ),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "Wrote 1 of 1 batch results (1 failed)" in proc.stderr
    [r] = results(out)
    assert r["response"]["status_code"] == 400
    assert "maximum context length" in r["response"]["body"]["error"]["message"]


@pytest.mark.parametrize(
    ("lines", "extra", "message"),
    [
        pytest.param(
            ['{"custom_id": "a", "method": "POST", "url": "/v1/completions", "body": {}}', "{oops"],
            [],
            "in.jsonl:2: not JSON",
            id="bad-json-line",
        ),
        pytest.param(
            ['{"custom_id": "a", "method": "POST", "url": "/v1/completions", "body": {}}'] * 2,
            [],
            "in.jsonl:2: duplicate custom_id 'a' (first on line 1)",
            id="duplicate",
        ),
        pytest.param([], ["--url", "chat-batch:8000"], "is not an http(s) URL", id="url-without-scheme"),
        pytest.param(
            [], ["--shards", "2"], "needs --shard-index or $JOB_COMPLETION_INDEX", id="shards-no-index"
        ),
        pytest.param(
            [], ["--shards", "2", "--shard-index", "2"], "shard index 2 is not in 0…1", id="index-out"
        ),
        pytest.param([], ["--concurrency", "0"], "must be at least 1", id="concurrency-0"),
    ],
)
def test_a_usage_or_input_error_exits_2_before_starting(
    tmp_path: Path, lines: list[str], extra: list[str], message: str
) -> None:
    inp = tmp_path / "in.jsonl"
    inp.write_text("".join(line + "\n" for line in lines))
    args = ["run", "--input", str(inp), "--output", str(tmp_path / "out.jsonl")]
    if "--url" not in extra:
        args += ["--url", "http://127.0.0.1:9"]
    proc = subprocess.run(command(*args, *extra), capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr
    assert not (tmp_path / "out.jsonl").exists()  # nothing was started


def _run_onto_damaged_output(tmp_path: Path) -> tuple[Path, subprocess.CompletedProcess[str]]:
    inp, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_input(inp, 2)
    out.write_text("this is not a result\n")
    proc = subprocess.run(
        command("run", "--input", str(inp), "--output", str(out), "--url", "http://127.0.0.1:9"),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return out, proc


def test_damaged_output_exits_1(tmp_path: Path) -> None:
    _, proc = _run_onto_damaged_output(tmp_path)
    assert proc.returncode == 1
    assert "out.jsonl:1: not a result line" in proc.stderr


def test_damaged_output_is_left_alone(tmp_path: Path) -> None:
    out, _ = _run_onto_damaged_output(tmp_path)
    assert out.read_text() == "this is not a result\n"


def test_unreachable_server_exits_1_after_its_retries(tmp_path: Path) -> None:
    inp, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_input(inp, 2)
    proc = subprocess.run(
        command(
            "run",
            "--input",
            str(inp),
            "--output",
            str(out),
            "--url",
            "http://127.0.0.1:9",
            "--max-attempts",
            "2",
            "--backoff-base",
            "0.01",
        ),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 1
    assert "Gave up on batch request req-0000 after 2 attempts" in proc.stderr
    assert "2 without a result" in proc.stderr
    assert out.read_text() == ""


def test_size_prints_the_job_annotations(tmp_path: Path) -> None:
    inp = tmp_path / "in.jsonl"
    inp.write_text(
        json.dumps(
            {
                "custom_id": "a",
                "method": "POST",
                "url": "/v1/completions",
                "body": {"prompt": "x" * 400, "max_tokens": 100},
            }
        )
        + "\n"
        + json.dumps(
            {
                "custom_id": "b",
                "method": "POST",
                "url": "/v1/chat/completions",
                "body": {"messages": [{"role": "user", "content": "y" * 40}]},
            }
        )
        + "\n"
    )
    proc = subprocess.run(
        command("size", "--input", str(inp)), capture_output=True, text=True, timeout=60, check=True
    )
    annotations = yaml.safe_load(proc.stdout)["metadata"]["annotations"]
    as_json = subprocess.run(
        command("size", "--input", str(inp), "-o", "json"),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert json.loads(as_json.stdout) == yaml.safe_load(proc.stdout)
    # 400 bytes = 100 tokens; chat: 5 + (5 + 10) = 20 tokens; outputs: max_tokens 100, default 256.
    assert annotations == {
        "llmscale.dev/batch-requests": "2",
        "llmscale.dev/batch-input-tokens": "120",
        "llmscale.dev/batch-output-tokens": "356",
    }
