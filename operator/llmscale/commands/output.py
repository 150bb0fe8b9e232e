"""The ``-o/--output FORMAT`` flag every verb that prints a document shares, and the printing.

One convention across the CLI (as ``kubectl -o``): ``-o``/``--output`` always names the format of
what goes to stdout — ``table`` for people where a verb has one, ``json`` and ``yaml`` for
programs, the same document in both — and never a file; files are written with ``>``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any, TextIO

import yaml

__all__ = ["add_output_argument", "write_document"]


def add_output_argument(parser: argparse.ArgumentParser, formats: Sequence[str], default: str) -> None:
    """Add ``-o/--output`` with the choices ``formats`` (``default`` among them) to ``parser``."""
    parser.add_argument(
        "-o", "--output", choices=tuple(formats), default=default, metavar="|".join(formats),
        help=f"output format: {', '.join(formats)} (default {default})",
    )


def write_document(doc: Any, fmt: str, stream: TextIO | None = None) -> None:
    """Write ``doc`` (JSON-serialisable: dicts, lists, str, int, float, bool, None) as ``fmt``
    (``json`` or ``yaml``) to ``stream`` (default stdout), ending with a newline.

    YAML gets the document as JSON would write it (NumPy scalars become plain numbers first), keys
    in their order, so the two formats always hold the same values.

    Raises:
        ValueError: ``fmt`` is neither ``json`` nor ``yaml``.
        TypeError: ``doc`` is not JSON-serialisable.
    """
    out = sys.stdout if stream is None else stream
    text = json.dumps(doc, indent=2)
    if fmt == "json":
        out.write(text + "\n")
    elif fmt == "yaml":
        out.write(yaml.safe_dump(json.loads(text), sort_keys=False, allow_unicode=True))
    else:
        raise ValueError(f"unknown output format {fmt!r}; expected json or yaml")
