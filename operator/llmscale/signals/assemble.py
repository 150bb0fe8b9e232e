"""Build one pool's :class:`SignalSnapshot` from the fleet answer: pods, copies, absences, stalls.

Pure module: no I/O, no clock (``now`` is an argument).

Rules, in order (each has a test in ``tests/signals``):

1. **Pods from the API server.** When the caller passes the pool's live pods (the operator's pod
   index), series of any other pod are ignored (``ignored_pods``): a deleted pod's gauges stay
   visible for up to the 5 min lookback when Prometheus missed its staleness markers (e.g. it
   restarted). Replica counts and per-pod figures come from those pods, never from series.
2. **Reporting.** A pod reports when it exports the profile's queue-depth gauge (or, its newest
   scrapes timed out, the reader bridged its last one: :func:`llmscale.signals.answer.bridge_missed_scrapes`).
3. **Absent counters are 0.** A counter missing on a reporting pod reads 0 for that pod
   (``absent_counters``): engines create some counters at their first event. A counter present
   with no rate (fewer than two samples in the window) is unknown.
4. **Stalls.** A reporting pod whose running requests stayed above 0 at every sample of the
   window while its generation-token counter did not move is stalled (``stalled_pods``): the
   engine hangs and keeps serving ``/metrics`` with frozen, busy gauges. Checked only when the
   pod's samples span half the window (a pod that just started is not judged), and only when the
   scrape interval is known.
5. **Failing.** A reporting pod that failed at least :data:`FAILING_MIN_REQUESTS` requests over
   the window (``finished_reason="error"``) and answered none (``stop``/``length`` flat) is
   failing (``failing_pods``): Ready, idle-looking, and useless — not idle capacity.
6. **Sleeping engines.** A pod whose engine reports a sleep state other than ``awake`` (vLLM's
   ``engine_sleep_state``) is neither idle capacity nor a failure (``sleeping_pods``): it is left
   out of the aggregates and of ``replicas_reporting`` (its empty queue must not read as room),
   and it is never judged stalled or failing. When every reporting pod sleeps, every gauge is
   unknown with that reason: replicas hold, nothing is scaled down as idle nor replaced as failed.
7. **Aggregates** are over the *contributing* pods (reporting, not stalled, not failing, awake): gauges are summed
   (KV cache averaged) and unknown if any contributing pod's value is unknown (a missing pod would
   understate the queue); rates are summed over the pods whose rate is known and unknown only if
   none is. Latency and token-count quantiles are Prometheus's, per pool.
7. **Every unknown is named** in ``SignalSnapshot.unknown``; a quantile unknown only because the
   window saw no request is also listed in ``SignalSnapshot.quiet`` (an idle pool has no TTFT,
   and that is not a missing signal).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable
from dataclasses import dataclass

from llmscale.signals.answer import UNATTRIBUTED, FleetAnswer
from llmscale.signals.buckets import scaled
from llmscale.signals.profiles.base import MetricProfile
from llmscale.signals.queries import DEFAULT_LABELS, GROUP_OF, PoolTarget, SelectorLabels
from llmscale.signals.snapshot import PodSignals, RateWindow, SignalSnapshot, WorkloadMix

__all__ = ["assemble"]

#: Fraction of the window a pod's samples must span before the pod can be judged stalled. Half:
#: at the usual 60 s window, 30 s busy without a single generated token, several times the
#: longest prefill; and a missed scrape or a lagging sample does not hide a stall for a tick.
STALL_COVERAGE = 0.5

#: Requests a pod must fail over the window, none answered, to be judged failing: one or two errors
#: in a quiet window are a bad request or two; three in a row with nothing served is a pattern.
FAILING_MIN_REQUESTS = 3.0

_RATE_SIGNALS = (
    "preemption_rate",
    "request_rate",
    "prompt_tokens_rate",
    "generation_tokens_rate",
    "prefix_cache_hits_rate",
    "prefix_cache_queries_rate",
)


@dataclass
class _Pool:
    """Working state of one pool's assembly."""

    profile: MetricProfile
    answer: FleetAnswer
    window: RateWindow
    pool: PoolTarget
    unknown: dict[str, str]
    quiet: set[str]


def _names(pods: Iterable[str]) -> str:
    return ", ".join(sorted(pods)) or "none"


def _group_failure(answer: FleetAnswer, group: str) -> str | None:
    why = answer.failed.get(group)
    return f"{group} query failed: {why}" if why else None


