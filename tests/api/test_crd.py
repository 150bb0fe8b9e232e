"""The generated CRD: in step with the models, structural, defaulted as pydantic defaults.

The structural rules checked here are those of the Kubernetes docs ("Specifying a structural
schema") and of apiextensions-apiserver's CRD validation; the defaulting emulation follows
``apiextensions-apiserver/pkg/apiserver/schema/defaulting/algorithm.go`` (missing property with a
default: set it, then recurse into every present property).
"""

from __future__ import annotations

import copy
import difflib
from pathlib import Path
from typing import Any

import pytest
import yaml

from llmscale import api
from llmscale.cli import main as cli_main
from llmscale.crd import CRD_NAME, PRINTER_COLUMNS, crd, crd_yaml, openapi_schema

REPO = Path(__file__).resolve().parents[2]
CHECKED_IN = REPO / "crds" / "llmdeployments.llmscale.dev.yaml"

MINIMAL_SPEC = {"model": {"name": "chat", "preset": "llama-3.1-8b"}}


def _walk(node: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, Any]]]:
    """Every schema node with its dotted path (``[]`` for list items)."""
    out = [(path, node)]
    for name, sub in node.get("properties", {}).items():
        out.extend(_walk(sub, f"{path}.{name}" if path else name))
    if "items" in node:
        out.extend(_walk(node["items"], f"{path}[]"))
    if isinstance(node.get("additionalProperties"), dict):
        out.extend(_walk(node["additionalProperties"], f"{path}.*"))
    return out


def apply_defaults(obj: Any, schema: dict[str, Any]) -> Any:
    """Default ``obj`` in place the way the API server does (algorithm.go), and return it."""
    if isinstance(obj, dict):
        for name, prop in schema.get("properties", {}).items():
            if name not in obj and "default" in prop:
                obj[name] = copy.deepcopy(prop["default"])
        for name, value in obj.items():
            if name in schema.get("properties", {}):
                apply_defaults(value, schema["properties"][name])
    elif isinstance(obj, list) and "items" in schema:
        for item in obj:
            apply_defaults(item, schema["items"])
    return obj


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    return openapi_schema()


# --------------------------------------------------------------------------------------------
# In step with the models
# --------------------------------------------------------------------------------------------


def test_checked_in_crd_equals_the_generated_one() -> None:
    generated = crd_yaml()
    checked_in = CHECKED_IN.read_text(encoding="utf-8") if CHECKED_IN.exists() else ""
    diff = "".join(
        difflib.unified_diff(
            checked_in.splitlines(keepends=True),
            generated.splitlines(keepends=True),
            "crds/ (checked in)",
            "llmscale crd (generated now)",
            n=2,
        )
    )
    assert not diff, f"Regenerate with `make crd`:\n{diff[:4000]}"


def test_cli_prints_the_crd(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["crd"]) == 0
    assert capsys.readouterr().out == crd_yaml()


def test_cli_checks_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "crd.yaml"
    assert cli_main(["crd"]) == 0
    out.write_text(capsys.readouterr().out, encoding="utf-8")  # llmscale crd > crd.yaml
    assert cli_main(["crd", "--check", str(out)]) == 0

    out.write_text(crd_yaml().replace("min <= self.max", "min < self.max"), encoding="utf-8")
    capsys.readouterr()
    assert cli_main(["crd", "--check", str(out)]) == 1
    assert "differs" in capsys.readouterr().err


def test_yaml_round_trips_to_the_dict() -> None:
    assert yaml.safe_load(crd_yaml()) == crd()


# --------------------------------------------------------------------------------------------
# Names, subresources, printer columns
# --------------------------------------------------------------------------------------------


def test_the_crd_names_the_llmdeployment_kind() -> None:
    doc = crd()
    assert doc["metadata"]["name"] == CRD_NAME == "llmdeployments.llmscale.dev"
    spec = doc["spec"]
    assert spec["group"] == "llmscale.dev"
    assert spec["names"]["kind"] == "LLMDeployment"
    assert spec["names"]["plural"] == "llmdeployments"
    assert spec["names"]["singular"] == "llmdeployment"
    assert spec["names"]["shortNames"] == ["llmdep"]


def test_the_crd_is_namespaced() -> None:
    assert crd()["spec"]["scope"] == "Namespaced"


