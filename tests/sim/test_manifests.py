"""``llmscale simulate --autoscaler FILE`` / ``--setting POLICY=VALUE``: the user's own KEDA
ScaledObject or HPA beside llmscale (:mod:`llmscale.sim.manifests`).

The reference: a manifest that says what a built-in baseline does (production-stack's KEDA on the
queue; an HPA on running requests) must simulate exactly as that baseline at the same setting.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from llmscale.api import LLMDeployment
from llmscale.cli import main
from llmscale.sim.manifests import UnsupportedAutoscaler, autoscaler_from_manifest

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "benchmarks" / "chat-llama-70b-h100.yaml"
SHORT = ["simulate", "--spec", str(SPEC), "--duration", "20m", "--warmup", "5m", "--capacity-rps", "5",
         "--quiet", "-o", "json"]


def scaled_object(query: str = "sum(vllm:num_requests_waiting{model_name=\"x\"})", threshold: Any = "5",
                  **extra: Any) -> dict[str, Any]:
    trigger = {"type": "prometheus", "metadata": {"serverAddress": "http://p:9090", "query": query,
                                                  "threshold": threshold}}
    return {"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "metadata": {"name": "q"},
            "spec": {"scaleTargetRef": {"name": "vllm"}, "minReplicaCount": 1, "maxReplicaCount": 64,
                     "triggers": [trigger], **extra}}


def hpa(metric: str = "vllm_num_requests_running", value: Any = "20", kind: str = "Pods",
        target_type: str = "AverageValue", **extra: Any) -> dict[str, Any]:
    source = {"metric": {"name": metric}, "target": {"type": target_type, "averageValue": value}}
    return {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": {"name": "h"},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "vllm"},
                     "minReplicas": 1, "maxReplicas": 64, "metrics": [{"type": kind, kind.lower(): source}],
                     **extra}}


def _spec() -> Any:
    return LLMDeployment.model_validate(yaml.safe_load(SPEC.read_text())).spec


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, dict[str, Any]]:
    assert main([*SHORT, *argv]) == 0, capsys.readouterr().err
    results = json.loads(capsys.readouterr().out)["results"]
    out = {}
    for r in results:
        r.pop("wall_s")
        out[r.pop("policy")] = r
    return out


def test_a_scaled_object_of_the_built_in_kind_simulates_as_the_built_in(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "so.yaml"
    f.write_text(yaml.safe_dump_all([scaled_object(threshold="3"), hpa(value="20")]))
    got = _run(capsys, "--policy", "keda-queue", "--setting", "keda-queue=3", "--setting", "hpa=20",
               "--autoscaler", str(f))
    assert set(got) == {"keda-queue", "hpa", "yours: ScaledObject/q", "yours: HorizontalPodAutoscaler/h"}
    assert got["yours: ScaledObject/q"] == got["keda-queue"]
    assert got["yours: HorizontalPodAutoscaler/h"] == got["hpa"]


def test_the_manifests_settings_are_used_with_the_specs_bounds_as_fallback() -> None:
    auto = autoscaler_from_manifest(hpa(minReplicas=3, maxReplicas=9,
                                        behavior={"scaleDown": {"stabilizationWindowSeconds": 600},
                                                  "scaleUp": {"stabilizationWindowSeconds": 30}}), _spec())
    assert (auto.min_replicas, auto.max_replicas, auto.down_window, auto.up_window) == (3, 9, 600.0, 30.0)
    assert (auto.kind, auto.metric, auto.target) == ("pods", "running", 20.0)
    so = autoscaler_from_manifest(scaled_object(
        query="sum(vllm:num_requests_waiting) + sum(vllm:num_requests_running)", threshold="500m",
        advanced={"horizontalPodAutoscalerConfig": {"behavior": {"scaleDown": {"stabilizationWindowSeconds": 60}}}}),
        _spec())
    assert (so.kind, so.metric, so.target, so.down_window) == ("external", "running_plus_waiting", 0.5, 60.0)
    bare = dict(scaled_object())
    bare["spec"] = {k: v for k, v in bare["spec"].items() if not k.endswith("ReplicaCount")}
    auto = autoscaler_from_manifest(bare, _spec())
    assert (auto.min_replicas, auto.max_replicas) == (1, 64)  # from spec.replicas


@pytest.mark.parametrize(("doc", "says"), [
    (hpa(metric="cpu", kind="Resource"), "spec.metrics[0].type"),
    (hpa(metric="http_requests_total"), "num_requests_waiting"),
    (hpa(target_type="Utilization"), "only AverageValue"),
    (hpa(value="-1"), "positive quantity"),
    (hpa(value="many"), "positive quantity"),
    (scaled_object(query="sum(rate(http_requests_total[1m]))"), "num_requests_running"),
    (scaled_object(threshold="0"), "positive quantity"),
    ({**scaled_object(), "spec": {"triggers": [{"type": "cpu", "metadata": {"value": "50"}}]}}, "type prometheus"),
    ({"apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler", "spec": {}}, "autoscaling/v2"),
    ({"apiVersion": "apps/v1", "kind": "Deployment"}, "ScaledObject"),
    (hpa(minReplicas=9, maxReplicas=3), "above max"),
])
def test_what_cannot_be_replayed_is_refused_naming_the_field(doc: dict[str, Any], says: str) -> None:
    with pytest.raises(UnsupportedAutoscaler, match=None) as exc:
        autoscaler_from_manifest(doc, _spec())
    assert says in str(exc.value), str(exc.value)


@pytest.mark.parametrize(("argv", "says"), [
    (["--setting", "keda=3"], 'did you mean "keda-llmd" or "keda-queue"'),
    (["--setting", "hpa=0"], "must be a number > 0"),
    (["--setting", "hpa=lots"], "must be a number > 0"),
    (["--autoscaler", "/nonexistent.yaml"], "--autoscaler /nonexistent.yaml"),
    (["--autoscaler", str(SPEC)], "no ScaledObject or HorizontalPodAutoscaler"),
])
def test_bad_flags_are_one_line_before_simulating(argv: list[str], says: str,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*SHORT, *argv]) == 2
    err = capsys.readouterr().err
    assert says in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
