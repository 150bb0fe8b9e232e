"""Waiting on a condition in the tests that drive a real cluster or process (tests/cluster, e2e):
poll, never a fixed sleep."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import pytest

__all__ = ["wait_for"]

T = TypeVar("T")


def wait_for(what: str, probe: Callable[[], T | None], timeout_s: float = 30.0, interval_s: float = 0.3) -> T:
    """Poll ``probe`` every ``interval_s`` until it returns a truthy value (returned); fail the test
    after ``timeout_s`` with ``what`` and the last value seen.

    Exceptions from ``probe`` count as "not yet" (the last one is shown on failure): a 404, a
    KeyError on a half-written status, a refused connection.
    """
    deadline = time.monotonic() + timeout_s
    last: object = None
    while True:
        try:
            value = probe()
            if value:
                return value
            last = value
        except Exception as exc:  # not there yet
            last = f"{type(exc).__name__}: {exc}"
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s:.0f} s waiting for {what}; last: {last!r}", pytrace=False)
        time.sleep(interval_s)
