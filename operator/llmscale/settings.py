"""Configuration of the operator process (``llmscale run``): one frozen dataclass.

Every field has a documented default, its unit, and why the default is what it is. Values come
from three places, the later overriding the earlier: the defaults here, environment variables
(``LLMSCALE_*``, read by :func:`load_settings` when ``main`` runs — never at import), and command
line flags. Tests build :class:`OperatorSettings` directly and never touch the process environment.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["ENV_VARS", "PEERING_PRIORITY_RANGE", "OperatorSettings", "load_settings", "with_peering_priority"]


@dataclass(frozen=True, slots=True)
class OperatorSettings:
    """How the operator runs: what it watches, where it reads signals, how it writes.

    Raises:
        ValueError: from ``__post_init__`` when a value is out of range (the message names the field).
    """

    prometheus_url: str = "http://prometheus.monitoring.svc:9090"
    """Base URL of the Prometheus HTTP API that scrapes the engines. The default is the in-cluster
    name of the common ``monitoring`` namespace layout (kube-prometheus, the Helm chart)."""

    namespaces: tuple[str, ...] = ()
    """Namespaces to watch (Kopf namespace patterns, e.g. ``serving`` or ``team-*``). There is no
    implicit default namespace: :func:`load_settings` refuses an empty list unless
    ``all_namespaces`` is set, so an operator never silently watches nothing."""

    all_namespaces: bool = False
    """Watch LLMDeployments in every namespace (needs cluster-wide RBAC). Off by default so that a
    namespace-scoped install (least privilege) is the safe starting point."""

    tick_base_seconds: float = 5.0
    """Period of Kopf's timer, in seconds. Each LLMDeployment ticks on its own
    ``spec.scaling.tickSeconds`` (minimum 1 s, default 15 s); a base timer fires every this many
    seconds and skips objects whose tick is not due. 5 s keeps the lateness of a 15 s tick under a
    third of it while costing one cheap in-memory check per object per firing."""

    metrics_host: str = "0.0.0.0"
    """Address the ``/metrics`` and ``/healthz`` endpoint binds to. In a pod it must be reachable by
    Prometheus and the kubelet, hence all interfaces; use ``127.0.0.1`` on a workstation."""

    metrics_port: int = 8080
    """TCP port of ``/metrics`` (prometheus-client exposition) and ``/healthz``; 8080 is the
    conventional non-root HTTP port and what the Helm chart's probes point at."""

    log_level: str = "INFO"
    """Python logging level name (``DEBUG``, ``INFO``, ``WARNING``, ``ERROR``). INFO logs one line
    per scale, per child applied, and per invalid spec; DEBUG adds every tick."""

    peering_name: str | None = None
    """Kopf peering object for leader election between operator replicas (``--peering NAME``);
    ``None`` runs standalone (``--standalone``), which is right for a single replica and needs no
    peering CRD. Two standalone replicas would both scale: run one, or peer."""

    peering_priority: int | None = None
    """Kopf peering priority of this process (``--peering-priority``), only used with
    ``peering_name``. Kopf pauses a peer that sees a live peer of higher priority, and pauses *every*
    peer that sees one of the *same* priority ("Pausing all operators, including self";
    ``kopf/_core/engines/peering.py``, ``process_peering_event``). Replicas of one Deployment share
    their environment, so a fixed priority would pause all of them forever. ``None`` (the default)
    gives each process a random priority in ``[1, 2**31 - 1]`` when it starts
    (:func:`with_peering_priority`): the highest-priority live replica works and the others stand
    by; two replicas collide with probability about 1 in 2.1e9. Set a fixed value only for one
    replica that must win or lose against another deployment (e.g. a blue/green operator switch)."""

    field_manager: str = "llmscale"
    """Field manager of every server-side apply. The child Deployment's ``spec.replicas`` is owned
    by this manager alone, so GitOps tools applying their own manifests never fight over it."""

    cluster_scanning: bool = True
    """Let Kopf list and watch Namespaces and CustomResourceDefinitions, so that namespaces
    matching a pattern and a CRD installed after the operator are noticed (cluster-wide
    list/watch on both). Turn off for a namespace-only RBAC with exact namespace names: the
    operator then watches exactly those namespaces, and must start after the CRD is installed."""

    signal_history_seconds: float = 900.0
    """How long snapshots are kept in memory per LLMDeployment for the policy, in seconds. 900 s
    covers the default 300 s scale-down stabilisation window three times over."""

    status_refresh_seconds: float = 60.0
    """Shortest interval between status writes whose only change is the live signal values or the
    policy memory, in seconds. Changes of replicas, decision or conditions are written at once;
    signals change on every tick, and writing them every 15 s per object would load the API server
    for no decision value. Up to this many seconds of policy memory can be lost on a restart."""

    signal_timeout_seconds: float = 10.0
    """Timeout of one signal read (Prometheus query), in seconds; shorter than the default 15 s
    tick so that a hung Prometheus delays at most one tick."""

    def __post_init__(self) -> None:
        if not self.prometheus_url.startswith(("http://", "https://")):
            raise ValueError(f"prometheus_url must be an http(s) URL, got {self.prometheus_url!r}")
        if not 0.1 <= self.tick_base_seconds <= 3600:
            raise ValueError(f"tick_base_seconds must be in [0.1, 3600], got {self.tick_base_seconds}")
        if not 0 <= self.metrics_port <= 65535:
            raise ValueError(f"metrics_port must be in [0, 65535], got {self.metrics_port}")
        if self.log_level.upper() not in logging.getLevelNamesMapping():
            raise ValueError(f"log_level must be a logging level name, got {self.log_level!r}")
        if not self.field_manager:
            raise ValueError("field_manager must not be empty")
        if self.signal_history_seconds <= 0 or self.status_refresh_seconds < 0:
            raise ValueError("signal_history_seconds must be > 0 and status_refresh_seconds >= 0")
        if self.signal_timeout_seconds <= 0:
            raise ValueError(f"signal_timeout_seconds must be > 0, got {self.signal_timeout_seconds}")
        if self.all_namespaces and self.namespaces:
            raise ValueError("set either namespaces or all_namespaces, not both")
        if self.peering_priority is not None:
            lo, hi = PEERING_PRIORITY_RANGE
            if self.peering_name is None:
                raise ValueError("peering_priority needs peering_name (--peering NAME): a standalone "
                                 "operator has no peers to rank")
            if not lo <= self.peering_priority <= hi:
                raise ValueError(f"peering_priority must be in [{lo}, {hi}], got {self.peering_priority}")

    @property
    def standalone(self) -> bool:
        """Whether Kopf runs without peering (no leader election)."""
        return self.peering_name is None


