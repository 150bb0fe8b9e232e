"""The operator with the real Prometheus reader, against a canned Prometheus over real HTTP and
kmock's API server: the fleet reader, and what the signals' faults become in status and Events.

Nothing of ours is replaced: the operator is ``llmscale.commands.run.serve`` (Kopf, the official
client, the real policy), the signal source is :class:`PrometheusSignalReader` talking HTTP through
prometheus-api-client to an aiohttp server that answers each query group with set series
(``tests/signals/conftest.py``). The API server is kmock's emulator (``test_operator_kmock.py``).

Cases of issue 10, seen from the operator: missing latency histograms named in
``MetricsAvailable``; a hung engine named in ``EnginesStalled`` and a Warning Event, never driving a
scale-up; a deleted pod's lingering series ignored; a rate window too short as a condition; scale
from zero on a wake query. And issue 14's: the pools of every LLMDeployment from one set of
fleet-wide queries.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from tests.operator.test_operator_kmock import (
    DEPLOYMENTS,
    LLMDEPLOYMENTS,
    NAMESPACE,
    NOON,
    PODS,
    ApplyingEmulator,
    condition,
    events_with,
    eventually,
    llmdeployment,
    pod,
    posted_events,
    replicas_of,
    status_patches,
    stored,
    ticks,
)
from tests.signals.conftest import CannedPrometheus, series

from llmscale.controller.settings import OperatorSettings
from llmscale.policy import Reason
from llmscale.signals import PrometheusSignalReader, ReaderSettings
from llmscale.signals.queries import GROUP_OF, GROUPS, SIGNAL_LABEL

R = Reason
#: The canned answers' evaluation time: the operator's fake wall clock.
EVAL = NOON
NO_TTFT = "no vllm:time_to_first_token_seconds histogram"


def labelled(
    signal: str, value: float, pod_name: str | None = None, name: str = "chat", at: float = EVAL, **labels: str
) -> Any:
    """One answer series of ``signal`` for LLMDeployment ``serving/<name>`` (per pod with ``pod_name``),
    evaluated at ``at``."""
    extra = {"namespace": NAMESPACE, "llmscale_dev_deployment": name, **labels}
    if pod_name is not None:
        extra["pod"] = pod_name
    return series(signal, repr(float(value)), eval_s=at, **extra)


def engine_pod(
    pod_name: str,
    *,
    queue: float,
    running: float,
    kv: float,
    generated: float,
    running_min: float | None = None,
    name: str = "chat",
    at: float = EVAL,
) -> dict[str, list[Any]]:
    """The per-pod series of one vLLM engine evaluated at ``at``: gauges, newest sample 2 s old, 5
    samples in the 60 s window (a 15 s scrape), and its counters' rates."""
    pods = {
        "queue_depth": queue, "running_requests": running, "kv_cache_utilization": kv,
        "newest_sample_s": at - 2, "samples_in_window": 5,
        "running_min": running if running_min is None else running_min,
    }
    rates = {
        "preemption_rate": 0.0, "request_rate": generated / 100, "prompt_tokens_rate": generated,
        "generation_tokens_rate": generated, "prefix_cache_hits_rate": 0.0, "prefix_cache_queries_rate": generated,
    }
    return {
        "pods": [labelled(k, v, pod_name, name, at) for k, v in pods.items()],
        "rates": [labelled(k, v, pod_name, name, at) for k, v in rates.items()],
    }


def answers(*parts: dict[str, list[Any]], pools: list[Any] | None = None) -> dict[str, list[Any]]:
    """The series of each query group: the engines' parts joined, and the per-pool series ``pools``."""
    out: dict[str, list[Any]] = {group: [] for group in GROUPS}
    for part in parts:
        for group, items in part.items():
            out[group] += items
    for item in pools or []:  # each per-pool series to its histogram's query
        out[GROUP_OF[item["metric"][SIGNAL_LABEL]]].append(item)
    return out


