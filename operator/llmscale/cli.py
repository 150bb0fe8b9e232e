"""The ``llmscale`` command line: one verb per component.

Each verb lives in ``llmscale.commands.<verb>`` and exposes ``add_arguments(parser)`` and
``main(args) -> int``. Modules are imported only when their verb runs, so ``llmscale plan`` does not
pay for Kopf or the Kubernetes client.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

__all__ = ["VERBS", "build_parser", "main"]

#: verb -> (module, one-line help)
VERBS: dict[str, tuple[str, str]] = {
    "run": ("llmscale.commands.run", "run the operator (Kopf) against the current kubeconfig"),
    "crd": ("llmscale.commands.crd", "print the LLMDeployment CustomResourceDefinition as YAML"),
    "plan": ("llmscale.commands.plan", "capacity note for a model on a GPU (roofline model)"),
    "simulate": ("llmscale.commands.simulate", "replay a trace through a simulated fleet under each policy"),
    "engine": ("llmscale.commands.engine", "run the mock GPU engine (speaks vLLM's OpenAI API and metrics)"),
    "demo": ("llmscale.commands.demo", "run the end-to-end demo on the local cluster"),
}


def build_parser(verb: str | None = None) -> argparse.ArgumentParser:
    """Return the top-level parser; with ``verb``, only that verb's module is imported."""
    return _build(verb)[0]


def _build(verb: str | None) -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    from llmscale import __version__

    parser = argparse.ArgumentParser(
        prog="llmscale",
        description="Scale LLM inference replicas on leading signals: queue depth, KV cache, preemptions.",
    )
    parser.add_argument("--version", action="version", version=f"llmscale {__version__}")
    sub = parser.add_subparsers(dest="verb", metavar="VERB")
    verb_parsers: dict[str, argparse.ArgumentParser] = {}
    for name, (module_name, help_text) in VERBS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        verb_parsers[name] = p
        if verb == name:
            importlib.import_module(module_name).add_arguments(p)
    return parser, verb_parsers


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``llmscale`` console script; returns the process exit status."""
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
    module = importlib.import_module(VERBS[args.verb][0])
    try:
        return int(module.main(args) or 0)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
