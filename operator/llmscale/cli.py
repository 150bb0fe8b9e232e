"""The ``llmscale`` command line: one verb per component.

Each verb lives in ``llmscale.commands.<verb>`` and exposes ``add_arguments(parser)`` and
``main(args) -> int``. Modules are imported only when their verb runs, so ``llmscale plan`` does not
pay for Kopf or the Kubernetes client.

Conventions every verb keeps (docs/cli.md; tests/test_cli_conventions.py):

- ``-o/--output`` is the format of what goes to stdout (``table``, ``json``, ``yaml``), never a
  file (:mod:`llmscale.commands.output`).
- Exit status **0** on success; **2** when the command as given cannot run — a usage error: an
  unknown flag or value (argparse), an input file that cannot be read or is invalid, a model that
  does not fit its GPUs; **1** when it ran and failed — a check that found a difference, a
  cluster, port or output that failed, or stdout closed by its reader; **130** on Ctrl-C.
- A closed stdout (``llmscale plan ... | head -1``) ends the command quietly, without a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import select
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import NoReturn

__all__ = ["VERBS", "build_parser", "command", "main", "verb_parser"]

#: verb -> (module, one-line help)
VERBS: dict[str, tuple[str, str]] = {
    "run": ("llmscale.commands.run", "run the operator (Kopf) against the current kubeconfig"),
    "crd": ("llmscale.commands.crd", "print the LLMDeployment CustomResourceDefinition (YAML or JSON)"),
    "plan": ("llmscale.commands.plan", "capacity note for a model on a GPU (roofline model)"),
    "simulate": ("llmscale.commands.simulate", "replay a trace through a simulated fleet under each policy"),
    "engine": ("llmscale.commands.engine", "run the mock GPU engine (speaks vLLM's OpenAI API and metrics)"),
    "demo": ("llmscale.commands.demo", "run the end-to-end demo on the local cluster"),
    "batch": ("llmscale.commands.batch", "the batch client a batch Job runs (batch run), and its input's size"),
    "calibrate": ("llmscale.commands.calibrate", "measure a live engine and fit the performance model to it"),
    "report": ("llmscale.commands.report", "fleet cost report: GPU-hours, utilisation, $/M tokens, build or buy"),
    "render": ("llmscale.commands.render", "print the objects the operator would create for LLMDeployment manifests"),
    "completion": ("llmscale.commands.completion", "print the shell completion script (bash, zsh or fish)"),
}


def command(verb: str) -> ModuleType:
    """Return the module of ``verb`` (``llmscale.commands.<verb>``), imported now.

    The imports are written out, not built from ``VERBS`` by name, so that import-linter sees
    the CLI's dependencies (pyproject.toml's layers); they are inside the function so that a verb
    pays only for its own module.

    Raises:
        KeyError: ``verb`` is not one of :data:`VERBS`.
    """
    if verb == "run":
        from llmscale.commands import run

        return run
    if verb == "crd":
        from llmscale.commands import crd

        return crd
    if verb == "plan":
        from llmscale.commands import plan

        return plan
    if verb == "simulate":
        from llmscale.commands import simulate

        return simulate
    if verb == "engine":
        from llmscale.commands import engine

        return engine
    if verb == "demo":
        from llmscale.commands import demo

        return demo
    if verb == "batch":
        from llmscale.commands import batch

        return batch
    if verb == "calibrate":
        from llmscale.commands import calibrate

        return calibrate
    if verb == "report":
        from llmscale.commands import report

        return report
    if verb == "render":
        from llmscale.commands import render

        return render
    if verb == "completion":
        from llmscale.commands import completion

        return completion
    raise KeyError(verb)


class _Parser(argparse.ArgumentParser):
    """argparse's parser, whose "invalid choice" error names the closest choices (difflib)."""

    def error(self, message: str) -> NoReturn:
        import re

        m = re.search(r"invalid choice: '(.*?)' \(choose from (.*)\)$", message)
        if m:
            from llmscale.fielderrors import suggestion

            choices = [c.strip().strip("'") for c in m.group(2).split(",")]
            message = message[: m.start()] + f"invalid choice: {m.group(1)!r}{suggestion(m.group(1), choices)}" \
                f" (choose from {m.group(2)})"
        super().error(message)


def build_parser(verb: str | None = None) -> argparse.ArgumentParser:
    """Return the top-level parser; with ``verb``, only that verb's module is imported."""
    return _build(verb)[0]


def verb_parser(verb: str) -> argparse.ArgumentParser:
    """Return the parser of ``verb`` alone (its options; prog ``llmscale <verb>``).

    Raises:
        KeyError: ``verb`` is not one of :data:`VERBS`.
    """
    if verb not in VERBS:
        raise KeyError(f"unknown verb {verb!r}; known: {', '.join(VERBS)}")
    return _build(verb)[1][verb]


def _build(verb: str | None, every_verb: bool = False) -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    from llmscale import __version__

    parser = _Parser(
        prog="llmscale",
        description="Scale LLM inference replicas on leading signals: queue depth, KV cache, preemptions.",
    )
    parser.add_argument("--version", action="version", version=f"llmscale {__version__}")
    sub = parser.add_subparsers(dest="verb", metavar="VERB")
    verb_parsers: dict[str, argparse.ArgumentParser] = {}
    for name, (_, help_text) in VERBS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        verb_parsers[name] = p
        if verb == name or every_verb:
            command(name).add_arguments(p)
    return parser, verb_parsers


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``llmscale`` console script; returns the process exit status."""
    if argv is None and "_ARGCOMPLETE" in os.environ:
        # The shell's completion script asks (llmscale completion): every verb's flags, then exit.
        import argcomplete

        argcomplete.autocomplete(_build(None, every_verb=True)[0])
    args_list = list(sys.argv[1:] if argv is None else argv)
    verb = next((a for a in args_list if not a.startswith("-")), None)
    if verb not in VERBS:
        verb = None
    parser, verb_parsers = _build(verb)
    args, extra = parser.parse_known_args(args_list)
    if extra:
        # Blame the verb's own parser, so the usage shown is the verb's ("llmscale plan: error: ...").
        (verb_parsers[args.verb] if args.verb else parser).error(f"unrecognized arguments: {' '.join(extra)}")
    if not args.verb:
        parser.print_help()
        return 2
    module = command(args.verb)
    try:
        status = int(module.main(args) or 0)
        # Flush now rather than at interpreter exit, where a closed pipe can only be reported.
        sys.stdout.flush()
        return status
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        if not _stdout_reader_gone():
            raise  # another pipe or socket broke: a real failure, with its traceback
        return _quiet_after_closed_stdout()


def _stdout_reader_gone() -> bool:
    """Whether stdout is a pipe whose reader has closed it (``poll`` reports an error on it)."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, ValueError, io.UnsupportedOperation):
        return False
    if not hasattr(select, "poll"):  # not on every platform: assume the broken pipe was stdout
        return True
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))


def _quiet_after_closed_stdout() -> int:
    """Point stdout at /dev/null, so that the flush at interpreter exit does not fail again, and
    return 1 (the recipe of the Python documentation, :mod:`signal`, "Note on SIGPIPE")."""
    with contextlib.suppress(OSError, ValueError, io.UnsupportedOperation):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    return 1


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
