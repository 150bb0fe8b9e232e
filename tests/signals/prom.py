"""A real Prometheus for the signal tests: started live on canned targets, or on backfilled data.

Two ways to give Prometheus data:

- **live**: Prometheus scrapes canned ``/metrics`` pages (aiohttp on 127.0.0.1) every second,
  which proves staleness markers, the targets API, native histograms over protobuf and
  authentication;
- **backfilled**: series with explicit timestamps are written as OpenMetrics text, turned into
  TSDB blocks by ``promtool tsdb create-blocks-from openmetrics`` and Prometheus is started on
  them. Minutes of 15 s or 60 s scrapes then cost a second, and a series that just stops (a
  deleted pod after a Prometheus restart: no staleness marker) is exactly that.

Every Prometheus started here listens on 127.0.0.1 and is stopped by its PID.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import requests

from llmscale.localcluster.ports import free_port

PROMETHEUS = shutil.which("prometheus")
PROMTOOL = shutil.which("promtool")

needs_prometheus = [pytest.mark.slow, pytest.mark.usefixtures("prometheus_binaries")]

#: Labels of the pool most tests read.
POOL_LABELS = {"namespace": "ml", "llmscale_dev_deployment": "chat", "llmscale_dev_pool": "interactive"}


def wait_ready(url: str, timeout_s: float = 15.0, **kwargs: Any) -> None:
    """Wait until ``url``/-/ready answers 200 (``kwargs`` go to ``requests.get``: verify, auth, cert)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if requests.get(f"{url}/-/ready", timeout=1.0, **kwargs).status_code == 200:
                return
        except requests.RequestException:
            pass
        if time.monotonic() > deadline:
            pytest.fail(f"Prometheus at {url} did not become ready in {timeout_s} s")
        time.sleep(0.1)


def wait_targets_up(url: str, count: int, timeout_s: float = 15.0) -> None:
    """Wait until ``count`` scrape targets are up (service discovery syncs every 5 s at first)."""
    deadline = time.monotonic() + timeout_s
    while True:
        data = requests.get(f"{url}/api/v1/targets", params={"state": "active"}, timeout=2).json()["data"]
        if sum(t.get("health") == "up" for t in data["activeTargets"]) >= count:
            return
        if time.monotonic() > deadline:
            pytest.fail(f"{count} targets of Prometheus at {url} were not up in {timeout_s} s: {data}")
        time.sleep(0.2)


@contextmanager
def run_prometheus(
    tmp: Path,
    config: str,
    *flags: str,
    data: Path | None = None,
    scheme: str = "http",
    ready: Mapping[str, Any] | None = None,
) -> Iterator[str]:
    """Start Prometheus with ``config`` (YAML text) and ``flags``; yield its URL; stop it by PID.

    Args:
        tmp: a folder of the test's own.
        config: the prometheus.yml text.
        flags: extra command-line flags (``--enable-feature=native-histograms``,
            ``--web.config.file=...``).
        data: the TSDB folder (backfilled blocks); a new one in ``tmp`` when ``None``.
        scheme: ``https`` when the web config turns on TLS.
        ready: keyword arguments of the readiness probe (``verify``, ``auth``, ``cert``).
    """
    assert PROMETHEUS is not None
    port = free_port()
    path = tmp / f"prometheus-{port}.yml"
    path.write_text(config)
    log = (tmp / f"prometheus-{port}.log").open("wb")
    proc = subprocess.Popen(
        [
            PROMETHEUS,
            f"--config.file={path}",
            f"--storage.tsdb.path={data or tmp / f'data-{port}'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
            *flags,
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"{scheme}://127.0.0.1:{port}"
    try:
        wait_ready(url, **(ready or {}))
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        log.close()


@dataclass
class Series:
    """One backfilled series: a metric, its labels, and a value per timestamp."""

    name: str
    labels: dict[str, str]
    points: list[tuple[float, float]] = field(default_factory=list)


#: How far past ``now`` the scrapes of :func:`live` go on, seconds: backfilling the blocks and
#: starting Prometheus take seconds, and on a loaded machine (CI, two workers) up to a minute.
LIVE_AHEAD_S = 300.0


def live(now: float, span: float = 600.0, step: float = 15.0) -> list[float]:
    """Scrape times of a pod that is still being scraped when the test reads: from ``now - span``
    to ``LIVE_AHEAD_S`` past ``now``, every ``step`` seconds. A read at wall-clock time sees the
    samples up to it (an instant query takes none after its time), so however late Prometheus comes
    up, the newest scrape is at most ``step`` old and ``rate()`` extrapolates over no gap. Data
    that ended at ``now`` read 16 % low once Prometheus took ~20 s to start under load."""
    return every(now - span, now + LIVE_AHEAD_S, step)


def every(start: float, end: float, step: float) -> list[float]:
    """Timestamps ``start, start + step, ... <= end`` (seconds)."""
    out = []
    t = start
    while t <= end + 1e-9:
        out.append(t)
        t += step
    return out


def gauge(name: str, labels: Mapping[str, str], times: Sequence[float], value: float) -> Series:
    """A gauge frozen at ``value`` at ``times``."""
    return Series(name, dict(labels), [(t, value) for t in times])


def counter(
    name: str, labels: Mapping[str, str], times: Sequence[float], per_s: float, start: float = 0.0
) -> Series:
    """A counter rising by ``per_s`` a second from ``start`` at the first of ``times``."""
    return Series(name, dict(labels), [(t, start + per_s * (t - times[0])) for t in times])


def openmetrics(series: Sequence[Series]) -> str:
    """The series as OpenMetrics text (families grouped, as the format requires), ``# EOF`` last."""
    by_name: dict[str, list[Series]] = {}
    for s in series:
        by_name.setdefault(s.name, []).append(s)
    lines: list[str] = []
    for name, group in by_name.items():
        kind = "counter" if name.endswith("_total") else "gauge"
        family = name.removesuffix("_total") if kind == "counter" else name
        lines.append(f"# TYPE {family} {kind}")
        for s in group:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
            lines += [f"{name}{{{labels}}} {value:g} {t:.3f}" for t, value in s.points]
    lines.append("# EOF")
    return "\n".join(lines) + "\n"


@contextmanager
def backfilled(tmp: Path, series: Sequence[Series]) -> Iterator[str]:
    """Start Prometheus on TSDB blocks holding ``series`` (no scrape targets); yield its URL."""
    assert PROMTOOL is not None
    text = tmp / "backfill.om"
    text.write_text(openmetrics(series))
    data = tmp / "tsdb"
    done = subprocess.run(
        [PROMTOOL, "tsdb", "create-blocks-from", "openmetrics", str(text), str(data)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    with run_prometheus(tmp, "global: {scrape_interval: 15s}\n", data=data) as url:
        yield url
