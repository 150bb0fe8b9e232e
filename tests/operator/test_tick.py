"""One tick (``llmscale.controller.tick.tick``) on its own: gather → decide → apply → record, with
fakes of the two boundaries only — the API server (a :class:`~llmscale.controller.writer.ChildWriter`
that keeps what it is given and can refuse) and Prometheus (a canned signal source under the real
fleet reader) — and the real policy, spied on to count its calls. Under ``looptime``: the event
loop's clock is fake and the wall clock the tick hands the policy is derived from it, so waiting for
the next tick costs no real time.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import kopf
import kubernetes.client
import pytest
import yaml
from kopf._core.engines import posting

from llmscale.api import LLMDeploymentSpec
from llmscale.controller.deps import Dependencies
from llmscale.controller.ensure import ensure_children
from llmscale.controller.indexes import IndexedPod
from llmscale.controller.memory import ObjectMemory
from llmscale.controller.metrics import OperatorMetrics
from llmscale.controller.routing import RESYNC_S
from llmscale.controller.settings import OperatorSettings
from llmscale.controller.signals.fleet import FleetReader
from llmscale.controller.tick import tick
from llmscale.localcluster import SAMPLE
from llmscale.policy import decide
from llmscale.policy.types import Decision, PolicyMemory, PoolState
from llmscale.signals.profiles import get_profile
from llmscale.signals.queries import PoolRequest, PoolTarget
from llmscale.signals.snapshot import SignalSnapshot

pytestmark = pytest.mark.looptime

NS, NAME = "serving", "chat"
INTERACTIVE_KEY = (NS, NAME, "interactive")
#: The wall clock at loop time 0 (2026-06-01T12:00:00Z): the tick's ``now`` is this plus loop time.
EPOCH = 1_780_315_200.0
LOG = logging.getLogger("test_tick")


@dataclass
class CannedPrometheus:
    """The Prometheus boundary: every read answers the registered pools with ``queue_depth`` per
    pool (``None``: unknown, as when Prometheus has no series), observed at the read's ``now``; with
    no queue the pool is at rest (one request running a replica)."""

    queue_depth: float | None = 0.0
    reads: int = 0

    async def read_fleet(self, pools: Sequence[PoolRequest], now: float) -> Mapping[PoolTarget, SignalSnapshot]:
        self.reads += 1
        if self.queue_depth is None:
            return {r.target: SignalSnapshot(now, unknown={"queue_depth": "no series"}, error="no series")
                    for r in pools}
        busy = self.queue_depth > 0  # a queue: every slot running (4 a replica), the KV cache at its target
        return {r.target: SignalSnapshot(now, queue_depth=self.queue_depth,
                                         running_requests=(4.0 if busy else 1.0) * len(r.pods or ()),
                                         kv_cache_utilization=0.75 if busy else 0.1, ttft_p95_s=0.3, itl_p95_s=0.02,
                                         replicas_reporting=len(r.pods or ()))
                for r in pools}


@dataclass
class FakeApiServer:
    """The API server boundary (a ``ChildWriter``): keeps every applied object; refuses the kinds in
    ``refuse`` with a 422, as a webhook or a quota would. An applied Deployment shows up in the
    Deployments index, as its watch event would bring it."""

    deployments: dict[tuple[str, str, str], list[int]]
    applied: list[dict[str, Any]] = field(default_factory=list)
    refuse: frozenset[str] = frozenset()
    #: The Deployments watch lags: an applied Deployment does not show in the index yet.
    lagging: bool = False

    async def apply(self, manifest: Mapping[str, Any]) -> None:
        if manifest["kind"] in self.refuse:
            raise kubernetes.client.ApiException(status=422, reason="Unprocessable Entity")
        self.applied.append(copy.deepcopy(dict(manifest)))
        if manifest["kind"] == "Deployment" and not self.lagging:
            labels = manifest["metadata"]["labels"]
            key = (manifest["metadata"]["namespace"], labels["llmscale.dev/deployment"], labels["llmscale.dev/pool"])
            self.deployments[key] = [int(manifest["spec"]["replicas"])]

    async def delete(self, api_version: str, kind: str, namespace: str, name: str) -> bool:
        return False

    async def annotate_pod(self, namespace: str, name: str, annotations: Mapping[str, str]) -> None:
        pass

    async def suspend_job(self, namespace: str, name: str, suspend: bool) -> None:
        pass

    def scaled_to(self) -> list[int]:
        """The replicas of every interactive Deployment applied, in order."""
        return [m["spec"]["replicas"] for m in self.applied if m["kind"] == "Deployment" and m["metadata"]["name"] == NAME]


@dataclass
class FakeInferencePools:
    """The API server's InferencePools (an ``InferencePools``): served or not (the extension
    installed or not), keeping what is applied; counts the discovery calls."""

    is_served: bool = False
    objects: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    applies: int = 0
    discoveries: int = 0
    reads: int = 0
    #: Refuse every apply with this status (a webhook, RBAC not upgraded); ``None``: accept.
    refuse: int | None = None

    async def served(self) -> bool:
        self.discoveries += 1
        return self.is_served

    async def read(self, namespace: str, name: str) -> dict[str, Any] | None:
        self.reads += 1
        return copy.deepcopy(self.objects.get((namespace, name)))

    async def apply(self, manifest: Mapping[str, Any]) -> None:
        if self.refuse is not None:
            raise kubernetes.client.ApiException(status=self.refuse, reason="Forbidden")
        self.applies += 1
        self.objects[manifest["metadata"]["namespace"], manifest["metadata"]["name"]] = copy.deepcopy(dict(manifest))

    async def delete(self, namespace: str, name: str) -> bool:
        return self.objects.pop((namespace, name), None) is not None


@dataclass
class PolicySpy:
    """The real policy, with each call's ``now`` and decision kept (a spy, not a fake)."""

    calls: list[tuple[float, Decision]] = field(default_factory=list)
    states: list[PoolState] = field(default_factory=list)

    def __call__(self, spec: LLMDeploymentSpec, history: Sequence[SignalSnapshot], state: PoolState,
                 memory: PolicyMemory, now: float) -> Decision:
        decision = decide(spec, history, state, memory, now)
        self.calls.append((now, decision))
        self.states.append(state)
        return decision


