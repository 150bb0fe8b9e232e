"""Reading an LLMDeployment's spec: the validated model, or :class:`InvalidSpec` with a one-line
message naming every bad field.

The API server validates against the CRD's schema, but an object written before the CRD was
installed (or updated), or a combination the operator cannot run (the mock engine without a
preset), still reaches the operator: it must say why and carry on with the other objects.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pydantic

from llmscale.api import LLMDeploymentSpec, name_problem
from llmscale.controller.events import EVENT_MESSAGE_MAX
from llmscale.controller.merge import TemplateConflict, merge_template
from llmscale.controller.names import INTERACTIVE
from llmscale.controller.podtemplate import UnsupportedSpecError, engine_command, pod_template

__all__ = ["InvalidSpec", "read_spec"]


class InvalidSpec(ValueError):
    """A spec the operator cannot use; ``str()`` is the message for the condition and the Event."""


def _short(exc: pydantic.ValidationError) -> str:
    """One clause per validation error: ``spec.model.preset: Input should be ...``."""
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in ("spec", *err.get("loc", ())))
        parts.append(f"{loc}: {err.get('msg', '')}")
    return "; ".join(parts)[:EVENT_MESSAGE_MAX]


def read_spec(body: Mapping[str, Any]) -> LLMDeploymentSpec:
    """Return the spec of the LLMDeployment ``body``, validated and runnable.

    Raises:
        InvalidSpec: the spec fails the pydantic model (every error, ``;``-separated, each led by
            its field path), names a combination the operator cannot turn into pods
            (:class:`~llmscale.controller.podtemplate.UnsupportedSpecError`), has a ``spec.template``
            that changes what llmscale owns (:class:`~llmscale.controller.merge.TemplateConflict`,
            the message naming the field), or the object's name cannot name its Service (an object
            created before the CRD's rule on ``metadata.name``).
    """
    problem = name_problem(str(body.get("metadata", {}).get("name") or ""))
    if problem is not None:
        raise InvalidSpec(problem)
    try:
        spec = LLMDeploymentSpec.model_validate(dict(body.get("spec") or {}))
    except pydantic.ValidationError as exc:
        raise InvalidSpec(_short(exc)) from None
    try:
        engine_command(spec)
        if spec.template is not None:
            name = str((body.get("metadata") or {}).get("name") or "llmdeployment")
            merge_template(pod_template(name, spec, INTERACTIVE), spec.template, spec.resources.gpu_resource_name)
    except (UnsupportedSpecError, TemplateConflict) as exc:
        raise InvalidSpec(str(exc)) from None
    return spec
