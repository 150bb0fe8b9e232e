"""The operator gives the C heap's free pages back every few seconds (issue 26: at 300
LLMDeployments 57 of 100 MB of C heap were free pages after a restart), and caps glibc's arenas (at
1,000, 15 thread arenas held 37.7 MB, 34.6 of them free)."""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import subprocess
import sys

import pytest

from llmscale.controller.heap import limit_arenas, malloc_trim, trim_heap_forever


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


_ARENAS_USED = """
import ctypes, re, sys, tempfile, threading
from llmscale.controller.heap import limit_arenas
print(limit_arenas() if sys.argv[1] == "limit" else "unlimited")
def allocate():
    blocks = [bytes(2048) for _ in range(2000)]
    barrier.wait()
barrier = threading.Barrier(8)
threads = [threading.Thread(target=allocate) for _ in range(8)]
for t in threads: t.start()
for t in threads: t.join()
libc = ctypes.CDLL("libc.so.6")
libc.fopen.restype = ctypes.c_void_p
libc.fopen.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
libc.fclose.argtypes = [ctypes.c_void_p]
libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
with tempfile.NamedTemporaryFile("r") as out:
    stream = libc.fopen(out.name.encode(), b"w")
    libc.malloc_info(0, stream)
    libc.fclose(stream)
    print(len(re.findall(r'<heap nr="', out.read())))
"""


def _arenas_used(mode: str, **environ: str) -> tuple[str, int]:
    """What ``limit_arenas`` said in a fresh interpreter (``mode`` "limit"; else not called) and the
    arenas glibc holds after eight threads allocated at once there."""
    env = {key: value for key, value in os.environ.items() if key not in ("MALLOC_ARENA_MAX", "GLIBC_TUNABLES")}
    env |= environ
    out = subprocess.run([sys.executable, "-c", _ARENAS_USED, mode], env=env, capture_output=True, text=True,
                         check=True, timeout=60).stdout.split()
    return out[0], int(out[1])


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's arenas")
def test_threads_that_allocate_share_the_capped_arenas() -> None:
    assert _arenas_used("limit") == ("True", 2)
    _, unlimited = _arenas_used("unlimited")
    assert unlimited > 2, "eight threads allocating at once take arenas of their own without the cap"


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's arenas")
@pytest.mark.parametrize("environ", [{"MALLOC_ARENA_MAX": "4"}, {"GLIBC_TUNABLES": "glibc.malloc.arena_max=4"}])
def test_a_cap_set_by_the_user_wins(environ: dict[str, str]) -> None:
    assert _arenas_used("limit", **environ) == ("False", 4)


def test_llmscale_run_caps_the_arenas_before_anything_else(monkeypatch: pytest.MonkeyPatch) -> None:
    # Before the settings are read: the call comes even when they are refused.
    from llmscale.commands import run

    calls: list[str] = []

    def refused(*_: object) -> None:
        calls.append("settings")
        raise ValueError("bad settings")

    monkeypatch.setattr(run, "limit_arenas", lambda: calls.append("capped") or True)
    monkeypatch.setattr(run, "load_settings", refused)
    assert run.main(argparse.Namespace()) == 2
    assert calls == ["capped", "settings"]


def test_fewer_than_one_arena_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one"):
        limit_arenas(0)
