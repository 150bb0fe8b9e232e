"""``llmscale render``: the objects the operator would create, printed with no cluster.

The reference is the operator's own path: :func:`llmscale.controller.spec.read_spec` and
:func:`llmscale.controller.manifests.children.child_manifests` at :func:`initial_replicas`, with the chart's
PriorityClasses — what :mod:`llmscale.controller.ensure` applies on create. Every sample renders;
the modes and kinds that get no children print none; a bad spec is one line naming the field.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from llmscale.cli import main
from llmscale.commands.render import PLACEHOLDER_UID
from llmscale.controller.manifests.children import PriorityClasses, child_manifests, initial_replicas
from llmscale.controller.spec import read_spec

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = sorted((ROOT / "manifests/samples").glob("*.yaml"))
CHART_CLASSES = PriorityClasses("llmscale-interactive", "llmscale-batch")


def _llmdeployments(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d and d.get("kind") == "LLMDeployment"]


def _expected(doc: dict[str, Any], namespace: str = "default") -> list[dict[str, Any]]:
    body = copy.deepcopy(doc)
    body["metadata"].setdefault("namespace", namespace)
    body["metadata"]["uid"] = PLACEHOLDER_UID
    spec = read_spec(body)
    if spec.scale_target_ref is not None or spec.mode != "Active":
        return []
    return child_manifests(body, spec, initial_replicas(spec), 0, CHART_CLASSES)


def _render(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(["render", *argv])
    out = capsys.readouterr()
    return status, out.out, out.err


@pytest.mark.parametrize("sample", [p for p in SAMPLES if _llmdeployments(p)], ids=lambda p: p.stem)
def test_every_sample_renders_as_the_operator_builds_it(sample: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = _render(capsys, "-f", str(sample))
    assert status == 0, err
    got = [d for d in yaml.safe_load_all(out) if d]
    want = [m for d in _llmdeployments(sample) for m in _expected(d)]
    assert got == want
    status, out, _ = _render(capsys, "-f", str(sample), "-o", "json")
    assert json.loads(out) == {"apiVersion": "v1", "kind": "List", "items": want}


def test_the_chat_sample_renders_what_a_reviewer_checks_before_gpus_are_spent(capsys: pytest.CaptureFixture[str]) -> None:
    """What a reviewer wants to see before GPUs are spent is in the output."""
    _, out, _ = _render(capsys, "-f", str(ROOT / "manifests/samples/chat.yaml"), "-n", "llm-serving")
    docs = [d for d in yaml.safe_load_all(out) if d]
    assert [(d["kind"], d["metadata"]["name"]) for d in docs] == [
        ("Service", "chat"), ("PodDisruptionBudget", "chat"), ("Deployment", "chat")]
    assert {d["metadata"]["namespace"] for d in docs} == {"llm-serving"}
    deploy = docs[-1]
    pod = deploy["spec"]["template"]["spec"]
    (engine,) = pod["containers"]
    assert engine["args"][0] == "meta-llama/Llama-3.1-8B-Instruct" and engine["command"] == ["vllm", "serve"]
    assert engine["startupProbe"] and engine["readinessProbe"]
    assert pod["terminationGracePeriodSeconds"] > 0
    assert pod["priorityClassName"] == "llmscale-interactive"
    doc = _llmdeployments(ROOT / "manifests/samples/chat.yaml")[0]
    # One replica of demand plus the headroom, within spec.replicas (initial_replicas).
    r, headroom = doc["spec"]["replicas"], doc["spec"]["headroom"]["replicas"]
    assert deploy["spec"]["replicas"] == min(r["max"], max(r["min"], 1 + headroom))


def test_priority_classes_can_be_left_out_as_llmscale_run_does(capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = _render(capsys, "-f", str(ROOT / "manifests/samples/batch-trough.yaml"),
                        "--interactive-priority-class", "", "--batch-priority-class", "")
    deploys = [d for d in yaml.safe_load_all(out) if d and d["kind"] == "Deployment"]
    assert len(deploys) == 2  # interactive and batch pools
    assert all("priorityClassName" not in d["spec"]["template"]["spec"] for d in deploys)


def test_inference_pools_follow_each_objects_children_when_asked(capsys: pytest.CaptureFixture[str]) -> None:
    _, plain, _ = _render(capsys, "-f", str(ROOT / "manifests/samples/chat.yaml"))
    _, out, _ = _render(capsys, "--inference-pools", "-f", str(ROOT / "manifests/samples/chat.yaml"))
    docs = [d for d in yaml.safe_load_all(out) if d]
    assert docs[:-1] == [d for d in yaml.safe_load_all(plain) if d]
    pool = docs[-1]
    assert (pool["apiVersion"], pool["kind"], pool["metadata"]["name"]) == (
        "inference.networking.k8s.io/v1", "InferencePool", "chat")
    assert pool["metadata"]["ownerReferences"][0]["uid"] == PLACEHOLDER_UID
    assert pool["spec"]["selector"]["matchLabels"] == docs[0]["spec"]["selector"]  # the Service's pods


def test_a_disabled_inference_pool_is_not_printed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(_doc(routing={"inferencePool": "Disabled"})))
    _, out, _ = _render(capsys, "--inference-pools", "-f", str(path))
    assert "InferencePool" not in {d["kind"] for d in yaml.safe_load_all(out) if d}


def _doc(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "llmscale.dev/v1alpha1", "kind": "LLMDeployment", "metadata": {"name": "m"},
            "spec": {"model": {"name": "m", "preset": "llama-3.1-8b"}, **spec}}


def _render_mode(mode: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    f = tmp_path / "m.yaml"
    f.write_text(yaml.safe_dump(_doc(mode=mode)))
    return _render(capsys, "-f", str(f))


@pytest.mark.parametrize("mode", ["Advisory", "Paused"])
def test_a_mode_that_writes_nothing_renders_nothing(mode: str, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = _render_mode(mode, tmp_path, capsys)
    assert (status, out) == (0, "")


@pytest.mark.parametrize("mode", ["Advisory", "Paused"])
def test_a_mode_that_writes_nothing_says_why_it_renders_nothing(mode: str, tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    _, _, err = _render_mode(mode, tmp_path, capsys)
    assert f"spec.mode is {mode}" in err


@pytest.mark.parametrize(("spec", "field"), [
    ({"replicas": {"min": -1}}, "spec.replicas.min"),
    ({"replicas": {"min": 4, "max": 2}}, "spec.replicas"),
    ({"engine": {"type": "tgi"}}, "spec.engine.type"),
    ({"template": {"spec": {"containers": [{"name": "engine", "args": ["--model", "x"]}]}}},
     "spec.template.spec.containers[engine].args"),
])
def test_an_invalid_spec_is_one_line_naming_the_field(spec: dict[str, Any], field: str, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "bad.yaml"
    f.write_text(yaml.safe_dump_all([_doc(), {**_doc(**spec), "metadata": {"name": "bad", "namespace": "x"}}]))
    status, out, err = _render(capsys, "-f", str(f))
    assert status == 2 and out == ""
    (line,) = err.strip().splitlines()
    assert line.startswith(f"llmscale render: error: {f}: LLMDeployment x/bad: "), line
    assert field in line and "Traceback" not in err


def test_stdin_is_read_skipping_other_kinds(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                               monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    text = yaml.safe_dump_all([{"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}}, _doc()])
    monkeypatch.setattr("sys.stdin", io.StringIO(text))
    status, out, err = _render(capsys, "-f", "-", "-n", "team-a")
    assert status == 0
    assert "skipped Secret s" in err
    assert [d for d in yaml.safe_load_all(out) if d] == _expected(_doc(), "team-a")
