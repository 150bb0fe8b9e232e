"""The two pools of an LLMDeployment, by the name its children's ``llmscale.dev/pool`` label, the
operator's metrics, the simulator and ``status`` all use. Pure."""

from __future__ import annotations

from typing import Literal

__all__ = ["BATCH", "INTERACTIVE", "POOLS", "Pool"]

Pool = Literal["interactive", "batch"]
INTERACTIVE: Pool = "interactive"
BATCH: Pool = "batch"

#: Both pools, in the order the operator handles them.
POOLS: tuple[Pool, ...] = (INTERACTIVE, BATCH)
