"""The mock engine exports every metric its profiles read, so a mock pool has no unknown signal.

Read with prometheus-client's own text parser from the engine's registry (the HTTP path is
covered in tests/engine and, through a real Prometheus, in test_real_prometheus.py).
"""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from llmscale.engine.metrics import EngineMetrics, MetricNames
from llmscale.signals import get_profile
from llmscale.signals.profiles.base import MetricProfile


def exported(names: MetricNames) -> set[str]:
    metrics = EngineMetrics("m", 8192, {"block_size": "16"}, names)
    text = metrics.exposition().decode()
    return {sample.name for fam in text_string_to_metric_families(text) for sample in fam.samples}


def read_by(profile: MetricProfile) -> set[str]:
    """Every series name the profile's queries read (classic histograms: _bucket, _sum, _count)."""
    names = {profile.waiting, profile.running, profile.kv_cache_usage, *profile.counters.values()}
    for hist in profile.histograms.values():
        names |= {f"{hist}_bucket", f"{hist}_sum", f"{hist}_count"}
    return names


@pytest.mark.parametrize(("names", "profile"), [("current", "vllm"), ("legacy", "vllm-legacy")])
def test_mock_engine_exports_everything_its_profile_reads(names: MetricNames, profile: str) -> None:
    missing = read_by(get_profile(profile)) - exported(names)
    assert not missing, f"the mock engine ({names} names) lacks {sorted(missing)}"


def test_every_counter_exists_before_the_first_request() -> None:
    # vLLM creates its series at start-up; so does the mock: no counter is "absent" on an idle pod.
    assert set(get_profile("vllm").counters.values()) <= exported("current")
