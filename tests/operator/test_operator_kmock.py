"""The operator in-process against a mock Kubernetes API server (kmock): children applied with
server-side apply and owner references, a tick that scales on a canned queue, Events and status
written on change, and a bad object that does not crash anything.

The API server is kmock's emulator (a real HTTP server with discovery, list, watch and patch);
the operator is the real one (``llmscale.commands.run.serve``: Kopf, the official client, the real
policy); only the signal source is canned and the policy's wall clock is fixed.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp.web
import kmock
import kubernetes.client
import pytest
from prometheus_client import CollectorRegistry, generate_latest

from llmscale.api import LLMDeploymentSpec
from llmscale.commands.run import serve
from llmscale.controller.deps import Decider
from llmscale.controller.metrics import OperatorMetrics
from llmscale.controller.settings import OperatorSettings
from llmscale.policy import PolicyMemory, PoolState, Reason, decide
from llmscale.signals.queries import PoolRequest, PoolTarget
from llmscale.signals.snapshot import PodSignals, SignalSnapshot

NAMESPACE = "serving"
NAME = "chat"
UID = "0b5c5a9e-6f4e-4b43-9d55-5a1f3c9a7e01"
LLMDEPLOYMENTS = "llmscale.dev/v1alpha1/llmdeployments"
DEPLOYMENTS = "apps/v1/deployments"
SERVICES = "v1/services"
PDBS = "policy/v1/poddisruptionbudgets"
PODS = "v1/pods"
EVENTS = "v1/events"
JOBS = "batch/v1/jobs"
NAMESPACES = "v1/namespaces"

#: 2024-06-03 12:00:00 UTC, a Monday: outside the 22:00-06:00 trough window used by tests.
NOON = 1717416000.0


class ApplyingEmulator(kmock.KubernetesEmulator):
    """kmock's Kubernetes emulator, taught one thing the real API server does: a server-side apply
    (``PATCH`` with ``application/apply-patch+yaml``) of an object that does not exist creates it.

    kmock merges patches into stored objects but refuses to patch a missing one; everything else
    (discovery, list, watch, merge patches, status, deletion) is kmock's own.

    :meth:`refuse` makes it answer the server-side applies of one object with an error status, as
    an API server does for an invalid object (422) or while it fails (500), leaving the object as
    it was (kmock itself would store a patch even when a reaction answers it).
    """

    def refuse(self, resource: str, name: str, status: int | None) -> None:
        """Answer server-side applies of ``resource`` ``name`` with ``status`` from now on
        (``None``: accept them again)."""
        refusals: dict[tuple[str, str], int] = self.__dict__.setdefault("refusals", {})
        if status is None:
            refusals.pop((resource, name), None)
        else:
            refusals[resource, name] = status

    def delay(self, resource: str, name: str, seconds: float) -> None:
        """Answer server-side applies of ``resource`` ``name`` only after ``seconds`` (an API
        server behind a queue of writes, as in a creation burst)."""
        self.__dict__.setdefault("delays", {})[resource, name] = seconds

    async def _handle(self, request: Any) -> aiohttp.web.StreamResponse:
        content_type = request.headers.get("Content-Type", "")
        for (resource, name), seconds in self.__dict__.get("delays", {}).items():
            if (
                request.method == kmock.method.PATCH and content_type.startswith("application/apply-patch")
                and request.resource == kmock.resource(resource) and request.name == name
            ):
                await asyncio.sleep(seconds)
        for (resource, name), status in self.__dict__.get("refusals", {}).items():
            if (
                request.method == kmock.method.PATCH and content_type.startswith("application/apply-patch")
                and request.resource == kmock.resource(resource) and request.name == name
            ):
                return aiohttp.web.json_response(
                    {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": status,
                     "reason": "Invalid" if status == 422 else "InternalError",
                     "message": f"refused by the test: {resource} {name}"},
                    status=status,
                )
        if (
            request.method == kmock.method.PATCH
            and content_type.startswith("application/apply-patch")
            and request.resource is not None
            and request.name is not None
            and not request.subresource
        ):
            key = (request.resource, request.namespace, request.name)
            async with self._lock:
                if key not in self._objects or self._objects[key].deleted:
                    if key in self._objects:
                        self._objects[key].create(request.data)
                    else:
                        self._objects[key] = request.data
                    raw = self._objects[key].last.raw
                    await self._buses[request.resource].put({"type": "ADDED", "object": raw})
        return await super()._handle(request)


@dataclass
class CannedSignals:
    """A signal source that answers whatever the test sets, and records what it was asked (one
    entry per pool per fleet read)."""

    queue_depth: float | None = 0.0
    kv_cache_utilization: float | None = 0.1
    preemption_rate: float | None = 0.0
    fail: bool = False
    pods: tuple[PodSignals, ...] = ()
    asked: list[tuple[str, PoolTarget, frozenset[str] | None]] = field(default_factory=list)

    def snapshot(self, now: float) -> SignalSnapshot:
        return SignalSnapshot(
            observed_at=now,
            queue_depth=self.queue_depth,
            running_requests=4.0,
            kv_cache_utilization=self.kv_cache_utilization,
            preemption_rate=self.preemption_rate,
            ttft_p95_s=0.3,
            itl_p95_s=0.03,
            replicas_reporting=2,
            pods=self.pods,
        )

    async def read_fleet(self, pools: Sequence[PoolRequest], now: float) -> dict[PoolTarget, SignalSnapshot]:
        self.asked.extend((r.profile.name, r.target, r.pods) for r in pools)
        if self.fail:
            raise ConnectionRefusedError("canned Prometheus is down")
        return {r.target: self.snapshot(now) for r in pools}


@dataclass
class FakeClock:
    """Wall clock of the policy, stepped by the tests (the loop clock still runs for Kopf)."""

    now: float = NOON

    def __call__(self) -> float:
        return self.now


def llmdeployment(spec: dict[str, Any] | None = None, *, name: str = NAME, uid: str = UID) -> dict[str, Any]:
    """Return an LLMDeployment body as the API server would serve it."""
    return {
        "apiVersion": "llmscale.dev/v1alpha1",
        "kind": "LLMDeployment",
        "metadata": {"name": name, "namespace": NAMESPACE, "uid": uid, "generation": 1, "resourceVersion": "1"},
        "spec": spec if spec is not None else {
            "model": {"name": "meta-llama/Llama-3.1-8B-Instruct", "preset": "llama-3.1-8b"},
            "engine": {"type": "mock", "image": "llmscale:dev"},
            "scaling": {"tickSeconds": 1},
            "headroom": {"replicas": 1, "coldStartSeconds": 120},
        },
    }


def pod(name: str, *, ready: bool, pool: str = "interactive", owner: str = NAME) -> dict[str, Any]:
    """Return a pod of one pool as a kubelet (or KWOK) would report it."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "labels": {
                "app.kubernetes.io/managed-by": "llmscale",
                "llmscale.dev/deployment": owner,
                "llmscale.dev/pool": pool,
            },
        },
        "status": {
            "phase": "Running",
            "conditions": [
                {"type": "PodScheduled", "status": "True"},
                {"type": "Ready", "status": "True" if ready else "False"},
            ],
        },
    }


