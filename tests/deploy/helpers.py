"""Helpers of the deployment checks: repository paths, running a tool, parsing rendered YAML."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "llmscale"
IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}

#: Sets of values (``--set`` pairs) the chart must render and lint cleanly with.
VARIANTS = {
    "defaults": [],
    "namespaced": ["watch.allNamespaces=false", "watch.namespaces={serving,batch}"],
    "leader-election-cluster": ["leaderElection.enabled=true", "replicaCount=2"],
    "leader-election-namespaced": [
        "watch.allNamespaces=false", "watch.namespaces={serving}", "leaderElection.enabled=true", "replicaCount=2",
    ],
    "standalone": ["leaderElection.enabled=false"],
    "monitoring": ["serviceMonitor.enabled=true", "podMonitor.enabled=true", "prometheusRule.enabled=true",
                   "grafanaDashboard.enabled=true"],
    "digest": ["image.digest=sha256:" + "a" * 64],
}


def run(cmd: Sequence[str | Path], *, ok: bool = True, timeout: float = 120, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """Run ``cmd`` in the repository root; with ``ok``, fail the test (showing the output) unless it exits 0."""
    proc = subprocess.run([str(c) for c in cmd], cwd=ROOT, capture_output=True, text=True, timeout=timeout, **kwargs)
    if ok and proc.returncode != 0:
        pytest.fail(f"{' '.join(map(str, cmd))} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}", pytrace=False)
    return proc


def parse_docs(text: str) -> list[dict[str, Any]]:
    """Every non-empty YAML document of a multi-document stream; each must be a Kubernetes object."""
    docs = [d for d in yaml.safe_load_all(text) if d is not None]
    for doc in docs:
        assert isinstance(doc, dict), f"not a mapping: {doc!r}"
        assert doc.get("apiVersion") and doc.get("kind"), f"object without apiVersion/kind: {doc}"
        assert doc.get("metadata", {}).get("name"), f"{doc['kind']} without metadata.name"
    return docs


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]
