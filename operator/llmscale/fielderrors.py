"""Validation errors as kubectl writes them: one line per field, no pydantic dump.

``spec.replicas.min: Invalid value: -1: must be ≥ 0``;
``spec.resources.gpuType: Unsupported value: "h100": did you mean "h100-sxm"? (supported: "a100-80gb", ...)``.

A value outside a closed list (presets, GPU types, time zones) gets the closest names by
:func:`difflib.get_close_matches` and, where the list is long (598 time zones), only those: the
whole list is the CRD's and the docs' business, not an error line's.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable, Sequence
from typing import Any

import pydantic

__all__ = ["LIST_IN_FULL_MAX", "did_you_mean", "field_errors", "format_value", "suggestion"]

#: A closed list longer than this is not printed whole in an error; the close matches are.
LIST_IN_FULL_MAX = 12

_BOUNDS = {"greater_than_equal": ("ge", "≥"), "greater_than": ("gt", ">"),
           "less_than_equal": ("le", "≤"), "less_than": ("lt", "<")}


def format_value(value: Any, limit: int = 60) -> str:
    """``value`` as kubectl prints it in an error: JSON for scalars, ``object``/``array`` otherwise."""
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list | tuple):
        return "array"
    text = json.dumps(value, default=str, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def did_you_mean(value: object, choices: Iterable[str], n: int = 2) -> list[str]:
    """The names of ``choices`` closest to ``value``, best first, at most ``n`` (case-insensitive).

    A choice that contains the value whole comes first: a name typed without its area or suffix
    (``London`` for ``Europe/London``, ``h100`` for ``h100-sxm``); then :mod:`difflib`'s matches."""
    if not isinstance(value, str) or not value:
        return []
    by_lower = {c.lower(): c for c in choices}
    typed = value.lower()
    if typed in by_lower:  # only the case differs
        return [by_lower[typed]]
    containing = sorted((c for c in by_lower if typed in c and c != typed), key=len) if len(typed) >= 3 else []
    close = difflib.get_close_matches(typed, list(by_lower), n=n, cutoff=0.6)
    return [by_lower[c] for c in dict.fromkeys([*containing, *close])][:n]


def suggestion(value: object, choices: Iterable[str]) -> str:
    """``: did you mean "x"?`` (or ``"x" or "y"``) for ``value`` among ``choices``; "" when none is close."""
    close = did_you_mean(value, choices)
    return ": did you mean " + " or ".join(json.dumps(c) for c in close) + "?" if close else ""


def _choices(err: Any) -> list[str]:
    expected = (err.get("ctx") or {}).get("expected", "")
    # pydantic's literal_error: "'a', 'b' or 'c'"
    return [part.strip().strip("'") for part in expected.replace(" or ", ", ").split(", ") if part.strip()]


def _line(path: str, err: Any) -> str:
    kind = err.get("type", "")
    value = err.get("input")
    ctx = err.get("ctx") or {}
    if kind == "missing":
        return f"{path}: Required value"
    if kind == "extra_forbidden":
        return f"{path}: Unsupported field"
    if kind == "literal_error":
        choices = _choices(err)
        hint = suggestion(value, choices)
        text = f"{path}: Unsupported value: {format_value(value)}{hint}"
        if len(choices) <= LIST_IN_FULL_MAX:
            text += " (supported: " + ", ".join(json.dumps(c) for c in choices) + ")"
        elif not hint:
            text += f" (one of {len(choices)} names; none is close)"
        return text
    if kind in _BOUNDS:
        key, sign = _BOUNDS[kind]
        return f"{path}: Invalid value: {format_value(value)}: must be {sign} {ctx.get(key)}"
    msg = str(err.get("msg", "")).removeprefix("Value error, ").removeprefix("Assertion failed, ")
    msg = msg.removeprefix(f"{path}: ")
    return f"{path}: Invalid value: {format_value(value)}: {msg}"


def field_errors(exc: pydantic.ValidationError, prefix: Sequence[str] = ()) -> list[str]:
    """One kubectl-style line per error of ``exc``, each led by its field path (``prefix`` first,
    e.g. ``("spec",)``; list indices as ``[i]``)."""
    lines = []
    for err in exc.errors():
        path = ""
        for part in (*prefix, *err.get("loc", ())):
            if isinstance(part, int):
                path += f"[{part}]"
            else:
                path += ("." if path else "") + str(part)
        lines.append(_line(path or "<root>", err))
    return lines
