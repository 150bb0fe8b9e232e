"""The engine pod template's security context: the mock engine meets the "restricted" Pod Security
Standard; vLLM and SGLang pods are left as their root-running images need them.

The real API server's Pod Security admission checks the same template in
``tests/cluster/test_rbac_gitops.py`` (a namespace enforcing ``restricted`` admits the mock pods).
"""

from __future__ import annotations

from typing import Any

import pytest

from llmscale.api import LLMDeploymentSpec
from llmscale.controller.manifests.podtemplate import pod_template


def spec(engine: str) -> LLMDeploymentSpec:
    return LLMDeploymentSpec.model_validate(
        {"model": {"name": "chat", "preset": "llama-3.1-8b"}, "engine": {"type": engine}}
    )


def restricted_violations(pod: dict[str, Any]) -> list[str]:
    """The rules of the "restricted" profile (Kubernetes docs, "Pod Security Standards",
    v1.36) that this template can break, each as a message; ``[]`` when it complies."""
    out: list[str] = []
    pod_sc = pod.get("securityContext") or {}
    for c in pod["containers"]:
        sc = c.get("securityContext") or {}
        name = c["name"]
        if sc.get("allowPrivilegeEscalation") is not False:
            out.append(f"{name}: allowPrivilegeEscalation != false")
        if (sc.get("capabilities") or {}).get("drop") != ["ALL"]:
            out.append(f"{name}: capabilities.drop != [ALL]")
        if sc.get("capabilities", {}).get("add"):
            out.append(f"{name}: capabilities added")
        if sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot")) is not True:
            out.append(f"{name}: runAsNonRoot != true")
        if sc.get("runAsUser", pod_sc.get("runAsUser")) == 0:
            out.append(f"{name}: runAsUser 0")
        seccomp = (sc.get("seccompProfile") or pod_sc.get("seccompProfile") or {}).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            out.append(f"{name}: seccompProfile {seccomp}")
        if sc.get("privileged"):
            out.append(f"{name}: privileged")
    for volume in pod.get("volumes", []):
        if set(volume) - {"name"} - {"emptyDir", "configMap", "secret", "projected", "downwardAPI",
                                       "persistentVolumeClaim", "ephemeral", "csi"}:
            out.append(f"volume {volume['name']}: not an allowed volume type")
    return out


def test_mock_engine_pods_meet_the_restricted_standard() -> None:
    pod = pod_template("chat", spec("mock"), "interactive")["spec"]
    assert restricted_violations(pod) == []
    (container,) = pod["containers"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    # The image's user (Dockerfile: USER 65532:65532), explicit so runAsNonRoot never has to guess.
    assert pod["securityContext"]["runAsUser"] == 65532
    assert pod["securityContext"]["runAsGroup"] == 65532
    # A read-only root needs a writable /tmp: an emptyDir of bounded size.
    assert container["volumeMounts"] == [{"name": "tmp", "mountPath": "/tmp"}]
    assert pod["volumes"] == [{"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}}]


@pytest.mark.parametrize("engine", [pytest.param("vllm", id="vllm"), pytest.param("sglang", id="sglang")])
def test_each_engines_pods_keep_what_their_images_need(engine: str) -> None:
    """Their images run as root and write caches to the root filesystem: no securityContext that
    would stop them; their namespace enforces "baseline" instead (manifests/samples)."""
    pod = pod_template("chat", spec(engine), "interactive")["spec"]
    (container,) = pod["containers"]
    assert "securityContext" not in pod and "securityContext" not in container
    assert "volumes" not in pod and "volumeMounts" not in container
    assert restricted_violations(pod)  # the checker does see a non-compliant pod
