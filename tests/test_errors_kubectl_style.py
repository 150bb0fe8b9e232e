"""Errors as kubectl writes them (issue: a spec error read like a stack).

- One line per bad field, ``<path>: Invalid value: <value>: <why>`` / ``Unsupported value`` /
  ``Required value``; no pydantic ``[type=..., input_value=...]`` nor its URL.
- "did you mean" for close misses of closed lists: time zones (598 of them, never listed whole),
  model presets, GPU names, any argparse choice (verbs, policies).
- Expected failures without tracebacks, on stderr: ``llmscale run`` against an API server that is
  not there is one line; ``llmscale demo --minutes -1`` is refused before anything starts.
- One duration grammar: ``1w`` and ``1.5m`` wherever a duration is taken.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pydantic
import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from llmscale.api import LLMDeploymentSpec, iana_timezones
from llmscale.durations import parse_duration
from llmscale.fielderrors import did_you_mean, field_errors

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "benchmarks" / "chat-llama-70b-h100.yaml"
MODEL = {"name": "m", "preset": "llama-3.1-8b"}


def _lines(spec: dict[str, Any]) -> list[str]:
    with pytest.raises(pydantic.ValidationError) as exc:
        LLMDeploymentSpec.model_validate(spec)
    return field_errors(exc.value, ("spec",))


def _window(tz: str) -> dict[str, Any]:
    return {"model": MODEL, "batch": {"windows": [{"start": "22:00", "end": "06:00", "timezone": tz}]}}


@pytest.mark.parametrize(("spec", "line"), [
    ({"model": MODEL, "replicas": {"min": -1}}, "spec.replicas.min: Invalid value: -1: must be ≥ 0"),
    ({"model": MODEL, "resources": {"gpusPerReplica": 0}}, "spec.resources.gpusPerReplica: Invalid value: 0: must be ≥ 1"),
    ({"model": MODEL, "scaling": {"targets": {"kvCacheUtilization": 1.5}}},
     "spec.scaling.targets.kvCacheUtilization: Invalid value: 1.5: must be ≤ 1"),
    ({"model": {"preset": "llama-3.1-8b"}}, "spec.model.name: Required value"),
    ({"model": MODEL, "replica": {"min": 1}}, "spec.replica: Unsupported field"),
    ({"model": MODEL, "resources": {"gpuType": "h100"}},
     'spec.resources.gpuType: Unsupported value: "h100": did you mean "h100-sxm"'),
    ({"model": {"name": "m", "preset": "llama-3.1-8bb"}},
     'spec.model.preset: Unsupported value: "llama-3.1-8bb": did you mean "llama-3.1-8b"'),
    (_window("Europe/Londn"), 'spec.batch.windows[0].timezone: Unsupported value: "Europe/Londn": did you mean "Europe/London"'),
    (_window("London"), 'spec.batch.windows[0].timezone: Unsupported value: "London": did you mean "Europe/London"?'),
    (_window("america/new_york"),
     'spec.batch.windows[0].timezone: Unsupported value: "america/new_york": did you mean "America/New_York"?'),
])
def test_one_kubectl_line_per_field(spec: dict[str, Any], line: str) -> None:
    (got,) = _lines(spec)
    assert got.startswith(line), got
    assert "[type=" not in got and "errors.pydantic.dev" not in got and "\n" not in got


def test_every_error_of_a_spec_gets_its_own_line() -> None:
    lines = _lines({"model": {"name": "m", "preset": "x"}, "replicas": {"min": -1}, "resources": {"gpuType": "x"}})
    assert sorted(line.split(":")[0] for line in lines) == ["spec.model.preset", "spec.replicas.min",
                                                             "spec.resources.gpuType"]


def test_a_far_off_time_zone_does_not_list_598_zones() -> None:
    (line,) = _lines(_window("Mars/Olympus_Mons"))
    assert len(line) < 200 and str(len(iana_timezones())) in line and "none is close" in line


@given(st.sampled_from(iana_timezones()), st.integers(min_value=0, max_value=1000))
def test_a_zone_with_one_letter_dropped_is_suggested(zone: str, seed: int) -> None:
    """The kind of miss: one letter dropped from any zone name of 6+ letters finds the zone."""
    if len(zone) < 6:
        return
    i = seed % len(zone)
    typo = zone[:i] + zone[i + 1:]
    if typo.lower() in {z.lower() for z in iana_timezones()}:
        return  # another zone, up to case ("Asia/omsk" from Asia/Tomsk is Asia/Omsk): suggested alone
    suggested = did_you_mean(typo, iana_timezones(), n=3)
    containing = [z for z in iana_timezones() if typo.lower() in z.lower()]
    if len(containing) > 3 and zone in containing:
        # Ambiguous: "Etc/GMT-" (from Etc/GMT-8) is in 15 names; any three of them are as right.
        assert suggested and all(typo.lower() in z.lower() for z in suggested), (typo, suggested)
        return
    assert zone in suggested, typo


def llmscale(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "llmscale.cli", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=timeout, check=False)


def test_each_spec_reading_verb_prints_one_line_per_field_on_stderr(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"apiVersion": "llmscale.dev/v1alpha1", "kind": "LLMDeployment",
                                   "metadata": {"name": "chat"},
                                   "spec": {"model": {"name": "m", "preset": "llama-3.1-8bb"},
                                            "replicas": {"min": -1}}}))
    for argv in (["simulate", "--spec", str(bad)], ["render", "-f", str(bad)]):
        proc = llmscale(*argv)
        assert proc.returncode == 2 and proc.stdout == "", proc.stdout
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 2, proc.stderr
        assert any(line.endswith("spec.replicas.min: Invalid value: -1: must be ≥ 0") for line in lines), lines
        assert any('did you mean "llama-3.1-8b"' in line for line in lines), lines


@pytest.mark.parametrize(("argv", "hint"), [
    (["plan", "--model", "llama-8b", "--gpu", "h100-sxm"], 'did you mean "llama-3.1-8b"'),
    (["plan", "--model", "llama-3.1-8b", "--gpu", "H100"], 'did you mean "h100-sxm"'),
    (["simlate"], 'did you mean "simulate"'),
    (["simulate", "--spec", str(SPEC), "--policy", "keda"], 'did you mean "keda-llmd" or "keda-queue"'),
])
def test_close_misses_of_names_get_a_did_you_mean(argv: list[str], hint: str) -> None:
    proc = llmscale(*argv)
    assert proc.returncode == 2 and hint in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


@pytest.mark.parametrize("server", ["https://127.0.0.1:1", "https://no-such-host.invalid:6443"])
def test_run_against_an_api_server_that_is_not_there_is_one_line(server: str, tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "x",
        "clusters": [{"name": "x", "cluster": {"server": server, "insecure-skip-tls-verify": True}}],
        "users": [{"name": "x", "user": {"token": "t"}}],
        "contexts": [{"name": "x", "context": {"cluster": "x", "user": "x"}}],
    }))
    proc = llmscale("run", "--kubeconfig", str(kubeconfig), "--all-namespaces", "--metrics-port", "0")
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout == ""
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith(f"llmscale run: error: cannot reach the Kubernetes API server at {server}: "), line


def test_run_configuration_errors_go_to_stderr() -> None:
    proc = llmscale("run", "--kubeconfig", "/nonexistent/kubeconfig", "--all-namespaces")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith("llmscale run: error: no Kubernetes credentials")


@pytest.mark.parametrize("argv", [["--minutes", "-1"], ["--minutes", "0"], ["--peak-rps", "nan"],
                                  ["--minutes", "inf"], ["--peak-rps", "-2"]])
def test_demo_refuses_bad_numbers_before_anything_starts(argv: list[str], tmp_path: Path) -> None:
    out = tmp_path / "out"
    t0 = time.monotonic()
    proc = llmscale("demo", *argv, "--out", str(out), timeout=30)
    assert proc.returncode == 2 and "must be > 0" in proc.stderr, proc.stderr
    assert time.monotonic() - t0 < 20 and not out.exists()


# ------------------------------------------------------------------------------ durations


@pytest.mark.parametrize(("text", "seconds"), [
    ("1w", 604800.0), ("1.5m", 90.0), ("90", 90.0), ("90s", 90.0), ("1h30m", 5400.0), ("500ms", 0.5),
    ("1d", 86400.0), ("2.5h", 9000.0),
])
def test_one_duration_grammar(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "1 minute", "-1m", "1mm", "m", "1.m", "1w2"])
def test_not_a_duration(text: str) -> None:
    with pytest.raises(ValueError, match="is not a duration such as"):
        parse_duration(text)


def _simulate_args(duration: str, warmup: str) -> Any:
    from llmscale.cli import build_parser

    return build_parser("simulate").parse_args(["simulate", "--spec", str(SPEC), "--duration", duration,
                                                "--warmup", warmup])


def test_simulate_takes_a_duration_in_weeks() -> None:
    assert _simulate_args("1w", "1.5m").duration == 604800.0


def test_simulate_takes_decimal_minutes() -> None:
    assert _simulate_args("1w", "1.5m").warmup == 90.0


def test_the_operators_rate_window_takes_the_same_grammar() -> None:
    from llmscale.cli import build_parser
    from llmscale.controller.settings import load_settings

    args = build_parser("run").parse_args(["run", "--all-namespaces", "--prometheus-rate-window", "1.5m"])
    assert load_settings(args, {}).prometheus_rate_window == "1.5m"


def test_prometheus_gets_the_rate_window_in_promql() -> None:
    from llmscale.signals.config import ReaderSettings

    assert ReaderSettings(rate_window="1.5m").rate_window == "90s"
    assert ReaderSettings(rate_window="1m30s").rate_window == "1m30s"  # PromQL's own, unchanged
    assert ReaderSettings(rate_window="1w").rate_window == "1w"


# ------------------------------------------------------------------------------ the plot extra

_NO_MATPLOTLIB = "import sys; sys.modules['matplotlib'] = None; import importlib.util as u; " \
                 "u.find_spec = (lambda f: (lambda n, *a: None if n == 'matplotlib' else f(n, *a)))(u.find_spec); "


@pytest.mark.parametrize("argv", [
    ["simulate", "--spec", str(SPEC), "--plot", "/tmp/x.png", "--duration", "5m"],
    ["demo", "--minutes", "1"],
])
def test_plotting_without_the_plot_extra_says_how_to_get_it(argv: list[str]) -> None:
    """matplotlib is an extra (the operator's image never plots): without it the verbs that plot
    stop at once with the install command, not an ImportError."""
    code = _NO_MATPLOTLIB + f"from llmscale.cli import main; sys.exit(main({argv!r}))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60,
                          check=False)
    assert proc.returncode == 2, proc.stderr
    assert "pip install 'llmscale[plot]'" in proc.stderr and "Traceback" not in proc.stderr