def latency(name: str = "chat", ttft: float = 0.4, itl: float = 0.03, at: float = EVAL) -> list[Any]:
    values = {"ttft_p95_s": ttft, "itl_p95_s": itl, "ttft_observations_rate": 1.0, "itl_observations_rate": 50.0}
    return [labelled(k, v, name=name, at=at) for k, v in values.items()]


def give(canned: CannedPrometheus, groups: dict[str, list[Any]]) -> None:
    for group, result in groups.items():
        canned.answer(canned.vector(result), group=group)


def reader(canned: CannedPrometheus, **settings: Any) -> PrometheusSignalReader:
    return PrometheusSignalReader(canned.url, settings=ReaderSettings(**settings))


def status_of(kube: ApplyingEmulator, name: str = "chat") -> dict[str, Any]:
    return (stored(kube, LLMDEPLOYMENTS, name) or {}).get("status", {})


async def condition_is(kube: ApplyingEmulator, type_: str, reason: Reason, name: str = "chat") -> dict[str, Any]:
    """Wait for condition ``type_`` with ``reason`` on ``serving/<name>``; return it."""

    def check() -> dict[str, Any] | None:
        cond = condition(status_of(kube, name), type_)
        return cond if cond is not None and cond["reason"] == reason else None

    return await eventually(check, timeout=10.0, what=f"{type_}={reason} (now {condition(status_of(kube, name), type_)})")


def two_ready_pods(kube: ApplyingEmulator) -> None:
    kube.objects[LLMDEPLOYMENTS, NAMESPACE, "chat"] = llmdeployment()
    for name in ("chat-a", "chat-b"):
        kube.objects[PODS, NAMESPACE, name] = pod(name, ready=True)


async def _latency_unknown(
    canned: CannedPrometheus, kube: ApplyingEmulator, start_operator: Callable[..., Any]
) -> tuple[Any, dict[str, Any]]:
    """Issue 10, case 4: Prometheus keeps the latency histograms as native series only and the
    reader finds neither form: the operator and ``MetricsAvailable`` once it is ``LatencyUnknown``."""
    two_ready_pods(kube)
    groups = answers(engine_pod("chat-a", queue=0, running=2, kv=0.1, generated=50),
                     engine_pod("chat-b", queue=0, running=2, kv=0.1, generated=50))
    groups["absent"] = [labelled("absent", 1, p, llmscale_metric=m) for p in ("chat-a", "chat-b")
                        for m in ("vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds")]
    give(canned, groups)
    op = await start_operator(reader(canned))
    return op, await condition_is(kube, "MetricsAvailable", R.LatencyUnknown)


async def test_missing_latency_histograms_are_named_with_the_guard_off(
    canned: CannedPrometheus, kube: ApplyingEmulator, start_operator: Callable[..., Any]
) -> None:
    """``MetricsAvailable`` is not ``MetricsFresh`` but ``LatencyUnknown``, naming both p95s, why,
    and that the latency guard is off."""
    _, cond = await _latency_unknown(canned, kube, start_operator)
    assert cond["status"] == "True"
    assert f"TTFT p95 unknown: {NO_TTFT}" in cond["message"] and "ITL p95 unknown: no vllm:inter_token" in cond["message"]
    assert cond["message"].endswith("the latency guard is off")
    # Everything else is well: the window fits the 15 s scrape, no engine hangs.
    assert condition(status_of(kube), "RateWindowFits")["reason"] == R.WindowFits  # type: ignore[index]
    assert condition(status_of(kube), "EnginesStalled")["reason"] == R.NoStalledPods  # type: ignore[index]