def assemble(
    pool: PoolTarget,
    profile: MetricProfile,
    answer: FleetAnswer,
    window: RateWindow,
    now: float,
    labels: SelectorLabels = DEFAULT_LABELS,
    live_pods: Collection[str] | None = None,
) -> SignalSnapshot:
    """Return the snapshot of ``pool`` from the parsed fleet answer.

    Args:
        pool: the pool.
        profile: the engine's metric names (which counters and histograms exist at all).
        answer: the parsed answers of every query group.
        window: the read's rate window, already checked (``too_short`` empties every rate).
        now: the caller's time, seconds since the epoch: ``observed_at`` when no answer carries
            a timestamp.
        labels: the selector label names (for messages).
        live_pods: the names of the pool's pods in the API server, or ``None`` to take every pod
            Prometheus has series for (no deleted-pod filtering).

    Returns:
        The snapshot; rules in this module's docstring.
    """
    st = _Pool(profile, answer, window, pool, {}, set())
    rows = answer.pods.get(pool, {})
    lacking = answer.absent.get(pool, {})
    problems = [*answer.problems.get(UNATTRIBUTED, []), *answer.problems.get(pool, [])]
    seen = set(rows) | set(lacking)
    if "" in seen:
        problems.append(
            f"series without the {labels.pod!r} label: relabel __meta_kubernetes_pod_name to "
            f"{labels.pod!r} (docs/signals.md) or set the pod label name"
        )
    if live_pods is None:
        considered = seen
        ignored: set[str] = set()
    else:
        live = set(live_pods)
        considered = seen & live
        ignored = seen - live
    reporting = sorted(p for p in considered if "queue_depth" in rows.get(p, {}))
    silent = sorted(set(live_pods) - set(reporting)) if live_pods is not None else []

    absent: set[str] = set()  # counters read as 0 somewhere
    pods: list[PodSignals] = []
    pod_rates: dict[str, dict[str, float | None]] = {}
    for name in reporting:
        row = rows.get(name, {})
        rates = {s: _pod_rate(st, s, row, lacking.get(name, set()), absent) for s in _RATE_SIGNALS}
        pod_rates[name] = rates
        pods.append(
            PodSignals(
                pod=name,
                queue_depth=row.get("queue_depth"),
                running_requests=row.get("running_requests"),
                kv_cache_utilization=row.get("kv_cache_utilization"),
                preemption_rate=rates["preemption_rate"],
                generation_tokens_rate=rates["generation_tokens_rate"],
                newest_sample_s=row.get("newest_sample_s"),
                stalled=_stalled(st, row, rates["generation_tokens_rate"]) and not (row.get("asleep") or 0.0) > 0.0,
                served_request_rate=row.get("served_request_rate"),
                failed_request_rate=row.get("failed_request_rate"),
                failing=_failing(st, row) and not (row.get("asleep") or 0.0) > 0.0,
                asleep=(row.get("asleep") or 0.0) > 0.0,
                prefix_cache_hits_rate=rates["prefix_cache_hits_rate"],
            )
        )
    stalled = [p.pod for p in pods if p.stalled]
    sleeping = [p.pod for p in pods if p.asleep]
    failing = [p.pod for p in pods if p.failing and not p.stalled]
    contributing = [p for p in pods if not p.stalled and not p.failing and not p.asleep]
    no_pod = _no_pod_reason(st, labels, reporting, stalled, sleeping, ignored, live_pods, failing)

    def gauge(signal: str, mean: bool = False) -> float | None:
        if no_pod:
            st.unknown[signal] = no_pod
            return None
        values = [getattr(p, signal) for p in contributing]
        missing = [p.pod for p, v in zip(contributing, values, strict=True) if v is None]
        if missing:
            st.unknown[signal] = f"unknown on pod {_names(missing)} (see the error)"
            return None
        total = math.fsum(v for v in values if v is not None)
        return total / len(values) if mean else total

    queue = gauge("queue_depth")
    running = gauge("running_requests")
    kv = gauge("kv_cache_utilization", mean=True)
    sums = {s: _rate_sum(st, s, contributing, pod_rates, no_pod) for s in _RATE_SIGNALS}
    workload = _workload(st, sums, contributing, rows, reporting, lacking, no_pod)
    ttft = _latency(st, "ttft_p95_s", "ttft", reporting, lacking)
    itl = _latency(st, "itl_p95_s", "itl", reporting, lacking)
    itl_tokens = _tokens_per_itl_sample(st, sums)
    itl_bounds = profile.itl_buckets_s
    if itl is not None and itl_tokens is not None and itl_tokens >= SPECULATIVE_TOKENS_PER_SAMPLE:
        itl = itl / itl_tokens
        itl_bounds = scaled(itl_bounds, itl_tokens)

    newest = [p.newest_sample_s for p in (contributing or pods) if p.newest_sample_s is not None]
    observed_at = max(newest) if newest else (answer.evaluated_at or now)
    # Ages in Prometheus's own clock: the answer's evaluation time is Prometheus's "now". A skew
    # past CLOCK_SKEW_S (the operator's node 120 s ahead: every snapshot read 130 s old and the pool
    # held for ever; 120 s behind: a pod frozen 100 s ago read fresh) moves observed_at into the
    # operator's clock, so that the policy's now - observed_at is the age Prometheus sees.
    skew = answer.evaluated_at - now if answer.evaluated_at is not None else None
    if skew is not None and abs(skew) > CLOCK_SKEW_S:
        observed_at -= skew
    by_why: dict[str, list[str]] = {}
    for group, why in answer.failed.items():
        by_why.setdefault(why, []).append(group)
    failures = [
        f"{', '.join(groups)} {'query' if len(groups) == 1 else 'queries'} failed: {why}"
        for why, groups in by_why.items()
    ]
    error = "; ".join(dict.fromkeys([*failures, *problems])) or None
    return SignalSnapshot(
        observed_at=observed_at,
        queue_depth=queue,
        running_requests=running,
        kv_cache_utilization=kv,
        preemption_rate=sums["preemption_rate"],
        ttft_p95_s=ttft,
        itl_p95_s=itl,
        itl_tokens_per_sample=itl_tokens,
        clock_skew_s=skew,
        replicas_reporting=len(contributing),
        error=error,
        workload=workload,
        pods=tuple(pods),
        stalled_pods=tuple(stalled),
        failing_pods=tuple(failing),
        sleeping_pods=tuple(sleeping),
        ignored_pods=tuple(sorted(ignored)),
        silent_pods=tuple(silent),
        bridged_pods=tuple(sorted(set(answer.bridged.get(pool, ())) & set(reporting))),
        absent_counters=tuple(sorted(absent)),
        unknown=st.unknown,
        window=window,
        quiet=tuple(sorted(st.quiet)),
        failed_queries=tuple(sorted(answer.failed)),
        warnings=tuple(dict.fromkeys(answer.warnings)),
        ttft_buckets_s=profile.ttft_buckets_s,
        itl_buckets_s=itl_bounds,
    )


