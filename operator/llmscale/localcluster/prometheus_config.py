"""Prometheus configuration for the local cluster: Kubernetes service discovery of the engines.

Prometheus discovers the engine pods through the real API server (``kubernetes_sd_configs``, role
``pod``), keeps the pods whose engine the pod runner runs (llmscale's, and those of a workload
llmscale scales through ``/scale``), and maps their labels (``llmscale.dev/deployment`` ->
``llmscale_dev_deployment`` ...) exactly as a cluster's Prometheus with the usual ``labelmap``
relabelling would. The one local twist: pods on KWOK's fake nodes have no reachable IP, so
``__address__`` is taken from the ``llmscale.dev/local-address`` annotation that the pod runner
writes when it starts the pod's engine on 127.0.0.1. Debian's ``prometheus`` package (the one
the local cluster uses) is built without Kubernetes service discovery (``field
kubernetes_sd_configs not found in type config.ScrapeConfig``), so there the pod runner's HTTP
service discovery endpoint supplies the same ``__meta_kubernetes_pod_*`` labels.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

__all__ = ["prometheus_config", "write_operator_targets", "write_prometheus_config"]


def prometheus_config(
    kubeconfig: Path, scrape_interval_s: float = 2.0, http_sd_url: str | None = None, router: str | None = None,
    operator_targets: Path | None = None,
) -> dict[str, Any]:
    """Return the Prometheus configuration as a dict (``scrape_interval_s`` in seconds).

    With ``http_sd_url`` the pods are discovered through HTTP service discovery (the pod runner's
    ``/sd``, which emits the same ``__meta_kubernetes_pod_*`` labels; refreshed every scrape
    interval), else through ``kubernetes_sd_configs`` with ``kubeconfig``. The relabelling is the
    same either way. With ``router`` (``host:port``) the router's own ``/metrics`` are scraped too
    (job ``llmscale-router``, its ``namespace`` and ``service`` labels kept): the demand signals a
    scale-from-zero wake query reads. With ``operator_targets`` (a file service discovery JSON
    file, :func:`write_operator_targets`) the operators named there are scraped too (job
    ``llmscale-operator``, their own labels kept): the series the chart's dashboard and alerts read.
    """
    interval = f"{scrape_interval_s:g}s"
    discovery: dict[str, Any] = (
        {"http_sd_configs": [{"url": http_sd_url, "refresh_interval": interval}]}
        if http_sd_url
        else {"kubernetes_sd_configs": [{"role": "pod", "kubeconfig_file": str(kubeconfig)}]}
    )
    return {
        "global": {"scrape_interval": interval, "evaluation_interval": interval, "scrape_timeout": interval},
        "scrape_configs": [
            {
                "job_name": "llmscale-engines",
                **discovery,
                "relabel_configs": [
                    {
                        "source_labels": ["__meta_kubernetes_pod_annotation_llmscale_dev_local_address"],
                        "regex": "(.+)",
                        "action": "keep",
                    },
                    {
                        "source_labels": ["__meta_kubernetes_pod_annotation_llmscale_dev_local_address"],
                        "target_label": "__address__",
                    },
                    {"action": "labelmap", "regex": "__meta_kubernetes_pod_label_(.+)"},
                    {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
                    {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
                ],
            },
            *([{"job_name": "llmscale-router", "honor_labels": True, "static_configs": [{"targets": [router]}]}]
              if router else []),
            *([{"job_name": "llmscale-operator", "honor_labels": True,
                "file_sd_configs": [{"files": [str(operator_targets)], "refresh_interval": interval}]}]
              if operator_targets else []),
        ],
    }


def write_prometheus_config(
    path: Path, kubeconfig: Path, scrape_interval_s: float = 2.0, http_sd_url: str | None = None,
    router: str | None = None, operator_targets: Path | None = None,
) -> Path:
    """Write the configuration to ``path`` (YAML) and return it (arguments as :func:`prometheus_config`)."""
    config = prometheus_config(kubeconfig, scrape_interval_s, http_sd_url, router, operator_targets)
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def write_operator_targets(path: Path, addresses: list[str]) -> Path:
    """Write the operators' ``/metrics`` addresses (``host:port``) as a file service discovery file
    (JSON; Prometheus re-reads it within a scrape interval) and return ``path``. Written through a
    temporary file, so that Prometheus never reads half of it."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps([{"targets": addresses, "labels": {}}] if addresses else []) + "\n")
    tmp.replace(path)
    return path
