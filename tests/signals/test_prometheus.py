"""The reader against a canned Prometheus over real HTTP: one table row per kind of answer."""

from __future__ import annotations

import asyncio
import json
import re
import time
from pathlib import Path
from typing import Any

import pytest
from tests.signals.conftest import EVAL_S, POOL, CannedPrometheus, series

from llmscale.signals import (
    PoolRequest,
    PoolTarget,
    PrometheusAuth,
    PrometheusSignalReader,
    ReaderSettings,
    SignalSnapshot,
    get_profile,
)
from llmscale.signals.answer import FleetAnswer, parse_group
from llmscale.signals.prometheus import READ_BUDGET_TIMEOUTS
from llmscale.signals.queries import GROUP_OF, GROUPS, POOL_GROUPS, SelectorLabels, fleet_queries

TARGET = PoolTarget(namespace="ml", deployment="chat", pool="interactive")
VLLM = get_profile("vllm")
EVAL = EVAL_S
NOW = EVAL + 2.0  # the operator's clock, slightly after Prometheus evaluated

POD_A = {
    "queue_depth": "14",
    "running_requests": "96",
    "kv_cache_utilization": "0.82",
    "newest_sample_s": str(EVAL - 7.5),
    "samples_in_window": "5",
    "running_min": "90",
    "preemption_rate": "0.25",
    "request_rate": "3",
    "prompt_tokens_rate": "3000",
    "generation_tokens_rate": "600",
    "prefix_cache_hits_rate": "0",
    "prefix_cache_queries_rate": "3000",
    "prompt_tokens_sum_rate": "3000",
    "prompt_tokens_count_rate": "3",
    "generation_tokens_sum_rate": "600",
    "generation_tokens_count_rate": "3",
}
POOL_VALUES = {
    "ttft_p95_s": "0.41",
    "itl_p95_s": "0.032",
    "prompt_tokens_p90": "1800",
    "prompt_tokens_p95": "1900",
    "generation_tokens_p90": "400",
    "generation_tokens_p95": "500",
    "ttft_observations_rate": "3",
    "itl_observations_rate": "600",
}


def results(
    pod: dict[str, str | None] | None = None, pool: dict[str, str | None] | None = None
) -> dict[str, list[Any]]:
    """The canned result of every group for one healthy pod ``a``, with changes (``None`` removes)."""
    pod_values = {k: v for k, v in {**POD_A, **(pod or {})}.items() if v is not None}
    pool_values = {k: v for k, v in {**POOL_VALUES, **(pool or {})}.items() if v is not None}
    out: dict[str, list[Any]] = {group: [] for group in GROUPS}
    for signal, value in pod_values.items():
        group = "pods" if signal in GROUPS["pods"] else "rates"
        out[group].append(series(signal, value, pod="a"))
    for signal, value in pool_values.items():
        out[GROUP_OF[signal]].append(series(signal, value))
    return out


#: The groups a read sends together after the first (``PrometheusSignals._ask``): their order
#: among themselves is whichever answer comes first.
SENT_TOGETHER = frozenset(GROUPS) - {"pods"}


def together(groups: list[str]) -> list[str]:
    """``groups`` with each run of groups sent together sorted (their order is not defined)."""
    out: list[str] = []
    run: list[str] = []
    for g in [*groups, ""]:
        if g in SENT_TOGETHER:
            run.append(g)
            continue
        out += sorted(run) + ([g] if g else [])
        run = []
    return out


def give(canned: CannedPrometheus, groups: dict[str, list[Any]]) -> None:
    for group, result in groups.items():
        canned.answer(canned.vector(result), group=group)


def reader(url: str, **settings: Any) -> PrometheusSignalReader:
    # The scrape interval is set, so the reader sends only the seven queries of a read.
    return PrometheusSignalReader(url, settings=ReaderSettings(**{"scrape_interval": "15s", **settings}))


def with_extra(groups: dict[str, list[Any]], group: str, *extra: Any) -> dict[str, list[Any]]:
    return {**groups, group: [*groups[group], *extra]}


