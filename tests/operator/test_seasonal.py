"""The seasonal reader (``llmscale.controller.signals.seasonal``) on its own, over a recording source: the
wall-clock day and week of a time zone across DST changes, one read per distinct offset for every
pool, once a minute at most, failures and timeouts as no history (logged once), stale history not
handed out, pools selected by pod name left out."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

import pytest

from llmscale.api import LLMDeploymentSpec
from llmscale.controller.signals.seasonal import (
    SEASONAL_MAX_AGE_S,
    SEASONAL_REFRESH_S,
    SeasonalReader,
    period_offsets,
    spec_timezone,
)
from llmscale.signals.pastrates import PastRates
from llmscale.signals.profiles import get_profile
from llmscale.signals.queries import PoolRequest, PoolTarget

VLLM = get_profile("vllm")
CHAT = PoolTarget("serving", "chat", "interactive")
EMBED = PoolTarget("serving", "embed", "interactive")
NOW = 1_717_416_000.0  # 2024-06-03 12:00 UTC


def utc(*args: int) -> float:
    return datetime(*args, tzinfo=UTC).timestamp()


@pytest.mark.parametrize(("now", "zone", "day_h", "week_h"), [
    (NOW, None, 24, 168),
    (NOW, "Europe/London", 24, 168),
    # 12:00 BST on 2026-03-29, the day the clocks went forward: 12:00 GMT yesterday was 23 h ago.
    (utc(2026, 3, 29, 11), "Europe/London", 23, 167),
    # The Monday after: a day is 24 h again, the week still spans the change.
    (utc(2026, 3, 30, 11), "Europe/London", 24, 167),
    # 12:00 GMT on 2026-10-25, the day the clocks went back: 25 h.
    (utc(2026, 10, 25, 12), "Europe/London", 25, 169),
    # New York changes on other dates (2026-03-08).
    (utc(2026, 3, 8, 16), "America/New_York", 23, 167),
    (utc(2026, 3, 29, 11), "UTC", 24, 168),
])
def test_the_offsets_span_a_wall_clock_day_or_week_of_the_zone(
    now: float, zone: str | None, day_h: int, week_h: int
) -> None:
    assert period_offsets(now, zone) == (day_h * 3600.0, week_h * 3600.0)


def test_the_time_zone_comes_from_the_calendar_floors() -> None:
    base = {"model": {"name": "meta-llama/Llama-3.1-8B-Instruct", "preset": "llama-3.1-8b"},
            "engine": {"type": "mock", "image": "llmscale:dev"}}
    assert spec_timezone(LLMDeploymentSpec.model_validate(base)) is None
    floors = {"schedule": [{"start": "07:00", "end": "10:00", "timezone": "Europe/Paris", "min": 2}]}
    spec = LLMDeploymentSpec.model_validate({**base, "replicas": floors})
    assert spec_timezone(spec) == "Europe/Paris"


@dataclass
class RecordingSource:
    """Answers each pool a flat rate over the asked range; records every read."""

    reads: list[tuple[list[PoolTarget], float, float]] = field(default_factory=list)
    fail: Exception | None = None
    delay_s: float = 0.0
    rate_rps: float | None = 2.0

    async def read_past_rates(
        self, pools: Sequence[PoolRequest], start_s: float, end_s: float, step_s: float = 60.0, *, now: float
    ) -> Mapping[PoolTarget, PastRates]:
        self.reads.append(([r.target for r in pools], start_s, end_s))
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        if self.fail is not None:
            raise self.fail
        size = int((end_s - start_s) // step_s) + 1
        return {r.target: PastRates(start_s, step_s, (self.rate_rps,) * size) for r in pools}


async def test_one_read_per_distinct_offset_serves_every_pool() -> None:
    source = RecordingSource()
    reader = SeasonalReader(source, timeout_s=1.0)
    paris_dst = utc(2026, 3, 29, 10)  # 12:00 in Paris on its spring-forward day
    await reader.read([(PoolRequest(CHAT, VLLM), None), (PoolRequest(EMBED, VLLM), "Europe/Paris")], paris_dst, 0.0)
    # UTC pools: 24 h and 168 h; Paris: 23 h and 167 h — four offsets, each read once.
    assert sorted(paris_dst - end for _, _, end in source.reads) == sorted(
        o - 1800.0 for o in (86_400.0, 82_800.0, 604_800.0, 601_200.0)
    )
    assert all(len(targets) == 1 for targets, _, _ in source.reads)
    chat, embed = reader.get(CHAT, 1.0), reader.get(EMBED, 1.0)
    assert chat is not None and chat.day is not None and chat.week is not None
    assert (chat.day_offset_s, chat.week_offset_s) == (86_400.0, 604_800.0)
    assert embed is not None and (embed.day_offset_s, embed.week_offset_s) == (82_800.0, 601_200.0)
    # The series covers the forecast's stretch: 5 min before the same time, and a lead time after.
    assert chat.day.mean(NOW - 86_400.0 - 300, NOW - 86_400.0) is None  # another day's read
    assert chat.day.mean(paris_dst - 86_400.0 - 300, paris_dst - 86_400.0 + 600) == 2.0
    assert reader.get(CHAT, 1.0 + SEASONAL_MAX_AGE_S + 1) is None, "too old: not handed out"


async def _read_a_chat_pool_without_series_with_a_pool_selected_by_pod_name() -> tuple[
    RecordingSource, SeasonalReader, PoolTarget
]:
    source = RecordingSource(rate_rps=None)
    reader = SeasonalReader(source, timeout_s=1.0)
    named = PoolTarget("serving", "legacy", "interactive", pods=("legacy-0",))
    await reader.read([(PoolRequest(CHAT, VLLM), None), (PoolRequest(named, VLLM), None)], NOW, 0.0)
    return source, reader, named


async def test_a_pool_selected_by_pod_name_is_left_unread_with_no_history() -> None:
    source, reader, named = await _read_a_chat_pool_without_series_with_a_pool_selected_by_pod_name()
    assert all(targets == [CHAT] for targets, _, _ in source.reads)
    assert reader.get(named, 0.0) is None


async def test_a_pool_without_series_gets_none() -> None:
    _, reader, _ = await _read_a_chat_pool_without_series_with_a_pool_selected_by_pod_name()
    assert reader.get(CHAT, 0.0) is None, "no value at all is no history, not a flat zero"


async def _a_read_failing_twice_then_recovering(
    fault: str, caplog: pytest.LogCaptureFixture
) -> tuple[object | None, object | None, object | None]:
    """What the reader holds before, during and after two failed reads."""
    source = RecordingSource()
    reader = SeasonalReader(source, timeout_s=0.05)
    pools = [(PoolRequest(CHAT, VLLM), None)]
    await reader.read(pools, NOW, 0.0)
    before = reader.get(CHAT, 0.0)
    if fault == "raises":
        source.fail = ConnectionRefusedError("canned Prometheus is down")
    else:
        source.delay_s = 1.0
    with caplog.at_level(logging.INFO, logger="llmscale.controller.signals.seasonal"):
        await reader.read(pools, NOW + 60, 60.0)
        await reader.read(pools, NOW + 120, 120.0)
        during = reader.get(CHAT, 120.0)
        source.fail, source.delay_s = None, 0.0
        await reader.read(pools, NOW + 180, 180.0)
    return before, during, reader.get(CHAT, 180.0)


@pytest.mark.parametrize("fault", ["raises", "times out"])
async def test_a_failed_read_drops_every_history(fault: str, caplog: pytest.LogCaptureFixture) -> None:
    before, during, after = await _a_read_failing_twice_then_recovering(fault, caplog)
    assert before is not None
    assert during is None
    assert after is not None


@pytest.mark.parametrize("fault", ["raises", "times out"])
async def test_a_failed_read_is_logged_once_as_is_its_recovery(fault: str, caplog: pytest.LogCaptureFixture) -> None:
    await _a_read_failing_twice_then_recovering(fault, caplog)
    lines = [r.getMessage() for r in caplog.records]
    assert len([m for m in lines if m.startswith("Failed to read")]) == 1, lines
    assert len([m for m in lines if m.startswith("Read the request rates")]) == 1, lines


async def test_a_read_never_blocks_the_caller() -> None:
    # Not a wall-clock bound (a loaded CI worker can stall any call): the read is still in flight when
    # the call returns, and it finishes later in a task of its own.
    source = RecordingSource(delay_s=0.2)
    reader = SeasonalReader(source, timeout_s=1.0)
    reader.start_if_due([(PoolRequest(CHAT, VLLM), None)], NOW, 0.0)
    assert reader.reads == 0 and reader.get(CHAT, 0.0) is None, "the read runs in a task of its own"
    await asyncio.sleep(0.5)
    assert reader.reads == 1 and reader.get(CHAT, 0.5) is not None
    await reader.stop()


async def test_reads_start_at_most_once_a_minute() -> None:
    source = RecordingSource(delay_s=0.2)
    reader = SeasonalReader(source, timeout_s=1.0)
    pools = [(PoolRequest(CHAT, VLLM), None)]
    reader.start_if_due(pools, NOW, 0.0)
    reader.start_if_due(pools, NOW, 1.0)  # one in flight
    await asyncio.sleep(0.6)
    reader.start_if_due(pools, NOW, SEASONAL_REFRESH_S - 1)  # not due yet
    await asyncio.sleep(0.05)
    assert reader.reads == 1 and len(source.reads) == 2  # one read: a day and a week ago
    reader.start_if_due(pools, NOW + 60, SEASONAL_REFRESH_S)
    await asyncio.sleep(0.6)
    assert reader.reads == 2
    await reader.stop()


async def test_a_source_that_cannot_read_past_rates_gives_no_history() -> None:
    reader = SeasonalReader(object(), timeout_s=1.0)
    reader.start_if_due([(PoolRequest(CHAT, VLLM), None)], NOW, 0.0)
    await reader.read([(PoolRequest(CHAT, VLLM), None)], NOW, 0.0)
    assert reader.reads == 0 and reader.get(CHAT, 0.0) is None
