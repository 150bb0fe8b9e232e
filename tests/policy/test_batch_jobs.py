"""The batch Job contract: a Kubernetes Job (as the API server returns it) parsed into a BatchJob.

Each case states the whole Job it parses. Bad annotations never raise: they become unknowns with a
sentence in ``problems``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmscale.policy.batch.jobs import (
    ANNOTATION_CONCURRENCY,
    ANNOTATION_DEADLINE,
    ANNOTATION_INPUT_TOKENS,
    ANNOTATION_OUTPUT_TOKENS,
    ANNOTATION_REQUESTS,
    DEFAULT_CLIENT_CONCURRENCY,
    LABEL_DEPLOYMENT,
    JobState,
    parse_job,
    parse_rfc3339,
)

DAY = 86_400.0
CREATED = "2025-01-06T09:00:00Z"


def utc(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


SIZE = {ANNOTATION_REQUESTS: "1000", ANNOTATION_INPUT_TOKENS: "1200000", ANNOTATION_OUTPUT_TOKENS: "256000"}


def job(
    *,
    annotations: dict[str, str] | None = None,
    spec: dict[str, Any] | None = None,
    status: dict[str, Any] | None = None,
    created: str | None = CREATED,
) -> dict[str, Any]:
    """A Job in the shape ``kubectl get job -o json`` prints (only the fields the parser reads)."""
    metadata: dict[str, Any] = {
        "name": "nightly",
        "namespace": "serving",
        "labels": {LABEL_DEPLOYMENT: "chat"},
        "annotations": annotations if annotations is not None else dict(SIZE),
    }
    if created is not None:
        metadata["creationTimestamp"] = created
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata,
        "spec": {"suspend": True, **(spec or {})},
        "status": status or {},
    }


def test_a_suspended_job_with_a_size_parses_as_waiting_with_its_completion_window_deadline() -> None:
    got = parse_job(job(), completion_window_s=DAY)
    assert got.name == "nightly" and got.deployment == "chat"
    assert got.state is JobState.Waiting
    assert got.created_at == utc("2025-01-06T09:00")
    assert (got.deadline, got.deadline_source) == (utc("2025-01-07T09:00"), "completionWindow")
    assert (got.requests, got.input_tokens, got.output_tokens) == (1000, 1_200_000, 256_000)
    assert got.outstanding_tokens == 1_456_000
    assert got.outstanding_requests == 1000
    assert got.problems == ()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("2025-01-06T18:00:00Z", "2025-01-06T18:00", id="zulu"),
        pytest.param("2025-01-06T19:00:00+01:00", "2025-01-06T18:00", id="offset"),
        pytest.param("2025-01-06T18:00:00.250Z", "2025-01-06T18:00:00.250", id="fraction"),
    ],
)
def test_deadline_annotation_wins(text: str, expected: str) -> None:
    got = parse_job(job(annotations={**SIZE, ANNOTATION_DEADLINE: text}), completion_window_s=DAY)
    assert (got.deadline, got.deadline_source) == (utc(expected), "annotation")


@pytest.mark.parametrize(
    ("annotations", "problem"),
    [
        pytest.param({ANNOTATION_DEADLINE: "tomorrow"}, "not an RFC 3339 time", id="deadline-words"),
        pytest.param({ANNOTATION_DEADLINE: "2025-01-06T18:00:00"}, "no UTC offset", id="deadline-no-offset"),
        pytest.param({ANNOTATION_DEADLINE: "2025-01-06"}, "no UTC offset", id="deadline-date-only"),
        pytest.param({ANNOTATION_DEADLINE: "0001-01-01T00:00:00+01:00"}, "before 1970", id="deadline-year-0"),
        pytest.param({ANNOTATION_DEADLINE: "9999-12-31T23:59:59Z"}, "after 9000", id="deadline-year-9999"),
    ],
)
def test_bad_deadline_falls_back_to_the_completion_window(annotations: dict[str, str], problem: str) -> None:
    got = parse_job(job(annotations={**SIZE, **annotations}), completion_window_s=3600)
    assert (got.deadline, got.deadline_source) == (utc("2025-01-06T10:00"), "completionWindow")
    assert len(got.problems) == 1 and problem in got.problems[0] and ANNOTATION_DEADLINE in got.problems[0]


@pytest.mark.parametrize(
    ("annotations", "problem"),
    [
        pytest.param({ANNOTATION_REQUESTS: "1k"}, "not an integer", id="requests-not-integer"),
        pytest.param({ANNOTATION_REQUESTS: "0"}, "less than 1", id="requests-zero"),
        pytest.param({ANNOTATION_INPUT_TOKENS: "-5"}, "less than 0", id="tokens-negative"),
        pytest.param({ANNOTATION_OUTPUT_TOKENS: "1.5e6"}, "not an integer", id="tokens-float"),
    ],
)
def test_bad_size_annotation_makes_the_size_unknown(annotations: dict[str, str], problem: str) -> None:
    got = parse_job(job(annotations={**SIZE, **annotations}), completion_window_s=DAY)
    assert not got.size_known
    assert got.outstanding_tokens is None
    [message] = got.problems
    assert problem in message and next(iter(annotations)) in message


def test_no_size_annotations_is_unknown_without_a_problem() -> None:
    got = parse_job(job(annotations={}), completion_window_s=DAY)
    assert (got.size_known, got.outstanding_tokens, got.outstanding_requests, got.problems) == (
        False,
        None,
        None,
        (),
    )


@pytest.mark.parametrize(
    ("spec", "status", "state"),
    [
        pytest.param({"suspend": True}, {}, JobState.Waiting, id="suspended"),
        pytest.param({}, {}, JobState.Waiting, id="suspended-as-created"),
        pytest.param({"suspend": False}, {"active": 1}, JobState.Running, id="released"),
        pytest.param({"suspend": False}, {}, JobState.Running, id="released-pods-not-yet-created"),
        pytest.param({"suspend": True}, {"active": 2}, JobState.Draining, id="paused-pods-still-finishing"),
        pytest.param({"suspend": True}, {"active": 0, "terminating": 1}, JobState.Draining,
                     id="paused-pods-deleted-not-gone"),
        pytest.param({"suspend": True}, {"active": 0, "terminating": 0}, JobState.Waiting, id="paused-pods-gone"),
        pytest.param(
            {"suspend": False},
            {"conditions": [{"type": "Complete", "status": "True"}], "succeeded": 1},
            JobState.Done,
            id="complete",
        ),
        pytest.param(
            {"suspend": False},
            {"conditions": [{"type": "Failed", "status": "True"}]},
            JobState.Done,
            id="failed",
        ),
        pytest.param(
            {"suspend": False},
            {"conditions": [{"type": "SuccessCriteriaMet", "status": "True"}], "active": 1},
            JobState.Done,
            id="success-criteria-met-while-pods-terminate",
        ),
        pytest.param(
            {"suspend": True},
            {
                "conditions": [
                    {"type": "Suspended", "status": "True"},
                    {"type": "Complete", "status": "False"},
                ]
            },
            JobState.Waiting,
            id="suspended-condition-is-not-done",
        ),
    ],
)
def test_state(spec: dict[str, Any], status: dict[str, Any], state: JobState) -> None:
    body = job(spec=spec, status=status)
    if "suspend" not in spec:
        body["spec"]["suspend"] = True
    assert parse_job(body, completion_window_s=DAY).state is state


def test_done_job_has_nothing_outstanding() -> None:
    got = parse_job(
        job(spec={"suspend": False}, status={"conditions": [{"type": "Complete", "status": "True"}]}),
        completion_window_s=DAY,
    )
    assert (got.outstanding_tokens, got.outstanding_requests, got.progress_source) == (0.0, 0.0, "finished")


def test_indexed_job_progress_from_succeeded_indexes() -> None:
    got = parse_job(
        job(
            spec={"suspend": False, "completionMode": "Indexed", "completions": 4, "parallelism": 2},
            status={"succeeded": 3, "active": 1},
        ),
        completion_window_s=DAY,
    )
    assert (got.requests_done, got.progress_source) == (750.0, "completions")
    assert got.outstanding_tokens == pytest.approx(1_456_000 / 4)


def test_the_client_count_wins_when_larger_than_the_completions() -> None:
    indexed = job(spec={"completionMode": "Indexed", "completions": 4}, status={"succeeded": 1})
    assert parse_job(indexed, completion_window_s=DAY, requests_done=100).progress_source == "completions"
    more = parse_job(indexed, completion_window_s=DAY, requests_done=600)
    assert (more.requests_done, more.progress_source) == (600.0, "client")


def test_the_client_count_is_capped_at_the_size() -> None:
    capped = parse_job(job(), completion_window_s=DAY, requests_done=5000)
    assert capped.requests_done == 1000 and capped.outstanding_tokens == 0.0


def test_a_nan_client_count_counts_nothing_done() -> None:
    assert parse_job(job(), completion_window_s=DAY, requests_done=float("nan")).requests_done == 0.0


def test_a_job_without_a_creation_time_or_a_deadline_has_no_deadline() -> None:
    got = parse_job(job(created=None), completion_window_s=DAY)
    assert (got.created_at, got.deadline, got.deadline_source) == (None, None, "none")


def test_a_missing_label_or_name_is_reported_not_raised() -> None:
    body = job()
    del body["metadata"]["labels"]
    del body["metadata"]["name"]
    got = parse_job(body, completion_window_s=DAY)
    assert got.deployment is None and got.name == "<unnamed>"
    assert got.problems == ("metadata.name is missing",)


def test_parse_rfc3339_rejects_naive_times() -> None:
    assert parse_rfc3339(" 2025-01-06T18:00:00Z ") == utc("2025-01-06T18:00")
    with pytest.raises(ValueError, match="no UTC offset"):
        parse_rfc3339("2025-01-06T18:00:00")


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(
    st.fixed_dictionaries(
        {},
        optional={
            "metadata": st.one_of(
                _json,
                st.fixed_dictionaries(
                    {},
                    optional={
                        "name": _json,
                        "creationTimestamp": _json,
                        "labels": _json,
                        "annotations": st.one_of(
                            _json,
                            st.dictionaries(
                                st.sampled_from(
                                    [
                                        ANNOTATION_DEADLINE,
                                        ANNOTATION_REQUESTS,
                                        ANNOTATION_INPUT_TOKENS,
                                        ANNOTATION_OUTPUT_TOKENS,
                                    ]
                                ),
                                _json,
                            ),
                        ),
                    },
                ),
            ),
            "spec": _json,
            "status": _json,
        },
    ),
    st.none() | st.floats(),
)
def test_never_raises_on_any_object(body: dict[str, Any], requests_done: float | None) -> None:
    got = parse_job(body, completion_window_s=DAY, requests_done=requests_done)
    assert isinstance(got.state, JobState)
    assert 0.0 <= got.done_fraction <= 1.0
    tokens = got.outstanding_tokens
    assert tokens is None or tokens >= 0


# --------------------------------------------------------------------------------------------
# Requests in flight: the annotation, the client's --concurrency, its default; × pods at once
# --------------------------------------------------------------------------------------------


def _template(*args: str, command: tuple[str, ...] = ("llmscale", "batch", "run")) -> dict[str, Any]:
    return {"template": {"spec": {"containers": [
        {"name": "sidecar", "image": "busybox", "args": ["--concurrency=999"]},
        {"name": "batch", "image": "ghcr.io/llmscale/llmscale:0.1.0", "command": list(command), "args": list(args)},
    ]}}}


CONCURRENCY = [
    ("no-template-default", None, {}, DEFAULT_CLIENT_CONCURRENCY, 0),
    ("client-default", None, _template("--input=/d/in.jsonl"), 64, 0),
    ("flag-equals", None, _template("--concurrency=16"), 16, 0),
    ("flag-space", None, _template("--concurrency", "200"), 200, 0),
    ("in-command", None, _template(command=("llmscale", "batch", "run", "--concurrency=8")), 8, 0),
    ("annotation-wins", "32", _template("--concurrency=16"), 32, 0),
    ("parallel-pods", None, {**_template("--concurrency=16"), "parallelism": 4}, 64, 0),
    ("indexed-left", None, {**_template("--concurrency=16"), "parallelism": 4, "completions": 8,
                            "completionMode": "Indexed"}, 32, 6),
    ("bad-annotation", "many", _template("--concurrency=16"), 64, 0),
    ("bad-flag", None, _template("--concurrency=zero"), 64, 0),
]


@pytest.mark.parametrize(("annotation", "spec", "expected", "succeeded"),
                         [pytest.param(*c[1:], id=c[0]) for c in CONCURRENCY])
def test_concurrency_from_the_job(annotation: str | None, spec: dict[str, Any], expected: int, succeeded: int) -> None:
    """Requests in flight per pod (the annotation, else the ``--concurrency`` of the container that
    runs ``llmscale batch run``, else the client's default 64) × the pods at once (``parallelism``,
    at most the indexes an Indexed Job has left); an unreadable value is a problem and the default."""
    annotations = dict(SIZE) | ({ANNOTATION_CONCURRENCY: annotation} if annotation is not None else {})
    got = parse_job(job(annotations=annotations, spec=spec, status={"succeeded": succeeded}), completion_window_s=DAY)
    assert got.concurrency == expected
    bad = "bad" in (annotation or "") or annotation == "many" or "zero" in str(spec)
    assert bool(got.problems) == bad, got.problems


# ------------------------------------------------------------------------------------------
# Issue 21: Jobs with two owners, and a Failed Job is never done
# ------------------------------------------------------------------------------------------


def test_a_failed_job_is_finished_but_never_counted_done() -> None:
    failed = {"conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]}
    got = parse_job(job(spec={"suspend": False}, status=failed), completion_window_s=DAY, requests_done=300)
    assert got.state is JobState.Done and got.failed
    assert (got.done_fraction, got.progress_source, got.outstanding_requests) == (0.3, "client", 0.0)
    # Kubernetes >= 1.31 sets FailureTarget first, while the pods terminate.
    target = {"conditions": [{"type": "FailureTarget", "status": "True"}]}
    got = parse_job(job(spec={"suspend": False}, status=target), completion_window_s=DAY)
    assert got.failed and got.done_fraction == 0.0 and got.progress_source == "none"
    complete = {"conditions": [{"type": "Complete", "status": "True"}]}
    assert not parse_job(job(spec={"suspend": False}, status=complete), completion_window_s=DAY).failed


KUEUE_SUSPEND = {"manager": "kueue", "operation": "Update", "fieldsV1": {"f:spec": {"f:suspend": {}}}}
LLMSCALE_ENTRY = {"manager": "llmscale", "operation": "Apply", "fieldsV1": {"f:metadata": {}}}


@pytest.mark.parametrize(
    ("labels", "spec", "managed_fields", "expected"),
    [
        pytest.param({"kueue.x-k8s.io/queue-name": "team-a"}, {"suspend": True}, [], "Kueue (label", id="kueue-label"),
        # manageJobsWithoutQueueName: no label, Kueue's manager took spec.suspend back.
        pytest.param({}, {"suspend": True}, [LLMSCALE_ENTRY, KUEUE_SUSPEND], "Kueue (field manager kueue",
                     id="kueue-managed-fields"),
        pytest.param({}, {"suspend": True, "managedBy": "example.com/batch-broker"}, [], "example.com/batch-broker",
                     id="spec-managed-by"),
        pytest.param({}, {"suspend": True, "managedBy": "kubernetes.io/job-controller"}, [], None,
                     id="managed-by-the-job-controller"),
        # A GitOps re-apply of suspend: true is a pause (docs/batch.md, GitOps), not another owner.
        pytest.param({}, {"suspend": True}, [LLMSCALE_ENTRY, {**KUEUE_SUSPEND, "manager": "kubectl-client-side-apply"}],
                     None, id="gitops-reapply-is-a-pause"),
        pytest.param({}, {"suspend": False}, [KUEUE_SUSPEND], None, id="kueue-owns-suspend-but-released"),
    ],
)
def test_a_job_another_manager_suspends_is_recognised(labels: dict[str, str], spec: dict[str, Any],
                                                      managed_fields: list[dict[str, Any]], expected: str | None) -> None:
    body = job(spec=spec)
    body["metadata"]["labels"].update(labels)
    body["metadata"]["managedFields"] = managed_fields
    got = parse_job(body, completion_window_s=DAY).managed_by
    assert (got is None) if expected is None else (got is not None and got.startswith(expected)), got
