"""Lone-prompt TTFT of real vLLM around and past its step budget: is a long prompt slow because it
is chunked, or because its attention grows with the square of its length? (Issue 24, item 5.)

Starts one real vLLM (CPU backend, the tiny local Llama: :mod:`llmscale.localcluster.realvllm`),
niced, per ``--budget`` (``--max-num-batched-tokens``), sends each prompt length alone ``--repeats``
times (random token ids, one output token, no prefix cache) after one warm-up of each shape, and
prints the median and least TTFT, then a least-squares fit of ``t = a + b·P + c·P²`` over the
medians and the share of the quadratic (attention) term at each length. With two budgets, a prompt
longer than the smaller one runs in two chunks under it and in one under the other: equal times
mean chunking costs nothing extra.

    .venv/bin/python benchmarks/prefill_chunks.py --budgets 2048,4096

About a minute per budget on an idle core (the engine's start is most of it).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np

from llmscale.localcluster import realvllm
from llmscale.localcluster.ports import free_port


def _ttft(port: int, n: int, seed: int) -> float:
    ids = [(seed * 7919 + i * 31) % 250 + 5 for i in range(n)]
    body = json.dumps({"model": "tiny", "prompt": ids, "max_tokens": 1, "temperature": 0}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", body,
                                 {"Content-Type": "application/json"})
    t = time.perf_counter()
    with urllib.request.urlopen(req, timeout=120) as answer:
        answer.read()
    return time.perf_counter() - t


def measure(budget: int, lengths: list[int], repeats: int, max_len: int) -> dict[int, list[float]]:
    """TTFT samples (seconds) of each prompt length, alone, on a fresh engine with ``budget``."""
    found = realvllm.install(log=False)
    port = free_port()
    cmd = ["nice", "-n", "5", str(found.python), "-m", realvllm.SERVER_MODULE, "--model", str(found.model_dir),
           "--served-model-name", "tiny", "--host", "127.0.0.1", "--port", str(port), *realvllm.CPU_ARGS,
           "--max-num-batched-tokens", str(budget), "--max-model-len", str(max_len), "--no-enable-prefix-caching"]
    with tempfile.NamedTemporaryFile("w", prefix=f"prefill-chunks-{budget}-", suffix=".log", delete=False) as log:
        proc = subprocess.Popen(cmd, env={**os.environ, **realvllm.CPU_ENV}, stdout=log, stderr=subprocess.STDOUT)
    try:
        start = time.monotonic()
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() - start > 300:
                    raise SystemExit(f"vLLM did not become healthy: see {log.name}") from None
                time.sleep(2)
        print(f"budget {budget}: healthy after {time.monotonic() - start:.0f} s", file=sys.stderr)
        for n in sorted(set(lengths)):
            _ttft(port, n, 0)  # warm-up of the shape
        return {n: [_ttft(port, n, s) for s in range(1, repeats + 1)] for n in lengths}
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        Path(log.name).unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--budgets", default="2048,4096", help="--max-num-batched-tokens values (default 2048,4096)")
    parser.add_argument("--lengths", default="256,1024,1536,2048,2560,3072,4000", help="prompt lengths, tokens")
    parser.add_argument("--repeats", type=int, default=7, help="requests per length (default 7)")
    args = parser.parse_args(argv)
    lengths = [int(x) for x in args.lengths.split(",")]
    max_len = max(4096, max(lengths) + 16)
    print("| budget | prompt (tokens) | chunks | TTFT median (ms) | least (ms) | a + b·P + c·P² (ms) | c·P² share |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for budget in (int(x) for x in args.budgets.split(",")):
        samples = measure(budget, lengths, args.repeats, max_len)
        p = np.array(lengths, dtype=float)
        med = np.array([statistics.median(samples[n]) for n in lengths])
        a, b, c = np.linalg.lstsq(np.stack([np.ones_like(p), p, p * p], axis=1), med, rcond=None)[0]
        for n, m in zip(lengths, med, strict=True):
            quad = c * n * n
            print(f"| {budget} | {n:,} | {-(-n // budget)} | {m * 1e3:.1f} | {min(samples[n]) * 1e3:.1f} | "
                  f"{(a + b * n + quad) * 1e3:.1f} | {quad / (a + b * n + quad):.0%} |")
        print(f"fit, budget {budget}: a = {a * 1e3:.2f} ms, b = {b * 1e6:.2f} µs/token, c = {c * 1e9:.3f} ns/token²",
              file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
