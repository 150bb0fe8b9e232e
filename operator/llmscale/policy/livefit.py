"""The live calibration: the model's efficiencies fitted continuously to the engines' own histograms.

``llmscale calibrate`` fits the roofline's efficiencies once, against a benchmark; in production
the engines measure themselves every minute. Each judged minute of the interactive pool
(:class:`~llmscale.signals.minute.MinuteSample`, read in the same query as the SLO judgement) gives
one :class:`~llmscale.model.fit.LiveWindow`: the mean ITL at the mean running batch per engine,
the mean prefill time at the mean prompt, the mean context (mean prompt + half the mean output).
The last :data:`LIVE_FIT_MINUTES` such windows are fitted (:func:`~llmscale.model.fit.fit_efficiencies`).

**A correction to the prior, not a replacement.** A pool under steady traffic shows one batch size
all hour: one point says how long a step of that batch takes, not how the step grows with the
batch. So the fit also sees the prior model's own steps (batch 1 and the full batch at the window's
context, a budget-sized prefill chunk), scaled by the engines' measured ratio to the prior for
steps of that kind (a geometric mean), each with a third of :data:`PRIOR_WEIGHT` of the live
windows' total weight, and each only where no live step of its kind lies within a factor of 2:
where the engines measured, they are the truth; where they did not, the prior's shape holds. The fit is used
(:class:`LiveCalibration.used`) once it stands on :data:`LIVE_FIT_MIN_MINUTES` minutes with
traffic and explains them within :data:`LIVE_FIT_MAX_ERROR` (rms relative error).

**An upgrade is a release** (the serving runbook). The windows belong to one engine: its type,
image and args (a digest the shell computes). When the digest changes, the windows are dropped, the
last calibration is kept as ``before``, and once the new engine has its own, the capacity note of
each (:class:`CapacityNote`) is compared: the shell reports the difference as an Event and a
condition; while the pool rolls out (its pods run two engines) no minute is folded. A window's
mean ITL is read as the mixture of decode and chunk steps it is; what the windows still misread
(the full batch beyond them, bursts; docs/calibrate.md, "In production") makes the policy take a
fit only where it and its sides say faster (:func:`llmscale.policy.load.faster_only`); the SLO's
breaches say slower. The record lives in the
operator's memory: a restart fits again from the next minutes, and an upgrade made while the
operator restarts is not compared.

Pure: no clock, no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, replace

from llmscale.api import LLMDeploymentSpec
from llmscale.model import ModelDoesNotFit, ReplicaModel
from llmscale.model.capacity import engine_limits
from llmscale.model.fit import (
    EfficiencyFit,
    LiveWindow,
    StepObservation,
    figure_time,
    fit_efficiencies,
    live_observations,
)
from llmscale.signals.minute import MinuteSample

__all__ = [
    "LIVE_FIT_MAX_ERROR",
    "LIVE_FIT_MINUTES",
    "LIVE_FIT_MIN_MINUTES",
    "LIVE_FIT_MIN_TOKENS",
    "LIVE_FIT_REFIT_MINUTES",
    "PRIOR_WEIGHT",
    "CapacityNote",
    "LiveCalibration",
    "LiveRecord",
    "advance",
    "calibrate",
    "capacity_note",
    "describe_change",
    "fold",
    "live_window",
    "refit_due",
    "used_fit",
]

#: Minutes of windows fitted: 30, long enough for the load to move (several batch sizes), short
#: enough that a drift shows within the hour.
LIVE_FIT_MINUTES = 30
#: Minutes with traffic before a fit is used: 5 (one noisy minute is not a calibration).
LIVE_FIT_MIN_MINUTES = 5
#: Output tokens a minute must carry to count: 100 (below, a mean ITL stands on a handful of gaps).
LIVE_FIT_MIN_TOKENS = 100.0
#: Largest rms relative error of a fit that is used: 25 % (beyond, the model's form does not
#: describe these engines and the prior is the better guess; the condition says so).
LIVE_FIT_MAX_ERROR = 0.25
#: Minutes between fits once one is used: 5. A fit of 30 windows costs tens of milliseconds of the
#: event loop (23 ms at best, 87 ms median on this repository's loaded 2-core machine); at 1,000
#: LLMDeployments a fit every minute would hold the loop for 23 s or more each minute, one every
#: five a fifth of that.
LIVE_FIT_REFIT_MINUTES = 5
#: Weight of the prior's own steps, as a share of the live windows' total: 0.1.
PRIOR_WEIGHT = 0.1
#: Context of a reference step in the capacity note, tokens.
_NOTE_CONTEXT = 1024


def live_window(sample: MinuteSample, budget_tokens: int) -> LiveWindow | None:
    """The window one judged minute gives, or ``None`` when it carries fewer than
    :data:`LIVE_FIT_MIN_TOKENS` token gaps or lacks the running mean, the ITL or the lengths."""
    s = sample
    need = (s.running_mean, s.itl_sum_s, s.itl_count, s.prompt_tokens_sum, s.prompt_tokens_count,
            s.output_tokens_sum, s.output_tokens_count)
    if any(v is None or not math.isfinite(v) for v in need):
        return None
    assert s.running_mean is not None and s.itl_sum_s is not None and s.itl_count is not None
    assert s.prompt_tokens_sum is not None and s.prompt_tokens_count is not None
    assert s.output_tokens_sum is not None and s.output_tokens_count is not None
    if s.itl_count < LIVE_FIT_MIN_TOKENS or s.prompt_tokens_count <= 0 or s.output_tokens_count <= 0:
        return None
    prompt = s.prompt_tokens_sum / s.prompt_tokens_count
    output = s.output_tokens_sum / s.output_tokens_count
    prefill = (s.prefill_sum_s / s.prefill_count
               if s.prefill_sum_s is not None and s.prefill_count is not None and s.prefill_count > 0 else math.nan)
    return LiveWindow(
        running=s.running_mean,
        context_tokens=prompt + output / 2.0,
        itl_mean_s=s.itl_sum_s / s.itl_count,
        prompt_tokens=prompt,
        prefill_mean_s=prefill,
        tokens=s.itl_count,
        budget_tokens=budget_tokens,
        requests=s.prompt_tokens_count,
    )


@dataclass(frozen=True, slots=True)
class CapacityNote:
    """The figures an upgrade is compared on, from one model.

    Attributes:
        itl_batch1_s: a decode step of one sequence at 1,024 tokens of context, seconds.
        itl_full_s: a decode step of ``max_num_seqs`` sequences at that context, seconds.
        max_num_seqs: the full batch, requests.
        prefill_tok_s: prompt tokens a second in budget-sized chunks.
        decode_tok_s: tokens a second at the full batch.
    """

    itl_batch1_s: float
    itl_full_s: float
    max_num_seqs: int
    prefill_tok_s: float
    decode_tok_s: float


@dataclass(frozen=True, slots=True)
class LiveCalibration:
    """A fit of the live windows.

    Attributes:
        fit: the efficiencies and overheads, and how well they explain the windows.
        minutes: windows with traffic it stands on.
        measured_at: end of the newest window, seconds since the epoch.
        note: the capacity note of the prior model with this fit applied.
        prior_note: the capacity note of the prior model as it is.
        used: whether the policy sizes the pool with it (:data:`LIVE_FIT_MIN_MINUTES` minutes,
            error within :data:`LIVE_FIT_MAX_ERROR`).
    """

    fit: EfficiencyFit
    minutes: int
    measured_at: float
    note: CapacityNote
    prior_note: CapacityNote
    used: bool

    def describe(self) -> str:
        """The measurement in words, for the condition."""
        f = self.fit
        return (f"fitted to {self.minutes} minutes of the engines' own histograms: bandwidth {f.bandwidth_efficiency:.0%}, "
                f"compute {f.compute_efficiency:.0%}, step overhead {f.step_overhead_s * 1e3:.2f} ms, "
                f"per sequence {f.seq_overhead_s * 1e3:.3f} ms (rms error {f.rms_relative_error:.0%}); "
                f"ITL at batch 1 {self.note.itl_batch1_s * 1e3:.1f} ms (model {self.prior_note.itl_batch1_s * 1e3:.1f}), "
                f"at batch {self.note.max_num_seqs} {self.note.itl_full_s * 1e3:.1f} ms "
                f"(model {self.prior_note.itl_full_s * 1e3:.1f}), prefill {self.note.prefill_tok_s:,.0f} tok/s "
                f"(model {self.prior_note.prefill_tok_s:,.0f})")


@dataclass(frozen=True, slots=True)
class LiveRecord:
    """What the live calibration keeps between minutes, for one LLMDeployment.

    Attributes:
        digest: the engine (type, image, args) the windows were measured on.
        windows: ``(end_s, window)`` of the last :data:`LIVE_FIT_MINUTES` minutes with traffic, oldest first.
        last: the newest calibration of this engine, or ``None``.
        before: the last calibration of the engine before the newest upgrade, or ``None``.
        upgraded_at: when the upgrade was seen, seconds since the epoch (``None``: no upgrade seen).
        skip_until: minutes ending at or before this time are not folded (an upgrade or a rollout:
            the pods ran another engine, or two); ``None``: none skipped.
    """

    digest: int
    windows: tuple[tuple[float, LiveWindow], ...] = ()
    last: LiveCalibration | None = None
    before: LiveCalibration | None = None
    upgraded_at: float | None = None
    skip_until: float | None = None


def fold(record: LiveRecord | None, digest: int, samples: Iterable[MinuteSample], budget_tokens: int,
         now: float, *, rolling_out: bool = False) -> LiveRecord:
    """``record`` with the minutes of ``samples`` newer than its newest window added (the last
    :data:`LIVE_FIT_MINUTES` kept). A new ``digest`` (an upgrade) starts a new record that keeps
    the old one's last calibration as ``before``. While ``rolling_out`` (the pool's pods run two
    engines) nothing is folded, and no minute that ended by ``now`` ever will be."""
    if record is None:
        record = LiveRecord(digest)
    elif record.digest != digest:
        record = LiveRecord(digest, before=record.last if record.last is not None else record.before,
                            upgraded_at=now, skip_until=now)
    if rolling_out:
        return record if record.skip_until == now else replace(record, skip_until=now)
    newest = record.windows[-1][0] if record.windows else -math.inf
    added = list(record.windows)
    for sample in sorted(samples, key=lambda s: s.end_s):
        if sample.end_s <= newest or (record.skip_until is not None and sample.end_s <= record.skip_until):
            continue
        window = live_window(sample, budget_tokens)
        if window is not None:
            added.append((sample.end_s, window))
            newest = sample.end_s
    if len(added) == len(record.windows):
        return record
    return replace(record, windows=tuple(added[-LIVE_FIT_MINUTES:]))


def refit_due(record: LiveRecord) -> bool:
    """Whether ``record`` should be fitted again: it has windows newer than its last fit, and that
    fit is not used yet or is :data:`LIVE_FIT_REFIT_MINUTES` minutes older than the newest window."""
    if not record.windows:
        return False
    newest = record.windows[-1][0]
    last = record.last
    if last is None or not last.used:
        return last is None or newest > last.measured_at
    return newest - last.measured_at >= 60.0 * LIVE_FIT_REFIT_MINUTES - 1e-6


def _prior(spec: LLMDeploymentSpec) -> ReplicaModel | None:
    try:
        model = ReplicaModel.from_spec(spec)
    except (ModelDoesNotFit, ValueError):
        return None
    return model if model.fits else None


def capacity_note(model: ReplicaModel, spec: LLMDeploymentSpec) -> CapacityNote:
    """The :class:`CapacityNote` of ``model`` with ``spec``'s engine limits."""
    limits = engine_limits(spec)
    full = limits.max_num_seqs
    chunk = limits.max_num_batched_tokens
    itl_full = model.decode_step_time(full, _NOTE_CONTEXT)
    return CapacityNote(
        itl_batch1_s=model.decode_step_time(1, _NOTE_CONTEXT),
        itl_full_s=itl_full,
        max_num_seqs=full,
        prefill_tok_s=chunk / model.prefill_time(chunk),
        decode_tok_s=full / itl_full,
    )