@pytest.fixture()
async def kube() -> AsyncIterator[ApplyingEmulator]:
    """A running mock API server with the resources the operator uses declared for discovery."""
    async with ApplyingEmulator() as emulator, kmock.Server(emulator):
        emulator.resources[LLMDEPLOYMENTS] = kmock.ResourceInfo(
            kind="LLMDeployment", singular="llmdeployment", namespaced=True, shortnames={"llmdep"},
            subresources={"status"}, verbs={"get", "list", "watch", "patch", "create", "delete", "update"},
        )
        emulator.resources[DEPLOYMENTS] = kmock.ResourceInfo(
            kind="Deployment", namespaced=True, subresources={"status", "scale"},
            verbs={"get", "list", "watch", "patch", "create", "delete"},
        )
        emulator.resources[PODS] = kmock.ResourceInfo(kind="Pod", namespaced=True,
                                                      verbs={"get", "list", "watch", "patch"})
        emulator.resources[SERVICES] = kmock.ResourceInfo(kind="Service", namespaced=True, verbs={"patch", "delete"})
        emulator.resources[PDBS] = kmock.ResourceInfo(kind="PodDisruptionBudget", namespaced=True, verbs={"patch"})
        emulator.resources[EVENTS] = kmock.ResourceInfo(kind="Event", namespaced=True, verbs={"create"})
        emulator.resources[JOBS] = kmock.ResourceInfo(kind="Job", namespaced=True, subresources={"status"},
                                                      verbs={"get", "list", "watch", "patch"})
        # Kopf waits for namespaces to be served; with cluster scanning off (kmock 0.8 cannot
        # parse the path /api/v1/namespaces) it never lists them and watches `serving` as named.
        emulator.resources[NAMESPACES] = kmock.ResourceInfo(kind="Namespace", namespaced=False, verbs={"list", "watch"})
        yield emulator


def kube_config_for(emulator: kmock.RawHandler) -> kubernetes.client.Configuration:
    config = kubernetes.client.Configuration()
    config.host = str(emulator.url).rstrip("/")
    return config


@dataclass
class RunningOperator:
    thread: threading.Thread
    stop: threading.Event
    ready: threading.Event
    metrics: OperatorMetrics
    signals: CannedSignals
    clock: FakeClock


@pytest.fixture()
def settings() -> OperatorSettings:
    # Fast base timer: objects tick on spec.scaling.tickSeconds (1 s in the tests' spec).
    return OperatorSettings(
        namespaces=(NAMESPACE,), tick_base_seconds=0.2, metrics_host="127.0.0.1", metrics_port=0,
        status_refresh_seconds=0.0, cluster_scanning=False,
    )


@pytest.fixture()
async def start_operator(
    kube: ApplyingEmulator, settings: OperatorSettings
) -> AsyncIterator[Callable[..., Any]]:
    """Yield an async function that starts the operator against ``kube``; every operator started
    is stopped and joined at teardown.

    The operator runs in a thread with its own event loop (as Kopf's ``KopfRunner`` does): Kopf
    cancels every task created in its loop after it started, the test's own included.
    """
    running: list[RunningOperator] = []

    async def start(signals: CannedSignals | None = None, clock: FakeClock | None = None,
                    decider: Decider = decide) -> RunningOperator:
        stop, ready = threading.Event(), threading.Event()
        metrics = OperatorMetrics(CollectorRegistry())
        signals = signals or CannedSignals()
        clock = clock or FakeClock()
        coro = serve(
            settings, kube_config=kube_config_for(kube), signals=signals, decide=decider,
            metrics=metrics, clock=clock, stop_flag=stop, ready=ready,
        )
        thread = threading.Thread(target=asyncio.run, args=(coro,), name="operator", daemon=True)
        thread.start()
        op = RunningOperator(thread, stop, ready, metrics, signals, clock)
        running.append(op)
        assert await asyncio.to_thread(ready.wait, 10), "the operator did not get ready in 10 s"
        return op

    yield start
    for op in running:
        op.stop.set()
    for op in running:
        await asyncio.to_thread(op.thread.join, 15)
        assert not op.thread.is_alive(), "the operator did not stop in 15 s"


def ticks(op: RunningOperator) -> float:
    """Ticks the operator ran (decided), from its own tick-duration histogram."""
    return op.metrics.registry.get_sample_value("llmscale_tick_duration_seconds_count") or 0.0


