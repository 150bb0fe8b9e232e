"""``llmscale calibrate`` against a real ``llmscale engine`` process over real HTTP on 127.0.0.1.

The mock engine runs the roofline model with known efficiencies (bandwidth 0.8, compute 0.5) plus
its own HTTP and event-loop time, so a calibration of it must find about those efficiencies, a
small per-step overhead, and a model that explains what was measured. A small sweep (seconds).
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from llmscale.api import LLMDeploymentSpec
from llmscale.calibrate.sweep import DecodePoint, LatencyStats, RatePoint
from llmscale.commands.calibrate import MeasurementFailed, _check_points, fit_warnings
from llmscale.localcluster.ports import free_port
from llmscale.model import ReplicaModel
from llmscale.model.fit import EfficiencyFit

_LISTENING = re.compile(r"Started vLLM-compatible server for \S+ on http://([\d.]+):(\d+)")


@pytest.fixture(scope="module")
def engine_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A mock Llama-3.1-8B on one L40S at real-time speed (ITL about 23 ms at batch 1)."""
    log_path = tmp_path_factory.mktemp("engine") / "engine.log"
    argv = [
        sys.executable, "-m", "llmscale.cli", "engine", "--host", "127.0.0.1", "--port", "0",
        "--model", "llama-3.1-8b", "--gpu", "l40s", "--max-model-len", "4096",
    ]
    with log_path.open("wb") as log_file:
        proc = subprocess.Popen(argv, stdout=log_file, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while not (m := _LISTENING.search(log_path.read_text())):
            assert proc.poll() is None, f"engine exited with {proc.returncode}:\n{log_path.read_text()}"
            assert time.monotonic() < deadline, f"engine did not start:\n{log_path.read_text()}"
            time.sleep(0.05)
        yield f"http://{m.group(1)}:{m.group(2)}"
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


def _calibrate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "llmscale.cli", "calibrate", *args], capture_output=True, text=True, timeout=240
    )


@pytest.mark.timing
def test_calibrating_the_mock_recovers_its_efficiencies_into_a_spec_the_api_takes(
    engine_url: str, tmp_path: Path
) -> None:
    spec_out = tmp_path / "calibration.yaml"
    done = _calibrate(
        "--url", engine_url, "--model", "llama-3.1-8b", "--gpu", "l40s",
        "--prompt-lengths", "256,2048", "--repeats", "2",
        "--concurrency", "1,8,32", "--point-seconds", "1.5", "--warmup-seconds", "0.5",
        "--rates", "3", "--rate-seconds", "4", "--rate-requests", "12", "-o", "json", "--spec-out", str(spec_out),
    )
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    fit = doc["fit"]
    # The mock's decode steps are memory-bound (bandwidth 0.8) and a 2,048-token prompt is
    # compute-bound (0.5): both sides are reached. The compute side is recovered; the bandwidth
    # side shares every step's weight read with the mock's own per-step time (HTTP, event loop),
    # told apart only by the KV slope of the context sweep, so on a busy machine it lands between
    # 0.8 and the datasheet's 1 with the overhead taking the rest.
    assert fit["bandwidth_identified"] and fit["compute_identified"]
    assert 0.6 <= fit["bandwidth_efficiency"] <= 1.0
    # The compute side rests on two lone 2,048-token prompts timed in real time: with the unit tests
    # side by side on two cores it read 1.0 once (0.49 alone). Recovering known efficiencies exactly
    # is tests/model/test_fit.py's (synthetic steps, with noise); here the whole path over HTTP.
    assert 0.2 <= fit["compute_efficiency"] <= 1.0
    assert 0 <= fit["step_overhead_s"] < 0.01
    assert fit["rms_relative_error"] < 0.1
    # Progress for each point went to stderr; the batch grew with the clients.
    assert "decode   32 clients" in done.stderr and "rate" in done.stderr
    assert "rate    3.00 req/s: sending for 4 s" in done.stderr  # 12 requests at 3 req/s: the 4 s asked
    running = [d["running"] for d in doc["decode"][:3]]  # the batch sweep; the context sweep follows
    assert running == sorted(running) and running[-1] > 8
    assert [d["context_tokens"] for d in doc["decode"][3:]] == [512 + 64, 2048 + 64]
    names = [f["name"] for f in doc["figures"]]
    assert any(n.startswith("ITL p95 at 3.00 req/s") for n in names)
    assert any(n.startswith("knee") for n in names)
    batch_one = next(f for f in doc["figures"] if f["name"].startswith("ITL p50 at batch 1.0"))
    assert abs(batch_one["calibrated_error"]) < 0.1
    # After calibration the fitted figures are closer to the measurement than the plain roofline.
    fitted = [f for f in doc["figures"] if f["fitted"] and f["calibrated_error"] is not None]
    assert sum(abs(f["calibrated_error"]) for f in fitted) <= sum(abs(f["roofline_error"]) for f in fitted)
    # The spec fragment merges into a spec the API accepts, and the model then uses it.
    fragment = yaml.safe_load(spec_out.read_text())
    spec = LLMDeploymentSpec.model_validate(
        {"model": {"name": "chat", "preset": "llama-3.1-8b", **fragment["model"]}, "resources": {"gpuType": "l40s"}}
    )
    model = ReplicaModel.from_spec(spec)
    assert model.bandwidth_efficiency == fit["bandwidth_efficiency"]
    assert model.step_overhead_s == fit["step_overhead_s"]


