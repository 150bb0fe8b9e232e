"""The batch day's deployment for the simulator tests: the benchmark's 70B chat deployment with a
trough window 00:00–06:00 UTC (tests/sim/test_batchday.py, tests/sim/test_batchday_idle.py)."""

from __future__ import annotations

from pathlib import Path

import yaml

from llmscale.api import LLMDeployment, LLMDeploymentSpec

ROOT = Path(__file__).resolve().parents[2]
WINDOW_OPENS_H = 24.0  # 00:00 UTC of the second day: the window 00:00–06:00


def trough_spec(max_replicas: int) -> LLMDeploymentSpec:
    """``benchmarks/chat-llama-70b-h100.yaml`` with a batch pool of at most ``max_replicas`` replicas
    and the trough window 00:00–06:00 UTC."""
    doc = yaml.safe_load((ROOT / "benchmarks" / "chat-llama-70b-h100.yaml").read_text())
    doc["spec"]["batch"] = {"maxReplicas": max_replicas,
                            "windows": [{"start": "00:00", "end": "06:00", "timezone": "UTC"}]}
    return LLMDeployment.model_validate(doc).spec
