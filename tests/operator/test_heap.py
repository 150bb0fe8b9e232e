"""The operator gives the C heap's free pages back every few seconds (issue 26: at 300
LLMDeployments 57 of 100 MB of C heap were free pages after a restart)."""

from __future__ import annotations

import asyncio
import platform

import pytest

from llmscale.controller.heap import malloc_trim, trim_heap_forever


def _rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096


@pytest.mark.skipif(platform.system() != "Linux", reason="reads /proc/self/statm")
def test_a_trim_returns_freed_heap_pages_to_the_kernel() -> None:
    assert platform.libc_ver()[0] == "glibc", "the CI image is glibc; a musl image would need this test changed"
    trim = malloc_trim()
    assert trim is not None
    # 80 MB of 2 KiB bytes objects (past pymalloc's 512-byte limit, so from malloc's heap, below
    # its mmap threshold), freed but for every 64th, which pins the heap's top: only a trim gives
    # the pages between back.
    blocks = [bytes(2048) + bytes([i % 251]) for i in range(40_000)]
    kept = blocks[::64]
    del blocks
    before = _rss_bytes()
    trim()
    after = _rss_bytes()
    assert before - after > 40e6, (before, after)
    assert len(kept) == 625


async def test_the_trim_loop_runs_until_cancelled() -> None:
    task = asyncio.create_task(trim_heap_forever(0.01))
    await asyncio.sleep(0.1)
    assert not task.done()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_period_that_is_not_positive_is_refused() -> None:
    with pytest.raises(ValueError, match="not positive"):
        await trim_heap_forever(0)