@pytest.mark.parametrize(
    "url",
    [
        pytest.param(f"http://127.0.0.1:{free_port()}", id="nothing-listening"),
        pytest.param("http://127.0.0.1:1", id="privileged-port"),
        pytest.param(f"http://[::1]:{free_port()}/", id="ipv6-trailing-slash"),
        pytest.param(f"HTTP://127.0.0.1:{free_port()}/engine-a", id="upper-case-scheme-with-prefix"),
    ],
)
def test_an_unreachable_engine_fails_with_exit_1_on_one_line(url: str) -> None:
    done = _calibrate("--url", url, "--model", "llama-3.1-8b", "--gpu", "l40s")
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("llmscale calibrate: error: cannot reach")
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(["--model", "nope", "--gpu", "l40s"], "unknown model preset", id="unknown-model"),
        pytest.param(["--model", "llama-3.1-8b", "--accelerator", "name=cpu,memory=1e9"], "lacks", id="short-accelerator"),
        pytest.param(["--model", "llama-3.1-8b", "--gpu", "l40s", "--concurrency", "0,2"], "at least 1", id="zero-clients"),
        pytest.param(["--model", "llama-3.1-8b", "--gpu", "l40s", "--rate-requests", "0"], "at least 1", id="zero-requests"),
        pytest.param(["--model", "llama-3.1-8b", "--gpu", "l40s", "--rate-seconds", "-3"], "must be positive", id="negative-seconds"),
        pytest.param(["--model", "llama-3.1-8b", "--gpu", "l40s", "--rate-max-seconds", "inf"], "must be positive", id="endless-point"),
        pytest.param(["--model", "llama-3.1-8b", "--gpu", "l40s", "--warmup-seconds", "-5"], "must be 0 or more", id="negative-warm-up"),
        pytest.param(["--model", "llama-3.1-8b", "--gpu", "l40s", "--decode-output-tokens", "0"], "at least 1", id="no-output"),
        pytest.param(["--model", "llama-3.1-8b", "--accelerator", "name=cpu,memory=1e9,bandwidth=1e10,flops=inf"],
                     "positive finite", id="infinite-flops"),
        pytest.param(["--model", "llama-3.1-8b", "--accelerator", "name=,memory=1e9,bandwidth=1e10,flops=1e12"],
                     "name must not be empty", id="unnamed-accelerator"),
        pytest.param(["--model", "llama-3.1-8b", "--gpu", "l40s", "--spec-out", "/nonexistent/x.yaml"],
                     "not a file in an existing folder", id="spec-out-nowhere"),
        pytest.param(["--model", "llama-3.1-8b", "--gpu", "l40s", "--trace", "/nonexistent/trace.csv"], "--trace",
                     id="missing-trace"),
        pytest.param(["--model", "llama-3.1-8b", "--gpu", "l40s", "--repeats", "x"], "an integer", id="repeats-not-a-number"),
    ],
)
def test_usage_errors_exit_2_before_any_request(args: list[str], message: str) -> None:
    done = _calibrate("--url", "http://127.0.0.1:9", *args)
    assert done.returncode == 2
    assert message in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("url", "message"),
    [
        pytest.param("not-a-url", "expected http://HOST:PORT", id="url-without-scheme"),
        pytest.param("ftp://127.0.0.1:21", "expected http://HOST:PORT", id="url-not-http"),
        pytest.param("http://127.0.0.1:99999", "not a URL", id="url-port-out-of-range"),
        pytest.param("http://127.0.0.1:8000/?x=1", "expected http://HOST:PORT", id="url-with-query"),
        pytest.param("http://127.0.0.1:8000?", "expected http://HOST:PORT", id="url-with-empty-query"),
        pytest.param("http://127.0.0.1:8000/#", "expected http://HOST:PORT", id="url-with-empty-fragment"),
        pytest.param("http://127.0.0.1:8000\n", "expected http://HOST:PORT", id="url-with-newline"),
        pytest.param("http://127.0.\t0.1:8000", "expected http://HOST:PORT", id="url-with-tab"),
        pytest.param("http://127.0.0.1:0", "expected http://HOST:PORT", id="url-port-zero"),
        pytest.param("http://" + "a" * 64 + ":8000", "not a URL", id="url-host-label-too-long"),
        pytest.param("http://a..b:8000", "not a URL", id="url-host-empty-label"),
        pytest.param("http://127.0.0.1:8000/v1", "without /v1", id="url-with-v1"),
        pytest.param("http://127.0.0.1:8000/v1/models", "without /v1", id="url-with-v1-models"),
    ],
)
def test_a_url_that_is_not_an_engines_base_url_exits_2_before_any_request(url: str, message: str) -> None:
    done = _calibrate("--url", url, "--model", "llama-3.1-8b", "--gpu", "l40s")
    assert done.returncode == 2
    assert message in done.stderr
    assert "Traceback" not in done.stderr


