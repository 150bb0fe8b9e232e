"""The live calibration: minutes of the engines' own histograms become windows, the windows a fit
of the efficiencies over the prior, and an engine change an upgrade compared before and after."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from llmscale.api import LLMDeploymentSpec
from llmscale.model import DEFAULT_SHAPE, ReplicaModel
from llmscale.model.capacity import POISSON, engine_limits
from llmscale.model.fit import EfficiencyFit
from llmscale.policy.livefit import (
    LIVE_FIT_MIN_MINUTES,
    LIVE_FIT_MINUTES,
    LIVE_FIT_REFIT_MINUTES,
    LiveCalibration,
    LiveRecord,
    calibrate,
    describe_change,
    fold,
    live_window,
    refit_due,
)
from llmscale.policy.load import capacity_context, faster_only
from llmscale.signals.minute import MinuteSample

SPEC = LLMDeploymentSpec.model_validate({
    "model": {"name": "meta-llama/Llama-3.1-8B-Instruct", "preset": "llama-3.1-8b"},
    "resources": {"gpuType": "h100-sxm"},
    "engine": {"args": ["--max-num-seqs", "64", "--max-num-batched-tokens", "4096"]},
})
PROMPT, OUTPUT = 900.0, 200.0


def _minute(truth: ReplicaModel, end_s: float, running: float, tokens: float = 2000.0) -> MinuteSample:
    """A minute as the minute query reads it, from an engine that runs as ``truth`` says: its
    ``tokens / running`` steps, of which each prompt's one chunk took one (the mean ITL is their
    mean), and each prompt's prefill time its chunk step beside the running batch's decodes."""
    ctx = PROMPT + OUTPUT / 2
    requests = tokens / OUTPUT
    share = requests / (tokens / running)
    chunked = truth.step_time(running, running * ctx, PROMPT)
    itl = (1.0 - share) * truth.step_time(running, running * ctx, 0) + share * chunked
    return MinuteSample(
        end_s=end_s, running_mean=running, itl_sum_s=itl * tokens, itl_count=tokens,
        prefill_sum_s=chunked * requests, prefill_count=requests,
        prompt_tokens_sum=PROMPT * requests, prompt_tokens_count=requests,
        output_tokens_sum=OUTPUT * requests, output_tokens_count=requests,
    )


def _truth(overhead: float, bw: float = 0.5) -> ReplicaModel:
    return ReplicaModel.from_spec(SPEC).with_changes(bandwidth_efficiency=bw, compute_efficiency=0.3,
                                                     step_overhead_s=overhead)


def test_a_minute_becomes_the_window_of_its_means() -> None:
    w = live_window(_minute(_truth(0.003), 60.0, 12.0), 4096)
    assert w is not None
    assert w.running == 12.0 and w.prompt_tokens == pytest.approx(PROMPT)
    assert w.context_tokens == pytest.approx(PROMPT + OUTPUT / 2)
    minute = _minute(_truth(0.003), 60.0, 12.0)
    assert minute.itl_sum_s is not None and minute.itl_count is not None
    assert w.itl_mean_s == pytest.approx(minute.itl_sum_s / minute.itl_count)
    assert w.budget_tokens == 4096 and w.tokens == 2000.0
    assert w.requests == pytest.approx(2000.0 / OUTPUT)  # the prompts, for the share of chunk steps


@pytest.mark.parametrize("sample", [
    pytest.param(MinuteSample(60.0), id="no-series"),
    pytest.param(MinuteSample(60.0, running_mean=3.0, itl_sum_s=0.5, itl_count=50.0, prompt_tokens_sum=900.0,
                              prompt_tokens_count=1.0, output_tokens_sum=50.0, output_tokens_count=1.0),
                 id="too-few-token-gaps"),
    pytest.param(MinuteSample(60.0, running_mean=math.nan, itl_sum_s=5.0, itl_count=500.0, prompt_tokens_sum=900.0,
                              prompt_tokens_count=1.0, output_tokens_sum=500.0, output_tokens_count=1.0),
                 id="nan-running"),
    pytest.param(MinuteSample(60.0, running_mean=3.0, itl_sum_s=5.0, itl_count=500.0, prompt_tokens_sum=0.0,
                              prompt_tokens_count=0.0, output_tokens_sum=500.0, output_tokens_count=1.0),
                 id="no-finished-request"),
])
def test_a_minute_without_evidence_gives_no_window(sample: MinuteSample) -> None:
    assert live_window(sample, 4096) is None


def test_fold_keeps_the_newest_minutes_once_each() -> None:
    truth = _truth(0.003)
    record = None
    for m in range(LIVE_FIT_MINUTES + 10):
        minutes = [_minute(truth, 60.0 * k, 10.0) for k in range(max(m - 4, 1), m + 1)]  # the reader keeps 5
        record = fold(record, 7, minutes, 4096, 60.0 * m)
    assert record is not None
    ends = [end for end, _ in record.windows]
    assert ends == sorted(set(ends)) and len(ends) == LIVE_FIT_MINUTES and ends[-1] == 60.0 * (LIVE_FIT_MINUTES + 9)
    assert fold(record, 7, [_minute(truth, 60.0, 10.0)], 4096, 0.0) is record  # nothing new: unchanged


def test_windows_at_several_loads_give_a_used_fit_that_recovers_the_engine() -> None:
    truth = _truth(0.003)
    record = fold(None, 7, [_minute(truth, 60.0 * k, b) for k, b in enumerate((1, 2, 4, 8, 16, 32, 64), 1)], 4096, 0)
    cal = calibrate(SPEC, record)
    assert cal is not None and cal.used and cal.minutes == 7
    for batch in (1, 8, 64):
        assert (cal.fit.apply(ReplicaModel.from_spec(SPEC)).decode_step_time(batch, 1000)
                == pytest.approx(truth.decode_step_time(batch, 1000), rel=0.05)), batch
    assert cal.note.itl_batch1_s == pytest.approx(truth.decode_step_time(1, 1024), rel=0.05)
    assert cal.prior_note.itl_batch1_s < cal.note.itl_batch1_s  # the prior (no overhead) was too fast
    assert "minutes of the engines' own histograms" in cal.describe()


def _fit_of_one_steady_load() -> tuple[ReplicaModel, LiveCalibration]:
    # A pool that runs at batch 10 all hour says how long that step takes, not how steps grow.
    truth = _truth(0.003)
    record = fold(None, 7, [_minute(truth, 60.0 * k, 10.0) for k in range(1, 11)], 4096, 0)
    cal = calibrate(SPEC, record)
    assert cal is not None and cal.used
    return truth, cal


def test_one_steady_load_corrects_the_measured_point() -> None:
    truth, cal = _fit_of_one_steady_load()
    fitted = cal.fit.apply(ReplicaModel.from_spec(SPEC))
    assert fitted.decode_step_time(10, 1000) == pytest.approx(truth.decode_step_time(10, 1000), rel=0.03)


def test_one_steady_load_keeps_the_priors_shape() -> None:
    truth, cal = _fit_of_one_steady_load()
    fitted = cal.fit.apply(ReplicaModel.from_spec(SPEC))
    assert fitted.prefill_time(PROMPT) == pytest.approx(truth.prefill_time(PROMPT), rel=0.05)
    assert all(math.isfinite(x) and x > 0 for x in (cal.note.itl_full_s, cal.note.decode_tok_s))


def test_too_few_minutes_are_measured_but_not_used() -> None:
    truth = _truth(0.003)
    record = fold(None, 7, [_minute(truth, 60.0 * k, 4.0 * k) for k in range(1, LIVE_FIT_MIN_MINUTES)], 4096, 0)
    cal = calibrate(SPEC, record)
    assert cal is not None and not cal.used
    assert calibrate(SPEC, LiveRecord(7)) is None


def _first_fit_and_upgrade() -> tuple[LiveCalibration, LiveRecord]:
    old, new = _truth(0.004), _truth(0.002, bw=0.6)
    record = fold(None, 1, [_minute(old, 60.0 * k, b) for k, b in enumerate((2, 8, 32, 4, 16, 64), 1)], 4096, 360)
    first = calibrate(SPEC, record)
    assert first is not None
    record = LiveRecord(record.digest, record.windows, first)
    # The engine changes at 400 s: the minutes the reader still holds from before are not its.
    return first, fold(record, 2, [_minute(old, 360.0, 8.0), _minute(new, 420.0, 8.0)], 4096, 400.0)


def test_an_upgrade_drops_the_old_windows() -> None:
    first, upgraded = _first_fit_and_upgrade()
    assert upgraded.before is first and upgraded.upgraded_at == 400.0
    assert [end for end, _ in upgraded.windows] == [420.0]


def test_an_upgrade_compares_the_capacity_note_with_the_one_before() -> None:
    first, upgraded = _first_fit_and_upgrade()
    new = _truth(0.002, bw=0.6)
    upgraded = fold(upgraded, 2, [_minute(new, 420.0 + 60 * k, b) for k, b in enumerate((2, 32, 4, 16, 64), 1)],
                    4096, 800.0)
    after = calibrate(SPEC, upgraded)
    assert after is not None and after.used
    assert after.note.itl_batch1_s < first.note.itl_batch1_s * 0.8
    text = describe_change(first.note, after.note)
    assert text.startswith("ITL at batch 1 ") and "(-" in text.split(",")[0]


def _fitted(truth: ReplicaModel) -> LiveCalibration:
    record = fold(None, 7, [_minute(truth, 60.0 * k, b) for k, b in enumerate((1, 4, 16, 64, 2, 8), 1)], 4096, 0)
    cal = calibrate(SPEC, record)
    assert cal is not None and cal.used
    return cal


def test_a_fit_that_says_slower_leaves_the_prior() -> None:
    # The live windows read steps slower than they are: the SLO's breaches, not the fit, say slower.
    cal = _fitted(_truth(0.02, bw=0.2))
    prior = capacity_context(SPEC, DEFAULT_SHAPE, False, POISSON, 1.0)
    live = capacity_context(SPEC, DEFAULT_SHAPE, False, POISSON, 1.0, cal.fit)
    assert prior is not None and live is not None and not live.calibrated_live and not prior.calibrated_live
    assert live.model == prior.model
    assert live.need(20.0).replicas == prior.need(20.0).replicas


def test_a_fit_that_says_faster_needs_fewer_replicas() -> None:
    fast = ReplicaModel.from_spec(SPEC).with_changes(bandwidth_efficiency=1.0, compute_efficiency=1.0)
    cal = _fitted(fast)
    prior = capacity_context(SPEC, DEFAULT_SHAPE, False, POISSON, 1.0)
    live = capacity_context(SPEC, DEFAULT_SHAPE, False, POISSON, 1.0, cal.fit)
    assert prior is not None and live is not None and live.calibrated_live
    assert live.need(40.0).replicas < prior.need(40.0).replicas


def _fit(bw: float, compute: float, step_s: float, seq_s: float, attention: float | None) -> EfficiencyFit:
    return EfficiencyFit(bw, compute, step_s, seq_s, attention, 0.0, 0.0, 0.0, True, True, 0)


PRIOR = ReplicaModel.from_spec(SPEC).with_changes(bandwidth_efficiency=0.8, compute_efficiency=0.5,
                                                  step_overhead_s=0.002, seq_overhead_s=2e-5)


@pytest.mark.parametrize(("bw", "step_s", "seq_s", "taken"), [
    (0.95, 0.002, 2e-5, True),   # a higher bandwidth alone
    (0.8, 0.0, 0.0, True),       # lower overheads alone
    (0.3, 0.002, 2e-5, False),   # a lower bandwidth
    (0.95, 0.008, 2e-5, False),  # a higher bandwidth beside a larger overhead: one slower step
    (0.8, 0.002, 1e-3, False),   # a larger per-sequence overhead
])
def test_the_decode_side_of_a_fit_is_taken_whole_only_where_no_step_is_slower(bw: float, step_s: float, seq_s: float,
                                                                             taken: bool) -> None:
    got = faster_only(_fit(bw, 0.5, step_s, seq_s, None), PRIOR, engine_limits(SPEC))
    side = (got.bandwidth_efficiency, got.step_overhead_s, got.seq_overhead_s)
    assert side == ((bw, step_s, seq_s) if taken else (0.8, 0.002, 2e-5))


@pytest.mark.parametrize(("compute", "taken"), [(0.5, True), (0.2, True), (0.05, False)])
def test_the_decode_side_is_not_taken_where_the_whole_fit_is_slower_at_its_steps(compute: float,
                                                                                taken: bool) -> None:
    # The sides are solved together: a faster bandwidth beside a compute so slow that the full batch
    # turns compute-bound is one slower decode step (a 70B engine equal to its model read bandwidth
    # x1.08 beside compute x0.90 on the azure-day workload: the bandwidth alone was taken).
    got = faster_only(_fit(0.95, compute, 0.002, 2e-5, None), PRIOR, engine_limits(SPEC))
    assert got.bandwidth_efficiency == (0.95 if taken else 0.8)
    assert got.compute_efficiency == 0.5  # never faster here


@pytest.mark.parametrize(("compute", "rms", "taken"), [(0.505, 0.05, False), (0.505, 0.0, True), (0.6, 0.05, True),
                                                       (1.0, 0.3, True), (1.0, 0.6, False)])
def test_a_side_within_the_fits_own_error_is_the_model(compute: float, rms: float, taken: bool) -> None:
    # mooncake-day: the prefill side read x1.00-1.01 of the model at an rms of 5 % and was taken on
    # most ticks; a side counts only where it is faster than the fit's error can explain.
    fit = replace(_fit(0.8, compute, 0.002, 2e-5, None), rms_relative_error=rms)
    got = faster_only(fit, PRIOR, engine_limits(SPEC))
    assert got.compute_efficiency == (compute if taken else 0.5)


@pytest.mark.parametrize(("compute", "taken"), [(0.9, True), (0.2, False)])
def test_the_prefill_side_of_a_fit_is_taken_only_where_it_is_faster(compute: float, taken: bool) -> None:
    # An engine faster in compute read slower in bandwidth (robustness case compute-x2: the mean ITL
    # carries the chunk steps): the compute is taken, the bandwidth is not.
    got = faster_only(_fit(0.6, compute, 0.002, 2e-5, None), PRIOR, engine_limits(SPEC))
    assert got.bandwidth_efficiency == 0.8
    assert got.compute_efficiency == (compute if taken else 0.5)


def test_an_attention_term_is_not_added_by_a_fit() -> None:
    prior = ReplicaModel.from_spec(SPEC)
    assert prior.attention_efficiency is None
    fit = _fit(0.8, 0.5, 0.0, 0.0, 0.4)
    assert faster_only(fit, prior, engine_limits(SPEC)).attention_efficiency is None
    assert faster_only(fit, prior.with_changes(attention_efficiency=0.2), engine_limits(SPEC)).attention_efficiency == 0.4
    assert faster_only(_fit(0.8, 0.5, 0.0, 0.0, 0.1), prior.with_changes(attention_efficiency=0.2),
                       engine_limits(SPEC)).attention_efficiency == 0.2


def test_a_used_fit_is_refitted_every_five_minutes_not_every_minute() -> None:
    truth = _truth(0.003)
    record = fold(None, 7, [_minute(truth, 60.0 * k, b) for k, b in enumerate((1, 4, 16, 64, 8), 1)], 4096, 0)
    assert refit_due(record) and not refit_due(LiveRecord(7))
    cal = calibrate(SPEC, record)
    assert cal is not None and cal.used and cal.measured_at == 300.0
    record = replace(record, last=cal)
    assert not refit_due(record)
    for k in range(6, 6 + LIVE_FIT_REFIT_MINUTES):
        record = fold(record, 7, [_minute(truth, 60.0 * k, 8.0)], 4096, 60.0 * k)
        assert refit_due(record) == (k == 5 + LIVE_FIT_REFIT_MINUTES), k
    # Until a fit is used, every new minute is fitted.
    young = fold(None, 7, [_minute(truth, 60.0, 1.0), _minute(truth, 120.0, 8.0)], 4096, 0)
    first = calibrate(SPEC, young)
    assert first is not None and not first.used
    young = fold(replace(young, last=first), 7, [_minute(truth, 180.0, 16.0)], 4096, 180.0)
    assert refit_due(young)


def test_no_minute_of_a_rollout_is_folded() -> None:
    # A rollout's pods run the old engine and the new: its minutes describe neither.
    truth = _truth(0.003)
    record = fold(None, 7, [_minute(truth, 60.0, 8.0)], 4096, 60.0)
    rolling = fold(record, 7, [_minute(truth, 120.0, 8.0)], 4096, 130.0, rolling_out=True)
    assert rolling.windows is record.windows and rolling.skip_until == 130.0
    assert fold(rolling, 7, [_minute(truth, 120.0, 8.0)], 4096, 130.0, rolling_out=True) is rolling
    rolling = fold(rolling, 7, [_minute(truth, 180.0, 8.0)], 4096, 190.0, rolling_out=True)
    # Done: the minutes the reader still holds from the rollout stay out; the next one is in.
    done = fold(rolling, 7, [_minute(truth, 120.0, 8.0), _minute(truth, 180.0, 8.0), _minute(truth, 240.0, 8.0)],
                4096, 250.0)
    assert [end for end, _ in done.windows] == [60.0, 240.0]