def test_the_crd_serves_one_version_with_a_status_subresource() -> None:
    [version] = crd()["spec"]["versions"]
    assert (version["name"], version["served"], version["storage"]) == ("v1alpha1", True, True)
    # The status subresource: status is written through /status only (by the operator), and a
    # write to the main resource cannot change status, nor a /status write change spec.
    assert version["subresources"] == {"status": {}}


def test_printer_columns_point_at_status_fields_of_their_type(schema: dict[str, Any]) -> None:
    doc = crd()
    columns = doc["spec"]["versions"][0]["additionalPrinterColumns"]
    # What a person scans first (issue 14): the Ready condition, SLO %, $/M tokens; the rest with -o wide.
    # Min and Max beside the count, as the HPA (MINPODS, MAXPODS); the queue target with -o wide.
    assert [c["name"] for c in columns if not c.get("priority")] == ["Ready", "Min", "Max", "Desired", "Serving",
                                                                      "SLO%", "USD/Mtok", "Mode", "Age"]
    assert [c["name"] for c in columns if c.get("priority") == 1] == ["Headroom", "Queue", "Queue-Target", "KV",
                                                                       "SLO%-24h", "GPU-h-24h"]
    assert columns == list(PRINTER_COLUMNS)
    for column in columns:
        if column["name"] == "Age":
            assert column["jsonPath"] == ".metadata.creationTimestamp"
            continue
        if column["name"] == "Ready":
            assert column["jsonPath"] == '.status.conditions[?(@.type=="Ready")].status'
            condition = schema["properties"]["status"]["properties"]["conditions"]["items"]
            assert condition["properties"]["status"]["type"] == column["type"]
            continue
        node = schema
        if column["jsonPath"].startswith(".spec."):
            node = schema["properties"]["spec"]
            for part in column["jsonPath"].strip(".").split(".")[1:]:
                node = node["properties"][part]
            assert node["type"] == column["type"] and "default" in node, column  # shown for every object
            continue
        for part in column["jsonPath"].strip(".").split("."):
            node = node["properties"][part]
        assert node["type"] == column["type"], column


# --------------------------------------------------------------------------------------------
# Structural schema
# --------------------------------------------------------------------------------------------

FORBIDDEN = ("$ref", "$defs", "anyOf", "allOf", "oneOf", "not", "title", "const", "nullable")


INT_OR_STRING = {"x-kubernetes-int-or-string": True, "anyOf": [{"type": "integer"}, {"type": "string"}]}


def test_every_node_is_structural(schema: dict[str, Any]) -> None:
    for path, node in _walk(schema):
        if node.get("x-kubernetes-int-or-string"):
            # The one anyOf a structural schema allows (IntOrString, Quantity in the Pod template).
            assert node == INT_OR_STRING, path
            continue
        assert "type" in node, f"{path or '<root>'} has no type"
        assert node["type"] in {"object", "array", "string", "integer", "number", "boolean"}, path
        for keyword in FORBIDDEN:
            assert keyword not in node, f"{path}: {keyword}"
        assert node.get("additionalProperties") is not False, f"{path}: additionalProperties: false"
        assert not ("properties" in node and "additionalProperties" in node), path
        for bound in ("exclusiveMinimum", "exclusiveMaximum"):
            if bound in node:
                assert node[bound] is True, f"{path}: {bound} must be the OpenAPI v3.0 boolean"
                assert ("minimum" if bound == "exclusiveMinimum" else "maximum") in node, path


def test_every_field_has_a_plain_text_description(schema: dict[str, Any]) -> None:
    for path, node in _walk(schema):
        if path in {"metadata"} or (path.endswith("[]") and node.get("type") != "object"):
            continue  # metadata is the API server's; scalar list items are described by the list
        if path.startswith("spec.template."):
            continue  # the Kubernetes Pod template, embedded without its descriptions (kubeschema)
        text = node.get("description", "")
        assert text.strip(), f"{path or '<root>'} has no description"
        for markup in ("``", ":class:", ":mod:", ":func:", ":data:"):
            assert markup not in text, f"{path}: {markup} in {text!r}"


def test_only_status_policy_state_keeps_unknown_fields(schema: dict[str, Any]) -> None:
    keeping = [path for path, node in _walk(schema) if node.get("x-kubernetes-preserve-unknown-fields")]
    assert keeping == ["status.policyState"]


