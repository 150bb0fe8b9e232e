"""The CLI dispatcher: verbs, help and version."""

from __future__ import annotations

import importlib

import pytest

from llmscale import __version__
from llmscale.cli import VERBS, command, main


def test_no_verb_prints_the_help(capsys: pytest.CaptureFixture[str]) -> None:
    main([])
    assert "VERB" in capsys.readouterr().out


def test_no_verb_fails_with_exit_2() -> None:
    assert main([]) == 2


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert __version__ in capsys.readouterr().out


def test_design_verbs_are_all_present() -> None:
    # The verbs are a fixed contract (docs/cli.md).
    assert set(VERBS) == {"run", "crd", "plan", "simulate", "engine", "demo", "batch", "calibrate", "report", "render", "completion"}


@pytest.mark.parametrize("verb", sorted(VERBS))
def test_every_verb_module_has_the_command_interface(verb: str) -> None:
    module = importlib.import_module(VERBS[verb][0])
    assert command(verb) is module
    assert callable(module.add_arguments)
    assert callable(module.main)