async def test_latency_histograms_that_come_back_make_the_metrics_fresh_again(
    canned: CannedPrometheus, kube: ApplyingEmulator, start_operator: Callable[..., Any]
) -> None:
    op, _ = await _latency_unknown(canned, kube, start_operator)
    # The histograms come back with the next scrape, 15 s on: MetricsFresh.
    later = EVAL + 15
    op.clock.now = later
    give(canned, answers(engine_pod("chat-a", queue=0, running=2, kv=0.1, generated=50, at=later),
                         engine_pod("chat-b", queue=0, running=2, kv=0.1, generated=50, at=later),
                         pools=latency(at=later)))
    await condition_is(kube, "MetricsAvailable", R.MetricsFresh)


async def _hung_engine(
    canned: CannedPrometheus, kube: ApplyingEmulator, start_operator: Callable[..., Any]
) -> tuple[Any, dict[str, Any]]:
    """Issue 10, cases 6 and 5: chat-a hangs (queue 15, running 106 through the window, KV 0.9, not
    one token generated) and a deleted pod's series linger (queue 10, KV 0.97). Read as before they
    asked for 2 → 6 replicas. The operator and ``EnginesStalled`` once it names the stall."""
    two_ready_pods(kube)
    give(canned, answers(
        engine_pod("chat-a", queue=15, running=106, kv=0.9, generated=0),
        engine_pod("chat-b", queue=0, running=2, kv=0.1, generated=50),
        engine_pod("chat-old", queue=10, running=40, kv=0.97, generated=400),
        pools=latency(),
    ))
    op = await start_operator(reader(canned))
    return op, await condition_is(kube, "EnginesStalled", R.StalledPods)


async def test_a_hung_engine_is_named_until_it_recovers(
    canned: CannedPrometheus, kube: ApplyingEmulator, start_operator: Callable[..., Any]
) -> None:
    op, cond = await _hung_engine(canned, kube, start_operator)
    assert cond["status"] == "True" and cond["message"].startswith("pod chat-a: running requests stayed above 0")
    # The engine recovers at the next scrape: the condition clears.
    later = EVAL + 15
    op.clock.now = later
    give(canned, answers(
        engine_pod("chat-a", queue=0, running=2, kv=0.1, generated=50, at=later),
        engine_pod("chat-b", queue=0, running=2, kv=0.1, generated=50, at=later),
        pools=latency(at=later),
    ))
    await condition_is(kube, "EnginesStalled", R.NoStalledPods)


async def test_a_hung_engine_is_warned_about_once(
    canned: CannedPrometheus, kube: ApplyingEmulator, start_operator: Callable[..., Any]
) -> None:
    op, _ = await _hung_engine(canned, kube, start_operator)
    warnings = await eventually(lambda: events_with(kube, R.StalledPods), what="a StalledPods Warning Event")
    assert warnings[0]["type"] == "Warning" and "Found pod serving/chat-a of LLMDeployment serving/chat stalled" in (
        warnings[0]["message"])
    done = ticks(op)
    await eventually(lambda: ticks(op) >= done + 3, what="three more ticks")
    assert len(events_with(kube, R.StalledPods)) == 1, "one Warning per stall, not one per tick"


async def test_a_hung_engine_never_scales_the_pool_up(
    canned: CannedPrometheus, kube: ApplyingEmulator, start_operator: Callable[..., Any]
) -> None:
    """chat-a is left out and chat-old ignored: the pool stays at 2 on chat-b's quiet signals."""
    op, _ = await _hung_engine(canned, kube, start_operator)
    status = status_of(kube)
    # Only chat-b's figures count: queue 0, KV 0.1 (chat-a's 0.9 and chat-old's 0.97 left out).
    assert status["signals"]["queueDepth"] == 0.0 and status["signals"]["kvCacheUtilization"] == 0.1
    done = ticks(op)
    await eventually(lambda: ticks(op) >= done + 3, what="three more ticks")
    assert replicas_of(kube, "chat") == 2
    assert not events_with(kube, "ScaledUp")


