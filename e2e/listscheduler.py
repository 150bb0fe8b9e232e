"""The e2e suite's pytest-xdist scheduler: scenarios handed out one at a time, as a list scheduler.

A worker runs a test only once it holds the next one (pytest passes ``nextitem`` to the teardown), so
each worker holds the unit of work it runs and one more; xdist's default of up to three queued two
five-minute scenarios behind one another on one worker while the others finished early. The alone
units (``cpu`` ones first) all go to one worker, the first; the others take the longest shared
unit left (one that may run beside the ``cpu`` ones before any other), or the shortest while they
already hold a long one. Kept out of conftest.py so that
tests/test_e2e_scheduling.py can drive it with stand-in workers.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from xdist.scheduler import LoadScopeScheduling

__all__ = ["ListScheduling", "Unit", "unit_of", "write_units"]


def unit_of(nodeid: str) -> str:
    """The unit of work of the test ``nodeid``: its class (whose ordered tests share a namespace),
    else the test itself (each parameter its own)."""
    path, _, rest = nodeid.partition("::")
    name, _, method = rest.partition("::")
    return f"{path}::{name}" if method else nodeid


@dataclass(frozen=True, slots=True)
class Unit:
    """What the collection says of a unit of work: ``alone`` (nothing beside it), ``cpu`` (every core
    busy: alone, and first of all), about how long it runs beside others, seconds (0: short), and
    ``beside_cpu`` (it may run beside the ``cpu`` ones)."""

    alone: bool = False
    cpu: bool = False
    seconds: float = 0.0
    beside_cpu: bool = False


def write_units(path: Path, units: dict[str, Unit]) -> None:
    """Write ``units`` (by :func:`unit_of`) as JSON to ``path`` atomically (each worker writes the
    same file; the controller reads it once all have collected)."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({k: asdict(u) for k, u in units.items()}))
    tmp.replace(path)


class ListScheduling(LoadScopeScheduling):  # type: ignore[misc]
    """xdist's scope scheduling with the hand-out rules of the module docstring.

    ``units_path`` is the file :func:`write_units` wrote; when it cannot be read every unit counts
    as a short shared one (said once on stderr). If the alone worker dies, the alone units left go
    to a worker that holds no shared unit (its replacement), never behind a shared one, which
    would wait for them.
    """

    def __init__(self, config: Any, log: Any = None, *, units_path: Path) -> None:
        config.option.loadscopereorder = False  # collection order; the rules pick, not the queue's order
        super().__init__(config, log)
        self._units_path = units_path
        self._units: dict[str, Unit] | None = None
        self._alone_node: Any = None

    def _split_scope(self, nodeid: str) -> str:
        return unit_of(nodeid)

    def _unit(self, scope: str) -> Unit:
        """What the workers wrote of ``scope``."""
        if self._units is None:
            try:
                raw = json.loads(self._units_path.read_text())
                self._units = {k: Unit(bool(v["alone"]), bool(v["cpu"]), float(v["seconds"]), bool(v.get("beside_cpu")))
                               for k, v in raw.items()}
            except (OSError, ValueError, KeyError, TypeError) as exc:
                sys.stderr.write(f"e2e: the scenarios' marks are unreadable ({exc}): every unit is a short shared one\n")
                self._units = {}
        return self._units.get(scope, Unit())

    def _holds(self, node: Any) -> list[str]:
        """The units assigned to ``node`` with a test not run yet."""
        return [s for s, tests in self.assigned_work.get(node, {}).items() if not all(tests.values())]

    def _pick(self, node: Any) -> str | None:
        """The unit to hand ``node`` next, or ``None`` when nothing in the queue is for it."""
        if self._alone_node is None and self.nodes:
            self._alone_node = self.nodes[0]
        queue = [s for s, tests in self.workqueue.items() if not all(tests.values())]
        alone = [s for s in queue if self._unit(s).alone]
        if alone:
            orphaned = self._alone_node not in self.nodes and not any(not self._unit(s).alone for s in self._holds(node))
            if node is self._alone_node or orphaned:
                return min(alone, key=lambda s: (not self._unit(s).cpu, queue.index(s)))
        shared = [s for s in queue if not self._unit(s).alone]
        if not shared:
            return None
        if any(self._unit(s).seconds > 0 for s in self._holds(node)):
            return min(shared, key=lambda s: (self._unit(s).seconds, -queue.index(s)))  # the shortest, last
        # One that may run beside the cpu ones first (it need not wait for them), then the longest, first.
        return min(shared, key=lambda s: (not self._unit(s).beside_cpu, -self._unit(s).seconds, queue.index(s)))

    def _assign_work_unit(self, node: Any) -> None:
        scope = self._pick(node)
        if scope is None:
            return
        tests = self.workqueue.pop(scope)
        self.assigned_work.setdefault(node, {})[scope] = tests
        collection = self.registered_collections[node]
        node.send_runtest_some([collection.index(n) for n, done in tests.items() if not done])

    def _reschedule(self, node: Any) -> None:
        if node.shutting_down:
            return
        while len(self._holds(node)) < 2 and self._pick(node) is not None:
            self._assign_work_unit(node)
        if self._pick(node) is None:
            node.shutdown()

    def remove_node(self, node: Any) -> str | None:
        # xdist puts the whole workload of a dead worker back in the queue: its finished units too,
        # which would be handed out again as empty ones (and a worker given nothing waits forever).
        workload = self.assigned_work.get(node, {})
        for scope in [s for s, tests in workload.items() if all(tests.values())]:
            del workload[scope]
        crashed: str | None = super().remove_node(node)
        return crashed
