"""The batch day's deployment for the simulator tests: the benchmark's 70B chat deployment with a
trough window 00:00–06:00 UTC (tests/sim/test_batchday.py, tests/sim/test_batchday_idle.py)."""

from __future__ import annotations

from pathlib import Path

import yaml

from llmscale.api import LLMDeployment, LLMDeploymentSpec
from llmscale.sim.calibrate import Capacity

ROOT = Path(__file__).resolve().parents[2]
WINDOW_OPENS_H = 24.0  # 00:00 UTC of the second day: the window 00:00–06:00

#: What ``calibrate_sizes`` measures for :func:`trough_spec` on the bundled Azure conversation trace
#: (seed 0; the batch pool's size changes nothing of it): fixed here, as the benchmark's table prints
#: it, so that the tests spend their time on the day and not on the search
#: (tests/sim/test_calibrate.py checks the search itself).
TROUGH_CURVE = {
    1: Capacity(4.936107015499463, 26.57169911195132, 27.15, 0.17, 1.0, 1, 0.06810827772234003),
    2: Capacity(5.076565345208797, 23.066584186521844, 22.675, 0.145, 1.0, 2, 0.05648586597230884),
    4: Capacity(5.518005810009562, 26.787085923040756, 26.1675, 0.225, 1.0, 4, 0.06302626937289509),
    8: Capacity(5.638398664046134, 28.975250660309488, 28.33, 0.155, 1.0, 8, 0.06883947051967694),
}


def trough_spec(max_replicas: int) -> LLMDeploymentSpec:
    """``benchmarks/chat-llama-70b-h100.yaml`` with a batch pool of at most ``max_replicas`` replicas
    and the trough window 00:00–06:00 UTC."""
    doc = yaml.safe_load((ROOT / "benchmarks" / "chat-llama-70b-h100.yaml").read_text())
    doc["spec"]["batch"] = {"maxReplicas": max_replicas,
                            "windows": [{"start": "00:00", "end": "06:00", "timezone": "UTC"}]}
    return LLMDeployment.model_validate(doc).spec