async def eventually(check: Callable[[], Any], timeout: float = 8.0, what: str = "condition") -> Any:
    """Poll ``check`` until it returns a truthy value or ``timeout`` seconds pass."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        result = check()
        if result:
            return result
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(0.05)


def stored(emulator: ApplyingEmulator, resource: str, name: str) -> dict[str, Any] | None:
    """Return the stored object (as the API server would serve it), or ``None``."""
    try:
        obj = emulator.objects[resource, NAMESPACE, name]
    except KeyError:
        return None
    return None if obj.deleted else obj.raw


def applies(emulator: ApplyingEmulator, resource: str, name: str) -> list[Any]:
    """Return the server-side apply requests for one object, oldest first."""
    return [
        r for r in emulator
        if r.method == kmock.method.PATCH and r.resource == kmock.resource(resource) and r.name == name
        and r.headers.get("Content-Type", "").startswith("application/apply-patch")
    ]


def posted_events(emulator: ApplyingEmulator) -> list[dict[str, Any]]:
    return [r.data for r in emulator if r.method == kmock.method.POST and r.resource == kmock.resource(EVENTS)]


def status_patches(emulator: ApplyingEmulator, name: str = NAME) -> list[dict[str, Any]]:
    return [
        r.data for r in emulator
        if r.method == kmock.method.PATCH and r.resource == kmock.resource(LLMDEPLOYMENTS) and r.name == name
        and r.subresource == "status"
    ]


async def test_create_applies_the_owned_labelled_children_by_forced_server_side_apply(
    kube: ApplyingEmulator, start_operator: Callable[..., Any]
) -> None:
    kube.objects[LLMDEPLOYMENTS, NAMESPACE, NAME] = llmdeployment()
    await start_operator()

    deployment = await eventually(lambda: stored(kube, DEPLOYMENTS, NAME), what="Deployment chat")
    service = await eventually(lambda: stored(kube, SERVICES, NAME), what="Service chat")
    pdb = await eventually(lambda: stored(kube, PDBS, NAME), what="PodDisruptionBudget chat")

    for obj in (deployment, service, pdb):
        assert obj["metadata"]["ownerReferences"] == [{
            "apiVersion": "llmscale.dev/v1alpha1", "kind": "LLMDeployment", "name": NAME, "uid": UID,
            "controller": True, "blockOwnerDeletion": True,
        }]
        assert obj["metadata"]["labels"] == {
            "app.kubernetes.io/managed-by": "llmscale", "app.kubernetes.io/name": "mock",
            "app.kubernetes.io/instance": NAME, "llmscale.dev/deployment": NAME, "llmscale.dev/pool": "interactive",
        }
    # min 1, headroom 1: one replica of demand plus one warm.
    assert deployment["spec"]["replicas"] == 2
    # Every write of a child is a server-side apply by the llmscale field manager, forced.
    for resource, name in ((DEPLOYMENTS, NAME), (SERVICES, NAME), (PDBS, NAME)):
        requests = applies(kube, resource, name)
        assert requests, f"no server-side apply of {resource} {name}"
        assert all(r.params.get("fieldManager") == "llmscale" and r.params.get("force") == "true" for r in requests)
    # No batch pool without spec.batch.
    assert stored(kube, DEPLOYMENTS, f"{NAME}-batch") is None


def events_with(emulator: ApplyingEmulator, reason: str) -> list[dict[str, Any]]:
    return [e for e in posted_events(emulator) if e.get("reason") == reason]


def condition(status: dict[str, Any], type_: str) -> dict[str, Any] | None:
    return next((c for c in status.get("conditions", []) if c["type"] == type_), None)


async def _scale_up_on_a_long_queue(
    kube: ApplyingEmulator, start_operator: Callable[..., Any]
) -> tuple[Any, int, list[dict[str, Any]]]:
    """Two Ready replicas and 30 waiting requests: the operator, the replicas the policy decides,
    and the ScaledUp Events once there is one."""
    kube.objects[LLMDEPLOYMENTS, NAMESPACE, NAME] = llmdeployment()
    kube.objects[PODS, NAMESPACE, "chat-a"] = pod("chat-a", ready=True)
    kube.objects[PODS, NAMESPACE, "chat-b"] = pod("chat-b", ready=True)
    # 30 waiting requests, target 3 per replica: the queue asks for 10 replicas of demand.
    op = await start_operator(CannedSignals(queue_depth=30.0))

    # What the real policy says for this tick (the operator must apply exactly that): with the
    # default scale-up limit of 4 replicas a minute, 2 -> 6.
    expected = decide(
        LLMDeploymentSpec.model_validate(llmdeployment()["spec"]),
        (CannedSignals(queue_depth=30.0).snapshot(NOON),),
        PoolState(interactive_replicas=2, interactive_ready=2), PolicyMemory(), NOON,
    ).interactive_replicas
    assert expected > 2
    scaled = await eventually(lambda: events_with(kube, "ScaledUp"), what="a ScaledUp Event")
    return op, expected, scaled


async def test_a_long_queue_scales_the_deployment_up(
    kube: ApplyingEmulator, start_operator: Callable[..., Any]
) -> None:
    op, expected, _ = await _scale_up_on_a_long_queue(kube, start_operator)
    deployment = stored(kube, DEPLOYMENTS, NAME)
    assert deployment is not None
    new = deployment["spec"]["replicas"]
    assert new == expected
    # The replicas change was a server-side apply of the whole Deployment by llmscale.
    last_apply = applies(kube, DEPLOYMENTS, NAME)[-1]
    assert last_apply.data["spec"]["replicas"] == new
    assert last_apply.params["fieldManager"] == "llmscale"
    text = generate_latest(op.metrics.registry).decode()
    assert f'llmscale_desired_replicas{{name="chat",namespace="serving",pool="interactive"}} {new}.0' in text
    assert 'llmscale_decisions_total{direction="up"' in text
    # The fleet reader asked for the interactive pool with its pods from the API server.
    assert op.signals.asked[0] == ("vllm", PoolTarget(NAMESPACE, NAME, "interactive"), frozenset({"chat-a", "chat-b"}))


async def test_a_scale_up_on_a_long_queue_has_its_event(
    kube: ApplyingEmulator, start_operator: Callable[..., Any]
) -> None:
    _, expected, scaled = await _scale_up_on_a_long_queue(kube, start_operator)
    message = scaled[0]["message"]
    assert message.startswith(f"Scaled LLMDeployment {NAMESPACE}/{NAME} from 2 to {expected} replicas: ")
    assert "queue" in message.lower()
    assert scaled[0]["involvedObject"]["uid"] == UID


async def test_a_scale_up_on_a_long_queue_patches_the_status(
    kube: ApplyingEmulator, start_operator: Callable[..., Any]
) -> None:
    _, new, _ = await _scale_up_on_a_long_queue(kube, start_operator)
    status = await eventually(
        lambda: (stored(kube, LLMDEPLOYMENTS, NAME) or {}).get("status", {}).get("replicas", {}).get("desired") == new
        and stored(kube, LLMDEPLOYMENTS, NAME)["status"],  # type: ignore[index]
        what="status.replicas.desired == new",
    )
    assert status["replicas"]["ready"] == 2
    assert status["signals"]["queueDepth"] == 30.0
    assert status["lastDecision"]["interactiveReplicas"] == new
    assert status["lastDecision"]["reasons"]
    assert status["policyState"]["scaleEvents"]
    assert [c["type"] for c in status["conditions"]] == [
        "Ready", "ScalingActive", "MetricsAvailable", "RateWindowFits", "EnginesStalled", "AbleToScale",
        "ScalingLimited", "BatchWindowOpen", "BatchBacklog", "DeadlineAtRisk", "PolicyStateReadable",
        "CapacityModel", "Diagnosis", "ChildrenApplied", "SoleAutoscaler", "PodsHealthy",
        "RolloutProgressing", "SLOTargetsOnBuckets", "EngineCalibrated",
    ]
    # The lead time the headroom looked ahead with: no pod measured yet, so coldStartSeconds.
    assert status["replicas"]["leadTimeSeconds"] > 0
    assert condition(status, "MetricsAvailable")["status"] == "True"  # type: ignore[index]
    assert condition(status, "BatchWindowOpen")["status"] == "False"  # type: ignore[index]
    # Every status write went to the status subresource; the spec was never written.
    for r in kube:
        if r.method == kmock.method.PATCH and r.resource == kmock.resource(LLMDEPLOYMENTS):
            assert not isinstance(r.data, dict) or "spec" not in r.data, r.data


async def test_status_is_not_rewritten_when_nothing_changed(
    kube: ApplyingEmulator, start_operator: Callable[..., Any], settings: OperatorSettings
) -> None:
    object.__setattr__(settings, "status_refresh_seconds", 3600.0)
    kube.objects[LLMDEPLOYMENTS, NAMESPACE, NAME] = llmdeployment()
    for name in ("chat-a", "chat-b"):
        kube.objects[PODS, NAMESPACE, name] = pod(name, ready=True)
    # Quiet traffic at a fixed time: every tick decides the same 2 replicas (KV 2 × 0.1 / the auto
    # target 0.34 of Llama-3.1-8B on one H100 = 0.59 → 1, + headroom 1).
    op = await start_operator(CannedSignals(queue_depth=0.0, kv_cache_utilization=0.1))

    await eventually(lambda: status_patches(kube), what="the first status patch")
    done = ticks(op)
    await eventually(lambda: ticks(op) >= done + 3, what="three more ticks")
    assert len(status_patches(kube)) == 1
    assert not events_with(kube, "ScaledUp") and not events_with(kube, "ScaledDown")
    # Only the create handler applied the Deployment (kmock does not bump resourceVersion, so Kopf
    # may see the creation twice; both applies are identical), never a replicas change.
    assert [r.data["spec"]["replicas"] for r in applies(kube, DEPLOYMENTS, NAME)] in ([2], [2, 2])


async def _status_with_unknown_signals(
    kube: ApplyingEmulator, start_operator: Callable[..., Any]
) -> tuple[Any, dict[str, Any]]:
    kube.objects[LLMDEPLOYMENTS, NAMESPACE, NAME] = llmdeployment()
    kube.objects[PODS, NAMESPACE, "chat-a"] = pod("chat-a", ready=True)
    kube.objects[PODS, NAMESPACE, "chat-b"] = pod("chat-b", ready=False)
    op = await start_operator(CannedSignals(fail=True))

    status = await eventually(
        lambda: (stored(kube, LLMDEPLOYMENTS, NAME) or {}).get("status", {}).get("conditions")
        and stored(kube, LLMDEPLOYMENTS, NAME)["status"],  # type: ignore[index]
        what="status conditions",
    )
    return op, status


async def test_unknown_signals_hold_replicas(
    kube: ApplyingEmulator, start_operator: Callable[..., Any]
) -> None:
    _, status = await _status_with_unknown_signals(kube, start_operator)
    # One of two replicas is ready: the pool serves.
    ready = condition(status, "Ready")
    assert ready is not None and ready["status"] == "True" and ready["reason"] == "Serving"
    assert {"desired": 2, "ready": 1}.items() <= status["replicas"].items()
    assert stored(kube, DEPLOYMENTS, NAME)["spec"]["replicas"] == 2  # type: ignore[index]


async def test_unknown_signals_are_reported_unknown(
    kube: ApplyingEmulator, start_operator: Callable[..., Any]
) -> None:
    op, status = await _status_with_unknown_signals(kube, start_operator)
    assert condition(status, "MetricsAvailable")["status"] == "False"  # type: ignore[index]
    assert "queueDepth" not in status["signals"]  # unknown, not zero
    assert 'llmscale_signal_read_errors_total{name="chat",namespace="serving"}' in (
        generate_latest(op.metrics.registry).decode()
    )


async def _start_with_a_bad_object(kube: ApplyingEmulator, start_operator: Callable[..., Any]) -> None:
    bad_uid = "6d1f0c3e-2a57-4c1e-8f0e-0a9b7c6d5e4f"
    kube.objects[LLMDEPLOYMENTS, NAMESPACE, "broken"] = llmdeployment(
        {"model": {"name": "x", "preset": "gpt-17"}, "replicas": {"min": 5, "max": 2}}, name="broken", uid=bad_uid,
    )
    kube.objects[LLMDEPLOYMENTS, NAMESPACE, NAME] = llmdeployment()
    await start_operator()


async def test_a_bad_object_gets_invalid_spec(
    kube: ApplyingEmulator, start_operator: Callable[..., Any]
) -> None:
    await _start_with_a_bad_object(kube, start_operator)
    status = await eventually(
        lambda: (stored(kube, LLMDEPLOYMENTS, "broken") or {}).get("status", {}).get("conditions")
        and stored(kube, LLMDEPLOYMENTS, "broken")["status"],  # type: ignore[index]
        what="status of the bad object",
    )
    ready = condition(status, "Ready")
    assert ready is not None and ready["status"] == "False" and ready["reason"] == "InvalidSpec"
    assert "spec.model.preset" in ready["message"]
    assert "spec.replicas" in ready["message"]
    warnings = await eventually(lambda: events_with(kube, "InvalidSpec"), what="an InvalidSpec Event")
    assert warnings[0]["type"] == "Warning" and warnings[0]["involvedObject"]["name"] == "broken"
    # No child of the bad object.
    assert stored(kube, DEPLOYMENTS, "broken") is None and not applies(kube, SERVICES, "broken")


async def test_a_bad_object_does_not_stop_the_operator(
    kube: ApplyingEmulator, start_operator: Callable[..., Any]
) -> None:
    await _start_with_a_bad_object(kube, start_operator)
    await eventually(lambda: events_with(kube, "InvalidSpec"), what="an InvalidSpec Event")
    # The good one is served all the same.
    await eventually(lambda: stored(kube, DEPLOYMENTS, NAME), what="Deployment chat")


async def test_removing_spec_batch_deletes_the_batch_deployment(
    kube: ApplyingEmulator, start_operator: Callable[..., Any]
) -> None:
    body = llmdeployment()
    body["spec"]["batch"] = {"windows": [{"start": "22:00", "end": "06:00", "timezone": "UTC"}], "replicas": 3}
    kube.objects[LLMDEPLOYMENTS, NAMESPACE, NAME] = body
    await start_operator()

    batch = await eventually(lambda: stored(kube, DEPLOYMENTS, f"{NAME}-batch"), what="Deployment chat-batch")
    assert batch["metadata"]["labels"]["llmscale.dev/pool"] == "batch"
    service = await eventually(lambda: stored(kube, SERVICES, f"{NAME}-batch"), what="Service chat-batch")
    assert service["spec"]["selector"] == {"llmscale.dev/deployment": NAME, "llmscale.dev/pool": "batch"}
    assert service["metadata"]["ownerReferences"][0]["uid"] == UID
    assert batch["spec"]["replicas"] == 0  # noon is outside the 22:00-06:00 trough
    await eventually(lambda: (stored(kube, LLMDEPLOYMENTS, NAME) or {}).get("status"), what="a first status")

    # The user (or GitOps) removes spec.batch: a merge patch that bumps the generation.
    async with kube.patch(
        f"/apis/llmscale.dev/v1alpha1/namespaces/{NAMESPACE}/llmdeployments/{NAME}",
        json={"metadata": {"generation": 2}, "spec": {"batch": None}},
        headers={"Content-Type": "application/merge-patch+json"},
    ) as response:
        assert response.status == 200

    await eventually(lambda: stored(kube, DEPLOYMENTS, f"{NAME}-batch") is None, what="chat-batch deleted")
    await eventually(lambda: events_with(kube, "BatchPoolRemoved"), what="a BatchPoolRemoved Event")
    assert stored(kube, DEPLOYMENTS, NAME) is not None
    assert [r for r in kube if r.method == kmock.method.DELETE and r.resource == kmock.resource(SERVICES)
            and r.name == f"{NAME}-batch"], "the batch Service was not deleted"
    assert stored(kube, SERVICES, NAME) is not None


async def test_unreadable_policy_state_is_a_warning_not_a_silent_reset(
    kube: ApplyingEmulator, start_operator: Callable[..., Any]
) -> None:
    body = llmdeployment()
    # One good recommendation, one that is not a number, and scale events that are not a list.
    body["status"] = {"policyState": {"recommendations": [[NOON - 30, 2], [NOON - 20, "many"]], "scaleEvents": "none"}}
    kube.objects[LLMDEPLOYMENTS, NAMESPACE, NAME] = body
    for name in ("chat-a", "chat-b"):
        kube.objects[PODS, NAMESPACE, name] = pod(name, ready=True)
    await start_operator(CannedSignals(queue_depth=0.0, kv_cache_utilization=0.1))

    warnings = await eventually(lambda: events_with(kube, Reason.PolicyStateUnreadable), what="a PolicyStateUnreadable Event")
    assert warnings[0]["type"] == "Warning" and warnings[0]["involvedObject"]["uid"] == UID
    assert "recommendations[1]" in warnings[0]["message"] and "scaleEvents" in warnings[0]["message"]
    status = await eventually(
        lambda: condition((stored(kube, LLMDEPLOYMENTS, NAME) or {}).get("status", {}), "PolicyStateReadable")
        and stored(kube, LLMDEPLOYMENTS, NAME)["status"],  # type: ignore[index]
        what="the PolicyStateReadable condition",
    )
    readable = condition(status, "PolicyStateReadable")
    assert readable is not None and (readable["status"], readable["reason"]) == ("False", Reason.PolicyStateUnreadable)
    # What could be read was kept and written back; the rest is gone from status, not reset.
    assert [NOON - 30, 2] in status["policyState"]["recommendations"]
    assert all(isinstance(r, int) for _, r in status["policyState"]["recommendations"])
    assert len(events_with(kube, Reason.PolicyStateUnreadable)) == 1


#: 2024-06-03 23:00:00 UTC, a Monday: inside the 22:00-06:00 trough window used by tests.
TROUGH = NOON + 11 * 3600


def with_batch_pool(replicas: int = 3) -> dict[str, Any]:
    """The test LLMDeployment with a batch pool of exactly ``replicas`` while a Job runs
    (``minReplicas`` = ``replicas``) and a 22:00-06:00 UTC trough."""
    body = llmdeployment()
    body["spec"]["batch"] = {"windows": [{"start": "22:00", "end": "06:00", "timezone": "UTC"}], "replicas": replicas,
                             "minReplicas": replicas}
    return body


#: Tuesday 06:00 UTC: two 22:00-06:00 troughs after NOON.
DUE_IN_TWO_NIGHTS = {"llmscale.dev/deadline": "2024-06-05T06:00:00Z"}


def job(name: str, *, suspend: bool = True, active: int = 0, owner: str = NAME, requests: int = 1000,
        created: str = "2024-06-03T11:00:00Z", annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """Return a batch Job labelled for ``owner``, as the API server would serve it: 1,000 requests
    of 1,000 prompt and 200 output tokens, created at 11:00 (so due 11:00 the next day)."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name, "namespace": NAMESPACE, "uid": f"uid-{name}", "creationTimestamp": created,
            "labels": {"llmscale.dev/deployment": owner},
            "annotations": {"llmscale.dev/batch-requests": str(requests),
                            "llmscale.dev/batch-input-tokens": str(requests * 1000),
                            "llmscale.dev/batch-output-tokens": str(requests * 200), **(annotations or {})},
        },
        "spec": {"suspend": suspend, "template": {"spec": {"containers": [{"name": "batch", "image": "llmscale:dev"}]}}},
        "status": {"active": active},
    }