def _no_pod_reason(
    st: _Pool,
    labels: SelectorLabels,
    reporting: list[str],
    stalled: list[str],
    sleeping: list[str],
    ignored: set[str],
    live_pods: Collection[str] | None,
    failing: list[str] | None = None,
) -> str | None:
    """Why no pod contributes, or ``None`` when some pod does."""
    failing = failing or []
    out = set(stalled) | set(sleeping) | set(failing)
    if len(out) < len(reporting):
        return None
    if failed := _group_failure(st.answer, "pods"):
        return failed
    if reporting and failing and not sleeping:
        return f"every reporting pod is stalled or fails every request: {_names([*stalled, *failing])}"
    if reporting and not sleeping:
        return f"every reporting pod is stalled: {_names(stalled)}"
    if reporting:
        hung = f"; stalled: {_names(stalled)}" if stalled else ""
        return f"every reporting pod sleeps or is stalled: asleep {_names(sleeping)}{hung}"
    gone = f"; series only of pods not in the API server: {_names(ignored)}" if ignored else ""
    live = f" (pods in the API server: {_names(live_pods)})" if live_pods is not None else ""
    unlabelled = f"; series without the {labels.pod!r} label are ignored" if "" in ignored else ""
    return f"no pod of {st.pool} exports {st.profile.waiting}{live}{gone}{unlabelled}"


def _pod_rate(
    st: _Pool, signal: str, row: dict[str, float | None], lacks: set[str], absent: set[str]
) -> float | None:
    """One pod's rate of a counter: the answer's, 0 where the counter is absent, else unknown."""
    counter = st.profile.counters.get(signal)
    if counter is None or st.window.too_short or "rates" in st.answer.failed:
        return None
    if signal in row:
        return row[signal]
    if counter in lacks and "absent" not in st.answer.failed:
        absent.add(counter)
        return 0.0
    return None  # present, but fewer than two samples in the window: no rate yet


