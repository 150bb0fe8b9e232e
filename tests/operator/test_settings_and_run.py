"""Operator settings from flags and environment, and the operator's own HTTP endpoints."""

from __future__ import annotations

import argparse
import contextlib
import logging
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from prometheus_client import CollectorRegistry
from pydantic import BaseModel
from tests.settings_samples import SAMPLES

from llmscale.commands.run import QuietTimerFilter, _serving, add_arguments, health_app
from llmscale.controller.handlers import configure_kopf
from llmscale.controller.metrics import OperatorMetrics
from llmscale.controller.settings import READER_SETTINGS, OperatorSettings, load_settings, setting_names
from llmscale.policy import Reason
from llmscale.signals.config import ReaderSettings

DOCS = Path(__file__).resolve().parents[2] / "docs" / "operator.md"
NAMES = {n.field: n for n in setting_names()}


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
    assert s.field_manager == "llmscale" and s.metrics_port == 8080
    # Issue 11, case 15: a workstation run beside an installed operator must not be a second
    # writer, so peering is the default (Kopf's auto-detection of the `llmscale` object).
    assert not s.standalone and s.peering == "llmscale" and s.peering_name is None


ENV = {
    "LLMSCALE_PROMETHEUS_URL": "http://prom:9090",
    "LLMSCALE_NAMESPACES": "a, b",
    "LLMSCALE_TICK_BASE_SECONDS": "2.5",
    "LLMSCALE_METRICS_PORT": "9100",
    "LLMSCALE_PEERING": "llmscale",
    "LLMSCALE_CLUSTER_SCANNING": "false",
}


def test_the_environment_is_read() -> None:
    s = load_settings(parse(), ENV)
    assert s.prometheus_url == "http://prom:9090"
    assert s.namespaces == ("a", "b")
    assert s.tick_base_seconds == 2.5 and s.metrics_port == 9100
    assert s.peering_name == "llmscale" and not s.standalone
    assert not s.cluster_scanning


def test_flags_win_over_the_environment() -> None:
    flagged = load_settings(parse("-n", "c", "-n", "d", "--prometheus-url", "https://p", "--standalone"), ENV)
    assert flagged.namespaces == ("c", "d")
    assert flagged.prometheus_url == "https://p"
    assert flagged.standalone and flagged.peering is None


def test_standalone_excludes_a_named_peering() -> None:
    with pytest.raises(ValueError, match="standalone"):
        load_settings(parse("-n", "a"), {"LLMSCALE_STANDALONE": "true", "LLMSCALE_PEERING": "blue"})
    assert load_settings(parse("-n", "a", "--peering", "blue"), {"LLMSCALE_STANDALONE": "true"}).peering == "blue"
    with pytest.raises(SystemExit):
        parse("-n", "a", "--peering", "blue", "--standalone")


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
    assert configure_kopf(OperatorSettings(namespaces=("a",), standalone=True)).peering.standalone
    auto = configure_kopf(OperatorSettings(namespaces=("a",), peering_priority=5))
    assert not auto.peering.standalone and not auto.peering.mandatory and not auto.peering.clusterwide
    assert auto.peering.name == "llmscale" and auto.peering.priority == 5


@contextlib.asynccontextmanager
async def _health_server() -> AsyncIterator[tuple[aiohttp.ClientSession, str, threading.Event]]:
    """The health app on a free port with a few metrics set: a session, its base URL and its ready flag."""
    metrics = OperatorMetrics(CollectorRegistry())
    metrics.desired.labels("serving", "chat", "interactive").set(5)
    metrics.decisions.labels("up", Reason.DesiredWithinRange).inc()
    ready = threading.Event()
    async with _serving(health_app(metrics, ready), "127.0.0.1", 0) as runner:
        host, port = runner.addresses[0][:2]
        async with aiohttp.ClientSession() as session:
            yield session, f"http://{host}:{port}", ready