def stored_status(emulator: ApplyingEmulator) -> dict[str, Any]:
    return (stored(emulator, LLMDEPLOYMENTS, NAME) or {}).get("status", {})


def replicas_of(emulator: ApplyingEmulator, name: str) -> int | None:
    deployment = stored(emulator, DEPLOYMENTS, name)
    return None if deployment is None else int(deployment["spec"]["replicas"])


async def start_quiet_with_batch_pool(
    kube: ApplyingEmulator, start_operator: Callable[..., Any]
) -> RunningOperator:
    """Start the operator at noon on a quiet pool of 2 ready replicas with a (closed) batch pool,
    and wait until both Deployments exist and the first status is written."""
    kube.objects[LLMDEPLOYMENTS, NAMESPACE, NAME] = with_batch_pool()
    # A backlog, waiting for the trough: due in two nights, so it can wait for either.
    kube.objects[JOBS, NAMESPACE, "nightly"] = job("nightly", annotations=DUE_IN_TWO_NIGHTS)
    for name in ("chat-a", "chat-b"):
        kube.objects[PODS, NAMESPACE, name] = pod(name, ready=True)
    op: RunningOperator = await start_operator(CannedSignals(queue_depth=0.0), FakeClock(NOON))
    await eventually(lambda: replicas_of(kube, f"{NAME}-batch") == 0, what="chat-batch at 0 replicas")
    await eventually(lambda: stored_status(kube).get("replicas", {}).get("desired") == 2, what="a first status")
    return op


