"""The settings of ``llmscale run``: one typed pydantic-settings model, from flags, environment
variables and defaults.

Every field has its default, its unit, and why the default is what it is (its ``description``);
its ``title`` is the flag's ``--help`` line. Values come from three places, each overriding the one before: the
defaults, environment variables (``LLMSCALE_<FIELD>``, read by :func:`load_settings` from the
mapping it is given — ``main`` passes ``os.environ``; never at import), and command-line flags
(``--<field>``, generated from the model by :func:`add_setting_flags`). Every field is also a value
of the Helm chart (``charts/llmscale/values.yaml``, rendered as the environment variable); a test
checks that each field is reachable by all three and documented in docs/operator.md.

Building :class:`OperatorSettings` directly reads no environment at all, so tests never touch the
process's. Parsing is pydantic's: a bad value is refused with the flag or variable it came from.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import pydantic
from pydantic import BaseModel, Field, SecretStr, ValidationInfo, field_validator, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from llmscale.signals.config import ReaderSettings

__all__ = [
    "DEFAULT_PEERING",
    "ENV_VARS",
    "PEERING_PRIORITY_RANGE",
    "READER_SETTINGS",
    "OperatorSettings",
    "SettingNames",
    "add_setting_flags",
    "load_settings",
    "setting_names",
    "with_peering_priority",
]

#: The peering object an operator joins when none is named (and creates none: the chart does).
DEFAULT_PEERING = "llmscale"

#: Range of peering priorities, inclusive: a signed 32-bit integer, so that the value stays exact
#: in any JSON reader of the peering object's status (Kopf writes it there as a number).
PEERING_PRIORITY_RANGE: tuple[int, int] = (-(2**31), 2**31 - 1)

_ENV_PREFIX = "LLMSCALE_"


def _names(*, flags: tuple[str, ...] | None = None, helm: str | None = None, metavar: str | None = None) -> dict[str, Any]:
    """``json_schema_extra`` of a field: its flags (default ``--<field-with-dashes>``), its Helm value
    (default ``operator.<fieldInCamelCase>``) and the flag's metavar."""
    extra: dict[str, Any] = {}
    if flags is not None:
        extra["flags"] = list(flags)
    if helm is not None:
        extra["helm"] = helm
    if metavar is not None:
        extra["metavar"] = metavar
    return extra


#: Leaf of ReaderSettings (path of field names) -> its flat setting. Every leaf is here
#: (tests/operator/test_settings_and_run.py), so a new reader setting cannot go unexposed.
READER_SETTINGS: dict[tuple[str, ...], str] = {}
#: The reverse: flat setting -> leaf path (filled with READER_SETTINGS).
_READER_PATHS: dict[str, tuple[str, ...]] = {}


def _reader_info(path: tuple[str, ...]) -> FieldInfo:
    model: Any = ReaderSettings
    info: FieldInfo | None = None
    for name in path:
        info = model.model_fields[name]
        model = info.annotation
    assert info is not None
    return info


def _reader(
    path: tuple[str, ...], title: str, *, metavar: str | None = None, helm: str | None = None
) -> Any:
    """A settings field for the :class:`~llmscale.signals.config.ReaderSettings` leaf at ``path``,
    with the reader's default and description (its unit and why); ``title`` is the flag's help."""
    info = _reader_info(path)
    default: Any = info.get_default(call_default_factory=True)
    if isinstance(default, BaseModel):  # never: leaves only
        raise TypeError(f"{path} is not a leaf of ReaderSettings")
    return Field(default, title=title, description=info.description,
                 json_schema_extra=_names(helm=helm, metavar=metavar) | {"reader": list(path)})


