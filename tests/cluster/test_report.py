"""``llmscale report`` against a real kube-apiserver and a real Prometheus holding 31 days of history.

Three LLMDeployments are applied to the local cluster (chat and support serve the same model with
the same engine; embed another); Prometheus (Debian's binary, on 127.0.0.1) is started on TSDB
blocks made by ``promtool tsdb create-blocks-from openmetrics`` from series with the operator's and
the engines' names: chat holds 2 GPUs busy 60 % generating 1,000 tokens/s from 2,000 prompt tokens/s,
support 1 GPU busy 5 % generating 20 tokens/s, embed 1 GPU for the last 3 days only. The report's
figures are those worked out by hand from the series; its files (Markdown, HTML, two PNG plots)
are written; its JSON holds the same document; bad flags are usage errors.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from tests.cluster.helpers import LocalCluster
from tests.signals.prom import (
    PROMTOOL,
    Series,
    counter,
    every,
    gauge,
    openmetrics,
    run_prometheus,
)

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prometheus_binaries")]

NS = "report"
HOUR, DAY = 3600.0, 86400.0
#: The report's end: a fixed whole hour in the past (the blocks must be older than Prometheus' head).
NOW = (1_790_000_000 // 3600) * 3600.0


def llmdeployment(name: str, model: str, preset: str, floor: int, usd: float, namespace: str = NS) -> dict[str, object]:
    return {"apiVersion": "llmscale.dev/v1alpha1", "kind": "LLMDeployment", "metadata": {"name": name, "namespace": namespace},
            "spec": {"model": {"name": model, "preset": preset}, "engine": {"type": "vllm", "image": "vllm/vllm-openai:v0.11.0"},
                     "replicas": {"min": floor, "max": 4}, "cost": {"gpuHourUsd": usd}}}


def history() -> list[Series]:
    """31 days of 15-minute samples ending at NOW."""
    times = every(NOW - 31 * DAY, NOW, 900)
    last3 = [t for t in times if t > NOW - 3 * DAY]
    out: list[Series] = []

    def pool(name: str, ts: list[float], gpus: float, busy: float, kv: float, tps: float, good: float,
             upgraded_at: float = 0.0) -> None:
        """``upgraded_at``: samples up to then carry 0.1.0's names for the busy and KV ratios (the
        report reads them where the new names have no sample), later ones the new names."""
        labels = {"namespace": NS, "name": name, "pool": "interactive"}
        for busy_name, kv_name, part in (
            ("llmscale_busy_share", "llmscale_kv_cache_utilization_mean", [t for t in ts if t <= upgraded_at]),
            ("llmscale_busy_ratio", "llmscale_kv_cache_utilization_ratio", [t for t in ts if t > upgraded_at]),
        ):
            if not part:
                continue
            # Busy share swings ±50 % of its mean over the day; whole days of hourly samples average it out.
            out.append(Series(busy_name, labels, [(t, busy * (1 + 0.5 * math.sin(2 * math.pi * t / DAY)))
                                                  for t in part]))
            out.append(gauge(kv_name, labels, part, kv))
        out.extend([gauge("llmscale_gpus", labels, ts, gpus),
                    gauge("llmscale_tokens_per_second", labels, ts, tps),
                    gauge("llmscale_goodput_tokens_per_second", labels, ts, good)])

    pool("chat", times, 2, 0.6, 0.5, 1000, 950, upgraded_at=NOW - 10 * DAY)
    pool("support", times, 1, 0.05, 0.02, 20, 20, upgraded_at=NOW)
    pool("embed", last3, 1, 0.3, 0.1, 100, 100)
    # Prompt tokens and finished requests: chat 2 requests/s of 1,000 prompt and 500 output tokens,
    # support 0.1/s of 400 and 200.
    for name, per_s, rps, pods in (("chat", 2000.0, 2.0, 2), ("support", 40.0, 0.1, 1)):
        for i in range(pods):
            labels = {"namespace": NS, "llmscale_dev_deployment": name, "llmscale_dev_pool": "interactive",
                      "pod": f"{name}-{i}"}
            out.append(counter("vllm:prompt_tokens_total", labels, times, per_s / pods))
            out.append(counter("vllm:request_success_total", {**labels, "finished_reason": "stop"}, times, rps / pods))
    return out


@contextmanager
def prometheus_with_history(tmp: Path) -> Iterator[str]:
    text = tmp / "history.om"
    text.write_text(openmetrics(history()))
    data = tmp / "tsdb"
    assert PROMTOOL is not None
    done = subprocess.run([PROMTOOL, "tsdb", "create-blocks-from", "openmetrics", str(text), str(data)],
                          capture_output=True, text=True, check=False, timeout=300)
    assert done.returncode == 0, done.stderr
    # Retention past the history's age, or Prometheus deletes the blocks at start.
    with run_prometheus(tmp, "global: {scrape_interval: 15s}\n", "--storage.tsdb.retention.time=100y",
                        data=data) as url:
        yield url


def report(cluster: LocalCluster, url: str, out: Path, *more: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "llmscale.cli", "report", "--kubeconfig", str(cluster.kubeconfig), "--prometheus-url",
         url, "--now", f"{NOW:.0f}", "--out-dir", str(out), "--reference-price", "0.5,1.5",
         "--price", f"{NS}/embed=0.02,0.02", "--namespace", NS, *more], capture_output=True, text=True, timeout=180, check=False)


def test_report_over_a_month_of_history(cluster: LocalCluster, tmp_path: Path) -> None:
    cluster.create_namespace(NS)
    cluster.apply([llmdeployment("chat", "meta-llama/Llama-3.1-8B-Instruct", "llama-3.1-8b", 2, 2.0),
                   llmdeployment("support", "meta-llama/Llama-3.1-8B-Instruct", "llama-3.1-8b", 1, 2.0),
                   llmdeployment("embed", "Qwen/Qwen2.5-7B-Instruct", "qwen2.5-7b", 1, 1.0)], "report-test")
    # A namespace left out by --namespace, with an object of the same name and model as one reported.
    cluster.create_namespace(f"{NS}-other")
    cluster.apply([llmdeployment("chat", "meta-llama/Llama-3.1-8B-Instruct", "llama-3.1-8b", 2, 2.0,
                                 namespace=f"{NS}-other")], "report-test")
    with prometheus_with_history(tmp_path) as url:
        proc = report(cluster, url, tmp_path / "out", "-o", "json")
        assert proc.returncode == 0, proc.stderr
        doc = json.loads(proc.stdout)
        md = report(cluster, url, tmp_path / "md")
        assert md.returncode == 0, md.stderr
        bad = report(cluster, url, tmp_path / "bad", "--price", "nobody=1")
        down = subprocess.run([sys.executable, "-m", "llmscale.cli", "report", "--kubeconfig", str(cluster.kubeconfig),
                               "--prometheus-url", "http://127.0.0.1:9", "--out-dir", str(tmp_path / "down")],
                              capture_output=True, text=True, timeout=120, check=False)
    # --namespace: other tests on the shared cluster leave objects of the same names (the Quick
    # start's `chat`) in namespaces of their own.
    assert {d["namespace"] for d in doc["deployments"]} == {NS}
    by_name = {d["name"]: d["windows"] for d in doc["deployments"]}
    assert set(by_name) >= {"chat", "support", "embed"}
    chat7, chat30 = by_name["chat"]["7d"], by_name["chat"]["30d"]
    assert chat7["gpuHours"] == pytest.approx(2 * 7 * 24)
    assert chat30["gpuHours"] == pytest.approx(2 * 30 * 24)
    assert chat7["busyShare"] == pytest.approx(0.6) and chat7["kvUse"] == pytest.approx(0.5)
    assert chat7["outputTokens"] == pytest.approx(1000 * 7 * DAY)
    assert chat7["inputTokens"] == pytest.approx(2000 * 7 * DAY, rel=1e-3)
    assert chat7["goodputPerGpuHour"] == pytest.approx(950 * 3600 / 2)
    assert chat7["costUsd"] == pytest.approx(2 * 7 * 24 * 2.0)
    # 672 USD over 604.8 M output tokens; the managed API: 1,209.6 M in at 0.5 + 604.8 M out at 1.5.
    assert chat7["usdPerMillionTokens"] == pytest.approx(672 / 604.8)
    assert chat7["referenceUsd"] == pytest.approx(1209.6 * 0.5 + 604.8 * 1.5, rel=1e-3)
    assert chat7["verdict"].startswith("build:")
    support7 = by_name["support"]["7d"]
    assert support7["busyShare"] == pytest.approx(0.05)
    assert support7["verdict"].startswith("buy:") and support7["verdict"].endswith("consolidate first")
    embed7, embed30 = by_name["embed"]["7d"], by_name["embed"]["30d"]
    assert embed7["gpuHours"] == pytest.approx(3 * 24) and embed30["gpuHours"] == pytest.approx(3 * 24)
    assert embed7["inputTokens"] is None  # its engines export no prompt tokens: priced on output only
    assert embed7["referenceUsd"] == pytest.approx(100 * 3 * DAY / 1e6 * 0.02)
    fleet7 = doc["fleet"]["7d"]
    assert fleet7["gpuHours"] == pytest.approx(sum(by_name[n]["7d"]["gpuHours"] for n in by_name))
    # chat and support serve the same model on the same engine: each needs one replica at its peak
    # (simulated), so apart they hold their floors, 2 + 1; merged the larger floor, 2: one GPU, $2 an hour.
    (candidate,) = doc["consolidation"]
    assert candidate["deployments"] == [f"{NS}/chat", f"{NS}/support"]
    assert (candidate["separateReplicas"], candidate["mergedReplicas"], candidate["floors"]) == (3, 2, 3)
    assert candidate["gpusSaved"] == 1 and candidate["usdPerMonthSaved"] == pytest.approx(730 * 2.0)
    assert candidate["floorsExceedPeak"] and candidate["mergedPeakRps"] == pytest.approx(2.1, rel=1e-3)

    out = tmp_path / "md"
    text = (out / "report.md").read_text()
    assert text == md.stdout
    for name in ("report/chat", "report/support", "report/embed", "Last 7 days", "Last 30 days", "**fleet**",
                 "![utilisation.png](utilisation.png)", "![cost.png](cost.png)"):
        assert name in text, name
    page = (out / "report.html").read_text()
    assert "<table>" in page and "report/support" in page and "<img src='cost.png'" in page
    assert "## Consolidation candidates" in text and "report/chat, report/support" in text
    for png in ("utilisation.png", "cost.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    if os.environ.get("LLMSCALE_REPORT_SAMPLE"):  # docs/report-sample is this run's output
        shutil.copytree(out, os.environ["LLMSCALE_REPORT_SAMPLE"], dirs_exist_ok=True)
    assert bad.returncode == 2 and "--price is NAMESPACE/NAME=IN,OUT" in bad.stderr
    assert down.returncode == 2 and "cannot read" in down.stderr and "Traceback" not in down.stderr
