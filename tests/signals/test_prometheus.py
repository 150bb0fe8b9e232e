"""The reader against a canned Prometheus over real HTTP: one table row per kind of answer."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from llmscale.signals import (
    PoolTarget,
    PrometheusSignalReader,
    ReaderSettings,
    SignalSnapshot,
    get_profile,
    parse_answer,
)

TARGET = PoolTarget(namespace="ml", deployment="chat", pool="interactive")
VLLM = get_profile("vllm")
EVAL = 1_700_000_000.0
NOW = EVAL + 2.0  # the operator's clock, slightly after Prometheus evaluated

HEALTHY = {
    "queue_depth": "14",
    "running_requests": "96",
    "kv_cache_utilization": "0.82",
    "preemption_rate": "0.25",
    "ttft_p95_s": "0.41",
    "itl_p95_s": "0.032",
    "replicas_reporting": "3",
    "newest_sample_s": str(EVAL - 7.5),
    "evaluated_at_s": str(EVAL),
}
ALL_SIGNALS = (
    "queue_depth",
    "running_requests",
    "kv_cache_utilization",
    "preemption_rate",
    "ttft_p95_s",
    "itl_p95_s",
)


def with_(**changes: str | None) -> dict[str, str]:
    """Return HEALTHY with some signals changed, or removed where the change is ``None``."""
    out = dict(HEALTHY)
    for key, value in changes.items():
        if value is None:
            out.pop(key)
        else:
            out[key] = value
    return out


def reader(url: str, **settings: Any) -> PrometheusSignalReader:
    return PrometheusSignalReader(url, settings=ReaderSettings(**settings))


# Each row: the canned signals, extra raw series, and the snapshot fields expected. ``error`` is
# matched as a substring (or must be None).
ANSWER_CASES = [
    pytest.param(
        HEALTHY,
        [],
        dict(
            observed_at=EVAL - 7.5,
            queue_depth=14.0,
            running_requests=96.0,
            kv_cache_utilization=0.82,
            preemption_rate=0.25,
            ttft_p95_s=0.41,
            itl_p95_s=0.032,
            replicas_reporting=3,
            error=None,
        ),
        id="healthy-answer-gives-every-signal",
    ),
    pytest.param(
        {"evaluated_at_s": str(EVAL)},
        [],
        dict(
            observed_at=EVAL,
            queue_depth=None,
            kv_cache_utilization=None,
            preemption_rate=None,
            replicas_reporting=0,
            error=None,
        ),
        id="empty-vector-is-unknown-not-zero",
    ),
    pytest.param(
        with_(ttft_p95_s="NaN", itl_p95_s="NaN"),
        [],
        dict(ttft_p95_s=None, itl_p95_s=None, queue_depth=14.0, error=None),
        id="nan-quantile-of-an-idle-minute-is-unknown",
    ),
    pytest.param(
        with_(queue_depth="+Inf", kv_cache_utilization="-Inf"),
        [],
        dict(queue_depth=None, kv_cache_utilization=None, running_requests=96.0, error=None),
        id="infinities-are-unknown",
    ),
    pytest.param(
        with_(queue_depth="lots"),
        [],
        dict(queue_depth=None, running_requests=96.0, error="queue_depth: value 'lots' is not a number"),
        id="non-number-is-unknown-and-named",
    ),
    pytest.param(
        with_(queue_depth="-3"),
        [],
        dict(queue_depth=None, error="queue_depth: negative value -3.0"),
        id="negative-gauge-is-rejected",
    ),
    pytest.param(
        HEALTHY,
        [{"metric": {"llmscale_signal": "queue_depth", "prometheus_replica": "b"}, "value": [EVAL, "14"]}],
        dict(queue_depth=None, running_requests=96.0, error="queue_depth: 2 series where one was expected"),
        id="several-series-for-one-signal-are-rejected-not-summed",
    ),
    pytest.param(
        HEALTHY,
        [{"metric": {"__name__": "vllm:num_requests_waiting"}, "value": [EVAL, "999"]}],
        dict(queue_depth=14.0, error=None),
        id="series-without-signal-label-ignored",
    ),
    pytest.param(
        HEALTHY,
        [{"metric": {"llmscale_signal": "itl_p95_s"}}],
        dict(itl_p95_s=None, error="itl_p95_s: 2 series"),
        id="series-without-value-is-rejected",
    ),
    pytest.param(
        with_(newest_sample_s=str(EVAL - 240)),
        [],
        dict(observed_at=EVAL - 240, queue_depth=14.0, error=None),
        id="stale-scrape-shows-its-sample-time-not-the-query-time",
    ),
    pytest.param(
        # After an engine restart its counter fell from 1200 to 3; rate() counts the 3 as new
        # preemptions, so Prometheus answers a small positive rate, which passes through as is.
        with_(preemption_rate="0.05"),
        [],
        dict(preemption_rate=0.05, error=None),
        id="rate-after-counter-reset-passes-through",
    ),
    pytest.param(
        with_(preemption_rate=None),
        [],
        dict(preemption_rate=None, queue_depth=14.0, error=None),
        id="missing-preemption-counter-is-unknown",
    ),
]


@pytest.mark.parametrize(("signals", "extra", "expected"), ANSWER_CASES)
async def test_answer_is_parsed_defensively(
    canned: Any, signals: dict[str, str], extra: list[Any], expected: dict[str, Any]
) -> None:
    canned.answer(canned.vector(signals, extra))
    snap = await reader(canned.url).read(VLLM, TARGET, now=NOW)
    for key, want in expected.items():
        got = getattr(snap, key)
        if key == "error" and want is not None:
            assert got is not None and want in got, (key, got)
        else:
            assert got == (pytest.approx(want) if isinstance(want, float) else want), (key, got)


FAILURE_CASES = [
    pytest.param(
        500, '{"status":"error","errorType":"internal","error":"boom"}', "HTTP Status Code 500", id="http-500"
    ),
    pytest.param(
        400,
        '{"status":"error","errorType":"bad_data","error":"1:5: parse error: unexpected"}',
        "parse error",
        id="bad-query-status-error-400",
    ),
    pytest.param(
        422,
        '{"status":"error","errorType":"execution","error":"query processing would load too many samples"}',
        "too many samples",
        id="execution-error-422",
    ),
    pytest.param(
        200,
        '{"status":"error","errorType":"bad_data","error":"x"}',
        "without data.result",
        id="status-error-body-200",
    ),
    pytest.param(200, "<html>proxy login</html>", "not JSON", id="not-json-200"),
    pytest.param(
        200,
        json.dumps({"status": "success", "data": {"resultType": "scalar", "result": [EVAL, "1"]}}),
        "a scalar, not a vector",
        id="scalar-instead-of-vector",
    ),
]


@pytest.mark.parametrize(("status", "body", "error"), FAILURE_CASES)
async def test_failed_answer_gives_error_and_no_signals(
    canned: Any, status: int, body: str, error: str
) -> None:
    canned.answer(canned.raw(body, status=status))
    snap = await reader(canned.url).read(VLLM, TARGET, now=NOW)
    assert snap.error is not None and error in snap.error
    assert all(getattr(snap, name) is None for name in ALL_SIGNALS)
    assert snap.replicas_reporting == 0


async def test_http_failure_is_stamped_with_callers_now(canned: Any) -> None:
    canned.answer(canned.raw("oops", status=500))
    snap = await reader(canned.url).read(VLLM, TARGET, now=NOW)
    assert snap.observed_at == NOW
    assert canned.queries and len(canned.queries) == 1, "500 is not retried"


async def test_connection_refused_gives_error(refused_url: str) -> None:
    snap = await reader(refused_url).read(VLLM, TARGET, now=NOW)
    assert snap.error is not None and "did not answer" in snap.error and "Connection refused" in snap.error
    assert snap.observed_at == NOW and snap.queue_depth is None


async def test_slow_prometheus_times_out_without_retry(canned: Any) -> None:
    canned.answer(canned.raw(canned.vector(HEALTHY).body, delay_s=1.0))
    started = time.monotonic()
    snap = await reader(canned.url, timeout_s=0.2).read(VLLM, TARGET, now=NOW)
    assert snap.error is not None and "ReadTimeoutError" in snap.error
    assert time.monotonic() - started < 0.9
    assert len(canned.queries) == 1


async def test_gateway_503_is_retried_once(canned: Any) -> None:
    canned.answer(canned.raw("busy", status=503), canned.vector(HEALTHY))
    snap = await reader(canned.url).read(VLLM, TARGET, now=NOW)
    assert snap.error is None and snap.queue_depth == 14.0
    assert len(canned.queries) == 2


async def test_gateway_503_twice_names_the_status(canned: Any) -> None:
    canned.answer(canned.raw("busy", status=503))
    snap = await reader(canned.url).read(VLLM, TARGET, now=NOW)
    assert snap.error is not None and "503" in snap.error
    assert len(canned.queries) == 2


async def test_one_batched_query_per_read_with_the_pool_selector(canned: Any) -> None:
    canned.answer(canned.vector(HEALTHY))
    r = reader(canned.url)
    await r.read(VLLM, TARGET, now=NOW)
    assert canned.queries == [r.query_for(VLLM, TARGET)]
    sent = canned.queries[0]
    assert 'llmscale_dev_deployment="chat"' in sent and 'llmscale_dev_pool="interactive"' in sent
    assert "rate(vllm:num_preemptions_total{" in sent, "the counter is read through rate(), never raw"


async def test_injected_headers_reach_prometheus(canned: Any) -> None:
    canned.answer(canned.vector(HEALTHY))
    r = PrometheusSignalReader(canned.url, headers={"Authorization": "Bearer t0ken"})
    await r.read(VLLM, TARGET, now=NOW)
    assert canned.headers[0]["Authorization"] == "Bearer t0ken"


async def test_sglang_without_retraction_counter_reads_preemptions_as_unknown(canned: Any) -> None:
    canned.answer(canned.vector(with_(preemption_rate=None)))
    r = reader(canned.url)
    snap = await r.read(get_profile("sglang"), TARGET, now=NOW)
    assert snap.preemption_rate is None and snap.queue_depth == 14.0
    assert "sglang:num_queue_reqs{" in canned.queries[0]


@pytest.mark.parametrize(
    ("result", "error"),
    [
        pytest.param({"oops": 1}, "not a vector", id="object-instead-of-list"),
        pytest.param(["junk"], "malformed series", id="list-of-junk"),
    ],
)
def test_parse_answer_rejects_non_vectors(result: Any, error: str) -> None:
    snap = parse_answer(result, now=NOW)
    assert snap.error is not None and error in snap.error
    assert snap.observed_at == NOW


def test_parse_answer_returns_a_signal_snapshot() -> None:
    snap = parse_answer(
        [{"metric": {"llmscale_signal": "replicas_reporting"}, "value": [EVAL, "2"]}], now=NOW
    )
    assert isinstance(snap, SignalSnapshot)
    assert snap.replicas_reporting == 2 and snap.observed_at == EVAL
