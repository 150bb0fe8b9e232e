"""The log line formats of ``llmscale run``: text for people, JSON for log pipelines.

JSON lines carry ``time`` (RFC 3339, milliseconds, UTC), ``level``, ``logger``, ``message``, and
for a line about a Kubernetes object (Kopf's per-object loggers) its ``namespace``, ``name`` and
``kind``; an exception adds ``exception`` (the traceback as text). One object a line, so Loki,
Elasticsearch or Cloud Logging parse it without a pattern.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime

__all__ = ["TEXT_FORMAT", "JsonFormatter", "formatter"]

#: The text format: time, level, logger, message.
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class JsonFormatter(logging.Formatter):
    """Format each record as one JSON object (module docstring)."""

    def format(self, record: logging.LogRecord) -> str:
        """Return the record as one line of JSON."""
        line: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, tz=UTC).isoformat(timespec="milliseconds").replace(
                "+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        ref = getattr(record, "k8s_ref", None)
        if isinstance(ref, dict):
            for key in ("namespace", "name", "kind"):
                if ref.get(key):
                    line[key] = ref[key]
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False, default=str)


def formatter(kind: str) -> logging.Formatter:
    """Return the formatter of ``kind``: ``text`` or ``json``.

    Raises:
        ValueError: any other kind.
    """
    if kind == "json":
        return JsonFormatter()
    if kind == "text":
        return logging.Formatter(TEXT_FORMAT)
    raise ValueError(f"log format must be text or json, got {kind!r}")
