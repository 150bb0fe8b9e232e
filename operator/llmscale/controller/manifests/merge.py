"""``spec.template`` merged over the pod llmscale generates, as Kubernetes merges a strategic merge
patch, with the parts llmscale owns kept. Pure.

The merge follows the Pod schema of the pinned API server (:mod:`llmscale.kubeschema`), so it
knows every list's patch strategy and merge key the way ``kubectl patch`` does
(``x-kubernetes-patch-strategy`` / ``x-kubernetes-patch-merge-key``; source: Kubernetes docs,
"Update API Objects in Place Using kubectl patch", and ``k8s.io/apimachinery/pkg/util/
strategicpatch``):

- maps (``nodeSelector``, ``labels``, ``resources.requests``, ``securityContext``...) are merged
  key by key, the template winning;
- lists with a merge key are merged item by item on that key — ``containers``, ``initContainers``,
  ``volumes``, ``imagePullSecrets`` and ``env`` by ``name``, ``volumeMounts`` by ``mountPath``,
  ``ports`` by ``containerPort``, ``topologySpreadConstraints`` by ``topologyKey`` —; a new item is
  appended, a matching one merged; ``volumes`` also retain only the keys the template's item gives
  (``retainKeys``: a template ``emptyDir`` replaces a generated ``hostPath``);
- every other list (``tolerations``, ``command``, ``args``...) and every scalar is replaced.

What stays llmscale's (:func:`merge_template` refuses a template that changes it, naming the field
and where to set it instead): the engine container's ``image``, ``command``, ``args``, probes, its
``http`` port and the GPU request, and the labels and annotations llmscale puts on the pod. A
template may repeat them with the same value.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from llmscale.kubeschema import ROOT, definitions, resolve

__all__ = ["ENGINE_CONTAINER", "TemplateConflict", "merge_template", "strategic_merge"]

#: Name of the engine container in the generated pod (the template's container of that name is
#: merged into it).
ENGINE_CONTAINER = "engine"

_GENERATED_BY = "llmscale sets"


class TemplateConflict(ValueError):
    """``spec.template`` sets a field llmscale owns to another value, or cannot be merged.

    Attributes:
        field: the field, spelt from ``spec.template`` (``spec.template.spec.containers[engine].args``).
    """

    def __init__(self, field: str, why: str) -> None:
        self.field = field
        super().__init__(f"{field}: {why}")


def _strategies(schema: Mapping[str, Any]) -> set[str]:
    return {s for s in str(schema.get("x-kubernetes-patch-strategy", "")).split(",") if s}


def _merge_list(base: list[Any], patch: list[Any], schema: Mapping[str, Any]) -> list[Any]:
    strategies = _strategies(schema)
    if "merge" not in strategies:
        return copy.deepcopy(patch)
    items = resolve(schema["items"]) if isinstance(schema.get("items"), Mapping) else {}
    key = schema.get("x-kubernetes-patch-merge-key")
    if key is None:  # a list of scalars merged as a set, in order
        out = copy.deepcopy(base)
        out.extend(copy.deepcopy(v) for v in patch if v not in out)
        return out
    out = copy.deepcopy(base)
    where = {item.get(key): i for i, item in enumerate(out) if isinstance(item, Mapping)}
    for item in patch:
        if not isinstance(item, Mapping) or item.get(key) not in where:
            out.append(copy.deepcopy(item))
            continue
        i = where[item[key]]
        merged = strategic_merge(out[i], item, items)
        if "retainKeys" in strategies:
            merged = {k: v for k, v in merged.items() if k in item or k == key}
        out[i] = merged
    return out


def strategic_merge(base: Any, patch: Any, schema: Mapping[str, Any]) -> Any:
    """Return ``patch`` merged over ``base`` by the strategic-merge rules of ``schema`` (a resolved
    node of the Pod schema; ``{}`` for a field it does not know, merged as a plain map). Neither
    argument is changed."""
    if patch is None:
        return copy.deepcopy(base)
    if isinstance(base, Mapping) and isinstance(patch, Mapping):
        props = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        out = copy.deepcopy(dict(base))
        for name, value in patch.items():
            if name in props:
                sub = resolve(props[name])
            elif isinstance(extra, Mapping):
                sub = resolve(extra)
            else:
                sub = {}
            out[name] = strategic_merge(out[name], value, sub) if name in out else copy.deepcopy(value)
        return out
    if isinstance(base, list) and isinstance(patch, list):
        return _merge_list(base, patch, schema)
    return copy.deepcopy(patch)


def _container(template: Mapping[str, Any], name: str) -> dict[str, Any] | None:
    for container in (template.get("spec") or {}).get("containers") or ():
        if isinstance(container, Mapping) and container.get("name") == name:
            return dict(container)
    return None


def _http_port(container: Mapping[str, Any]) -> Any:
    return next((p for p in container.get("ports") or () if p.get("name") == "http"), None)


#: Annotations llmscale sets whose value the user's template may change (docs/operator.md, node
#: autoscalers): the cold start's protection from node autoscalers.
_USER_WINS = frozenset({"karpenter.sh/do-not-disrupt", "cluster-autoscaler.kubernetes.io/safe-to-evict"})


def _check(generated: Mapping[str, Any], merged: Mapping[str, Any], gpu_resource: str) -> None:
    """Raise :class:`TemplateConflict` at the first part llmscale owns that the merge changed."""
    for part, hint in (("labels", "they select the pool's pods"),
                       ("annotations", "the cold start and Prometheus scraping come from the spec")):
        mine = (generated.get("metadata") or {}).get(part) or {}
        theirs = (merged.get("metadata") or {}).get(part) or {}
        for key, value in mine.items():
            if theirs.get(key) != value and key not in _USER_WINS:
                raise TemplateConflict(f'spec.template.metadata.{part}["{key}"]',
                                       f"{_GENERATED_BY} it to {value!r}; {hint}")
    engine, merged_engine = _container(generated, ENGINE_CONTAINER), _container(merged, ENGINE_CONTAINER)
    assert engine is not None and merged_engine is not None  # the generated pod has it; merging keeps it
    where = f"spec.template.spec.containers[{ENGINE_CONTAINER}]"
    owned = {
        "image": "set spec.engine.image",
        "command": "llmscale builds the engine's command from spec.model and spec.engine",
        "args": "llmscale builds the engine's arguments from spec.model and spec.engine; append yours "
                "with spec.engine.args",
        "startupProbe": "llmscale sizes the probes to spec.headroom.coldStartSeconds",
        "readinessProbe": "llmscale sizes the probes to spec.headroom.coldStartSeconds",
        "livenessProbe": "llmscale sizes the probes to spec.headroom.coldStartSeconds",
    }
    for field, hint in owned.items():
        if merged_engine.get(field) != engine.get(field):
            raise TemplateConflict(f"{where}.{field}", f"{_GENERATED_BY} this field; {hint}")
    if _http_port(merged_engine) != _http_port(engine):
        raise TemplateConflict(f"{where}.ports", "the engine's port named http is spec.engine.port")
    for side in ("requests", "limits"):
        mine = ((engine.get("resources") or {}).get(side) or {}).get(gpu_resource)
        theirs = ((merged_engine.get("resources") or {}).get(side) or {}).get(gpu_resource)
        if str(theirs) != str(mine):
            raise TemplateConflict(
                f'{where}.resources.{side}["{gpu_resource}"]',
                f"{_GENERATED_BY} it to {mine}: the GPU request is spec.resources.gpusPerReplica "
                "(of spec.resources.gpuResourceName)")
    for container in (merged.get("spec") or {}).get("containers") or ():
        if container.get("name") != ENGINE_CONTAINER and not container.get("image"):
            raise TemplateConflict(
                f"spec.template.spec.containers[{container.get('name')}].image",
                f"a container other than the engine needs an image (the engine container is named "
                f"{ENGINE_CONTAINER!r})")


def merge_template(
    generated: Mapping[str, Any], template: Mapping[str, Any] | None, gpu_resource: str
) -> dict[str, Any]:
    """Return the pod template of a Deployment: ``template`` merged over ``generated``.

    Args:
        generated: the pod template llmscale generates (``metadata`` and ``spec``; see
            :func:`llmscale.controller.manifests.podtemplate.pod_template`).
        template: ``spec.template`` of the LLMDeployment, or ``None`` (``generated`` is returned).
        gpu_resource: ``spec.resources.gpuResourceName``, the GPU request llmscale owns.

    Raises:
        TemplateConflict: ``template`` changes a part llmscale owns (see the module docstring), or
            adds a container without an image; the message names the field and where to set it.
    """
    if not template:
        return copy.deepcopy(dict(generated))
    merged: dict[str, Any] = strategic_merge(generated, template, resolve(definitions()[ROOT]))
    _check(generated, merged, gpu_resource)
    return merged