def _point(concurrency: int, samples: int) -> DecodePoint:
    return DecodePoint(concurrency, float(concurrency), 128.0, LatencyStats(samples, 0.002, 0.003, 0.004), 100.0)


def test_a_point_that_measured_nothing_fails_the_run_naming_it() -> None:
    """An engine that stopped answering mid-sweep, or refused the sweep's requests: no spec."""
    with pytest.raises(MeasurementFailed, match="decode at 8 clients"):
        _check_points([], [_point(1, 50), _point(8, 0)], [])
    rate = RatePoint(2.0, 10, 9, 1.0, LatencyStats(1, 0.1, 0.1, 0.1), LatencyStats(1, 0.002, 0.002, 0.002))
    with pytest.raises(MeasurementFailed, match="9 of 10 requests failed"):
        _check_points([], [], [rate])
    _check_points([], [_point(1, 50), _point(8, 20)], [])  # every point measured: no error


def _fit(bandwidth: float, compute: float, *, identified: bool = True) -> EfficiencyFit:
    return EfficiencyFit(bandwidth_efficiency=bandwidth, compute_efficiency=compute, step_overhead_s=0.001,
                         seq_overhead_s=0.0, attention_efficiency=None, request_overhead_s=0.0, rms_relative_error=0.05, max_relative_error=0.1, observations=10,
                         bandwidth_identified=identified, compute_identified=identified)


@pytest.mark.parametrize(("bandwidth", "compute", "named"), [
    (1.0, 0.5, "bandwidth"), (0.5, 1.0, "compute"), (1.0, 0.9999, "bandwidth and compute")])
def test_an_efficiency_at_its_bound_says_the_accelerator_understates_the_hardware(
        bandwidth: float, compute: float, named: str) -> None:
    (line,) = fit_warnings(_fit(bandwidth, compute))
    assert f"the fitted {named} efficiency is at its bound 1.0" in line and "--accelerator" in line


def test_efficiencies_below_the_bound_or_not_identified_say_nothing() -> None:
    assert fit_warnings(_fit(0.8, 0.5)) == []
    assert fit_warnings(_fit(1.0, 1.0, identified=False)) == []
