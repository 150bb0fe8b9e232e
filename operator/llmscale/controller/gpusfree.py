"""The GPUs free for each LLMDeployment's batch pool: one shared read of the cluster's nodes and bound
pods every :data:`READ_PERIOD_S` seconds (longer on a cluster whose read takes more than
:data:`READ_DUTY` of that, up to :data:`READ_PERIOD_MAX_S`), whatever the number of LLMDeployments, and a pure sum per object per
tick from the newest read.

What is read (two paginated ``list`` calls, cluster-wide, on a thread of the default executor):

- the nodes: name, labels, taints, ``status.allocatable`` of the extended resources, and whether
  the node can take a pod now: its ``Ready`` condition is ``True`` and ``spec.unschedulable`` is not
  set (cordoned);
- the pods bound to a node that are neither ``Succeeded`` nor ``Failed`` (the field selector
  ``spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed``, the one ``kubectl describe
  node`` sums its "Allocated resources" with): of each, only its node and its extended-resource
  requests are kept (:func:`~llmscale.controller.indexes.extended_requests`), summed per node,
  and for the pods of llmscale's pools (labels ``llmscale.dev/deployment`` and ``llmscale.dev/pool``)
  per pool too. A pod body is dropped once read; one page (500 pods) is in memory at a time.

What one LLMDeployment gets (:func:`pool_gpus_free`): the GPUs of ``spec.resources.gpuResourceName``
allocatable on the usable nodes its pods may land on, less what the pods bound there request, less
the GPUs its own pools are sized for but do not hold on a node yet (pods Pending or not yet created:
``gpusPerReplica`` × the replicas of both pools, the interactive pool at this tick's decision if it
grows, less the GPUs its bound pods hold), never below 0. Without that last term a batch pool that
was just scaled up would see its own unscheduled replicas' GPUs as free again on the next tick.

Where the pods may land, approximated: the pod template's ``nodeSelector`` must match the node's
labels, and every ``NoSchedule``/``NoExecute`` taint of the node must be tolerated by the
template's ``tolerations`` (Kubernetes' matching rules). Not evaluated: node affinity, pod
(anti-)affinity, topology spread, and other resources (CPU, memory) a node may lack; GPUs held by
low-priority placeholder pods (``spec.scaling.warmNodes``) count as taken. So the figure can be
high when affinity excludes nodes, and low by the placeholders' GPUs. Only for the pods llmscale
creates: with ``spec.scaleTargetRef`` the placement is the workload's, unknown here, and the GPUs
free stay unknown.

Unknown (``None``, today's behaviour: nothing released onto idle GPUs, the batch pool not bounded by
GPUs) while no read has succeeded, when the newest read is older than :data:`STALE_AFTER_READS`
periods, when the setting ``read_nodes`` is off, or when the API server refuses the lists (403: the
ClusterRole of the Helm chart's ``operator.readNodes`` is missing). Each such cause is logged once,
when it starts, and once more when reads succeed again; the reader never raises.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import kubernetes.client
import urllib3
from kubernetes.client.exceptions import ApiException

from llmscale.api import LLMDeploymentSpec
from llmscale.controller.indexes import PoolKey, extended_requests
from llmscale.controller.kubecalls import pages
from llmscale.controller.manifests.names import BATCH, INTERACTIVE, LABEL_DEPLOYMENT, LABEL_POOL

__all__ = [
    "BOUND_PODS",
    "READ_DUTY",
    "READ_PERIOD_MAX_S",
    "READ_PERIOD_S",
    "STALE_AFTER_READS",
    "ClusterGPUs",
    "GpuReader",
    "NodeGPUs",
    "Toleration",
    "cluster_gpus",
    "free_on_nodes",
    "node_gpus",
    "pool_gpus_free",
    "tolerates",
]

_LOG = logging.getLogger(__name__)

#: Seconds between two reads of the nodes and pods. A list of every bound pod costs the API server
#: one paginated read of the cluster's pods; every 15 s is 240 an hour, whatever the number of
#: LLMDeployments. The batch planner acts on windows, deadlines and idle capacity that last minutes.
READ_PERIOD_S = 15.0
#: A read older than this many periods is not used (the API server stopped answering).
STALE_AFTER_READS = 4
#: The largest share of the time the read may take: a read that took ``t`` seconds is followed by
#: the next one ``max(READ_PERIOD_S, t / READ_DUTY)`` seconds after it started, so the period grows
#: with the cluster (issue 22). E.g. 4,000 nodes and 120,000 bound pods, 250 pages of 500: if they
#: take 6 s, the next read starts 120 s later, ~2 page requests a second on average instead of ~17.
READ_DUTY = 0.05
#: The longest period, seconds: past it the GPUs free would be too old for the batch planner's
#: windows (minutes); a cluster whose read takes more than 15 s then reads more than 5 % of the time.
READ_PERIOD_MAX_S = 300.0
#: The field selector of the pods that hold resources on a node (as ``kubectl describe node``).
BOUND_PODS = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"
#: ``(connect, read)`` timeouts of one page, seconds: a hung connection fails the read (the GPUs
#: free turn unknown) instead of holding the reader's thread for ever.
_TIMEOUT_S = (5.0, 30.0)
#: Taint effects that keep a pod off a node (``PreferNoSchedule`` only prefers).
_BLOCKING = frozenset({"NoSchedule", "NoExecute"})

#: ``(key, operator, value, effect)`` of one toleration; empty strings for absent fields.
Toleration = tuple[str, str, str, str]


@dataclass(frozen=True, slots=True)
class NodeGPUs:
    """What is kept of one node.

    Attributes:
        name: the node's name.
        labels: its labels.
        taints: ``(key, value, effect)`` of its ``NoSchedule``/``NoExecute`` taints.
        allocatable: ``{resource: count}`` of its allocatable extended resources (GPUs).
        usable: ``Ready`` is ``True`` and the node is not cordoned.
    """

    name: str
    labels: Mapping[str, str]
    taints: tuple[tuple[str, str, str], ...]
    allocatable: Mapping[str, float]
    usable: bool


@dataclass(frozen=True, slots=True)
class ClusterGPUs:
    """One read of the cluster (module docstring).

    Attributes:
        nodes: every node.
        used: ``{node: {resource: count}}`` requested by the pods bound to it, not finished.
        pools: ``{(namespace, LLMDeployment, pool): {resource: count}}`` held on nodes by the pods
            of llmscale's pools.
    """

    nodes: tuple[NodeGPUs, ...]
    used: Mapping[str, Mapping[str, float]]
    pools: Mapping[PoolKey, Mapping[str, float]] = field(default_factory=dict)


def _extended(values: Mapping[str, Any] | None) -> dict[str, float]:
    """``{resource: count}`` of the extended resources among ``values`` (a ``status.allocatable``)."""
    return dict(extended_requests({"containers": [{"resources": {"requests": dict(values or {})}}]}))


def node_gpus(node: Mapping[str, Any]) -> NodeGPUs:
    """Return what is kept of one node (wire-format, as listed)."""
    meta, spec, status = node.get("metadata") or {}, node.get("spec") or {}, node.get("status") or {}
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or ())
    taints = tuple(
        (str(t.get("key") or ""), str(t.get("value") or ""), str(t.get("effect") or ""))
        for t in spec.get("taints") or () if t.get("effect") in _BLOCKING
    )
    return NodeGPUs(str(meta.get("name") or ""), dict(meta.get("labels") or {}), taints,
                    _extended(status.get("allocatable")), ready and not spec.get("unschedulable"))


def _pool_of(pod: Mapping[str, Any]) -> PoolKey | None:
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    owner, pool, namespace = labels.get(LABEL_DEPLOYMENT), labels.get(LABEL_POOL), meta.get("namespace")
    if not owner or not namespace or pool not in (INTERACTIVE, BATCH):
        return None
    return (str(namespace), str(owner), INTERACTIVE if pool == INTERACTIVE else BATCH)


def cluster_gpus(nodes: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]]) -> ClusterGPUs:
    """Return one read from listed nodes and pods (wire format; pods without ``spec.nodeName`` or
    finished are skipped, so an unfiltered list gives the same answer). Pure."""
    used: dict[str, dict[str, float]] = {}
    pools: dict[PoolKey, dict[str, float]] = {}
    for pod in pods:
        spec = pod.get("spec") or {}
        node = spec.get("nodeName")
        if not node or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        requests = extended_requests(spec)
        if not requests:
            continue
        on_node = used.setdefault(str(node), {})
        key = _pool_of(pod)
        held = pools.setdefault(key, {}) if key is not None else None
        for resource, count in requests:
            on_node[resource] = on_node.get(resource, 0.0) + count
            if held is not None:
                held[resource] = held.get(resource, 0.0) + count
    return ClusterGPUs(tuple(node_gpus(n) for n in nodes), used, pools)


def tolerates(tolerations: Sequence[Toleration], taint: tuple[str, str, str]) -> bool:
    """Whether a pod with ``tolerations`` tolerates ``taint`` (``(key, value, effect)``), by
    Kubernetes' rules: an empty effect matches every effect; operator ``Exists`` matches every
    value, and with an empty key every taint; ``Equal`` (the default) needs key and value equal."""
    key, value, effect = taint
    for t_key, t_op, t_value, t_effect in tolerations:
        if t_effect and t_effect != effect:
            continue
        if t_op == "Exists":
            if not t_key or t_key == key:
                return True
        elif t_key == key and t_value == value:
            return True
    return False


def _placement(spec: LLMDeploymentSpec) -> tuple[dict[str, str], list[Toleration]]:
    """The pod template's ``nodeSelector`` and ``tolerations`` (empty without a template)."""
    pod = (spec.template or {}).get("spec")
    pod = pod if isinstance(pod, Mapping) else {}
    # The API server validates the template against the pod schema; anything else reads as absent.
    chosen, listed = pod.get("nodeSelector"), pod.get("tolerations")
    selector = {str(k): str(v) for k, v in chosen.items()} if isinstance(chosen, Mapping) else {}
    tolerations = [
        (str(t.get("key") or ""), str(t.get("operator") or "Equal"), str(t.get("value") or ""),
         str(t.get("effect") or ""))
        for t in (listed if isinstance(listed, list) else ()) if isinstance(t, Mapping)
    ]
    return selector, tolerations


