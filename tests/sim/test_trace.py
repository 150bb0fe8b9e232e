"""Trace loading (Azure format) and day synthesis by time rescaling."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from llmscale.data import trace_path
from llmscale.sim.trace import DiurnalEnvelope, Trace, TraceFormatError, load_azure_csv, synthesize

REAL = trace_path("azure-llm-2023-conv")


def _csv(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "t.csv"
    p.write_text(text, encoding="utf-8")
    return p


def test_seven_fractional_digits_are_kept(tmp_path: Path) -> None:
    p = _csv(
        tmp_path,
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:15:46.6805900,374,44\n"
        "2023-11-16 18:15:50.9951697,396,109\n",
    )
    t = load_azure_csv(p)
    epoch = datetime(2023, 11, 16, 18, 15, 46, tzinfo=UTC).timestamp()
    assert t.arrival_s[0] == pytest.approx(epoch + 0.68059, abs=1e-6)
    # the 7th digit (100 ns) survives: 4.3145797 s between the two
    assert t.arrival_s[1] - t.arrival_s[0] == pytest.approx(4.3145797, abs=2e-6)
    assert t.prompt_tokens.tolist() == [374, 396]
    assert t.output_tokens.tolist() == [44, 109]
    assert not t.is_batch.any()
    assert t.start_s == t.arrival_s[0]


def _classed_csv(tmp_path: Path) -> Trace:
    return load_azure_csv(_csv(
        tmp_path,
        "TIMESTAMP,ContextTokens,GeneratedTokens,Class\n"
        "2023-11-16 00:00:02.0000000,10,5,batch\n"
        "2023-11-16 00:00:01.0000000,20,6,Interactive\n"
        "2023-11-16 00:00:03.5,30,7,\n",
    ))


def test_the_class_column_marks_batch(tmp_path: Path) -> None:
    assert _classed_csv(tmp_path).is_batch.tolist() == [False, True, False]


def test_the_rows_are_sorted_by_time(tmp_path: Path) -> None:
    t = _classed_csv(tmp_path)
    assert t.prompt_tokens.tolist() == [20, 10, 30]
    assert t.duration_s == pytest.approx(2.5)


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("TIMESTAMP,ContextTokens\n2023-11-16 00:00:01,1\n", id="missing-column"),
        pytest.param("TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,1,2\n", id="bad-timestamp"),
        pytest.param("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 00:00:01,x,2\n", id="bad-count"),
        pytest.param("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 00:00:01,-1,2\n", id="negative"),
        pytest.param(
            "TIMESTAMP,ContextTokens,GeneratedTokens,Class\n2023-11-16 00:00:01,1,2,offline\n", id="bad-class"
        ),
        pytest.param("TIMESTAMP,ContextTokens,GeneratedTokens\n", id="no-rows"),
        pytest.param("", id="empty"),
    ],
)
def test_malformed_files_are_refused(tmp_path: Path, text: str) -> None:
    with pytest.raises(TraceFormatError):
        load_azure_csv(_csv(tmp_path, text))


def test_the_real_trace_loads_with_its_documented_figures() -> None:
    t = load_azure_csv(REAL)
    assert len(t) == 19_366
    assert t.prompt_tokens.mean() == pytest.approx(1155, abs=1)
    assert t.output_tokens.mean() == pytest.approx(211, abs=1)
    assert int(t.prompt_tokens.max()) == 14_050


def _base(n: int = 2000, seed: int = 1) -> object:
    rng = np.random.default_rng(seed)
    from llmscale.sim.trace import Trace

    gaps = rng.exponential(0.5, n)  # 2 req/s
    t = 1_700_000_000.0 + np.cumsum(gaps)
    return Trace(t, rng.integers(10, 2000, n), rng.integers(1, 500, n), np.zeros(n, bool), float(t[0]), float(t[-1] - t[0]))


def test_flat_shape_at_the_base_rate_replays_the_base_unchanged() -> None:
    base = _base()
    out = synthesize(base, duration_s=base.duration_s * 0.9, seed=3)
    k = len(out)
    assert k > 0.85 * len(base)
    np.testing.assert_allclose(out.arrival_s, base.arrival_s[:k], atol=1e-6)
    assert out.prompt_tokens.tolist() == base.prompt_tokens[:k].tolist()


DIURNAL = DiurnalEnvelope(peak_hour=15, trough_fraction=0.25)


def _diurnal_day() -> Trace:
    return synthesize(_base(), duration_s=86_400, peak_rps=10, envelope=DIURNAL, seed=7)


def test_a_diurnal_day_has_the_requested_volume() -> None:
    grid = np.arange(86_400) + 0.5
    expected = float((10 * DIURNAL(grid)).sum())
    assert len(_diurnal_day()) == pytest.approx(expected, rel=0.01)


def test_a_diurnal_day_has_the_requested_shape() -> None:
    day = _diurnal_day()
    hour = ((day.arrival_s - day.start_s) // 3600).astype(int)
    per_hour = np.bincount(hour, minlength=24) / 3600
    assert per_hour[15] == pytest.approx(10 * float(DIURNAL(np.array([15.5 * 3600]))[0]), rel=0.1)
    assert per_hour[3] == pytest.approx(10 * float(DIURNAL(np.array([3.5 * 3600]))[0]), rel=0.15)
    assert day.start_s % 86_400 == 0  # starts at midnight UTC
    assert np.all(np.diff(day.arrival_s) >= 0)
    assert day.arrival_s[-1] < day.end_s


def _synthesized(seed: int) -> Trace:
    return synthesize(_base(), duration_s=20_000, peak_rps=6, seed=seed, batch_fraction=0.2)


def test_synthesis_is_deterministic_under_a_seed() -> None:
    a, b = _synthesized(5), _synthesized(5)
    np.testing.assert_array_equal(a.arrival_s, b.arrival_s)
    np.testing.assert_array_equal(a.is_batch, b.is_batch)


def test_synthesis_varies_with_the_seed() -> None:
    assert not np.array_equal(_synthesized(5).prompt_tokens, _synthesized(6).prompt_tokens)


def test_synthesis_marks_the_batch_fraction() -> None:
    assert _synthesized(5).is_batch.mean() == pytest.approx(0.2, abs=0.02)


def test_time_rescaling_keeps_the_trace_burstiness() -> None:
    # A bursty base (gaps with CV ≈ 2) stays bursty after a 5× speed-up.
    rng = np.random.default_rng(0)
    gaps = np.where(rng.random(4000) < 0.2, rng.exponential(2.0, 4000), rng.exponential(0.05, 4000))
    from llmscale.sim.trace import Trace

    t = np.cumsum(gaps)
    base = Trace(t, np.ones(4000, np.int64), np.ones(4000, np.int64), np.zeros(4000, bool), float(t[0]), float(t[-1] - t[0]))
    out = synthesize(base, duration_s=base.duration_s / 5 * 0.95, peak_rps=5 * base.mean_rate_rps, seed=0)
    cv = lambda g: float(np.std(g) / np.mean(g))  # noqa: E731
    assert cv(np.diff(out.arrival_s)) == pytest.approx(cv(gaps[1:]), rel=0.05)


@pytest.mark.parametrize(
    ("kwargs", "msg"),
    [
        pytest.param({"duration_s": 0}, "duration", id="zero-duration"),
        pytest.param({"duration_s": 10, "peak_rps": -1}, "peak", id="negative-peak"),
        pytest.param({"duration_s": 10, "batch_fraction": 2}, "batch", id="bad-fraction"),
    ],
)
def test_bad_synthesis_arguments_are_refused(kwargs: dict[str, float], msg: str) -> None:
    with pytest.raises(ValueError, match=msg):
        synthesize(_base(), **kwargs)  # type: ignore[arg-type]


def test_a_shaped_day_does_not_repeat_the_base_hours_own_hump() -> None:
    # A base hour whose rate rises from 2 to 8 req/s and falls back (like the real trace's hump).
    # Compressed into a day without detrending, every pass would repeat the hump; detrended, the
    # rate at a flat envelope is flat at the 5-minute scale.
    from llmscale.sim.trace import Trace

    rng = np.random.default_rng(2)
    rate = lambda s: 2 + 6 * np.sin(np.pi * s / 3600) ** 2  # noqa: E731
    t = np.sort(rng.uniform(0, 3600, 40_000))
    t = t[rng.random(len(t)) < rate(t) / 8]
    n = len(t)
    base = Trace(t, np.ones(n, np.int64), np.ones(n, np.int64), np.zeros(n, bool), 0.0, 3600.0)
    flat = lambda s: np.ones_like(s)  # noqa: E731
    for detrend, bound in ((300.0, 0.08), (None, 0.3)):
        out = synthesize(base, duration_s=7200, peak_rps=40, envelope=flat, seed=1, detrend_window_s=detrend)
        per5 = np.bincount(((out.arrival_s - out.start_s) // 300).astype(int)) / 300
        spread = float(np.max(np.abs(per5 / 40 - 1)))
        assert (spread < bound) if detrend else (spread > bound), (detrend, spread)


# --------------------------------------------------------------------------- the Mooncake format


def _jsonl(tmp_path: Path, lines: list[str], name: str = "t.jsonl") -> Path:
    p = tmp_path / name
    p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return p


def test_a_mooncake_jsonl_file_loads_with_its_sizes_times_block_hashes(tmp_path: Path) -> None:
    from llmscale.sim.trace import load_mooncake_jsonl

    p = _jsonl(tmp_path, [
        '{"timestamp": 0, "input_length": 1000, "output_length": 10, "hash_ids": [0, 1]}',
        '{"timestamp": 2500, "input_length": 600, "output_length": 3, "hash_ids": [0, 2]}',
        "",
        '{"timestamp": 1000, "input_length": 20, "output_length": 1, "hash_ids": [3]}',
    ])
    t = load_mooncake_jsonl(p)
    assert t.arrival_s.tolist() == [0.0, 1.0, 2.5]  # milliseconds → seconds, sorted
    assert t.prompt_tokens.tolist() == [1000, 20, 600]
    assert t.output_tokens.tolist() == [10, 1, 3]
    assert t.hash_offsets is not None and t.hash_ids is not None
    rows = [t.hash_ids[t.hash_offsets[i] : t.hash_offsets[i + 1]].tolist() for i in range(3)]
    assert rows == [[0, 1], [3], [0, 2]]  # the hashes followed their requests through the sort
    assert t.block_tokens == 512 and not t.is_batch.any()
    assert t.citation == ""  # not a known file name: no dataset is credited


@pytest.mark.parametrize(
    ("line", "message"),
    [
        pytest.param("not json", "not JSON", id="not-json"),
        pytest.param("[1, 2]", "not a JSON object", id="not-an-object"),
        pytest.param('{"timestamp": 0, "input_length": 5}', "output_length", id="missing-key"),
        pytest.param('{"timestamp": -1, "input_length": 5, "output_length": 1}', "timestamp", id="negative-time"),
        pytest.param('{"timestamp": 0, "input_length": 5.5, "output_length": 1}', "whole", id="fractional-tokens"),
        pytest.param('{"timestamp": 0, "input_length": "5", "output_length": 1}', "input_length", id="string"),
        pytest.param('{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [1, "a"]}',
                     "hash_ids", id="bad-hash"),
    ],
)
def test_malformed_mooncake_lines_are_refused_with_the_line_number(tmp_path: Path, line: str, message: str) -> None:
    from llmscale.sim.trace import load_mooncake_jsonl

    good = '{"timestamp": 0, "input_length": 5, "output_length": 1}'
    with pytest.raises(TraceFormatError, match=message) as info:
        load_mooncake_jsonl(_jsonl(tmp_path, [good, line]))
    assert ":2:" in str(info.value)


def test_load_trace_picks_the_format_by_name_or_by_content(tmp_path: Path) -> None:
    from llmscale.sim.trace import load_trace

    moon = _jsonl(tmp_path, ['{"timestamp": 0, "input_length": 5, "output_length": 1}'] * 2,
                  name="mooncake-conversation-trace.jsonl")
    assert load_trace(moon).prompt_tokens.tolist() == [5, 5]
    sniffed = _jsonl(tmp_path, ['{"timestamp": 0, "input_length": 5, "output_length": 1}'], name="trace.txt")
    assert load_trace(sniffed).prompt_tokens.tolist() == [5]


def test_load_trace_credits_only_known_traces(tmp_path: Path) -> None:
    from llmscale.sim.trace import AZURE_2023_CITATION, MOONCAKE_CITATION, citation_for, load_trace

    moon = _jsonl(tmp_path, ['{"timestamp": 0, "input_length": 5, "output_length": 1}'] * 2,
                  name="mooncake-conversation-trace.jsonl")
    assert load_trace(moon).citation == MOONCAKE_CITATION
    azure = tmp_path / "azure-llm-2023-conv.csv"
    azure.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 00:00:01,1,2\n", encoding="utf-8")
    assert load_trace(azure).citation == AZURE_2023_CITATION
    own = _csv(tmp_path, "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 00:00:01,1,2\n")
    assert load_trace(own).citation == "" == citation_for(own)


def _hashed_base(n: int = 400, seed: int = 3) -> object:
    from llmscale.sim.trace import Trace

    rng = np.random.default_rng(seed)
    t = np.cumsum(rng.exponential(0.5, n))
    blocks = rng.integers(1, 5, n)
    offsets = np.concatenate(([0], np.cumsum(blocks))).astype(np.int64)
    ids = np.arange(int(offsets[-1]), dtype=np.int64) % 97  # repeats: shared prefixes
    return Trace(t, blocks * 512, rng.integers(1, 50, n), np.zeros(n, bool), float(t[0]),
                 float(t[-1] - t[0]), "hashed", offsets, ids)


def _hashed_synthesis() -> tuple[Trace, Trace]:
    base = _hashed_base()
    out = synthesize(base, duration_s=base.duration_s * 3.5, seed=2)  # type: ignore[attr-defined]
    assert out.hash_offsets is not None and out.hash_ids is not None
    return base, out  # type: ignore[return-value]


def test_synthesis_carries_the_block_hashes() -> None:
    _, out = _hashed_synthesis()
    assert out.hash_offsets is not None
    assert len(out.hash_offsets) == len(out) + 1 == len(out.prompt_tokens) + 1
    # every request keeps as many blocks as its prompt has
    blocks = np.diff(out.hash_offsets)
    assert np.array_equal(blocks * 512, out.prompt_tokens)


def test_synthesis_gives_each_pass_its_own_block_ids() -> None:
    base, out = _hashed_synthesis()
    assert out.hash_offsets is not None and out.hash_ids is not None
    # the first pass is the base's own ids; later passes are shifted, so they never meet the first's
    n0 = len(base)
    first = set(out.hash_ids[: out.hash_offsets[n0]].tolist())
    later = set(out.hash_ids[out.hash_offsets[n0] :].tolist())
    assert first <= set(range(97)) and not first & later


def _weekly() -> Any:
    from llmscale.sim.trace import WeeklyEnvelope

    return WeeklyEnvelope(DiurnalEnvelope(peak_hour=15, trough_fraction=0.25), weekend_fraction=0.5)


def test_the_weekly_envelope_is_quieter_on_weekends() -> None:
    env = _weekly()
    at = lambda day, hour: float(env(np.array([day * 86_400.0 + hour * 3600.0]))[0])  # noqa: E731
    assert at(0, 15) == pytest.approx(1.0) and at(4, 15) == pytest.approx(1.0)  # Monday, Friday
    assert at(5, 15) == pytest.approx(0.5) and at(6, 3) == pytest.approx(0.5 * at(2, 3))  # weekend
    week = synthesize(_base(), duration_s=7 * 86_400.0, peak_rps=2.0, envelope=env, seed=1)
    per_day = np.bincount(((week.arrival_s - week.start_s) // 86_400).astype(int), minlength=7)
    assert per_day[5] == pytest.approx(per_day[0] / 2, rel=0.05)
    assert "weekends 0.5" in week.source


def test_a_synthesized_week_starts_on_monday_at_midnight() -> None:
    week = synthesize(_base(), duration_s=7 * 86_400.0, peak_rps=2.0, envelope=_weekly(), seed=1)
    assert datetime.fromtimestamp(week.start_s, UTC).weekday() == 0
    assert datetime.fromtimestamp(week.start_s, UTC).hour == 0


def _resampled() -> tuple[Any, Any, Any]:
    """A base trace and two resamplings of its lengths under one seed."""
    from llmscale.sim.trace import LogNormalLengths, resample_lengths

    base = _base(n=20_000)
    prompt = LogNormalLengths(2500, 0.5, 512, 7168)
    output = LogNormalLengths(30, 0.7, 4, 256)
    a = resample_lengths(base, prompt, output, seed=4)  # type: ignore[arg-type]
    b = resample_lengths(base, prompt, output, seed=4)  # type: ignore[arg-type]
    return base, a, b


def test_resampled_lengths_keep_the_timing() -> None:
    base, a, _ = _resampled()
    np.testing.assert_array_equal(a.arrival_s, base.arrival_s)


def test_resampled_lengths_are_deterministic_under_a_seed() -> None:
    _, a, b = _resampled()
    np.testing.assert_array_equal(a.prompt_tokens, b.prompt_tokens)


def test_resampled_lengths_follow_the_stated_distribution() -> None:
    _, a, _ = _resampled()
    assert float(np.median(a.prompt_tokens)) == pytest.approx(2500, rel=0.03)
    assert float(np.median(a.output_tokens)) == pytest.approx(30, rel=0.05)
    assert a.prompt_tokens.min() >= 512 and a.prompt_tokens.max() <= 7168
    assert "log-normal(median 2500" in a.source and a.hash_ids is None


def test_a_flat_replay_is_titled_by_its_rate_not_a_peak() -> None:
    """A flat rate has no peak: the title says "flat at R req/s" (R the arrivals per second it
    holds), never "peak R" (the issue's plot said "peak 47.5" of a replay whose busiest moment was
    100); a shaped day keeps its peak, the envelope's top."""
    flat = synthesize(_base(), duration_s=3600.0, peak_rps=2.0, envelope=None, seed=1)
    assert "flat at 2 req/s" in flat.source and "peak" not in flat.source
    assert len(flat.arrival_s) / 3600.0 == pytest.approx(2.0, rel=0.05)
    day = synthesize(_base(), duration_s=86_400.0, peak_rps=2.0, envelope=DiurnalEnvelope(15, 0.25), seed=1)
    assert "peak 2 req/s" in day.source
