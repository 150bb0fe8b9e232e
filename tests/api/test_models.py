"""Validation of LLMDeployment specs by the pydantic models (the operator's and simulator's view).

The API server enforces the same rules through the generated CRD (see test_crd.py); these tests
pin the messages users see when a manifest is parsed outside the cluster (``llmscale simulate``).
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from llmscale import api

MODEL = {"name": "chat", "preset": "llama-3.1-8b"}
ARCHITECTURE = {
    "numHiddenLayers": 32,
    "numAttentionHeads": 32,
    "numKeyValueHeads": 8,
    "headDim": 128,
    "parameters": 8_000_000_000,
}


def spec(**fields: Any) -> dict[str, Any]:
    return {"model": MODEL, **fields}


def window(**fields: Any) -> dict[str, Any]:
    return {"batch": {"windows": [{"start": "22:00", "end": "06:00", **fields}]}}


def test_minimal_spec_gets_defaults() -> None:
    parsed = api.LLMDeploymentSpec.model_validate({"model": MODEL})
    assert parsed.engine.type == "vllm"
    assert parsed.engine.profile() == "vllm"
    assert parsed.resources.gpus_per_replica == 1
    assert (parsed.replicas.min, parsed.replicas.max) == (1, 8)
    assert parsed.slo.ttft_p95_seconds == 2.0
    assert parsed.scaling.tick_seconds == 15.0
    assert parsed.scaling.scale_down.stabilization_window_seconds == 300
    assert parsed.scaling.scale_up.stabilization_window_seconds == 120
    assert parsed.headroom.replicas == 0
    assert parsed.batch is None
    assert parsed.model.context_limit_tokens == 8192


def test_whole_object_parses_from_yaml_shape() -> None:
    obj = api.LLMDeployment.model_validate(
        {
            "apiVersion": "llmscale.dev/v1alpha1",
            "kind": "LLMDeployment",
            "metadata": {"name": "chat"},
            "spec": spec(),
        }
    )
    assert obj.spec.model.preset == "llama-3.1-8b"


@pytest.mark.parametrize(
    ("manifest", "message"),
    [
        pytest.param(
            spec(replicas={"min": 5, "max": 2}), "min must be less than or equal to", id="min-gt-max"
        ),
        pytest.param(spec(replicas={"min": 9}), "min must be less than or equal to", id="min-gt-default-max"),
        pytest.param({"model": {"name": "chat"}}, "exactly one of preset and architecture", id="neither"),
        pytest.param(
            {"model": {**MODEL, "architecture": ARCHITECTURE}},
            "exactly one of preset and architecture",
            id="both",
        ),
        pytest.param({"model": {"name": "chat", "preset": "gpt-5"}}, "preset", id="unknown-preset"),
        pytest.param(spec(engine={"type": "tgi"}), "engine.type", id="unknown-engine"),
        pytest.param(spec(resources={"gpusPerReplica": 0}), "gpusPerReplica", id="zero-gpus"),
        pytest.param(
            spec(scaling={"targets": {"kvCacheUtilization": 1.5}}), "kvCacheUtilization", id="kv-over-1"
        ),
        pytest.param(
            spec(scaling={"targets": {"kvCacheUtilization": 0}}), "kvCacheUtilization", id="kv-zero"
        ),
        pytest.param(spec(scaling={"tolerance": 1.0}), "tolerance", id="tolerance-1"),
        pytest.param(spec(**window(start="24:00")), "start", id="hour-24"),
        pytest.param(spec(**window(start="7:00")), "start", id="one-digit-hour"),
        pytest.param(spec(**window(end="06:60")), "end", id="minute-60"),
        pytest.param(spec(**window(end="06:00:00")), "end", id="seconds"),
        pytest.param(spec(**window(end="22:00")), "must differ", id="empty-window"),
        pytest.param(spec(**window(timezone="Mars/Olympus_Mons")), "timezone", id="unknown-timezone"),
        pytest.param(spec(**window(timezone="europe/london")), "timezone", id="timezone-case"),
        pytest.param(spec(**window(days=["Monday"])), "days", id="bad-day"),
        pytest.param(spec(**window(days=[])), "days", id="no-days"),
        pytest.param(spec(batch={"windows": []}), "windows", id="no-windows"),
        pytest.param(
            spec(batch={**window()["batch"], "minReplicas": 2}),
            "spec.batch.minReplicas must be less than or equal to spec.batch.maxReplicas",
            id="batch-min-over-default-replicas",
        ),
        pytest.param(
            spec(batch={**window()["batch"], "replicas": 9, "minReplicas": 3, "maxReplicas": 2}),
            "spec.batch.minReplicas must be less than or equal to spec.batch.maxReplicas",
            id="batch-min-over-max",
        ),
        pytest.param(spec(batch={**window()["batch"], "maxReplicas": -1}), "maxReplicas", id="batch-max-negative"),
        pytest.param(
            spec(batch={**window()["batch"], "completionWindowSeconds": 59}),
            "completionWindowSeconds",
            id="batch-completion-window-under-a-minute",
        ),
        pytest.param(spec(replicasMax=3), "replicasMax", id="unknown-field"),
        pytest.param(spec(replicas={"min": 0}), "spec.replicas.min 0 needs spec.scaling.wake.query",
                     id="min-zero-without-a-wake-query"),
        pytest.param(spec(replicas={"min": 0}, scaling={"wake": {"query": "x", "threshold": -1}}), "threshold",
                     id="negative-wake-threshold"),
    ],
)
def test_invalid_specs_are_rejected(manifest: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError) as caught:
        api.LLMDeploymentSpec.model_validate(manifest)
    assert message in str(caught.value)


@pytest.mark.parametrize(
    "fields",
    [
        pytest.param({"timezone": "Europe/London"}, id="london"),
        pytest.param({"timezone": "America/Los_Angeles", "days": ["Sat", "Sun"]}, id="weekend-la"),
        pytest.param({"start": "00:00", "end": "23:59"}, id="whole-day"),
    ],
)
def test_valid_windows(fields: dict[str, Any]) -> None:
    parsed = api.LLMDeploymentSpec.model_validate(spec(**window(**fields)))
    assert parsed.batch is not None
    [w] = parsed.batch.windows
    for name, value in fields.items():
        assert getattr(w, name) == value


def test_midnight_crossing_window_keeps_its_order() -> None:
    parsed = api.LLMDeploymentSpec.model_validate(spec(**window()))
    assert parsed.batch is not None
    [w] = parsed.batch.windows
    assert w.end_time() < w.start_time()  # crosses midnight
    assert w.days == list(api.DAYS_OF_WEEK)
    assert w.timezone == "UTC"


def test_architecture_instead_of_preset() -> None:
    parsed = api.LLMDeploymentSpec.model_validate({"model": {"name": "custom", "architecture": ARCHITECTURE}})
    assert parsed.model.architecture is not None
    assert parsed.model.architecture.num_key_value_heads == 8


def test_snake_case_names_are_accepted_too() -> None:
    parsed = api.LLMDeploymentSpec.model_validate(
        {"model": MODEL, "replicas": {"min": 2, "max": 4}, "slo": {"ttft_p95_seconds": 1}}
    )
    assert parsed.slo.ttft_p95_seconds == 1


def test_to_wire_is_camel_case_without_unset_optionals() -> None:
    wire = api.LLMDeploymentSpec.model_validate({"model": MODEL}).to_wire()
    assert "ttftP95Seconds" in wire["slo"]
    assert "batch" not in wire  # unset optionals are left out, not written as null


def test_to_wire_round_trips() -> None:
    parsed = api.LLMDeploymentSpec.model_validate({"model": MODEL})
    assert api.LLMDeploymentSpec.model_validate(parsed.to_wire()) == parsed


@pytest.mark.parametrize(
    ("batch", "most", "least"),
    [
        pytest.param({}, 1, 0, id="defaults-as-before-jobs"),
        pytest.param({"replicas": 3}, 3, 0, id="replicas-is-the-bound-as-before"),
        pytest.param({"replicas": 0}, 0, 0, id="replicas-0-still-valid"),
        pytest.param({"replicas": 1, "maxReplicas": 6, "minReplicas": 2}, 6, 2, id="max-wins-over-replicas"),
        pytest.param({"maxReplicas": 0}, 0, 0, id="max-0-turns-the-pool-off"),
    ],
)
def test_batch_pool_bounds(batch: dict[str, Any], most: int, least: int) -> None:
    parsed = api.LLMDeploymentSpec.model_validate(spec(batch={**window()["batch"], **batch}))
    assert parsed.batch is not None
    assert (parsed.batch.most_replicas(), parsed.batch.min_replicas) == (most, least)
    assert parsed.batch.completion_window_seconds == 86_400
    assert api.LLMDeploymentSpec.model_validate(parsed.to_wire()) == parsed


def test_batch_status_round_trips_in_camel_case() -> None:
    status = api.LLMDeploymentStatus.model_validate(
        {
            "batch": {
                "jobsWaiting": 2,
                "tokensOutstanding": 1_500_000,
                "nextWindowOpen": "2025-01-06T22:00:00Z",
                "jobs": [{"name": "nightly", "state": "Waiting", "atRisk": False, "outstandingTokens": 10}],
                "fromANewerVersion": 1,
            }
        }
    )
    assert status.batch is not None and status.batch.jobs[0].state == "Waiting"
    wire = status.to_wire()["batch"]
    assert wire["jobs"] == [{"name": "nightly", "state": "Waiting", "atRisk": False, "outstandingTokens": 10}]
    assert "fromANewerVersion" not in wire