def llmdeployment(**spec: Any) -> dict[str, Any]:
    """The sample LLMDeployment in ``serving`` (the e2e suite's and the demo's), ``spec`` keys replaced."""
    manifest = yaml.safe_load(SAMPLE.read_text())
    manifest["metadata"].update(namespace=NS, uid="0f0e0d0c-0000-4000-8000-000000000001", generation=1)
    manifest["spec"].update(spec)
    return dict(manifest)


def merge(into: dict[str, Any], patch: Mapping[str, Any]) -> None:
    """Apply a JSON merge patch (RFC 7386), as the API server does with Kopf's status patch."""
    for key, value in patch.items():
        if value is None:
            into.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(into.get(key), dict):
            merge(into[key], value)
        else:
            into[key] = copy.deepcopy(value)


@dataclass
class Harness:
    """One LLMDeployment with its Deployment at ``replicas`` Ready pods, and what a tick touches."""

    raw: dict[str, Any]
    deps: Dependencies
    prometheus: CannedPrometheus
    api: FakeApiServer
    policy: PolicySpy
    pods: dict[tuple[str, str, str], list[IndexedPod]]
    mem: ObjectMemory = field(default_factory=ObjectMemory)
    events: asyncio.Queue[Any] = field(default_factory=asyncio.Queue)

    async def tick(self) -> dict[str, Any]:
        """Run :func:`tick` once; store its status patch as the API server would; return the patch."""
        patch = kopf.Patch()
        posting.settings_var.set(kopf.OperatorSettings())
        posting.event_queue_var.set(self.events)
        posting.event_queue_loop_var.set(asyncio.get_running_loop())
        await tick(self.deps, self.mem, body=kopf.Body(copy.deepcopy(self.raw)), namespace=NS, name=NAME,
                   patch=patch, logger=LOG, deployments=self.api.deployments, pods=self.pods)
        status = dict(patch.status)
        self.raw.setdefault("status", {})
        merge(self.raw["status"], status)
        return status

    def posted(self) -> list[str]:
        """The reasons of the Events posted so far (drained)."""
        reasons = []
        while not self.events.empty():
            reasons.append(self.events.get_nowait().reason)
        return reasons

    def condition(self, type_: str) -> dict[str, Any]:
        return next(c for c in self.raw["status"]["conditions"] if c["type"] == type_)


