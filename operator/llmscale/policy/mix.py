"""The live workload, read from the signal history: its mix, its arrival rate, its burstiness.

The performance model (:mod:`llmscale.model.capacity`) needs what each request asks of a replica and
how many arrive. The engines count both (:class:`~llmscale.signals.snapshot.WorkloadMix`: request
and token rates, the prompt and output length histograms, prefix-cache hits); this module turns the
recent snapshots into the model's inputs. Pure: snapshots in, numbers out.

- :func:`update_mix` and :func:`live_shape`: the request-weighted mix of the last half hour
  (:data:`MIX_MEMORY_S`, running sums kept in the policy memory) as log-normal lengths; unknown
  (no length means) → the Azure trace's lengths, said so.
- :func:`arrival_rate`: requests/s arriving = finished + the growth of the requests in the engines
  (conservation: what arrives either finishes or is still inside).
- :func:`update_burstiness`: the running estimate of how much a minute's requests and prompt tokens
  vary beyond Poisson, from the differences of consecutive rate windows.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from llmscale.model.capacity import DEFAULT_SHAPE, Burstiness, LengthDistribution, WorkloadShape
from llmscale.policy.types import MixSums
from llmscale.signals.snapshot import SignalSnapshot

__all__ = [
    "BURSTINESS_MEMORY_SAMPLES",
    "BURSTINESS_PRIOR_SAMPLES",
    "BURSTINESS_SAMPLE_MAX",
    "FALL_SHARE",
    "FALL_TAIL",
    "MIX_MEMORY_S",
    "RATE_FLOOR_WINDOWS",
    "RATE_WINDOW_S",
    "Arrivals",
    "arrival_rate",
    "burstiness_of",
    "count_tail",
    "live_shape",
    "steady_arrival_rate",
    "update_burstiness",
    "update_mix",
]

#: Seconds the live mix is averaged over (the time constant of its exponential weighting): half an
#: hour. The tail of the prompt lengths (their p95, which sets how many chunk steps are slow) needs
#: thousands of requests to settle; with a 5-minute window the replicas Mooncake's mix needs swung
#: between 6 and 9 at a steady 8.5 requests/s. A new client's mix still shows within minutes, and a
#: mix no snapshot has confirmed for this long is unknown again.
MIX_MEMORY_S = 1800.0

#: The rate window when a snapshot does not say its own (``SignalSnapshot.window``): the signals
#: reader's default, Prometheus' usual ``rate(…[1m])``.
RATE_WINDOW_S = 60.0

#: The burstiness estimate averages this many minute pairs before it forgets old ones (an
#: exponentially weighted mean): 60, an hour of traffic.
BURSTINESS_MEMORY_SAMPLES = 60

#: Largest single pair's figure, as a multiple of the estimate: 8 (a chi-square variable with one
#: degree of freedom, what a Poisson pair's figure is, exceeds 8× its mean in 0.5 % of pairs).
BURSTINESS_SAMPLE_MAX = 8.0

#: The Poisson prior (1) weighs as this many minute pairs: 4, so that the first few minutes of a new
#: pool (one of them a warm-up) move the estimate by at most a fifth each.
BURSTINESS_PRIOR_SAMPLES = 4

# A value this large is not a measurement of an LLM pool (a parser let a garbage float through):
# the arithmetic is clamped here so that it never overflows.
_HUGE = 1e12


def _finite(value: float | None, *, positive: bool = False) -> float | None:
    if value is None or not math.isfinite(value) or value < 0 or (positive and value <= 0):
        return None
    return min(value, _HUGE)


def _window(snap: SignalSnapshot) -> float:
    w = snap.window.window_s if snap.window is not None else RATE_WINDOW_S
    return w if math.isfinite(w) and w > 0 else RATE_WINDOW_S


def _p95(mean: float, p95: float | None, p90: float | None, buckets: Sequence[float] | None) -> tuple[float | None, bool]:
    """The p95 to fit (a p90 stands in through the σ it fits); and whether it came from a p90."""
    q95, q90 = _finite(p95, positive=True), _finite(p90, positive=True)
    if q95 is not None:
        return q95, False
    if q90 is not None:
        return LengthDistribution.fit(mean, p90=q90, buckets=buckets).quantile(0.95), True
    return None, False


def update_mix(
    previous: MixSums | None, history: Sequence[SignalSnapshot], buckets: Sequence[float] | None = None
) -> MixSums | None:
    """Fold the snapshots newer than ``previous`` into the live mix's running sums.

    Each snapshot that knows the prompt and output means counts with the requests of its rate
    window as weight (a quiet minute says less about the mix than a busy one; 1 when the rate is
    unknown), and every sum is discounted by ``exp(−Δt / MIX_MEMORY_S)`` between snapshots: the mix
    of the last half hour, the recent minutes counting most. The p95s (else the p90s, converted
    through the σ they fit) and the prefix-cache hit rate (weighted by prompt tokens) are summed
    with their own weights, so one snapshot without them does not dilute them.

    Args:
        previous: the sums from the memory, or ``None``.
        history: snapshots, oldest first.
        buckets: the engine's length-histogram bounds (for a p90 standing in for a p95).

    Returns:
        The new sums; ``previous`` when no snapshot is newer or none knows the means.
    """
    sums = previous
    for snap in history:
        if sums is not None and snap.observed_at <= sums.observed_at:
            continue
        mix = snap.workload
        pm = _finite(mix.prompt_tokens_mean, positive=True)
        gm = _finite(mix.generation_tokens_mean, positive=True)
        if pm is None or gm is None:
            continue
        pm, gm = max(pm, 1.0), max(gm, 1.0)  # a request has at least one token of each
        rate = _finite(mix.request_rate, positive=True)
        w = rate * _window(snap) if rate is not None else 1.0
        pq, p_from_p90 = _p95(pm, mix.prompt_tokens_p95, mix.prompt_tokens_p90, buckets)
        gq, g_from_p90 = _p95(gm, mix.generation_tokens_p95, mix.generation_tokens_p90, buckets)
        hit = _finite(mix.prefix_cache_hit_rate)
        hit_w = (_finite(mix.prompt_tokens_rate, positive=True) or pm * (rate or 1.0)) * _window(snap)
        decay = math.exp(-(snap.observed_at - sums.observed_at) / MIX_MEMORY_S) if sums is not None else 0.0
        old = sums if sums is not None else MixSums()
        sums = MixSums(
            weight=old.weight * decay + w,
            prompt_mean=old.prompt_mean * decay + w * pm,
            prompt_p95_weight=old.prompt_p95_weight * decay + (w if pq is not None else 0.0),
            prompt_p95=old.prompt_p95 * decay + (w * pq if pq is not None else 0.0),
            output_mean=old.output_mean * decay + w * gm,
            output_p95_weight=old.output_p95_weight * decay + (w if gq is not None else 0.0),
            output_p95=old.output_p95 * decay + (w * gq if gq is not None else 0.0),
            hit_weight=old.hit_weight * decay + (hit_w if hit is not None else 0.0),
            hit=old.hit * decay + (hit_w * min(hit, 1.0) if hit is not None else 0.0),
            from_p90=(old.from_p90 and decay > 0) or p_from_p90 or g_from_p90,
            observed_at=snap.observed_at,
        )
    return sums


def live_shape(
    sums: MixSums | None, now: float, buckets: Sequence[float] | None = None
) -> tuple[WorkloadShape, bool]:
    """Return the workload shape the running sums describe, and whether it is live.

    Each length is fitted as a log-normal to its weighted mean and p95
    (:meth:`LengthDistribution.fit`, read through the engine's histogram ``buckets`` when known). A
    length with a mean but no tail quantile keeps the default shape's spread (σ), said in the source.

    Args:
        sums: the live mix's running sums (:func:`update_mix`), or ``None``.
        now: seconds since the epoch.
        buckets: the finite upper bounds of the engine's length histograms (vLLM's 1-2-5 buckets up
            to ``--max-model-len``), or ``None`` to read the quantiles as exact.

    Returns:
        ``(shape, live)``: ``live`` is ``False`` (and the shape :data:`DEFAULT_SHAPE`) when no
        snapshot of the last :data:`MIX_MEMORY_S` knew the prompt and output means.
    """
    if sums is None or sums.weight <= 0 or not now - sums.observed_at <= MIX_MEMORY_S:
        return DEFAULT_SHAPE, False
    # A request has at least one token; a mean under it is a rounding of garbage, not a mix.
    pm, gm = max(sums.prompt_mean / sums.weight, 1.0), max(sums.output_mean / sums.weight, 1.0)
    if not (math.isfinite(pm) and math.isfinite(gm)):
        return DEFAULT_SHAPE, False
    notes = []
    if sums.prompt_p95_weight > 0:
        prompt = LengthDistribution.fit(pm, p95=sums.prompt_p95 / sums.prompt_p95_weight, buckets=buckets)
    else:
        prompt = LengthDistribution(pm * math.exp(-DEFAULT_SHAPE.prompt.sigma**2 / 2), DEFAULT_SHAPE.prompt.sigma)
        notes.append("prompt spread of the Azure trace (no prompt p95)")
    if sums.output_p95_weight > 0:
        output = LengthDistribution.fit(gm, p95=sums.output_p95 / sums.output_p95_weight, buckets=buckets)
    else:
        output = LengthDistribution(gm * math.exp(-DEFAULT_SHAPE.output.sigma**2 / 2), DEFAULT_SHAPE.output.sigma)
        notes.append("output spread of the Azure trace (no output p95)")
    hit = sums.hit / sums.hit_weight if sums.hit_weight > 0 else 0.0
    if sums.hit_weight <= 0:
        notes.append("no prefix-cache counters: no hits assumed")
    if sums.from_p90:
        notes.append("p90 for the tail")
    source = f"live mix of the last {MIX_MEMORY_S / 60:.0f} min" + (f" ({'; '.join(notes)})" if notes else "")
    return WorkloadShape(prompt, output, hit, source), True


@dataclass(frozen=True, slots=True)
class Arrivals:
    """The pool's arrival rate and how it was read.

    Attributes:
        rate_rps: requests/s arriving, ≥ 0; ``None`` when unknown.
        finished_rps: requests/s finishing (the engines' ``request_success`` rate), ``None`` if unknown.
        growth_rps: the change of the requests inside the engines (waiting + running) over the rate
            window, requests/s; 0 when it cannot be read.
        line: the phrase for the reason line.
    """

    rate_rps: float | None
    finished_rps: float | None
    growth_rps: float
    line: str


def _inflight(snap: SignalSnapshot) -> float | None:
    q, r = _finite(snap.queue_depth), _finite(snap.running_requests)
    return None if q is None or r is None else q + r


def _one_window_before(history: Sequence[SignalSnapshot], snap: SignalSnapshot) -> SignalSnapshot | None:
    """The snapshot of the history closest to one rate window before ``snap`` (within a quarter of it)."""
    window = _window(snap)
    target = snap.observed_at - window
    best: SignalSnapshot | None = None
    for other in history:
        if other is snap or other.observed_at >= snap.observed_at:
            continue
        if abs(other.observed_at - target) <= window / 4 and (
            best is None or abs(other.observed_at - target) < abs(best.observed_at - target)
        ):
            best = other
    return best


def arrival_rate(history: Sequence[SignalSnapshot], snap: SignalSnapshot) -> Arrivals:
    """Return the arrival rate at ``snap`` (the newest usable snapshot of ``history``).

    ``arrivals = finished + Δ(waiting + running) / Δt`` over one rate window: every request that
    arrived in the window either finished in it or is still in an engine. The finished rate alone
    reads a saturated pool's capacity, not its load; the growth term adds the queue building up.
    Never negative (a falling in-flight count with no finished rate reads 0).
    """
    finished = _finite(snap.workload.request_rate)
    if finished is None:
        return Arrivals(None, None, 0.0, "arrival rate unknown (no finished-request rate)")
    before = _one_window_before(history, snap)
    growth = 0.0
    if before is not None:
        now_in, then_in = _inflight(snap), _inflight(before)
        dt = snap.observed_at - before.observed_at
        if now_in is not None and then_in is not None and dt > 0:
            growth = (now_in - then_in) / dt
    rate = max(finished + growth, 0.0)
    if growth:
        line = f"arrivals {rate:.2f} requests/s = finished {finished:.2f}/s {growth:+.2f}/s in the engines"
    else:
        line = f"arrivals {rate:.2f} requests/s (finished)"
    return Arrivals(rate, finished, growth, line)


#: Rate windows whose mean arrival rate floors the load signal's: 3. On microbursty arrivals (issue
#: 27's prefill-heavy trace) one window's rate swung between ~5 and ~14 requests/s from minute to
#: minute, and the scale-up window then held the pool at the lowest recommendation of its 120 s; the
#: minute-to-minute spread is the burstiness's to size, the level is the mean's. A rise still shows
#: in the newest window at once (the larger of the two is taken).
RATE_FLOOR_WINDOWS = 3

#: The share of the earlier windows' mean under which the newest window's requests may read as a
#: fall, not a dip: 1/4 (why, and what it was chosen on: docs/policy.md, "A fall is not a dip").
FALL_SHARE = 0.25

#: How unlikely so few requests must be at the earlier windows' level for the newest window to read
#: as a fall: Φ(−3) ≈ 0.135 %, a one-sided three-sigma test, taken exactly (Poisson or negative
#: binomial tail) rather than from the normal approximation, which is wrong at a few requests a
#: window (docs/policy.md, "A fall is not a dip").
FALL_TAIL = 0.00135


def steady_arrival_rate(
    history: Sequence[SignalSnapshot], snap: SignalSnapshot, dispersion: float = 1.0
) -> Arrivals:
    """The arrival rate robust to microbursts: the larger of the newest window's
    (:func:`arrival_rate`) and the mean of the last :data:`RATE_FLOOR_WINDOWS` windows' (each read
    the same way, one window apart; fewer when the history is shorter), unless the newest window is
    a fall rather than a dip.

    A fall: the newest window's requests ``X = rate · window`` are under :data:`FALL_SHARE` of the
    earlier windows' mean count ``μ``, and so few requests in a window of mean ``μ`` and variance
    ``dispersion · μ`` (the learnt index of dispersion, :class:`~llmscale.model.capacity.Burstiness`)
    have a chance under :data:`FALL_TAIL` (:func:`count_tail`). Then the newest window's rate is the load: a
    load that stops reads as stopped within a window, not three. An older window that was itself a
    fall from the ones before it ends the level (the windows before it are not averaged in). The
    reading jumps at the threshold by design: a dip is floored at the mean, a fall is not.

    E.g. windows of 14, 5 and 11 requests/s, newest last: ``max(11, 10)`` = 11; newest 5: μ = 750
    (60 s windows), X = 300 ≥ μ/4, a dip: 10; newest 0 after two of 10: a fall, 0; newest 0 after
    two of 8 requests (Poisson): P(X = 0) = e⁻⁸ = 0.03 %, a fall, 0; newest 0.01 requests/s after
    two of 0.1: μ = 6, P(X = 0) = e⁻⁶ = 0.25 %, noise: 0.07.

    Args:
        history: snapshots, oldest first.
        snap: the newest usable snapshot of ``history``.
        dispersion: variance / mean of a window's request count (≥ 1; 1 for Poisson arrivals).

    Returns:
        The :class:`Arrivals`, its line saying which rate was taken.
    """
    newest = arrival_rate(history, snap)
    if newest.rate_rps is None:
        return newest
    rates = [newest.rate_rps]
    at = snap
    for _ in range(RATE_FLOOR_WINDOWS - 1):
        before = _one_window_before(history, at)
        if before is None:
            break
        earlier = arrival_rate(history, before).rate_rps
        if earlier is None:
            break
        rates.append(earlier)
        at = before
    window = _window(snap)
    # A window that was a fall from the ones before it ends the level: those older windows are the
    # load before the fall, not the floor's (a fall to 1/5 must not read higher a window later).
    for j in range(1, len(rates) - 1):
        if _fall(rates[j], rates[j + 1:], window, dispersion) is not None:
            rates = rates[: j + 1]
            break
    mean = sum(rates) / len(rates)
    if len(rates) < 2 or mean <= newest.rate_rps:
        return newest
    fall = _fall(newest.rate_rps, rates[1:], window, dispersion)
    if fall is not None:
        earlier_count, chance = fall
        return Arrivals(
            newest.rate_rps,
            newest.finished_rps,
            newest.growth_rps,
            f"{newest.line}: a fall, not a microburst ({_requests(newest.rate_rps * window)} requests in the "
            f"window, under a quarter of the {_requests(earlier_count)} of the {len(rates) - 1} before it, "
            f"a chance of {chance:.2g} at their level)",
        )
    return Arrivals(
        mean,
        newest.finished_rps,
        newest.growth_rps,
        f"arrivals {mean:.2f} requests/s, the mean of the last {len(rates)} windows (this one "
        f"{newest.rate_rps:.2f}/s: microbursts are the burstiness's to size)",
    )


def _requests(count: float) -> str:
    """A window's request count for a reason line: whole requests from 10 up, two figures below."""
    return f"{count:,.0f}" if count >= 10 else f"{count:.2g}"


