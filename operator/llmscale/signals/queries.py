"""PromQL for llmscale's signals: the only place queries are written. Pure (strings only).

A tick reads every pool with a constant number of instant queries per engine profile
(:func:`fleet_queries`, the groups of :data:`GROUPS`), aggregated per pool and pod and split in
Python (:mod:`llmscale.signals.answer`); what each query reads and why: ``docs/signals.md``, "The
fleet-wide read". The non-obvious rules: each signal's expression is stamped with a constant
``llmscale_signal`` label before the ``or`` join (``or`` drops a right-hand series whose label set
is already on the left); a profile's copy labels are collapsed with ``max without`` before the
per-pod sum (a TP 8 pod counts its queue once); every histogram is read ``<native> or <classic>``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field

from llmscale.durations import parse_duration as _parse_duration
from llmscale.signals.profiles.base import MetricProfile

__all__ = [
    "DEFAULT_LABELS",
    "GROUPS",
    "GROUP_OF",
    "METRIC_LABEL",
    "MINUTE_FIT_GROUP",
    "MINUTE_GROUP",
    "POOL_GROUPS",
    "SIGNAL_LABEL",
    "PoolRequest",
    "PoolTarget",
    "SelectorLabels",
    "fleet_queries",
    "format_duration",
    "interval_probe_query",
    "minute_query",
    "parse_duration",
    "past_rate_query",
    "promql_duration",
    "samples_query",
    "selector",
    "signal_queries",
    "wake_expression",
    "wake_query",
]

#: The label that tells the signals of one answer apart.
SIGNAL_LABEL = "llmscale_signal"

#: Signals aggregated per pod, by query group.
POD_GROUP = (
    "queue_depth",
    "running_requests",
    "kv_cache_utilization",
    "newest_sample_s",
    "samples_in_window",
    "running_min",
    "asleep",
    "last_scrape_s",
)
RATE_GROUP = (
    "preemption_rate",
    "request_rate",
    "prompt_tokens_rate",
    "generation_tokens_rate",
    "prefix_cache_hits_rate",
    "prefix_cache_queries_rate",
    "prefix_cache_hit_rate_gauge",
    "prompt_tokens_sum_rate",
    "prompt_tokens_count_rate",
    "generation_tokens_sum_rate",
    "generation_tokens_count_rate",
    "served_request_rate",
    "failed_request_rate",
)
#: Which counters and histograms each reporting pod lacks (one series per pod and missing metric).
ABSENT_GROUP = ("absent",)
#: Signals aggregated per pool, one query group per histogram: a quantile reads every pod's
#: buckets through ``rate()``, the costliest part of a read, so each histogram is a query of its own
#: that Prometheus can evaluate on its own core, and a slow or failed one costs only its signals.
POOL_GROUPS: dict[str, tuple[str, ...]] = {
    "ttft": ("ttft_p95_s", "ttft_observations_rate"),
    "itl": ("itl_p95_s", "itl_observations_rate"),
    "prompt": ("prompt_tokens_p90", "prompt_tokens_p95"),
    "generation": ("generation_tokens_p90", "generation_tokens_p95"),
}
#: Every signal aggregated per pool.
POOL_GROUP = tuple(signal for signals in POOL_GROUPS.values() for signal in signals)
#: Query groups: one instant query each, per profile and tick (a group the profile has no metric
#: for is not sent).
GROUPS: dict[str, tuple[str, ...]] = {
    "pods": POD_GROUP,
    "rates": RATE_GROUP,
    "absent": ABSENT_GROUP,
    **POOL_GROUPS,
}
#: The query group of each fleet signal.
GROUP_OF: dict[str, str] = {signal: group for group, signals in GROUPS.items() for signal in signals}
#: Signals of the per-minute SLO judgement, per pool, over exactly the minute that ends at the
#: query's evaluation time (:func:`minute_query`; sent once a minute, not every read).
MINUTE_GROUP = (
    "minute_ttft_p95_s",
    "minute_itl_p95_s",
    "minute_ttft_observations",
    "minute_generation_tokens",
    "minute_queue_min",
)
#: Signals of the live calibration (:mod:`llmscale.policy.livefit`), per pool, over the same minute
#: and in the same query as :data:`MINUTE_GROUP` (no query of their own): the sums and counts of the
#: histograms a fit of the model's efficiencies stands on, and the mean running batch per engine.
MINUTE_FIT_GROUP = (
    "minute_running_mean",
    "minute_itl_sum_s",
    "minute_itl_count",
    "minute_prefill_sum_s",
    "minute_prefill_count",
    "minute_prompt_tokens_sum",
    "minute_prompt_tokens_count",
    "minute_output_tokens_sum",
    "minute_output_tokens_count",
)
#: Every group a read can parse: the fleet groups and the minute group (judgement and calibration).
ALL_GROUPS: dict[str, tuple[str, ...]] = {**GROUPS, "minute": MINUTE_GROUP + MINUTE_FIT_GROUP}
#: Signals answered per pod (the rest per pool).
PER_POD = frozenset(POD_GROUP + RATE_GROUP + ABSENT_GROUP)
#: The label naming the missing metric on an ``absent`` series.
METRIC_LABEL = "llmscale_metric"
# $namespace and $name in a wake query: the LLMDeployment's own (PromQL has no "$").
_WAKE_VARIABLE = re.compile(r"\$(namespace|name)\b")

_LABEL_PATTERN = r"^[a-zA-Z_][a-zA-Z0-9_]*$"


def parse_duration(text: str) -> float:
    """Return the duration ``text`` in seconds: llmscale's one grammar (``90s``, ``1.5m``,
    ``1h30m``, ``500ms``, ``1w``; :func:`llmscale.durations.parse_duration`), never zero.

    Raises:
        ValueError: ``text`` is not a duration, or is zero.
    """
    return _parse_duration(text)


def promql_duration(text: str) -> str:
    """Return the duration ``text`` as PromQL writes it: unchanged when it already is one
    (``1m30s``), else in seconds or milliseconds (``1.5m`` -> ``90s``, ``90`` -> ``90s``).

    Raises:
        ValueError: ``text`` is not a duration, or is zero.
    """
    seconds = parse_duration(text)
    return text if re.fullmatch(r"(?:\d+(?:ms|y|w|d|h|m|s))+", text) else format_duration(seconds)


def format_duration(seconds: float) -> str:
    """Return ``seconds`` as a PromQL duration, in whole seconds when exact, else milliseconds.

    Raises:
        ValueError: ``seconds`` is not positive.
    """
    if not seconds > 0:
        raise ValueError(f"duration {seconds} s is not positive")
    ms = round(seconds * 1000)
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{max(ms, 1)}ms"


class SelectorLabels(BaseModel):
    """Names of the Prometheus labels that identify an LLMDeployment's pool and pod.

    llmscale puts ``llmscale.dev/deployment`` and ``llmscale.dev/pool`` on every pod (docs/operator.md).
    With Kubernetes service discovery, the usual relabelling
    (``action: labelmap, regex: __meta_kubernetes_pod_label_(.+)``) turns them into
    ``llmscale_dev_deployment`` and ``llmscale_dev_pool`` (Prometheus replaces each character
    that is not ``[a-zA-Z0-9_]`` with ``_``), ``__meta_kubernetes_namespace`` is commonly
    relabelled to ``namespace`` and ``__meta_kubernetes_pod_name`` to ``pod`` (the Prometheus
    Operator's PodMonitor adds ``namespace`` and ``pod`` itself). Those are the defaults; set these
    fields when your scrape configuration names them differently.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    namespace: str = Field(
        default="namespace", pattern=_LABEL_PATTERN, description="Label carrying the pod's namespace."
    )
    deployment: str = Field(
        default="llmscale_dev_deployment",
        pattern=_LABEL_PATTERN,
        description="Label carrying the LLMDeployment's name.",
    )
    pool: str = Field(
        default="llmscale_dev_pool",
        pattern=_LABEL_PATTERN,
        description="Label carrying the pool (interactive or batch).",
    )
    pod: str = Field(
        default="pod",
        pattern=_LABEL_PATTERN,
        description=(
            "Label carrying the pod's name. Needed to split a pool per pod: to ignore deleted pods, "
            "leave out stalled ones and count replicas from the API server's pods."
        ),
    )

    @property
    def pool_labels(self) -> tuple[str, str, str]:
        """``(namespace, deployment, pool)`` label names: the per-pool grouping."""
        return (self.namespace, self.deployment, self.pool)


#: The default label names (a module-level instance, shared as an argument default).
DEFAULT_LABELS = SelectorLabels()


@dataclass(frozen=True, slots=True)
class PoolTarget:
    """One pool of one LLMDeployment: what a snapshot describes.

    Attributes:
        namespace: the LLMDeployment's namespace.
        deployment: the LLMDeployment's name.
        pool: ``interactive`` or ``batch``.
        pods: for a workload llmscale did not create (``spec.scaleTargetRef``), whose pods carry
            none of llmscale's labels: the names of its pods (found by the selector its ``/scale``
            reports). The queries then select ``namespace`` and ``pod`` instead of the deployment
            and pool labels, and stamp those labels on the answer. ``None``: select by llmscale's
            labels. Not part of equality or hashing, so the target still keys the answers.
    """

    namespace: str
    deployment: str
    pool: str
    pods: tuple[str, ...] | None = field(default=None, compare=False, hash=False)

    def __str__(self) -> str:
        return f"{self.namespace}/{self.deployment} pool {self.pool}"


@dataclass(frozen=True, slots=True)
class PoolRequest:
    """One pool to read.

    Attributes:
        target: the pool.
        profile: its engine's metric names (``spec.engine.profile()``).
        pods: names of the pool's pods in the API server (the operator's pod index), or ``None``
            to take every pod Prometheus has series for. With pods, series of any other pod are
            ignored and replicas are counted from these pods.
        wake_query: the LLMDeployment's ``spec.scaling.wake.query`` (``$namespace`` and ``$name``
            not yet replaced), or ``None``; its value becomes ``SignalSnapshot.wake_demand``.
    """

    target: PoolTarget
    profile: MetricProfile
    pods: frozenset[str] | None = None
    wake_query: str | None = None


def _quote(value: str) -> str:
    """Return ``value`` as a PromQL double-quoted string literal (backslash and quote escaped)."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def selector(
    scope: PoolTarget | None, labels: SelectorLabels = DEFAULT_LABELS, namespaces: tuple[str, ...] = ()
) -> str:
    """Return the label matchers (without braces) selecting one pool, or every llmscale pool.

    ``scope`` ``None`` gives the fleet-wide matchers ``deployment!="", pool!=""`` (every series of
    every LLMDeployment this Prometheus scrapes), narrowed to ``namespaces`` when given (an operator
    shard's: ``namespace=~"^(?:a|b)$"``, so a shard's reads evaluate only its own pools' series).
    """
    if scope is None:
        fleet = f'{labels.deployment}!="", {labels.pool}!=""'
        if not namespaces:
            return fleet
        # Namespace names are DNS labels ([a-z0-9-]): nothing to escape in an RE2 alternation.
        names = "|".join(sorted(set(namespaces)))
        return f"{labels.namespace}=~{_quote(f'^(?:{names})$')}, {fleet}"
    if scope.pods is not None:
        # Pod names are DNS subdomains: only dots need escaping in an RE2 alternation.
        names = "|".join(sorted(name.replace(".", "\\.") for name in scope.pods))
        return f"{labels.namespace}={_quote(scope.namespace)}, {labels.pod}=~{_quote(f'^(?:{names})$')}"
    return (
        f"{labels.namespace}={_quote(scope.namespace)}, "
        f"{labels.deployment}={_quote(scope.deployment)}, "
        f"{labels.pool}={_quote(scope.pool)}"
    )


def absence_checked(profile: MetricProfile) -> dict[str, tuple[str, ...]]:
    """The metrics whose absence per pod the ``absent`` signal reports, and the series names that
    count as present for each (a histogram is present as a native series or as ``_bucket``)."""
    out: dict[str, tuple[str, ...]] = {name: (name,) for name in profile.counters.values()}
    for hist in profile.histograms.values():
        out[hist] = (hist, f"{hist}_bucket")
    return out


@dataclass(frozen=True, slots=True)
class _Expr:
    """The pieces every query of this module is written with: the selector, the copy labels to
    collapse, the two groupings and the range. One place, so the live signals, the minute judge
    and the seasonal range query select and deduplicate the same series the same way."""

    sel: str
    copies: tuple[str, ...]
    pool_by: str
    pod_by: str
    window: str

    @classmethod
    def of(
        cls,
        profile: MetricProfile,
        labels: SelectorLabels,
        window: str,
        scope: PoolTarget | None = None,
        copy_labels: tuple[str, ...] = (),
        namespaces: tuple[str, ...] = (),
    ) -> _Expr:
        pool_by = ", ".join(labels.pool_labels)
        return cls(
            sel=selector(scope, labels, namespaces),
            copies=tuple(dict.fromkeys((*profile.copy_labels, *copy_labels))),
            pool_by=pool_by,
            pod_by=f"{pool_by}, {labels.pod}",
            window=window,
        )

    def m(self, name: str) -> str:
        """``name{selector}``."""
        return f"{name}{{{self.sel}}}"

    def dedup(self, expr: str) -> str:
        """``expr`` with the copies of one series (an HA Prometheus pair, a federated copy) collapsed."""
        return f"max without ({', '.join(self.copies)}) ({expr})" if self.copies else expr

    def hist(self, fn: str, hist: str, classic: str, by: str) -> str:
        """``fn(sum by (by) (rate(hist[window])))`` in native form, else the classic series."""
        return f"{fn}(sum by ({by}) (rate({self.m(hist)}[{self.window}]))) or " + (
            f"sum by ({by}) (rate({self.m(hist + classic)}[{self.window}]))"
        )

    def increase_of(self, part: str, hist: str) -> str:
        """The pool's ``increase`` of a histogram's ``sum`` or ``count`` over the window (native form
        first: ``histogram_sum``/``histogram_count``; else the classic ``_sum``/``_count`` series)."""
        by = self.pool_by
        return (f"histogram_{part}(sum by ({by}) (increase({self.m(hist)}[{self.window}]))) or "
                f"sum by ({by}) (increase({self.m(f'{hist}_{part}')}[{self.window}]))")

    def quantile_of(self, q: float, hist: str) -> str:
        """The pool's ``q`` quantile of a histogram over the window (native form first)."""
        native = f"histogram_quantile({q:g}, sum by ({self.pool_by}) (rate({self.m(hist)}[{self.window}])))"
        classic = (
            f"histogram_quantile({q:g}, sum by ({self.pool_by}, le) (rate({self.m(hist + '_bucket')}[{self.window}])))"
        )
        return f"{native} or {classic}"


def signal_queries(
    profile: MetricProfile,
    labels: SelectorLabels = DEFAULT_LABELS,
    window: str = "1m",
    quantile: float = 0.95,
    scope: PoolTarget | None = None,
    copy_labels: tuple[str, ...] = (),
    namespaces: tuple[str, ...] = (),
) -> dict[str, str]:
    """Return one PromQL expression per signal of :data:`GROUPS`, keyed by signal.

    Args:
        profile: the engine's metric names.
        labels: the selector label names.
        window: range of every ``rate()`` and ``*_over_time()``, a PromQL duration; keep it at
            least four scrape intervals (:mod:`llmscale.signals.window` derives it).
        quantile: latency quantile, 0–1 (0.95: the SLO is stated at p95).
        scope: one pool to select, or ``None`` for every pool (fleet-wide).
        copy_labels: labels telling copies apart besides the profile's own (e.g.
            ``prometheus_replica`` of an HA pair queried without deduplication).
        namespaces: with ``scope`` ``None``, the namespaces read (an operator shard's); empty:
            every namespace (:func:`selector`).

    Returns:
        ``{signal: expression}``. Per-pod signals (:data:`PER_POD`) are aggregated
        ``by (namespace, deployment, pool, pod)`` (``absent`` also labelled with the missing
        metric's name in :data:`METRIC_LABEL`); per-pool ones
        ``by (namespace, deployment, pool)``. A signal the profile has no metric for has no entry.

    Raises:
        ValueError: ``window`` is not a duration or ``quantile`` is outside 0–1.
    """
    window = promql_duration(window)
    if not 0.0 <= quantile <= 1.0:
        raise ValueError(f"quantile {quantile} is outside 0-1")
    e = _Expr.of(profile, labels, window, scope, copy_labels, namespaces)
    m, w, pool_by, pod_by = e.m, e.window, e.pool_by, e.pod_by

    def per_pod(agg: str, expr: str) -> str:
        return f"{agg} by ({pod_by}) ({e.dedup(expr)})"

    queue = per_pod("sum", m(profile.waiting))
    if profile.waiting_by_reason is not None:
        # Capacity waits only where the engine tells them apart (vLLM 0.32 does): a deferred wait
        # (LoRA budget, KV transfer) is not fixed by a replica. A pod without the family: all waits.
        capacity = f'{profile.waiting_by_reason}{{{e.sel}, reason="capacity"}}'
        queue = f"{per_pod('sum', capacity)} or {queue}"
    q: dict[str, str] = {
        "queue_depth": queue,
        "running_requests": per_pod("sum", m(profile.running)),
        "kv_cache_utilization": per_pod("avg", m(profile.kv_cache_usage)),
        # timestamp() is the sample's own time, which stays old when scraping stops without a
        # staleness marker (up to the 5 min lookback); an instant query stamps the evaluation time.
        "newest_sample_s": f"max by ({pod_by}) (timestamp({m(profile.waiting)}))",
        "samples_in_window": f"max by ({pod_by}) (count_over_time({m(profile.waiting)}[{w}]))",
        "running_min": per_pod("sum", f"min_over_time({m(profile.running)}[{w}])"),
        # Prometheus's own series of each target's last scrape: a failed one that took under half
        # a second was refused (the engine is down), not slow (llmscale.signals.answer's bridge).
        "last_scrape_s": f"max by ({pod_by}) ({m('scrape_duration_seconds')})",
    }
    if profile.sleep_state is not None:
        # 1 when some engine core of the pod is in a state other than awake (each state is its own
        # series, 1 for the current one): the pod sleeps.
        q["asleep"] = f'max by ({pod_by}) ({profile.sleep_state}{{{e.sel}, sleep_state!="awake"}})'

    # Absence, not presence, is what is sent back: the common answer (everything exported) is
    # then no series at all, instead of one per pod and metric.
    reporting = f"count by ({pod_by}) ({m(profile.waiting)})"
    absent = []
    for name, forms in absence_checked(profile).items():
        exported = " or ".join(f"count by ({pod_by}) ({m(form)})" for form in forms)
        absent.append(
            f'label_replace({reporting} unless on ({pod_by}) ({exported}), "{METRIC_LABEL}", "{name}", "", "")'
        )
    q["absent"] = " or ".join(absent)
    # rate() treats any decrease of a counter as a reset (the process restarted) and continues
    # from the new value, so a restarted engine never reads as a negative rate.
    for signal, counter in profile.counters.items():
        q[signal] = per_pod("sum", f"rate({m(counter)}[{w}])")
    if profile.requests_total is not None and profile.finished_reason_label is not None:
        # Requests answered and requests failed in the engine, per pod: a Ready engine that fails
        # every request fast (errors rising, stop/length flat) is not idle capacity.
        for signal, reasons in (("served_request_rate", profile.served_reasons),
                                ("failed_request_rate", profile.failed_reasons)):
            if reasons:
                match = _quote(f"^(?:{'|'.join(reasons)})$")
                series = f"{profile.requests_total}{{{e.sel}, {profile.finished_reason_label}=~{match}}}"
                q[signal] = per_pod("sum", f"rate({series}[{w}])")
    if profile.prefix_cache_hit_rate:
        q["prefix_cache_hit_rate_gauge"] = per_pod("avg", m(profile.prefix_cache_hit_rate))
    hists = profile.histograms
    for key in ("prompt", "generation"):
        if key in hists:
            q[f"{key}_tokens_sum_rate"] = e.hist("histogram_sum", hists[key], "_sum", pod_by)
            q[f"{key}_tokens_count_rate"] = e.hist("histogram_count", hists[key], "_count", pod_by)
            q[f"{key}_tokens_p90"] = e.quantile_of(0.9, hists[key])
            q[f"{key}_tokens_p95"] = e.quantile_of(0.95, hists[key])
    q["ttft_p95_s"] = e.quantile_of(quantile, profile.ttft_histogram)
    q["itl_p95_s"] = e.quantile_of(quantile, profile.itl_histogram)
    q["ttft_observations_rate"] = e.hist("histogram_count", profile.ttft_histogram, "_count", pool_by)
    q["itl_observations_rate"] = e.hist("histogram_count", profile.itl_histogram, "_count", pool_by)
    return q


def fleet_queries(
    profile: MetricProfile,
    labels: SelectorLabels = DEFAULT_LABELS,
    window: str = "1m",
    quantile: float = 0.95,
    scope: PoolTarget | None = None,
    copy_labels: tuple[str, ...] = (),
    namespaces: tuple[str, ...] = (),
) -> dict[str, str]:
    """Return the instant queries of one read, one per group of :data:`GROUPS` that the profile
    has a metric for, keyed by group.

    Each query answers its group's signals at once, every series labelled :data:`SIGNAL_LABEL`
    with its signal's name. Arguments and errors as in :func:`signal_queries`.
    """
    per_signal = signal_queries(profile, labels, window, quantile, scope, copy_labels, namespaces)

    def stamp(expr: str) -> str:
        # Pods selected by name carry no deployment or pool label: stamp the pool's on the answer
        # (after aggregation, so every grouping above is unchanged) so that it is read as the pool's.
        if scope is None or scope.pods is None:
            return expr
        expr = f'label_replace({expr}, "{labels.deployment}", {_quote(scope.deployment)}, "", "")'
        return f'label_replace({expr}, "{labels.pool}", {_quote(scope.pool)}, "", "")'

    out: dict[str, str] = {}
    for group, signals in GROUPS.items():
        parts = [
            stamp(f'label_replace({per_signal[name]}, "{SIGNAL_LABEL}", "{name}", "", "")')
            for name in signals
            if name in per_signal
        ]
        if parts:  # a profile without the histogram sends no query for it
            out[group] = "\n  or ".join(parts)
    return out


def interval_probe_query(
    profile: MetricProfile,
    labels: SelectorLabels = DEFAULT_LABELS,
    scope: PoolTarget | None = None,
    probe: str = "10m",
    namespaces: tuple[str, ...] = (),
) -> str:
    """Return the query that finds the queue-depth series with the most samples in ``probe``.

    The first step of reading the scrape interval from the sample spacing, where Prometheus has
    no ``/api/v1/targets`` (Thanos, Mimir, Cortex): the answer's labels name one series, whose
    samples :func:`samples_query` then fetches.

    Raises:
        ValueError: ``probe`` is not a duration.
    """
    probe = promql_duration(probe)
    return f"topk(1, count_over_time({profile.waiting}{{{selector(scope, labels, namespaces)}}}[{probe}]))"


def samples_query(metric: str, series_labels: Mapping[str, str], probe: str = "10m") -> str:
    """Return the range-vector query of one series' raw samples over ``probe`` (a matrix answer).

    Args:
        metric: the metric name.
        series_labels: every label of the series (as :func:`interval_probe_query` answers them).
        probe: the range, a PromQL duration.

    Raises:
        ValueError: ``probe`` is not a duration.
    """
    probe = promql_duration(probe)
    matchers = ", ".join(f"{k}={_quote(v)}" for k, v in sorted(series_labels.items()) if k != "__name__")
    return f"{metric}{{{matchers}}}[{probe}]"


def wake_expression(query: str, namespace: str, name: str) -> str:
    """Return one LLMDeployment's wake query with ``$namespace`` and ``$name`` replaced by its own.

    So one manifest serves every namespace it is applied to, e.g.
    ``sum(gateway_pending_requests{namespace="$namespace", service="$name"})``. Both are DNS
    labels (letters, digits, ``-``), safe inside a PromQL string literal.
    """
    values = {"namespace": namespace, "name": name}
    return _WAKE_VARIABLE.sub(lambda m: values[m.group(1)], query)


def wake_query(expression: str) -> str:
    """Return the instant query that reads one LLMDeployment's wake query.

    Args:
        expression: its wake query after :func:`wake_expression`, checked by
            :func:`llmscale.signals.scope.scoped_query`; it must give an instant vector.

    Returns:
        ``sum(<expression>)``: one series, or none when the expression had none. Never joined
        with another LLMDeployment's query (issue 22: a joined query let one tenant's text reach
        into another's answer). The expression goes on lines of its own, so a ``#`` comment in it
        cannot swallow the closing parenthesis.
    """
    return f"sum(\n{expression}\n)"


#: The range of the per-minute judgement: one minute, as the simulator scores it (docs/simulate.md).
MINUTE = "1m"


def minute_query(
    profile: MetricProfile,
    labels: SelectorLabels = DEFAULT_LABELS,
    quantile: float = 0.95,
    copy_labels: tuple[str, ...] = (),
    namespaces: tuple[str, ...] = (),
) -> str:
    """Return the one instant query that judges the minute ending at its evaluation time, per pool.

    Sent once a minute with ``time=<the minute's end>``; each series is stamped with its signal in
    :data:`SIGNAL_LABEL`, aggregated ``by (namespace, deployment, pool)``:

    - ``minute_ttft_p95_s`` / ``minute_itl_p95_s``: ``histogram_quantile(quantile, sum by (pool, le)
      (rate(<hist>_bucket[1m])))`` (native form first) — exactly the per-minute p95 the simulator
      scores (docs/simulate.md, "One SLO definition") from the histograms the signals read;
    - ``minute_ttft_observations``: first tokens observed in the minute (``increase`` of the TTFT
      histogram's count), to tell "no request" from "no histogram";
    - ``minute_generation_tokens``: tokens generated in the minute (``increase`` of the generation
      token counter), the numerator of goodput and of cost per million tokens;
    - ``minute_queue_min``: the sum over pods of each pod's lowest queue depth in the minute: above
      0, some pod's queue never emptied for a whole minute ("silence is not success": a minute with
      no first token while requests waited all through it fails);
    - the live calibration's figures (:data:`MINUTE_FIT_GROUP`): ``minute_running_mean``, the mean
      over pods of each pod's mean running batch in the minute (``avg_over_time``), and the
      ``increase`` of the ``_sum`` and ``_count`` of the ITL, prefill-time, prompt-token and
      generated-token histograms (each only where the profile names the histogram).

    Raises:
        ValueError: ``quantile`` is outside 0–1.
    """
    if not 0.0 <= quantile <= 1.0:
        raise ValueError(f"quantile {quantile} is outside 0-1")
    e = _Expr.of(profile, labels, MINUTE, None, copy_labels, namespaces)
    m, w, pool_by, pod_by, dedup = e.m, e.window, e.pool_by, e.pod_by, e.dedup

    parts = {
        "minute_ttft_p95_s": e.quantile_of(quantile, profile.ttft_histogram),
        "minute_itl_p95_s": e.quantile_of(quantile, profile.itl_histogram),
        "minute_ttft_observations": (
            f"histogram_count(sum by ({pool_by}) (increase({m(profile.ttft_histogram)}[{w}]))) or "
            f"sum by ({pool_by}) (increase({m(profile.ttft_histogram + '_count')}[{w}]))"
        ),
        "minute_queue_min": (
            f"sum by ({pool_by}) (sum by ({pod_by}) ({dedup(f'min_over_time({m(profile.waiting)}[{w}])')}))"
        ),
    }
    if profile.generation_tokens_total is not None:
        parts["minute_generation_tokens"] = (
            f"sum by ({pool_by}) ({dedup(f'increase({m(profile.generation_tokens_total)}[{w}])')})"
        )
    parts["minute_running_mean"] = (
        f"avg by ({pool_by}) (sum by ({pod_by}) ({dedup(f'avg_over_time({m(profile.running)}[{w}])')}))"
    )
    fitted = {"itl": profile.itl_histogram, "prefill": profile.prefill_time_histogram,
              "prompt_tokens": profile.prompt_tokens_histogram, "output_tokens": profile.generation_tokens_histogram}
    for key, hist in fitted.items():
        if hist is not None:
            unit = "_s" if key in ("itl", "prefill") else ""
            parts[f"minute_{key}_sum{unit}"] = e.increase_of("sum", hist)
            parts[f"minute_{key}_count"] = e.increase_of("count", hist)
    return "\n  or ".join(
        f'label_replace({expr}, "{SIGNAL_LABEL}", "{name}", "", "")' for name, expr in parts.items()
    )


def past_rate_query(
    profile: MetricProfile,
    labels: SelectorLabels = DEFAULT_LABELS,
    window: str = "1m",
    copy_labels: tuple[str, ...] = (),
    namespaces: tuple[str, ...] = (),
) -> str | None:
    """Return the range query of every pool's finished-request rate, for the seasonal forecast.

    ``sum by (namespace, deployment, pool) (max without (<copies>) (rate(<requests counter>{deployment!="",
    pool!=""}[window])))``: the same counter and rate as the live ``request_rate`` (so a day-old rate
    and today's compare like for like), summed over the pool's pods. Sent as ``query_range`` over a
    stretch a day or a week back (no ``offset`` modifier: the answer's timestamps are the past
    instants themselves, as :class:`llmscale.policy.types.RateSeries` wants them). Pods are not
    filtered by name: yesterday's pods are gone.

    Args:
        profile: the engine's metric names (``requests_total``).
        labels: the selector label names.
        window: range of the ``rate()``, a PromQL duration (the read's rate window).
        copy_labels: labels telling copies apart besides the profile's own.

    Returns:
        The query, or ``None`` when the profile has no finished-request counter.

    Raises:
        ValueError: ``window`` is not a duration.
    """
    window = promql_duration(window)
    if profile.requests_total is None:
        return None
    e = _Expr.of(profile, labels, window, None, copy_labels, namespaces)
    return f"sum by ({e.pool_by}) ({e.dedup(f'rate({e.m(profile.requests_total)}[{window}])')})"