async def test_the_health_endpoint_answers_ok() -> None:
    async with _health_server() as (session, base, _), session.get(f"{base}/healthz") as r:
        assert r.status == 200


async def test_the_readiness_endpoint_answers_ok_once_ready() -> None:
    async with _health_server() as (session, base, ready):
        async with session.get(f"{base}/readyz") as r:
            assert r.status == 503
        ready.set()
        async with session.get(f"{base}/readyz") as r:
            assert r.status == 200


async def test_the_metrics_endpoint_serves_the_operators_metrics() -> None:
    async with _health_server() as (session, base, ready):
        ready.set()
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


def test_every_setting_has_a_sample() -> None:
    assert set(SAMPLES) == set(OperatorSettings.model_fields) == set(NAMES)


def _argv(field: str) -> list[str]:
    """Flags that set ``field`` to its sample (plus a namespace and what the sample needs)."""
    sample, flag = SAMPLES[field], NAMES[field].flags[0]
    if field == "namespaces":
        return [flag, "a", flag, "b"]
    if field == "all_namespaces":
        return [flag]
    needs = [arg for f, raw in sample.needs.items() for arg in (NAMES[f].flags[0], raw)]
    if isinstance(sample.value, bool):
        return ["-n", "x", *needs, flag if sample.value else "--no-" + flag.removeprefix("--")]
    return ["-n", "x", *needs, flag, sample.raw]


@pytest.mark.parametrize("field", [pytest.param(f, id=f) for f in SAMPLES])
def test_every_setting_is_reachable_by_its_flag(field: str) -> None:
    assert getattr(load_settings(parse(*_argv(field)), {}), field) == SAMPLES[field].value


@pytest.mark.parametrize("field", [pytest.param(f, id=f) for f in SAMPLES])
def test_every_setting_is_reachable_by_its_environment_variable(field: str) -> None:
    sample = SAMPLES[field]
    env = {NAMES[field].env: sample.raw, **{NAMES[f].env: raw for f, raw in sample.needs.items()}}
    if field not in ("namespaces", "all_namespaces"):
        env["LLMSCALE_NAMESPACES"] = "x"
    assert getattr(load_settings(parse(), env), field) == sample.value


def test_every_leaf_of_the_reader_settings_is_a_setting() -> None:
    """Each setting of the Prometheus reader (llmscale.signals.config) is reachable from
    llmscale run, with the reader's own default."""

    def leaves(model: type[BaseModel], prefix: tuple[str, ...] = ()) -> set[tuple[str, ...]]:
        out: set[tuple[str, ...]] = set()
        for name, info in model.model_fields.items():
            kind = info.annotation
            if isinstance(kind, type) and issubclass(kind, BaseModel):
                out |= leaves(kind, (*prefix, name))
            else:
                out.add((*prefix, name))
        return out

    assert set(READER_SETTINGS) == leaves(ReaderSettings)
    assert OperatorSettings(namespaces=("x",)).reader_settings() == ReaderSettings()


