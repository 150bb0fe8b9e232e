"""The typed signal snapshot: what the policy sees of a pool at one instant.

Pure module, shared by the operator (built from Prometheus by :mod:`llmscale.signals`) and the
simulator (built from simulated replicas), so scaling behaves the same in both.

"Unknown is not zero": a signal that could not be read (no series, NaN, query failed, every pod
stalled) is ``None``, and :attr:`SignalSnapshot.unknown` names why. Every field added after the
first six signals is optional, so a caller that builds a snapshot by keyword (the simulator) keeps
working.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType

__all__ = ["CarriedRead", "PodSignals", "RateWindow", "SignalSnapshot", "WorkloadMix"]


#: The ``unknown`` of every snapshot that has none (read-only, so sharing it is safe).
_NO_UNKNOWN: Mapping[str, str] = MappingProxyType({})


def _finite_or_none(obj: object, names: tuple[str, ...]) -> None:
    """Replace NaN and ±Inf in the named float fields of a frozen dataclass with ``None``."""
    for name in names:
        value = getattr(obj, name)
        if value is not None and not math.isfinite(value):
            object.__setattr__(obj, name, None)


@dataclass(frozen=True, slots=True)
class WorkloadMix:
    """The live workload mix of one pool, from the engines' own counters and histograms.

    Every rate is summed over the pool's contributing pods (live, reporting, not stalled) over the
    rate window; every field is ``None`` when unknown (see ``SignalSnapshot.unknown``).

    Attributes:
        request_rate: finished requests per second (``rate(vllm:request_success_total)``).
        prompt_tokens_rate: prompt (prefill) tokens per second (``vllm:prompt_tokens_total``).
        generation_tokens_rate: generated tokens per second (``vllm:generation_tokens_total``).
        prompt_tokens_mean: mean prompt tokens per request, from the histogram's ``_sum``/``_count``
            rates (``vllm:request_prompt_tokens``); where the histogram is absent, the prompt-token
            rate over the request rate.
        prompt_tokens_p90: 90th percentile of prompt tokens per request (``histogram_quantile``;
            over every pod of the pool in the window, including pods gone within it).
        prompt_tokens_p95: 95th percentile of prompt tokens per request.
        generation_tokens_mean: mean generated tokens per request (``vllm:request_generation_tokens``).
        generation_tokens_p90: 90th percentile of generated tokens per request.
        generation_tokens_p95: 95th percentile of generated tokens per request.
        prefix_cache_hit_rate: fraction of prompt tokens served from the prefix cache, 0–1
            (``rate(hits) / rate(queries)`` summed over pods; the engine's own gauge where the
            counters are absent).
    """

    request_rate: float | None = None
    prompt_tokens_rate: float | None = None
    generation_tokens_rate: float | None = None
    prompt_tokens_mean: float | None = None
    prompt_tokens_p90: float | None = None
    prompt_tokens_p95: float | None = None
    generation_tokens_mean: float | None = None
    generation_tokens_p90: float | None = None
    generation_tokens_p95: float | None = None
    prefix_cache_hit_rate: float | None = None

    def __post_init__(self) -> None:
        _finite_or_none(self, tuple(f.name for f in fields(self)))


@dataclass(frozen=True, slots=True)
class PodSignals:
    """The signals of one pod of a pool (after collapsing copies inside the pod).

    Attributes:
        pod: the pod's name (the ``pod`` label).
        queue_depth: requests waiting, summed over the pod's independent schedulers (requests).
        running_requests: requests running (requests).
        kv_cache_utilization: fraction of the KV cache in use, mean over the schedulers (0–1).
        preemption_rate: preemptions per second (0 when the counter is absent on this pod).
        generation_tokens_rate: generated tokens per second (the stall check's progress counter).
        newest_sample_s: timestamp of the pod's newest queue-depth sample, seconds since the epoch.
        stalled: running requests stayed above 0 for the whole rate window while the
            generation-token counter did not move: the engine hangs but keeps serving ``/metrics``.
            A stalled pod's signals are excluded from the pool's aggregates.
        served_request_rate / failed_request_rate: requests per second the engine answered
            (``finished_reason`` stop or length) and failed (``error``); ``None``: not read.
        failing: Ready-looking but failing every request fast: at least
            :data:`~llmscale.signals.assemble.FAILING_MIN_REQUESTS` failed over the window and none
            answered. Excluded from the aggregates like a stalled pod: it is not idle capacity.
        asleep: the engine sleeps (vLLM's sleep mode: weights offloaded or discarded, put there by
            someone else's ``/sleep``): neither idle capacity nor a failure, so its signals are
            excluded from the pool's aggregates and it is not counted as reporting.
        prefix_cache_hits_rate: prompt tokens per second served from the pod's prefix cache
            (what its cache is worth: the deletion cost's tiebreak); ``None``: not read.
    """

    pod: str
    queue_depth: float | None = None
    running_requests: float | None = None
    kv_cache_utilization: float | None = None
    preemption_rate: float | None = None
    generation_tokens_rate: float | None = None
    newest_sample_s: float | None = None
    stalled: bool = False
    served_request_rate: float | None = None
    failed_request_rate: float | None = None
    failing: bool = False
    asleep: bool = False
    prefix_cache_hits_rate: float | None = None

    def __post_init__(self) -> None:
        _finite_or_none(
            self,
            (
                "queue_depth",
                "running_requests",
                "kv_cache_utilization",
                "preemption_rate",
                "generation_tokens_rate",
                "newest_sample_s",
                "served_request_rate",
                "failed_request_rate",
                "prefix_cache_hits_rate",
            ),
        )


@dataclass(frozen=True, slots=True)
class RateWindow:
    """The range of every ``rate()`` in a read, and whether the data can fill it.

    Attributes:
        window_s: the range, seconds.
        promql: the same range as the PromQL duration sent (``60s``).
        scrape_interval_s: the scrape interval the window was checked against, seconds, or
            ``None`` when it could not be found.
        interval_source: where the interval came from: ``set`` (the reader's settings),
            ``targets`` (Prometheus ``/api/v1/targets`` ``scrapeInterval``), ``samples`` (sample
            spacing of the queue-depth series) or ``unknown``.
        auto: whether the window was derived from the interval (``max(minimum, 4 × interval)``)
            rather than set.
        too_short: the window holds fewer than two samples of a series, so ``rate()`` and the
            latency quantiles cannot be computed: every rate-based signal is unknown.
        problem: why the window is too short, or shorter than the four scrape intervals
            Prometheus advises (rates noisy); ``None`` when it is fine. The operator shows it in
            the ``RateWindowFits`` condition.
    """

    window_s: float
    promql: str
    scrape_interval_s: float | None = None
    interval_source: str = "unknown"
    auto: bool = False
    too_short: bool = False
    problem: str | None = None


@dataclass(frozen=True, slots=True)
class CarriedRead:
    """Marks a snapshot published again through a read that failed for its pool.

    The operator's fleet reader (:mod:`llmscale.controller.signals.carry`) publishes a pool's last good
    snapshot, unchanged (its ``observed_at`` included, so its age stays honest), in place of a
    read that failed for a short, bounded time; this says which failure it stands in for.

    Attributes:
        failure: why the newest read failed for the pool (the whole read, or which query groups).
        failed_reads: consecutive failed reads the snapshot was carried through (1 for the first).
        failed_at: the newest failed read's time, seconds since the epoch.
    """

    failure: str
    failed_reads: int
    failed_at: float


@dataclass(frozen=True, slots=True)
class SignalSnapshot:
    """Leading and lagging signals of one pool of one LLMDeployment.

    Attributes:
        observed_at: time of the data in seconds since the Unix epoch (the newest sample's
            timestamp among the pods that contribute, not the time of the query); the policy
            compares it with ``now`` to judge staleness.
        queue_depth: requests waiting in the engines, summed over the contributing pods
            (``vllm:num_requests_waiting``); ``None`` when unknown.
        running_requests: requests running (in the batch), summed (``vllm:num_requests_running``).
        kv_cache_utilization: mean fraction of the paged KV cache in use over the pods, 0–1
            (``vllm:kv_cache_usage_perc``).
        preemption_rate: preemptions per second summed over the pods
            (``rate(vllm:num_preemptions_total[window])``).
        ttft_p95_s: TTFT at the reader's quantile (p95 by default) over the window, seconds (lagging).
        itl_p95_s: ITL at the reader's quantile over the window, seconds (lagging).
        replicas_reporting: pods that contribute: live (in the API server's set, when one was
            given), reporting the queue-depth gauge, and not stalled.
        error: why the snapshot is incomplete (query failure, rejected values), or ``None``.
        workload: the workload mix (request and token rates, prompt/generation lengths, prefix
            cache hit rate); all ``None`` when not read.
        pods: per-pod signals of the pool's live reporting pods, sorted by pod name.
        failing_pods: pods whose engine fails every request fast (see :attr:`PodSignals.failing`),
            sorted; left out of every aggregate, judged failed by the operator.
        stalled_pods: pods whose engine hangs (see :attr:`PodSignals.stalled`), sorted; their
            signals are left out of every aggregate.
        sleeping_pods: pods whose engine sleeps (see :attr:`PodSignals.asleep`), sorted; their
            signals are left out of every aggregate and of ``replicas_reporting``.
        ignored_pods: pods whose series Prometheus still returns but that are not in the API
            server's set (deleted; series linger up to the 5 min lookback), sorted.
        silent_pods: live pods (from the API server) with no series, sorted.
        bridged_pods: live pods whose newest scrapes failed slowly (timed out) and whose gauges are
            their last samples, at most four scrape intervals old
            (:func:`llmscale.signals.answer.bridge_missed_scrapes`), sorted; they contribute.
        absent_counters: counters absent on some contributing pod and read there as 0
            (``sglang:num_retracted_requests_total`` before the first retraction), sorted.
        unknown: for each signal that is ``None``, why; keyed by field name (``queue_depth``,
            ``ttft_p95_s``, ``prompt_tokens_p95`` ...). Read-only.
        window: the rate window of the read and whether it is long enough; ``None`` when the
            snapshot was not built from Prometheus.
        quiet: fields that are unknown only because the window saw nothing to measure (a latency
            or token-count quantile over a window without requests), sorted. Not a fault: an idle
            pool has no TTFT. ``unknown`` still names them.
        wake_demand: the value of the LLMDeployment's wake query (``spec.scaling.wake.query``), the
            demand in front of the pool that exists at zero replicas (e.g. requests a gateway
            holds), in the query's own unit; ``None`` when no wake query is set or it could not be
            read (``unknown["wake_demand"]`` says why).
        failed_queries: the query groups (keys of ``llmscale.signals.queries.GROUPS``: ``pods``,
            ``rates``, ``absent``, ``ttft``, ``itl``, ``prompt``, ``generation``) that gave no usable
            answer in this read, sorted; the fields they feed are unknown because of a failure, not
            an absence.
        carried: set when this is the pool's last good snapshot published again through a failed
            read (:class:`CarriedRead`); ``None`` for a snapshot of the read just made.
        itl_tokens_per_sample: generated tokens per ITL observation over the window; from
            :data:`~llmscale.signals.assemble.SPECULATIVE_TOKENS_PER_SAMPLE` up (speculative decoding:
            one sample a step of several tokens) ``itl_p95_s`` is the per-step p95 divided by it, a
            per-token figure the SLO is judged on. ``None``: unknown.
        clock_skew_s: Prometheus's evaluation time of the answer less the operator's clock at the
            read, seconds (positive: Prometheus ahead; includes the query's round trip). Past
            :data:`~llmscale.signals.assemble.CLOCK_SKEW_S` ``observed_at`` is already moved into
            the operator's clock (ages are Prometheus's) and the skew is reported. ``None``: no answer.
        warnings: the ``warnings`` Prometheus (Thanos, Mimir with partial response) sent with its
            answers, e.g. ``store B unavailable``: the sums may miss pods (a partial answer).
        ttft_buckets_s / itl_buckets_s: the finite bucket bounds of the histograms ``ttft_p95_s``
            and ``itl_p95_s`` were interpolated in, seconds (the ITL's divided by
            ``itl_tokens_per_sample`` when ``itl_p95_s`` is); ``None``: unknown. A p95 inside the
            bucket holding an SLO target is inside the interpolation error
            (:func:`llmscale.signals.buckets.judge_quantile`).
    """

    observed_at: float
    queue_depth: float | None = None
    running_requests: float | None = None
    kv_cache_utilization: float | None = None
    preemption_rate: float | None = None
    ttft_p95_s: float | None = None
    itl_p95_s: float | None = None
    replicas_reporting: int = 0
    error: str | None = None
    workload: WorkloadMix = WorkloadMix()
    pods: tuple[PodSignals, ...] = ()
    stalled_pods: tuple[str, ...] = ()
    sleeping_pods: tuple[str, ...] = ()
    ignored_pods: tuple[str, ...] = ()
    silent_pods: tuple[str, ...] = ()
    bridged_pods: tuple[str, ...] = ()
    absent_counters: tuple[str, ...] = ()
    unknown: Mapping[str, str] = field(default_factory=dict)
    window: RateWindow | None = None
    quiet: tuple[str, ...] = ()
    wake_demand: float | None = None
    failed_queries: tuple[str, ...] = ()
    carried: CarriedRead | None = None
    warnings: tuple[str, ...] = ()
    itl_tokens_per_sample: float | None = None
    clock_skew_s: float | None = None
    ttft_buckets_s: tuple[float, ...] | None = None
    itl_buckets_s: tuple[float, ...] | None = None
    failing_pods: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        # NaN and ±Inf are not measurements: store them as unknown so no caller can mistake them.
        _finite_or_none(
            self,
            (
                "queue_depth",
                "running_requests",
                "kv_cache_utilization",
                "preemption_rate",
                "ttft_p95_s",
                "itl_p95_s",
                "wake_demand",
            ),
        )
        # One shared empty view for the common case: a history of snapshots without unknowns
        # then holds no dict per entry.
        object.__setattr__(self, "unknown", MappingProxyType(dict(self.unknown)) if self.unknown else _NO_UNKNOWN)

    def age(self, now: float) -> float:
        """Return the snapshot's age at ``now`` (seconds since the epoch), in seconds."""
        return now - self.observed_at

    @property
    def leading_known(self) -> bool:
        """Whether all three leading signals (queue, KV cache, preemptions) are known."""
        return (
            self.queue_depth is not None
            and self.kv_cache_utilization is not None
            and self.preemption_rate is not None
        )
