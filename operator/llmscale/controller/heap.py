"""Give the C heap's free pages back to the kernel every few seconds (glibc's ``malloc_trim``).

The operator's garbage comes in bursts: each fleet read parses Prometheus answers for every pod
(in the reader's threads, so in glibc arenas of their own), each watch event a new body. glibc keeps
what is freed inside its heaps, so the resident set grows to the bursts' high-water mark and stays:
at 300 LLMDeployments, 57 MB of 100 MB of C heap were free pages after a restart (``mallinfo2``,
issue 26). ``malloc_trim(0)`` returns every whole free page of every arena (glibc 2.8 and later);
it took 1.5–15 ms there. Where the C library has no ``malloc_trim`` (musl, macOS) nothing runs.

glibc also gives each thread that allocates an arena of its own (up to 8 per core), and a burst
parsed in one leaves that arena's free pages to that thread: at 1,000 LLMDeployments 15 thread
arenas held 37.7 MB, 34.6 of them free (issue 26). :func:`limit_arenas` caps them at start, as
``MALLOC_ARENA_MAX`` does, unless the user set a cap.
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import os
from collections.abc import Callable, Mapping

__all__ = ["ARENAS", "TRIM_PERIOD_SECONDS", "limit_arenas", "malloc_trim", "trim_heap_forever"]

_LOG = logging.getLogger(__name__)

#: Seconds between two trims.
TRIM_PERIOD_SECONDS = 10.0

#: glibc arenas at most, the main one included, unless ``MALLOC_ARENA_MAX`` says otherwise: the
#: operator's threads allocate under the GIL, so they seldom contend for one.
ARENAS = 2

_M_ARENA_MAX = -8  # glibc's malloc.h


def limit_arenas(arenas: int = ARENAS, environ: Mapping[str, str] = os.environ) -> bool:
    """Cap glibc's arenas at ``arenas`` (``mallopt(M_ARENA_MAX)``) unless ``environ`` sets one
    (``MALLOC_ARENA_MAX``, or ``glibc.malloc.arena_max`` in ``GLIBC_TUNABLES``: glibc read it
    itself); return whether the cap was set. Call it before the process starts threads, so that no
    thread holds an arena of its own yet. Where the C library has no ``mallopt`` (musl, macOS), or
    refuses, nothing changes.

    Raises:
        ValueError: ``arenas`` is below 1.
    """
    if arenas < 1:
        raise ValueError(f"{arenas} malloc arenas: at least one is needed")
    if "MALLOC_ARENA_MAX" in environ or "glibc.malloc.arena_max" in environ.get("GLIBC_TUNABLES", ""):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_ARENA_MAX, arenas))


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