class OperatorSettings(BaseSettings):
    """How the operator runs: what it watches, where and how it reads signals, how it writes.

    Raises:
        pydantic.ValidationError: (a ``ValueError``) from the constructor when a value is out of
            range or two values contradict each other; the message names the field.
    """

    model_config = SettingsConfigDict(
        env_prefix=_ENV_PREFIX,
        env_ignore_empty=True,  # LLMSCALE_X="" reads as unset: the default (or None) applies
        frozen=True,
        extra="forbid",
        validate_by_name=True,
        validate_by_alias=True,
        validate_default=True,
    )

    # --- what it watches ----------------------------------------------------------------------
    namespaces: Annotated[tuple[str, ...], NoDecode] = Field(
        (),
        title="namespace or Kopf glob pattern to watch; repeatable",
        description="Namespaces to watch (Kopf namespace patterns, e.g. serving or team-*); the "
        "environment variable is comma-separated, the flag repeatable. No implicit default: "
        "load_settings refuses an empty list unless all_namespaces is set, so an operator never "
        "silently watches nothing.",
        json_schema_extra=_names(flags=("--namespace", "-n"), helm="watch.namespaces", metavar="NS"),
    )
    all_namespaces: bool = Field(
        False,
        title="watch every namespace (cluster-wide RBAC)",
        description="Watch LLMDeployments in every namespace (needs cluster-wide RBAC). Off by "
        "default so that a namespace-scoped install (least privilege) is the safe starting point.",
        json_schema_extra=_names(flags=("--all-namespaces", "-A"), helm="watch.allNamespaces"),
    )
    cluster_scanning: bool = Field(
        True,
        title="let Kopf list/watch Namespaces and CRDs (off: namespace-only RBAC, exact namespace names)",
        description="Let Kopf list and watch Namespaces and CustomResourceDefinitions, so that "
        "namespaces matching a pattern and a CRD installed after the operator are noticed "
        "(cluster-wide list/watch on both). Turn off for a namespace-only RBAC with exact namespace "
        "names: the operator then watches exactly those namespaces and must start after the CRD.",
    )
    scale_target_label: str | None = Field(
        None,
        title="label=value a workload must carry before spec.scaleTargetRef may scale it",
        description="A label (key=value, e.g. llmscale.dev/scalable=true) that a workload must carry "
        "before an LLMDeployment's spec.scaleTargetRef may read or write its /scale; others are "
        "refused with ScalingActive=False/FailedGetScale naming the label. Unset: any workload of a "
        "kind in the chart's rbac.scaleTargets in the LLMDeployment's namespace, so whoever may "
        "create an LLMDeployment may scale another team's workload there (docs/security.md). Set, "
        "the operator also needs get on those kinds (the chart adds it).",
        pattern=r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?=([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$",
    )
    read_nodes: bool = Field(
        False,
        title="read nodes and bound pods cluster-wide for the GPUs free (off by default)",
        description="List the nodes and the pods bound to them, cluster-wide, once per 15 s (one shared "
        "read, whatever the number of LLMDeployments), so that the batch planner knows the GPUs free: "
        "batch Jobs are released onto idle GPUs before a window (spec.batch.releaseOnIdleCapacity) and "
        "the batch pool never grows past the GPUs free. Needs list on nodes and pods cluster-wide (the "
        "chart's ClusterRole <release>-nodes). Off: the GPUs free are unknown, windows and deadlines "
        "alone release Jobs, and the operator needs no cluster-wide pod or node access. Off by "
        "default: listing pods cluster-wide reads every pod spec (its env included), and on a cluster "
        "whose GPU nodes are added on demand (Cluster Autoscaler, Karpenter) the bound would keep a "
        "window's batch pool from asking for nodes; turn it on for a fixed set of GPU nodes.",
    )

    # --- how it ticks ---------------------------------------------------------------------------
    tick_base_seconds: float = Field(
        5.0,
        title="period of the base timer, seconds; objects tick on spec.scaling.tickSeconds",
        description="Period of Kopf's timer, in seconds (0.1-3600). Each LLMDeployment ticks on its "
        "own spec.scaling.tickSeconds (min 1 s, default 15 s); the base timer fires this often and "
        "skips objects whose tick is not due. 5 s keeps the lateness of a 15 s tick under a third of "
        "it for one cheap in-memory check per object per firing.",
        ge=0.1, le=3600, json_schema_extra=_names(metavar="SECONDS"),
    )
    signal_history_seconds: float = Field(
        0.0,
        title="shortest time signal snapshots are kept per object, seconds (0: one cold start)",
        description="Shortest time signal snapshots are kept in memory per LLMDeployment, in "
        "seconds (>= 0). The policy reads the newest snapshot and one cold start of them "
        "(spec.headroom.coldStartSeconds, for the adaptive headroom's trend), so that much is always "
        "kept and 0 (the default) keeps no more: a longer history is read by nothing and costs about "
        "0.7 KB per snapshot per object (benchmarks/memory_per_object.py). A longer one only lets a "
        "raised coldStartSeconds see its whole trend at once instead of after one cold start.",
        ge=0, json_schema_extra=_names(metavar="SECONDS"),
    )
    status_refresh_seconds: float | None = Field(
        None,
        title="also write status when only live values changed, at most this often, seconds (unset: never)",
        description="Status is written when something a reader acts on changes (replicas, decisions, "
        "conditions, a new scale event or recommendation, a headline figure past its deadband; "
        "docs/operator.md). Set, a status whose only change is live values (signal values, numbers "
        "in messages, figures inside their deadbands) is also written at most this often, in "
        "seconds (>= 0). Unset by default: a steady hold writes nothing, which is what lets one "
        "replica run 1,000 LLMDeployments without loading the API server; /metrics carries the "
        "live values.",
        ge=0, json_schema_extra=_names(metavar="SECONDS"),
    )
    signal_timeout_seconds: float = Field(
        10.0,
        title="longest wait for one tick's signal read, seconds",
        description="Longest wait for one tick's signal read, in seconds (> 0), retries included; a "
        "read still unanswered is an unknown snapshot. Shorter than the default 15 s tick so that a "
        "hung Prometheus delays at most one tick; it covers a read of one engine profile: its first "
        "query's prometheus_timeout_seconds (5 s), then what that left of 1.8 of them for the rest.",
        gt=0, json_schema_extra=_names(metavar="SECONDS"),
    )

    # --- where and how it reads signals ----------------------------------------------------------
    prometheus_url: str = Field(
        "http://prometheus.monitoring.svc:9090",
        title="base URL of the Prometheus that scrapes the engines",
        description="Base URL of the Prometheus HTTP API that scrapes the engines (no /api/v1; "
        "https:// for TLS). The default is the in-cluster name of the common monitoring namespace "
        "layout (kube-prometheus, the Prometheus Helm chart).",
        json_schema_extra=_names(metavar="URL"),
    )
    # The reader's own settings (llmscale.signals.config.ReaderSettings): one flat setting per
    # leaf, with the reader's default and description; the reader validates each value (see
    # _reader_leaf) and the whole (auth combinations) when the settings are built.
    prometheus_namespace_label: str = _reader(("labels", "namespace"), "Prometheus label holding the pod's namespace",
                                              metavar="LABEL")
    prometheus_deployment_label: str = _reader(("labels", "deployment"),
                                               "Prometheus label holding the pod label llmscale.dev/deployment",
                                               metavar="LABEL")
    prometheus_pool_label: str = _reader(("labels", "pool"), "Prometheus label holding the pod label llmscale.dev/pool",
                                         metavar="LABEL")
    prometheus_pod_label: str = _reader(("labels", "pod"), "Prometheus label holding the pod's name", metavar="LABEL")
    prometheus_copy_labels: Annotated[tuple[str, ...], NoDecode] = _reader(
        ("copy_labels",), "labels that tell copies of one pod's series apart (comma-separated)", metavar="LABELS")
    prometheus_rate_window: str | None = _reader(
        ("rate_window",), "range of rate() in the signal queries, a PromQL duration, or auto", metavar="DURATION")
    prometheus_min_rate_window: str = _reader(("min_rate_window",), "shortest automatic rate window",
                                              metavar="DURATION")
    prometheus_scrape_interval: str | None = _reader(
        ("scrape_interval",), "the engines' scrape interval (unset: read from Prometheus)", metavar="DURATION")
    prometheus_interval_refresh_seconds: float = _reader(
        ("interval_refresh_s",), "seconds between two readings of the scrape interval", metavar="SECONDS")
    prometheus_interval_probe: str = _reader(
        ("interval_probe",), "range of raw samples whose spacing is the scrape interval (Thanos, Mimir)",
        metavar="DURATION")
    prometheus_quantile: float = _reader(("quantile",), "latency quantile read from the TTFT and ITL histograms, 0-1",
                                         metavar="Q")
    prometheus_timeout_seconds: float = _reader(("timeout_s",), "HTTP timeout of one Prometheus query, seconds",
                                                metavar="SECONDS")
    prometheus_retries: int = _reader(
        ("retries",), "extra attempts of a Prometheus query on a refused connection or a 502/503/504", metavar="N")
    prometheus_max_workers: int = _reader(("max_workers",), "threads of the Prometheus reader", metavar="N")
    prometheus_bearer_token_file: Path | None = _reader(
        ("auth", "bearer_token_file"), "file holding a bearer token for Prometheus (re-read when it changes)",
        metavar="PATH")
    prometheus_bearer_token: SecretStr | None = _reader(
        ("auth", "bearer_token"), "bearer token for Prometheus (prefer the file or the variable: flags show in ps)",
        metavar="TOKEN", helm="operator.prometheusBearerTokenSecret")
    prometheus_username: str | None = _reader(("auth", "username"), "basic-auth user name for Prometheus",
                                              metavar="USER")
    prometheus_password: SecretStr | None = _reader(
        ("auth", "password"), "basic-auth password for Prometheus (prefer the file or the variable)",
        metavar="PASSWORD", helm="operator.prometheusPasswordSecret")
    prometheus_password_file: Path | None = _reader(
        ("auth", "password_file"), "file holding the basic-auth password (re-read when it changes)", metavar="PATH")
    prometheus_ca_file: Path | None = _reader(("auth", "ca_file"), "CA bundle that signs Prometheus's certificate",
                                              metavar="PATH")
    prometheus_cert_file: Path | None = _reader(("auth", "cert_file"), "client certificate for mutual TLS",
                                                metavar="PATH")
    prometheus_key_file: Path | None = _reader(("auth", "key_file"), "private key of the client certificate",
                                               metavar="PATH")
    prometheus_insecure_skip_verify: bool = _reader(
        ("auth", "insecure_skip_verify"), "do not verify Prometheus's TLS certificate (tests only)")
    prometheus_headers: Annotated[dict[str, str], NoDecode] = _reader(
        ("auth", "headers"), "extra HTTP headers on every Prometheus request, a JSON object", metavar="JSON")
    prometheus_tenant_headers: Annotated[dict[str, str], NoDecode] = _reader(
        ("tenant_headers",), "HTTP headers of an LLMDeployment's own queries, '{namespace}' replaced, a JSON object",
        metavar="JSON")

    # --- how it writes ----------------------------------------------------------------------------
    field_manager: str = Field(
        "llmscale",
        title="field manager of every server-side apply",
        description="Field manager of every server-side apply. The child Deployment's "
        "spec.replicas is owned by this manager alone, so GitOps tools applying their own "
        "manifests never fight over it.",
        min_length=1, json_schema_extra=_names(metavar="NAME"),
    )
    api_requests: int = Field(
        32,
        title="concurrent requests to the API server besides watch streams",
        description="Connections to the API server for concurrent requests (status patches, Events, "
        "lists), besides one per watch stream (1-1024): the operator holds at most that many more, "
        "and further requests wait for one. Each TLS connection costs memory; unbounded, a creation "
        "burst of 1,000 LLMDeployments held ~1,000. 32 keeps a burst's patches flowing on the "
        "benchmark's API server. Unbounded where a namespace pattern may match namespaces created "
        "later (docs/operator.md, Scale).",
        ge=1, le=1024, json_schema_extra=_names(metavar="N"),
    )

    interactive_priority_class: str | None = Field(
        None,
        title="PriorityClass of the interactive pool's pods (unset: none)",
        description="priorityClassName of the interactive pool's pods. The chart and the kustomize "
        "base create llmscale-interactive (value 1000) and llmscale-batch (100) and set both, so that "
        "the scheduler preempts batch pods when interactive ones cannot be placed. Unset by default "
        "for `llmscale run` because a pod naming a PriorityClass that does not exist is refused by "
        "the API server: set it only where the class is installed.",
        min_length=1, json_schema_extra=_names(helm="priorityClasses.interactive.name", metavar="NAME"),
    )
    batch_priority_class: str | None = Field(
        None,
        title="PriorityClass of the batch pool's pods (unset: none)",
        description="priorityClassName of the batch pool's pods; keep it below the interactive "
        "pool's (see interactive_priority_class).",
        min_length=1, json_schema_extra=_names(helm="priorityClasses.batch.name", metavar="NAME"),
    )
    placeholder_priority_class: str = Field(
        "llmscale-placeholder",
        title="PriorityClass of the placeholder pods that keep nodes for the headroom",
        description="PriorityClass of the placeholder pods of spec.headroom.warmNodes. The chart "
        "creates it (value -1, preemptionPolicy Never): below every pod at the default priority 0 and "
        "both pools' classes, so "
        "any real replica preempts a placeholder, and above the cluster autoscaler's expendable-pod "
        "cutoff (-10), so a Pending placeholder still makes it add a node.",
        min_length=1, max_length=253, json_schema_extra=_names(helm="priorityClasses.placeholder.name", metavar="NAME"),
    )
    placeholder_image: str = Field(
        "registry.k8s.io/pause:3.10",
        title="image of the placeholder pods",
        description="Image of the placeholder pods: the Kubernetes pause container (a few hundred "
        "KiB, does nothing). Mirror it and set this where the cluster cannot pull from registry.k8s.io.",
        min_length=1, json_schema_extra=_names(metavar="IMAGE"),
    )

    # --- leader election ----------------------------------------------------------------------------
    peering_name: str | None = Field(
        None,
        title="leader election through Kopf peering object NAME, mandatory (unset: llmscale, if it exists)",
        validation_alias="LLMSCALE_PEERING",
        description="Kopf peering object for leader election between operator processes. Named, "
        "peering is mandatory: the operator waits for the object rather than run alone (the chart "
        "names it). Unset, the operator joins the peering object `llmscale` when it exists (the "
        "chart creates it) and runs alone when it does not (Kopf's auto-detection), so that "
        "`llmscale run` on a workstation beside an installed operator never becomes a second writer "
        "of the same replicas: one of the two pauses. --standalone opts out.",
        json_schema_extra=_names(flags=("--peering",), helm="leaderElection.name", metavar="NAME"),
    )
    standalone: bool = Field(
        False,
        title="no leader election; refuse to start while another operator holds the peering",
        description="Run without Kopf peering. Before it starts, the operator looks for live peers "
        "in the peering objects it would have joined (and in those of the other scope it can "
        "read) and refuses to start while one exists: a standalone operator beside a peered one "
        "would be a second writer. Off by default; the chart sets it with leaderElection.enabled=false.",
        json_schema_extra=_names(helm="leaderElection.enabled"),
    )
    peering_priority: int | None = Field(
        None,
        title="Kopf peering priority of this process (unset: random per process)",
        description="Kopf peering priority of this process, only with peering. Kopf pauses a "
        "peer that sees a live peer of higher priority, and pauses every peer that sees one of the "
        "same priority (kopf/_core/engines/peering.py, process_peering_event). Replicas of one "
        "Deployment share their environment, so a fixed priority would pause all of them forever: "
        "unset, each process draws a random one in [1, 2**31 - 1] when it starts (two replicas "
        "collide with probability about 1 in 2.1e9). Set one only for a replica that must win or "
        "lose against another install (e.g. a blue/green operator switch).",
        json_schema_extra=_names(helm="leaderElection.priority", metavar="N"),
    )

    # --- its own endpoints ----------------------------------------------------------------------------
    metrics_host: str = Field(
        "0.0.0.0",
        title="bind address of /metrics, /healthz and /readyz",
        description="Address the /metrics, /healthz and /readyz endpoint binds to. In a pod it "
        "must be reachable by Prometheus and the kubelet, hence all interfaces; use 127.0.0.1 on "
        "a workstation.",
        min_length=1, json_schema_extra=_names(metavar="ADDRESS"),
    )
    metrics_port: int = Field(
        8080,
        title="port of /metrics, /healthz and /readyz (0 picks a free one)",
        description="TCP port of /metrics (prometheus-client exposition), /healthz and /readyz "
        "(0-65535; 0 picks a free one); 8080 is the conventional non-root HTTP port and what the "
        "Helm chart's probes point at.",
        ge=0, le=65535, json_schema_extra=_names(metavar="PORT"),
    )
    log_level: str = Field(
        "INFO",
        title="Python logging level: DEBUG, INFO, WARNING or ERROR",
        description="Python logging level name (DEBUG, INFO, WARNING, ERROR). INFO logs one line "
        "per scale, per child applied and per invalid spec; DEBUG adds every tick.",
        json_schema_extra=_names(metavar="LEVEL"),
    )

    log_format: Literal["text", "json"] = Field(
        "text",
        title="log line format: text, or json (one JSON object a line)",
        description="Format of the operator's log lines: text (time, level, logger, message), or "
        "json, one JSON object a line with time, level, logger, message and, for lines about an "
        "object, its namespace and name, for log pipelines (Loki, Elasticsearch, Cloud Logging) "
        "that parse JSON. Text by default: what a person reads in kubectl logs.",
        json_schema_extra=_names(metavar="FORMAT"),
    )
    kopf_events: bool = Field(
        False,
        title="let Kopf post its own per-handler Events (handler succeeded/failed)",
        description="Post Kopf's own Events on LLMDeployments (\"Handler 'children' succeeded\" ...) "
        "and log its per-tick \"Timer 'tick' succeeded\" lines. Off by default: the base timer fires "
        "every few seconds per object, and llmscale posts its own Events for what matters (scales, "
        "refusals, invalid specs); at 1,000 objects Kopf's would be thousands of API writes an hour.",
    )
    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Only the constructor's arguments: :func:`load_settings` reads the environment it is
        given and passes it in, so nothing reads ``os.environ`` behind the caller's back."""
        return (init_settings,)

    @field_validator("namespaces", "prometheus_copy_labels", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        if isinstance(value, str):  # LLMSCALE_NAMESPACES=a,b
            return tuple(part.strip() for part in value.split(",") if part.strip())
        return value

    @field_validator("prometheus_rate_window", mode="before")
    @classmethod
    def _auto(cls, value: Any) -> Any:
        return None if value in ("auto", "") else value

    @field_validator("prometheus_headers", "prometheus_tenant_headers", mode="before")
    @classmethod
    def _json_object(cls, value: Any) -> Any:
        if isinstance(value, str):  # LLMSCALE_PROMETHEUS_HEADERS='{"X-Scope-OrgID": "team-a"}'
            try:
                value = json.loads(value)
            except json.JSONDecodeError as exc:
                raise ValueError(f"not a JSON object of header names and values: {exc}") from None
        return value

    @field_validator("*")
    @classmethod
    def _reader_leaf(cls, value: Any, info: ValidationInfo) -> Any:
        """Check a reader setting with the reader's own validators (durations, label names, ...)."""
        path = _READER_PATHS.get(info.field_name or "")
        if path is None or path[0] == "auth":
            # Authentication settings only make sense together (a user name needs a password):
            # their field types are checked here, their combination by _consistent.
            return value
        nested: dict[str, Any] = {path[-1]: value}
        for name in reversed(path[:-1]):
            nested = {name: nested}
        try:
            ReaderSettings.model_validate(nested)
        except pydantic.ValidationError as exc:
            raise ValueError("; ".join(str(e["msg"]).removeprefix("Value error, ") for e in exc.errors())) from None
        return value

    @field_validator("prometheus_url")
    @classmethod
    def _url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError(f"prometheus_url must be an http(s) URL, got {value!r}")
        return value

    @field_validator("log_level")
    @classmethod
    def _level(cls, value: str) -> str:
        if value.upper() not in logging.getLevelNamesMapping():
            raise ValueError(f"log_level must be a logging level name, got {value!r}")
        return value

    @field_validator("peering_priority")
    @classmethod
    def _priority(cls, value: int | None) -> int | None:
        lo, hi = PEERING_PRIORITY_RANGE
        if value is not None and not lo <= value <= hi:
            raise ValueError(f"peering_priority must be in [{lo}, {hi}], got {value}")
        return value

    def reader_settings(self) -> ReaderSettings:
        """Return the Prometheus reader's settings these settings describe.

        Raises:
            pydantic.ValidationError: a combination the reader refuses (e.g. a bearer token and
                basic auth); :meth:`_consistent` has already refused it for a built instance.
        """
        nested: dict[str, Any] = {}
        for path, field in READER_SETTINGS.items():
            node = nested
            for name in path[:-1]:
                node = node.setdefault(name, {})
            node[path[-1]] = getattr(self, field)
        return ReaderSettings.model_validate(nested)

    @model_validator(mode="after")
    def _consistent(self) -> OperatorSettings:
        try:
            self.reader_settings()
        except pydantic.ValidationError as exc:
            raise ValueError("Prometheus settings (--prometheus-*, LLMSCALE_PROMETHEUS_*): " + "; ".join(
                str(e["msg"]).removeprefix("Value error, ") for e in exc.errors())) from None
        if self.all_namespaces and self.namespaces:
            raise ValueError("set either namespaces or all_namespaces, not both")
        if self.standalone and self.peering_name is not None:
            raise ValueError("set either standalone or peering_name, not both")
        if self.peering_priority is not None and self.standalone:
            raise ValueError("peering_priority needs peering: a standalone operator has no peers to rank")
        return self

    @property
    def peering(self) -> str | None:
        """The Kopf peering object in force: ``peering_name``, else :data:`DEFAULT_PEERING`;
        ``None`` when standalone."""
        if self.standalone:
            return None
        return self.peering_name or DEFAULT_PEERING


READER_SETTINGS.update({
    tuple(info.json_schema_extra["reader"]): field  # type: ignore[index, arg-type]
    for field, info in OperatorSettings.model_fields.items()
    if isinstance(info.json_schema_extra, dict) and "reader" in info.json_schema_extra
})
_READER_PATHS.update({field: path for path, field in READER_SETTINGS.items()})


@dataclass(frozen=True, slots=True)
class SettingNames:
    """The three names of one setting.

    Attributes:
        field: the :class:`OperatorSettings` field, e.g. ``tick_base_seconds``.
        flags: its ``llmscale run`` flags, long first, e.g. ``("--tick-base-seconds",)``.
        env: its environment variable, e.g. ``LLMSCALE_TICK_BASE_SECONDS``.
        helm: its value in the Helm chart, dotted, e.g. ``operator.tickBaseSeconds``.
        metavar: the flag's placeholder in ``--help`` (``None`` for switches).
    """

    field: str
    flags: tuple[str, ...]
    env: str
    helm: str
    metavar: str | None


def _camel(field: str) -> str:
    head, *rest = field.split("_")
    return head + "".join(part.capitalize() for part in rest)


def setting_names() -> list[SettingNames]:
    """Return the names of every setting, in the model's field order."""
    out = []
    for field, info in OperatorSettings.model_fields.items():
        extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
        given = extra.get("flags")
        flags = tuple(str(f) for f in given) if isinstance(given, list) else ("--" + field.replace("_", "-"),)
        alias = info.validation_alias
        env = alias if isinstance(alias, str) else _ENV_PREFIX + field.upper()
        helm = str(extra.get("helm") or "operator." + _camel(field))
        metavar = extra.get("metavar")
        out.append(SettingNames(field, flags, env, helm, str(metavar) if metavar is not None else None))
    return out


#: Environment variable -> settings field.
ENV_VARS: dict[str, str] = {n.env: n.field for n in setting_names()}


def _help(field: str) -> str:
    info = OperatorSettings.model_fields[field]
    env = next(n.env for n in setting_names() if n.field == field)
    default = info.default if info.default not in ((), None) else "unset"
    if isinstance(default, tuple | list | frozenset | set):  # as the variable takes it: a,b
        default = ",".join(str(v) for v in default)
    return f"{info.title} (env {env}; default {default})".replace("%", "%%")


def add_setting_flags(parser: argparse.ArgumentParser) -> None:
    """Add one flag per setting to ``parser`` (``dest`` is the field name, default ``None`` so
    that an unset flag leaves the environment's value or the default in place).

    Values stay strings for pydantic to parse (its error names the flag); switches are
    ``store_true`` or ``--x/--no-x``; ``--namespace`` repeats and excludes ``--all-namespaces``;
    ``--peering NAME`` excludes ``--standalone`` (no peering, whatever the environment says).
    """
    names = {n.field: n for n in setting_names()}
    scope = parser.add_mutually_exclusive_group()
    peering = parser.add_mutually_exclusive_group()
    for field, n in names.items():
        kwargs: dict[str, Any] = {"dest": field, "default": None, "help": _help(field)}
        if field == "namespaces":
            scope.add_argument(*n.flags, action="append", metavar=n.metavar, **kwargs)
        elif field == "all_namespaces":
            scope.add_argument(*n.flags, action="store_true", **kwargs)
        elif field == "peering_name":
            peering.add_argument(*n.flags, metavar=n.metavar, **kwargs)
        elif field == "standalone":
            peering.add_argument(*n.flags, action="store_true", **kwargs)
        elif OperatorSettings.model_fields[field].annotation is bool:
            parser.add_argument(*n.flags, action=argparse.BooleanOptionalAction, **kwargs)
        else:
            parser.add_argument(*n.flags, metavar=n.metavar, **kwargs)


class _Environment(EnvSettingsSource):
    """pydantic-settings' environment source, reading a given mapping instead of ``os.environ``."""

    def __init__(self, settings_cls: type[BaseSettings], environ: Mapping[str, str]) -> None:
        self._environ = dict(environ)
        super().__init__(settings_cls)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        return {
            (key if self.case_sensitive else key.lower()): value
            for key, value in self._environ.items()
            if not (self.env_ignore_empty and value == "")
        }


def _explain(
    exc: pydantic.ValidationError,
    from_flags: Mapping[str, Any],
    from_env: Mapping[str, Any],
    names: Mapping[str, SettingNames],
    by_alias: Mapping[str, str],
    *,
    fields_only: bool = False,
) -> str:
    """One clause per error, each led by the flag or variable the value came from and the field."""
    problems = []
    for err in exc.errors():
        loc = str(err["loc"][0]) if err.get("loc") else ""
        if fields_only and not loc:
            continue
        field = by_alias.get(loc, loc)
        msg = str(err["msg"]).removeprefix("Value error, ")
        if field in from_flags:
            where = f"{names[field].flags[0]} ({field})"
        elif field in from_env:
            where = f"{names[field].env} ({field})"
        else:
            where = field or "settings"
        problems.append(f"{where}: {msg}" + (f", got {err['input']!r}" if field and "got" not in msg else ""))
    return "; ".join(problems)


def load_settings(args: argparse.Namespace | None = None, env: Mapping[str, str] | None = None) -> OperatorSettings:
    """Build settings from the defaults, then ``env`` (``LLMSCALE_*``), then parsed flags.

    Args:
        args: the parsed ``llmscale run`` flags (:func:`add_setting_flags`); an attribute that is
            ``None`` (flag not given) leaves the environment's or the default value in place.
        env: the environment to read, usually ``os.environ`` passed in by ``main``; ``None`` reads none.

    Raises:
        ValueError: a variable or flag that cannot be parsed, an out-of-range value or an
            inconsistent combination; the message names the flag or variable (and the field), one
            clause per problem.
    """
    names = {n.field: n for n in setting_names()}
    by_alias = {n.env: n.field for n in names.values() if n.env != _ENV_PREFIX + n.field.upper()}
    from_env: dict[str, Any] = {}
    if env is not None:
        for key, value in _Environment(OperatorSettings, env)().items():
            from_env[by_alias.get(key, key)] = value
    from_flags: dict[str, Any] = {}
    if args is not None:
        flags = vars(args)
        for field in names:
            value = flags.get(field)
            if value is not None:
                from_flags[field] = tuple(value) if field == "namespaces" else value
        if flags.get("standalone"):
            from_env.pop("peering_name", None)
            if "peering_priority" not in from_flags:
                # A priority from the environment (the chart's) means nothing without peering.
                from_env.pop("peering_priority", None)
        if flags.get("all_namespaces"):
            from_flags["namespaces"] = ()
        elif flags.get("namespaces"):
            from_flags["all_namespaces"] = False
        if flags.get("peering_name"):
            from_env.pop("standalone", None)
    # Every variable set must parse, even one a flag overrides: a typo in the chart's environment
    # should not wait for the day the flag is dropped. Contradictions are judged on the merge.
    try:
        OperatorSettings(**from_env)
    except pydantic.ValidationError as exc:
        if any(err.get("loc") for err in exc.errors()):
            raise ValueError(_explain(exc, {}, from_env, names, by_alias, fields_only=True)) from None
    try:
        settings = OperatorSettings(**{**from_env, **from_flags})
    except pydantic.ValidationError as exc:
        raise ValueError(_explain(exc, from_flags, from_env, names, by_alias)) from None
    if not settings.all_namespaces and not settings.namespaces:
        raise ValueError(
            "no namespace to watch: pass --namespace NAME (repeatable), --all-namespaces, "
            "or set LLMSCALE_NAMESPACES / LLMSCALE_ALL_NAMESPACES=1"
        )
    return settings


def with_peering_priority(settings: OperatorSettings, rng: random.Random) -> OperatorSettings:
    """Return ``settings`` with a peering priority: unchanged when standalone or when one is set,
    else a random one from ``[1, 2**31 - 1]`` drawn from ``rng`` (see ``peering_priority``).

    Positive, so that a replica with a random priority outranks Kopf's default priority 0 of
    another instance configured by hand. ``rng`` is an argument so that tests pass a seeded one;
    ``llmscale run`` passes :class:`random.SystemRandom` (seeded by the OS, so two replicas started in
    the same instant from the same image still differ).
    """
    if settings.standalone or settings.peering_priority is not None:
        return settings
    return settings.model_copy(update={"peering_priority": rng.randint(1, PEERING_PRIORITY_RANGE[1])})
