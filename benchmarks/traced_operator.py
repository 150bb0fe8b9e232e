"""``llmscale`` under :mod:`tracemalloc`, for ``benchmarks/scale.py --tracemalloc`` and ``--census``:
what the operator holds, by the line that allocated it and by who keeps it.

    .venv/bin/python benchmarks/traced_operator.py DUMP run --kubeconfig ... (llmscale's own arguments)

Imports the operator and the Kubernetes client's API modules, then starts tracing (frames of each
allocation's stack: ``LLMSCALE_TRACEMALLOC_FRAMES``, 6 by default; 0: no tracing, the census only),
then runs ``llmscale`` with the rest of the arguments. On SIGUSR1 it writes the census to
``DUMP.census`` (:func:`census`) and, when tracing, a snapshot to ``DUMP``
(:meth:`tracemalloc.Snapshot.dump`, read it back with :meth:`tracemalloc.Snapshot.load`). Tracing
slows the process and adds its own memory: use it for the breakdown, never for the RSS figure. What
was imported before tracing is not in the snapshot.
"""

from __future__ import annotations

import asyncio
import collections
import ctypes
import dataclasses
import gc
import os
import re
import signal
import sys
import tempfile
import tracemalloc
import types
from pathlib import Path
from types import FrameType
from typing import Any

#: What the census never walks into: code, classes, modules, frames and the loop, shared by all.
_SHARED = (types.ModuleType, type, types.FunctionType, types.BuiltinFunctionType, types.FrameType,
           types.CodeType, types.MethodType, asyncio.AbstractEventLoop)


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]


def deep_size(obj: Any, seen: set[int]) -> int:
    """Bytes of ``obj`` and of what it holds (dicts, sequences, sets, instance attributes and slots),
    each object counted once across calls sharing ``seen``; never walks into :data:`_SHARED`."""
    size, stack = 0, [obj]
    while stack:
        o = stack.pop()
        if id(o) in seen or isinstance(o, _SHARED):
            continue
        seen.add(id(o))
        size += sys.getsizeof(o)
        if isinstance(o, dict):
            stack.extend(o.keys())
            stack.extend(o.values())
        elif isinstance(o, (list, tuple, set, frozenset, collections.deque)):
            stack.extend(o)
        else:
            attributes = getattr(o, "__dict__", None)
            if isinstance(attributes, dict):
                stack.append(attributes)
            for cls in type(o).__mro__:
                slots = cls.__dict__.get("__slots__", ())
                for slot in (slots,) if isinstance(slots, str) else slots:
                    if hasattr(o, slot):
                        stack.append(getattr(o, slot))
    return size


def _task_size(task: asyncio.Task[Any]) -> int:
    """Bytes of a task, its chain of awaited coroutines and their frames (not what the frames' locals
    reference: that is counted where it is kept)."""
    coro: Any = task.get_coro()
    size = sys.getsizeof(task)
    while coro is not None:
        size += sys.getsizeof(coro)
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
        size += sys.getsizeof(frame) if frame is not None else 0
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
        if not hasattr(coro, "cr_frame") and not hasattr(coro, "gi_frame"):
            break
    return size


def _process_lines() -> list[str]:
    status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
    lines = [" ".join(f"{key} {status[key].strip()}" for key in ("VmRSS", "VmHWM", "RssAnon", "RssFile") if key in status)]
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallinfo2.restype = _MallInfo2
        info = libc.mallinfo2()
        lines.append(f"C heap (mallinfo2): {info.arena / 1e6:.1f} MB in arenas, {info.uordblks / 1e6:.1f} MB in use, "
                     f"{info.fordblks / 1e6:.1f} MB free (trimmed pages included), {info.hblkhd / 1e6:.1f} MB mapped")
    except (OSError, AttributeError):
        lines.append("C heap: no mallinfo2 in this C library")
    lines.extend(_arena_lines())
    lines.append(_mapping_line())
    with tempfile.TemporaryFile("w+") as stats:
        saved = os.dup(2)
        os.dup2(stats.fileno(), 2)
        try:
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        stats.seek(0)
        text = stats.read()
    figures = {key: int(value.replace(",", "")) for key, value in re.findall(
        r"# (arenas allocated current|bytes in allocated blocks|bytes in available blocks)\s*=\s*([\d,]+)", text)}
    if figures:
        lines.append(f"pymalloc: {figures.get('arenas allocated current', 0)} arenas of 1 MiB, "
                     f"{figures.get('bytes in allocated blocks', 0) / 1e6:.1f} MB in objects, "
                     f"{figures.get('bytes in available blocks', 0) / 1e6:.1f} MB free in them")
    return lines