def test_optional_fields_are_not_required(schema: dict[str, Any]) -> None:
    spec = schema["properties"]["spec"]
    model = spec["properties"]["model"]
    assert spec["required"] == ["model"]
    assert model["required"] == ["name"]
    assert {"preset", "architecture"} <= set(model["properties"])
    assert "required" not in spec["properties"]["engine"]
    assert schema["required"] == ["spec"]
    assert "required" not in schema["properties"]["status"]


def test_status_has_no_defaults(schema: dict[str, Any]) -> None:
    # Status is observed state: a default would be an observation nobody made.
    assert [path for path, node in _walk(schema["properties"]["status"]) if "default" in node] == []


def test_conditions_merge_by_type(schema: dict[str, Any]) -> None:
    conditions = schema["properties"]["status"]["properties"]["conditions"]
    assert conditions["x-kubernetes-list-type"] == "map"
    assert conditions["x-kubernetes-list-map-keys"] == ["type"]
    assert "type" in conditions["items"]["required"]


# --------------------------------------------------------------------------------------------
# Validation the API server enforces
# --------------------------------------------------------------------------------------------


def _at(schema: dict[str, Any], path: str) -> dict[str, Any]:
    node = schema
    for part in path.split("."):
        node = node["items"] if part == "[]" else node["properties"][part]
    return node


def test_cel_rules_are_carried_through(schema: dict[str, Any]) -> None:
    rules = {
        path: [v["rule"] for v in node["x-kubernetes-validations"]]
        for path, node in _walk(schema)
        if "x-kubernetes-validations" in node
    }
    assert rules == {
        "": [api.NAME_RULE["rule"]],
        "spec": [
            "!has(self.replicas) || self.replicas.min > 0 || (has(self.scaling) && has(self.scaling.wake))",
            "!(has(self.scaleTargetRef) && has(self.template))",
            "!has(self.batch) || has(self.scaleTargetRef) == has(self.batch.scaleTargetRef)",
            "!(has(self.scaleTargetRef) && self.headroom.warmNodes)",
        ],
        "spec.model": ["has(self.preset) != has(self.architecture)"],
        "spec.replicas": ["self.min <= self.max", "!has(self.schedule) || self.schedule.all(s, s.min <= self.max)"],
        "spec.replicas.schedule[]": ["self.start != self.end"],
        "spec.batch": ["self.minReplicas <= (has(self.maxReplicas) ? self.maxReplicas : self.replicas)"],
        "spec.batch.windows[]": ["self.start != self.end"],
    }
    messages = _at(schema, "spec.replicas")["x-kubernetes-validations"][0]["message"]
    assert "min must be less than or equal to" in messages
    # min 0 without a wake query is refused naming the field, not the whole spec.
    assert _at(schema, "spec")["x-kubernetes-validations"][0]["fieldPath"] == ".replicas.min"


def test_cel_rule_cost_is_bounded(schema: dict[str, Any]) -> None:
    """The API server estimates each rule's cost from maxLength/maxItems and rejects unbounded ones.

    Every string the rules may compare has a maxLength (or an enum), and every list above a rule has
    a maxItems (apiextensions-apiserver/pkg/apiserver/schema/cel/compilation.go, cost estimation).
    """
    for path, node in _walk(schema):
        if "x-kubernetes-validations" not in node:
            continue
        if path == "":  # the root's rule reads metadata.name only
            assert "maxLength" in _at(schema, "metadata.name")
            continue
        for name, prop in node.get("properties", {}).items():
            if prop["type"] == "string":
                assert "maxLength" in prop or "enum" in prop, f"{path}.{name}"
        parts = path.replace("[]", ".[]").split(".")
        for i in range(1, len(parts)):
            ancestor = _at(schema, ".".join(parts[:i]))
            if ancestor["type"] == "array":
                assert "maxItems" in ancestor, ".".join(parts[:i])


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        pytest.param("spec.engine.type", {"enum": ["vllm", "sglang", "mock"]}, id="engine-enum"),
        pytest.param("spec.resources.gpusPerReplica", {"minimum": 1}, id="positive-gpus"),
        pytest.param(
            "spec.scaling.targets.kvCacheUtilization",
            {"minimum": 0, "exclusiveMinimum": True, "maximum": 1},
            id="kv-fraction",
        ),
        pytest.param(
            "spec.scaling.tolerance", {"minimum": 0, "maximum": 1, "exclusiveMaximum": True}, id="tolerance"
        ),
        pytest.param(
            "spec.batch.windows.[].start",
            {"pattern": "^([01][0-9]|2[0-3]):[0-5][0-9]$", "maxLength": 5},
            id="hhmm-start",
        ),
        pytest.param(
            "spec.batch.windows.[].end", {"pattern": "^([01][0-9]|2[0-3]):[0-5][0-9]$"}, id="hhmm-end"
        ),
        pytest.param("spec.batch.windows.[].timezone", {"default": "UTC"}, id="tz-default"),
    ],
)
def test_field_validation(schema: dict[str, Any], path: str, expected: dict[str, Any]) -> None:
    node = _at(schema, path)
    assert {key: node.get(key) for key in expected} == expected


