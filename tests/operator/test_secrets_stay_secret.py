"""Secrets stay secret (issue 22): a Secret's value put in every place a user or an administrator
can reference one — environment from a Secret in ``spec.template``, the Prometheus basic-auth
password file, the bearer token file — appears in no status, Event, log line (text and JSON
formats) or metric label, on a success and on a refusal (HTTP 401) alike.

The operator runs against the kmock API server and the canned Prometheus; each case first checks
that the value did reach Prometheus (the ``Authorization`` header), so the search below has
something to miss.
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest
from tests.operator.test_operator_kmock import (
    LLMDEPLOYMENTS,
    NAMESPACE,
    ApplyingEmulator,
    eventually,
    llmdeployment,
    posted_events,
    stored,
    ticks,
)
from tests.signals.conftest import CannedPrometheus

from llmscale.commands.logformat import formatter
from llmscale.signals import PrometheusAuth, PrometheusSignalReader, ReaderSettings

SECRET = "s3cr3t-Value-7f2c"


@pytest.fixture()
def records() -> Iterator[list[logging.LogRecord]]:
    """Every log record of the run, at every level, from every logger."""
    got: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            got.append(record)

    root = logging.getLogger()
    handler, level = Keep(logging.DEBUG), root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        yield got
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


def auth_of(kind: str, tmp_path: Path) -> PrometheusAuth:
    path = tmp_path / "secret"
    path.write_text(SECRET + "\n")
    if kind == "basic":
        return PrometheusAuth(username="llmscale", password_file=path)
    return PrometheusAuth(bearer_token_file=path)


def sent_in_header(kind: str, headers: dict[str, str]) -> bool:
    value = headers.get("Authorization", "")
    if kind == "basic":
        return value == "Basic " + base64.b64encode(f"llmscale:{SECRET}".encode()).decode()
    return value == f"Bearer {SECRET}"


@pytest.mark.parametrize("kind", ["basic", "bearer"])
@pytest.mark.parametrize("status", [200, 401])
async def test_a_secret_s_value_appears_in_no_status_event_log_line_or_metric(
    canned: CannedPrometheus, kube: ApplyingEmulator, start_operator: Callable[..., Any],
    records: list[logging.LogRecord], tmp_path: Path, kind: str, status: int,
) -> None:
    body = llmdeployment()
    body["spec"]["template"] = {"spec": {
        "containers": [{"name": "engine",
                        "env": [{"name": "DB_PASSWORD", "valueFrom": {"secretKeyRef": {"name": "db-creds", "key": "p"}}}],
                        "envFrom": [{"secretRef": {"name": "db-creds"}}]}],
        "volumes": [{"name": "creds", "secret": {"secretName": "db-creds"}}],
    }}
    kube.objects[LLMDEPLOYMENTS, NAMESPACE, "chat"] = body
    if status == 401:
        canned.answer(canned.raw('{"status":"error","error":"authentication failed"}', status=401))
    reader = PrometheusSignalReader(canned.url, settings=ReaderSettings(auth=auth_of(kind, tmp_path)))
    op = await start_operator(reader)
    await eventually(lambda: ticks(op) >= 3, what="three ticks")
    await eventually(lambda: (stored(kube, LLMDEPLOYMENTS, "chat") or {}).get("status", {}).get("conditions"),
                     what="conditions written")

    assert canned.headers and all(sent_in_header(kind, h) for h in canned.headers), "the secret was in use"
    seen = {
        "status": json.dumps(stored(kube, LLMDEPLOYMENTS, "chat")),
        "events": json.dumps(posted_events(kube)),
        "metrics": generate_latest(op.metrics.registry).decode(),
        "text logs": "\n".join(formatter("text").format(r) for r in records),
        "json logs": "\n".join(formatter("json").format(r) for r in records),
    }
    assert len(records) > 10
    leaked = [where for where, text in seen.items() if SECRET in text]
    assert leaked == [], f"the Secret's value appears in {leaked}"
    if status == 401:
        assert "refused the credentials" in seen["status"], "the refusal is reported, without the value"
