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
from llmscale.controller.manifests.merge import TemplateConflict, merge_template
from llmscale.controller.manifests.names import INTERACTIVE
from llmscale.controller.manifests.podtemplate import UnsupportedSpecError, engine_command, pod_template
from llmscale.fielderrors import field_errors

__all__ = ["InvalidSpec", "read_spec"]


class InvalidSpec(ValueError):
    """A spec the operator cannot use; ``str()`` is the message for the condition and the Event
    (the problems ``;``-separated), ``lines`` the same problems one per line (``llmscale render``)."""

    def __init__(self, message: str, lines: list[str] | None = None) -> None:
        super().__init__(message)
        self.lines = lines if lines is not None else [message]


def _short(exc: pydantic.ValidationError) -> InvalidSpec:
    """One kubectl-style clause per validation error (:func:`llmscale.fielderrors.field_errors`):
    ``spec.replicas.min: Invalid value: -1: must be ≥ 0``."""
    lines = field_errors(exc, ("spec",))
    return InvalidSpec("; ".join(lines)[:EVENT_MESSAGE_MAX], lines)


def read_spec(body: Mapping[str, Any]) -> LLMDeploymentSpec:
    """Return the spec of the LLMDeployment ``body``, validated and runnable.

    Raises:
        InvalidSpec: the spec fails the pydantic model (every error, ``;``-separated, each led by
            its field path), names a combination the operator cannot turn into pods
            (:class:`~llmscale.controller.manifests.podtemplate.UnsupportedSpecError`), has a ``spec.template``
            that changes what llmscale owns (:class:`~llmscale.controller.manifests.merge.TemplateConflict`,
            the message naming the field), or the object's name cannot name its Service (an object
            created before the CRD's rule on ``metadata.name``).
    """
    problem = name_problem(str(body.get("metadata", {}).get("name") or ""))
    if problem is not None:
        raise InvalidSpec(problem)
    try:
        spec = LLMDeploymentSpec.model_validate(dict(body.get("spec") or {}))
    except pydantic.ValidationError as exc:
        raise _short(exc) from None
    try:
        engine_command(spec)
        if spec.template is not None:
            name = str((body.get("metadata") or {}).get("name") or "llmdeployment")
            merge_template(pod_template(name, spec, INTERACTIVE), spec.template, spec.resources.gpu_resource_name)
    except (UnsupportedSpecError, TemplateConflict) as exc:
        raise InvalidSpec(str(exc)) from None
    return spec