async def test_a_rate_window_too_short_for_the_scrape_is_a_condition_not_a_silent_hold(
    canned: CannedPrometheus, kube: ApplyingEmulator, start_operator: Callable[..., Any]
) -> None:
    """Issue 10, case 3: a 10 s window at a 15 s scrape never holds two samples. ``RateWindowFits``
    is ``False/WindowTooShort`` with the fix, and ``MetricsAvailable`` names every rate-based
    signal with the same reason while the pool still scales on the gauges."""
    two_ready_pods(kube)
    give(canned, answers(engine_pod("chat-a", queue=0, running=2, kv=0.1, generated=50),
                         engine_pod("chat-b", queue=0, running=2, kv=0.1, generated=50)))
    await start_operator(reader(canned, rate_window="10s"))

    cond = await condition_is(kube, "RateWindowFits", R.WindowTooShort)
    assert cond["status"] == "False" and "rate window 10s is shorter than two scrape intervals (15 s" in cond["message"]
    assert "set the window to at least 60s" in cond["message"]
    metrics = await condition_is(kube, "MetricsAvailable", R.MetricsPartial)
    assert "preemption rate unknown: rate window 10s is shorter than two scrape intervals" in metrics["message"]
    assert "scaling up only, on queue depth, KV-cache utilisation" in metrics["message"]
    # The stall check needs a window that holds samples.
    assert condition(status_of(kube), "EnginesStalled")["reason"] == R.StallCheckOff  # type: ignore[index]


def scale_to_zero(name: str = "chat") -> dict[str, Any]:
    body = llmdeployment(name=name, uid=f"uid-{name}")
    body["spec"]["replicas"] = {"min": 0, "max": 4}
    body["spec"]["scaling"]["wake"] = {
        "query": 'sum(router_pending_requests{namespace="$namespace", service="$name"}) or vector(0)',
    }
    return body


def at_zero(kube: ApplyingEmulator, name: str) -> None:
    """A Deployment already scaled to zero by the operator, as after an idle night."""
    kube.objects[DEPLOYMENTS, NAMESPACE, name] = {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {
            "app.kubernetes.io/managed-by": "llmscale", "llmscale.dev/deployment": name,
            "llmscale.dev/pool": "interactive"}},
        "spec": {"replicas": 0},
    }


def is_wake(query: str) -> bool:
    return "router_pending_requests" in query


async def test_a_pool_at_zero_wakes_on_its_wake_query_each_read_on_its_own(
    canned: CannedPrometheus, kube: ApplyingEmulator, start_operator: Callable[..., Any]
) -> None:
    """Scale from zero: two LLMDeployments at zero replicas; no engine reports, their wake queries
    (one instant query each, never joined: issue 22) read 0, so both stay at zero
    (``WakeQueryOnly``). Then requests wait in front of ``chat`` only: it wakes to 1 + headroom 1 = 2
    at once; ``embed`` stays."""
    for name in ("chat", "embed"):
        kube.objects[LLMDEPLOYMENTS, NAMESPACE, name] = scale_to_zero(name)
        at_zero(kube, name)
    idle = canned.vector([series("", "0", eval_s=EVAL)])
    canned.answer_containing('service="chat"', idle)
    canned.answer_containing('service="embed"', idle)
    op = await start_operator(reader(canned))

    for name in ("chat", "embed"):
        cond = await condition_is(kube, "MetricsAvailable", R.WakeQueryOnly, name)
        assert "0 replicas, so no engine reports" in cond["message"]
    done = ticks(op)
    await eventually(lambda: ticks(op) >= done + 4, what="four more ticks")
    assert replicas_of(kube, "chat") == replicas_of(kube, "embed") == 0

    later = EVAL + 15
    canned.answer_containing('service="chat"', canned.vector([series("", "3", eval_s=later)]))
    canned.answer_containing('service="embed"', canned.vector([series("", "0", eval_s=later)]))
    op.clock.now = later
    await eventually(lambda: replicas_of(kube, "chat") == 2, what="chat woken to 2 replicas")
    scaled = await eventually(lambda: events_with(kube, "ScaledUp"), what="a ScaledUp Event")
    assert "Scaled LLMDeployment serving/chat from 0 to 2 replicas" in scaled[0]["message"]
    assert "wake query reads 3 > threshold 0 at 0 replicas: proposes 1" in scaled[0]["message"]
    assert replicas_of(kube, "embed") == 0

    # Every fleet query was fleet-wide: no query names one LLMDeployment in its selector; each wake
    # query names one LLMDeployment only, with $namespace and $name filled in.
    fleet = [q for q, g in zip(canned.queries, canned.groups, strict=True) if g in GROUPS]
    assert fleet and all('llmscale_dev_deployment="' not in q for q in fleet)
    wakes = [q for q in canned.queries if is_wake(q)]
    assert any('namespace="serving", service="chat"' in q for q in wakes)
    assert all(('service="chat"' in q) != ('service="embed"' in q) for q in wakes), wakes
    groups = list(canned.groups)
    reads = groups.count("pods")
    # Two wake queries per read (a read may be on its way: its wake queries not all sent yet); the
    # once-a-minute SLO query is the only other query.
    minutes = sum(1 for q in canned.queries if "minute_ttft_p95_s" in q)
    assert 2 * (reads - 1) <= len(wakes) <= 2 * reads, groups
    assert len(wakes) + minutes == groups.count("other"), groups


