"""The PromQL and the profile registry: every profile's queries parse and ask what they should."""

from __future__ import annotations

from dataclasses import replace
from typing import get_args

import promql_parser
import pytest

import llmscale.signals as signals
from llmscale.api import EngineSpec
from llmscale.signals import PROFILES, PoolTarget, SelectorLabels, fleet_queries, get_profile, signal_queries
from llmscale.signals.queries import (
    GROUPS,
    PER_POD,
    SIGNAL_LABEL,
    interval_probe_query,
    minute_query,
    past_rate_query,
    samples_query,
    selector,
    wake_expression,
    wake_query,
)

TARGET = PoolTarget(namespace="ml", deployment="chat", pool="interactive")
VLLM_COUNTERS = list(get_profile("vllm").counters.values())


def test_the_registry_holds_the_three_profiles_sorted_under_their_names() -> None:
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


@pytest.mark.parametrize("scope", [None, TARGET], ids=["fleet", "one-pool"])
@pytest.mark.parametrize("name", list(PROFILES))
def test_every_group_is_valid_promql_with_its_signals(name: str, scope: PoolTarget | None) -> None:
    queries = fleet_queries(get_profile(name), scope=scope)
    assert set(queries) == set(GROUPS)
    for group, query in queries.items():
        promql_parser.parse(query)  # raises on a syntax error
        stamped = {s for s in GROUPS[group] if f'"{SIGNAL_LABEL}", "{s}"' in query}
        assert stamped == set(GROUPS[group]) & set(signal_queries(get_profile(name), scope=scope))


def test_fleet_query_count_does_not_grow_with_pools() -> None:
    # Issue 14: a constant number of queries per tick, whatever the number of pools.
    assert len(fleet_queries(get_profile("vllm"))) == 7
    assert 'llmscale_dev_deployment!="", llmscale_dev_pool!=""' in fleet_queries(get_profile("vllm"))["pods"]


@pytest.mark.parametrize("signal", sorted(PER_POD))
def test_per_pod_signals_are_grouped_by_pod_within_the_pool(signal: str) -> None:
    query = (
        signal_queries(get_profile("vllm"))[signal]
        if signal != "prefix_cache_hit_rate_gauge"
        else (signal_queries(get_profile("vllm-legacy"))[signal])
    )
    assert "by (namespace, llmscale_dev_deployment, llmscale_dev_pool, pod)" in query


@pytest.mark.parametrize(
    "signal",
    ["ttft_p95_s", "itl_p95_s", "prompt_tokens_p95", "generation_tokens_p90", "ttft_observations_rate"],
)
def test_per_pool_signals_are_grouped_by_pool(signal: str) -> None:
    query = signal_queries(get_profile("vllm"))[signal]
    assert "by (namespace, llmscale_dev_deployment, llmscale_dev_pool)" in query
    assert "pod)" not in query


@pytest.mark.parametrize(
    ("name", "signal", "expected"),
    [
        pytest.param("vllm", "kv_cache_utilization", "(vllm:kv_cache_usage_perc{", id="vllm-v1-kv"),
        pytest.param("vllm", "itl_p95_s", "rate(vllm:inter_token_latency_seconds_bucket{", id="vllm-v1-itl"),
        pytest.param("vllm-legacy", "kv_cache_utilization", "(vllm:gpu_cache_usage_perc{", id="legacy-kv"),
        pytest.param(
            "vllm-legacy", "itl_p95_s", "rate(vllm:time_per_output_token_seconds_bucket{", id="legacy-itl"
        ),
        pytest.param("sglang", "queue_depth", "(sglang:num_queue_reqs{", id="sglang-queue"),
        pytest.param("sglang", "kv_cache_utilization", "(sglang:token_usage{", id="sglang-kv"),
        pytest.param(
            "sglang", "preemption_rate", "rate(sglang:num_retracted_requests_total{", id="sglang-retractions"
        ),
        pytest.param("vllm", "request_rate", "rate(vllm:request_success_total{", id="vllm-request-rate"),
        pytest.param("sglang", "request_rate", "rate(sglang:num_requests_total{", id="sglang-request-rate"),
        pytest.param(
            "vllm", "prefix_cache_hits_rate", "rate(vllm:prefix_cache_hits_total{", id="vllm-prefix-hits"
        ),
        pytest.param(
            "vllm",
            "prompt_tokens_sum_rate",
            "rate(vllm:request_prompt_tokens_sum{",
            id="mean-from-classic-sum",
        ),
        pytest.param(
            "vllm",
            "prompt_tokens_sum_rate",
            "histogram_sum(sum by (namespace, llmscale_dev_deployment, llmscale_dev_pool, pod) "
            "(rate(vllm:request_prompt_tokens{",
            id="mean-from-native-sum",
        ),
        pytest.param(
            "vllm",
            "ttft_p95_s",
            "histogram_quantile(0.95, sum by (namespace, llmscale_dev_deployment, llmscale_dev_pool, le) "
            "(rate(vllm:time_to_first_token_seconds_bucket{",
            id="p95-over-classic-buckets",
        ),
        pytest.param(
            "vllm",
            "ttft_p95_s",
            "histogram_quantile(0.95, sum by (namespace, llmscale_dev_deployment, llmscale_dev_pool) "
            "(rate(vllm:time_to_first_token_seconds{",
            id="p95-over-native-histogram",
        ),
        pytest.param("vllm", "prompt_tokens_p90", "histogram_quantile(0.9, ", id="p90-of-prompt-tokens"),
        pytest.param("vllm", "newest_sample_s", "(timestamp(vllm:num_requests_waiting{", id="freshness"),
        pytest.param(
            "vllm", "samples_in_window", "(count_over_time(vllm:num_requests_waiting{", id="samples-in-window"
        ),
        pytest.param(
            "vllm", "running_min", "(min_over_time(vllm:num_requests_running{", id="stall-running-min"
        ),
    ],
)
def test_signal_reads_the_profile_metric(name: str, signal: str, expected: str) -> None:
    assert expected in signal_queries(get_profile(name))[signal]


