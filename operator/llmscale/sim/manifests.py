"""The user's own autoscaler, read from its manifest, as a simulated baseline: "would llmscale beat
*my* KEDA / HPA?" (``llmscale simulate --autoscaler FILE``).

Two kinds are read, each into :class:`~llmscale.sim.baselines.HorizontalPodAutoscaler` (KEDA
hands the Kubernetes HPA an External metric, so both end in the HPA's algorithm):

- a KEDA ``ScaledObject`` (``keda.sh/v1alpha1``) with one ``prometheus`` trigger: its ``query``
  must sum vLLM's ``vllm:num_requests_waiting`` and/or ``vllm:num_requests_running`` (the pool's
  queue, running or both — what the simulator's engines expose), its ``threshold`` is the
  AverageValue target per replica (``metricType: Value`` is refused: an absolute target is not
  what these queries are tuned for); ``minReplicaCount``/``maxReplicaCount`` and
  ``advanced.horizontalPodAutoscalerConfig.behavior`` apply;
- an ``autoscaling/v2`` ``HorizontalPodAutoscaler`` with one ``Pods`` metric
  (``vllm:num_requests_running`` or ``vllm:num_requests_waiting``, as the Prometheus adapter
  names them: ``vllm_num_requests_running``...) and an ``AverageValue`` target, or one
  ``External`` metric of the same names; ``minReplicas``/``maxReplicas`` and
  ``behavior.scaleUp/scaleDown.stabilizationWindowSeconds`` apply.

Anything else is refused with the reason (:class:`UnsupportedAutoscaler`): the simulator can only
replay what its engines measure. Pure: dicts in, an autoscaler out.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from llmscale.api import LLMDeploymentSpec
from llmscale.sim.baselines import HorizontalPodAutoscaler

__all__ = ["UnsupportedAutoscaler", "autoscaler_from_manifest", "quantity"]

_WAITING = re.compile(r"num_requests_waiting")
_RUNNING = re.compile(r"num_requests_running")
_SUFFIX = {"m": 1e-3, "": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9}


class UnsupportedAutoscaler(ValueError):
    """A manifest the simulator cannot replay; the message says which field and why."""


def quantity(value: object, where: str) -> float:
    """A Kubernetes quantity or KEDA threshold (``"5"``, ``5``, ``"500m"``, ``"1.5"``) as a number.

    Raises:
        UnsupportedAutoscaler: not a positive quantity.
    """
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)([mkKMG]?)\s*", str(value))
    if not m or float(m.group(1)) <= 0:
        raise UnsupportedAutoscaler(f"{where}: Invalid value: {value!r}: must be a positive quantity such as 5 or 500m")
    return float(m.group(1)) * _SUFFIX[m.group(2)]


def _metric(text: str, where: str) -> str:
    waiting, running = bool(_WAITING.search(text)), bool(_RUNNING.search(text))
    if waiting and running:
        return "running_plus_waiting"
    if waiting:
        return "waiting"
    if running:
        return "running"
    raise UnsupportedAutoscaler(
        f"{where}: Unsupported value: {text!r}: the simulator replays vLLM's num_requests_waiting and "
        "num_requests_running (the queue, the running requests or their sum)")


def _windows(behavior: Mapping[str, Any] | None) -> dict[str, float]:
    out: dict[str, float] = {}
    for key, arg in (("scaleUp", "scale_up_window_s"), ("scaleDown", "scale_down_window_s")):
        window = ((behavior or {}).get(key) or {}).get("stabilizationWindowSeconds")
        if window is not None:
            out[arg] = float(window)
    return out


def _bounds(spec: LLMDeploymentSpec, lo: Any, hi: Any) -> tuple[int, int]:
    low = int(lo) if lo is not None else max(spec.replicas.min, 1)
    high = int(hi) if hi is not None else spec.replicas.max
    if low > high:
        raise UnsupportedAutoscaler(f"min replicas {low} is above max replicas {high}")
    return low, high


def _scaled_object(doc: Mapping[str, Any], spec: LLMDeploymentSpec, name: str) -> HorizontalPodAutoscaler:
    body = doc.get("spec") or {}
    triggers = [t for t in body.get("triggers") or () if isinstance(t, Mapping)]
    if len(triggers) != 1 or triggers[0].get("type") != "prometheus":
        raise UnsupportedAutoscaler("spec.triggers: the simulator replays one trigger of type prometheus")
    meta = triggers[0].get("metadata") or {}
    if str(triggers[0].get("metricType") or "AverageValue") != "AverageValue":
        raise UnsupportedAutoscaler("spec.triggers[0].metricType: Unsupported value: only AverageValue (the default)")
    metric = _metric(str(meta.get("query") or ""), "spec.triggers[0].metadata.query")
    if metric == "waiting":
        metric = "queue_depth"
    elif metric == "running":
        metric = "running_requests"
    target = quantity(meta.get("threshold"), "spec.triggers[0].metadata.threshold")
    low, high = _bounds(spec, body.get("minReplicaCount"), body.get("maxReplicaCount"))
    behavior = ((body.get("advanced") or {}).get("horizontalPodAutoscalerConfig") or {}).get("behavior")
    return HorizontalPodAutoscaler(name, "external", metric, target, low, high, **_windows(behavior))


def _hpa(doc: Mapping[str, Any], spec: LLMDeploymentSpec, name: str) -> HorizontalPodAutoscaler:
    body = doc.get("spec") or {}
    metrics = [m for m in body.get("metrics") or () if isinstance(m, Mapping)]
    if len(metrics) != 1:
        raise UnsupportedAutoscaler("spec.metrics: the simulator replays exactly one metric")
    m = metrics[0]
    kind = str(m.get("type") or "")
    if kind not in ("Pods", "External"):
        raise UnsupportedAutoscaler(f"spec.metrics[0].type: Unsupported value: {kind!r}: Pods or External "
                                    "(a Resource metric such as CPU says nothing about an engine's load)")
    source = m.get(kind.lower()) or {}
    metric = _metric(str((source.get("metric") or {}).get("name") or ""), f"spec.metrics[0].{kind.lower()}.metric.name")
    target = source.get("target") or {}
    if target.get("type") != "AverageValue":
        raise UnsupportedAutoscaler(f"spec.metrics[0].{kind.lower()}.target.type: Unsupported value: only AverageValue")
    value = quantity(target.get("averageValue"), f"spec.metrics[0].{kind.lower()}.target.averageValue")
    low, high = _bounds(spec, body.get("minReplicas"), body.get("maxReplicas"))
    if kind == "Pods":
        if metric == "running_plus_waiting":
            raise UnsupportedAutoscaler("spec.metrics[0].pods.metric.name: one per-pod gauge, not a sum")
        return HorizontalPodAutoscaler(name, "pods", metric, value, low, high, **_windows(body.get("behavior")))
    metric = {"waiting": "queue_depth", "running": "running_requests"}.get(metric, metric)
    return HorizontalPodAutoscaler(name, "external", metric, value, low, high, **_windows(body.get("behavior")))


def autoscaler_from_manifest(doc: Mapping[str, Any], spec: LLMDeploymentSpec) -> HorizontalPodAutoscaler:
    """The autoscaler a ScaledObject or HorizontalPodAutoscaler manifest describes (module
    docstring), named ``yours: <Kind>/<name>``; bounds missing from the manifest come from
    ``spec.replicas``.

    Raises:
        UnsupportedAutoscaler: another kind, or a metric, target or trigger it cannot replay.
    """
    kind = doc.get("kind")
    name = f"yours: {kind}/{(doc.get('metadata') or {}).get('name') or '?'}"
    if kind == "ScaledObject":
        return _scaled_object(doc, spec, name)
    if kind == "HorizontalPodAutoscaler":
        if not str(doc.get("apiVersion") or "").startswith("autoscaling/v2"):
            raise UnsupportedAutoscaler("apiVersion: only autoscaling/v2 HorizontalPodAutoscalers")
        return _hpa(doc, spec, name)
    raise UnsupportedAutoscaler(f"kind: Unsupported value: {kind!r}: a KEDA ScaledObject or an autoscaling/v2 "
                                "HorizontalPodAutoscaler")
