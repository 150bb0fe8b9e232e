"""``/metrics`` read with prometheus-client's own text parser: vLLM V1 names, types, labels and
buckets (copied here from vLLM's ``vllm/v1/metrics/loggers.py``, not from our code), counters that
move with requests, and the legacy name set."""

from __future__ import annotations

from typing import Any

import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

MODEL = "llama-3.1-8b"

# vLLM 0.11 loggers.py, PrometheusStatLogger.
VLLM_TTFT_BUCKETS = [
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
]
VLLM_ITL_BUCKETS = [
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
]
VLLM_REQUEST_LATENCY_BUCKETS = [
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
    960.0,
    1920.0,
    7680.0,
]

CURRENT_TYPES = {
    "vllm:num_requests_running": "gauge",
    "vllm:num_requests_waiting": "gauge",
    "vllm:kv_cache_usage_perc": "gauge",
    "vllm:cache_config_info": "gauge",
    "vllm:num_preemptions": "counter",
    "vllm:prompt_tokens": "counter",
    "vllm:generation_tokens": "counter",
    "vllm:request_success": "counter",
    "vllm:prefix_cache_queries": "counter",
    "vllm:prefix_cache_hits": "counter",
    "vllm:time_to_first_token_seconds": "histogram",
    "vllm:inter_token_latency_seconds": "histogram",
    "vllm:e2e_request_latency_seconds": "histogram",
    "vllm:request_queue_time_seconds": "histogram",
}


def families(engine: Any) -> dict[str, Any]:
    _, body, ctype = engine.get("/metrics")
    assert ctype.startswith("text/plain")
    return {f.name: f for f in text_string_to_metric_families(body.decode())}


def buckets(fam: Any) -> list[float]:
    return [
        float(s.labels["le"]) for s in fam.samples if s.name.endswith("_bucket") and s.labels["le"] != "+Inf"
    ]


def test_the_metric_families_match_vllms_names_types_labels(engine_8b: Any) -> None:
    fams = families(engine_8b)
    for name, kind in CURRENT_TYPES.items():
        assert name in fams, name
        assert fams[name].type == kind, name
        for s in fams[name].samples:
            assert s.labels["engine"] == "0"
            if name != "vllm:cache_config_info":
                assert s.labels["model_name"] == MODEL
    # legacy names are absent in the current set
    assert "vllm:gpu_cache_usage_perc" not in fams and "vllm:time_per_output_token_seconds" not in fams
    reasons = {s.labels["finished_reason"] for s in fams["vllm:request_success"].samples}
    assert {"stop", "length", "abort"} <= reasons
    (info,) = [s for s in fams["vllm:cache_config_info"].samples]
    assert info.value == 1 and info.labels["block_size"] == "16" and int(info.labels["num_gpu_blocks"]) > 0


def test_histogram_buckets_are_vllms(engine_8b: Any) -> None:
    fams = families(engine_8b)
    assert buckets(fams["vllm:time_to_first_token_seconds"]) == VLLM_TTFT_BUCKETS
    assert buckets(fams["vllm:inter_token_latency_seconds"]) == VLLM_ITL_BUCKETS
    assert buckets(fams["vllm:e2e_request_latency_seconds"]) == VLLM_REQUEST_LATENCY_BUCKETS
    assert buckets(fams["vllm:request_queue_time_seconds"]) == VLLM_REQUEST_LATENCY_BUCKETS


def test_every_counter_moves_by_one_requests_worth(engine_8b: Any) -> None:
    before = {
        "prompt": engine_8b.value("vllm:prompt_tokens_total"),
        "gen": engine_8b.value("vllm:generation_tokens_total"),
        "ok": engine_8b.value("vllm:request_success_total", finished_reason="length"),
        "ttft": engine_8b.value("vllm:time_to_first_token_seconds_count"),
        "itl": engine_8b.value("vllm:inter_token_latency_seconds_count"),
        "e2e": engine_8b.value("vllm:e2e_request_latency_seconds_count"),
        "queries": engine_8b.value("vllm:prefix_cache_queries_total"),
    }
    client = openai.OpenAI(base_url=engine_8b.v1, api_key="unused", max_retries=0)
    client.completions.create(model=MODEL, prompt=list(range(300)), max_tokens=20)
    after = {
        "prompt": engine_8b.value("vllm:prompt_tokens_total"),
        "gen": engine_8b.value("vllm:generation_tokens_total"),
        "ok": engine_8b.value("vllm:request_success_total", finished_reason="length"),
        "ttft": engine_8b.value("vllm:time_to_first_token_seconds_count"),
        "itl": engine_8b.value("vllm:inter_token_latency_seconds_count"),
        "e2e": engine_8b.value("vllm:e2e_request_latency_seconds_count"),
        "queries": engine_8b.value("vllm:prefix_cache_queries_total"),
    }
    delta = {k: after[k] - before[k] for k in before}
    assert delta == {"prompt": 300, "gen": 20, "ok": 1, "ttft": 1, "itl": 19, "e2e": 1, "queries": 300}
    assert engine_8b.value("vllm:num_requests_running") == 0
    assert engine_8b.value("vllm:kv_cache_usage_perc") == 0


def test_legacy_names(start_engine: Any) -> None:
    with start_engine(
        "--model",
        MODEL,
        "--gpu",
        "h100-sxm",
        "--max-model-len",
        "4096",
        "--metrics-names",
        "legacy",
        "--time-scale",
        "5",
    ) as engine:
        client = openai.OpenAI(base_url=engine.v1, api_key="unused", max_retries=0)
        client.completions.create(model=MODEL, prompt="hello", max_tokens=5)
        fams = families(engine)
        assert fams["vllm:gpu_cache_usage_perc"].type == "gauge"
        assert fams["vllm:time_per_output_token_seconds"].type == "histogram"
        assert buckets(fams["vllm:time_per_output_token_seconds"]) == VLLM_ITL_BUCKETS
        assert engine.value("vllm:time_per_output_token_seconds_count") == 4
        for gone in ("vllm:kv_cache_usage_perc", "vllm:inter_token_latency_seconds"):
            assert gone not in fams
        # Names that did not change stay.
        assert fams["vllm:num_requests_waiting"].type == "gauge"
        assert fams["vllm:num_preemptions"].type == "counter"


@pytest.mark.parametrize("served", ["chat-8b"])
def test_served_model_name_labels_series(start_engine: Any, served: str) -> None:
    with start_engine(
        "--model", MODEL, "--gpu", "h100-sxm", "--max-model-len", "4096", "--served-model-name", served
    ) as engine:
        fams = families(engine)
        assert {s.labels["model_name"] for s in fams["vllm:num_requests_running"].samples} == {served}
        client = openai.OpenAI(base_url=engine.v1, api_key="unused", max_retries=0)
        with pytest.raises(openai.NotFoundError):
            client.completions.create(model=MODEL, prompt="hi", max_tokens=1)
        assert client.completions.create(model=served, prompt="hi", max_tokens=1).model == served