@contextlib.asynccontextmanager
async def running(raw: dict[str, Any], prometheus: Any, replicas: int) -> AsyncIterator[Harness]:
    """A :class:`Harness` for the LLMDeployment ``raw`` with ``replicas`` Ready pods behind its
    Deployment, the signals read from ``prometheus`` by a fleet reader on the loop's clock (started
    here, stopped on the way out)."""
    api = FakeApiServer(deployments={INTERACTIVE_KEY: [replicas]})
    policy = PolicySpy()
    loop = asyncio.get_running_loop()
    settings = OperatorSettings(namespaces=(NS,))

    def clock() -> float:
        return EPOCH + loop.time()

    fleet = FleetReader(prometheus, period_s=settings.tick_base_seconds, timeout_s=settings.signal_timeout_seconds,
                        clock=clock)
    deps = Dependencies(settings=settings, writer=api, signals=prometheus, fleet=fleet, decide=policy,
                        metrics=OperatorMetrics(), kube_config=kubernetes.client.Configuration(), clock=clock)
    ready = [IndexedPod(f"{NAME}-{i}", "ready", EPOCH - 600, EPOCH - 590) for i in range(replicas)]
    fleet.start()
    try:
        yield Harness(raw, deps, prometheus, api, policy, {INTERACTIVE_KEY: ready})
    finally:
        await fleet.stop()


@pytest.fixture
async def harness() -> AsyncIterator[Harness]:
    async with running(llmdeployment(), CannedPrometheus(), replicas=2) as h:  # min 1 + headroom 1
        yield h


async def test_a_due_tick_calls_the_policy_once_at_the_loops_time(harness: Harness) -> None:
    await asyncio.sleep(5)  # loop time 5 s: no real wait
    await harness.tick()
    (now, _), = harness.policy.calls
    assert now == EPOCH + 5


async def test_a_queue_scales_the_deployment_to_what_the_policy_decided(harness: Harness) -> None:
    harness.prometheus.queue_depth = 12.0  # 6 per replica against a target of 2
    status = await harness.tick()
    (_, decision), = harness.policy.calls
    assert decision.interactive_replicas > 2
    assert harness.api.scaled_to() == [decision.interactive_replicas]
    assert status["replicas"]["desired"] == decision.interactive_replicas
    assert "ScaledUp" in harness.posted()


async def test_a_tick_before_its_time_does_nothing(harness: Harness) -> None:
    await harness.tick()
    assert await harness.tick() == {}
    assert len(harness.policy.calls) == 1


async def test_the_next_tick_comes_after_tick_seconds_of_loop_time(harness: Harness) -> None:
    tick_s = harness.raw["spec"]["scaling"]["tickSeconds"]
    await harness.tick()
    await asyncio.sleep(tick_s)
    await harness.tick()
    assert [now for now, _ in harness.policy.calls] == [EPOCH, EPOCH + tick_s]