def test_native_form_comes_first_then_classic() -> None:
    query = signal_queries(get_profile("vllm"))["ttft_p95_s"]
    native, sep, classic = query.partition(" or ")
    assert sep and "_bucket" not in native and "_bucket" in classic and ", le)" in classic


def test_sglang_collapses_rank_copies_before_summing() -> None:
    queries = signal_queries(get_profile("sglang"))
    for signal in (
        "queue_depth",
        "running_requests",
        "kv_cache_utilization",
        "running_min",
        "preemption_rate",
    ):
        assert "max without (tp_rank, pp_rank) (" in queries[signal], signal
    assert "max without" not in queries["ttft_p95_s"], "quantiles are unchanged by identical copies"


def test_vllm_has_no_copies_its_engine_cores_are_summed() -> None:
    for query in signal_queries(get_profile("vllm")).values():
        # (The label, not the sleep-state metric's name.)
        assert "max without" not in query and "engine" not in query.replace("vllm:engine_sleep_state", "")


def test_reader_copy_labels_join_the_profiles() -> None:
    vllm = signal_queries(get_profile("vllm"), copy_labels=("prometheus_replica",))
    assert "max without (prometheus_replica) (vllm:num_requests_waiting{" in vllm["queue_depth"]
    sglang = signal_queries(get_profile("sglang"), copy_labels=("prometheus_replica", "tp_rank"))
    assert "max without (tp_rank, pp_rank, prometheus_replica) (" in sglang["queue_depth"]


def test_profile_without_a_counter_has_no_rate_query() -> None:
    profile = replace(get_profile("sglang"), preemptions_total=None)
    queries = signal_queries(profile)
    assert "preemption_rate" not in queries and "num_retracted" not in queries["absent"]


def test_the_absence_probe_names_each_missing_counter() -> None:
    absent = signal_queries(get_profile("vllm"))["absent"]
    for name in VLLM_COUNTERS:
        assert "unless on (namespace, llmscale_dev_deployment, llmscale_dev_pool, pod) (count by" in absent
        assert f'"llmscale_metric", "{name}"' in absent, name


def test_the_absence_probe_names_a_histogram_missing_in_either_form() -> None:
    absent = signal_queries(get_profile("vllm"))["absent"]
    assert (
        "(count by (namespace, llmscale_dev_deployment, llmscale_dev_pool, pod) "
        '(vllm:time_to_first_token_seconds{llmscale_dev_deployment!="", llmscale_dev_pool!=""}) or count by '
        "(namespace, llmscale_dev_deployment, llmscale_dev_pool, pod) (vllm:time_to_first_token_seconds_bucket{"
    ) in absent


def test_selector_uses_configured_label_names() -> None:
    labels = SelectorLabels(
        namespace="kubernetes_namespace", deployment="llmdep", pool="pool", pod="pod_name"
    )
    assert selector(TARGET, labels) == 'kubernetes_namespace="ml", llmdep="chat", pool="interactive"'
    assert selector(None, labels) == 'llmdep!="", pool!=""'
    query = fleet_queries(get_profile("vllm"), labels)["pods"]
    assert "by (kubernetes_namespace, llmdep, pool, pod_name)" in query
    promql_parser.parse(query)