def _near(anchor: tuple[float, float, float], ob: StepObservation) -> bool:
    """Whether live step ``ob`` is of the anchor's kind (decode or prefill) within a factor of 2."""
    d, _, p = anchor
    if p > 0:
        return ob.prefill_tokens > 0 and 0.5 <= ob.prefill_tokens / p <= 2.0
    return ob.prefill_tokens == 0 and ob.decode_seqs > 0 and 0.5 <= ob.decode_seqs / d <= 2.0


def calibrate(spec: LLMDeploymentSpec, record: LiveRecord) -> LiveCalibration | None:
    """Fit ``record``'s windows as a correction to ``spec``'s model (module docstring), or ``None``
    with fewer than two windows or a model that cannot place the deployment."""
    model = _prior(spec)
    windows = [w for _, w in record.windows]
    if model is None or len(windows) < 2:
        return None
    live = live_observations(windows)
    if len(live) < 2:
        return None
    total = sum(o.weight for o in live)
    limits = engine_limits(spec)
    context = sum(w.context_tokens * w.tokens for w in windows) / sum(w.tokens for w in windows)
    chunk = float(limits.max_num_batched_tokens)
    anchors = [(1.0, context, 0.0), (float(limits.max_num_seqs), context, 0.0), (0.0, 0.0, chunk)]
    # Only where no live step of the same kind lies within a factor of 2: where they measured, the
    # engines are the truth, and the prior only holds the shape beyond what they showed.
    anchors = [a for a in anchors if not any(_near(a, o) for o in live)]
    # The prior's shape, scaled by how far the engines are from it where they measured (per kind):
    # a pool measured only at batch 10 and 20 % slower than the prior is taken as 20 % slower at
    # batch 1 and at the full batch too, not as the prior there.
    def ratio(prefill: bool) -> float | None:
        kind = [o for o in live if (o.prefill_tokens > 0) == prefill]
        if not kind:
            return None
        return math.exp(sum(o.weight * math.log(o.seconds / figure_time(model, o)) for o in kind)
                        / sum(o.weight for o in kind))

    decode_ratio, prefill_ratio = ratio(False), ratio(True)
    scale = {False: decode_ratio if decode_ratio is not None else prefill_ratio or 1.0,
             True: prefill_ratio if prefill_ratio is not None else decode_ratio or 1.0}
    prior = [StepObservation(d, d * c, p, model.step_time(d, d * c, p) * scale[p > 0], PRIOR_WEIGHT * total / 3.0)
             for d, c, p in anchors]
    # The prior's points share the fit's relative-error weighting; the live windows dominate it.
    # The attention term only where the prior has one (a calibrated small model): one search, not two.
    fit = fit_efficiencies(model, live + prior, attention=model.attention_efficiency is not None)
    # The error that matters is on what the engines measured, not on the prior's own points.
    fitted = fit.apply(model)
    rel = [(figure_time(fitted, o) - o.seconds) / o.seconds for o in live]
    rms = math.sqrt(sum(r * r for r in rel) / len(rel))
    fit = replace(fit, rms_relative_error=rms, max_relative_error=max(abs(r) for r in rel), observations=len(live))
    minutes = len(windows)
    return LiveCalibration(
        fit=fit,
        minutes=minutes,
        measured_at=record.windows[-1][0],
        note=capacity_note(fitted, spec),
        prior_note=capacity_note(model, spec),
        used=minutes >= LIVE_FIT_MIN_MINUTES and rms <= LIVE_FIT_MAX_ERROR,
    )