async def test_the_status_is_written_once_while_nothing_changes(harness: Harness) -> None:
    first = await harness.tick()
    await asyncio.sleep(1)
    again = await harness.tick()
    assert first["replicas"]["desired"] == 2
    assert again == {}  # the same status, within the refresh period: no write
    assert len(harness.policy.calls) == 2


async def test_unknown_signals_hold_the_replicas(harness: Harness) -> None:
    harness.prometheus.queue_depth = None
    status = await harness.tick()
    assert harness.api.scaled_to() == []
    assert status["replicas"]["desired"] == 2
    assert harness.condition("MetricsAvailable")["status"] == "False"


@dataclass
class SlowPrometheus(CannedPrometheus):
    """A loaded Prometheus: every read answers after ``delay_s`` loop seconds (within the timeout)."""

    delay_s: float = 8.0

    async def read_fleet(self, pools: Sequence[PoolRequest], now: float) -> Mapping[PoolTarget, SignalSnapshot]:
        await asyncio.sleep(self.delay_s)
        return await super().read_fleet(pools, now)


async def test_a_tick_held_up_longer_than_two_ticks_keeps_its_pools_signals() -> None:
    # tickSeconds 1 on the default 5-s base period: two ticks are 12 s. A tick held up longer (a
    # slow status write) lapsed its pool, the snapshots went with it, and the next tick waited for
    # a read started after it asked: with 8-s reads, none within the 10-s signal timeout, so
    # MetricsAvailable=False on signals that were known all along.
    scaling = {**llmdeployment()["spec"]["scaling"], "tickSeconds": 1}
    async with running(llmdeployment(scaling=scaling), SlowPrometheus(), replicas=2) as h:
        # Another object's pool, renewed all along, keeps the reader busy: reads run back to back.
        loop = asyncio.get_running_loop()
        h.deps.fleet.register(PoolTarget(NS, "other", "interactive"), get_profile("vllm"), pods=lambda: ("other-0",),
                              wake_query=None, keep_s=3600.0, loop_now=loop.time())
        await h.tick()
        assert h.condition("MetricsAvailable")["status"] == "True"
        # Reads of 8 s from loop time 0: the one starting at 24 s finds the pool lapsed (renewed at
        # 8 s, when the first tick's wait ended), the tick asks at 26 s, the next read starts at
        # 32 s and ends past 36 s.
        await asyncio.sleep(18.0)
        await h.tick()
        assert h.condition("MetricsAvailable")["status"] == "True", h.condition("MetricsAvailable")


async def _tick_with_the_deployment_refused(harness: Harness) -> dict[str, Any]:
    harness.prometheus.queue_depth = 12.0
    harness.api.refuse = frozenset({"Deployment"})
    return await harness.tick()


async def test_a_refused_apply_is_reported(harness: Harness) -> None:
    await _tick_with_the_deployment_refused(harness)
    applied = harness.condition("ChildrenApplied")
    assert (applied["status"], "422" in applied["message"]) == ("False", True), applied
    assert "ScaledUp" not in harness.posted()


async def test_the_tick_goes_on_past_a_refused_apply(harness: Harness) -> None:
    status = await _tick_with_the_deployment_refused(harness)
    assert harness.api.scaled_to() == []
    assert status["replicas"]["desired"] == 2, "what was applied, not what was decided"


async def test_the_apply_is_tried_again_on_the_next_tick(harness: Harness) -> None:
    harness.prometheus.queue_depth = 12.0
    harness.api.refuse = frozenset({"Deployment"})
    await harness.tick()
    harness.api.refuse = frozenset()
    await asyncio.sleep(1)
    await harness.tick()
    assert harness.api.scaled_to() == [harness.policy.calls[-1][1].interactive_replicas]
    assert harness.condition("ChildrenApplied")["status"] == "True"


async def _advisory_tick(harness: Harness) -> dict[str, Any]:
    harness.raw["spec"]["mode"] = "Advisory"
    harness.prometheus.queue_depth = 12.0
    return await harness.tick()


