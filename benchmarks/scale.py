"""1,000 LLMDeployments on one operator replica (issue 14): what the operator costs at scale.

    .venv/bin/python benchmarks/scale.py [--deployments 1000] [--shards 1] [--namespaces 10]
        [--hold 120] [--settle 30] [--tick-seconds 15] [--scrape-interval 15] [--json PATH]
        [--tracemalloc] [--census]

Starts everything on 127.0.0.1, in a state dir of its own, and stops it all by PID at the end
(also on Ctrl-C or an error; ``--keep`` leaves it running):

- the local control plane (:mod:`llmscale.localcluster.cluster`) with ``N/8 + 2`` KWOK fake nodes
  of 8 GPUs each, and an audit log of every write the operators make (each shard has a client
  certificate of its own, so the audit log says which operator wrote what);
- a real Prometheus scraping one target per Ready pod, every target served by ONE exporter process
  (benchmarks/fleet_exporter.py, found through file service discovery, labelled as a Kubernetes
  scrape labels an engine) with the mock engine's metric families (the ``vllm`` profile's names
  and buckets) — real samples without 1,000 engines;
- ``--shards`` operator processes (``llmscale run``, operator defaults: 5 s base tick, peering
  ``llmscale`` in each namespace), each with its own set of namespaces (``-n``, namespace ``i``
  goes to shard ``i mod shards``).

``--deployments`` may list several totals (``100,1000``): the objects are applied in stages, each
stage waits until all are reconciled (``Ready`` and ``MetricsAvailable`` True), settles for
``--settle`` seconds and holds for ``--hold`` seconds, and the figures of each stage are printed.
After the last stage it sets the queue depth of one object's pod (20 requests waiting) and times
the change until Prometheus has it and until the operator writes the Deployment's replicas.

Figures: PromQL queries per tick (Prometheus's own ``prometheus_engine_query_duration_seconds_count``
over the hold, per ``--tick-seconds``), operator RSS in the hold and peak (``VmHWM``), CPU, tick
duration p50/p99 (``llmscale_tick_duration_seconds`` over the hold), API writes/s in the hold (audit
log, by resource), failed signal reads (``llmscale_signal_read_errors_total``), time to reconcile
all, and per shard which objects it wrote (none of the other shard's). ``--tracemalloc`` runs the
operators under ``benchmarks/traced_operator.py`` and prints, after each hold, what each holds by
allocating file, line and stack (slower and bigger: a breakdown, not the RSS figure); ``--census``
runs them under the same wrapper without tracing and prints, after each hold, their RSS, C heap and
pymalloc figures and the bytes Kopf and llmscale keep per LLMDeployment, by part.
Results of a run are in docs/benchmarks.md ("Scale") and docs/operator.md.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import datetime
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import kubernetes.client
import kubernetes.config
import urllib3
import yaml
from kubernetes.client.exceptions import ApiException
from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from llmscale.localcluster import SAMPLE, cluster
from llmscale.localcluster.ports import free_port

ROOT = Path(__file__).resolve().parents[1]
CRDS = [ROOT / "crds" / "llmdeployments.llmscale.dev.yaml", ROOT / "charts" / "llmscale" / "crds" / "kopf.dev-peerings.yaml"]
EXPORTER = ROOT / "benchmarks" / "fleet_exporter.py"
GROUP, VERSION, PLURAL = "llmscale.dev", "v1alpha1", "llmdeployments"
PEERING = "llmscale"
#: Queue depth set on the changed object's pod: ten times the sample's 2 per replica.
CHANGED_QUEUE = 20.0
READ_VERBS = {"get", "list", "watch"}
console = Console()


@dataclass
class Shard:
    """One operator process: its identity, namespaces, port and PID."""

    index: int
    user: str
    namespaces: list[str]
    port: int = 0
    pid: int = 0
    log: Path = Path()
    rss: list[tuple[float, int]] = field(default_factory=list)


@dataclass
class StageFigures:
    """What one stage measured (units in the names)."""

    deployments: int
    reconcile_s: float
    hold_s: float
    queries: int
    queries_per_tick: float
    queries_per_s: float
    rss_steady_mb: list[float]
    rss_peak_mb: list[float]
    cpu_percent: list[float]
    tick_p50_ms: float | None
    tick_p99_ms: float | None
    writes_per_s: float
    writes_by_resource: dict[str, int]
    signal_read_errors: float
    status_paths: dict[str, int]


# ------------------------------------------------------------------------------------------ set-up


def _openssl_user(pki: Path, user: str) -> None:
    """A client certificate for ``user`` (group system:masters), signed by the cluster's CA."""
    cluster.openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", f"{user}.key",
                    cwd=pki)
    cluster.openssl("req", "-new", "-key", f"{user}.key", "-out", f"{user}.csr", "-subj",
                    f"/O=system:masters/CN={user}", cwd=pki)
    (pki / f"{user}.ext").write_text("basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n"
                                     "extendedKeyUsage=clientAuth\n")
    cluster.openssl("x509", "-req", "-in", f"{user}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
                    "-out", f"{user}.crt", "-days", "30", "-extfile", f"{user}.ext", cwd=pki)


