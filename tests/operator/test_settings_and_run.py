"""Operator settings from flags and environment, and the operator's own HTTP endpoints."""

from __future__ import annotations

import argparse
import logging
import threading

import aiohttp
import pytest
from prometheus_client import CollectorRegistry

from llmscale.commands.run import QuietTimerFilter, _serving, add_arguments, health_app
from llmscale.handlers import OperatorMetrics, configure_kopf
from llmscale.policy import Reason
from llmscale.settings import OperatorSettings, load_settings


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(list(argv))


def test_defaults_need_a_namespace() -> None:
    with pytest.raises(ValueError, match="--namespace"):
        load_settings(parse(), {})


def test_defaults() -> None:
    s = load_settings(parse("--namespace", "serving"), {})
    assert s == OperatorSettings(namespaces=("serving",))
    assert s.prometheus_url == "http://prometheus.monitoring.svc:9090"
    assert s.standalone and s.field_manager == "llmscale" and s.metrics_port == 8080


def test_environment_is_read_and_flags_win() -> None:
    env = {
        "LLMSCALE_PROMETHEUS_URL": "http://prom:9090",
        "LLMSCALE_NAMESPACES": "a, b",
        "LLMSCALE_TICK_BASE_SECONDS": "2.5",
        "LLMSCALE_METRICS_PORT": "9100",
        "LLMSCALE_PEERING": "llmscale",
        "LLMSCALE_CLUSTER_SCANNING": "false",
    }
    s = load_settings(parse(), env)
    assert s.prometheus_url == "http://prom:9090"
    assert s.namespaces == ("a", "b")
    assert s.tick_base_seconds == 2.5 and s.metrics_port == 9100
    assert s.peering_name == "llmscale" and not s.standalone
    assert not s.cluster_scanning
    flagged = load_settings(parse("-n", "c", "-n", "d", "--prometheus-url", "https://p", "--standalone"), env)
    assert flagged.namespaces == ("c", "d")
    assert flagged.prometheus_url == "https://p"
    assert flagged.standalone


def test_all_namespaces_flag_overrides_namespaces_from_the_environment() -> None:
    s = load_settings(parse("--all-namespaces"), {"LLMSCALE_NAMESPACES": "a"})
    assert s.all_namespaces and s.namespaces == ()


@pytest.mark.parametrize(
    ("env", "message"),
    [
        pytest.param({"LLMSCALE_TICK_BASE_SECONDS": "soon"}, "LLMSCALE_TICK_BASE_SECONDS", id="not a number"),
        pytest.param({"LLMSCALE_ALL_NAMESPACES": "perhaps"}, "LLMSCALE_ALL_NAMESPACES", id="not a boolean"),
        pytest.param({"LLMSCALE_PROMETHEUS_URL": "prometheus:9090"}, "http", id="not a URL"),
        pytest.param({"LLMSCALE_LOG_LEVEL": "LOUD"}, "log_level", id="not a level"),
    ],
)
def test_bad_values_are_refused_with_their_name(env: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        load_settings(parse("-n", "x"), env)


def test_kopf_settings_follow_ours() -> None:
    peered = configure_kopf(OperatorSettings(all_namespaces=True, peering_name="llmscale", cluster_scanning=False))
    assert not peered.peering.standalone and peered.peering.mandatory and peered.peering.clusterwide
    assert peered.peering.name == "llmscale"
    assert peered.scanning.disabled
    assert peered.persistence.finalizer == "llmscale.dev/finalizer"
    assert configure_kopf(OperatorSettings(namespaces=("a",))).peering.standalone


async def test_metrics_health_and_readiness_endpoints() -> None:
    metrics = OperatorMetrics(CollectorRegistry())
    metrics.desired.labels("serving", "chat", "interactive").set(5)
    metrics.decisions.labels("up", Reason.DesiredWithinRange).inc()
    ready = threading.Event()
    async with _serving(health_app(metrics, ready), "127.0.0.1", 0) as runner:
        host, port = runner.addresses[0][:2]
        base = f"http://{host}:{port}"
        async with aiohttp.ClientSession() as session:
            async with session.get(f"{base}/healthz") as r:
                assert r.status == 200
            async with session.get(f"{base}/readyz") as r:
                assert r.status == 503
            ready.set()
            async with session.get(f"{base}/readyz") as r:
                assert r.status == 200
            async with session.get(f"{base}/metrics") as r:
                assert r.status == 200
                assert r.headers["Content-Type"].startswith("text/plain")
                text = await r.text()
    assert 'llmscale_desired_replicas{name="chat",namespace="serving",pool="interactive"} 5.0' in text
    assert 'llmscale_decisions_total{direction="up",reason="DesiredWithinRange"} 1.0' in text
    assert "llmscale_tick_duration_seconds_bucket" in text


@pytest.mark.parametrize(
    ("level", "message", "kept"),
    [
        pytest.param(logging.INFO, "Timer 'tick' succeeded.", False, id="timer success dropped"),
        pytest.param(logging.DEBUG, "Timer 'tick' is invoked.", False, id="timer invocation dropped"),
        pytest.param(logging.ERROR, "Timer 'tick' failed with an exception.", True, id="timer failure kept"),
        pytest.param(logging.INFO, "Scaled LLMDeployment serving/chat from 3 to 5 replicas", True, id="ours kept"),
    ],
)
def test_quiet_timer_filter(level: int, message: str, kept: bool) -> None:
    record = logging.LogRecord("kopf.objects", level, __file__, 1, message, None, None)
    assert QuietTimerFilter().filter(record) is kept
