"""benchmarks/gpus_free_read.py on a small case, on the session's local control plane: the read
counts every bound pod's GPU on the nodes it added, in one page per 500 objects per list, and a
read that fast keeps the 15 s period (issue 22, case 4)."""

from __future__ import annotations

import sys

import pytest
from tests.cluster.helpers import ROOT, LocalCluster

from llmscale.controller.gpusfree import READ_PERIOD_S

sys.path.insert(0, str(ROOT / "benchmarks"))
from gpus_free_read import GPUS_PER_NODE, populate, read_once

pytestmark = pytest.mark.slow


def test_the_read_sums_every_bound_pod_in_one_page_per_list(cluster: LocalCluster) -> None:
    before = read_once(cluster.api)
    populate(cluster.api, nodes=4, pods=40)
    after = read_once(cluster.api)
    assert len(after.cluster.nodes) == len(before.cluster.nodes) + 4
    added = {n.name for n in after.cluster.nodes} - {n.name for n in before.cluster.nodes}
    held = sum(after.cluster.used.get(name, {}).get("nvidia.com/gpu", 0.0) for name in added)
    assert held == 4 * GPUS_PER_NODE, "the first 8 pods of each node request a GPU each"
    assert after.requests == 2, "one page of nodes, one of bound pods"
    assert after.cycle_s == READ_PERIOD_S