async def _batch_apply_refused_while_both_pools_scale(
    kube: ApplyingEmulator, start_operator: Callable[..., Any]
) -> tuple[Any, list[dict[str, Any]]]:
    """Interactive 2 -> 6 applies, batch 0 -> 3 is refused (500) in the same tick: the operator
    and the ScaledUp Events once there is one."""
    op = await start_quiet_with_batch_pool(kube, start_operator)
    kube.refuse(DEPLOYMENTS, f"{NAME}-batch", 500)
    # 30 waiting requests (10 replicas of demand at 3 per replica) in the trough, where the batch
    # pool opens: both pools change in one tick.
    op.signals.queue_depth = 30.0
    op.clock.now = TROUGH
    return op, await eventually(lambda: events_with(kube, "ScaledUp"), what="a ScaledUp Event")


async def test_a_refused_batch_apply_keeps_the_interactive_scale(
    kube: ApplyingEmulator, start_operator: Callable[..., Any]
) -> None:
    """The interactive scale stands, with its Event, its status and its scale event in the policy memory."""
    _, scaled = await _batch_apply_refused_while_both_pools_scale(kube, start_operator)
    assert scaled[0]["message"].startswith(f"Scaled LLMDeployment {NAMESPACE}/{NAME} from 2 to 6 replicas: ")
    assert replicas_of(kube, NAME) == 6
    status = await eventually(
        lambda: stored_status(kube) if stored_status(kube).get("replicas", {}).get("desired") == 6 else None,
        what="status.replicas.desired == 6",
    )
    assert status["policyState"]["scaleEvents"] == [[TROUGH, 4]]
    assert status["replicas"]["batch"] == 0  # what is applied, not what was decided
    assert status["lastDecision"]["batchReplicas"] == 3


async def _three_ticks_after_a_refused_batch_apply(
    kube: ApplyingEmulator, start_operator: Callable[..., Any]
) -> tuple[Any, list[dict[str, Any]]]:
    op, scaled = await _batch_apply_refused_while_both_pools_scale(kube, start_operator)
    await eventually(
        lambda: stored_status(kube) if stored_status(kube).get("replicas", {}).get("desired") == 6 else None,
        what="status.replicas.desired == 6",
    )
    done = ticks(op)
    await eventually(lambda: ticks(op) >= done + 3, what="three more ticks")
    return op, scaled


async def test_a_refused_batch_apply_keeps_the_interactive_scale_in_the_rate_limits_memory(
    kube: ApplyingEmulator, start_operator: Callable[..., Any]
) -> None:
    """The next ticks still count the interactive scale against the scale-up rate limit (4
    replicas a minute) instead of scaling on to 10."""
    _, scaled = await _three_ticks_after_a_refused_batch_apply(kube, start_operator)
    # The remembered +4 holds the pool at the rate limit; without it the next tick would apply 10.
    assert replicas_of(kube, NAME) == 6
    assert [e["message"] for e in events_with(kube, "ScaledUp")] == [scaled[0]["message"]]
    assert stored_status(kube)["policyState"]["scaleEvents"] == [[TROUGH, 4]]
    assert condition(stored_status(kube), "ScalingLimited")["reason"] == Reason.ScaleUpLimit  # type: ignore[index]


