"""One non-default, valid value per ``llmscale run`` setting, to prove each is reachable by its
flag, its environment variable and its Helm value (tests/operator/test_settings_and_run.py,
tests/deploy/test_chart.py). A new setting without a sample fails those tests."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from pydantic import SecretStr


@dataclass(frozen=True)
class Sample:
    """A setting's value as text (what a flag or a variable carries) and as the field holds it.

    Attributes:
        raw: the flag argument or environment value.
        value: the parsed field value.
        helm: ``--set`` pairs that render it in the chart; empty: ``--set-json <value>=<value>``.
        needs: other settings (field -> raw) this one is only valid with, e.g. a peering name for a
            priority, a password for a user name.
    """

    raw: str
    value: object
    helm: tuple[str, ...] = ()
    needs: dict[str, str] = field(default_factory=dict)


SAMPLES: dict[str, Sample] = {
    "namespaces": Sample("a,b", ("a", "b"), helm=("watch.allNamespaces=false", "watch.namespaces={a,b}")),
    "all_namespaces": Sample("1", True, helm=("watch.allNamespaces=true",)),
    "cluster_scanning": Sample("false", False),
    "read_nodes": Sample("true", True),
    "scale_target_label": Sample("llmscale.dev/scalable=true", "llmscale.dev/scalable=true"),
    "tick_base_seconds": Sample("2.5", 2.5),
    "signal_history_seconds": Sample("1200", 1200.0),
    "status_refresh_seconds": Sample("30", 30.0),
    "signal_timeout_seconds": Sample("12", 12.0),
    "api_requests": Sample("4", 4),
    "prometheus_url": Sample("https://prometheus.example:9091", "https://prometheus.example:9091"),
    "prometheus_namespace_label": Sample("kubernetes_namespace", "kubernetes_namespace"),
    "prometheus_deployment_label": Sample("llmdeployment", "llmdeployment"),
    "prometheus_pool_label": Sample("pool", "pool"),
    "prometheus_pod_label": Sample("kubernetes_pod_name", "kubernetes_pod_name"),
    "prometheus_copy_labels": Sample("prometheus_replica,job", ("prometheus_replica", "job"),
                                     helm=("operator.prometheusCopyLabels={prometheus_replica,job}",)),
    "prometheus_rate_window": Sample("30s", "30s"),
    "prometheus_min_rate_window": Sample("2m", "2m"),
    "prometheus_scrape_interval": Sample("30s", "30s"),
    "prometheus_interval_refresh_seconds": Sample("60", 60.0),
    "prometheus_interval_probe": Sample("5m", "5m"),
    "prometheus_quantile": Sample("0.99", 0.99),
    "prometheus_timeout_seconds": Sample("3", 3.0),
    "prometheus_retries": Sample("2", 2),
    "prometheus_max_workers": Sample("4", 4),
    "prometheus_bearer_token_file": Sample("/var/run/secrets/kubernetes.io/serviceaccount/token",
                                           Path("/var/run/secrets/kubernetes.io/serviceaccount/token")),
    "prometheus_bearer_token": Sample("s3cret", SecretStr("s3cret"),
                                      helm=("operator.prometheusBearerTokenSecret.name=prometheus",
                                            "operator.prometheusBearerTokenSecret.key=token")),
    "prometheus_username": Sample("llmscale", "llmscale", needs={"prometheus_password_file": "/etc/prometheus/password"},
                                  helm=("operator.prometheusUsername=llmscale",
                                        "operator.prometheusPasswordFile=/etc/prometheus/password")),
    "prometheus_password": Sample("pa55", SecretStr("pa55"), needs={"prometheus_username": "llmscale"},
                                  helm=("operator.prometheusUsername=llmscale",
                                        "operator.prometheusPasswordSecret.name=prometheus",
                                        "operator.prometheusPasswordSecret.key=password")),
    "prometheus_password_file": Sample("/etc/prometheus/password", Path("/etc/prometheus/password"),
                                       needs={"prometheus_username": "llmscale"},
                                       helm=("operator.prometheusUsername=llmscale",
                                             "operator.prometheusPasswordFile=/etc/prometheus/password")),
    "prometheus_ca_file": Sample("/etc/prometheus/ca.crt", Path("/etc/prometheus/ca.crt")),
    "prometheus_cert_file": Sample("/etc/prometheus/tls.crt", Path("/etc/prometheus/tls.crt")),
    "prometheus_key_file": Sample("/etc/prometheus/tls.key", Path("/etc/prometheus/tls.key"),
                                  needs={"prometheus_cert_file": "/etc/prometheus/tls.crt"},
                                  helm=("operator.prometheusCertFile=/etc/prometheus/tls.crt",
                                        "operator.prometheusKeyFile=/etc/prometheus/tls.key")),
    "prometheus_insecure_skip_verify": Sample("true", True),
    "prometheus_headers": Sample('{"X-Scope-OrgID": "team-a"}', {"X-Scope-OrgID": "team-a"}),
    "prometheus_tenant_headers": Sample('{"X-Scope-OrgID": "{namespace}"}', {"X-Scope-OrgID": "{namespace}"}),
    "field_manager": Sample("llmscale-blue", "llmscale-blue"),
    "interactive_priority_class": Sample("gold", "gold", helm=("priorityClasses.interactive.name=gold",)),
    "batch_priority_class": Sample("bronze", "bronze", helm=("priorityClasses.batch.name=bronze",)),
    "placeholder_priority_class": Sample("team-a-placeholder", "team-a-placeholder",
                                         helm=("priorityClasses.placeholder.name=team-a-placeholder",)),
    "placeholder_image": Sample("mirror.example.com/pause:3.10", "mirror.example.com/pause:3.10"),
    "peering_name": Sample("blue", "blue", helm=("leaderElection.enabled=true", "leaderElection.name=blue")),
    "standalone": Sample("true", True, helm=("leaderElection.enabled=false",)),
    "peering_priority": Sample("7", 7, helm=("leaderElection.enabled=true", "leaderElection.priority=7"),
                               needs={"peering_name": "p"}),
    "metrics_host": Sample("127.0.0.1", "127.0.0.1"),
    "metrics_port": Sample("9100", 9100),
    "log_level": Sample("DEBUG", "DEBUG"),
    "log_format": Sample("json", "json"),
    "kopf_events": Sample("true", True),
}