def test_selector_escapes_label_values() -> None:
    odd = PoolTarget(namespace='a"b', deployment="c\\d", pool="interactive")
    sel = selector(odd)
    assert 'namespace="a\\"b"' in sel and 'llmscale_dev_deployment="c\\\\d"' in sel
    promql_parser.parse(f"sum(vllm:num_requests_waiting{{{sel}}})")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        pytest.param({"window": "1 minute"}, "not a duration", id="bad-window"),
        pytest.param({"window": ""}, "not a duration", id="empty-window"),
        pytest.param({"quantile": 1.5}, "outside 0-1", id="bad-quantile"),
    ],
)
def test_bad_arguments_are_refused(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        signal_queries(get_profile("vllm"), **kwargs)  # type: ignore[arg-type]


def test_rate_window_is_used_everywhere() -> None:
    queries = fleet_queries(get_profile("vllm"), window="4m")
    joined = "\n".join(queries.values())
    assert "[4m]" in joined and "[1m]" not in joined


def test_interval_probe_finds_the_best_covered_queue_series_then_its_samples() -> None:
    query = interval_probe_query(get_profile("sglang"))
    assert query == (
        'topk(1, count_over_time(sglang:num_queue_reqs{llmscale_dev_deployment!="", llmscale_dev_pool!=""}[10m]))'
    )
    promql_parser.parse(query)
    series = samples_query("sglang:num_queue_reqs", {"pod": "a", "tp_rank": "0", "__name__": "x"}, "10m")
    assert series == 'sglang:num_queue_reqs{pod="a", tp_rank="0"}[10m]'
    promql_parser.parse(series)


@pytest.mark.parametrize(
    ("field", "value"),
    [("waiting", "vllm waiting"), ("preemptions_total", "x{y}"), ("copy_labels", ("tp-rank",))],
)
def test_profile_rejects_names_prometheus_would_not_store(field: str, value: object) -> None:
    with pytest.raises(ValueError, match="is not a Prometheus"):
        replace(get_profile("vllm"), **{field: value})


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


def test_a_wake_query_is_one_query_of_its_own_that_a_comment_cannot_break() -> None:
    expr = wake_expression('sum(gateway_pending{namespace="$namespace", service="$name"})', "ml", "chat")
    assert expr == 'sum(gateway_pending{namespace="ml", service="chat"})'
    query = wake_query("sum(rate(gateway_requests_total[1m])) # a comment\nor vector(0)")
    assert query == "sum(\nsum(rate(gateway_requests_total[1m])) # a comment\nor vector(0)\n)"
    promql_parser.parse(query)  # the comment cannot swallow the closing parenthesis


def test_wake_variables_are_whole_words_only() -> None:
    # $namespaces and $named are not variables; PromQL itself never uses "$".
    assert wake_expression("x{a=\"$namespace\", b=\"$named\", c=\"$namespaces\"}", "ml", "chat") == (
        'x{a="ml", b="$named", c="$namespaces"}'
    )


@pytest.mark.parametrize("name", list(PROFILES))
def test_the_minute_query_is_one_valid_fleet_wide_query_with_every_minute_signal(name: str) -> None:
    from llmscale.signals.queries import MINUTE_GROUP, minute_query

    query = minute_query(get_profile(name))
    promql_parser.parse(query)
    assert 'llmscale_dev_deployment!="", llmscale_dev_pool!=""' in query
    assert {s for s in MINUTE_GROUP if f'"{SIGNAL_LABEL}", "{s}"' in query} == set(MINUTE_GROUP)
    assert query.count("[1m]") >= 5, "every part over exactly one minute"


@pytest.mark.parametrize("name", list(PROFILES))
def test_a_shards_namespaces_narrow_every_fleet_wide_query(name: str) -> None:
    # A shard's fleet queries read only its namespaces' series, so N shards on one Prometheus do
    # not each evaluate the whole fleet; a query scoped to one pool is unchanged.
    profile = get_profile(name)
    narrowed = 'namespace=~"^(?:a|b-2)$", llmscale_dev_deployment!="", llmscale_dev_pool!=""'
    queries = {
        **fleet_queries(profile, namespaces=("b-2", "a")),
        "minute": minute_query(profile, namespaces=("a", "b-2")),
        "probe": interval_probe_query(profile, namespaces=("a", "b-2")),
    }
    if (past := past_rate_query(profile, namespaces=("a", "b-2"))) is not None:
        queries["past"] = past
    for group, query in queries.items():
        promql_parser.parse(query)
        assert narrowed in query, group
        assert query.count('llmscale_dev_deployment!=""') == query.count(narrowed), group
    assert fleet_queries(profile, scope=TARGET, namespaces=("a",)) == fleet_queries(profile, scope=TARGET)
    assert "namespace=~" not in "".join(fleet_queries(profile).values())
