"""The batch Job contract: what llmscale reads from a Kubernetes Job, parsed into a :class:`BatchJob`.

Pure: takes the Job as the API server returns it (a dict, ``kubectl get job -o json`` shape) and
never raises on a bad one; what it cannot read is described in :attr:`BatchJob.problems` and the
value is treated as unknown. ``docs/batch.md`` is the user-facing statement of this contract.

Read from the Job (and nothing else):

- ``metadata.name``, ``metadata.creationTimestamp``; the label :data:`LABEL_DEPLOYMENT`.
- The annotations :data:`ANNOTATION_DEADLINE` (RFC 3339) and the size annotations
  :data:`ANNOTATION_REQUESTS`, :data:`ANNOTATION_INPUT_TOKENS`, :data:`ANNOTATION_OUTPUT_TOKENS`
  (decimal integers; ``llmscale batch size`` prints them for an input file).
- The annotation :data:`ANNOTATION_CONCURRENCY` (requests in flight per pod), else the
  ``--concurrency`` argument of a container that runs ``llmscale batch run`` in the pod template,
  else the client's default :data:`DEFAULT_CLIENT_CONCURRENCY`; and ``spec.parallelism``.
- ``spec.suspend``, ``spec.completionMode``, ``spec.completions``.
- ``status.active``, ``status.terminating`` (pods being deleted: Kubernetes ≥ 1.28 counts them
  here, not in ``active``), ``status.succeeded``, ``status.conditions`` (``Complete``, ``Failed``, and
  the terminal-to-be ``SuccessCriteriaMet``/``FailureTarget`` of Kubernetes ≥ 1.31).

Written to the Job by llmscale: ``spec.suspend`` only (by the operator, phase B of issue 13).

A Job another manager suspends is that manager's (issue 21): Kueue (its label
:data:`LABEL_KUEUE_QUEUE`, or a field manager named ``kueue…`` owning a ``spec.suspend: true`` in
``metadata.managedFields``, as with Kueue's ``manageJobsWithoutQueueName``), or a controller named in
``spec.managedBy``. Such a Job is parsed with :attr:`BatchJob.managed_by` set; the operator leaves it
alone and reports it. (A GitOps tool's one-off re-apply of ``suspend: true`` is not recognised this
way: docs/batch.md, GitOps, says the Job pauses and is released again.)
A Job that ends ``Failed`` is finished but never *done*: its progress stays what it measured.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Literal

from llmscale.timestamps import parse_rfc3339

__all__ = [
    "ANNOTATION_CONCURRENCY",
    "ANNOTATION_DEADLINE",
    "ANNOTATION_INPUT_TOKENS",
    "ANNOTATION_OUTPUT_TOKENS",
    "ANNOTATION_REQUESTS",
    "DEFAULT_CLIENT_CONCURRENCY",
    "LABEL_DEPLOYMENT",
    "LABEL_KUEUE_QUEUE",
    "BatchJob",
    "JobState",
    "parse_job",
    "parse_rfc3339",
]

#: Label naming the LLMDeployment (same namespace) whose batch pool serves the Job.
LABEL_DEPLOYMENT = "llmscale.dev/deployment"
#: Kueue's label naming the LocalQueue of a Job it admits (its webhook may add it by itself).
LABEL_KUEUE_QUEUE = "kueue.x-k8s.io/queue-name"
#: ``spec.managedBy`` of a Job left to the built-in Job controller (Kubernetes >= 1.30).
_JOB_CONTROLLER = "kubernetes.io/job-controller"
_FAILED = ("Failed", "FailureTarget")

#: RFC 3339 instant by which the Job's work must be done; unset: creation + completion window.
ANNOTATION_DEADLINE = "llmscale.dev/deadline"
#: Requests (lines) in the Job's whole input, over all its indexes.
ANNOTATION_REQUESTS = "llmscale.dev/batch-requests"
#: Prompt tokens of the whole input.
ANNOTATION_INPUT_TOKENS = "llmscale.dev/batch-input-tokens"
#: Output tokens the whole input may generate (the sum of its ``max_tokens``): an upper bound.
ANNOTATION_OUTPUT_TOKENS = "llmscale.dev/batch-output-tokens"

#: Requests each of the Job's pods keeps in flight, for a client other than ``llmscale batch run``
#: (or to override what its arguments say).
ANNOTATION_CONCURRENCY = "llmscale.dev/batch-concurrency"
#: ``llmscale batch run --concurrency``'s default (``llmscale.batch.client.ClientSettings``).
DEFAULT_CLIENT_CONCURRENCY = 64

# Job conditions after which no more work will be done (batch/v1 JobConditionType). The last two
# come first on Kubernetes >= 1.31, while the pods still terminate.
_FINISHED = ("Complete", "Failed", "SuccessCriteriaMet", "FailureTarget")


class JobState(StrEnum):
    """Where a batch Job stands (``status.batch.jobs[].state``)."""

    Waiting = "Waiting"
    """``spec.suspend: true`` and no pod left: waiting to be released."""
    Running = "Running"
    """Released (``spec.suspend: false``) and not finished."""
    Draining = "Draining"
    """Suspended, but its pods are still finishing in-flight requests (``status.active`` or
    ``status.terminating`` above 0)."""
    Done = "Done"
    """``Complete`` or ``Failed``: no more work (a failed Job is never counted done:
    :attr:`BatchJob.failed`)."""


@dataclass(frozen=True, slots=True)
class BatchJob:
    """One batch Job as the planner sees it.

    Attributes:
        name: ``metadata.name``.
        deployment: the :data:`LABEL_DEPLOYMENT` label (``None`` when absent).
        state: :class:`JobState`.
        created_at: ``metadata.creationTimestamp``, seconds since the Unix epoch (``None``: unknown).
        deadline: seconds since the Unix epoch (``None``: no deadline).
        deadline_source: ``annotation``, ``completionWindow`` or ``none``.
        active_pods: ``status.active`` + ``status.terminating``: pods running or still finishing.
        requests: requests in the whole input (``None``: undeclared or unreadable).
        input_tokens: prompt tokens of the whole input (``None``: unknown).
        output_tokens: output tokens of the whole input, an upper bound (``None``: unknown).
        concurrency: requests the Job's pods keep in flight together when it runs: per pod
            (:data:`ANNOTATION_CONCURRENCY`, the ``--concurrency`` of its ``llmscale batch run``
            container, or :data:`DEFAULT_CLIENT_CONCURRENCY`) × pods running at once
            (``spec.parallelism``, at most the indexes left of an Indexed Job). ``None``: not known
            (a Job built by hand); the planner then assumes it fills any pool.
        requests_done: requests done, estimated from the progress the Job shows (0 when none).
        progress_source: where ``requests_done`` came from: ``finished``, ``completions`` (an
            Indexed Job's succeeded indexes), ``client`` (the batch client's own count, passed in),
            or ``none``.
        problems: one sentence per value that could not be read (the value is then unknown).
        failed: the Job ended ``Failed`` (or ``FailureTarget``): finished, its requests not done.
        managed_by: another manager that suspends the Job (``None``: llmscale's alone), e.g.
            ``Kueue (queue team-a)``: the operator neither releases nor counts it.
    """

    name: str
    deployment: str | None
    state: JobState
    created_at: float | None
    deadline: float | None
    deadline_source: Literal["annotation", "completionWindow", "none"]
    active_pods: int = 0
    requests: int | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    concurrency: int | None = None
    requests_done: float = 0.0
    progress_source: Literal["finished", "completions", "client", "none"] = "none"
    problems: tuple[str, ...] = ()
    failed: bool = False
    managed_by: str | None = None

    @property
    def size_known(self) -> bool:
        """Whether the Job declares its size (requests, prompt and output tokens)."""
        return self.requests is not None and self.input_tokens is not None and self.output_tokens is not None

    @property
    def done_fraction(self) -> float:
        """Share of the requests done, 0–1 (1 when complete; what was measured when failed; 0 when
        the size is unknown)."""
        if self.state is JobState.Done and not self.failed:
            return 1.0
        if not self.requests:
            return 0.0
        return min(1.0, max(0.0, self.requests_done / self.requests))

    @property
    def outstanding_tokens(self) -> float | None:
        """Prompt + output tokens not done yet (``None``: size unknown), assuming the requests done
        carried the input's mean tokens."""
        if self.state is JobState.Done:
            return 0.0
        if not self.size_known:
            return None
        assert self.input_tokens is not None and self.output_tokens is not None
        return (self.input_tokens + self.output_tokens) * (1.0 - self.done_fraction)

    @property
    def outstanding_requests(self) -> float | None:
        """Requests not done yet (``None``: size unknown)."""
        if self.state is JobState.Done:
            return 0.0
        if self.requests is None:
            return None
        return self.requests * (1.0 - self.done_fraction)


def _get(obj: Mapping[str, Any], *path: str) -> Any:
    node: Any = obj
    for key in path:
        if not isinstance(node, Mapping):
            return None
        node = node.get(key)
    return node


def _count(value: Any, where: str, problems: list[str], *, least: int = 0) -> int | None:
    """A non-negative integer annotation (a string of digits), or None with a problem."""
    if value is None:
        return None
    text = str(value).strip()
    try:
        number = int(text)
    except ValueError:
        problems.append(f"{where} is {text!r}, not an integer: size unknown")
        return None
    if number < least:
        problems.append(f"{where} is {number}, less than {least}: size unknown")
        return None
    return number


def _int_field(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return 0
    return max(0, int(value))


def _flag_value(argv: list[str], flag: str) -> str | None:
    """The value of ``--flag=V`` or ``--flag V`` in ``argv`` (the last one wins, as argparse's)."""
    value: str | None = None
    for i, arg in enumerate(argv):
        if arg.startswith(flag + "="):
            value = arg[len(flag) + 1:]
        elif arg == flag and i + 1 < len(argv):
            value = argv[i + 1]
    return value


def _client_concurrency(job: Mapping[str, Any], problems: list[str]) -> int:
    """Requests in flight per pod: the annotation, else the ``--concurrency`` of a container running
    ``llmscale batch run``, else the client's default."""
    annotations = _get(job, "metadata", "annotations")
    if isinstance(annotations, Mapping) and annotations.get(ANNOTATION_CONCURRENCY) is not None:
        value = _count(annotations.get(ANNOTATION_CONCURRENCY), f"annotation {ANNOTATION_CONCURRENCY}", [], least=1)
        if value is not None:
            return value
        problems.append(
            f"annotation {ANNOTATION_CONCURRENCY} is not a positive integer: "
            f"{DEFAULT_CLIENT_CONCURRENCY} requests in flight per pod assumed"
        )
        return DEFAULT_CLIENT_CONCURRENCY
    containers = _get(job, "spec", "template", "spec", "containers")
    for container in containers if isinstance(containers, list) else []:
        if not isinstance(container, Mapping):
            continue
        argv = [str(a) for part in ("command", "args") if isinstance(container.get(part), list)
                for a in container[part]]
        if not any(a == "batch" for a in argv) or "run" not in argv:
            continue
        text = _flag_value(argv, "--concurrency")
        if text is None:
            return DEFAULT_CLIENT_CONCURRENCY
        try:
            value = int(text)
        except ValueError:
            value = 0
        if value >= 1:
            return value
        problems.append(
            f"--concurrency {text!r} of container {container.get('name')!r} is not a positive integer: "
            f"{DEFAULT_CLIENT_CONCURRENCY} assumed"
        )
        return DEFAULT_CLIENT_CONCURRENCY
    return DEFAULT_CLIENT_CONCURRENCY


def _pods_at_once(job: Mapping[str, Any]) -> int:
    """Pods the Job runs at once: ``spec.parallelism`` (1 when unset), at most the indexes an
    Indexed Job has left."""
    parallelism = _get(job, "spec", "parallelism")
    pods = 1 if parallelism is None else _int_field(parallelism)
    completions = _get(job, "spec", "completions")
    if completions is not None and _int_field(completions) > 0:
        left = _int_field(completions) - _int_field(_get(job, "status", "succeeded"))
        pods = min(pods, max(left, 0))
    return max(pods, 1)


def _finished(job: Mapping[str, Any]) -> bool:
    conditions = _get(job, "status", "conditions")
    if not isinstance(conditions, list):
        return False
    return any(
        isinstance(c, Mapping) and c.get("type") in _FINISHED and c.get("status") == "True"
        for c in conditions
    )


def _condition_true(job: Mapping[str, Any], types: tuple[str, ...]) -> bool:
    conditions = _get(job, "status", "conditions")
    return isinstance(conditions, list) and any(
        isinstance(c, Mapping) and c.get("type") in types and c.get("status") == "True" for c in conditions)


def _owns_suspend(entry: Mapping[str, Any]) -> bool:
    spec = _get(entry, "fieldsV1", "f:spec")
    return isinstance(spec, Mapping) and "f:suspend" in spec


def _other_manager(job: Mapping[str, Any]) -> str | None:
    """The manager other than llmscale that suspends the Job, or ``None`` (see the module docstring)."""
    labels = _get(job, "metadata", "labels")
    if isinstance(labels, Mapping) and labels.get(LABEL_KUEUE_QUEUE):
        return f"Kueue (label {LABEL_KUEUE_QUEUE}={labels[LABEL_KUEUE_QUEUE]})"
    managed_by = _get(job, "spec", "managedBy")
    if isinstance(managed_by, str) and managed_by and managed_by != _JOB_CONTROLLER:
        return f"{managed_by} (spec.managedBy)"
    entries = _get(job, "metadata", "managedFields")
    if _get(job, "spec", "suspend") is not True or not isinstance(entries, list):
        return None
    kueue = sorted({str(e.get("manager")) for e in entries if isinstance(e, Mapping) and _owns_suspend(e)
                    and "kueue" in str(e.get("manager") or "").lower()})
    return f"Kueue (field manager {', '.join(kueue)} owns spec.suspend)" if kueue else None


def parse_job(
    job: Mapping[str, Any], *, completion_window_s: float, requests_done: float | None = None
) -> BatchJob:
    """Parse a Kubernetes Job (``batch/v1``, as the API server returns it) into a :class:`BatchJob`.

    Never raises: an annotation that cannot be read is a sentence in ``problems`` and its value is
    unknown (a deadline falls back to the completion window; a size becomes unknown, which the
    planner treats as "needs the whole pool while it runs").

    Args:
        job: the Job object.
        completion_window_s: ``spec.batch.completionWindowSeconds``: the deadline of a Job without
            the :data:`ANNOTATION_DEADLINE` annotation is its creation plus this, seconds.
        requests_done: requests the Job's batch client reports done (its
            ``llmscale_batch_requests_done`` gauge, summed over the Job's pods), when the caller
            reads it; the larger of this and the Job's own progress counts.

    Returns:
        The :class:`BatchJob`.
    """
    problems: list[str] = []
    name = _get(job, "metadata", "name")
    if not isinstance(name, str) or not name:
        problems.append("metadata.name is missing")
        name = "<unnamed>"
    labels = _get(job, "metadata", "labels")
    deployment = labels.get(LABEL_DEPLOYMENT) if isinstance(labels, Mapping) else None
    annotations = _get(job, "metadata", "annotations")
    if not isinstance(annotations, Mapping):
        annotations = {}

    created_at: float | None = None
    created_text = _get(job, "metadata", "creationTimestamp")
    if created_text is not None:
        try:
            created_at = parse_rfc3339(str(created_text))
        except ValueError as exc:
            problems.append(f"metadata.creationTimestamp is unreadable ({exc})")

    deadline: float | None = None
    source: Literal["annotation", "completionWindow", "none"] = "none"
    deadline_text = annotations.get(ANNOTATION_DEADLINE)
    if deadline_text is not None:
        try:
            deadline, source = parse_rfc3339(str(deadline_text)), "annotation"
        except ValueError as exc:
            problems.append(f"annotation {ANNOTATION_DEADLINE} is not an RFC 3339 time ({exc}): ignored")
    if deadline is None and created_at is not None:
        deadline, source = created_at + completion_window_s, "completionWindow"

    requests = _count(
        annotations.get(ANNOTATION_REQUESTS), f"annotation {ANNOTATION_REQUESTS}", problems, least=1
    )
    input_tokens = _count(
        annotations.get(ANNOTATION_INPUT_TOKENS), f"annotation {ANNOTATION_INPUT_TOKENS}", problems
    )
    output_tokens = _count(
        annotations.get(ANNOTATION_OUTPUT_TOKENS), f"annotation {ANNOTATION_OUTPUT_TOKENS}", problems, least=1
    )

    suspended = _get(job, "spec", "suspend") is True
    # A suspended Job's pods leave `active` the moment they are deleted (Kubernetes ≥ 1.28 counts
    # them in `terminating` until they are gone, JobPodReplacementPolicy): both mean "not gone yet".
    active = _int_field(_get(job, "status", "active")) + _int_field(_get(job, "status", "terminating"))
    if _finished(job):
        state = JobState.Done
    elif suspended:
        state = JobState.Draining if active > 0 else JobState.Waiting
    else:
        state = JobState.Running

    done = 0.0
    progress: Literal["finished", "completions", "client", "none"] = "none"
    if state is JobState.Done:
        done, progress = float(requests or 0), "finished"
    elif requests is not None:
        completions = _get(job, "spec", "completions")
        if _get(job, "spec", "completionMode") == "Indexed" and _int_field(completions) > 0:
            # Each index runs its own shard (llmscale batch run --shards N): a succeeded index is
            # its 1/N of the requests done.
            succeeded = min(_int_field(_get(job, "status", "succeeded")), _int_field(completions))
            done, progress = requests * succeeded / _int_field(completions), "completions"
        if requests_done is not None and math.isfinite(requests_done) and requests_done > done:
            done, progress = min(float(requests), requests_done), "client"

    concurrency = _client_concurrency(job, problems) * _pods_at_once(job)

    failed = _condition_true(job, _FAILED)
    if failed:
        done, progress = 0.0, "none"
        if requests is not None and requests_done is not None and math.isfinite(requests_done) and requests_done > 0:
            done, progress = min(float(requests), requests_done), "client"

    return BatchJob(
        name=name,
        deployment=deployment if isinstance(deployment, str) else None,
        state=state,
        created_at=created_at,
        deadline=deadline,
        deadline_source=source,
        active_pods=active,
        requests=requests,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        concurrency=concurrency,
        requests_done=done,
        progress_source=progress,
        problems=tuple(problems),
        failed=failed,
        managed_by=_other_manager(job) if state is not JobState.Done else None,
    )
