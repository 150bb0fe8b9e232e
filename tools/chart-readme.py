#!/usr/bin/env python3
"""Write the values table of charts/llmscale/README.md from charts/llmscale/values.yaml.

The helm-docs convention (https://github.com/norwoodj/helm-docs): a comment block starting with
``# --`` right above a key is that key's description (following ``#`` lines continue it). Every
leaf value gets a row ``| key | type | default | description |``; a map or list whose key has its
own ``# --`` description is one row (its whole value the default) and its children none. The
table replaces what lies between ``<!-- BEGIN GENERATED: values -->`` and
``<!-- END GENERATED: values -->`` in the README; the rest of the README is written by hand.

    tools/chart-readme.py            # rewrite the table
    tools/chart-readme.py --check    # exit 1 when the README is stale (tests/deploy/test_chart_readme.py)

Standard library and PyYAML only.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
VALUES = ROOT / "charts" / "llmscale" / "values.yaml"
README = ROOT / "charts" / "llmscale" / "README.md"
BEGIN, END = "<!-- BEGIN GENERATED: values -->", "<!-- END GENERATED: values -->"
_KEY = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z0-9_.-]+):(?:\s|$)")


def descriptions(text: str) -> dict[str, str]:
    """Return ``{dotted.key: description}`` from the ``# --`` comments of a values file."""
    out: dict[str, str] = {}
    stack: list[tuple[int, str]] = []  # (indent, key) of the enclosing maps
    pending: list[str] | None = None
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("# --"):
            pending = [stripped[4:].strip()]
            continue
        if stripped.startswith("#"):
            if pending is not None:
                pending.append(stripped[1:].strip())
            continue
        if not stripped:
            pending = None
            continue
        m = _KEY.match(line)
        if m is None:  # a list item or a continuation: not a key of a map
            continue
        indent = len(m.group("indent"))
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = ".".join([k for _, k in stack] + [m.group("key")])
        if pending is not None:
            out[path] = " ".join(p for p in pending if p)
            pending = None
        stack.append((indent, m.group("key")))
    return out


def _type(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "list"
    return "object" if isinstance(value, dict) else "null"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def rows(values: dict[str, Any], described: dict[str, str], prefix: str = "") -> list[str]:
    """The table rows of ``values`` (one per leaf, or per described map/list), in file order."""
    out: list[str] = []
    for key, value in values.items():
        path = f"{prefix}{key}"
        descend = isinstance(value, dict) and value and path not in described
        if descend:
            out.extend(rows(value, described, f"{path}."))
            continue
        default = json.dumps(value, ensure_ascii=False)
        out.append(f"| `{path}` | {_type(value)} | `{_cell(default)}` | {_cell(described.get(path, ''))} |")
    return out


def table() -> str:
    """The generated block: the table of every value of values.yaml."""
    text = VALUES.read_text(encoding="utf-8")
    values = yaml.safe_load(text)
    body = rows(values, descriptions(text))
    return "\n".join(["| Key | Type | Default | Description |", "| --- | --- | --- | --- |", *body]) + "\n"


def render(readme: str) -> str:
    """Return ``readme`` with its generated block replaced by the current table.

    Raises:
        ValueError: the README has no generated block.
    """
    start, end = readme.find(BEGIN), readme.find(END)
    if start < 0 or end < start:
        raise ValueError(f"{README} has no {BEGIN} ... {END} block")
    return readme[: start + len(BEGIN)] + "\n" + table() + readme[end:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the README is stale, change nothing")
    args = parser.parse_args(argv)
    current = README.read_text(encoding="utf-8")
    wanted = render(current)
    if args.check:
        if wanted != current:
            print(f"stale: {README.relative_to(ROOT)} (run tools/chart-readme.py)", file=sys.stderr)
            return 1
        return 0
    README.write_text(wanted, encoding="utf-8")
    print(f"wrote {README.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
