"""The Job contract of docs/batch.md against a real kube-apiserver and Job controller.

The example Job of the docs is accepted as written; parsed from what the API server returns it is a
Waiting Job with its deadline and size; a server-side apply of ``spec.suspend`` alone under
llmscale's field manager releases it and owns nothing else; and re-applying the manifest behaves
as the GitOps paragraph says (client-side apply re-suspends it, a server-side apply under another
manager conflicts).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from tests.cluster.helpers import LocalCluster, wait_for

from llmscale.policy.batch.jobs import JobState, parse_job, parse_rfc3339

pytestmark = pytest.mark.slow

DOCS = Path(__file__).resolve().parents[2] / "docs" / "batch.md"
NAMESPACE = "llm-serving"


def doc_job() -> dict[str, Any]:
    """The example Job: the first YAML block after "A Job of 20,000 requests" in docs/batch.md."""
    text = DOCS.read_text(encoding="utf-8")
    after = text[text.index("A Job of 20,000 requests") :]
    block = re.search(r"```yaml\n(.*?)```", after, re.DOTALL)
    assert block is not None
    job: dict[str, Any] = yaml.safe_load(block.group(1))
    return job


@pytest.fixture(scope="module")
def batch_api(cluster: LocalCluster) -> Iterator[client.BatchV1Api]:
    core = client.CoreV1Api(cluster.api)
    if NAMESPACE not in {n.metadata.name for n in core.list_namespace().items}:
        cluster.create_namespace(NAMESPACE)
    api = client.BatchV1Api(cluster.api)
    yield api
    for job in api.list_namespaced_job(NAMESPACE, label_selector="llmscale.dev/deployment").items:
        api.delete_namespaced_job(job.metadata.name, NAMESPACE, propagation_policy="Background")


def test_the_docs_job_is_accepted_as_a_waiting_job(
    cluster: LocalCluster, batch_api: client.BatchV1Api
) -> None:
    job = doc_job()
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(job))  # as a user would, client-side
    got = cluster.api.sanitize_for_serialization(
        batch_api.read_namespaced_job(job["metadata"]["name"], NAMESPACE)
    )
    parsed = parse_job(got, completion_window_s=86_400)
    assert parsed.problems == ()
    assert (parsed.state, parsed.deployment) == (JobState.Waiting, "summarise")
    assert (parsed.deadline, parsed.deadline_source) == (parse_rfc3339("2025-01-07T06:00:00Z"), "annotation")
    assert (parsed.requests, parsed.input_tokens, parsed.output_tokens) == (20_000, 23_100_000, 5_120_000)
    assert parsed.outstanding_tokens == 28_220_000
    # Suspended: the Job controller starts no pod.
    assert not got.get("status", {}).get("active")


def test_llmscale_owns_only_spec_suspend_as_the_gitops_section_documents(
    cluster: LocalCluster, batch_api: client.BatchV1Api
) -> None:
    job = doc_job()
    name = job["metadata"]["name"] = "suspend-contract"
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(job))
    # What the operator will do to release it: a server-side apply (the Python client's PATCH, as its
    # writer does) of spec.suspend alone, forced, under its field manager.
    release = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"suspend": False},
    }

    def ssa(body: dict[str, Any]) -> None:
        batch_api.patch_namespaced_job(
            name,
            NAMESPACE,
            body,
            field_manager="llmscale",
            force=True,
            _content_type="application/apply-patch+yaml",
        )

    ssa(release)
    live = cluster.api.sanitize_for_serialization(batch_api.read_namespaced_job(name, NAMESPACE))
    assert parse_job(live, completion_window_s=86_400).state is JobState.Running
    owned = [m for m in live["metadata"]["managedFields"] if m["manager"] == "llmscale"]
    assert [m["fieldsV1"] for m in owned] == [{"f:spec": {"f:suspend": {}}}]
    # Re-applying the manifest client-side (suspend: true in it) suspends it again: a pause.
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(job))
    assert batch_api.read_namespaced_job(name, NAMESPACE).spec.suspend is True
    # Released again, a server-side apply of the manifest under the GitOps tool's manager conflicts.
    ssa(release)
    conflict = cluster.kubectl(
        "apply",
        "--server-side",
        "--field-manager=argocd-controller",
        "-f",
        "-",
        input=yaml.safe_dump(job),
        check=False,
    )
    assert conflict.returncode != 0 and "conflict" in conflict.stderr.lower()
    assert wait_for(
        "the Job still released", lambda: batch_api.read_namespaced_job(name, NAMESPACE).spec.suspend is False
    )


def test_a_job_kueue_suspends_again_is_left_to_it(cluster: LocalCluster, batch_api: client.BatchV1Api) -> None:
    """Issue 21: Kueue suspends a Job llmscale released. Its field manager then owns
    ``spec.suspend`` on the API server, and what the Jobs index keeps of the Job says so: parsed, the
    Job is another manager's (never released again, never counted in the batch pool)."""
    from llmscale.controller.indexes import index_jobs

    job = doc_job()
    name = job["metadata"]["name"] = "kueue-owned"
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(job))
    release = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": NAMESPACE},
               "spec": {"suspend": False}}
    batch_api.patch_namespaced_job(name, NAMESPACE, release, field_manager="llmscale", force=True,
                                   _content_type="application/apply-patch+yaml")
    # Kueue's controller suspends it again with an update under its own field manager.
    batch_api.patch_namespaced_job(name, NAMESPACE, {"spec": {"suspend": True}}, field_manager="kueue")
    live = cluster.api.sanitize_for_serialization(batch_api.read_namespaced_job(name, NAMESPACE))
    meta = live["metadata"]
    indexed = index_jobs(namespace=NAMESPACE, name=name, uid=meta["uid"], labels=meta["labels"], meta=meta,
                         annotations=meta.get("annotations") or {}, spec=live["spec"], status=live.get("status") or {})
    (stored,) = indexed.values()
    parsed = parse_job(stored, completion_window_s=86_400)
    assert parsed.managed_by is not None and parsed.managed_by.startswith("Kueue (field manager kueue"), parsed
    # Before Kueue touched it, the same Job was llmscale's alone.
    batch_api.patch_namespaced_job(name, NAMESPACE, release, field_manager="llmscale", force=True,
                                   _content_type="application/apply-patch+yaml")
    live = cluster.api.sanitize_for_serialization(batch_api.read_namespaced_job(name, NAMESPACE))
    assert parse_job(live, completion_window_s=86_400).managed_by is None