# Each row: the canned results per group, and the snapshot fields expected. ``error`` is matched
# as a substring (or must be None); ``unknown.<field>`` as a substring of that field's reason.
ANSWER_CASES = [
    pytest.param(
        results(),
        dict(
            observed_at=EVAL - 7.5,
            queue_depth=14.0,
            running_requests=96.0,
            kv_cache_utilization=0.82,
            preemption_rate=0.25,
            ttft_p95_s=0.41,
            itl_p95_s=0.032,
            replicas_reporting=1,
            error=None,
        ),
        id="healthy-answer-gives-every-signal",
    ),
    pytest.param(
        {group: [] for group in GROUPS},
        {
            "observed_at": NOW,
            "queue_depth": None,
            "kv_cache_utilization": None,
            "preemption_rate": None,
            "replicas_reporting": 0,
            "error": None,
            "unknown.queue_depth": "exports vllm:num_requests_waiting",
        },
        id="empty-vector-is-unknown-not-zero",
    ),
    pytest.param(
        results(pool={"ttft_p95_s": "NaN", "itl_p95_s": "NaN"}),
        {"ttft_p95_s": None, "itl_p95_s": None, "queue_depth": 14.0, "error": None},
        id="nan-quantile-of-an-idle-minute-is-unknown",
    ),
    pytest.param(
        results(pod={"queue_depth": "+Inf", "kv_cache_utilization": "-Inf"}),
        {"queue_depth": None, "kv_cache_utilization": None, "running_requests": 96.0, "error": None},
        id="infinities-are-unknown",
    ),
    pytest.param(
        results(pod={"queue_depth": "lots"}),
        {
            "queue_depth": None,
            "running_requests": 96.0,
            "error": "queue_depth of pod 'a': value 'lots' is not a number",
            "unknown.queue_depth": "unknown on pod a",
        },
        id="non-number-is-unknown-and-named",
    ),
    pytest.param(
        results(pod={"queue_depth": "-3"}),
        {"queue_depth": None, "error": "queue_depth of pod 'a': negative value -3.0"},
        id="negative-gauge-is-rejected",
    ),
    pytest.param(
        with_extra(results(), "pods", series("queue_depth", "14", pod="a", prometheus_replica="b")),
        {"queue_depth": None, "running_requests": 96.0, "error": "several series where one was expected"},
        id="several-series-for-one-signal-are-rejected-not-summed",
    ),
    pytest.param(
        with_extra(
            results(),
            "pods",
            {"metric": {"__name__": "vllm:num_requests_waiting", **POOL}, "value": [EVAL, "9"]},
        ),
        {"queue_depth": 14.0, "error": None},
        id="series-without-signal-label-ignored",
    ),
    pytest.param(
        with_extra(results(), "itl", {"metric": {**POOL, "llmscale_signal": "itl_p95_s"}}),
        {"itl_p95_s": None, "error": "itl_p95_s: several series"},
        id="series-without-value-is-rejected",
    ),
    pytest.param(
        results(pod={"newest_sample_s": str(EVAL - 240)}),
        {"observed_at": EVAL - 240, "queue_depth": 14.0, "error": None},
        id="stale-scrape-shows-its-sample-time-not-the-query-time",
    ),
    pytest.param(
        # After an engine restart its counter fell from 1200 to 3; rate() counts the 3 as new
        # preemptions, so Prometheus answers a small positive rate, which passes through as is.
        results(pod={"preemption_rate": "0.05"}),
        {"preemption_rate": 0.05, "error": None},
        id="rate-after-counter-reset-passes-through",
    ),
    pytest.param(
        with_extra(
            results(pod={"preemption_rate": None}),
            "absent",
            series("absent", "1", pod="a", llmscale_metric="vllm:num_preemptions_total"),
        ),
        {"preemption_rate": 0.0, "absent_counters": ("vllm:num_preemptions_total",), "error": None},
        id="absent-preemption-counter-on-a-reporting-pod-reads-zero",
    ),
    pytest.param(
        results(pod={"preemption_rate": None}),
        {"preemption_rate": None, "queue_depth": 14.0, "unknown.preemption_rate": "fewer than two samples"},
        id="present-counter-without-rate-is-unknown",
    ),
    pytest.param(
        with_extra(
            results(),
            "pods",
            series("queue_depth", "100", pod="x", llmscale_dev_deployment="other"),
        ),
        {"queue_depth": 14.0, "replicas_reporting": 1, "error": None},
        id="another-deployments-pod-does-not-leak",
    ),
]


@pytest.mark.parametrize(("groups", "expected"), ANSWER_CASES)
async def test_answer_is_parsed_defensively(
    canned: CannedPrometheus, groups: dict[str, list[Any]], expected: dict[str, Any]
) -> None:
    give(canned, groups)
    snap = await reader(canned.url).read(VLLM, TARGET, now=NOW)
    for key, want in expected.items():
        if key.startswith("unknown."):
            assert want in snap.unknown[key.removeprefix("unknown.")], (key, dict(snap.unknown))
            continue
        got = getattr(snap, key)
        if key == "error" and want is not None:
            assert got is not None and want in got, (key, got)
        else:
            assert got == (pytest.approx(want) if isinstance(want, float) else want), (key, got)
    assert together(canned.groups) == together(["pods", *sorted(SENT_TOGETHER)])


FAILURE_CASES = [
    pytest.param(
        500,
        '{"status":"error","errorType":"internal","error":"boom"}',
        "HTTP Status Code 500",
        1,
        id="http-500",
    ),
    pytest.param(
        400,
        '{"status":"error","errorType":"bad_data","error":"1:5: parse error: unexpected"}',
        "parse error",
        len(GROUPS),
        id="bad-query-status-error-400",
    ),
    pytest.param(
        422,
        '{"status":"error","errorType":"execution","error":"query processing would load too many samples"}',
        "too many samples",
        len(GROUPS),
        id="execution-error-422",
    ),
    pytest.param(
        200,
        '{"status":"error","errorType":"bad_data","error":"x"}',
        "without data.result",
        1,
        id="status-error-body-200",
    ),
    pytest.param(200, "<html>proxy login</html>", "not JSON", 1, id="not-json-200"),
    pytest.param(
        200,
        json.dumps({"status": "success", "data": {"resultType": "scalar", "result": [EVAL, "1"]}}),
        "a scalar, not a vector",
        len(GROUPS),
        id="scalar-instead-of-vector",
    ),
    pytest.param(
        401, "Unauthorized", "refused the credentials (HTTP 401)", 1, id="wrong-credentials-401-say-so"
    ),
]


@pytest.mark.parametrize(("status", "body", "error", "sent"), FAILURE_CASES)
async def test_a_failed_answer_gives_an_error_instead_of_signals(
    canned: CannedPrometheus, status: int, body: str, error: str, sent: int
) -> None:
    canned.answer(canned.raw(body, status=status))
    snap = await reader(canned.url).read(VLLM, TARGET, now=NOW)
    assert snap.error is not None and error in snap.error
    for name in ("queue_depth", "kv_cache_utilization", "preemption_rate", "ttft_p95_s", "itl_p95_s"):
        assert getattr(snap, name) is None and error in snap.unknown[name], name
    assert snap.replicas_reporting == 0 and snap.observed_at == NOW
    assert len(canned.queries) == sent, (
        "a failure that would repeat stops the read; a query's own error does not"
    )


