"""Kopf peering priority: from the flag, the environment, or a random draw per process.

Kopf pauses every peer that sees a live peer of the same priority, so replicas sharing one
environment must not share a fixed priority (llmscale.controller.settings.OperatorSettings.peering_priority).
Two real peered operators on the local API server: tests/cluster/test_rbac_gitops.py.
"""

from __future__ import annotations

import argparse
import random

import pytest

from llmscale.commands.run import add_arguments
from llmscale.controller.handlers import configure_kopf
from llmscale.controller.settings import (
    PEERING_PRIORITY_RANGE,
    OperatorSettings,
    load_settings,
    with_peering_priority,
)


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(list(argv))


@pytest.mark.parametrize(
    ("argv", "env", "expected"),
    [
        pytest.param(["--peering", "p", "--peering-priority", "7"], {}, 7, id="flag"),
        pytest.param(["--peering", "p"], {"LLMSCALE_PEERING_PRIORITY": "-3"}, -3, id="env"),
        pytest.param(["--peering", "p", "--peering-priority", "9"], {"LLMSCALE_PEERING_PRIORITY": "3"}, 9,
                     id="flag-wins"),
        pytest.param(["--peering", "p"], {"LLMSCALE_PEERING_PRIORITY": ""}, None, id="empty-env-is-unset"),
        pytest.param(["--peering", "p"], {}, None, id="unset"),
        pytest.param(["--standalone"], {"LLMSCALE_PEERING": "p", "LLMSCALE_PEERING_PRIORITY": "5"}, None,
                     id="standalone-flag-drops-env-priority"),
    ],
)
def test_priority_is_read_from_flag_then_environment(argv: list[str], env: dict[str, str], expected: int | None) -> None:
    assert load_settings(parse("-n", "x", *argv), env).peering_priority == expected


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        pytest.param([], {"LLMSCALE_PEERING_PRIORITY": "high"}, "LLMSCALE_PEERING_PRIORITY", id="not-an-int"),
        pytest.param(["--standalone", "--peering-priority", "1"], {}, "needs peering", id="standalone"),
        pytest.param(["--peering", "p", "--peering-priority", str(2**31)], {}, "must be in", id="too-big"),
    ],
)
def test_bad_priorities_are_refused(argv: list[str], env: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        load_settings(parse("-n", "x", *argv), env)


def test_each_process_draws_its_own_priority_when_none_is_set() -> None:
    peered = OperatorSettings(namespaces=("x",), peering_name="p")
    drawn = {with_peering_priority(peered, random.Random(seed)).peering_priority for seed in range(50)}
    assert None not in drawn
    assert len(drawn) == 50  # no two of 50 processes tie
    assert all(1 <= p <= PEERING_PRIORITY_RANGE[1] for p in drawn if p is not None)


def test_a_configured_priority_is_left_alone() -> None:
    fixed = OperatorSettings(namespaces=("x",), peering_name="p", peering_priority=4)
    assert with_peering_priority(fixed, random.Random(0)) is fixed


def test_standalone_is_left_without_a_priority() -> None:
    standalone = OperatorSettings(namespaces=("x",), standalone=True)
    assert with_peering_priority(standalone, random.Random(0)).peering_priority is None


def test_the_default_peering_draws_a_priority() -> None:
    # The default (auto-detected) peering draws one too: it may meet another operator's process.
    assert with_peering_priority(OperatorSettings(namespaces=("x",)), random.Random(0)).peering_priority


def test_kopf_gets_the_priority() -> None:
    kopf_settings = configure_kopf(OperatorSettings(namespaces=("x",), peering_name="p", peering_priority=42))
    assert kopf_settings.peering.priority == 42