def _audit_policy(users: list[str]) -> dict[str, Any]:
    return {"apiVersion": "audit.k8s.io/v1", "kind": "Policy", "omitStages": ["RequestReceived"],
            "rules": [{"level": "None", "verbs": sorted(READ_VERBS)},
                      # The status patches' bodies: what a write in a steady hold changed.
                      {"level": "Request", "users": users,
                       "resources": [{"group": GROUP, "resources": ["llmdeployments/status"]}]},
                      {"level": "Metadata", "users": users},
                      {"level": "None"}]}


def start_control_plane(sd: Path, nodes: int, users: list[str]) -> None:
    """``cluster.py up`` with ``nodes`` fake GPU nodes and an audit log of ``users``' writes."""
    policy = sd / "audit-policy.yaml"
    policy.write_text(yaml.safe_dump(_audit_policy(users)))
    extra = f"--audit-policy-file={policy} --audit-log-path={sd / 'audit.log'} --audit-log-maxsize=0"
    env = {**os.environ, "LLMSCALE_CLUSTER_DIR": str(sd), "LLMSCALE_APISERVER_EXTRA_ARGS": extra}
    env.pop("KUBECONFIG", None)
    with (sd / "up.log").open("wb") as out:
        proc = subprocess.run([sys.executable, "-B", "-m", "llmscale.localcluster.cluster", "up", "--nodes",
                               str(nodes)], env=env, stdout=out, stderr=subprocess.STDOUT, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"the control plane did not start; see {sd / 'up.log'}:\n{cluster.tail(sd / 'up.log')}")


def _server(sd: Path) -> str:
    return str(json.loads((sd / "cluster.json").read_text())["server"])


def _wait(what: str, probe: Any, timeout_s: float, interval_s: float = 0.5) -> Any:
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        try:
            got = probe()
            if got:
                return got
        except Exception as exc:  # not there yet
            last = exc
        time.sleep(interval_s)
    raise RuntimeError(f"timed out after {timeout_s:.0f} s waiting for {what} (last: {last!r})")


def _http(url: str, data: bytes | None = None, timeout: float = 10.0) -> str:
    with urllib.request.urlopen(urllib.request.Request(url, data=data), timeout=timeout) as r:
        return str(r.read().decode())


def start_exporter(sd: Path, port: int) -> None:
    """The fleet exporter, reading pods as the admin and writing them to ``engine-targets.json``."""
    cluster.spawn(sd, "fleet-exporter", [sys.executable, str(EXPORTER), "--kubeconfig", str(sd / "kubeconfig"),
                                         "--port", str(port), "--sd-file", str(sd / "engine-targets.json")])
    _wait("the exporter's /status", lambda: _http(f"http://127.0.0.1:{port}/status"), 60)


def start_prometheus(sd: Path, port: int, scrape_s: float) -> str:
    """Debian's Prometheus scraping one target per pod, all served by the exporter (file service
    discovery of ``engine-targets.json``)."""
    interval = f"{scrape_s:g}s"
    config = {"global": {"scrape_interval": interval, "evaluation_interval": interval,
                         "scrape_timeout": f"{min(scrape_s, 10.0):g}s"},
              "scrape_configs": [{"job_name": "llmscale-engines", "file_sd_configs": [
                  {"files": [str(sd / "engine-targets.json")], "refresh_interval": interval}]}]}
    (sd / "prometheus.yml").write_text(yaml.safe_dump(config))
    cluster.spawn(sd, "prometheus", ["prometheus", f"--config.file={sd / 'prometheus.yml'}",
                                     f"--web.listen-address=127.0.0.1:{port}",
                                     f"--storage.tsdb.path={sd / 'prometheus-data'}", "--log.level=warn"])
    url = f"http://127.0.0.1:{port}"
    _wait("Prometheus /-/ready", lambda: _http(f"{url}/-/ready"), 60)
    return url