async def test_connection_refused_gives_error(refused_url: str) -> None:
    snap = await reader(refused_url).read(VLLM, TARGET, now=NOW)
    assert snap.error is not None and "did not answer" in snap.error and "Connection refused" in snap.error
    assert snap.observed_at == NOW and snap.queue_depth is None
    assert "Connection refused" in snap.unknown["queue_depth"]


async def test_slow_prometheus_times_out_without_retry(canned: CannedPrometheus) -> None:
    canned.answer(canned.raw(canned.vector([]).body, delay_s=2.0))
    started = time.monotonic()
    snap = await reader(canned.url, timeout_s=0.2).read(VLLM, TARGET, now=NOW)
    assert snap.error is not None and "ReadTimeoutError" in snap.error
    # Well before the answer would have come (a retry would wait for it): the margin is for a
    # loaded CI worker, which can stall any call for a while.
    assert time.monotonic() - started < 1.5
    assert len(canned.queries) == 1


async def test_gateway_503_is_retried_once(canned: CannedPrometheus) -> None:
    give(canned, results())
    healthy = canned.answers["pods"][0]
    canned.answer(canned.raw("busy", status=503), healthy, group="pods")
    snap = await reader(canned.url).read(VLLM, TARGET, now=NOW)
    assert snap.error is None and snap.queue_depth == 14.0
    assert together(canned.groups) == together(["pods", "pods", *sorted(SENT_TOGETHER)])


async def test_gateway_503_twice_names_the_status(canned: CannedPrometheus) -> None:
    canned.answer(canned.raw("busy", status=503))
    snap = await reader(canned.url).read(VLLM, TARGET, now=NOW)
    assert snap.error is not None and "503" in snap.error
    assert len(canned.queries) == 2


async def test_seven_queries_per_read_with_the_pool_selector(canned: CannedPrometheus) -> None:
    give(canned, results())
    r = reader(canned.url)
    snap = await r.read(VLLM, TARGET, now=NOW)
    assert snap.window is not None and snap.window.promql == "60s"
    wanted = r.queries_for(VLLM, TARGET, "60s")
    assert canned.queries[0] == wanted["pods"], "the first query goes alone"
    assert sorted(canned.queries) == sorted(wanted.values()), "each query once"
    sent = wanted["rates"]
    assert 'llmscale_dev_deployment="chat"' in sent and 'llmscale_dev_pool="interactive"' in sent
    assert "rate(vllm:num_preemptions_total{" in sent, "the counter is read through rate(), never raw"


async def test_fleet_read_splits_one_answer_per_pool_with_seven_queries(canned: CannedPrometheus) -> None:
    # Issue 14: three pools, one engine profile -> seven queries, whatever the number of pools.
    groups = results()
    batch = {"llmscale_dev_pool": "batch"}
    groups["pods"] += [
        series("queue_depth", "2", pod="b", **batch),
        series("running_requests", "1", pod="b", **batch),
        series("kv_cache_utilization", "0.1", pod="b", **batch),
    ]
    groups["absent"] = [
        series("absent", "1", pod="b", llmscale_metric=n, **batch) for n in VLLM.counters.values()
    ]
    give(canned, groups)
    batch_target = PoolTarget("ml", "chat", "batch")
    missing = PoolTarget("ml", "gone", "interactive")
    r = reader(canned.url)
    snaps = await r.read_fleet(
        [
            PoolRequest(TARGET, VLLM, frozenset({"a"})),
            PoolRequest(batch_target, VLLM),
            PoolRequest(missing, VLLM),
        ],
        now=NOW,
    )
    assert together(canned.groups) == together(["pods", *sorted(SENT_TOGETHER)])
    assert 'llmscale_dev_deployment!=""' in canned.queries[0], "fleet-wide selector"
    assert snaps[TARGET].queue_depth == 14.0 and snaps[batch_target].queue_depth == 2.0
    assert snaps[missing].queue_depth is None and snaps[missing].replicas_reporting == 0
    assert snaps[batch_target].preemption_rate == 0.0, "counter absent on pod b"


async def test_fleet_read_sends_one_query_set_per_profile(canned: CannedPrometheus) -> None:
    r = reader(canned.url)
    sglang = PoolTarget("ml", "code", "interactive")
    await r.read_fleet([PoolRequest(TARGET, VLLM), PoolRequest(sglang, get_profile("sglang"))], now=NOW)
    per_profile = {name: len(fleet_queries(get_profile(name))) for name in ("vllm", "sglang")}
    assert len(canned.queries) == sum(per_profile.values())
    assert sum("sglang:" in q for q in canned.queries) == per_profile["sglang"]
    assert sum("vllm:" in q for q in canned.queries) == per_profile["vllm"]


# -- the scrape interval and the window ------------------------------------------------------------


async def _read_with_a_one_minute_scrape(canned: CannedPrometheus) -> tuple[PrometheusSignalReader, SignalSnapshot]:
    canned.targets = canned.raw(
        json.dumps(
            {
                "status": "success",
                "data": {"activeTargets": [{"labels": {**POOL, "pod": "a"}, "scrapeInterval": "1m"}]},
            }
        )
    )
    r = PrometheusSignalReader(canned.url)
    return r, await r.read(VLLM, TARGET, now=NOW)


