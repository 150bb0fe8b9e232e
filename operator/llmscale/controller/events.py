"""The Kubernetes Events the operator posts on an LLMDeployment: ``ScaledUp``/``ScaledDown`` for
each applied scale, an ``InvalidSpec`` Warning per distinct validation message, a
``PolicyStateUnreadable`` Warning when the saved policy memory could not be read, a
``StalledPods`` Warning when a pod's engine starts to hang, ``BatchPoolRemoved``, an
``ApplyFailed`` Warning per distinct refusal of a child's apply, and an ``OtherAutoscaler``
Warning when an HPA or a KEDA ScaledObject targets a child Deployment. Posted through Kopf
(``kopf.info``/``kopf.warn``), which attaches them to the object and posts them in the
background. In ``Advisory`` mode: ``AdvisedScaleUp`` / ``AdvisedScaleDown`` once per new advice;
with ``spec.scaleTargetRef``: a ``FailedGetScale`` Warning per distinct failure to read the
workload. ``EngineUpgraded`` (once per engine change, with the capacity note before and after) is
posted by :mod:`llmscale.controller.livefit`.
"""

from __future__ import annotations

from collections.abc import Sequence

import kopf

from llmscale.controller.manifests.names import INTERACTIVE, Pool
from llmscale.policy.types import Reason

__all__ = [
    "EVENT_MESSAGE_MAX",
    "advised_message",
    "clip",
    "post_advised",
    "post_apply_failed",
    "post_batch_removed",
    "post_invalid",
    "post_other_autoscaler",
    "post_policy_state_unreadable",
    "post_scaled",
    "post_stalled",
    "post_target_error",
    "post_wake_refused",
    "scaled_message",
]

#: The API server cuts ``Event.message`` past 1 KiB; messages are clipped before that, whole.
EVENT_MESSAGE_MAX = 1000


def clip(message: str) -> str:
    """Return ``message`` cut to :data:`EVENT_MESSAGE_MAX` characters, with ``…`` when cut."""
    return message if len(message) <= EVENT_MESSAGE_MAX else message[: EVENT_MESSAGE_MAX - 1] + "…"


def conclusion_first(reasons: Sequence[str]) -> list[str]:
    """Return a decision's reasons with its conclusion first: from the ``demand N replicas (…)``
    line on (demand, headroom, recommendation, windows and limits, the pools), then the signals'
    lines that led to it. An Event's message is clipped at :data:`EVENT_MESSAGE_MAX`, and
    ``kubectl describe`` shows its start: the start should say what was decided and why."""
    at = next((i for i, r in enumerate(reasons) if r.startswith("demand ")), 0)
    return [*reasons[at:], *reasons[:at]]


def scaled_message(namespace: str, name: str, pool: Pool, old: int, new: int, reasons: str) -> str:
    """Return the message of a scale, e.g. ``Scaled LLMDeployment serving/chat from 2 to 6 replicas:
    <reasons>`` (or ``Scaled batch pool of LLMDeployment ...``), clipped; the log line says the same."""
    what = f"LLMDeployment {namespace}/{name}"
    if pool != INTERACTIVE:
        what = f"batch pool of {what}"
    return clip(f"Scaled {what} from {old} to {new} replicas: {reasons}")


def post_scaled(body: kopf.Body, old: int, new: int, message: str) -> None:
    """Post a ``ScaledUp`` (``new > old``) or ``ScaledDown`` Event with :func:`scaled_message`'s text."""
    kopf.info(body, reason="ScaledUp" if new > old else "ScaledDown", message=clip(message))


def post_invalid(body: kopf.Body, message: str) -> None:
    """Post an ``InvalidSpec`` Warning Event with the validation message."""
    kopf.warn(body, reason="InvalidSpec", message=clip(message))


def post_policy_state_unreadable(body: kopf.Body, message: str) -> None:
    """Post a ``PolicyStateUnreadable`` Warning Event: part of ``status.policyState`` was dropped."""
    kopf.warn(body, reason=Reason.PolicyStateUnreadable, message=clip(message))


def post_stalled(body: kopf.Body, message: str) -> None:
    """Post a ``StalledPods`` Warning Event: a pod's engine hangs (running requests, no token)."""
    kopf.warn(body, reason=Reason.StalledPods, message=clip(message))


def post_wake_refused(body: kopf.Body, message: str) -> None:
    """Post a ``WakeQueryRefused`` Warning Event: ``spec.scaling.wake.query`` reads outside the
    LLMDeployment's namespace or is not one expression, so it is not sent (docs/security.md)."""
    kopf.warn(body, reason="WakeQueryRefused", message=clip(message))


def post_batch_removed(body: kopf.Body, batch_name: str) -> None:
    """Post a ``BatchPoolRemoved`` Event: Deployment and Service ``batch_name`` were deleted with
    ``spec.batch``."""
    kopf.info(body, reason="BatchPoolRemoved",
              message=f"Deleted Deployment and Service {batch_name}: spec.batch was removed")


def post_apply_failed(body: kopf.Body, message: str) -> None:
    """Post an ``ApplyFailed`` Warning Event: the API server refused a child's apply."""
    kopf.warn(body, reason="ApplyFailed", message=clip(message))


def post_other_autoscaler(body: kopf.Body, message: str) -> None:
    """Post an ``OtherAutoscaler`` Warning Event: another autoscaler targets a child Deployment,
    and the operator stopped writing its replicas."""
    kopf.warn(body, reason="OtherAutoscaler", message=clip(message))


def advised_message(namespace: str, name: str, current: int, advised: int, reasons: str) -> str:
    """Return the message of an advice in ``Advisory`` mode, e.g. ``Advised scaling LLMDeployment
    serving/chat from 2 to 6 replicas (Advisory: not applied): <reasons>``, clipped."""
    return clip(f"Advised scaling LLMDeployment {namespace}/{name} from {current} to {advised} replicas "
                f"(Advisory: not applied): {reasons}")


def post_advised(body: kopf.Body, current: int, advised: int, message: str) -> None:
    """Post an ``AdvisedScaleUp`` (``advised > current``) or ``AdvisedScaleDown`` Event."""
    kopf.info(body, reason="AdvisedScaleUp" if advised > current else "AdvisedScaleDown", message=clip(message))


def post_target_error(body: kopf.Body, reason: str, message: str) -> None:
    """Post a Warning Event (reason ``FailedGetScale``): the workload of ``spec.scaleTargetRef``
    could not be read."""
    kopf.warn(body, reason=reason, message=clip(message))