@pytest.mark.parametrize("field", [pytest.param(f, id=f) for f in SAMPLES])
def test_every_setting_is_documented_with_its_three_names(field: str) -> None:
    """docs/operator.md's configuration table has a row naming the flag, the variable and the
    Helm value of every setting."""
    n = NAMES[field]
    rows = [line for line in DOCS.read_text().splitlines() if line.startswith("|") and f"`{n.env}" in line]
    assert rows, f"docs/operator.md does not mention {n.env}"
    assert any(f"`{n.flags[0]}" in row and f"`{n.helm}`" in row for row in rows), rows


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        pytest.param(["--tick-base-seconds", "soon"], {}, "--tick-base-seconds", id="flag not a number"),
        pytest.param([], {"LLMSCALE_PROMETHEUS_RATE_WINDOW": "1 minute"}, "LLMSCALE_PROMETHEUS_RATE_WINDOW",
                     id="not a PromQL duration"),
        pytest.param(["--prometheus-quantile", "1.5"], {}, "--prometheus-quantile", id="quantile above 1"),
        pytest.param([], {"LLMSCALE_PROMETHEUS_POOL_LABEL": "llmscale.dev/pool"}, "LLMSCALE_PROMETHEUS_POOL_LABEL",
                     id="not a Prometheus label name"),
        pytest.param(["--signal-history-seconds", "-1"], {}, "--signal-history-seconds", id="negative history"),
        pytest.param(["--prometheus-retries", "1"], {"LLMSCALE_METRICS_PORT": "http"}, "LLMSCALE_METRICS_PORT",
                     id="a bad variable is refused even beside good flags"),
    ],
)
def test_bad_values_name_their_flag_or_variable(argv: list[str], env: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        load_settings(parse("-n", "x", *argv), env)


def test_building_settings_reads_no_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only load_settings reads an environment, the one it is given: tests and embedders that
    build OperatorSettings directly are not steered by the process's."""
    monkeypatch.setenv("LLMSCALE_PROMETHEUS_URL", "http://elsewhere:9090")
    assert OperatorSettings(namespaces=("x",)).prometheus_url == "http://prometheus.monitoring.svc:9090"
    assert load_settings(parse("-n", "x"), {}).prometheus_url == "http://prometheus.monitoring.svc:9090"


def test_the_prometheus_reader_follows_the_settings() -> None:
    from llmscale.commands.run import prometheus_reader
    from llmscale.signals.prometheus import PrometheusSignalReader

    settings = load_settings(parse("-n", "x", "--prometheus-rate-window", "30s", "--prometheus-quantile", "0.99",
                                   "--prometheus-pool-label", "pool", "--prometheus-timeout-seconds", "3",
                                   "--prometheus-retries", "2"),
                             {"LLMSCALE_PROMETHEUS_HEADERS": '{"X-Scope-OrgID": "team-a"}'})
    reader = prometheus_reader(settings)
    assert isinstance(reader, PrometheusSignalReader)
    s = reader.settings
    assert (s.rate_window, s.quantile, s.labels.pool, s.timeout_s, s.retries) == ("30s", 0.99, "pool", 3.0, 2)
    assert s.auth.headers == {"X-Scope-OrgID": "team-a"}
    assert reader.namespaces == ("x",), "a shard's exact namespaces narrow its fleet queries"
    reader.close()


@pytest.mark.parametrize(
    ("argv", "namespaces"),
    [
        pytest.param(["-n", "b", "-n", "a"], ("a", "b"), id="exact names, sorted"),
        pytest.param(["-n", "team-*"], (), id="a pattern: every namespace"),
        pytest.param(["-n", "a", "-n", "team-?"], (), id="names and a pattern: every namespace"),
        pytest.param(["--all-namespaces"], (), id="all namespaces"),
    ],
)
def test_the_prometheus_reader_reads_the_namespaces_served_when_they_are_named(
    argv: list[str], namespaces: tuple[str, ...],
) -> None:
    from llmscale.commands.run import prometheus_reader

    reader = prometheus_reader(load_settings(parse(*argv), {}))
    try:
        assert reader.namespaces == namespaces
    finally:
        reader.close()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        pytest.param(["--prometheus-bearer-token", "t", "--prometheus-username", "u",
                      "--prometheus-password-file", "/p"], "not both", id="bearer and basic auth"),
        pytest.param(["--prometheus-username", "u"], "needs password", id="user without password"),
        pytest.param(["--prometheus-key-file", "/k"], "needs cert_file", id="key without certificate"),
        pytest.param(["--prometheus-copy-labels", "a,b-c"], "--prometheus-copy-labels", id="not a label name"),
        pytest.param(["--prometheus-headers", "X-Scope-OrgID: a"], "--prometheus-headers", id="headers not JSON"),
    ],
)
def test_reader_settings_are_checked_by_the_reader(argv: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        load_settings(parse("-n", "x", *argv), {})