async def test_the_window_is_derived_from_the_targets_api(canned: CannedPrometheus) -> None:
    _, snap = await _read_with_a_one_minute_scrape(canned)
    assert snap.window is not None and (snap.window.window_s, snap.window.interval_source) == (
        240.0,
        "targets",
    )
    assert "[240s]" in canned.queries[0]


async def test_the_scrape_interval_is_cached_until_the_refresh(canned: CannedPrometheus) -> None:
    r, _ = await _read_with_a_one_minute_scrape(canned)
    await r.read(VLLM, TARGET, now=NOW + 299)
    assert canned.targets_calls == 1, "read again only after interval_refresh_s"
    await r.read(VLLM, TARGET, now=NOW + 301)
    assert canned.targets_calls == 2


async def test_window_from_sample_spacing_without_a_targets_api(canned: CannedPrometheus) -> None:
    canned.targets = canned.raw("404 page not found", status=404)  # Thanos, Mimir
    best = {"metric": {**POOL, "pod": "a", "engine": "0"}, "value": [EVAL, "11"]}
    matrix = json.dumps(
        {
            "status": "success",
            "data": {
                "resultType": "matrix",
                "result": [
                    {"metric": best["metric"], "values": [[EVAL - 60 * k, "1"] for k in range(10, -1, -1)]}
                ],
            },
        }
    )
    canned.answer(canned.vector([best]), canned.raw(matrix), group="other")  # samples 60 s apart
    r = PrometheusSignalReader(canned.url)
    snap = await r.read(VLLM, TARGET, now=NOW)
    assert snap.window is not None and snap.window.interval_source == "samples"
    assert snap.window.scrape_interval_s == 60.0 and snap.window.window_s == 240.0
    assert "topk(1, count_over_time(vllm:num_requests_waiting{" in canned.queries[0]
    assert canned.queries[1].startswith(
        'vllm:num_requests_waiting{engine="0", llmscale_dev_deployment="chat"'
    )


async def test_set_window_too_short_for_the_interval_is_reported(canned: CannedPrometheus) -> None:
    give(canned, results(pod={"preemption_rate": None, "samples_in_window": "1"}))
    r = PrometheusSignalReader(canned.url, settings=ReaderSettings(rate_window="1m", scrape_interval="1m"))
    snap = await r.read(VLLM, TARGET, now=NOW)
    assert snap.window is not None and snap.window.too_short
    assert snap.queue_depth == 14.0 and snap.preemption_rate is None
    assert "shorter than two scrape intervals" in snap.unknown["preemption_rate"]


# -- authentication -------------------------------------------------------------------------------


async def test_injected_headers_reach_prometheus(canned: CannedPrometheus) -> None:
    auth = PrometheusAuth(headers={"X-Scope-OrgID": "team-a"})
    r = PrometheusSignalReader(
        canned.url,
        headers={"Authorization": "Bearer t0ken"},
        settings=ReaderSettings(scrape_interval="15s", auth=auth),
    )
    await r.read(VLLM, TARGET, now=NOW)
    assert canned.headers[0]["Authorization"] == "Bearer t0ken"
    assert canned.headers[0]["X-Scope-OrgID"] == "team-a"


async def test_bearer_token_file_is_read_again_when_it_rotates(
    canned: CannedPrometheus, tmp_path: Path
) -> None:
    token = tmp_path / "token"
    token.write_text("first\n")
    r = PrometheusSignalReader(
        canned.url, settings=ReaderSettings(auth=PrometheusAuth(bearer_token_file=token))
    )
    await r.read(VLLM, TARGET, now=NOW)
    assert {h["Authorization"] for h in canned.headers} == {"Bearer first"}, "targets API too"
    # Kubernetes swaps the projected token's symlink: a new file in place of the old.
    rotated = tmp_path / "token.new"
    rotated.write_text("second")
    rotated.replace(token)
    await r.read(VLLM, TARGET, now=NOW + 1)
    assert canned.headers[-1]["Authorization"] == "Bearer second"


async def test_missing_token_file_is_a_clear_error(canned: CannedPrometheus, tmp_path: Path) -> None:
    auth = PrometheusAuth(bearer_token_file=tmp_path / "absent")
    snap = await PrometheusSignalReader(canned.url, settings=ReaderSettings(auth=auth)).read(
        VLLM, TARGET, now=NOW
    )
    assert snap.error is not None and "bearer token file" in snap.error and "unreadable" in snap.error
    assert canned.queries == [], "nothing sent without the credentials"