async def test_a_wake_query_reading_another_namespace_is_refused_by_a_condition_naming_the_field(
    canned: CannedPrometheus, kube: ApplyingEmulator, start_operator: Callable[..., Any]
) -> None:
    """Issue 22, case 2: a wake query that reads another tenant's series is never sent; the pool
    stays at zero with ``MetricsMissing`` naming ``spec.scaling.wake.query``, and no value of the
    other namespace reaches the status or an Event."""
    nosy = scale_to_zero("chat")
    nosy["spec"]["scaling"]["wake"]["query"] = 'count(kube_secret_info{namespace="team-a"})'
    kube.objects[LLMDEPLOYMENTS, NAMESPACE, "chat"] = nosy
    at_zero(kube, "chat")
    canned.answer_containing("kube_secret_info", canned.vector([series("", "7", eval_s=EVAL)]))
    op = await start_operator(reader(canned))

    cond = await condition_is(kube, "MetricsAvailable", R.MetricsMissing)
    assert "spec.scaling.wake.query refused" in cond["message"], cond
    assert 'lacks the matcher namespace="serving"' in cond["message"], cond
    done = ticks(op)
    await eventually(lambda: ticks(op) >= done + 2, what="two more ticks")
    assert replicas_of(kube, "chat") == 0
    assert not any("kube_secret_info" in q for q in canned.queries), "refused queries are never sent"
    refused = [e for e in posted_events(kube) if e.get("reason") == "WakeQueryRefused"]
    assert len(refused) == 1, "one Warning Event per refusal, not one per tick"
    assert 'lacks the matcher namespace="serving"' in refused[0]["message"]
    seen = json.dumps(status_of(kube, "chat")) + json.dumps(posted_events(kube))
    assert "reads 7" not in seen and "kube_secret_info" in seen, "the refusal names the query, never its value"


async def _refused_wake_query(
    canned: CannedPrometheus, kube: ApplyingEmulator, start_operator: Callable[..., Any]
) -> tuple[Any, dict[str, Any]]:
    """A wake query Prometheus refuses (HTTP 400, e.g. a function this Prometheus does not know):
    the operator and ``MetricsAvailable`` once it is ``MetricsMissing``."""
    broken = scale_to_zero("chat")
    broken["spec"]["scaling"]["wake"]["query"] = 'sum(router_pending_requests{namespace="$namespace"})'
    kube.objects[LLMDEPLOYMENTS, NAMESPACE, "chat"] = broken
    at_zero(kube, "chat")
    canned.answer(canned.raw(
        '{"status":"error","errorType":"bad_data","error":"1:5: parse error: unexpected end of input"}', status=400,
    ), group="other")
    op = await start_operator(reader(canned))
    return op, await condition_is(kube, "MetricsAvailable", R.MetricsMissing)


