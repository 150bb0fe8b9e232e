"""Give the C heap's free pages back to the kernel every few seconds (glibc's ``malloc_trim``).

The operator's garbage comes in bursts: each fleet read parses Prometheus answers for every pod
(in the reader's threads, so in glibc arenas of their own), each watch event a new body. glibc keeps
what is freed inside its heaps, so the resident set grows to the bursts' high-water mark and stays:
at 300 LLMDeployments, 57 MB of 100 MB of C heap were free pages after a restart (``mallinfo2``,
issue 26). ``malloc_trim(0)`` returns every whole free page of every arena (glibc 2.8 and later);
it took 1.5–15 ms there. Where the C library has no ``malloc_trim`` (musl, macOS) nothing runs.
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
from collections.abc import Callable

__all__ = ["TRIM_PERIOD_SECONDS", "malloc_trim", "trim_heap_forever"]

_LOG = logging.getLogger(__name__)

#: Seconds between two trims.
TRIM_PERIOD_SECONDS = 10.0


def malloc_trim() -> Callable[[], object] | None:
    """glibc's ``malloc_trim(0)`` as a callable of no arguments, or ``None`` where the process's C
    library has none (looked up among the symbols the process has loaded: no ``ldconfig`` run)."""
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return lambda: trim(0)


async def trim_heap_forever(period_s: float = TRIM_PERIOD_SECONDS) -> None:
    """Trim the C heap every ``period_s`` seconds, in a worker thread, until cancelled; returns at
    once where there is no ``malloc_trim``.

    Raises:
        ValueError: ``period_s`` is not positive.
    """
    if period_s <= 0:
        raise ValueError(f"a heap trim period of {period_s} s is not positive")
    trim = malloc_trim()
    if trim is None:
        _LOG.debug("No malloc_trim in this C library: the heap is left as the allocator keeps it")
        return
    while True:
        await asyncio.sleep(period_s)
        await asyncio.to_thread(trim)