async def test_advisory_mode_writes_nothing(harness: Harness) -> None:
    await _advisory_tick(harness)
    assert harness.api.applied == []


async def test_advisory_mode_reports_the_advice(harness: Harness) -> None:
    status = await _advisory_tick(harness)
    (_, decision), = harness.policy.calls
    assert status["replicas"]["desired"] == decision.interactive_replicas
    assert "AdvisedScaleUp" in harness.posted()


async def test_an_invalid_spec_is_reported_without_calling_the_policy(harness: Harness) -> None:
    harness.raw["spec"]["replicas"] = {"min": 5, "max": 2}
    await harness.tick()
    assert harness.policy.calls == []
    assert harness.api.applied == []
    ready = harness.condition("Ready")
    assert (ready["status"], ready["reason"]) == ("False", "InvalidSpec")
    assert "InvalidSpec" in harness.posted()


async def test_a_tick_before_the_watch_brings_its_scale_decides_on_the_scale(harness: Harness) -> None:
    """Read-your-writes: the index still shows the 2 replicas before the scale a tick ago, and the
    next tick neither scales "from 2" again nor posts a second ScaledUp; once the watch brings
    another count (someone scaled by hand), that count is taken."""
    harness.prometheus.queue_depth = 12.0
    harness.api.lagging = True
    await harness.tick()
    (_, first), = harness.policy.calls
    assert first.interactive_replicas > 2 and harness.posted().count("ScaledUp") == 1
    await asyncio.sleep(harness.raw["spec"]["scaling"]["tickSeconds"])
    await harness.tick()
    assert len(harness.policy.calls) == 2
    assert harness.policy.calls[-1][1].interactive_replicas >= first.interactive_replicas
    assert harness.api.scaled_to() == [first.interactive_replicas], "applied once"
    assert "ScaledUp" not in harness.posted()
    # Someone else scales to 7: the index is the truth again.
    harness.api.deployments[INTERACTIVE_KEY] = [7]
    harness.prometheus.queue_depth = 0.0
    await asyncio.sleep(harness.raw["spec"]["scaling"]["tickSeconds"])
    await harness.tick()
    assert harness.mem.scaled == {}, "the index is taken as it is"
    assert harness.raw["status"]["replicas"]["current"] == 7


async def test_a_scale_that_never_shows_is_not_believed_past_the_echo_window(harness: Harness) -> None:
    """The echo window is two of the object's ticks (at least 10 s): at the default tick the next
    tick still comes inside it."""
    from llmscale.controller.memory import SCALE_ECHO_S
    tick_s = harness.raw["spec"]["scaling"]["tickSeconds"]
    echo_s = max(SCALE_ECHO_S, 2 * tick_s)
    harness.prometheus.queue_depth = 12.0
    harness.api.lagging = True
    await harness.tick()
    loop = asyncio.get_running_loop()
    new = harness.policy.calls[-1][1].interactive_replicas
    await asyncio.sleep(tick_s)
    assert harness.mem.replicas_seen("interactive", 2, loop.time(), echo_s) == new
    await asyncio.sleep(echo_s - tick_s)
    assert harness.mem.replicas_seen("interactive", 2, loop.time(), echo_s) == 2


def test_two_quick_scales_keep_every_count_before_them_stale() -> None:
    """1 → 2, then 2 → 4 before the index showed 2: an index still at 1 (or at 2) reads as 4; a
    pool created from nothing (index None, scaled from 0) reads as created; 7 (someone else) wins."""
    mem = ObjectMemory()
    mem.note_scaled("interactive", 1, 2, 0.0)
    mem.note_scaled("interactive", 2, 4, 1.0)
    assert [mem.replicas_seen("interactive", i, 2.0) for i in (1, 2)] == [4, 4]
    assert mem.replicas_seen("interactive", 7, 2.0) == 7 and "interactive" not in mem.scaled
    mem.note_scaled("batch", 0, 3, 0.0)
    assert mem.replicas_seen("batch", None, 1.0) == 3
    assert mem.replicas_seen("batch", 3, 2.0) == 3 and "batch" not in mem.scaled
    mem.note_scaled("interactive", 2, 3, 0.0)
    mem.note_scaled("interactive", 3, 2, 1.0)  # up and back down before the watch: 2 is the truth
    assert mem.replicas_seen("interactive", 2, 2.0) == 2


