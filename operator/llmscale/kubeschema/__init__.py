"""The Kubernetes Pod schema, as the pinned API server serves it, for ``spec.template``.

``podspec.json`` (package data) holds the OpenAPI v3 component schemas of ``PodTemplateSpec``
and everything it references, copied from the ``/openapi/v3/api/v1`` document of the local
cluster's kube-apiserver (the version in :data:`KUBERNETES_VERSION`, pinned in
``llmscale/localcluster/build.sh``), with descriptions removed and ``ObjectMeta`` left out (a pod
template's metadata is its labels and annotations). ``tools/update-pod-schema.sh`` rewrites it from
a running local cluster with :func:`extract`; a test compares it with what that API server serves.

Two users:

- :func:`pod_template_structural` turns it into the structural schema the CRD embeds at
  ``spec.template``, so the API server validates a template as a Pod template (field names, types,
  enums, list keys) rather than as a free-form map;
- :func:`field_schema` answers, for the template merge (``llmscale.controller.manifests.merge``), the schema
  of one field: its type, and for a list its patch strategy and merge key
  (``x-kubernetes-patch-strategy``, ``x-kubernetes-patch-merge-key``), the rules Kubernetes's
  strategic merge patch follows.

Pure module: reads its own package data, nothing else.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from functools import lru_cache
from importlib import resources
from typing import Any

__all__ = [
    "KUBERNETES_VERSION",
    "ROOT",
    "definitions",
    "extract",
    "field_schema",
    "pod_template_structural",
    "resolve",
]

#: The kube-apiserver whose ``/openapi/v3/api/v1`` ``podspec.json`` was copied from.
KUBERNETES_VERSION = "v1.36.3"
#: The component a template is (``#/components/schemas/<ROOT>``).
ROOT = "io.k8s.api.core.v1.PodTemplateSpec"
_OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
_PREFIX = "#/components/schemas/"
_INT_OR_STRING = "int-or-string"

#: The template metadata llmscale takes: labels and annotations (string maps); the rest of
#: ObjectMeta (name, namespace, owner references...) has no meaning in a pod template.
_TEMPLATE_METADATA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
    },
}

# Keywords a CRD's structural schema accepts (apiextensions.k8s.io/v1 JSONSchemaProps) that the
# served Pod schema uses; the patch-strategy extensions, unions and GVK markers are not among them.
_CRD_KEYWORDS = frozenset({
    "type", "format", "enum", "default", "required", "properties", "additionalProperties", "items",
    "x-kubernetes-list-type", "x-kubernetes-list-map-keys", "x-kubernetes-map-type",
    "x-kubernetes-int-or-string", "anyOf", "minimum", "maximum", "pattern", "minItems", "maxItems",
})


def _refs(node: Any, found: set[str]) -> None:
    if isinstance(node, Mapping):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                found.add(value.removeprefix(_PREFIX))
            else:
                _refs(value, found)
    elif isinstance(node, list):
        for value in node:
            _refs(value, found)


def _strip(node: Any) -> Any:
    if isinstance(node, Mapping):
        return {k: _strip(v) for k, v in sorted(node.items()) if k != "description"}
    if isinstance(node, list):
        return [_strip(v) for v in node]
    return node


def extract(openapi_v3: Mapping[str, Any]) -> dict[str, Any]:
    """Return what ``podspec.json`` holds, from the API server's ``/openapi/v3/api/v1`` document.

    The component schemas reachable from :data:`ROOT`, except ``ObjectMeta`` and what only it
    references, without descriptions, keys sorted: ``{"kubernetesVersion": ..., "schemas": {...}}``
    (the version is the caller's to fill; :data:`KUBERNETES_VERSION` is written).

    Raises:
        KeyError: the document has no ``components.schemas`` or no :data:`ROOT`.
    """
    schemas = openapi_v3["components"]["schemas"]
    seen: set[str] = set()
    todo = [ROOT]
    while todo:
        name = todo.pop()
        if name in seen or name == _OBJECT_META:
            continue
        seen.add(name)
        found: set[str] = set()
        _refs(schemas[name], found)
        todo.extend(sorted(found - seen))
    return {"kubernetesVersion": KUBERNETES_VERSION, "schemas": {n: _strip(schemas[n]) for n in sorted(seen)}}


@lru_cache(maxsize=1)
def _document() -> dict[str, Any]:
    text = resources.files(__name__).joinpath("podspec.json").read_text(encoding="utf-8")
    doc: dict[str, Any] = json.loads(text)
    return doc


def definitions() -> dict[str, Any]:
    """Return the component schemas of ``podspec.json`` by name (a fresh copy)."""
    return copy.deepcopy(_document()["schemas"])


def resolve(node: Mapping[str, Any]) -> dict[str, Any]:
    """Return ``node`` with a ``$ref`` (bare, or as the single ``allOf`` the API server writes)
    replaced by its target, the node's own keywords kept on top; other nodes as they are."""
    schemas = _document()["schemas"]
    out = dict(node)
    ref = out.pop("$ref", None)
    all_of = out.get("allOf")
    if ref is None and isinstance(all_of, list) and len(all_of) == 1 and "$ref" in all_of[0]:
        out.pop("allOf")
        ref = all_of[0]["$ref"]
    if ref is None:
        return out
    name = str(ref).removeprefix(_PREFIX)
    if name == _OBJECT_META:
        return {**_TEMPLATE_METADATA, **{k: v for k, v in out.items() if k != "default"}}
    return {**resolve(schemas[name]), **out}


def field_schema(path: tuple[str, ...]) -> dict[str, Any] | None:
    """Return the resolved schema of the template field at ``path`` (property names; ``"[]"`` for
    the items of a list, ``"*"`` for the values of a map), or ``None`` when the Pod schema has no
    such field."""
    node: dict[str, Any] = resolve(_document()["schemas"][ROOT])
    for step in path:
        if step == "[]":
            items = node.get("items")
            if not isinstance(items, Mapping):
                return None
            node = resolve(items)
        elif step == "*":
            extra = node.get("additionalProperties")
            if not isinstance(extra, Mapping):
                return None
            node = resolve(extra)
        else:
            prop = (node.get("properties") or {}).get(step)
            if not isinstance(prop, Mapping):
                return None
            node = resolve(prop)
    return node


def _structural(node: Mapping[str, Any], path: str, list_map_key: bool = False) -> dict[str, Any]:
    """One resolved node of the Pod schema in the structural form a CRD demands (see
    :func:`pod_template_structural`)."""
    node = resolve(node)
    if node.get("format") == _INT_OR_STRING or "oneOf" in node:
        # IntOrString and Quantity: "oneOf [integer|number, string]" in the served schema; a CRD
        # spells it x-kubernetes-int-or-string (the form controller-gen writes for both).
        return {"x-kubernetes-int-or-string": True, "anyOf": [{"type": "integer"}, {"type": "string"}]}
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key not in _CRD_KEYWORDS or key in ("properties", "items", "additionalProperties", "anyOf"):
            continue
        if key == "default" and not list_map_key:
            # Defaults are the API server's to fill in the pods; in the template they would only
            # add noise. A list-map key keeps its default: a CRD requires map keys to be required
            # or defaulted (containerPort's protocol "TCP").
            continue
        if key == "format" and value not in ("int32", "int64", "byte", "date-time", "date", "double", "float"):
            continue
        out[key] = copy.deepcopy(value)
    if "type" not in out:
        raise ValueError(f"{path}: the Pod schema gives no type")
    if "properties" in node:
        out["properties"] = {name: _structural(sub, f"{path}.{name}") for name, sub in sorted(node["properties"].items())}
    if isinstance(node.get("additionalProperties"), Mapping):
        out["additionalProperties"] = _structural(node["additionalProperties"], f"{path}.*")
    if "items" in node:
        keys = set(node.get("x-kubernetes-list-map-keys") or ())
        item = _structural(node["items"], f"{path}[]")
        for key in keys:
            prop = resolve((resolve(node["items"]).get("properties") or {})[key])
            if key not in item.get("required", ()) and "default" in prop:
                item["properties"][key] = _structural(prop, f"{path}[].{key}", list_map_key=True)
        out["items"] = item
    return out


@lru_cache(maxsize=1)
def _structural_root() -> dict[str, Any]:
    root = _structural(_document()["schemas"][ROOT], "template")
    # A template is merged over a generated pod that has the engine container already: it may
    # give only scheduling fields, so PodSpec's required "containers" is not required here.
    pod_spec = root["properties"]["spec"]
    pod_spec["required"] = [r for r in pod_spec.get("required", ()) if r != "containers"]
    if not pod_spec["required"]:
        del pod_spec["required"]
    return root


def pod_template_structural() -> dict[str, Any]:
    """Return the structural OpenAPI v3 schema of a pod template for a CRD (a fresh dict).

    ``{"type": "object", "properties": {"metadata": {labels, annotations}, "spec": <PodSpec>}}``:
    every ``$ref`` inlined, IntOrString and Quantity as ``x-kubernetes-int-or-string``, list types
    and map keys kept, descriptions and defaults left out (except the defaults of list-map keys),
    and the strategic-merge extensions, which a CRD schema cannot carry, dropped. ``containers``
    is not required: a template may set only what it adds to the generated pod.

    Raises:
        ValueError: a node of the Pod schema has no type (the schema is not what this code reads).
    """
    return copy.deepcopy(_structural_root())