#: Range of peering priorities, inclusive: a signed 32-bit integer, so that the value stays exact
#: in any JSON reader of the peering object's status (Kopf writes it there as a number).
PEERING_PRIORITY_RANGE: tuple[int, int] = (-(2**31), 2**31 - 1)


def with_peering_priority(settings: OperatorSettings, rng: random.Random) -> OperatorSettings:
    """Return ``settings`` with a peering priority: unchanged when standalone or when one is set,
    else a random one from ``[1, 2**31 - 1]`` drawn from ``rng`` (see ``peering_priority``).

    Positive, so that a replica with a random priority outranks Kopf's default priority 0 of
    another instance configured by hand. ``rng`` is an argument so that tests pass a seeded one;
    ``llmscale run`` passes :class:`random.SystemRandom` (seeded by the OS, so two replicas started in
    the same instant from the same image still differ).
    """
    if settings.peering_name is None or settings.peering_priority is not None:
        return settings
    return dataclasses.replace(settings, peering_priority=rng.randint(1, PEERING_PRIORITY_RANGE[1]))


#: Environment variable -> settings field. Lists are comma-separated; booleans are 1/true/yes.
ENV_VARS: dict[str, str] = {
    "LLMSCALE_PROMETHEUS_URL": "prometheus_url",
    "LLMSCALE_NAMESPACES": "namespaces",
    "LLMSCALE_ALL_NAMESPACES": "all_namespaces",
    "LLMSCALE_TICK_BASE_SECONDS": "tick_base_seconds",
    "LLMSCALE_METRICS_HOST": "metrics_host",
    "LLMSCALE_METRICS_PORT": "metrics_port",
    "LLMSCALE_LOG_LEVEL": "log_level",
    "LLMSCALE_PEERING": "peering_name",
    "LLMSCALE_PEERING_PRIORITY": "peering_priority",
    "LLMSCALE_FIELD_MANAGER": "field_manager",
    "LLMSCALE_CLUSTER_SCANNING": "cluster_scanning",
    "LLMSCALE_SIGNAL_HISTORY_SECONDS": "signal_history_seconds",
    "LLMSCALE_STATUS_REFRESH_SECONDS": "status_refresh_seconds",
    "LLMSCALE_SIGNAL_TIMEOUT_SECONDS": "signal_timeout_seconds",
}

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def _convert(field: str, raw: str, source: str) -> Any:
    kind = {f.name: f.type for f in dataclasses.fields(OperatorSettings)}[field]
    try:
        if kind == "float":
            return float(raw)
        if kind == "int":
            return int(raw)
        if kind == "bool":
            lowered = raw.strip().lower()
            if lowered in _TRUE | _FALSE:
                return lowered in _TRUE
            raise ValueError(raw)
        if kind == "tuple[str, ...]":
            return tuple(part.strip() for part in raw.split(",") if part.strip())
        if kind == "str | None":
            return raw or None
        if kind == "int | None":
            return int(raw) if raw.strip() else None
    except ValueError:
        raise ValueError(f"{source}: cannot read {raw!r} as {kind}") from None
    return raw


def load_settings(
    args: argparse.Namespace | None = None, env: Mapping[str, str] | None = None
) -> OperatorSettings:
    """Build settings from defaults, then ``env`` (``LLMSCALE_*``), then parsed flags.

    Args:
        args: the parsed ``llmscale run`` flags; an attribute that is ``None`` (flag not given)
            leaves the environment's or the default value in place.
        env: the environment to read, usually ``os.environ`` passed in by ``main``.

    Raises:
        ValueError: a variable or flag that cannot be parsed, or an inconsistent combination; the
            message names the variable or flag.
    """
    values: dict[str, Any] = {}
    for var, field in ENV_VARS.items():
        if env is not None and var in env:
            values[field] = _convert(field, env[var], var)
    if args is not None:
        flags = vars(args)
        for field in (f.name for f in dataclasses.fields(OperatorSettings)):
            value = flags.get(field)
            if value is None:
                continue
            values[field] = tuple(value) if field == "namespaces" else value
        if flags.get("standalone"):
            values["peering_name"] = None
            if flags.get("peering_priority") is None:
                # A priority from the environment (the chart's) means nothing without peering.
                values.pop("peering_priority", None)
        if flags.get("all_namespaces"):
            values["namespaces"] = ()
        elif flags.get("namespaces"):
            values["all_namespaces"] = False
    settings = OperatorSettings(**values)
    if not settings.all_namespaces and not settings.namespaces:
        raise ValueError(
            "no namespace to watch: pass --namespace NAME (repeatable), --all-namespaces, "
            "or set LLMSCALE_NAMESPACES / LLMSCALE_ALL_NAMESPACES=1"
        )
    return settings
