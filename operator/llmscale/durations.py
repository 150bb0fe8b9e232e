"""The one duration grammar of every llmscale flag, variable and setting.

One or more ``<number><unit>`` parts, the number a decimal (``1.5m``), the units PromQL's —
``ms``, ``s``, ``m``, ``h``, ``d``, ``w`` (7 days), ``y`` (365 days) — largest first or not:
``90s``, ``1.5m``, ``1h30m``, ``500ms``, ``1w``; a bare number is seconds (``90``). Values sent to
Prometheus are written back in PromQL's own form (``llmscale.signals.queries.format_duration``:
``1.5m`` becomes ``90s``), so a user never needs to know which grammar a flag ends up in.
"""

from __future__ import annotations

import re

__all__ = ["EXAMPLES", "parse_duration"]

_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w|y)")
_BARE = re.compile(r"\d+(?:\.\d+)?")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0, "y": 31536000.0}
EXAMPLES = "90s, 1.5m, 1h30m, 500ms or 1w"


def parse_duration(text: str, *, allow_zero: bool = False) -> float:
    """Return the duration ``text`` in seconds (grammar: module docstring).

    Raises:
        ValueError: ``text`` is not a duration (or is zero, unless ``allow_zero``); the message
            quotes it and gives examples.
    """
    s = text.strip()
    if _BARE.fullmatch(s):
        total = float(s)
    else:
        pos, total = 0, 0.0
        for m in _PART.finditer(s):
            if m.start() != pos:
                break
            total += float(m.group(1)) * _UNIT_S[m.group(2)]
            pos = m.end()
        if not s or pos != len(s):
            raise ValueError(f"{text!r} is not a duration such as {EXAMPLES}")
    if total == 0 and not allow_zero:
        raise ValueError(f"{text!r} is not a duration such as {EXAMPLES}: it must be more than zero")
    return total
