"""Progress of a batch run: a rich bar on a terminal, a log line every so often, or nothing.

``--progress auto`` (the default) draws the bar when stderr is a terminal and stays quiet otherwise
(a Job's log then gets only the start and summary lines); ``plain`` logs a line every
``--progress-interval`` seconds (for ``kubectl logs``); ``bar`` and ``off`` force either.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Literal, Protocol

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

__all__ = ["ProgressMode", "Reporter", "make_reporter"]

ProgressMode = Literal["auto", "bar", "plain", "off"]

log = logging.getLogger("llmscale.batch")


class Reporter(Protocol):
    """Told of every result written; shows progress however it likes."""

    def start(self, total: int, done: int) -> None:
        """``total`` requests in this run, ``done`` of them already in the output."""

    def advance(self, ok: bool) -> None:
        """One more result written (``ok``: a 2xx response)."""

    def close(self) -> None:
        """The run is over."""


class _Silent:
    def start(self, total: int, done: int) -> None:
        pass

    def advance(self, ok: bool) -> None:
        pass

    def close(self) -> None:
        pass


class _Bar:
    def __init__(self, console: Console) -> None:
        self._progress = Progress(
            TextColumn("[bold]batch"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[failed]} failed"),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=console,
            transient=False,
        )
        self._task = self._progress.add_task("batch", total=None, failed=0)
        self._failed = 0

    def start(self, total: int, done: int) -> None:
        self._progress.update(self._task, total=total, completed=done)
        self._progress.start()

    def advance(self, ok: bool) -> None:
        if not ok:
            self._failed += 1
        self._progress.update(self._task, advance=1, failed=self._failed)

    def close(self) -> None:
        self._progress.stop()


class _Lines:
    """A log line at most every ``interval_s`` seconds of monotonic time."""

    def __init__(self, interval_s: float) -> None:
        self._interval = interval_s
        self._total = self._done = self._failed = self._start_done = 0
        self._t0 = self._last = 0.0

    def start(self, total: int, done: int) -> None:
        self._total, self._done, self._start_done = total, done, done
        self._t0 = self._last = time.monotonic()

    def advance(self, ok: bool) -> None:
        self._done += 1
        self._failed += 0 if ok else 1
        now = time.monotonic()
        if now - self._last >= self._interval:
            self._last = now
            rate = (self._done - self._start_done) / max(now - self._t0, 1e-9)
            log.info(
                "Wrote %d of %d batch results (%d failed), %.1f results/s",
                self._done,
                self._total,
                self._failed,
                rate,
            )

    def close(self) -> None:
        pass


def make_reporter(mode: ProgressMode, interval_s: float = 30.0) -> Reporter:
    """Return the reporter for ``mode`` (module docstring)."""
    if mode == "auto":
        mode = "bar" if sys.stderr.isatty() else "off"
    if mode == "bar":
        return _Bar(Console(stderr=True))
    if mode == "plain":
        return _Lines(interval_s)
    return _Silent()
