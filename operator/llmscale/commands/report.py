"""``llmscale report``: the fleet cost report over every LLMDeployment (issue 23; docs/report.md).

Reads the LLMDeployments from the API server (the kubernetes client, the current kubeconfig or
``--kubeconfig``) and their recorded series from Prometheus (prometheus-api-client, one range
query per metric at ``--step``), computes the figures with :func:`llmscale.fleetreport.build_report`
(pure), and writes ``report.md``, ``report.html``, ``utilisation.png`` and ``cost.png`` into
``--out-dir``; stdout gets the Markdown (``-o markdown``) or the figures (``-o json``/``yaml``).

Reference prices (a managed API's, USD per million input and output tokens): ``--reference-price
IN,OUT`` for the fleet, ``--price NAMESPACE/NAME=IN,OUT`` per deployment (repeatable). Exit 0 on
success, 2 on a usage error (a malformed price, Prometheus or the API server unreachable).
"""

from __future__ import annotations

import argparse
import datetime as dt
import html
import importlib.util
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from llmscale.api import LLMDeploymentSpec
from llmscale.commands.output import add_output_argument, write_document
from llmscale.consolidation import Candidate, candidates, traffic_of
from llmscale.fleetreport import DAY_S, Deployment, Figures, FleetReport, Price, Recorded, build_report
from llmscale.signals.drift import engine_names

__all__ = ["add_arguments", "main", "render_html", "render_markdown"]

