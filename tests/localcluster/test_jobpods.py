"""The local cluster's batch Job pods (llmscale.localcluster.jobpods): what a Job pod's
``llmscale batch run`` becomes on this machine. The whole path (a Job released, its client run,
SIGTERMed on a pause and finished in a later window) is e2e/test_batch.py."""

from __future__ import annotations

from kubernetes import client

from llmscale.localcluster.jobpods import client_command, host_paths, service_url

ROUTER = "http://127.0.0.1:18000"


def pod(args: list[str], *, annotations: dict[str, str] | None = None) -> client.V1Pod:
    container = client.V1Container(
        name="batch", image="llmscale:dev", command=["llmscale", "batch", "run"], args=args,
        env=[client.V1EnvVar(name="OPENAI_API_KEY", value="k"),
             client.V1EnvVar(name="FROM_SECRET", value_from=client.V1EnvVarSource())],
        volume_mounts=[client.V1VolumeMount(name="data", mount_path="/data"),
                       client.V1VolumeMount(name="nested", mount_path="/data/in"),
                       client.V1VolumeMount(name="scratch", mount_path="/scratch")],
    )
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name="nightly-abcde", namespace="serving", annotations=annotations),
        spec=client.V1PodSpec(containers=[container], volumes=[
            client.V1Volume(name="data", host_path=client.V1HostPathVolumeSource(path="/srv/batch")),
            client.V1Volume(name="nested", host_path=client.V1HostPathVolumeSource(path="/srv/inputs/")),
            client.V1Volume(name="scratch", empty_dir=client.V1EmptyDirVolumeSource()),
        ]),
    )


def test_service_urls_go_to_the_router() -> None:
    assert service_url("http://chat-batch:8000", "serving", ROUTER) == f"{ROUTER}/ns/serving/svc/chat-batch"
    assert service_url("http://chat-batch.other.svc.cluster.local:8000/v1", "serving", ROUTER) == (
        f"{ROUTER}/ns/other/svc/chat-batch/v1")


def test_host_paths_list_only_host_path_mounts_longest_first() -> None:
    p = pod([])
    assert host_paths(p, p.spec.containers[0]) == [("/data/in", "/srv/inputs/"), ("/data", "/srv/batch")]


def test_the_command_is_the_pods_with_its_urls_mounted_paths_made_local() -> None:
    p = pod(["--input=/data/in/requests.jsonl", "--output", "/data/out/results-{shard}.jsonl", "--url",
             "http://chat-batch:8000", "--concurrency=8", "--checkpoint=/scratch/x", "--shards=4"],
            annotations={"batch.kubernetes.io/job-completion-index": "2"})
    command = client_command(p, "/usr/bin/python3", ROUTER)
    assert command is not None
    argv, env = command
    assert argv == ["/usr/bin/python3", "-m", "llmscale.cli", "batch", "run",
                    "--input=/srv/inputs/requests.jsonl", "--output", "/srv/batch/out/results-{shard}.jsonl",
                    "--url", f"{ROUTER}/ns/serving/svc/chat-batch", "--concurrency=8",
                    "--checkpoint=/scratch/x", "--shards=4"]  # an emptyDir is not a local folder: left as is
    assert env == {"OPENAI_API_KEY": "k", "JOB_COMPLETION_INDEX": "2"}


def test_a_pod_that_is_not_the_batch_client_runs_nothing() -> None:
    p = pod([])
    p.spec.containers[0].command = ["sleep", "3600"]
    assert client_command(p, "python3", ROUTER) is None