async def test_a_scaled_event_starts_with_what_was_decided(harness: Harness) -> None:
    """The ScaledUp message (clipped at 1,000 characters, shown from its start by kubectl) leads
    with the demand and the signal that set it, then the signals' lines."""
    harness.prometheus.queue_depth = 12.0
    await harness.tick()
    (_, decision), = harness.policy.calls
    message = harness.events.get_nowait().message
    prefix = f"Scaled LLMDeployment {NS}/{NAME} from 2 to {decision.interactive_replicas} replicas: demand "
    assert message.startswith(prefix), message
    signals = [r for r in decision.reasons if r.startswith("queue depth")]
    assert signals and signals[0] in message


def test_the_conclusion_comes_first_in_an_order_that_loses_nothing() -> None:
    from llmscale.controller.events import conclusion_first
    reasons = ["load: a; b: proposes 3", "queue depth 9: x", "demand 3 replicas (load)", "recommends 3",
               "interactive pool 1 → 3 replicas"]
    assert conclusion_first(reasons) == reasons[2:] + reasons[:2]
    assert conclusion_first(["recommends 0 (idle)"]) == ["recommends 0 (idle)"]
    assert conclusion_first([]) == []


@dataclass
class MinutePrometheus(CannedPrometheus):
    """A canned source that also judges minutes: each interactive pool's minute is what an engine
    running as ``truth`` shows at a running batch cycling through ``batches`` (the live calibration's
    figures; 2,000 tokens a minute of 900-token prompts and 200-token outputs)."""

    truth: Any = None
    batches: tuple[float, ...] = (1.0, 2.0, 4.0, 8.0, 3.0, 6.0)
    minutes_read: int = 0

    async def read_minutes(self, pools: Sequence[PoolRequest], end_s: float) -> Mapping[PoolTarget, Any]:
        from tests.policy.test_livefit import _minute

        self.minutes_read += 1
        batch = self.batches[self.minutes_read % len(self.batches)]
        return {r.target: _minute(self.truth, end_s, batch) for r in pools if r.target.pool == "interactive"}


def _slow_engine() -> tuple[dict[str, Any], LLMDeploymentSpec, MinutePrometheus]:
    """A pool ticking once a minute (a pool's registration with the fleet reader lapses after two
    of its ticks) on an engine slower than the prior, and the Prometheus that serves its minutes."""
    from llmscale.model import ReplicaModel

    raw = llmdeployment()
    raw["spec"]["scaling"]["tickSeconds"] = 60
    spec = LLMDeploymentSpec.model_validate(raw["spec"])
    slow = ReplicaModel.from_spec(spec).with_changes(bandwidth_efficiency=0.4, step_overhead_s=0.004)
    return raw, spec, MinutePrometheus(truth=slow)


async def _ticks_until_calibrated(h: Harness, spec: LLMDeploymentSpec, prometheus: MinutePrometheus) -> None:
    """Issue 24 item 4: the fleet reader's minutes become the live fit the policy sizes with and
    the EngineCalibrated condition."""
    from llmscale.model import ReplicaModel

    slow = prometheus.truth
    states = h.policy.states
    await h.tick()
    assert h.condition("EngineCalibrated")["reason"] == "Measuring"
    assert states[-1].live_fit is None
    for _ in range(7):
        await asyncio.sleep(60)
        await h.tick()
    assert prometheus.minutes_read >= 5
    cond = h.condition("EngineCalibrated")
    assert (cond["status"], cond["reason"]) == ("True", "Calibrated"), cond["message"]
    fit = states[-1].live_fit
    # Overhead and bandwidth trade off at these batches (the weights' read dominates): what the
    # fit must get right is the steps the engines showed.
    prior = ReplicaModel.from_spec(spec)
    for batch in (1, 4, 8):
        assert fit is not None
        assert (fit.apply(prior).decode_step_time(batch, 1000)
                == pytest.approx(slow.decode_step_time(batch, 1000), rel=0.02)), batch
    assert "EngineUpgraded" not in h.posted()


