"""``llmscale crd``: print the LLMDeployment CustomResourceDefinition, or refresh generated docs.

Examples::

    llmscale crd | kubectl apply --server-side -f -
    llmscale crd > crds/llmdeployments.llmscale.dev.yaml           # what `make crd` runs
    llmscale crd -o json | jq '.spec.versions[0].schema'
    llmscale crd --check crds/llmdeployments.llmscale.dev.yaml     # exit 1 when stale
    llmscale crd --update-docs docs/api.md                         # refresh the reference tables

Exit status: 0; 1 when ``--check`` finds a stale file or a Markdown file cannot be written; 2 when
a file to check or update cannot be read, or names a generated block nobody generates. A Markdown
file without any block of ours is left as it is, with a warning.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from llmscale.commands.output import add_output_argument
from llmscale.crd import crd, crd_yaml, generated_block_names, replace_generated_blocks

__all__ = ["add_arguments", "main"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the options of ``llmscale crd`` to ``parser``."""
    add_output_argument(parser, ("yaml", "json"), "yaml")
    parser.add_argument(
        "--check",
        type=Path,
        metavar="FILE",
        help="compare FILE with the CRD YAML generated now; exit 1 (and say so) when they differ",
    )
    parser.add_argument(
        "--update-docs",
        type=Path,
        nargs="+",
        metavar="MARKDOWN",
        help="rewrite the '<!-- BEGIN GENERATED: spec-reference -->' blocks (and status-reference) "
        "of these Markdown files in place, and print nothing else",
    )


def _error(message: str, status: int) -> int:
    print(f"llmscale crd: error: {message}", file=sys.stderr)
    return status


def main(args: argparse.Namespace) -> int:
    """Run ``llmscale crd``; return the exit status (module docstring)."""
    if args.update_docs:
        # Read (and check) every file before writing any: a bad name loses nothing.
        texts: dict[Path, str] = {}
        for path in args.update_docs:
            try:
                texts[path] = path.read_text(encoding="utf-8")
            except OSError as exc:
                return _error(f"cannot read {path}: {exc.strerror or exc}", 2)
            if not generated_block_names(texts[path]):
                print(f"llmscale crd: warning: {path} has no '<!-- BEGIN GENERATED: spec-reference -->' "
                      "or 'status-reference' block; left as it is", file=sys.stderr)
            try:
                replace_generated_blocks(texts[path])
            except KeyError as exc:
                return _error(f"{path}: no generator for the block {exc.args[0]!r}", 2)
        for path, text in texts.items():
            new = replace_generated_blocks(text)
            if new != text:
                try:
                    path.write_text(new, encoding="utf-8")
                except OSError as exc:
                    return _error(f"cannot write {path}: {exc.strerror or exc}", 1)
                print(f"Updated generated reference tables in {path}", file=sys.stderr)
        return 0
    if args.check is not None:
        try:
            current = args.check.read_text(encoding="utf-8")
        except FileNotFoundError:
            current = ""  # a missing file is stale, not an error: `make crd` creates it
        except OSError as exc:
            return _error(f"cannot read {args.check}: {exc.strerror or exc}", 2)
        if current != crd_yaml():
            print(
                f"{args.check} differs from the CRD generated from llmscale.api; "
                f"run: llmscale crd > {args.check}",
                file=sys.stderr,
            )
            return 1
        return 0
    if args.output == "json":
        sys.stdout.write(json.dumps(crd(), indent=2) + "\n")
    else:
        sys.stdout.write(crd_yaml())
    return 0