def test_timezones_are_the_pinned_tzdata_zones(schema: dict[str, Any]) -> None:
    enum = _at(schema, "spec.batch.windows.[].timezone")["enum"]
    assert enum == list(api.iana_timezones())
    assert {"UTC", "Europe/London", "America/Los_Angeles", "Asia/Kolkata"} <= set(enum)
    assert "Mars/Olympus_Mons" not in enum


# --------------------------------------------------------------------------------------------
# Defaults: what the API server fills equals what pydantic fills
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "spec",
    [
        pytest.param(MINIMAL_SPEC, id="minimal"),
        pytest.param({**MINIMAL_SPEC, "replicas": {"max": 3}}, id="partial-replicas"),
        pytest.param(
            {
                **MINIMAL_SPEC,
                "scaling": {"scaleDown": {"periodSeconds": 30}, "targets": {"kvCacheUtilization": 0.9}},
            },
            id="partial-scaling",
        ),
        pytest.param(
            {**MINIMAL_SPEC, "batch": {"windows": [{"start": "22:00", "end": "06:00"}]}},
            id="batch-window-defaults",
        ),
        pytest.param(
            {
                "model": {
                    "name": "custom",
                    "architecture": {
                        "numHiddenLayers": 32,
                        "numAttentionHeads": 32,
                        "numKeyValueHeads": 8,
                        "headDim": 128,
                        "parameters": 8_000_000_000,
                    },
                },
                "engine": {"type": "sglang"},
            },
            id="architecture-sglang",
        ),
    ],
)
def test_api_server_defaulting_equals_pydantic_defaults(schema: dict[str, Any], spec: dict[str, Any]) -> None:
    defaulted = apply_defaults(copy.deepcopy(spec), schema["properties"]["spec"])
    assert defaulted == api.LLMDeploymentSpec.model_validate(spec).to_wire()
    # And the defaulted object is itself a valid spec, unchanged by a second parse.
    assert api.LLMDeploymentSpec.model_validate(defaulted).to_wire() == defaulted


def test_scale_down_default_is_gentler_than_scale_up(schema: dict[str, Any]) -> None:
    scaling = apply_defaults({}, _at(schema, "spec.scaling"))
    assert scaling["scaleDown"]["stabilizationWindowSeconds"] == 300
    assert scaling["scaleDown"]["maxReplicasPerPeriod"] == 1
    assert scaling["scaleUp"]["stabilizationWindowSeconds"] == 120


def test_object_defaults_pass_their_own_cel_rules(schema: dict[str, Any]) -> None:
    """The API server validates a default as written (CEL included), before nested defaulting.

    So the default of spec.replicas must carry both min and max (``default: {}`` would fail
    ``self.min <= self.max`` with "no such key" and the CRD would be rejected).
    """
    replicas = _at(schema, "spec.replicas")
    assert replicas["default"] == {"min": 1, "max": 8, "schedule": []}
    for path, node in _walk(schema):
        if node.get("type") == "object" and "default" in node:
            # Written whole: every property with a default of its own is present in the parent's.
            missing = [
                n
                for n, p in node.get("properties", {}).items()
                if "default" in p and n not in node["default"]
            ]
            assert missing == [], f"{path}: {missing}"


def test_omitting_an_object_equals_giving_it_empty(schema: dict[str, Any]) -> None:
    """No trap: an object's default is exactly what its fields default to on their own.

    Otherwise ``scaleDown: {periodSeconds: 30}`` would silently lose a default that omitting
    ``scaleDown`` keeps (as it did before scale-down got its own ScaleDownBehavior defaults).
    """
    for path, node in _walk(schema):
        if node.get("type") == "object" and "default" in node:
            assert apply_defaults({}, node) == node["default"], path