def start_operator(sd: Path, shard: Shard, prometheus_url: str, traced: bool = False, census: bool = False) -> None:
    """``llmscale run`` with operator defaults for ``shard``'s namespaces, as ``shard.user``; under
    ``benchmarks/traced_operator.py`` when ``traced`` (its snapshot: :func:`traced_dump`) or
    ``census`` (the wrapper without tracing: the census only, :func:`print_census`)."""
    kubeconfig = sd / f"{shard.user}.kubeconfig"
    cluster.write_kubeconfig(kubeconfig, _server(sd), sd / "pki", shard.user)
    shard.port = free_port()
    program = ([sys.executable, str(Path(__file__).with_name("traced_operator.py")), str(traced_dump(sd, shard))]
               if traced or census else [str(Path(sys.executable).with_name("llmscale"))])
    argv = [*program, "run", "--kubeconfig", str(kubeconfig),
            "--prometheus-url", prometheus_url, "--peering", PEERING, "--metrics-host", "127.0.0.1",
            "--metrics-port", str(shard.port)]
    for namespace in shard.namespaces:
        argv += ["-n", namespace]
    name = f"operator-{shard.index}"
    env = {"KUBECONFIG": str(kubeconfig), **({"LLMSCALE_TRACEMALLOC_FRAMES": "0"} if census and not traced else {})}
    shard.pid = cluster.spawn(sd, name, argv, env=env)
    shard.log = sd / "logs" / (name + ".log")
    _wait(f"{name}'s /readyz", lambda: _http(f"http://127.0.0.1:{shard.port}/readyz"), 120)


def traced_dump(sd: Path, shard: Shard) -> Path:
    """Where a traced operator writes its :mod:`tracemalloc` snapshot on SIGUSR1."""
    return sd / f"operator-{shard.index}.tracemalloc"


def print_census(sd: Path, shard: Shard) -> None:
    """Ask a wrapped operator for its census (``traced_operator.census``: RSS, C heap, pymalloc, and
    the bytes Kopf and llmscale keep per LLMDeployment) and print it."""
    census = traced_dump(sd, shard).with_suffix(".census")
    census.unlink(missing_ok=True)
    os.kill(shard.pid, signal.SIGUSR1)
    _wait("the census", census.exists, 300)
    console.print(f"operator-{shard.index} (census):\n{census.read_text()}", soft_wrap=True, highlight=False)


def print_traced(sd: Path, shard: Shard, top: int = 25) -> None:
    """Ask a traced operator for its snapshot and print what it holds by allocating file, then by
    allocating line (the biggest ``top`` of each), then the biggest stacks whole."""
    import tracemalloc

    dump = traced_dump(sd, shard)
    dump.unlink(missing_ok=True)
    print_census(sd, shard)
    _wait("the tracemalloc snapshot", dump.exists, 120)
    snapshot = tracemalloc.Snapshot.load(str(dump)).filter_traces(
        [tracemalloc.Filter(False, tracemalloc.__file__), tracemalloc.Filter(False, "<frozen importlib._bootstrap>")])
    total = sum(s.size for s in snapshot.statistics("filename"))
    console.print(f"operator-{shard.index} (tracemalloc): {total / 1e6:.1f} MB traced")
    for key in ("filename", "lineno"):
        for stat in snapshot.statistics(key)[:top]:
            frame = stat.traceback[0]
            console.print(f"  {stat.size / 1e6:8.2f} MB {stat.count:9d} blocks  {frame.filename}:{frame.lineno}",
                          soft_wrap=True, highlight=False)
    for stat in snapshot.statistics("traceback")[:top]:
        console.print(f"  {stat.size / 1e6:8.2f} MB {stat.count:9d} blocks, allocated at (innermost last):",
                      highlight=False)
        for frame in stat.traceback:
            console.print(f"      {frame.filename}:{frame.lineno}", soft_wrap=True, highlight=False)


def _apply_crds(sd: Path) -> None:
    kubectl = Path(json.loads((sd / "cluster.json").read_text())["bin_dir"]) / "kubectl"
    for crd in CRDS:
        subprocess.run([str(kubectl), "--kubeconfig", str(sd / "kubeconfig"), "apply", "--server-side", "-f",
                        str(crd)], check=True, capture_output=True)
    for name in ("llmdeployments.llmscale.dev", "kopfpeerings.kopf.dev"):
        _wait(f"CRD {name} Established", lambda c=name: subprocess.run(
            [str(kubectl), "--kubeconfig", str(sd / "kubeconfig"), "wait", "--for=condition=Established",
             "--timeout=20s", f"crd/{c}"], capture_output=True).returncode == 0, 60)


def make_namespaces(api: kubernetes.client.ApiClient, names: list[str]) -> None:
    """Create the namespaces, each with the KopfPeering its shard joins; wait for their ServiceAccounts."""
    core = kubernetes.client.CoreV1Api(api)
    custom = kubernetes.client.CustomObjectsApi(api)
    for ns in names:
        core.create_namespace({"metadata": {"name": ns}})
        custom.create_namespaced_custom_object("kopf.dev", "v1", ns, "kopfpeerings", {
            "apiVersion": "kopf.dev/v1", "kind": "KopfPeering", "metadata": {"name": PEERING}})
    for ns in names:
        _wait(f"ServiceAccount {ns}/default", lambda n=ns: core.read_namespaced_service_account("default", n), 60)