def free_on_nodes(cluster: ClusterGPUs, resource: str, selector: Mapping[str, str],
                  tolerations: Sequence[Toleration] = ()) -> float:
    """Return the ``resource`` free on the usable nodes that match ``selector`` and whose blocking
    taints are all tolerated: allocatable less requested by bound pods, per node, never below 0."""
    free = 0.0
    for node in cluster.nodes:
        if not node.usable or node.allocatable.get(resource, 0.0) <= 0:
            continue
        if any(node.labels.get(k) != v for k, v in selector.items()):
            continue
        # A taint keyed by the resource itself (GKE's nvidia.com/gpu=present:NoSchedule) is
        # tolerated by every pod that requests it: the ExtendedResourceToleration admission plugin
        # adds the toleration (kubernetes plugin/pkg/admission/extendedresourcetoleration).
        if not all(taint[0] == resource or tolerates(tolerations, taint) for taint in node.taints):
            continue
        free += max(0.0, node.allocatable[resource] - cluster.used.get(node.name, {}).get(resource, 0.0))
    return free


def pool_gpus_free(cluster: ClusterGPUs, spec: LLMDeploymentSpec, namespace: str, name: str,
                   interactive_replicas: int, batch_replicas: int,
                   on_nodes: Callable[[str, Mapping[str, str], Sequence[Toleration]], float] | None = None) -> int:
    """Return the GPUs the batch pool of LLMDeployment ``namespace/name`` could take now (module
    docstring): free on its nodes, less the GPUs its pools are sized for (``interactive_replicas``
    and ``batch_replicas`` replicas of ``spec.resources.gpusPerReplica``) but not yet hold on a
    node; a whole number ≥ 0. ``on_nodes(resource, selector, tolerations)`` replaces
    :func:`free_on_nodes` on ``cluster`` (the reader's cache). Pure."""
    resource = spec.resources.gpu_resource_name
    selector, tolerations = _placement(spec)
    free = (on_nodes(resource, selector, tolerations) if on_nodes is not None
            else free_on_nodes(cluster, resource, selector, tolerations))
    held = sum(cluster.pools.get((namespace, name, pool), {}).get(resource, 0.0) for pool in (INTERACTIVE, BATCH))
    sized = spec.resources.gpus_per_replica * (max(interactive_replicas, 0) + max(batch_replicas, 0))
    return max(0, math.floor(free - max(0.0, sized - held) + 1e-9))