def _stalled(st: _Pool, row: dict[str, float | None], generation_rate: float | None) -> bool:
    """Whether a reporting pod hangs: running > 0 at every sample of the window, no token generated."""
    interval = st.window.scrape_interval_s
    running_min = row.get("running_min")
    samples = row.get("samples_in_window")
    if interval is None or st.window.too_short or running_min is None or samples is None:
        return False
    # n samples span (n - 1) intervals.
    needed = math.ceil(STALL_COVERAGE * st.window.window_s / interval) + 1
    return running_min > 0 and generation_rate == 0.0 and samples >= needed


def _failing(st: _Pool, row: dict[str, float | None]) -> bool:
    """Whether a reporting pod fails every request: at least :data:`FAILING_MIN_REQUESTS` failed
    over the window and none answered (both rates known)."""
    served, failed = row.get("served_request_rate"), row.get("failed_request_rate")
    if served is None or failed is None or st.window.too_short:
        return False
    return served == 0.0 and failed * st.window.window_s >= FAILING_MIN_REQUESTS


def _rate_sum(
    st: _Pool,
    signal: str,
    contributing: list[PodSignals],
    pod_rates: dict[str, dict[str, float | None]],
    no_pod: str | None,
) -> float | None:
    """Sum of one rate over the contributing pods whose rate is known."""
    counter = st.profile.counters.get(signal)
    if counter is None:
        st.unknown[signal] = f"profile {st.profile.name} has no counter for it"
        return None
    if no_pod:
        st.unknown[signal] = no_pod
        return None
    if st.window.too_short and st.window.problem:
        st.unknown[signal] = st.window.problem
        return None
    if failed := _group_failure(st.answer, "rates"):
        st.unknown[signal] = failed
        return None
    known = [v for p in contributing if (v := pod_rates[p.pod][signal]) is not None]
    if not known:
        st.unknown[signal] = (
            f"{counter} has fewer than two samples in the {st.window.promql} window on every pod"
        )
        return None
    return math.fsum(known)


def _hist_present(st: _Pool, key: str, pods: Iterable[str], lacking: dict[str, set[str]]) -> bool:
    """Whether some reporting pod exports the histogram (native or classic); ``True`` when unknown."""
    name = st.profile.histograms.get(key)
    if name is None:
        return False
    return "absent" in st.answer.failed or any(name not in lacking.get(p, set()) for p in pods)


def _pool_value(
    st: _Pool,
    field_name: str,
    signal: str,
    key: str,
    reporting: Collection[str],
    lacking: dict[str, set[str]],
    empty: str,
) -> float | None:
    """A per-pool quantile, with the reason when it is unknown."""
    hist = st.profile.histograms.get(key)
    if hist is None:
        st.unknown[field_name] = f"profile {st.profile.name} has no histogram for it"
        return None
    if st.window.too_short and st.window.problem:
        st.unknown[field_name] = st.window.problem
        return None
    if failed := _group_failure(st.answer, GROUP_OF[signal]):
        st.unknown[field_name] = failed
        return None
    value = st.answer.pools.get(st.pool, {}).get(signal)
    if value is not None:
        return value
    if not _hist_present(st, key, reporting, lacking):
        st.unknown[field_name] = (
            f"no {hist} histogram: neither native series nor classic {hist}_bucket series on any "
            "reporting pod (is the engine exporting it, and does the scrape keep either form?)"
        )
    else:
        st.unknown[field_name] = empty
        st.quiet.add(field_name)  # nothing to measure, not a fault
    return None


def _latency(
    st: _Pool, field_name: str, key: str, reporting: Collection[str], lacking: dict[str, set[str]]
) -> float | None:
    """A latency quantile of the pool, or ``None`` with the reason."""
    empty = f"no request observed in the {st.window.promql} window (a quantile of nothing)"
    return _pool_value(st, field_name, field_name, key, reporting, lacking, empty)


#: Seconds between Prometheus's evaluation time and the operator's clock beyond which the snapshot's
#: time is moved into the operator's clock and the skew reported: a query's own round trip (up to a
#: few seconds on a busy Prometheus) stays below it.
CLOCK_SKEW_S = 5.0

#: Generated tokens per ITL observation from which a sample is taken to cover several tokens
#: (speculative decoding: vLLM observes the inter-token latency once per engine step, and a step of
#: EAGLE with 3 speculative tokens commits ~2.8); below it (1 token a step, with the rates' noise)
#: the p95 is per token already.
SPECULATIVE_TOKENS_PER_SAMPLE = 1.2