def _fall(rate: float, earlier: Sequence[float], window: float, dispersion: float) -> tuple[float, float] | None:
    """``(μ, chance)`` when one window's ``rate`` is a fall from the ``earlier`` windows'
    (requests/s, each over ``window`` seconds), else ``None``: its count is under
    :data:`FALL_SHARE` of their mean count ``μ`` and ``chance`` = :func:`count_tail` is under
    :data:`FALL_TAIL`. NaN or infinite figures: ``None`` (:func:`count_tail` gives them 1.0)."""
    if not earlier:
        return None
    earlier_count = sum(earlier) / len(earlier) * window
    count = rate * window
    if not count < FALL_SHARE * earlier_count:  # also NaN: no evidence of a fall
        return None
    chance = count_tail(count, earlier_count, dispersion)
    return (earlier_count, chance) if chance < FALL_TAIL else None


def count_tail(count: float, mean: float, dispersion: float) -> float:
    """The chance of at most ``⌊count⌋`` requests in a window whose count has mean ``mean`` and
    variance ``dispersion · mean``: Poisson at ``dispersion ≤ 1``, else the negative binomial of
    that mean and variance (``r = mean / (dispersion − 1)``, success probability ``1 / dispersion``;
    the Poisson–gamma mixture, the textbook over-dispersed count).

    Summed from ``⌊count⌋`` down with the ratio of consecutive terms, stopping once the terms no
    longer matter or the sum passes :data:`FALL_TAIL` (only "under it or not" is used above it),
    so it costs a few dozen terms at any ``mean``.

    Args:
        count: the window's requests (a rate × window; fractions are floored).
        mean: the earlier windows' mean count (> 0).
        dispersion: variance / mean (≥ 1 used; NaN or infinite give 1.0, "no evidence of a fall").

    Returns:
        The probability, 0–1 (1.0 when ``mean`` ≤ 0 or a figure is not finite).
    """
    if not (math.isfinite(count) and math.isfinite(mean) and math.isfinite(dispersion)) or mean <= 0:
        return 1.0
    k = math.floor(count)
    if k < 0:
        return 0.0
    d = max(dispersion, 1.0)
    if d - 1.0 < 1e-9:
        log_term = -mean + k * math.log(mean) - math.lgamma(k + 1)

        def down(i: int) -> float:  # P(i - 1) / P(i)
            return i / mean
    else:
        r, q = mean / (d - 1.0), 1.0 - 1.0 / d
        log_term = math.lgamma(k + r) - math.lgamma(r) - math.lgamma(k + 1) - r * math.log(d) + k * math.log(q)

        def down(i: int) -> float:
            return i / ((i - 1 + r) * q)
    if k > 0 and down(k) < 1.0 and log_term < -700.0:
        # Far in the tail: the terms fall at least as fast as down(k) (the ratio shrinks with i),
        # so the sum is under term / (1 - down(k)), which underflows: nothing to add up.
        return math.exp(log_term) / (1.0 - down(k))
    term = math.exp(log_term)
    total = term
    for i in range(k, 0, -1):
        if total > FALL_TAIL or term < total * 1e-12:
            break
        term *= down(i)
        total += term
    return min(1.0, total)


