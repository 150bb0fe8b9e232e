"""The PromQL and the profile registry: every profile's query parses and asks what it should."""

from __future__ import annotations

from typing import get_args

import promql_parser
import pytest

import llmscale.signals as signals
from llmscale.api import EngineSpec
from llmscale.signals import PROFILES, PoolTarget, SelectorLabels, batched_query, get_profile, signal_queries
from llmscale.signals.queries import SIGNAL_LABEL, SIGNALS, selector

TARGET = PoolTarget(namespace="ml", deployment="chat", pool="interactive")


def test_registry_is_sorted_and_holds_the_three_profiles() -> None:
    assert list(PROFILES) == ["sglang", "vllm", "vllm-legacy"]
    assert all(PROFILES[name].name == name for name in PROFILES)


def test_unknown_profile_names_the_known_ones() -> None:
    with pytest.raises(KeyError, match="known: sglang, vllm, vllm-legacy"):
        get_profile("tgi")


@pytest.mark.parametrize("engine", ["vllm", "sglang", "mock"])
def test_every_engine_default_profile_is_registered(engine: str) -> None:
    assert get_profile(EngineSpec(type=engine).profile()).name in PROFILES


@pytest.mark.parametrize("name", get_args(get_args(EngineSpec.model_fields["metrics_profile"].annotation)[0]))
def test_every_profile_the_api_accepts_is_registered(name: str) -> None:
    assert get_profile(EngineSpec(metrics_profile=name).profile()).name == name


@pytest.mark.parametrize("name", list(PROFILES))
def test_batched_query_is_valid_promql_with_every_signal(name: str) -> None:
    query = batched_query(get_profile(name), TARGET)
    promql_parser.parse(query)  # raises on a syntax error
    for signal in signal_queries(get_profile(name), TARGET):
        assert f'"{SIGNAL_LABEL}", "{signal}"' in query


@pytest.mark.parametrize(
    ("name", "signal", "expected"),
    [
        pytest.param("vllm", "kv_cache_utilization", "avg(vllm:kv_cache_usage_perc{", id="vllm-v1-kv"),
        pytest.param("vllm", "itl_p95_s", "rate(vllm:inter_token_latency_seconds_bucket{", id="vllm-v1-itl"),
        pytest.param("vllm-legacy", "kv_cache_utilization", "avg(vllm:gpu_cache_usage_perc{", id="legacy-kv"),
        pytest.param(
            "vllm-legacy", "itl_p95_s", "rate(vllm:time_per_output_token_seconds_bucket{", id="legacy-itl"
        ),
        pytest.param("sglang", "queue_depth", "sum(sglang:num_queue_reqs{", id="sglang-queue"),
        pytest.param("sglang", "kv_cache_utilization", "avg(sglang:token_usage{", id="sglang-kv"),
        pytest.param(
            "sglang", "preemption_rate", "rate(sglang:num_retracted_requests_total{", id="sglang-retractions"
        ),
        pytest.param(
            "vllm",
            "ttft_p95_s",
            "histogram_quantile(0.95, sum by (le) (rate(vllm:time_to_first_token_seconds_bucket{",
            id="p95-over-pool-buckets",
        ),
        pytest.param(
            "vllm",
            "replicas_reporting",
            "count(count by (instance) (vllm:num_requests_waiting{",
            id="count-by-target",
        ),
        pytest.param("vllm", "newest_sample_s", "max(timestamp(vllm:num_requests_waiting{", id="freshness"),
    ],
)
def test_signal_reads_the_profile_metric(name: str, signal: str, expected: str) -> None:
    assert expected in signal_queries(get_profile(name), TARGET)[signal]


def test_profile_without_a_counter_has_no_preemption_query() -> None:
    from dataclasses import replace

    profile = replace(get_profile("sglang"), preemptions_total=None)
    queries = signal_queries(profile, TARGET)
    assert "preemption_rate" not in queries
    assert set(queries) == set(SIGNALS) - {"preemption_rate"}


def test_selector_uses_configured_label_names() -> None:
    labels = SelectorLabels(namespace="kubernetes_namespace", deployment="llmdep", pool="pool")
    assert selector(TARGET, labels) == '{kubernetes_namespace="ml", llmdep="chat", pool="interactive"}'
    assert 'llmdep="chat"' in batched_query(get_profile("vllm"), TARGET, labels)


def test_selector_escapes_label_values() -> None:
    odd = PoolTarget(namespace='a"b', deployment="c\\d", pool="interactive")
    sel = selector(odd)
    assert 'namespace="a\\"b"' in sel and 'llmscale_dev_deployment="c\\\\d"' in sel
    promql_parser.parse(f"sum(vllm:num_requests_waiting{sel})")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        pytest.param({"rate_window": "1 minute"}, "not a PromQL duration", id="bad-window"),
        pytest.param({"rate_window": ""}, "not a PromQL duration", id="empty-window"),
        pytest.param({"quantile": 1.5}, "outside 0-1", id="bad-quantile"),
    ],
)
def test_bad_settings_are_refused(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        signal_queries(get_profile("vllm"), TARGET, **kwargs)  # type: ignore[arg-type]


def test_rate_window_is_used_everywhere() -> None:
    query = batched_query(get_profile("vllm"), TARGET, rate_window="2m")
    assert query.count("[2m]") == 3 and "[1m]" not in query


def test_public_api_is_complete() -> None:
    for name in signals.__all__:
        assert getattr(signals, name) is not None, name
    assert len(set(signals.__all__)) == len(signals.__all__)
    public = {
        n
        for n in dir(signals)
        if not n.startswith("_") and not isinstance(getattr(signals, n), type(signals))
    }
    public -= {"annotations", "TYPE_CHECKING", "Any"}
    assert public <= set(signals.__all__), public - set(signals.__all__)