def _tokens_per_itl_sample(st: _Pool, sums: dict[str, float | None]) -> float | None:
    """Tokens one ITL observation covers: ``(generation tokens − first tokens) / ITL observations``,
    each a rate over the window; a request's first token is its TTFT sample, not an ITL one (the
    TTFT observations count them; the finished requests stand in when those are unknown). ``None``
    when any is unknown or nothing was generated."""
    pool = st.answer.pools.get(st.pool, {})
    obs = pool.get("itl_observations_rate")
    gen = sums.get("generation_tokens_rate")
    req = pool.get("ttft_observations_rate")
    req = req if req is not None else sums.get("request_rate")
    if obs is None or gen is None or req is None or obs <= 0 or gen - req <= 0:
        return None
    return (gen - req) / obs


def _ratio(num: float | None, den: float | None) -> float | None:
    if num is None or den is None or den <= 0:
        return None
    return num / den


def _workload(
    st: _Pool,
    sums: dict[str, float | None],
    contributing: list[PodSignals],
    rows: dict[str, dict[str, float | None]],
    reporting: Collection[str],
    lacking: dict[str, set[str]],
    no_pod: str | None,
) -> WorkloadMix:
    """The pool's workload mix: rates, mean and tail lengths, prefix-cache hit rate."""
    pods = [p.pod for p in contributing]

    def pod_sum(signal: str) -> float | None:
        values = [v for p in pods if (v := rows.get(p, {}).get(signal)) is not None]
        return math.fsum(values) if values else None

    def mean(key: str) -> float | None:
        field_name = f"{key}_tokens_mean"
        if no_pod:
            st.unknown[field_name] = no_pod
            return None
        if st.window.too_short and st.window.problem:
            st.unknown[field_name] = st.window.problem
            return None
        total, count = pod_sum(f"{key}_tokens_sum_rate"), pod_sum(f"{key}_tokens_count_rate")
        if count is not None:
            if count > 0:
                return _ratio(total, count)
            st.unknown[field_name] = f"no request finished in the {st.window.promql} window"
            return None
        # No histogram: the token counter's rate over the request rate.
        value = _ratio(sums[f"{key}_tokens_rate"], sums["request_rate"])
        if value is None:
            st.unknown[field_name] = (
                f"no {key}-token histogram, and no request finished in the {st.window.promql} window"
            )
        return value

    def tail(key: str, q: str) -> float | None:
        field_name = f"{key}_tokens_{q}"
        return _pool_value(
            st,
            field_name,
            field_name,
            key,
            reporting,
            lacking,
            f"no request finished in the {st.window.promql} window",
        )

    hit_rate = _ratio(sums["prefix_cache_hits_rate"], sums["prefix_cache_queries_rate"])
    if hit_rate is None:
        gauges = [v for p in pods if (v := rows.get(p, {}).get("prefix_cache_hit_rate_gauge")) is not None]
        queries = st.profile.prefix_cache_queries_total
        queried = any(queries not in lacking.get(p, set()) for p in pods) if queries else False
        if gauges and not queried:
            hit_rate = math.fsum(gauges) / len(gauges)
        elif no_pod:
            st.unknown["prefix_cache_hit_rate"] = no_pod
        elif sums["prefix_cache_queries_rate"] == 0.0:
            st.unknown["prefix_cache_hit_rate"] = f"no prefix-cache lookup in the {st.window.promql} window"
        else:
            st.unknown["prefix_cache_hit_rate"] = st.unknown.get(
                "prefix_cache_queries_rate",
                st.unknown.get("prefix_cache_hits_rate", "no prefix-cache counters"),
            )
    for signal in ("prefix_cache_hits_rate", "prefix_cache_queries_rate"):
        st.unknown.pop(signal, None)  # inputs of prefix_cache_hit_rate, not snapshot fields
    return WorkloadMix(
        request_rate=sums["request_rate"],
        prompt_tokens_rate=sums["prompt_tokens_rate"],
        generation_tokens_rate=sums["generation_tokens_rate"],
        prompt_tokens_mean=mean("prompt"),
        prompt_tokens_p90=tail("prompt", "p90"),
        prompt_tokens_p95=tail("prompt", "p95"),
        generation_tokens_mean=mean("generation"),
        generation_tokens_p90=tail("generation", "p90"),
        generation_tokens_p95=tail("generation", "p95"),
        prefix_cache_hit_rate=hit_rate,
    )