def burstiness_of(memory: tuple[float, float, int, float] | None) -> Burstiness:
    """The :class:`Burstiness` a memory entry holds (Poisson when none)."""
    if memory is None:
        return Burstiness()
    return Burstiness(memory[0], memory[1]).clamped()


def update_burstiness(
    previous: tuple[float, float, int, float] | None,
    history: Sequence[SignalSnapshot],
    shape: WorkloadShape,
) -> tuple[float, float, int, float] | None:
    """Fold the newest minute pair of the history into the burstiness estimate.

    For two rate windows one window apart, the requests ``X`` and prompt tokens ``Y`` in each give
    ``(X₁ − X₀)² / (2·E[X])`` and ``(Y₁ − Y₀)² / (2·E[X]·E[P²])`` — 1 on average for Poisson
    arrivals of independent lengths (the variance of a difference of independent counts is twice
    theirs; compound Poisson's is ``E[X]·E[P²]``), more for bursts and clustered long prompts. A
    slow trend adds only its square over one window. The estimate is their running mean over the
    last :data:`BURSTINESS_MEMORY_SAMPLES` pairs (exponentially weighted), starting from the Poisson
    prior weighted as :data:`BURSTINESS_PRIOR_SAMPLES` pairs.

    Args:
        previous: ``(requests, prompt_tokens, samples, observed_at)`` from the memory, or ``None``;
            a snapshot at or before ``observed_at`` is not folded in twice.
        history: snapshots, oldest first; the newest is used with the one a window before it.
        shape: the live shape (its ``E[P²]`` normalises the prompt tokens).

    Returns:
        The new ``(requests, prompt_tokens, samples, observed_at)``; ``previous`` unchanged when no
        new pair can be read (unknown rates, fewer than one request per window, no snapshot a
        window before).
    """
    if not history:
        return previous
    snap = history[-1]
    if previous is not None and snap.observed_at <= previous[3]:
        return previous
    before = _one_window_before(history, snap)
    earlier = _one_window_before(history, before) if before is not None else None
    if before is None or earlier is None or not (_finite(earlier.workload.request_rate) or 0) > 0:
        # Two windows and a busy one before them: the first minutes of a pool (or of a history
        # read after a restart) hold windows that are only partly filled.
        return previous
    w = _window(snap)
    r1, r0 = _finite(snap.workload.request_rate), _finite(before.workload.request_rate)
    p1, p0 = _finite(snap.workload.prompt_tokens_rate), _finite(before.workload.prompt_tokens_rate)
    if r1 is None or r0 is None or p1 is None or p0 is None or r1 <= 0 or r0 <= 0:
        # An empty window next to a busy one is a pool starting (or a stalled read), not a burst:
        # at a rate worth measuring, no requests in a minute is as good as impossible for Poisson.
        return previous
    mean_count = (r1 + r0) / 2 * w
    if mean_count < 1.0:
        return previous
    points = shape.prompt.points()
    p_sq = float((points**2).mean())
    d_req = ((r1 - r0) * w) ** 2 / (2 * mean_count)
    d_tok = ((p1 - p0) * w) ** 2 / (2 * mean_count * p_sq)
    if not (math.isfinite(d_req) and math.isfinite(d_tok)):
        return previous
    req, tok, n, _ = previous if previous is not None else (1.0, 1.0, 0, snap.observed_at)
    # One pair is at most BURSTINESS_SAMPLE_MAX times the estimate (winsorised): a step in the load,
    # or replicas landing under a backlog (the finished rate jumps 37 → 197/s), is a level shift, not
    # the minute-to-minute spread, and one such pair read as ×1,800 set a flash crowd's estimate to
    # ×170 for an hour. A real burstiness still shows: pair after pair above the estimate raise it.
    d_req = min(d_req, BURSTINESS_SAMPLE_MAX * max(req, 1.0))
    d_tok = min(d_tok, BURSTINESS_SAMPLE_MAX * max(tok, 1.0))
    # The Poisson prior counts as BURSTINESS_PRIOR_SAMPLES pairs: a few minutes decide nothing alone.
    alpha = 1.0 / min(n + 1 + BURSTINESS_PRIOR_SAMPLES, BURSTINESS_MEMORY_SAMPLES)
    return req + alpha * (d_req - req), tok + alpha * (d_tok - tok), min(n + 1, 10**9), snap.observed_at