GROUP, VERSION, PLURAL = "llmscale.dev", "v1alpha1", "llmdeployments"
#: ``Recorded.pools`` metric key → the query of the operator's gauge. The two renamed in 0.2.0 read
#: their deprecated name where the new one has no sample (history from before an upgrade), one
#: series per pool.
OPERATOR_SERIES = {
    "gpus": "llmscale_gpus",
    "busy_share": "max by (namespace, name, pool) (llmscale_busy_ratio)"
                  " or max by (namespace, name, pool) (llmscale_busy_share)",
    "kv_mean": "max by (namespace, name, pool) (llmscale_kv_cache_utilization_ratio)"
               " or max by (namespace, name, pool) (llmscale_kv_cache_utilization_mean)",
    "tokens_per_second": "llmscale_tokens_per_second",
    "goodput_tokens_per_second": "llmscale_goodput_tokens_per_second",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``report`` options to ``parser``."""
    parser.add_argument("--prometheus-url", required=True, help="Prometheus' base URL")
    parser.add_argument("--kubeconfig", type=Path, help="kubeconfig (default: the current context)")
    parser.add_argument("-n", "--namespace", action="append", default=[], metavar="NAMESPACE",
                        help="report only the LLMDeployments of this namespace (repeatable; default: every namespace)")
    parser.add_argument("--out-dir", type=Path, required=True, help="folder for report.md, report.html and plots")
    parser.add_argument("--reference-price", metavar="IN,OUT",
                        help="a managed API's USD per million input and output tokens, fleet-wide")
    parser.add_argument("--price", action="append", default=[], metavar="NAMESPACE/NAME=IN,OUT",
                        help="the reference price of one deployment (repeatable)")
    parser.add_argument("--now", type=float, help="end of the report, Unix seconds (default: now)")
    parser.add_argument("--step", type=float, default=3600.0, help="sample spacing, seconds (default 3600)")
    parser.add_argument("--days", type=float, nargs="+", default=[7.0, 30.0], help="windows, days (default 7 30)")
    parser.add_argument("--no-consolidation", action="store_true",
                        help="skip the consolidation candidates (they run the simulator)")
    add_output_argument(parser, ("markdown", "json", "yaml"), "markdown")


def parse_price(text: str) -> Price:
    """``IN,OUT`` (USD per million input and output tokens) → :class:`Price`; ValueError when malformed."""
    parts = text.split(",")
    if len(parts) != 2:
        raise ValueError(f"a price is IN,OUT (USD per million input and output tokens), got {text!r}")
    return Price(float(parts[0]), float(parts[1]))


def parse_prices(items: list[str]) -> dict[tuple[str, str], Price]:
    """``NAMESPACE/NAME=IN,OUT`` items → prices by ``(namespace, name)``."""
    out = {}
    for item in items:
        who, sep, price = item.partition("=")
        namespace, slash, name = who.partition("/")
        if not sep or not slash or not namespace or not name:
            raise ValueError(f"--price is NAMESPACE/NAME=IN,OUT, got {item!r}")
        out[(namespace, name)] = parse_price(price)
    return out


def deployment_of(obj: dict[str, Any]) -> Deployment:
    """The report's view of one LLMDeployment object (ValueError when its spec is invalid)."""
    spec = LLMDeploymentSpec.model_validate(obj.get("spec") or {})
    engine = json.dumps([spec.engine.type, spec.engine.image, list(spec.engine.args)])
    return Deployment(
        namespace=obj["metadata"]["namespace"], name=obj["metadata"]["name"], model=spec.model.name, engine=engine,
        gpus_per_replica=spec.resources.gpus_per_replica, min_replicas=spec.replicas.min,
        gpu_hour_usd=spec.cost.gpu_hour_usd,
    )


def fetch_deployments(
    kubeconfig: Path | None, namespaces: frozenset[str] = frozenset(),
) -> tuple[list[Deployment], dict[tuple[str, str], LLMDeploymentSpec], list[str]]:
    """Every LLMDeployment of the cluster (of ``namespaces`` only, when any are named), their specs,
    and a warning per object skipped for an invalid spec."""
    import kubernetes

    api = kubernetes.config.new_client_from_config(  # type: ignore[no-untyped-call]
        config_file=str(kubeconfig) if kubeconfig else None)
    listed: Any = kubernetes.client.CustomObjectsApi(api).list_cluster_custom_object(GROUP, VERSION, PLURAL)
    items = [obj for obj in listed["items"]
             if not namespaces or obj.get("metadata", {}).get("namespace") in namespaces]
    deployments, specs, warnings = [], {}, []
    for obj in items:
        try:
            dep = deployment_of(obj)
            specs[dep.key] = LLMDeploymentSpec.model_validate(obj["spec"])
            deployments.append(dep)
        except (ValueError, KeyError) as exc:
            meta = obj.get("metadata", {})
            warnings.append(f"skipped {meta.get('namespace')}/{meta.get('name')}: invalid spec ({exc})")
    return deployments, specs, warnings


def fetch_recorded(url: str, *, now: float, days: float, step_s: float) -> dict[tuple[str, str], Recorded]:
    """The operator's gauges and the engines' prompt tokens/s over the ``days`` before ``now``."""
    from prometheus_api_client import PrometheusConnect

    prom = PrometheusConnect(url=url, disable_ssl=True)
    start, end = dt.datetime.fromtimestamp(now - days * DAY_S, dt.UTC), dt.datetime.fromtimestamp(now, dt.UTC)

    def query(expr: str) -> list[dict[str, Any]]:
        return list(prom.custom_query_range(expr, start_time=start, end_time=end, step=f"{step_s:g}"))

    pools: dict[tuple[str, str], dict[str, dict[str, list[tuple[float, float]]]]] = defaultdict(dict)
    for key, metric in OPERATOR_SERIES.items():
        for series in query(metric):
            labels = series["metric"]
            who = (labels.get("namespace", ""), labels.get("name", ""))
            pools[who].setdefault(labels.get("pool", "interactive"), {})[key] = [
                (float(t), float(v)) for t, v in series["values"]]
    window = f"{step_s:g}s"

    def engine_rate(field: str) -> dict[tuple[str, str], list[tuple[float, float]]]:
        names = '{__name__=~"' + "|".join(engine_names(field)) + '"}'
        out = {}
        for series in query(f"sum by (namespace, llmscale_dev_deployment) (rate({names}[{window}]))"):
            labels = series["metric"]
            out[(labels.get("namespace", ""), labels.get("llmscale_dev_deployment", ""))] = [
                (float(t), float(v)) for t, v in series["values"]]
        return out

    inputs, requests = engine_rate("prompt_tokens_total"), engine_rate("requests_total")
    return {who: Recorded(pools=pools.get(who, {}), input_tokens_per_second=inputs.get(who, ()),
                          requests_per_second=requests.get(who, ()))
            for who in set(pools) | set(inputs) | set(requests)}


def _usd(x: float | None) -> str:
    return "—" if x is None else f"${x:,.2f}"


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{x:.0%}"


def _num(x: float | None, digits: int = 0) -> str:
    return "—" if x is None else f"{x:,.{digits}f}"


COLUMNS = ("deployment", "GPU-hours", "busy", "KV use", "goodput tok/GPU-h", "$/M tokens", "managed $/M",
           "cost", "managed cost")


def _cells(who: str, f: Figures) -> list[str]:
    return [who, _num(f.gpu_hours, 1), _pct(f.busy_share), _pct(f.kv_use), _num(f.goodput_per_gpu_hour),
            _usd(f.usd_per_million_tokens), _usd(f.reference_usd_per_million_tokens), _usd(f.cost_usd),
            _usd(f.reference_usd)]


def _tables(report: FleetReport) -> list[tuple[str, list[list[str]], list[tuple[str, str]]]]:
    """Per window: a title, the rows (deployments, then the fleet) and the verdict lines."""
    out = []
    for days in report.windows_days:
        rows = [_cells(f"{r.deployment.namespace}/{r.deployment.name}", r.figures[days]) for r in report.rows]
        rows.append(_cells("**fleet**", report.total[days]))
        verdicts = [(f"{r.deployment.namespace}/{r.deployment.name}", r.figures[days].verdict) for r in report.rows]
        verdicts.append(("fleet", report.total[days].verdict))
        out.append((f"Last {days:g} days", rows, verdicts))
    return out


def _when(report: FleetReport) -> str:
    return dt.datetime.fromtimestamp(report.now, dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


CONSOLIDATION_COLUMNS = ("deployments", "model", "replicas at peak, separate", "merged", "floors summed",
                         "GPUs saved", "$/month saved")


def _consolidation_rows(found: list[Candidate]) -> list[list[str]]:
    return [[", ".join(c.deployments), c.model, str(c.separate_replicas), str(c.merged_replicas), str(c.floors),
             str(c.gpus_saved), _usd(c.usd_per_month_saved) + (" (floors exceed the merged peak)"
                                                                if c.floors_exceed_peak else "")] for c in found]


_CONSOLIDATION_NOTE = ("Same model, engine, GPU type and GPUs per replica; replicas each peak needs are simulated "
                       "(llmscale.sim) on the deployments' own recorded peak-hour traffic; separate: each at "
                       "max(floor, own need); merged: max(largest floor, merged need). Dollars: GPUs saved × 730 h "
                       "× gpuHourUsd.")


def render_markdown(report: FleetReport, plots: tuple[str, ...] = (), found: list[Candidate] | None = None) -> str:
    """The report as Markdown (tables per window, verdicts, consolidation candidates, the plots)."""
    lines = [f"# llmscale fleet report, {_when(report)}", "",
             f"{len(report.rows)} LLMDeployments. Prices: " + "; ".join(
                 f"{r.deployment.namespace}/{r.deployment.name} ${r.deployment.gpu_hour_usd:g}/GPU-h"
                 + (f" vs ${r.price.input_usd_per_million:g} in / ${r.price.output_usd_per_million:g} out per M"
                    if r.price else " (no reference)") for r in report.rows) + ".", ""]
    for title, rows, verdicts in _tables(report):
        lines += [f"## {title}", "", "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
        lines += ["| " + " | ".join(r) + " |" for r in rows]
        lines += ["", "Build or buy:", ""] + [f"- **{who}**: {line}" for who, line in verdicts] + [""]
    if found is not None:
        lines += ["## Consolidation candidates", "", _CONSOLIDATION_NOTE, ""]
        if found:
            lines += ["| " + " | ".join(CONSOLIDATION_COLUMNS) + " |", "|" + "---|" * len(CONSOLIDATION_COLUMNS)]
            lines += ["| " + " | ".join(r) + " |" for r in _consolidation_rows(found)]
        else:
            lines.append("None: no two deployments serve the same model with the same engine settings.")
        lines.append("")
    for plot in plots:
        lines += [f"![{plot}]({plot})", ""]
    return "\n".join(lines)


def render_html(report: FleetReport, plots: tuple[str, ...] = (), found: list[Candidate] | None = None) -> str:
    """The report as one HTML page (the same tables and verdicts; the plots as images)."""
    esc = html.escape
    parts = ["<!doctype html><html><head><meta charset='utf-8'>",
             f"<title>llmscale fleet report, {esc(_when(report))}</title>",
             "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
             "td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}td:first-child{text-align:left}"
             "</style></head><body>", f"<h1>llmscale fleet report, {esc(_when(report))}</h1>"]
    for title, rows, verdicts in _tables(report):
        parts.append(f"<h2>{esc(title)}</h2><table><tr>" + "".join(f"<th>{esc(c)}</th>" for c in COLUMNS) + "</tr>")
        for row in rows:
            cells = [esc(c.strip("*")) if i else (f"<b>{esc(c.strip('*'))}</b>" if c.startswith("**") else esc(c))
                     for i, c in enumerate(row)]
            parts.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
        parts.append("</table><h3>Build or buy</h3><ul>")
        parts += [f"<li><b>{esc(who)}</b>: {esc(line)}</li>" for who, line in verdicts]
        parts.append("</ul>")
    if found is not None:
        parts.append(f"<h2>Consolidation candidates</h2><p>{esc(_CONSOLIDATION_NOTE)}</p>")
        if found:
            parts.append("<table><tr>" + "".join(f"<th>{esc(c)}</th>" for c in CONSOLIDATION_COLUMNS) + "</tr>")
            parts += ["<tr>" + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>"
                      for row in _consolidation_rows(found)]
            parts.append("</table>")
        else:
            parts.append("<p>None: no two deployments serve the same model with the same engine settings.</p>")
    parts += [f"<p><img src='{esc(p)}' alt='{esc(p)}'></p>" for p in plots]
    parts.append("</body></html>\n")
    return "\n".join(parts)


def plot(report: FleetReport, out_dir: Path) -> tuple[str, ...]:
    """Write utilisation.png (busy share over the longest window) and cost.png ($/M against the
    managed API's, longest window); return their file names."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    days = max(report.windows_days)
    fig, ax = plt.subplots(figsize=(10, 4))
    for row in report.rows:
        pts = [(t, v) for t, v in row.busy_series if t > report.now - days * DAY_S]
        if pts:
            ax.plot([dt.datetime.fromtimestamp(t, dt.UTC) for t, _ in pts], [v for _, v in pts],  # type: ignore[arg-type]
                    label=f"{row.deployment.namespace}/{row.deployment.name}", linewidth=1)
    ax.set_ylim(0, 1)
    ax.set_ylabel("busy share (GPU-weighted)")
    ax.set_title(f"Utilisation, last {days:g} days")
    if ax.get_lines():
        ax.legend(loc="upper right", fontsize="small")
    fig.autofmt_xdate()
    fig.tight_layout()
    fig.savefig(out_dir / "utilisation.png", dpi=100)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(10, 4))
    names = [f"{r.deployment.namespace}/{r.deployment.name}" for r in report.rows] + ["fleet"]
    figs = [r.figures[days] for r in report.rows] + [report.total[days]]
    xs = range(len(names))
    ax.bar([x - 0.2 for x in xs], [f.usd_per_million_tokens or 0.0 for f in figs], 0.4, label="self-hosted $/M")
    ax.bar([x + 0.2 for x in xs], [f.reference_usd_per_million_tokens or 0.0 for f in figs], 0.4,
           label="managed API $/M (same traffic)")
    ax.set_xticks(list(xs), names, rotation=20, ha="right", fontsize="small")
    ax.set_ylabel("USD per million output tokens")
    ax.set_title(f"Cost per million tokens against the reference, last {days:g} days")
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(out_dir / "cost.png", dpi=100)
    plt.close(fig)
    return ("utilisation.png", "cost.png")


def as_document(report: FleetReport, found: list[Candidate] | None = None) -> dict[str, Any]:
    """The figures as a JSON-serialisable document (``-o json``/``yaml``)."""
    def figs(f: Figures) -> dict[str, Any]:
        return {"gpuHours": f.gpu_hours, "busyShare": f.busy_share, "kvUse": f.kv_use,
                "outputTokens": f.output_tokens, "inputTokens": f.input_tokens, "goodputTokens": f.goodput_tokens,
                "goodputPerGpuHour": f.goodput_per_gpu_hour, "costUsd": f.cost_usd,
                "usdPerMillionTokens": f.usd_per_million_tokens, "referenceUsd": f.reference_usd,
                "referenceUsdPerMillionTokens": f.reference_usd_per_million_tokens, "verdict": f.verdict}
    return {
        "now": report.now,
        "deployments": [{"namespace": r.deployment.namespace, "name": r.deployment.name,
                         "windows": {f"{d:g}d": figs(r.figures[d]) for d in report.windows_days}}
                        for r in report.rows],
        "fleet": {f"{d:g}d": figs(report.total[d]) for d in report.windows_days},
        "consolidation": None if found is None else [
            {"deployments": list(c.deployments), "model": c.model, "separateReplicas": c.separate_replicas,
             "mergedReplicas": c.merged_replicas, "floors": c.floors, "gpusSaved": c.gpus_saved,
             "usdPerMonthSaved": c.usd_per_month_saved, "floorsExceedPeak": c.floors_exceed_peak,
             "mergedPeakRps": c.merged_peak_rps} for c in found],
    }


def main(args: argparse.Namespace) -> int:
    """Fetch, compute, write; 2 on a usage error or an unreachable source."""
    try:
        fleet_price = parse_price(args.reference_price) if args.reference_price else None
        prices = parse_prices(args.price)
    except ValueError as exc:
        print(f"llmscale report: {exc}", file=sys.stderr)
        return 2
    now = args.now if args.now is not None else dt.datetime.now(dt.UTC).timestamp()
    try:
        deployments, specs, warnings = fetch_deployments(args.kubeconfig, frozenset(args.namespace))
        recorded = fetch_recorded(args.prometheus_url, now=now, days=max(args.days), step_s=args.step)
    except Exception as exc:  # a source unreadable, whatever the way, is the user's to fix
        print(f"llmscale report: cannot read the API server or Prometheus: {exc}", file=sys.stderr)
        return 2
    for line in warnings:
        print(f"llmscale report: {line}", file=sys.stderr)
    report = build_report(deployments, recorded, prices, fleet_price, now=now, step_s=args.step,
                          windows_days=tuple(args.days))
    found = None
    if not args.no_consolidation:
        start = now - max(args.days) * DAY_S
        traffic = {who: traffic_of(rec, start=start, now=now) for who, rec in recorded.items()}
        try:
            found = candidates(deployments, specs, traffic)
        except ValueError as exc:
            print(f"llmscale report: no consolidation figures: {exc}", file=sys.stderr)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    if importlib.util.find_spec("matplotlib") is None:
        # The operator's image leaves the plot extra out: the figures stand without their pictures.
        print("llmscale report: no plots: they need matplotlib: pip install 'llmscale[plot]'", file=sys.stderr)
        plots: tuple[str, ...] = ()
    else:
        plots = plot(report, args.out_dir)
    markdown = render_markdown(report, plots, found)
    (args.out_dir / "report.md").write_text(markdown)
    (args.out_dir / "report.html").write_text(render_html(report, plots, found))
    if args.output == "markdown":
        sys.stdout.write(markdown)
    else:
        write_document(as_document(report, found), args.output)
    return 0