async def test_a_refused_batch_apply_leaves_the_batch_pool_unchanged_counting_every_refusal(
    kube: ApplyingEmulator, start_operator: Callable[..., Any]
) -> None:
    op, _ = await _three_ticks_after_a_refused_batch_apply(kube, start_operator)
    assert replicas_of(kube, f"{NAME}-batch") == 0
    assert not [e for e in posted_events(kube) if e.get("message", "").startswith("Scaled batch pool")]
    text = generate_latest(op.metrics.registry).decode()
    assert 'llmscale_apply_errors_total{kind="Deployment"}' in text


async def _status_after_a_refused_interactive_apply(
    kube: ApplyingEmulator, start_operator: Callable[..., Any]
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The other way round: interactive 2 -> 6 is refused (422), batch 0 -> 3 applies: the ScaledUp
    Events and the status once it shows the batch scale."""
    op = await start_quiet_with_batch_pool(kube, start_operator)
    kube.refuse(DEPLOYMENTS, NAME, 422)
    op.signals.queue_depth = 30.0
    op.clock.now = TROUGH

    scaled = await eventually(lambda: events_with(kube, "ScaledUp"), what="a ScaledUp Event")
    status = await eventually(
        lambda: stored_status(kube) if stored_status(kube).get("replicas", {}).get("batch") == 3 else None,
        what="status.replicas.batch == 3",
    )
    return scaled, status


async def test_a_refused_interactive_apply_keeps_the_batch_scale(
    kube: ApplyingEmulator, start_operator: Callable[..., Any]
) -> None:
    """The batch pool scales with its Event and status."""
    scaled, _ = await _status_after_a_refused_interactive_apply(kube, start_operator)
    assert scaled[0]["message"].startswith(
        f"Scaled batch pool of LLMDeployment {NAMESPACE}/{NAME} from 0 to 3 replicas: "
    )
    assert replicas_of(kube, f"{NAME}-batch") == 3


async def test_a_refused_interactive_apply_leaves_no_scale_event_in_memory(
    kube: ApplyingEmulator, start_operator: Callable[..., Any]
) -> None:
    """The policy memory keeps no scale event for a scale that did not happen, so the rate limit is
    not consumed."""
    _, status = await _status_after_a_refused_interactive_apply(kube, start_operator)
    assert status["replicas"]["desired"] == 2
    assert status["policyState"]["scaleEvents"] == []
    assert replicas_of(kube, NAME) == 2
    assert not [e for e in events_with(kube, "ScaledUp") if not e["message"].startswith("Scaled batch pool")]


# ------------------------------------------------------------------------------------------
# Issue 11: a refused apply of any child, and the pods' deletion costs
# ------------------------------------------------------------------------------------------


async def _refused_service(
    kube: ApplyingEmulator, start_operator: Callable[..., Any]
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Case 10's kind: the Service apply failed outside the InvalidSpec path and left no children,
    no condition and no retry. The ApplyFailed Events and the ChildrenApplied condition once
    both are there."""
    kube.refuse(SERVICES, NAME, 422)
    kube.objects[LLMDEPLOYMENTS, NAMESPACE, NAME] = llmdeployment()
    await start_operator()
    failed = await eventually(lambda: events_with(kube, "ApplyFailed"), what="an ApplyFailed Event")
    cond = await eventually(lambda: condition(stored_status(kube), "ChildrenApplied"), what="ChildrenApplied")
    return failed, cond


async def test_a_refused_service_gets_a_condition_with_one_warning_event(
    kube: ApplyingEmulator, start_operator: Callable[..., Any]
) -> None:
    """ChildrenApplied=False with the API server's answer, one ApplyFailed Warning Event."""
    failed, cond = await _refused_service(kube, start_operator)
    assert f"Service {NAMESPACE}/{NAME}" in failed[0]["message"] and "422" in failed[0]["message"]
    assert failed[0]["type"] == "Warning"
    assert cond["status"] == "False" and cond["reason"] == "ApplyFailed", cond
    assert "refused by the test" in cond["message"]
    assert stored(kube, DEPLOYMENTS, NAME) is None  # applied in order: nothing after the Service


async def test_a_refused_service_is_retried(
    kube: ApplyingEmulator, start_operator: Callable[..., Any]
) -> None:
    """The children once the API server takes them."""
    await _refused_service(kube, start_operator)
    kube.refuse(SERVICES, NAME, None)  # e.g. the admission policy was fixed
    await eventually(lambda: stored(kube, DEPLOYMENTS, NAME), timeout=25, what="the children after the retry")
    await eventually(lambda: (condition(stored_status(kube), "ChildrenApplied") or {}).get("status") == "True",
                     timeout=10, what="ChildrenApplied=True")
    assert len(events_with(kube, "ApplyFailed")) == 1  # one Event per distinct answer


async def test_a_tick_does_not_apply_the_children_again_while_their_apply_is_in_flight(
    kube: ApplyingEmulator, start_operator: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 14: in a creation burst of 1,000 objects the create handlers' applies queued for
    minutes; every tick found the Deployment missing past the grace and queued the children
    again (1,800 Service applies, 45 Deployments in three minutes). A tick now waits for the
    apply in flight."""
    monkeypatch.setattr("llmscale.controller.tick.CHILDREN_GRACE_S", 0.3)
    kube.delay(SERVICES, NAME, 3.0)  # ten 0.3 s graces, three 1 s ticks
    kube.objects[LLMDEPLOYMENTS, NAMESPACE, NAME] = llmdeployment()
    op = await start_operator()

    await eventually(lambda: stored(kube, DEPLOYMENTS, NAME), timeout=20, what="Deployment chat")
    await eventually(lambda: ticks(op) >= 1, timeout=10, what="a tick that decided")
    # Requests in the order received: one Service apply before the first Deployment apply, however
    # many ticks ran while it was held (Kopf may run the handler again afterwards: not a tick).
    first_deployment = applies(kube, DEPLOYMENTS, NAME)[0]
    services = [r for r in applies(kube, SERVICES, NAME) if r.id < first_deployment.id]
    assert len(services) == 1, "the Service was applied again while its apply was in flight"


async def test_a_scale_down_first_marks_the_idle_pod_cheapest(
    kube: ApplyingEmulator, start_operator: Callable[..., Any]
) -> None:
    """Case 5's kind: the ReplicaSet must remove the least-loaded pod. Before the tick lowers the
    replicas it annotates each Ready pod with its requests in flight (an unknown load is never
    "idle") and, below that, its share of the pool's prefix-cache hits (issue 23), so the idle pod
    whose cache serves nothing goes first, then the idle one with a warm cache."""
    spec = llmdeployment()["spec"] | {"replicas": {"min": 1, "max": 2}}
    kube.objects[LLMDEPLOYMENTS, NAMESPACE, NAME] = llmdeployment(spec)
    for name in ("chat-busy", "chat-idle", "chat-cold", "chat-silent"):
        kube.objects[PODS, NAMESPACE, name] = pod(name, ready=True)
    kube.objects[DEPLOYMENTS, NAMESPACE, NAME] = {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": NAME, "namespace": NAMESPACE, "labels": {
            "app.kubernetes.io/managed-by": "llmscale", "llmscale.dev/deployment": NAME,
            "llmscale.dev/pool": "interactive"}},
        "spec": {"replicas": 4},
    }
    signals = CannedSignals(pods=(
        PodSignals("chat-busy", queue_depth=2.0, running_requests=4.0, prefix_cache_hits_rate=150.0),
        PodSignals("chat-idle", queue_depth=0.0, running_requests=0.0, prefix_cache_hits_rate=50.0),
        PodSignals("chat-cold", queue_depth=0.0, running_requests=0.0, prefix_cache_hits_rate=0.0),
    ))
    await start_operator(signals)

    # The operator's start and first tick: seconds on a free machine, more beside a busy test run.
    await eventually(lambda: replicas_of(kube, NAME) == 2, timeout=30.0,
                     what="the scale-down 4 -> 2 (spec.replicas.max)")
    costs = {r.name: r.data["metadata"]["annotations"]["controller.kubernetes.io/pod-deletion-cost"]
             for r in kube if r.method == kmock.method.PATCH and r.resource == kmock.resource(PODS)}
    assert costs == {"chat-busy": "6750", "chat-idle": "250", "chat-cold": "0", "chat-silent": "1000000"}, costs
    # The annotations went first, then the Deployment's lower replicas.
    requests = list(kube)
    last_pod = max(i for i, r in enumerate(requests)
                   if r.method == kmock.method.PATCH and r.resource == kmock.resource(PODS))
    scale_down = next(i for i, r in enumerate(requests) if r in applies(kube, DEPLOYMENTS, NAME)
                      and r.data["spec"]["replicas"] == 2)
    assert last_pod < scale_down


# ------------------------------------------------------------------------------------------
# Issue 13: batch Jobs released in the trough, paused when it closes
# ------------------------------------------------------------------------------------------


def job_applies(emulator: ApplyingEmulator, name: str) -> list[Any]:
    return applies(emulator, JOBS, name)


_COLLECTIONS = {PODS: f"/api/v1/namespaces/{NAMESPACE}/pods", JOBS: f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs"}


async def put(emulator: ApplyingEmulator, resource: str, obj: dict[str, Any]) -> None:
    """Create or merge-patch ``obj`` through the emulator's API, as a kubelet or the Job
    controller would write it, so that the operator's watch sees the change."""
    name = obj["metadata"]["name"]
    if stored(emulator, resource, name) is None:
        async with emulator.post(_COLLECTIONS[resource], json=obj) as response:
            assert response.status in (200, 201), await response.text()
    else:
        async with emulator.patch(f"{_COLLECTIONS[resource]}/{name}", json=obj,
                                  headers={"Content-Type": "application/merge-patch+json"}) as response:
            assert response.status == 200, await response.text()


async def _job_released_in_the_trough(kube: ApplyingEmulator, start_operator: Callable[..., Any]) -> Any:
    """At noon the Job waits (nothing written to it, BacklogWaiting, status.batch counts it); at
    23:00 the pool grows from the backlog and, once a batch replica is Ready, the Job is released by
    a server-side apply of ``spec.suspend`` alone, with its Event on the Job; the operator once its
    pod runs."""
    op = await start_quiet_with_batch_pool(kube, start_operator)
    status = await eventually(lambda: stored_status(kube).get("batch"), what="status.batch")
    assert status["jobsWaiting"] == 1 and status["jobsRunning"] == 0
    assert status["tokensOutstanding"] == 1_200_000
    assert status["jobs"][0]["name"] == "nightly" and status["jobs"][0]["deadline"] == "2024-06-05T06:00:00Z"
    assert status["nextWindowOpen"] == "2024-06-03T22:00:00Z"
    backlog = condition(stored_status(kube), "BatchBacklog")
    assert backlog is not None and (backlog["status"], backlog["reason"]) == ("True", Reason.BacklogWaiting)
    assert (condition(stored_status(kube), "DeadlineAtRisk") or {}).get("reason") == Reason.DeadlinesOnTrack
    assert not job_applies(kube, "nightly")

    op.clock.now = TROUGH
    await eventually(lambda: replicas_of(kube, f"{NAME}-batch") == 3, what="the batch pool sized at the trough")
    # No batch replica Ready yet: the Job is not released onto a pool that cannot serve it.
    await eventually(lambda: any("waits for a Ready batch replica" in r
                                 for r in stored_status(kube).get("lastDecision", {}).get("reasons", [])),
                     what="the Job waiting for a Ready batch replica")
    assert not job_applies(kube, "nightly")
    await put(kube, PODS, pod("chat-batch-a", ready=True, pool="batch"))

    released = await eventually(lambda: job_applies(kube, "nightly"), what="the Job released")
    assert released[0].data == {"apiVersion": "batch/v1", "kind": "Job",
                                "metadata": {"name": "nightly", "namespace": NAMESPACE}, "spec": {"suspend": False}}
    assert released[0].params.get("fieldManager") == "llmscale" and released[0].params.get("force") == "true"
    event = (await eventually(lambda: events_with(kube, "BatchJobReleased"), what="a BatchJobReleased Event"))[0]
    assert event["involvedObject"]["kind"] == "Job" and event["involvedObject"]["uid"] == "uid-nightly"
    assert "a trough window is open" in event["message"]
    # The Job controller starts its pod.
    await put(kube, JOBS, job("nightly", suspend=False, active=1, annotations=DUE_IN_TWO_NIGHTS))
    await eventually(lambda: (condition(stored_status(kube), "BatchBacklog") or {}).get("reason") == Reason.BacklogRunning,
                     what="BacklogRunning")

    return op


async def test_a_waiting_job_is_released_in_the_trough(
    kube: ApplyingEmulator, start_operator: Callable[..., Any]
) -> None:
    await _job_released_in_the_trough(kube, start_operator)


async def test_a_released_job_is_paused_when_the_trough_closes(
    kube: ApplyingEmulator, start_operator: Callable[..., Any]
) -> None:
    """After 06:00 the Job is paused by a server-side apply of ``spec.suspend`` alone, with its Event."""
    op = await _job_released_in_the_trough(kube, start_operator)
    op.clock.now = TROUGH + 8 * 3600  # 07:00: the trough closed, the next one is before the deadline
    paused = await eventually(lambda: [r for r in job_applies(kube, "nightly") if r.data["spec"] == {"suspend": True}],
                              what="the Job paused")
    assert paused[0].params.get("fieldManager") == "llmscale"
    await eventually(lambda: events_with(kube, "BatchJobPaused"), what="a BatchJobPaused Event")
    # Its pod still drains: the pool keeps its replicas until it is gone.
    await put(kube, JOBS, job("nightly", suspend=True, active=1, annotations=DUE_IN_TWO_NIGHTS))
    await eventually(lambda: stored_status(kube).get("batch", {}).get("jobs", [{}])[0].get("state") == "Draining",
                     what="the Job Draining")
    assert replicas_of(kube, f"{NAME}-batch") == 3
    await put(kube, JOBS, job("nightly", suspend=True, active=0, annotations=DUE_IN_TWO_NIGHTS))
    await eventually(lambda: replicas_of(kube, f"{NAME}-batch") == 0, what="the batch pool back to 0")
    # Only spec.suspend was ever written to the Job.
    assert all(set(r.data["spec"]) == {"suspend"} for r in job_applies(kube, "nightly"))


async def test_jobs_of_a_deployment_without_a_batch_pool_are_never_touched(
    kube: ApplyingEmulator, start_operator: Callable[..., Any]
) -> None:
    kube.objects[LLMDEPLOYMENTS, NAMESPACE, NAME] = llmdeployment()
    kube.objects[JOBS, NAMESPACE, "orphan"] = job("orphan", created="2024-06-01T00:00:00Z")  # deadline passed
    kube.objects[JOBS, NAMESPACE, "other"] = job("other", owner="someone-else")
    op = await start_operator(CannedSignals(queue_depth=0.0))
    await eventually(lambda: condition(stored_status(kube), "BatchBacklog"), what="BatchBacklog")
    ticks = len(op.signals.asked)
    await eventually(lambda: len(op.signals.asked) >= ticks + 2, what="two more ticks")
    backlog = condition(stored_status(kube), "BatchBacklog")
    assert backlog is not None and (backlog["status"], backlog["reason"]) == ("False", Reason.NoBatchPool)
    assert "batch" not in stored_status(kube)
    assert not job_applies(kube, "orphan") and not job_applies(kube, "other")


async def _urgent_and_nightly_jobs_at_noon(kube: ApplyingEmulator, start_operator: Callable[..., Any]) -> list[Any]:
    """At noon, outside the trough: a Job due at 13:00 and a Job due tomorrow, with a Ready batch
    replica; the urgent Job's applies once there is one."""
    kube.objects[LLMDEPLOYMENTS, NAMESPACE, NAME] = with_batch_pool(1)
    kube.objects[JOBS, NAMESPACE, "urgent"] = job("urgent", requests=10,
                                                  annotations={"llmscale.dev/deadline": "2024-06-03T13:00:00Z"})
    kube.objects[JOBS, NAMESPACE, "nightly"] = job("nightly")
    kube.objects[PODS, NAMESPACE, "chat-batch-a"] = pod("chat-batch-a", ready=True, pool="batch")
    await start_operator(CannedSignals(queue_depth=0.0), FakeClock(NOON))
    return await eventually(lambda: job_applies(kube, "urgent"), what="the urgent Job released")


async def test_a_near_deadline_is_released_before_the_window(
    kube: ApplyingEmulator, start_operator: Callable[..., Any]
) -> None:
    """A Job due at 13:00 cannot wait for 22:00 and is released."""
    released = await _urgent_and_nightly_jobs_at_noon(kube, start_operator)
    assert released[0].data["spec"] == {"suspend": False}
    event = (await eventually(lambda: events_with(kube, "BatchJobReleased"), what="its Event"))[0]
    assert "its deadline cannot wait" in event["message"]
    assert replicas_of(kube, f"{NAME}-batch") == 1


async def test_a_job_due_later_waits_while_a_near_deadline_is_released(
    kube: ApplyingEmulator, start_operator: Callable[..., Any]
) -> None:
    """A Job due tomorrow waits: only the near one is written."""
    await _urgent_and_nightly_jobs_at_noon(kube, start_operator)
    assert not job_applies(kube, "nightly")


async def _refused_job_write(
    kube: ApplyingEmulator, start_operator: Callable[..., Any]
) -> tuple[Any, list[dict[str, Any]]]:
    kube.refuse(JOBS, "urgent", 422)
    kube.objects[LLMDEPLOYMENTS, NAMESPACE, NAME] = with_batch_pool(1)
    kube.objects[JOBS, NAMESPACE, "urgent"] = job("urgent", requests=10,
                                                  annotations={"llmscale.dev/deadline": "2024-06-03T13:00:00Z"})
    kube.objects[PODS, NAMESPACE, "chat-batch-a"] = pod("chat-batch-a", ready=True, pool="batch")
    op = await start_operator(CannedSignals(queue_depth=0.0), FakeClock(NOON))
    return op, await eventually(lambda: events_with(kube, "JobSuspendFailed"), what="a JobSuspendFailed Event")


async def test_a_refused_job_write_is_one_warning(
    kube: ApplyingEmulator, start_operator: Callable[..., Any]
) -> None:
    op, failed = await _refused_job_write(kube, start_operator)
    assert failed[0]["type"] == "Warning" and "422" in failed[0]["message"]
    ticks = len(op.signals.asked)
    await eventually(lambda: len(op.signals.asked) >= ticks + 2, what="two more ticks")
    assert len(events_with(kube, "JobSuspendFailed")) == 1
    text = generate_latest(op.metrics.registry).decode()
    assert 'llmscale_apply_errors_total{kind="Job"}' in text


async def test_a_refused_job_write_is_tried_again(
    kube: ApplyingEmulator, start_operator: Callable[..., Any]
) -> None:
    await _refused_job_write(kube, start_operator)
    kube.refuse(JOBS, "urgent", None)
    await eventually(lambda: events_with(kube, "BatchJobReleased"), what="the release once accepted")


@pytest.mark.parametrize("mode", ["Advisory", "Paused"])
async def test_a_mode_that_writes_nothing_releases_or_pauses_no_job(
    kube: ApplyingEmulator, start_operator: Callable[..., Any], mode: str
) -> None:
    """In the trough with a Ready batch replica, a Waiting Job that Active would release and, at noon,
    a Running one that Active would pause: in Advisory and Paused neither is written, while the plan
    is still reported (status.batch, BatchBacklog)."""
    body = with_batch_pool(1)
    body["spec"]["mode"] = mode
    kube.objects[LLMDEPLOYMENTS, NAMESPACE, NAME] = body
    kube.objects[JOBS, NAMESPACE, "nightly"] = job("nightly", annotations=DUE_IN_TWO_NIGHTS)
    kube.objects[JOBS, NAMESPACE, "running"] = job("running", suspend=False, active=1, annotations=DUE_IN_TWO_NIGHTS)
    kube.objects[PODS, NAMESPACE, "chat-batch-a"] = pod("chat-batch-a", ready=True, pool="batch")
    op = await start_operator(CannedSignals(queue_depth=0.0), FakeClock(NOON))
    await eventually(lambda: stored_status(kube).get("batch"), what="status.batch at noon")
    ticks = len(op.signals.asked)
    await eventually(lambda: len(op.signals.asked) >= ticks + 2, what="two more ticks at noon")
    op.clock.now = TROUGH
    await eventually(lambda: stored_status(kube).get("batch", {}).get("nextWindowOpen") is None,
                     what="status.batch in the trough")
    ticks = len(op.signals.asked)
    await eventually(lambda: len(op.signals.asked) >= ticks + 2, what="two more ticks in the trough")
    backlog = condition(stored_status(kube), "BatchBacklog")
    assert backlog is not None and backlog["status"] == "True"
    assert not job_applies(kube, "nightly") and not job_applies(kube, "running")
    assert not events_with(kube, "BatchJobReleased") and not events_with(kube, "BatchJobPaused")