def read_cluster_gpus(api_client: kubernetes.client.ApiClient) -> ClusterGPUs:
    """One read of the nodes and the bound pods (:data:`BOUND_PODS`), a page at a time.

    Raises:
        kubernetes.client.exceptions.ApiException: a page was refused or failed.
    """
    return cluster_gpus(pages(api_client, "/api/v1/nodes", timeout=_TIMEOUT_S),
                        pages(api_client, "/api/v1/pods", query=[("fieldSelector", BOUND_PODS)], timeout=_TIMEOUT_S))


class GpuReader:
    """The shared read of nodes and bound pods (module docstring).

    Started by the first :meth:`free` call of a tick that needs it (an LLMDeployment with
    ``spec.batch``), so an operator without batch work never lists nodes; stopped by :meth:`stop`.

    Args:
        api_client: a configured ``kubernetes.client.ApiClient`` (``None``: the read is off).
        period_s: seconds between the starts of two reads (:data:`READ_PERIOD_S`), at least; longer
            when a read takes more than :data:`READ_DUTY` of it (:attr:`cycle_s`).
        loop_time: the event loop's clock, for the age of a read (tests pass a fake).
        on_read: called after each read that succeeded with the Unix time (s) the read started: every
            pod bound before then is in it (the operator exports it as
            ``llmscale_gpus_free_read_timestamp_seconds``). Not called for a read that failed.
    """

    def __init__(self, api_client: kubernetes.client.ApiClient | None, period_s: float = READ_PERIOD_S,
                 loop_time: Callable[[], float] | None = None,
                 on_read: Callable[[float], None] | None = None) -> None:
        self._api = api_client
        self.period_s = period_s
        #: Seconds from the start of one read to the next: ``period_s``, or the last read's
        #: duration over :data:`READ_DUTY` when that is longer (at most :data:`READ_PERIOD_MAX_S`).
        self.cycle_s = period_s
        self._loop_time = loop_time
        self._on_read = on_read
        self._task: asyncio.Task[None] | None = None
        self._latest: ClusterGPUs | None = None
        # free_on_nodes of the newest read per (resource, selector, tolerations): LLMDeployments that
        # share a placement (most do) cost one pass over the nodes per read, not one per tick each.
        self._on_nodes: dict[tuple[str, frozenset[tuple[str, str]], tuple[Toleration, ...]], float] = {}
        self._latest_at: float | None = None
        #: Why the GPUs free are unknown now (``None``: they are known, or not read yet).
        self.unknown_because: str | None = None if api_client is not None else "the node read is off (read_nodes)"
        self._logged: str | None = None
        self._stopped = False

    def _now(self) -> float:
        return self._loop_time() if self._loop_time is not None else asyncio.get_running_loop().time()

    def latest(self) -> ClusterGPUs | None:
        """The newest read if it is at most :data:`STALE_AFTER_READS` periods old, else ``None``."""
        if self._latest is None or self._latest_at is None:
            return None
        if self._now() - self._latest_at > STALE_AFTER_READS * self.cycle_s:
            self._unknown(f"has not read the nodes for more than {STALE_AFTER_READS * self.cycle_s:g} s")
            return None
        return self._latest

    def free(self, spec: LLMDeploymentSpec, namespace: str, name: str, interactive_replicas: int,
             batch_replicas: int) -> int | None:
        """Return :func:`pool_gpus_free` from the newest read, or ``None`` while unknown (module
        docstring). Starts the reader if it is not running. Never raises; never waits."""
        if self._api is None or spec.scale_target_ref is not None:
            return None
        self.start()
        cluster = self.latest()
        if cluster is None:
            return None
        return pool_gpus_free(cluster, spec, namespace, name, interactive_replicas, batch_replicas,
                              on_nodes=lambda r, sel, tol: self._cached(cluster, r, sel, tol))

    def _cached(self, cluster: ClusterGPUs, resource: str, selector: Mapping[str, str],
                tolerations: Sequence[Toleration]) -> float:
        key = (resource, frozenset(selector.items()), tuple(tolerations))
        if key not in self._on_nodes:
            self._on_nodes[key] = free_on_nodes(cluster, resource, selector, tolerations)
        return self._on_nodes[key]

    def start(self) -> None:
        """Start the periodic read in the running event loop, unless it runs already or is off."""
        if self._api is not None and not self._stopped and (self._task is None or self._task.done()):
            self._task = asyncio.get_running_loop().create_task(self.run(), name="llmscale-gpu-reader")

    async def stop(self) -> None:
        """Stop the periodic read for good (idempotent): a tick afterwards does not start it again."""
        self._stopped = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def run(self) -> None:
        """Read every :attr:`cycle_s` until cancelled; never raises otherwise."""
        while True:
            started = self._now()
            try:
                await self.read_once()
            except Exception as exc:  # a bug in the read must not turn the period into a busy loop
                self._unknown(f"failed to read the nodes: {exc!r}")
            await asyncio.sleep(max(self.cycle_s - (self._now() - started), 0.0) or self.period_s)

    async def read_once(self) -> ClusterGPUs | None:
        """Read the nodes and bound pods once; return the read, or ``None`` when it failed (the
        cause is in :attr:`unknown_because` and logged once)."""
        if self._api is None:
            return None
        started, started_unix = self._now(), time.time()
        try:
            cluster = await asyncio.to_thread(self._read_sync)
        except ApiException as exc:
            what = ("may not list nodes or pods cluster-wide (RBAC: the Helm value operator.readNodes)"
                    if exc.status in (401, 403) else "could not list nodes or pods")
            self._unknown(f"{what}: {exc.status} {exc.reason}")
            return None
        except (OSError, urllib3.exceptions.HTTPError, ValueError) as exc:
            self._unknown(f"could not list nodes or pods: {exc!r}")
            return None
        self._latest, self._latest_at, self._on_nodes = cluster, self._now(), {}
        cycle = max(self.period_s, min((self._latest_at - started) / READ_DUTY, READ_PERIOD_MAX_S))
        if cycle > self.period_s and cycle > 1.5 * self.cycle_s:
            _LOG.info(f"Reading the nodes and pods every {cycle:.0f} s: a read of {len(cluster.nodes)} nodes took "
                      f"{self._latest_at - started:.1f} s (at most {READ_DUTY:.0%} of the time)")
        self.cycle_s = cycle
        if self._logged is not None:
            _LOG.info(f"Read the GPUs free on {len(cluster.nodes)} nodes again")
        self.unknown_because = self._logged = None
        if self._on_read is not None:
            self._on_read(started_unix)
        return cluster

    def _read_sync(self) -> ClusterGPUs:
        assert self._api is not None
        return read_cluster_gpus(self._api)

    def _unknown(self, because: str) -> None:
        self.unknown_because = because
        if self._logged != because:
            self._logged = because
            _LOG.warning(f"Left the GPUs free unknown for every LLMDeployment: the operator {because}; "
                         "nothing is released onto idle GPUs and batch pools are not bounded by GPUs free")
