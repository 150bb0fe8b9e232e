"""Repository-wide pytest hooks.

In CI (``CI=true``) a skipped test is a failure: "a skipped suite reported as passing" is a defect,
so every test that needs a binary, a server or a cluster must have it there. Locally a skip stays a
skip (with its reason), so a developer without Prometheus can still run the rest.
"""

from __future__ import annotations

import os

import pytest


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() in {"1", "true", "yes"}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    outcome = yield
    report = outcome.get_result()
    if _in_ci() and report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"Skipped in CI, which counts as a failure: {reason}"
