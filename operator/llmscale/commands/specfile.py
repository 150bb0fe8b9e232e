"""An LLMDeployment read from a YAML file, for the verbs that take one (``simulate --spec``,
``plan --spec``): a file of several documents gives its first LLMDeployment; a file of one document
is read as it is (so a bare spec under ``kind``-less YAML still says what is wrong with it)."""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import ValidationError

from llmscale.api import LLMDeployment
from llmscale.fielderrors import field_errors

__all__ = ["SpecFileError", "read_llmdeployment"]


class SpecFileError(Exception):
    """The file could not be read as an LLMDeployment; ``lines`` are the messages, one a line
    (``path: field: message`` for each invalid field)."""

    def __init__(self, lines: list[str]) -> None:
        super().__init__("\n".join(lines))
        self.lines = lines


def read_llmdeployment(path: str | Path) -> LLMDeployment:
    """Return the LLMDeployment in ``path``, validated by the API models.

    Raises:
        SpecFileError: the file is unreadable or not YAML, holds no LLMDeployment, or it is invalid.
    """
    try:
        with Path(path).open(encoding="utf-8") as stream:  # the YAML error then names the file
            docs = [d for d in yaml.safe_load_all(stream) if d is not None]
    except (OSError, yaml.YAMLError) as exc:
        raise SpecFileError([f"cannot read the LLMDeployment {path}: {exc}"]) from exc
    found = [d for d in docs if isinstance(d, dict) and d.get("kind") == "LLMDeployment"]
    doc = found[0] if found else (docs[0] if len(docs) == 1 else None)
    if doc is None:
        raise SpecFileError([f"{path}: no LLMDeployment in its {len(docs)} documents"])
    try:
        return LLMDeployment.model_validate(doc)
    except ValidationError as exc:
        raise SpecFileError([f"{path}: {line}" for line in field_errors(exc)]) from exc