def _arena_lines() -> list[str]:
    """Every glibc arena's size and free bytes (``malloc_info``; ``mallinfo2`` counts the main arena
    only), one line: the main arena, then the threads' arenas together."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.fopen.restype = ctypes.c_void_p
        libc.fopen.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
        libc.fclose.argtypes = [ctypes.c_void_p]
        libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
    except (OSError, AttributeError):
        return []
    with tempfile.NamedTemporaryFile("r") as out:
        stream = libc.fopen(out.name.encode(), b"w")
        if not stream:
            return []
        libc.malloc_info(0, stream)
        libc.fclose(stream)
        text = out.read()
    heaps = re.findall(r'<heap nr="(\d+)">(.*?)</heap>', text, re.S)
    figures = []
    for number, body in heaps:
        current = re.search(r'<system type="current" size="(\d+)"/>', body)
        free = sum(int(size) for size in re.findall(r'<total type="(?:fast|rest)" count="\d+" size="(\d+)"/>', body))
        figures.append((int(number), int(current.group(1)) if current else 0, free))
    main = [f"main {f[1] / 1e6:.1f} MB ({f[2] / 1e6:.1f} MB free)" for f in figures if f[0] == 0]
    threads = [f for f in figures if f[0] != 0]
    return [f"glibc arenas (malloc_info): {', '.join(main)}, {len(threads)} thread arenas "
            f"{sum(f[1] for f in threads) / 1e6:.1f} MB ({sum(f[2] for f in threads) / 1e6:.1f} MB free)"]


def _mapping_line() -> str:
    """The resident anonymous memory by kind of mapping (``/proc/self/smaps``): the main heap, the
    1 MiB maps (pymalloc's arenas), the thread stacks (8 MiB), and the rest."""
    kinds: collections.Counter[str] = collections.Counter()
    name = ""
    size = start = 0
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()
        if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
            start, end = (int(x, 16) for x in head[0].split("-"))
            size = end - start
            name = head[5] if len(head) > 5 else ""
        elif head and head[0] == "Anonymous:":
            kb = int(head[1]) * 1024
            if name == "[heap]":
                kinds["main heap"] += kb
            elif name:
                kinds[f"named ({name.rsplit('/', 1)[-1][:20]} ...)" if name.startswith("/") else name] += kb
            elif size == 1 << 20:
                kinds["1 MiB maps (pymalloc)"] += kb
            elif size == 8 << 20:
                kinds["8 MiB maps (thread stacks)"] += kb
            elif start % (64 << 20) == 0:
                kinds["64 MiB-aligned maps (thread arenas)"] += kb
            else:
                kinds["other anonymous maps"] += kb
    top = [(k, v) for k, v in kinds.most_common() if v >= 1 << 20][:8]
    return "anonymous resident by mapping: " + ", ".join(f"{k} {v / 1e6:.1f} MB" for k, v in top)


def census() -> str:
    """What the process holds, as text: its RSS, the C heap and pymalloc (measured first, before the
    walk allocates), then the bytes Kopf keeps per watched object — the LLMDeployment bodies (their
    ``managedFields``, ``status`` and the rest), llmscale's per-object memory by attribute, Kopf's own
    — and Kopf's indexes. Figures of :func:`deep_size`: Python objects, not RSS."""
    lines = _process_lines()
    from kopf._core.engines import indexing
    from kopf._core.reactor import inventory

    gc.collect()
    parts: collections.Counter[str] = collections.Counter()
    seen: set[int] = set()
    objects = bodies = 0
    for memories in [o for o in gc.get_objects() if isinstance(o, inventory.ResourceMemories)]:
        for memory in list(memories._items.values()):
            objects += 1
            body = memory.daemons_memory.live_fresh_body
            if body is not None:
                bodies += 1
                raw = body._src
                parts["body: metadata.managedFields"] += deep_size((raw.get("metadata") or {}).get("managedFields"), seen)
                parts["body: status"] += deep_size(raw.get("status"), seen)
                parts["body: the rest"] += deep_size(raw, seen)
            own = memory.memo.get("llmscale") if hasattr(memory.memo, "get") else None
            if own is not None:
                for field in dataclasses.fields(own) if dataclasses.is_dataclass(own) else ():
                    parts[f"llmscale ObjectMemory.{field.name}"] += deep_size(getattr(own, field.name), seen)
                parts["llmscale ObjectMemory (the rest)"] += deep_size(own, seen)
            seen.add(id(memory.memo.get("deps") if hasattr(memory.memo, "get") else None))
            parts["Kopf's own per-object memory"] += deep_size(memory, seen)
    for indexers in [o for o in gc.get_objects() if isinstance(o, indexing.OperatorIndexers)]:
        parts["Kopf indexes"] += deep_size(indexers, seen)
    from llmscale.controller.metrics import ObjectSeries
    from llmscale.controller.signals.fleet import FleetReader
    from llmscale.controller.slimbodies import STATUSES

    parts["llmscale statuses kept compressed (slimbodies.STATUSES)"] += deep_size(STATUSES, seen)
    everything = gc.get_objects()
    for reader in [o for o in everything if isinstance(o, FleetReader)]:
        for name, value in vars(reader).items():
            if name.startswith(("_results", "_good", "_minutes", "_pools", "_seasonal")):
                parts[f"llmscale FleetReader.{name}"] += deep_size(value, seen)
    parts["llmscale /metrics series (ObjectSeries)"] += sum(
        deep_size(o, seen) for o in everything if isinstance(o, ObjectSeries))
    loop = asyncio.events._get_running_loop()  # the handler runs on the loop's thread, between steps
    tasks = list(asyncio.all_tasks(loop)) if loop is not None else []
    parts[f"asyncio tasks ({len(tasks)}): task, coroutines, frames"] += sum(_task_size(t) for t in tasks)
    if not objects:
        return "\n".join([*lines, "Kopf: no watched object in this process"]) + "\n"
    lines.append(f"Kopf: {objects} watched objects, {bodies} bodies kept (LLMDeployments); bytes of Python objects:")
    total = sum(parts.values())
    for name, size in parts.most_common():
        if size >= 0.005 * total:
            lines.append(f"  {size / 1e6:8.2f} MB  {size / max(bodies, 1) / 1e3:7.1f} KB an LLMDeployment  {name}")
    return "\n".join(lines) + "\n"


def main() -> int:
    """Trace, install the dump on SIGUSR1, run ``llmscale`` with ``sys.argv[2:]``; its exit status."""
    dump = Path(sys.argv[1])
    # Imported before tracing starts: the Kubernetes client's API modules take minutes to import
    # under tracemalloc (and are the same whatever the objects).
    import kubernetes.client

    from llmscale.cli import main as llmscale
    from llmscale.commands import run  # noqa: F401

    frames = int(os.environ.get("LLMSCALE_TRACEMALLOC_FRAMES", "6"))
    if frames > 0:
        # Only when tracing: a census's process holds what the plain operator holds.
        for api in ("CoreV1Api", "AppsV1Api", "BatchV1Api", "CustomObjectsApi", "CoordinationV1Api",
                    "AutoscalingV2Api", "PolicyV1Api", "EventsV1Api"):
            getattr(kubernetes.client, api, None)
        tracemalloc.start(frames)

    def write(_signum: int, _frame: FrameType | None) -> None:
        dump.with_suffix(".census.tmp").write_text(census())
        dump.with_suffix(".census.tmp").replace(dump.with_suffix(".census"))
        if frames > 0:
            tracemalloc.take_snapshot().dump(str(dump.with_suffix(".tmp")))
            dump.with_suffix(".tmp").replace(dump)

    signal.signal(signal.SIGUSR1, write)
    return llmscale(sys.argv[2:])


if __name__ == "__main__":
    sys.exit(main())
