"""The reader's typed settings: label names, rate window, quantile, timeouts and authentication.

Pure module (pydantic models only). Every setting is parsed and checked once, here, with its
default and the reason for it; the operator maps them onto its own settings, flags, environment
and Helm values. Nothing is read from the environment.
"""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from llmscale.signals.queries import SelectorLabels, promql_duration

__all__ = ["PrometheusAuth", "ReaderSettings"]


class PrometheusAuth(BaseModel):
    """How to authenticate to Prometheus (or Thanos, Mimir, Cortex, a proxy in front of them).

    Bearer token and basic auth exclude each other. Files are read when a request is sent and
    read again whenever they change (a projected ServiceAccount token is rotated in place), so
    none needs to exist when the settings are built; an unreadable file becomes the snapshot's
    ``error``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    bearer_token_file: Path | None = Field(
        default=None,
        description=(
            "File holding a bearer token, sent as 'Authorization: Bearer <token>'; re-read when it "
            "changes. E.g. /var/run/secrets/kubernetes.io/serviceaccount/token."
        ),
    )
    bearer_token: SecretStr | None = Field(default=None, description="A bearer token given directly.")
    username: str | None = Field(default=None, description="Basic-auth user name.")
    password: SecretStr | None = Field(default=None, description="Basic-auth password given directly.")
    password_file: Path | None = Field(
        default=None,
        description="File holding the basic-auth password (a mounted Secret); re-read when it changes.",
    )
    ca_file: Path | None = Field(
        default=None,
        description="PEM bundle of the CAs that sign Prometheus's certificate; the system's when unset.",
    )
    cert_file: Path | None = Field(
        default=None, description="PEM client certificate for mutual TLS (may also hold the key)."
    )
    key_file: Path | None = Field(default=None, description="PEM private key of cert_file, when held apart.")
    insecure_skip_verify: bool = Field(
        default=False,
        description="Do not verify Prometheus's TLS certificate (tests only: anyone can pose as it).",
    )
    headers: dict[str, str] = Field(
        default_factory=dict,
        description=(
            "Extra HTTP headers on every request, e.g. {'X-Scope-OrgID': 'team-a'} for the tenant "
            "of Mimir, Cortex or a Thanos receive."
        ),
    )

    @model_validator(mode="after")
    def _consistent(self) -> PrometheusAuth:
        bearer = self.bearer_token is not None or self.bearer_token_file is not None
        basic = self.username is not None or self.password is not None or self.password_file is not None
        if self.bearer_token is not None and self.bearer_token_file is not None:
            raise ValueError("set bearer_token or bearer_token_file, not both")
        if bearer and basic:
            raise ValueError("set a bearer token or basic auth (username/password), not both")
        if self.password is not None and self.password_file is not None:
            raise ValueError("set password or password_file, not both")
        if basic and self.username is None:
            raise ValueError("basic auth needs username")
        if basic and self.password is None and self.password_file is None:
            raise ValueError("basic auth needs password or password_file")
        if self.key_file is not None and self.cert_file is None:
            raise ValueError("key_file needs cert_file")
        if self.insecure_skip_verify and self.ca_file is not None:
            raise ValueError("insecure_skip_verify ignores ca_file: set one of them")
        return self


class ReaderSettings(BaseModel):
    """How the reader queries Prometheus.

    The defaults suit an in-cluster Prometheus scraping every 15 s with the relabelling of
    docs/signals.md.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    labels: SelectorLabels = Field(
        default_factory=SelectorLabels,
        description="Prometheus label names of namespace, deployment, pool and pod.",
    )
    copy_labels: tuple[str, ...] = Field(
        default=("prometheus_replica",),
        description=(
            "Labels that tell apart copies of one pod's series besides the engine profile's own: "
            "series differing only by them are collapsed with max, so the pod counts once. "
            "prometheus_replica: an HA pair of Prometheus queried without deduplication. Add 'job' "
            "when two scrape jobs scrape the same engine."
        ),
    )
    rate_window: str | None = Field(
        default=None,
        description=(
            "Range of every rate() and *_over_time(), a PromQL duration; None (or 'auto') derives it "
            "as max(min_rate_window, 4 × scrape interval), the interval read from Prometheus. A set "
            "window shorter than two scrape intervals is reported on every snapshot."
        ),
    )
    min_rate_window: str = Field(
        default="1m",
        description=(
            "Shortest automatic window. 1m: four samples at the usual 15 s scrape, the fewest that make "
            "rate() steady, and short enough that the leading signals lead."
        ),
    )
    scrape_interval: str | None = Field(
        default=None,
        description=(
            "The engines' scrape interval, a PromQL duration; None reads it from Prometheus's "
            "/api/v1/targets (scrapeInterval), else from the sample spacing (Thanos, Mimir)."
        ),
    )
    interval_refresh_s: float = Field(
        default=300.0,
        gt=0,
        description="Seconds between two readings of the scrape interval (it changes only with the scrape config).",
    )
    interval_probe: str = Field(
        default="10m",
        description=(
            "Range of raw samples whose median spacing is the scrape interval where /api/v1/targets is "
            "missing (Thanos, Mimir, Cortex)."
        ),
    )
    quantile: float = Field(
        default=0.95,
        ge=0.0,
        le=1.0,
        description="Latency quantile, 0–1. 0.95: the SLO (spec.slo) is stated at p95.",
    )
    timeout_s: float = Field(
        default=5.0,
        gt=0,
        description=(
            "HTTP timeout of one query, seconds. 5 s: a tick is typically 15 s, and a Prometheus that "
            "needs longer for a few aggregations is in trouble anyway. The queries a read sends "
            "together after its first share 1.8 timeouts with it (9 s at 5 s): each gets what the "
            "first left, never less than one."
        ),
    )
    retries: int = Field(
        default=1,
        ge=0,
        description=(
            "Extra attempts on a refused connection or a 502/503/504 (proxies and restarts), without "
            "backoff. 1: the next tick is the real retry."
        ),
    )
    max_workers: int = Field(
        default=2,
        ge=1,
        description=(
            "Threads of the reader's own executor. Reads never queue behind other blocking work "
            "(Kubernetes writes) in the event loop's default executor."
        ),
    )
    auth: PrometheusAuth = Field(default_factory=PrometheusAuth, description="Authentication and TLS.")
    tenant_headers: dict[str, str] = Field(
        default_factory=dict,
        description=(
            "HTTP headers sent with the queries an LLMDeployment writes (spec.scaling.wake.query), "
            "'{namespace}' in a value replaced by its namespace: e.g. {'X-Scope-OrgID': '{namespace}'} "
            "where Mimir, Cortex or a Thanos tenancy proxy keeps a tenant per namespace, so a user's "
            "query reads only its own tenant. Set by the operator's administrator, never by an "
            "LLMDeployment (a tenant its own object names could be another's). llmscale's own fleet "
            "queries keep auth.headers."
        ),
    )

    @field_validator("tenant_headers")
    @classmethod
    def _header_names(cls, value: dict[str, str]) -> dict[str, str]:
        for name, template in value.items():
            if not re.fullmatch(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+", name):
                raise ValueError(f"tenant header {name!r} is not an HTTP header name")
            if not template.replace("{namespace}", "x").strip() or re.search(r"[\r\n]", template):
                raise ValueError(f"tenant header {name}: {template!r} is not a header value")
        return value

    @field_validator("copy_labels")
    @classmethod
    def _label_names(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for label in value:
            if not re.fullmatch(r"[a-zA-Z_][a-zA-Z0-9_]*", label):
                raise ValueError(f"copy label {label!r} is not a Prometheus label name")
        return value

    @field_validator("rate_window", mode="before")
    @classmethod
    def _auto(cls, value: object) -> object:
        return None if value in ("auto", "") else value

    @field_validator("rate_window", "min_rate_window", "scrape_interval", "interval_probe")
    @classmethod
    def _duration(cls, value: str | None) -> str | None:
        # One grammar for every duration (llmscale.durations); Prometheus gets PromQL's form.
        return promql_duration(value) if value is not None else None
