"""``ObjectSeries`` (the operator's per-object metric families) exports what prometheus-client's own
Gauge and Counter export for the same calls, in far fewer bytes a series."""

from __future__ import annotations

import tracemalloc

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

from llmscale.controller.metrics import ObjectSeries, OperatorMetrics

LABELS = ("namespace", "name", "pool")


def _exposition(registry: CollectorRegistry) -> list[str]:
    """The text exposition's lines, less the client's ``_created`` samples (a time, not a value)."""
    return [line for line in generate_latest(registry).decode().splitlines() if "_created" not in line]


def _calls(gauge: Gauge | ObjectSeries, counter: Counter | ObjectSeries) -> None:
    gauge.labels("ml", "chat", "interactive").set(3)
    gauge.labels("ml", "chat", "batch").set(0.25)
    gauge.labels("ml", "embed", "interactive").set(1e-9)
    gauge.labels("ml", "embed", "interactive").inc(2)
    gauge.remove("ml", "chat", "batch")
    counter.labels("ml", "chat", "interactive").inc()
    counter.labels("ml", "chat", "interactive").inc(2.5)
    counter.labels("other", "x", "batch")  # created at 0, as the client's


def test_the_exposition_is_the_clients() -> None:
    theirs, ours = CollectorRegistry(), CollectorRegistry()
    _calls(Gauge("llmscale_g_replicas", "a gauge", LABELS, registry=theirs),
           Counter("llmscale_c", "a counter", LABELS, registry=theirs))
    _calls(ObjectSeries("gauge", "llmscale_g_replicas", "a gauge", LABELS, ours),
           ObjectSeries("counter", "llmscale_c", "a counter", LABELS, ours))
    assert _exposition(ours) == _exposition(theirs)


def test_misuse_raises_as_the_clients_does() -> None:
    r = CollectorRegistry()
    gauge = ObjectSeries("gauge", "llmscale_g_replicas", "a gauge", LABELS, r)
    counter = ObjectSeries("counter", "llmscale_c", "a counter", LABELS, r)
    with pytest.raises(ValueError, match="takes 3 label values"):
        gauge.labels("ml", "chat")
    with pytest.raises(KeyError):
        gauge.remove("ml", "never", "set")
    with pytest.raises(ValueError, match="non-negative"):
        counter.labels("ml", "chat", "interactive").inc(-1)
    with pytest.raises(AttributeError):
        counter.labels("ml", "chat", "interactive").set(4)
    with pytest.raises(ValueError, match="Duplicated timeseries"):
        ObjectSeries("gauge", "llmscale_g_replicas", "again", LABELS, r)


def test_forget_drops_every_series_of_the_object_only() -> None:
    m = OperatorMetrics()
    for name in ("chat", "embed"):
        m.desired.labels("ml", name, "interactive").set(2)
        m.scales.labels("ml", name, "interactive", "up", "DesiredWithinRange").inc()
        m.latency_p95.labels("ml", name, "ttft").set(0.4)
    m.forget("ml", "chat")
    text = "\n".join(_exposition(m.registry))
    assert 'name="chat"' not in text
    assert text.count('name="embed"') == 3


def test_a_series_costs_a_fraction_of_a_client_child() -> None:
    keys = [(f"ns{i % 10}", f"obj-{i}", "interactive") for i in range(2000)]

    def bytes_per_series(family: Gauge | ObjectSeries) -> float:
        tracemalloc.start()
        try:
            before = tracemalloc.take_snapshot()
            for i, key in enumerate(keys):
                family.labels(*key).set(float(i))
            after = tracemalloc.take_snapshot()
        finally:
            tracemalloc.stop()
        return sum(d.size_diff for d in after.compare_to(before, "filename")) / len(keys)

    theirs = bytes_per_series(Gauge("llmscale_g_replicas", "g", LABELS, registry=CollectorRegistry()))
    ours = bytes_per_series(ObjectSeries("gauge", "llmscale_g_replicas", "g", LABELS, CollectorRegistry()))
    # Measured: ~660 bytes a client child, ~120 a series here.
    assert ours < 0.35 * theirs, (ours, theirs)