async def test_basic_auth_from_a_password_file(canned: CannedPrometheus, tmp_path: Path) -> None:
    password = tmp_path / "password"
    password.write_text("s3cret\n")
    auth = PrometheusAuth(username="alice", password_file=password)
    await PrometheusSignalReader(canned.url, settings=ReaderSettings(scrape_interval="15s", auth=auth)).read(
        VLLM, TARGET, now=NOW
    )
    assert canned.headers[0]["Authorization"] == "Basic YWxpY2U6czNjcmV0"  # base64("alice:s3cret")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        pytest.param(
            {"bearer_token": "t", "username": "a", "password": "p"}, "not both", id="bearer-and-basic"
        ),
        pytest.param({"username": "a"}, "needs password", id="user-without-password"),
        pytest.param({"password": "p"}, "needs username", id="password-without-user"),
        pytest.param({"key_file": "k.pem"}, "key_file needs cert_file", id="key-without-cert"),
        pytest.param(
            {"insecure_skip_verify": True, "ca_file": "ca.pem"}, "set one of them", id="insecure-and-ca"
        ),
    ],
)
def test_inconsistent_auth_is_refused(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        PrometheusAuth(**kwargs)


async def test_sglang_idle_pool_reads_zero_retractions(canned: CannedPrometheus) -> None:
    # Case 2 of issue 10: SGLang creates the retraction counter at the first retraction.
    sglang = get_profile("sglang")
    groups = {
        "pods": [
            series("queue_depth", "0", pod="a"),
            series("running_requests", "0", pod="a"),
            series("kv_cache_utilization", "0.01", pod="a"),
            series("samples_in_window", "5", pod="a"),
        ],
        "rates": [],
        "absent": [series("absent", "1", pod="a", llmscale_metric=n) for n in sglang.counters.values()],
        **{group: [] for group in POOL_GROUPS},
    }
    give(canned, groups)
    snap = await reader(canned.url).read(sglang, TARGET, now=NOW)
    assert snap.preemption_rate == 0.0 and snap.leading_known
    assert "sglang:num_retracted_requests_total" in snap.absent_counters
    assert "sglang:num_queue_reqs{" in canned.queries[0]


@pytest.mark.parametrize(
    ("result", "error"),
    [
        pytest.param({"oops": 1}, "not a vector", id="object-instead-of-list"),
        pytest.param(["junk"], "malformed series", id="list-of-junk"),
    ],
)
def test_parse_group_rejects_non_vectors(result: Any, error: str) -> None:
    answer = FleetAnswer()
    parse_group(answer, "pods", result, SelectorLabels())
    text = " ".join(
        [*answer.failed.values(), *(line for lines in answer.problems.values() for line in lines)]
    )
    assert error in text


# -- wake queries (scale from zero) -----------------------------------------------------------------


def wake_series(value: str, **labels: str) -> dict[str, Any]:
    return {"metric": labels, "value": [EVAL, value]}


CHAT_WAKE = 'sum(gateway_pending{namespace="$namespace", service="$name"})'
EMBED = PoolTarget("ml", "embed", "interactive")


@pytest.mark.parametrize(
    ("answer", "value", "why"),
    [
        pytest.param([wake_series("4")], 4.0, None, id="value"),
        pytest.param([], None, "returned no series (add `or vector(0)`", id="no-series-is-unknown"),
        pytest.param([wake_series("NaN")], None, "NaN or infinite", id="nan-is-unknown"),
        pytest.param([wake_series("-1")], None, "negative value -1.0", id="negative-is-rejected"),
        pytest.param([wake_series("1", a="1"), wake_series("2", a="2")], None, "several series", id="duplicates"),
    ],
)
async def test_wake_query_answers(
    canned: CannedPrometheus, answer: list[Any], value: float | None, why: str | None
) -> None:
    give(canned, results())
    canned.answer(canned.vector(answer), group="other")
    snaps = await reader(canned.url).read_fleet([PoolRequest(TARGET, VLLM, frozenset({"a"}), CHAT_WAKE)], now=NOW)
    snap = snaps[TARGET]
    assert snap.wake_demand == value
    if why is None:
        assert "wake_demand" not in snap.unknown
    else:
        assert why in snap.unknown["wake_demand"], snap.unknown
    assert snap.queue_depth == 14.0, "the engines' signals are read as ever"
    assert together(canned.groups) == together(["pods", *sorted(SENT_TOGETHER), "other"])
    assert canned.queries[-1] == 'sum(\nsum(gateway_pending{namespace="ml", service="chat"})\n)'


async def test_each_llmdeployment_s_wake_query_is_its_own_query_so_a_bad_one_costs_only_its_pool(
    canned: CannedPrometheus,
) -> None:
    bad = canned.raw('{"status":"error","errorType":"bad_data","error":"parse error"}', status=400)
    canned.answer_containing('service="chat"', bad)
    canned.answer_containing('service="embed"', canned.vector([wake_series("2")]))
    snaps = await reader(canned.url).read_fleet(
        [PoolRequest(TARGET, VLLM, None, CHAT_WAKE), PoolRequest(EMBED, VLLM, None, CHAT_WAKE)], now=NOW
    )
    assert snaps[EMBED].wake_demand == 2.0
    assert snaps[TARGET].wake_demand is None and "parse error" in snaps[TARGET].unknown["wake_demand"]
    wakes = [q for q, g in zip(canned.queries, canned.groups, strict=True) if g == "other"]
    assert len(wakes) == 2, wakes
    assert all(("chat" in q) != ("embed" in q) for q in wakes), "no query holds two LLMDeployments' text"


# Issue 22, case 1: team B's wake query closes the joined query's parentheses and adds a series
# under team A's key. Case 2: team B reads team A's Secrets' count through the operator's identity.
INJECTION = (
    'vector(0)), "llmscale_wake", "evil", "", "") or label_replace(label_replace(vector(1000), "llmscale_wake", '
    '"0", "", ""), "x", "1", "", "") or label_replace(sum(vector(0)'
)
TEAM_A = PoolTarget("team-a", "chat", "interactive")
TEAM_B = PoolTarget("team-b", "chat", "interactive")


OUTSIDE_ITS_NAMESPACE = pytest.mark.parametrize(
    ("query", "why"),
    [
        pytest.param(INJECTION, "is not one PromQL instant-vector expression", id="issue-22-injection"),
        pytest.param('count(kube_secret_info{namespace="team-a"})', 'lacks the matcher namespace="team-b"',
                     id="issue-22-confused-deputy"),
        pytest.param('vector(0)) or (count(kube_secret_info{namespace="team-a"})', "is not one PromQL",
                     id="balanced-splice"),
        pytest.param('sum(gateway_pending{namespace="$namespace"}) or count(kube_secret_info)', "kube_secret_info",
                     id="or-without-namespace"),
    ],
)


async def _read_with_a_query_outside_its_namespace(canned: CannedPrometheus, query: str) -> Any:
    canned.answer_containing('namespace="team-a"', canned.vector([wake_series("3")]))
    canned.answer_containing("kube_secret_info", canned.vector([wake_series("7")]))
    return await reader(canned.url).read_fleet(
        [PoolRequest(TEAM_A, VLLM, None, CHAT_WAKE), PoolRequest(TEAM_B, VLLM, None, query)], now=NOW
    )


@OUTSIDE_ITS_NAMESPACE
async def test_a_wake_query_reading_outside_its_namespace_is_refused(
    canned: CannedPrometheus, query: str, why: str
) -> None:
    snaps = await _read_with_a_query_outside_its_namespace(canned, query)
    refused = snaps[TEAM_B].unknown["wake_demand"]
    assert refused.startswith("spec.scaling.wake.query refused: ") and why in refused, refused
    assert snaps[TEAM_B].wake_demand is None


@OUTSIDE_ITS_NAMESPACE
async def test_a_wake_query_reading_outside_its_namespace_is_never_sent(
    canned: CannedPrometheus, query: str, why: str
) -> None:
    await _read_with_a_query_outside_its_namespace(canned, query)
    assert not any("kube_secret_info" in q or "llmscale_wake" in q for q in canned.queries), "refused: not sent"


@OUTSIDE_ITS_NAMESPACE
async def test_a_wake_query_reading_outside_its_namespace_leaves_the_other_tenant_alone(
    canned: CannedPrometheus, query: str, why: str
) -> None:
    snaps = await _read_with_a_query_outside_its_namespace(canned, query)
    assert snaps[TEAM_A].wake_demand == 3.0 and "wake_demand" not in snaps[TEAM_A].unknown
    assert [q for q, g in zip(canned.queries, canned.groups, strict=True) if g == "other"] == [
        'sum(\nsum(gateway_pending{namespace="team-a", service="chat"})\n)'
    ]


async def test_no_wake_query_when_prometheus_is_down(refused_url: str) -> None:
    snaps = await reader(refused_url).read_fleet([PoolRequest(TARGET, VLLM, None, CHAT_WAKE)], now=NOW)
    assert snaps[TARGET].wake_demand is None
    assert snaps[TARGET].unknown["wake_demand"].startswith("wake query not sent: Prometheus at")


async def test_pools_without_a_wake_query_send_none(canned: CannedPrometheus) -> None:
    await reader(canned.url).read_fleet([PoolRequest(TARGET, VLLM)], now=NOW)
    assert "other" not in canned.groups


async def test_the_queries_after_the_first_are_sent_together(canned: CannedPrometheus) -> None:
    # Issue 14: at 1,000 pods the four queries one after the other took 11.9 s, past the 10 s a
    # tick waits; the queries after the first are in flight at once, the first goes alone.
    give(canned, results())
    for group in SENT_TOGETHER:
        canned.answers[group] = [canned.raw(canned.answers[group][0].body, delay_s=0.3)]
    snap = await reader(canned.url).read(VLLM, TARGET, now=NOW)
    assert snap.error is None and snap.queue_depth == 14.0
    assert canned.alongside[0] == ("pods", []), "the first query goes alone"
    assert all("pods" not in others for _, others in canned.alongside), "the rest after it"
    assert canned.most_in_flight == len(SENT_TOGETHER), "the rest were sent together"


def _slow_rest(canned: CannedPrometheus, delay_s: float) -> None:
    give(canned, results())
    for group in SENT_TOGETHER:
        canned.answers[group] = [canned.raw(canned.answers[group][0].body, delay_s=delay_s)]


async def test_the_queries_sent_together_get_the_time_the_first_did_not_use(canned: CannedPrometheus) -> None:
    # The 1,000-object benchmark: Prometheus evaluated the dear queries in 3.2 s at p50 and 5.7 s at
    # p99, and a fixed 5 s timeout failed whole reads. The first answers at once here; the rest take
    # 1.5 timeouts, inside the two a read may take.
    _slow_rest(canned, 0.7)
    snap = await reader(canned.url, timeout_s=0.5).read(VLLM, TARGET, now=NOW)
    assert snap.error is None and not snap.failed_queries, snap.error


async def test_a_read_ends_short_of_two_query_timeouts(canned: CannedPrometheus) -> None:
    # Short of the fleet reader's wait (two timeouts), so that the first query's answer is kept.
    _slow_rest(canned, 2.0)
    snap = await reader(canned.url, timeout_s=0.4).read(VLLM, TARGET, now=NOW)
    assert set(snap.failed_queries) == SENT_TOGETHER
    given = re.search(r"read timeout=([\d.]+)", snap.error or "")
    assert given is not None, snap.error
    assert 0.4 <= float(given.group(1)) <= READ_BUDGET_TIMEOUTS * 0.4
    assert snap.queue_depth == 14.0, "the first query's answer is kept"


async def test_a_minute_read_waits_as_long_as_a_reads_dear_queries(
    canned: CannedPrometheus, caplog: pytest.LogCaptureFixture
) -> None:
    # The 1,000-object benchmark: the minute query passed a fixed 5 s every two or three minutes.
    canned.answer(canned.raw(canned.vector([]).body, delay_s=0.6))
    r = reader(canned.url, timeout_s=0.4)
    try:
        await r.read_minutes([PoolRequest(TARGET, VLLM)], NOW)
        assert len(canned.queries) == 1 and "Failed to read the minute" not in caplog.text, caplog.text
        canned.answer(canned.raw(canned.vector([]).body, delay_s=2.0))
        await r.read_minutes([PoolRequest(TARGET, VLLM)], NOW)
        given = re.search(r"Failed to read the minute.*read timeout=([\d.]+)", caplog.text)
        assert given is not None and float(given.group(1)) == pytest.approx(READ_BUDGET_TIMEOUTS * 0.4), caplog.text
    finally:
        r.close()


async def test_a_slow_minute_read_holds_no_thread_a_fleet_read_waits_for(canned: CannedPrometheus) -> None:
    # Review of the minute read in a task of its own: on the fleet reads' threads (one here) a minute
    # read of 1.8 timeouts kept the next fleet read queued behind it.
    give(canned, results())
    canned.answer_containing('"minute_ttft_observations"', canned.raw(canned.vector([]).body, delay_s=1.5))
    r = reader(canned.url, timeout_s=1.0, max_workers=1)
    done: list[str] = []

    async def minute() -> None:
        await r.read_minutes([PoolRequest(TARGET, VLLM)], NOW)
        done.append("minute")

    async def fleet() -> None:
        await asyncio.sleep(0.2)  # the minute query is in flight
        snaps = await r.read_fleet([PoolRequest(TARGET, VLLM)], NOW)
        assert snaps[TARGET].error is None, snaps[TARGET].error
        done.append("fleet")

    try:
        await asyncio.gather(minute(), fleet())
    finally:
        r.close()
    assert done == ["fleet", "minute"]


async def test_the_first_query_keeps_its_own_timeout(canned: CannedPrometheus) -> None:
    give(canned, results())
    canned.answers["pods"] = [canned.raw(canned.answers["pods"][0].body, delay_s=0.6)]
    snap = await reader(canned.url, timeout_s=0.4).read(VLLM, TARGET, now=NOW)
    assert "pods" in snap.failed_queries and "ReadTimeoutError" in (snap.error or "")


async def test_a_failure_that_would_repeat_in_the_queries_sent_together_is_told_alike(
    canned: CannedPrometheus,
) -> None:
    give(canned, results())
    canned.answer(canned.raw("Unauthorized", status=401), group="rates")
    snap = await reader(canned.url).read(VLLM, TARGET, now=NOW)
    assert snap.error is not None and "HTTP 401" in snap.error
    assert snap.queue_depth == 14.0, "the first query's answer is kept"


def test_the_connection_pool_holds_every_query_of_two_reads_per_read_thread() -> None:
    # Review of issue 14: prometheus-api-client mounts urllib3's default pool of 10 connections;
    # a read sends up to seven queries at once and a timed-out read's may still run beside the
    # next read's, so connections were dropped and opened again.
    r = PrometheusSignalReader("http://127.0.0.1:9", settings=ReaderSettings(max_workers=2))
    try:
        adapter = r._client._session.get_adapter("http://127.0.0.1:9/api/v1/query")
        assert adapter._pool_maxsize == 2 * 2 * len(GROUPS)
        assert adapter.max_retries.total == ReaderSettings().retries, "the retry policy is kept"
    finally:
        r.close()


async def test_a_shards_reader_sends_its_namespaces_in_every_fleet_query(canned: CannedPrometheus) -> None:
    give(canned, results())
    r = PrometheusSignalReader(canned.url, settings=ReaderSettings(scrape_interval="15s"), namespaces=["ml", "ab"])
    try:
        snaps = await r.read_fleet([PoolRequest(TARGET, VLLM, frozenset({"a"}))], now=NOW)
    finally:
        r.close()
    assert snaps[TARGET].queue_depth == 14.0
    assert len(canned.queries) == len(GROUPS)
    assert all('namespace=~"^(?:ab|ml)$", llmscale_dev_deployment!=""' in q for q in canned.queries)


async def test_queries_go_in_a_form_body_so_a_long_one_passes_a_proxys_url_limit(canned: CannedPrometheus) -> None:
    # Review of issue 14: prometheus-api-client puts a POST's parameters in the URL; a shard's
    # namespace matcher, repeated in every selector, took the absent query past nginx's 8 KB.
    give(canned, results())
    many = [f"team-{i:03d}-inference-prod" for i in range(100)]
    r = PrometheusSignalReader(canned.url, settings=ReaderSettings(scrape_interval="15s"), namespaces=many)
    try:
        snaps = await r.read_fleet([PoolRequest(TARGET, VLLM, frozenset({"a"}))], now=NOW)
    finally:
        r.close()
    assert snaps[TARGET].error is None and snaps[TARGET].queue_depth == 14.0
    assert max(len(q) for q in canned.queries) > 16_000, "long queries arrive whole"
    assert all(h.get("Content-Type") == "application/x-www-form-urlencoded" for h in canned.headers)
    assert all(canned.paths), canned.paths
    assert all(p == "/api/v1/query" for p in canned.paths), "nothing in the URL but the path"


async def _tenant_of_each_query(canned: CannedPrometheus) -> dict[str, str | None]:
    # Mimir/Cortex/Thanos with a tenant per namespace: a user's query is sent as its own tenant, so
    # the store itself keeps it there; llmscale's own fleet queries keep the operator's headers.
    canned.answer_containing("gateway_pending", canned.vector([wake_series("1")]))
    read = reader(canned.url, tenant_headers={"X-Scope-OrgID": "{namespace}"},
                  auth=PrometheusAuth(headers={"X-Scope-OrgID": "llmscale"}))
    await read.read_fleet(
        [PoolRequest(TEAM_A, VLLM, None, CHAT_WAKE), PoolRequest(TEAM_B, VLLM, None, CHAT_WAKE)], now=NOW
    )
    return {q: h.get("X-Scope-OrgID") for q, h in zip(canned.queries, canned.headers, strict=True)}


async def test_each_namespace_s_wake_query_carries_its_own_tenant_header(canned: CannedPrometheus) -> None:
    tenant = await _tenant_of_each_query(canned)
    assert tenant['sum(\nsum(gateway_pending{namespace="team-a", service="chat"})\n)'] == "team-a"
    assert tenant['sum(\nsum(gateway_pending{namespace="team-b", service="chat"})\n)'] == "team-b"


async def test_the_fleet_queries_carry_no_tenant_header_of_a_namespace(canned: CannedPrometheus) -> None:
    tenant = await _tenant_of_each_query(canned)
    fleet = [t for q, t in tenant.items() if "gateway_pending" not in q]
    assert fleet and set(fleet) == {"llmscale"}


@pytest.mark.parametrize(
    "headers",
    [
        pytest.param({"X Scope": "{namespace}"}, id="not-a-header-name"),
        pytest.param({"X-Scope-OrgID": "{namespace}\r\nX-Evil: 1"}, id="line-break"),
        pytest.param({"X-Scope-OrgID": ""}, id="empty"),
    ],
)
def test_a_tenant_header_that_is_not_one_is_refused(headers: dict[str, str]) -> None:
    with pytest.raises(ValueError, match="tenant header"):
        ReaderSettings(tenant_headers=headers)


async def test_a_partial_answers_warnings_reach_the_snapshot(canned: CannedPrometheus) -> None:
    """Issue 21: Thanos/Mimir with partial response answer HTTP 200 with ``warnings`` (after
    ``data``, in Go's field order) and the series of pods 0-3 of 8; prometheus-api-client drops the
    warnings, the reader reads them off the answer and the snapshot carries them."""
    pods = [series(s, v, pod=f"p{i}") for i in range(4)
            for s, v in (("queue_depth", "1"), ("running_requests", "8"), ("kv_cache_utilization", "0.6"),
                         ("samples_in_window", "5"))]
    give(canned, {"pods": [], "rates": [], "absent": [], **{group: [] for group in POOL_GROUPS}})
    warned = json.dumps({"status": "success", "data": {"resultType": "vector", "result": pods},
                         "warnings": ["store B unavailable"]})
    canned.answer(canned.raw(warned), group="pods")
    snap = await reader(canned.url).read(get_profile("vllm"), TARGET, now=NOW)
    assert snap.warnings == ("store B unavailable",)
    assert snap.replicas_reporting == 4


async def test_an_answer_without_warnings_has_none(canned: CannedPrometheus) -> None:
    give(canned, {"pods": [series("queue_depth", "1", pod="a"), series("samples_in_window", "5", pod="a")],
                  "rates": [], "absent": [], **{group: [] for group in POOL_GROUPS}})
    snap = await reader(canned.url).read(get_profile("vllm"), TARGET, now=NOW)
    assert snap.warnings == ()


@pytest.mark.parametrize(
    ("observations", "itl_p95_s", "per_token_s", "tokens"),
    [
        # Issue 21: EAGLE with 3 speculative tokens commits ~2.8 tokens a step and vLLM observes the ITL
        # once per step: p95 0.14 s a step, (600 - 3) / 213 = 2.8 tokens a sample, 0.05 s a token.
        pytest.param("213.2", "0.14", 0.05, 2.8, id="speculative-eagle-3"),
        # Two tokens a step (1 speculative token): halved.
        pytest.param("298.5", "0.08", 0.04, 2.0, id="speculative-1"),
        # One token a step (no speculation): the p95 stands as read.
        pytest.param("600", "0.032", 0.032, 0.995, id="one-token-a-step"),
    ],
)
async def test_itl_is_judged_per_token_when_a_sample_covers_several(
    canned: CannedPrometheus, observations: str, itl_p95_s: str, per_token_s: float, tokens: float
) -> None:
    give(canned, results(pool={"itl_observations_rate": observations, "itl_p95_s": itl_p95_s}))
    snap = await reader(canned.url).read(VLLM, TARGET, now=NOW)
    assert snap.itl_tokens_per_sample == pytest.approx(tokens, abs=0.01)
    assert snap.itl_p95_s == pytest.approx(per_token_s, abs=0.001)


@pytest.mark.parametrize(
    ("skew_s", "newest_ago_s", "age_s", "reported"),
    [
        # Issue 21: the operator's node 120 s ahead of Prometheus read every snapshot 127.5 s old.
        pytest.param(120.0, 7.5, 7.5, -120.0, id="operator-120s-ahead"),
        # 120 s behind: a pod frozen 100 s ago read fresh (age -20 s, clipped to 0).
        pytest.param(-120.0, 100.0, 100.0, 120.0, id="operator-120s-behind-frozen-pod-is-old"),
        # Within a few seconds (a query's round trip) nothing is moved.
        pytest.param(2.0, 7.5, 9.5, -2.0, id="round-trip-is-not-skew"),
    ],
)
async def test_ages_are_measured_in_prometheus_clock(
    canned: CannedPrometheus, skew_s: float, newest_ago_s: float, age_s: float, reported: float
) -> None:
    give(canned, results(pod={"newest_sample_s": str(EVAL - newest_ago_s)}))
    now = EVAL + skew_s  # the operator's clock at the read; Prometheus evaluates at EVAL
    snap = await reader(canned.url).read(VLLM, TARGET, now=now)
    assert snap.age(now) == pytest.approx(age_s)
    assert snap.clock_skew_s == pytest.approx(reported)
