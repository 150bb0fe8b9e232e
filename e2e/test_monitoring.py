"""Scenario 14 (issue 14): every query of the chart's Grafana dashboard returns data from the
suite's real Prometheus, which scrapes the engines, the router and the operator's own /metrics
(file service discovery: ``Cluster.operator_targets``), while one LLMDeployment serves load.

The dashboard is the shipped file (charts/llmscale/dashboards/llmscale.json); its Grafana
variables are replaced as Grafana would: ``$namespace`` and ``$name`` by the object,
``$__rate_interval`` by a window of a few scrapes, ``$__range`` by the scenario's length.
"""

from __future__ import annotations

import asyncio
import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from conftest import Cluster, sample, wait_for
from llmscale.loadgen import replay
from test_scenarios import MODEL, poisson_trace

DASHBOARD = Path(__file__).resolve().parents[1] / "charts" / "llmscale" / "dashboards" / "llmscale.json"


def dashboard_queries(namespace: str, name: str) -> list[str]:
    """Every target's PromQL of the shipped dashboard, its variables filled in."""
    model = json.loads(DASHBOARD.read_text())
    grafana = {"$namespace": namespace, "$name": name, "$__rate_interval": "30s", "$__range": "10m"}
    out = []
    for panel in model["panels"]:
        for target in panel.get("targets", []):
            query = target["expr"]
            for variable, value in grafana.items():
                query = query.replace(variable, value)
            assert "$" not in query, query
            out.append(query)
    return out


@pytest.mark.long(90)  # seconds beside others (fresh-clone CI)
def test_14_every_dashboard_query_returns_data(cluster: Cluster, namespace: str) -> None:
    assert cluster.operator_targets is not None, (
        "Prometheus must scrape the operator: on an external cluster set LLMSCALE_E2E_OPERATOR_TARGETS to a "
        "file_sd file that cluster's Prometheus reads (docs/e2e.md)")
    cluster.apply(namespace, sample())
    wait_for("the operator's series in Prometheus", lambda: cluster.prom(
        f'llmscale_desired_replicas{{namespace="{namespace}", name="chat"}}'), 60)
    # Load for over a whole minute of the wall clock, so the operator judges at least one minute.
    pool = ThreadPoolExecutor(max_workers=1)
    load = pool.submit(asyncio.run, replay(poisson_trace(2.0, 80.0), cluster.service_url(namespace, "chat"), MODEL,
                                           deadline_s=140, max_in_flight=64))
    pool.shutdown(wait=False)
    wait_for("a judged minute in llmscale_slo_minutes_total", lambda: cluster.prom_value(
        f'sum(llmscale_slo_minutes_total{{namespace="{namespace}", name="chat", pool="interactive"}})'), 180)
    report = load.result(timeout=120)
    assert report.sent > 0 and report.errors == 0, report

    empty: list[str] = []
    deadline = time.monotonic() + 60
    while True:
        empty = [q for q in dashboard_queries(namespace, "chat") if not cluster.prom(q)]
        if not empty or time.monotonic() > deadline:
            break
        time.sleep(2)
    assert not empty, "dashboard queries without data:\n" + "\n".join(empty)
