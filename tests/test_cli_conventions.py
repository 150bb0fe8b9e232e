"""The conventions every ``llmscale`` verb keeps (llmscale.cli's docstring, docs/cli.md):
``-o/--output`` is a format, ``yaml`` wherever ``json`` is; exit status 2 for usage errors, 1 for
runtime failures; a closed stdout ends the command quietly."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from llmscale.cli import VERBS, main, verb_parser
from llmscale.crd import crd_yaml

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "benchmarks" / "chat-llama-70b-h100.yaml"
PLAN = ["plan", "--model", "llama-3.1-8b", "--gpu", "h100-sxm"]
#: A short simulation: one policy, a fixed capacity (no calibration search), 5 simulated minutes.
SIMULATE = ["simulate", "--spec", str(SPEC), "--duration", "5m", "--warmup", "1m", "--capacity-rps", "5",
            "--policy", "oracle", "--quiet"]
#: Verbs that print a document on stdout, and the formats each offers.
DOCUMENT_VERBS = {
    "plan": {"table", "json", "yaml", "spec"},
    "simulate": {"table", "json", "yaml"},
    "crd": {"yaml", "json"},
    "demo": {"json", "yaml"},
    "calibrate": {"table", "json", "yaml"},
    "report": {"markdown", "json", "yaml"},
    "render": {"yaml", "json"},
}


def llmscale(*args: str, stdout: int | None = subprocess.PIPE, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """Run the real console entry point in a child process."""
    return subprocess.run([sys.executable, "-m", "llmscale.cli", *args], stdout=stdout, stderr=subprocess.PIPE,
                          text=True, cwd=cwd, timeout=120, check=False)


# ------------------------------------------------------------------------------ -o/--output


def _options(verb: str) -> dict[str, object]:
    return {s: a for a in verb_parser(verb)._actions for s in a.option_strings}


@pytest.mark.parametrize("verb", sorted(VERBS))
def test_output_is_a_format_flag_with_its_short_form_on_document_verbs_only(verb: str) -> None:
    options = _options(verb)
    if verb not in DOCUMENT_VERBS:
        assert "--output" not in options and "-o" not in options
        return
    assert options["-o"] is options["--output"], "-o must be --output"


@pytest.mark.parametrize("verb", sorted(DOCUMENT_VERBS))
def test_output_offers_yaml_wherever_it_offers_json(verb: str) -> None:
    choices = set(_options(verb)["--output"].choices)  # type: ignore[attr-defined]
    assert choices == DOCUMENT_VERBS[verb]
    assert "json" not in choices or "yaml" in choices


@pytest.mark.parametrize(
    "argv",
    [
        pytest.param(PLAN, id="plan"),
        pytest.param(["crd"], id="crd"),
        pytest.param(SIMULATE, id="simulate"),
    ],
)
def test_the_json_document_equals_the_yaml_one(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*argv, "-o", "json"]) == 0
    as_json = json.loads(capsys.readouterr().out)
    assert main([*argv, "-o", "yaml"]) == 0
    as_yaml = yaml.safe_load(capsys.readouterr().out)
    for doc in (as_json, as_yaml):  # simulate's wall-clock seconds per policy differ between two runs
        for result in doc.get("results", []):
            assert result.pop("wall_s") >= 0
    assert as_yaml == as_json and as_json


def test_crd_yaml_on_stdout_is_the_checked_in_text(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["crd", "-o", "yaml"]) == 0
    assert capsys.readouterr().out == crd_yaml()


def test_the_old_crd_output_file_flag_is_refused(tmp_path: Path) -> None:
    proc = llmscale("crd", "--output", str(tmp_path / "crd.yaml"))
    assert proc.returncode == 2
    assert "invalid choice" in proc.stderr and "llmscale crd" in proc.stderr


def test_the_old_crd_output_file_flag_writes_nothing(tmp_path: Path) -> None:
    target = tmp_path / "crd.yaml"
    llmscale("crd", "--output", str(target))
    assert not target.exists()


# ------------------------------------------------------------------------------ exit status


@pytest.fixture
def stale_crd(tmp_path: Path) -> Path:
    path = tmp_path / "crd.yaml"
    path.write_text(crd_yaml().replace("min <= self.max", "min < self.max"), encoding="utf-8")
    return path


@pytest.fixture
def markdown_without_blocks(tmp_path: Path) -> Path:
    path = tmp_path / "plain.md"
    path.write_text("# Nothing generated here\n", encoding="utf-8")
    return path


@pytest.fixture
def markdown_with_an_unknown_block(tmp_path: Path) -> Path:
    path = tmp_path / "typo.md"
    path.write_text("<!-- BEGIN GENERATED: spec-refrence -->\n<!-- END GENERATED: spec-refrence -->\n", encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("argv", "status"),
    [
        pytest.param([*PLAN[:3], "--gpu", "tpu-v5"], 2, id="plan-unknown-gpu"),
        pytest.param(["plan", "--model", "llama-3.1-70b", "--gpu", "l40s"], 2, id="plan-model-does-not-fit"),
        pytest.param(["plan", "--config", "/nonexistent/config.json", "--gpu", "h100-sxm"], 2, id="plan-no-config"),
        pytest.param(["crd", "--check", "{stale_crd}"], 1, id="crd-check-finds-a-difference"),
        pytest.param(["crd", "--update-docs", "/nonexistent/README.md"], 2, id="crd-update-docs-no-file"),
        pytest.param(["crd", "--update-docs", "{markdown_without_blocks}"], 0, id="crd-update-docs-no-block-warns"),
        pytest.param(["crd", "--update-docs", "{markdown_with_an_unknown_block}"], 2, id="crd-update-docs-unknown-block"),
        pytest.param(["simulate", "--spec", "/nonexistent.yaml"], 2, id="simulate-no-spec"),
        pytest.param(["simulate", "--spec", str(SPEC), "--trace", "/nonexistent.csv"], 2, id="simulate-no-trace"),
        pytest.param([*SIMULATE, "--plot", "/nonexistent/day.png"], 2, id="simulate-plot-folder-missing"),
        pytest.param(["demo", "--trace", "/nonexistent.csv"], 2, id="demo-no-trace"),
        pytest.param(["render", "-f", "/nonexistent.yaml"], 2, id="render-no-file"),
        pytest.param(["render", "-f", str(ROOT / "README.md")], 2, id="render-not-yaml"),
        pytest.param(["render", "-f", str(ROOT / "manifests/samples/namespace.yaml")], 2, id="render-no-llmdeployment"),
    ],
)
def test_exit_status_in_process(argv: list[str], status: int, request: pytest.FixtureRequest,
                                capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)  # the demo looks for its checkout from the current folder
    files = ("stale_crd", "markdown_without_blocks", "markdown_with_an_unknown_block")
    argv = [a.format(**{n: request.getfixturevalue(n) for n in files if "{" + n + "}" in a}) for a in argv]
    assert main(argv) == status
    err = capsys.readouterr().err
    assert err.strip(), "an error (or a warning) must say why on stderr"
    assert "Traceback" not in err


@pytest.mark.parametrize("verb", sorted(VERBS))
def test_an_unknown_flag_is_a_usage_error_of_the_verb(verb: str) -> None:
    proc = llmscale(verb, "--no-such-flag")
    assert proc.returncode == 2
    assert f"llmscale {verb}: error:" in proc.stderr


def test_engine_refusing_its_configuration_is_a_usage_error() -> None:
    proc = llmscale("engine", "--model", "llama-3.1-70b", "--gpu", "l40s", "--port", "0")
    assert proc.returncode == 2
    assert "Refused to start engine" in proc.stderr and "Traceback" not in proc.stderr


def test_engine_on_a_taken_port_is_a_runtime_failure() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = llmscale("engine", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--port", str(port))
    assert proc.returncode == 1
    assert "could not listen" in proc.stderr and "Traceback" not in proc.stderr


# ------------------------------------------------------------------------------ closed stdout


@pytest.mark.parametrize(
    "argv",
    [
        pytest.param(PLAN, id="plan-table"),
        pytest.param([*PLAN, "-o", "json"], id="plan-json"),
        pytest.param([*PLAN, "-o", "yaml"], id="plan-yaml"),
        pytest.param(["crd"], id="crd-yaml"),
        pytest.param(["crd", "-o", "json"], id="crd-json"),
        pytest.param([*SIMULATE, "-o", "json"], id="simulate-json"),
        pytest.param(SIMULATE, id="simulate-table"),
    ],
)
def test_a_closed_stdout_ends_quietly_with_status_1(argv: list[str]) -> None:
    """stdout is a pipe whose reader has already gone (as after ``| head -1`` has its line): every
    write fails with EPIPE, deterministically, however small the output."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = llmscale(*argv, stdout=write_end)
    finally:
        os.close(write_end)
    assert proc.stderr == ""  # no traceback, no "Exception ignored" from the final flush
    assert proc.returncode == 1


def _crd_json_through_head() -> subprocess.CompletedProcess[str]:
    """The documented pipeline, through a real shell and ``head``."""
    llmscale_cmd = f"{sys.executable} -m llmscale.cli"
    return subprocess.run(["bash", "-c", f"{llmscale_cmd} crd -o json | head -1"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60, check=False)


def test_head_gets_its_line() -> None:
    proc = _crd_json_through_head()
    assert proc.returncode == 0 and proc.stdout == "{\n"


def test_llmscale_says_nothing_when_head_closes_the_pipe() -> None:
    assert _crd_json_through_head().stderr == ""


@pytest.mark.parametrize("verb", sorted(VERBS))
def test_help_shows_no_python_reprs(verb: str) -> None:
    """Defaults in --help read as a user types them (a,b), not as Python writes a tuple."""
    text = verb_parser(verb).format_help()
    assert "('" not in text and "['" not in text and "frozenset(" not in text, text
