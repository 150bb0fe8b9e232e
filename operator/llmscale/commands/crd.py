"""``llmscale crd``: print the LLMDeployment CustomResourceDefinition, or refresh generated docs.

Examples::

    llmscale crd | kubectl apply --server-side -f -
    llmscale crd --output crds/llmdeployments.llmscale.dev.yaml
    llmscale crd --check crds/llmdeployments.llmscale.dev.yaml     # exit 1 when stale
    llmscale crd --update-docs docs/api.md README.md               # refresh the reference tables
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from llmscale.crd import crd_yaml, replace_generated_blocks

__all__ = ["add_arguments", "main"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the options of ``llmscale crd`` to ``parser``."""
    parser.add_argument(
        "--output", "-o", type=Path, metavar="FILE", help="write the CRD YAML to FILE instead of stdout"
    )
    parser.add_argument(
        "--check",
        type=Path,
        metavar="FILE",
        help="compare FILE with the CRD generated now; exit 1 (and say so) when they differ",
    )
    parser.add_argument(
        "--update-docs",
        type=Path,
        nargs="+",
        metavar="MARKDOWN",
        help="rewrite the '<!-- BEGIN GENERATED: spec-reference -->' blocks (and status-reference) "
        "of these Markdown files in place, and print nothing else",
    )


def main(args: argparse.Namespace) -> int:
    """Run ``llmscale crd``; return 0, or 1 when ``--check`` finds a stale file."""
    if args.update_docs:
        for path in args.update_docs:
            text = path.read_text(encoding="utf-8")
            new = replace_generated_blocks(text)
            if new != text:
                path.write_text(new, encoding="utf-8")
                print(f"Updated generated reference tables in {path}", file=sys.stderr)
        return 0
    text = crd_yaml()
    if args.check is not None:
        current = args.check.read_text(encoding="utf-8") if args.check.exists() else ""
        if current != text:
            print(
                f"{args.check} differs from the CRD generated from llmscale.api; "
                f"run: llmscale crd --output {args.check}",
                file=sys.stderr,
            )
            return 1
        return 0
    if args.output is not None:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(text, encoding="utf-8")
        print(f"Wrote CustomResourceDefinition llmdeployments.llmscale.dev to {args.output}", file=sys.stderr)
        return 0
    sys.stdout.write(text)
    return 0
