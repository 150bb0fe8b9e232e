"""The operator's metric names follow the Prometheus naming guide (one unit per metric, named by
its suffix), and the names 0.1.0 exported stay for one release as deprecated aliases carrying the
same values; nothing we ship (dashboards, alerts, the kustomize component) reads an alias."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from llmscale.controller.metrics import DEPRECATED_ALIASES, OperatorMetrics

ROOT = Path(__file__).resolve().parents[2]
#: A gauge's name ends with its unit, or says it is a count of things (replicas, GPUs), a 0/1 flag
#: or a digest.
UNIT_SUFFIXES = ("_seconds", "_ratio", "_requests", "_per_second", "_replicas", "_gpus", "_gpu_hours",
                 "_usd_per_million_tokens", "_hash", "_available")
DEPRECATED = {re.match(r"[a-z_]+", old).group(0) for old in DEPRECATED_ALIASES}  # type: ignore[union-attr]


def _families() -> list[tuple[str, str]]:
    return [(f.name, f.type) for f in OperatorMetrics().registry.collect()]


def test_every_current_gauge_names_its_unit() -> None:
    unnamed = [name for name, kind in _families()
               if kind == "gauge" and name not in DEPRECATED and not name.endswith(UNIT_SUFFIXES)]
    assert not unnamed, unnamed


def test_every_alias_names_a_metric_that_exists() -> None:
    names = {name for name, _ in _families()}
    assert names >= DEPRECATED
    for new in DEPRECATED_ALIASES.values():
        assert re.match(r"[a-z_0-9]+", new).group(0) in names  # type: ignore[union-attr]


def _value(registry: CollectorRegistry, selector: str) -> float | None:
    name, _, labels = selector.partition("{")
    wanted = dict(re.findall(r'(\w+)="([^"]*)"', labels)) | {"namespace": "ml", "name": "chat"}
    if name in ("llmscale_busy_ratio", "llmscale_busy_share", "llmscale_kv_cache_utilization_ratio",
                "llmscale_kv_cache_utilization_mean"):
        wanted["pool"] = "interactive"
    return registry.get_sample_value(name, wanted)


def _metrics_with_every_signal() -> OperatorMetrics:
    m = OperatorMetrics()
    m.set_signals("ml", "chat", queue_depth=7.0, kv_cache_utilization=0.4, preemption_rate=0.02,
                  ttft_p95_s=1.5, itl_p95_s=0.07)
    m.set_signal_targets("ml", "chat", queue_depth=3.0, kv_cache_utilization=0.75, preemption_rate=0.05)
    m.set_usage(("ml", "chat", "interactive"), busy=0.6, kv_cache_mean=0.3)
    return m


ALIASES = pytest.mark.parametrize(("old", "new"), list(DEPRECATED_ALIASES.items()), ids=list(DEPRECATED_ALIASES))


@ALIASES
def test_an_alias_carries_the_new_metrics_value(old: str, new: str) -> None:
    m = _metrics_with_every_signal()
    value = _value(m.registry, new)
    assert value is not None and _value(m.registry, old) == value


@ALIASES
def test_an_alias_goes_with_the_new_metric(old: str, new: str) -> None:
    m = _metrics_with_every_signal()
    # Unknown drops both series (never a zero), and a deleted object's series go with it.
    m.set_signals("ml", "chat", queue_depth=None, kv_cache_utilization=None, preemption_rate=None,
                  ttft_p95_s=None, itl_p95_s=None)
    m.set_usage(("ml", "chat", "interactive"), busy=None, kv_cache_mean=None)
    if "signal_target" not in old:
        assert _value(m.registry, new) is None and _value(m.registry, old) is None
    m.forget("ml", "chat")
    assert _value(m.registry, new) is None and _value(m.registry, old) is None


@pytest.mark.parametrize("path", [
    "charts/llmscale/dashboards/llmscale.json", "charts/llmscale/dashboards/llmscale-fleet.json",
    "charts/llmscale/rules/llmscale.rules.yaml", "manifests/components/monitoring/monitoring.yaml",
    "docs/runbooks.md",
])
def test_what_we_ship_reads_no_deprecated_name(path: str) -> None:
    text = (ROOT / path).read_text(encoding="utf-8")
    used = {name for name in DEPRECATED if re.search(rf"\b{name}\b(?!_)", text)}
    assert not used, used