async def test_a_wake_query_prometheus_refuses_is_named_with_prometheuss_error(
    canned: CannedPrometheus, kube: ApplyingEmulator, start_operator: Callable[..., Any]
) -> None:
    _, cond = await _refused_wake_query(canned, kube, start_operator)
    assert "wake query unknown: wake query failed: Prometheus at" in cond["message"], cond
    assert "parse error: unexpected end of input" in cond["message"], cond


async def test_a_wake_query_prometheus_refuses_holds_the_pool_at_zero(
    canned: CannedPrometheus, kube: ApplyingEmulator, start_operator: Callable[..., Any]
) -> None:
    """Unknown, never read as zero (or as demand)."""
    op, _ = await _refused_wake_query(canned, kube, start_operator)
    done = ticks(op)
    await eventually(lambda: ticks(op) >= done + 2, what="two more ticks")
    assert replicas_of(kube, "chat") == 0


#: Base period (so the fleet reader's) as long as the spec's 1 s tick: a failed read is the newest
#: snapshot for a whole tick, so a tick takes it.
SLOW_READS = OperatorSettings(namespaces=(NAMESPACE,), tick_base_seconds=1.0, metrics_host="127.0.0.1",
                              metrics_port=0, status_refresh_seconds=0.0, cluster_scanning=False)


@pytest.mark.parametrize("settings", [SLOW_READS])
async def test_one_failed_quantile_query_neither_flips_metrics_available_nor_writes_status_but_is_counted(
    canned: CannedPrometheus, kube: ApplyingEmulator, start_operator: Callable[..., Any]
) -> None:
    """Issue 14: at 1,000 LLMDeployments a per-pool quantile query (the TTFT one here) sometimes
    failed one read, every pool's latency turned unknown for that read and each object's
    MetricsAvailable flipped and was written. The last good snapshot is carried through one failed read (two base periods at most):
    no condition moves or is written, and the failed read is still counted."""
    two_ready_pods(kube)
    groups = answers(engine_pod("chat-a", queue=0, running=2, kv=0.1, generated=50),
                     engine_pod("chat-b", queue=0, running=2, kv=0.1, generated=50), pools=latency())
    give(canned, groups)
    op = await start_operator(reader(canned))
    await condition_is(kube, "MetricsAvailable", R.MetricsFresh)
    done = ticks(op)
    await eventually(lambda: ticks(op) >= done + 2, what="two more ticks")
    written = len(status_patches(kube, "chat"))
    assert [p for p in status_patches(kube, "chat") if "conditions" in p["status"]], "the first write had them"

    def errors() -> float:
        return op.metrics.registry.get_sample_value(
            "llmscale_signal_read_errors_total", {"namespace": NAMESPACE, "name": "chat"}) or 0.0

    before, asked = errors(), canned.groups.count("ttft")
    refused = canned.raw('{"status":"error","errorType":"timeout","error":"query timed out"}', status=503)
    canned.answer(refused, refused, canned.vector(groups["ttft"]), group="ttft")  # 503 is retried once
    await eventually(lambda: errors() > before, what="the failed read counted")
    await eventually(lambda: canned.groups.count("ttft") >= asked + 4, what="two more reads after it")
    done = ticks(op)
    await eventually(lambda: ticks(op) >= done + 2, what="two more ticks")
    assert condition(status_of(kube), "MetricsAvailable")["reason"] == R.MetricsFresh  # type: ignore[index]
    # The harness's fixed clock appends a policy-state recommendation each tick; no condition moved.
    assert not [p for p in status_patches(kube, "chat")[written:] if "conditions" in p["status"]]