def manifest(name: str, tick_s: float) -> dict[str, Any]:
    """The sample LLMDeployment (mock engine, 1 GPU) at min 1 and ``tick_s``, no headroom replica (one
    GPU per object on ``N/8 + 2`` nodes of 8), a scale-up without stabilisation window (the
    metric change is answered at the next tick)."""
    body = copy.deepcopy(yaml.safe_load(SAMPLE.read_text()))
    body["metadata"] = {"name": name}
    spec = body["spec"]
    spec["replicas"] = {"min": 1, "max": 3}
    spec["scaling"] = {"tickSeconds": tick_s, "targets": spec["scaling"]["targets"],
                       "scaleUp": spec["scaling"]["scaleUp"]}
    spec["headroom"] = {"replicas": 0, "growthFactor": 0, "coldStartSeconds": 8}
    return dict(body)


def objects(total: int, namespaces: list[str]) -> list[tuple[str, str]]:
    """``(namespace, name)`` of the first ``total`` objects, spread round-robin over ``namespaces``."""
    return [(namespaces[i % len(namespaces)], f"chat-{i:04d}") for i in range(total)]


def create(api: kubernetes.client.ApiClient, todo: list[tuple[str, str]], tick_s: float) -> None:
    """Create ``todo`` with 8 client threads (what a GitOps sync of a big repository does)."""
    custom = kubernetes.client.CustomObjectsApi(api)

    def one(item: tuple[str, str]) -> None:
        namespace, name = item
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, manifest(name, tick_s))

    with Progress(TextColumn("creating LLMDeployments"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=True) as bar, ThreadPoolExecutor(8) as pool:
        task = bar.add_task("create", total=len(todo))
        for _ in pool.map(one, todo):
            bar.advance(task)


def reconciled(api: kubernetes.client.ApiClient, wanted: set[tuple[str, str]]) -> int:
    """How many of ``wanted`` report ``Ready`` and ``MetricsAvailable`` True (one LIST, watch cache)."""
    items = kubernetes.client.CustomObjectsApi(api).list_cluster_custom_object(
        GROUP, VERSION, PLURAL, resource_version="0", _request_timeout=60)["items"]
    done = 0
    for item in items:
        key = (item["metadata"]["namespace"], item["metadata"]["name"])
        conds = {c.get("type"): c.get("status") for c in (item.get("status") or {}).get("conditions") or []}
        done += key in wanted and conds.get("Ready") == "True" and conds.get("MetricsAvailable") == "True"
    return done


def wait_reconciled(api: kubernetes.client.ApiClient, wanted: set[tuple[str, str]], timeout_s: float,
                    shards: list[Shard]) -> None:
    """Poll every 5 s (sampling the operators' RSS meanwhile) until all of ``wanted`` are reconciled."""
    deadline = time.monotonic() + timeout_s
    with Progress(TextColumn("reconciled"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=True) as bar:
        task = bar.add_task("reconcile", total=len(wanted))
        while True:
            for s in shards:
                if cluster.proc_start_time(s.pid) is None:
                    raise RuntimeError(f"operator-{s.index} exited; last log lines:\n{cluster.tail(s.log)}")
            # A busy API server may break a long answer off: the next poll asks again.
            with contextlib.suppress(ApiException, OSError, urllib3.exceptions.HTTPError):
                done = reconciled(api, wanted)
                bar.update(task, completed=done)
                if done == len(wanted):
                    return
            if time.monotonic() > deadline:
                raise RuntimeError(f"only {bar.tasks[0].completed:.0f} of {len(wanted)} objects reconciled after "
                                   f"{timeout_s:.0f} s")
            time.sleep(5)


# ------------------------------------------------------------------------------------ measuring


def rss_bytes(pid: int) -> tuple[int, int]:
    """``(VmRSS, VmHWM)`` of ``pid`` in bytes (the kernel's resident size and its peak)."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return int(fields["VmRSS"].split()[0]) * 1024, int(fields["VmHWM"].split()[0]) * 1024


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of ``pid`` so far."""
    parts = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(parts[11]) + int(parts[12])) / os.sysconf("SC_CLK_TCK")


def sample_rss(shards: list[Shard], stop: threading.Event) -> None:
    """Append ``(time, RSS)`` of each operator every second until ``stop``."""
    while not stop.wait(1.0):
        for s in shards:
            with contextlib.suppress(OSError, KeyError, ValueError):
                s.rss.append((time.time(), rss_bytes(s.pid)[0]))


def families(text: str) -> dict[str, list[Any]]:
    """Samples of a ``/metrics`` page by sample name."""
    out: dict[str, list[Any]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append(sample)
    return out


def query_count(prometheus_url: str) -> int:
    """Queries Prometheus has evaluated since it started (its own ``/metrics``)."""
    samples = families(_http(f"{prometheus_url}/metrics")).get("prometheus_engine_query_duration_seconds_count", [])
    return int(sum(s.value for s in samples if s.labels.get("slice") == "inner_eval"))


def operator_metrics(shard: Shard) -> dict[str, list[Any]]:
    """The shard's ``/metrics``, by sample name."""
    return families(_http(f"http://127.0.0.1:{shard.port}/metrics"))


def tick_buckets(samples: dict[str, list[Any]]) -> list[tuple[float, float]]:
    """``(le, cumulative count)`` of ``llmscale_tick_duration_seconds``, sorted."""
    return sorted((float(s.labels["le"]), s.value) for s in samples.get("llmscale_tick_duration_seconds_bucket", []))


def quantile(q: float, before: list[tuple[float, float]], after: list[tuple[float, float]]) -> float | None:
    """The ``q`` quantile of the observations between two reads of a histogram, interpolated
    linearly inside the bucket as PromQL's ``histogram_quantile`` does; ``None`` with none."""
    old = dict(before)
    deltas = [(le, count - old.get(le, 0.0)) for le, count in after]
    total = deltas[-1][1] if deltas else 0.0
    if total <= 0:
        return None
    rank = q * total
    lower_le, lower_count = 0.0, 0.0
    for le, count in deltas:
        if count >= rank:
            if le == float("inf"):
                return lower_le
            return lower_le + (le - lower_le) * (rank - lower_count) / max(count - lower_count, 1e-12)
        lower_le, lower_count = le, count
    return lower_le


def wait_buckets(samples: dict[str, list[Any]]) -> list[tuple[float, float]]:
    """``(le, cumulative count)`` of ``llmscale_api_connection_wait_seconds``, sorted."""
    return sorted((float(s.labels["le"]), s.value)
                  for s in samples.get("llmscale_api_connection_wait_seconds_bucket", []))


def connection_waits(shards: list[Shard]) -> dict[str, float | None]:
    """Requests to the API server that waited for a free connection of an operator's bounded pool,
    whole run, all shards: how many, the p99 and the longest bucket's bound, and how many waited
    over 5 s (the least margin of Kopf's peering keep-alive, ``kopf/_core/engines/peering.py``)."""
    merged = _merge_buckets([b for s in shards for b in wait_buckets(operator_metrics(s))])
    total = merged[-1][1] if merged else 0.0
    over_5 = total - dict(merged).get(5.0, total)
    longest = next((le for le, count in merged if count >= total), None) if total else None
    return {"waited": total, "p99_s": quantile(0.99, [], merged), "longest_le_s": longest, "over_5s": over_5}


def signal_errors(samples: dict[str, list[Any]]) -> float:
    """``llmscale_signal_read_errors_total`` summed over objects."""
    return float(sum(s.value for s in samples.get("llmscale_signal_read_errors_total", [])))


def _timestamp(text: str) -> float:
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def audit_writes(audit_log: Path, users: set[str]) -> Iterator[dict[str, Any]]:
    """The completed write requests of ``users`` in the audit log: ``{t, user, verb, resource,
    namespace, name, code}`` (``resource`` with its subresource, ``deployments`` or
    ``llmdeployments/status``)."""
    with contextlib.suppress(FileNotFoundError), audit_log.open() as f:
        for line in f:
            with contextlib.suppress(ValueError, KeyError):
                event = json.loads(line)
                user = event["user"]["username"]
                if event.get("stage") != "ResponseComplete" or user not in users or event["verb"] in READ_VERBS:
                    continue
                ref = event.get("objectRef") or {}
                resource = ref.get("resource", "?") + (f"/{ref['subresource']}" if ref.get("subresource") else "")
                yield {"t": _timestamp(event["requestReceivedTimestamp"]), "user": user, "verb": event["verb"],
                       "resource": resource, "namespace": ref.get("namespace"), "name": ref.get("name"),
                       "code": (event.get("responseStatus") or {}).get("code"), "body": event.get("requestObject")}


def changed_paths(body: Any, prefix: str = "", depth: int = 4) -> Iterator[str]:
    """The leaf paths a merge patch sets, to ``depth`` keys (``status.pools.interactive.gpus``)."""
    if isinstance(body, dict) and depth > 0 and body:
        for key, value in body.items():
            yield from changed_paths(value, f"{prefix}.{key}" if prefix else str(key), depth - 1)
    else:
        yield prefix


def measure_stage(total: int, reconcile_s: float, hold_s: float, shards: list[Shard], prometheus_url: str,
                  audit_log: Path, tick_s: float) -> StageFigures:
    """Hold ``hold_s`` seconds without touching Prometheus or the objects, and return the figures."""
    q0 = query_count(prometheus_url)
    m0 = [operator_metrics(s) for s in shards]
    c0 = [cpu_seconds(s.pid) for s in shards]
    t0 = time.time()
    with Progress(TextColumn(f"steady hold at {total}"), BarColumn(), TimeElapsedColumn(), console=console,
                  transient=True) as bar:
        task = bar.add_task("hold", total=hold_s)
        while (elapsed := time.time() - t0) < hold_s:
            bar.update(task, completed=elapsed)
            time.sleep(min(1.0, hold_s - elapsed))
    t1 = time.time()
    q1 = query_count(prometheus_url)
    m1 = [operator_metrics(s) for s in shards]
    c1 = [cpu_seconds(s.pid) for s in shards]
    before = [b for m in m0 for b in tick_buckets(m)]
    after = [b for m in m1 for b in tick_buckets(m)]
    merged0 = _merge_buckets(before)
    merged1 = _merge_buckets(after)
    p50, p99 = quantile(0.5, merged0, merged1), quantile(0.99, merged0, merged1)
    writes = [w for w in audit_writes(audit_log, {s.user for s in shards}) if t0 <= w["t"] < t1]
    hold = t1 - t0
    return StageFigures(
        deployments=total, reconcile_s=reconcile_s, hold_s=hold, queries=q1 - q0,
        queries_per_tick=(q1 - q0) / hold * tick_s, queries_per_s=(q1 - q0) / hold,
        rss_steady_mb=[statistics.median([r for t, r in s.rss if t0 <= t <= t1] or [0]) / 1e6 for s in shards],
        rss_peak_mb=[rss_bytes(s.pid)[1] / 1e6 for s in shards],
        cpu_percent=[100 * (b - a) / hold for a, b in zip(c0, c1, strict=True)],
        tick_p50_ms=None if p50 is None else 1000 * p50, tick_p99_ms=None if p99 is None else 1000 * p99,
        writes_per_s=len(writes) / hold, writes_by_resource=dict(Counter(w["resource"] for w in writes)),
        signal_read_errors=sum(signal_errors(m) for m in m1),
        status_paths=dict(Counter(p for w in writes if w["resource"] == "llmdeployments/status"
                                  for p in changed_paths((w["body"] or {}).get("status"))).most_common(8)),
    )


def _merge_buckets(buckets: list[tuple[float, float]]) -> list[tuple[float, float]]:
    summed: dict[float, float] = {}
    for le, count in buckets:
        summed[le] = summed.get(le, 0.0) + count
    return sorted(summed.items())


def metric_change(api: kubernetes.client.ApiClient, prometheus_url: str, exporter_port: int, namespace: str,
                  name: str, audit_log: Path, users: set[str], timeout_s: float) -> dict[str, float | None]:
    """Set the queue depth of ``namespace/name``'s pods and time it: seconds until Prometheus has
    it (``visible_s``) and until the operator's write of the Deployment's replicas (``write_s``,
    from the audit log; ``None`` when none came within ``timeout_s``)."""
    apps = kubernetes.client.AppsV1Api(api)
    t0 = time.time()
    _http(f"http://127.0.0.1:{exporter_port}/set?" + urllib.parse.urlencode(
        {"namespace": namespace, "deployment": name, "waiting": CHANGED_QUEUE}), data=b"")
    query = urllib.parse.urlencode({"query": f'max(vllm:num_requests_waiting{{namespace="{namespace}",'
                                             f'llmscale_dev_deployment="{name}"}})'})
    visible: float | None = None
    written: float | None = None
    deadline = t0 + timeout_s
    with console.status(f"metric change on {namespace}/{name}: waiting for the replica write"):
        while time.time() < deadline and written is None:
            if visible is None:
                body = json.loads(_http(f"{prometheus_url}/api/v1/query?{query}"))
                result = body["data"]["result"]
                if result and float(result[0]["value"][1]) >= CHANGED_QUEUE:
                    visible = time.time()
            if (apps.read_namespaced_deployment(name, namespace).spec.replicas or 0) > 1:
                written = next((w["t"] for w in audit_writes(audit_log, users)
                                if w["t"] >= t0 and w["resource"] == "deployments" and w["name"] == name
                                and w["namespace"] == namespace), time.time())
            time.sleep(0.25)
    return {"visible_s": None if visible is None else visible - t0,
            "write_s": None if written is None else written - t0,
            "decision_after_visible_s": None if visible is None or written is None else written - visible}


def ownership(audit_log: Path, shards: list[Shard]) -> list[dict[str, Any]]:
    """Per shard: the objects whose status it wrote, and any write it made outside its namespaces."""
    rows = []
    writes = list(audit_writes(audit_log, {s.user for s in shards}))
    for s in shards:
        mine = [w for w in writes if w["user"] == s.user]
        status = {(w["namespace"], w["name"]) for w in mine if w["resource"] == "llmdeployments/status"}
        foreign = [w for w in mine if w["namespace"] is not None and w["namespace"] not in s.namespaces]
        paused = sum("Pausing operations" in line for line in s.log.read_text(errors="replace").splitlines())
        rows.append({"shard": s.index, "namespaces": len(s.namespaces), "objects_with_status": len(status),
                     "writes": len(mine), "foreign_writes": len(foreign), "peering_pauses": paused})
    return rows


# ------------------------------------------------------------------------------------------ report


def _fmt(values: list[float], unit: str = "", digits: int = 0) -> str:
    return " / ".join(f"{v:.{digits}f}{unit}" for v in values)


def print_stage(f: StageFigures, tick_s: float) -> None:
    """One stage's figures as a table."""
    table = Table(title=f"{f.deployments} LLMDeployments: steady hold of {f.hold_s:.0f} s", show_header=False)
    table.add_row("all reconciled (Ready, MetricsAvailable) after", f"{f.reconcile_s:.0f} s")
    table.add_row(f"PromQL queries per {tick_s:g} s tick", f"{f.queries_per_tick:.1f} ({f.queries_per_s:.2f}/s)")
    table.add_row("operator RSS in the hold, peak so far", ", ".join(
        f"{a:.0f} MB, {b:.0f} MB" for a, b in zip(f.rss_steady_mb, f.rss_peak_mb, strict=True)))
    table.add_row("operator CPU in the hold", _fmt(f.cpu_percent, " %", 1))
    p50 = "-" if f.tick_p50_ms is None else f"{f.tick_p50_ms:.1f} ms"
    p99 = "-" if f.tick_p99_ms is None else f"{f.tick_p99_ms:.1f} ms"
    table.add_row("tick duration p50 / p99", f"{p50} / {p99}")
    by = ", ".join(f"{k} {v}" for k, v in sorted(f.writes_by_resource.items())) or "none"
    table.add_row("API writes/s in the hold (operators)", f"{f.writes_per_s:.3f} ({by})")
    if f.status_paths:
        table.add_row("what the status writes in the hold set",
                      ", ".join(f"{k} {v}" for k, v in f.status_paths.items()))
    table.add_row("failed signal reads so far", f"{f.signal_read_errors:.0f}")
    console.print(table)


def run(args: argparse.Namespace, sd: Path) -> dict[str, Any]:
    """The whole benchmark in state dir ``sd``; return the figures (``--json``)."""
    totals = [int(x) for x in str(args.deployments).split(",")]
    biggest = max(totals)
    namespaces = [f"scale-{i:02d}" for i in range(args.namespaces)]
    shards = [Shard(i, f"llmscale-shard-{i}", namespaces[i::args.shards]) for i in range(args.shards)]
    nodes = biggest // 8 + 2
    t_start = time.monotonic()
    with console.status(f"starting the control plane with {nodes} fake GPU nodes"):
        start_control_plane(sd, nodes, [s.user for s in shards])
    for s in shards:
        _openssl_user(sd / "pki", s.user)
    api = kubernetes.config.new_client_from_config(config_file=str(sd / "kubeconfig"))
    with console.status("CRDs, namespaces, peering objects, exporter, Prometheus, operators"):
        _apply_crds(sd)
        make_namespaces(api, namespaces)
        exporter_port = free_port()
        start_exporter(sd, exporter_port)
        prometheus_url = start_prometheus(sd, free_port(), args.scrape_interval)
        for s in shards:
            start_operator(sd, s, prometheus_url, traced=args.tracemalloc, census=args.census)
    console.print(f"up in {time.monotonic() - t_start:.0f} s: {nodes} nodes, {len(namespaces)} namespaces, "
                  f"{len(shards)} operator(s) (PIDs {', '.join(str(s.pid) for s in shards)}), state {sd}")
    stop = threading.Event()
    sampler = threading.Thread(target=sample_rss, args=(shards, stop), daemon=True)
    sampler.start()
    stages: list[StageFigures] = []
    audit_log = sd / "audit.log"
    done = 0
    try:
        for total in totals:
            todo = objects(total, namespaces)[done:]
            t0 = time.monotonic()
            create(api, todo, args.tick_seconds)
            wait_reconciled(api, set(objects(total, namespaces)), args.reconcile_timeout, shards)
            reconcile_s = time.monotonic() - t0
            done = total
            console.print(f"{total} LLMDeployments reconciled in {reconcile_s:.0f} s; settling {args.settle:g} s")
            time.sleep(args.settle)
            figures = measure_stage(total, reconcile_s, args.hold, shards, prometheus_url, audit_log,
                                    args.tick_seconds)
            stages.append(figures)
            print_stage(figures, args.tick_seconds)
            for s in shards:
                if args.tracemalloc:
                    print_traced(sd, s)
                elif args.census:
                    print_census(sd, s)
        namespace, name = objects(biggest, namespaces)[0]
        change = metric_change(api, prometheus_url, exporter_port, namespace, name, audit_log,
                               {s.user for s in shards}, args.change_timeout)
    finally:
        stop.set()
    change_row = (f"metric change on {namespace}/{name}: in Prometheus after "
                  f"{_opt(change['visible_s'])}, replicas written after {_opt(change['write_s'])} "
                  f"({_opt(change['decision_after_visible_s'])} after Prometheus had it)")
    console.print(change_row, soft_wrap=True)
    shard_rows = ownership(audit_log, shards)
    table = Table(title="Shards (audit log: writes by each operator's identity)")
    for column in ("shard", "namespaces", "objects with status", "writes", "writes outside its namespaces",
                   "peering pauses"):
        table.add_column(column, justify="right")
    for row in shard_rows:
        table.add_row(*(str(v) for v in row.values()))
    console.print(table)
    peak = max(rss_bytes(s.pid)[1] for s in shards) / 1e6
    errors = sum(signal_errors(operator_metrics(s)) for s in shards)
    console.print(f"failed signal reads, whole run: {errors:.0f}; peak operator RSS, whole run: {peak:.0f} MB")
    waits = connection_waits(shards)
    console.print(f"API requests that waited for a connection, whole run: {waits['waited']:.0f}; p99 "
                  f"{_opt(waits['p99_s'])}; all within {_opt(waits['longest_le_s'])}; over 5 s (Kopf's peering "
                  f"keep-alive margin): {waits['over_5s']:.0f}")
    return {"stages": [asdict(f) for f in stages], "change": change, "shards": shard_rows,
            "signal_read_errors": errors, "rss_peak_mb": peak, "nodes": nodes, "namespaces": len(namespaces),
            "connection_waits": waits}


def _opt(value: float | None) -> str:
    return "never" if value is None else f"{value:.1f} s"


def _interrupted(signum: int, _frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark (module docstring); return the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deployments", default="1000", help="LLMDeployments, or totals of stages: 100,1000")
    parser.add_argument("--shards", type=int, default=1, help="operator processes, each a set of namespaces")
    parser.add_argument("--namespaces", type=int, default=10, help="namespaces the objects are spread over")
    parser.add_argument("--hold", type=float, default=120.0, help="seconds of steady hold measured per stage")
    parser.add_argument("--settle", type=float, default=90.0, help="seconds between reconciled and the hold")
    parser.add_argument("--tick-seconds", type=float, default=15.0, help="spec.scaling.tickSeconds of the objects")
    parser.add_argument("--scrape-interval", type=float, default=15.0, help="Prometheus scrape interval, seconds")
    parser.add_argument("--reconcile-timeout", type=float, default=1800.0, help="seconds to wait for a stage")
    parser.add_argument("--change-timeout", type=float, default=120.0, help="seconds to wait for the replica write")
    parser.add_argument("--state-dir", type=Path, default=None, help="default: a temporary folder, removed")
    parser.add_argument("--tracemalloc", action="store_true",
                        help="run the operators under tracemalloc and print what they hold after each hold "
                             "(slower, bigger: not for the RSS figure)")
    parser.add_argument("--census", action="store_true",
                        help="print after each hold what each operator holds: RSS, C heap, pymalloc, and the bytes "
                             "Kopf and llmscale keep per LLMDeployment (no tracing; the walk itself takes a few s)")
    parser.add_argument("--keep", action="store_true", help="leave everything running (stop: cluster.py down)")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures to this file")
    args = parser.parse_args(argv)
    if args.shards < 1 or args.namespaces < args.shards:
        parser.error("need --shards >= 1 and at least one namespace per shard")
    sd = (args.state_dir or Path(tempfile.mkdtemp(prefix="llmscale-scale-"))).resolve()
    sd.mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGTERM, _interrupted)
    try:
        result = run(args, sd)
        if args.json:
            args.json.write_text(json.dumps(result, indent=2) + "\n")
    finally:
        if not args.keep:
            with console.status("stopping everything by PID"):
                cluster.do_down(sd, grace=10.0)
            if args.state_dir is None:
                subprocess.run(["rm", "-rf", str(sd)], check=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