def advance(record: LiveRecord | None, spec: LLMDeploymentSpec, digest: int, samples: Iterable[MinuteSample],
            now: float, *, rolling_out: bool = False) -> LiveRecord:
    """One tick of the live calibration: :func:`fold` ``samples`` into ``record`` and, when a minute
    was added and :func:`refit_due`, :func:`calibrate` again (the new fit becomes ``last``). The
    operator's shell and the simulator's llmscale both call this, so both size the pool with the
    same fit. The fit the policy uses is ``last.fit`` when ``last.used``."""
    folded = fold(record, digest, samples, engine_limits(spec).max_num_batched_tokens, now, rolling_out=rolling_out)
    if (record is None or folded.windows is not record.windows) and refit_due(folded):
        cal = calibrate(spec, folded)
        if cal is not None:
            folded = replace(folded, last=cal)
    return folded


def used_fit(record: LiveRecord | None) -> EfficiencyFit | None:
    """The fit the policy sizes the pool with: the newest calibration's when it is used, else ``None``."""
    return record.last.fit if record is not None and record.last is not None and record.last.used else None


def _change(before: float, after: float) -> str:
    return f"{(after / before - 1.0):+.0%}" if before > 0 and math.isfinite(before) else "n/a"


def describe_change(before: CapacityNote, after: CapacityNote) -> str:
    """The capacity note's difference from ``before`` to ``after`` in words, e.g. ``ITL at batch 1
    2.0 → 1.6 ms (-20%), ...``."""
    return (
        f"ITL at batch 1 {before.itl_batch1_s * 1e3:.1f} → {after.itl_batch1_s * 1e3:.1f} ms "
        f"({_change(before.itl_batch1_s, after.itl_batch1_s)}), at batch {after.max_num_seqs} "
        f"{before.itl_full_s * 1e3:.1f} → {after.itl_full_s * 1e3:.1f} ms ({_change(before.itl_full_s, after.itl_full_s)}), "
        f"prefill {before.prefill_tok_s:,.0f} → {after.prefill_tok_s:,.0f} tok/s "
        f"({_change(before.prefill_tok_s, after.prefill_tok_s)}), decode at the full batch "
        f"{before.decode_tok_s:,.0f} → {after.decode_tok_s:,.0f} tok/s ({_change(before.decode_tok_s, after.decode_tok_s)})"
    )