async def test_the_live_calibration_reaches_the_policy() -> None:
    raw, spec, prometheus = _slow_engine()
    async with running(raw, prometheus, replicas=2) as h:
        await _ticks_until_calibrated(h, spec, prometheus)


async def test_an_engine_upgrade_is_reported_in_one_event_with_a_fresh_fit() -> None:
    """A new engine image is measured again from scratch and its capacity note compared with the
    old one's, in one Event."""
    from llmscale.model import ReplicaModel

    raw, spec, prometheus = _slow_engine()
    async with running(raw, prometheus, replicas=2) as h:
        await _ticks_until_calibrated(h, spec, prometheus)
        states = h.policy.states
        slow = prometheus.truth
        prior = ReplicaModel.from_spec(spec)
        # The upgrade: a new image, an engine with half the overhead.
        h.raw["spec"]["engine"]["image"] = "llmscale:dev-2"
        prometheus.truth = slow.with_changes(step_overhead_s=0.002)
        await asyncio.sleep(60)
        await h.tick()
        assert h.condition("EngineCalibrated")["reason"] == "Measuring"
        for _ in range(7):
            await asyncio.sleep(60)
            await h.tick()
        cond = h.condition("EngineCalibrated")
        assert (cond["status"], cond["reason"]) == ("True", "EngineUpgraded"), cond["message"]
        assert cond["message"].startswith("After the engine upgrade: ITL at batch 1 ")
        assert h.posted().count("EngineUpgraded") == 1
        new_fit = states[-1].live_fit
        assert new_fit is not None
        assert (new_fit.apply(prior).decode_step_time(1, 1000)
                == pytest.approx(prometheus.truth.decode_step_time(1, 1000), rel=0.02))


async def test_an_extension_installed_after_the_llmdeployment_gets_its_pool_on_the_next_tick(harness: Harness) -> None:
    """Issue 23: the children were applied while the cluster had no InferencePool kind (ensure
    found it not served); the Gateway API Inference Extension is installed later. The next tick
    sees discovery's answer change and applies the pool, owned by the LLMDeployment; the ticks
    after it write nothing more."""
    pools = FakeInferencePools(is_served=False)
    harness.deps.inference_pools = pools
    # What ensure_children recorded: not served, look again in 5 minutes.
    harness.mem.routing_served, harness.mem.routing_next_loop_s = False, asyncio.get_running_loop().time() + RESYNC_S
    await harness.tick()
    assert pools.objects == {} and pools.applies == 0

    pools.is_served = True
    await asyncio.sleep(harness.raw["spec"]["scaling"]["tickSeconds"])
    await harness.tick()
    pool = pools.objects[NS, NAME]
    assert pool["kind"] == "InferencePool"
    assert pool["metadata"]["ownerReferences"][0]["uid"] == harness.raw["metadata"]["uid"]
    assert harness.mem.routing_served is True

    for _ in range(3):
        await asyncio.sleep(harness.raw["spec"]["scaling"]["tickSeconds"])
        await harness.tick()
    assert pools.applies == 1


async def test_a_tick_leaves_routing_to_ensure_until_ensure_has_run(harness: Harness) -> None:
    pools = FakeInferencePools(is_served=True)
    harness.deps.inference_pools = pools
    await harness.tick()
    assert pools.applies == 0 and pools.discoveries == 0


