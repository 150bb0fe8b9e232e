"""benchmarks/watch_selection.py on a small case, on the session's local control plane: the pod
watch the operator sends (with its label selector) receives only llmscale's pods' events."""

from __future__ import annotations

import sys

import pytest
from tests.cluster.helpers import ROOT, LocalCluster

sys.path.insert(0, str(ROOT / "benchmarks"))
from watch_selection import measure, operator_selector

pytestmark = pytest.mark.slow


def test_the_operators_pod_watch_receives_only_its_own_pods(cluster: LocalCluster) -> None:
    assert operator_selector() == "app.kubernetes.io/managed-by=llmscale"
    counts = measure(cluster.api, pods=20, ours=2, quiet_s=3.0)
    unselected, selected = counts["unselected"], counts["selected"]
    assert unselected.events >= 22  # at least the creation of every pod
    # 2 of the 22 pods are llmscale's, and every pod goes through the same lifecycle.
    assert selected.events >= 2 and selected.events * 5 <= unselected.events, (selected, unselected)
    assert selected.bytes * 5 < unselected.bytes, (selected, unselected)