async def test_a_pool_deleted_by_hand_comes_back_within_the_resync(harness: Harness) -> None:
    pools = FakeInferencePools(is_served=True)
    harness.deps.inference_pools = pools
    harness.mem.routing_served, harness.mem.routing_next_loop_s = True, asyncio.get_running_loop().time()
    await harness.tick()
    assert (NS, NAME) in pools.objects and pools.applies == 1
    del pools.objects[NS, NAME]  # kubectl delete inferencepool chat
    tick_s = harness.raw["spec"]["scaling"]["tickSeconds"]
    reads = pools.reads
    await asyncio.sleep(tick_s)
    await harness.tick()
    assert pools.reads == reads, "nothing is read between resyncs"
    await asyncio.sleep(RESYNC_S)
    await harness.tick()
    assert (NS, NAME) in pools.objects and pools.applies == 2
    await asyncio.sleep(RESYNC_S)
    await harness.tick()
    assert pools.applies == 2, "a pool as wanted is read, not written again"


async def _tick_with_the_pool_refused(harness: Harness) -> FakeInferencePools:
    pools = FakeInferencePools(is_served=True, refuse=403)
    harness.deps.inference_pools = pools
    harness.mem.routing_served, harness.mem.routing_next_loop_s = False, asyncio.get_running_loop().time()
    await harness.tick()
    return pools


async def test_a_refused_pool_shows_in_children_applied(harness: Harness) -> None:
    await _tick_with_the_pool_refused(harness)
    condition = harness.condition("ChildrenApplied")
    assert condition["status"] == "False" and "InferencePool serving/chat: 403 Forbidden" in condition["message"]
    assert "ApplyFailed" in harness.posted()


async def test_a_refused_pool_recovers_after_the_retry_delay(harness: Harness) -> None:
    pools = await _tick_with_the_pool_refused(harness)
    tick_s = harness.raw["spec"]["scaling"]["tickSeconds"]
    await asyncio.sleep(tick_s)
    await harness.tick()
    assert pools.reads == 1, "tried again after the refusal's retry delay, not on every tick"
    pools.refuse = None
    await asyncio.sleep(60)
    await harness.tick()
    assert (NS, NAME) in pools.objects
    assert harness.condition("ChildrenApplied")["status"] == "True"


async def test_a_refused_pool_holds_up_no_other_child(harness: Harness) -> None:
    """The children are applied, the batch pool removed from the spec is deleted, and the handler
    does not fail (Kopf would retry every child): the refusal is in ChildrenApplied."""
    pools = FakeInferencePools(is_served=True, refuse=403)
    harness.deps.inference_pools = pools
    harness.api.deployments[NS, NAME, "batch"] = [0]  # spec.batch was removed
    deleted: list[tuple[str, str]] = []

    async def delete(api_version: str, kind: str, namespace: str, name: str) -> bool:
        deleted.append((kind, name))
        return True

    harness.api.delete = delete  # type: ignore[method-assign]
    patch = kopf.Patch()
    posting.settings_var.set(kopf.OperatorSettings())
    posting.event_queue_var.set(harness.events)
    posting.event_queue_loop_var.set(asyncio.get_running_loop())
    await ensure_children(harness.deps, harness.mem, body=kopf.Body(copy.deepcopy(harness.raw)), namespace=NS,
                          name=NAME, patch=patch, logger=LOG, deployments=harness.api.deployments)
    assert {m["kind"] for m in harness.api.applied} >= {"Deployment", "Service", "PodDisruptionBudget"}
    assert deleted == [("Service", f"{NAME}-batch"), ("Deployment", f"{NAME}-batch")]
    (condition,) = [c for c in patch.status["conditions"] if c["type"] == "ChildrenApplied"]
    assert condition["status"] == "False" and "InferencePool serving/chat: 403" in condition["message"]
    assert harness.mem.routing_next_loop_s is not None, "the tick tries it again"
