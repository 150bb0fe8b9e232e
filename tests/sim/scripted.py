"""A scripted autoscaler and a synthetic trace for the simulator's tests (``test_fleet``,
``test_calibrate``): uniform prompt and output lengths, Poisson arrivals from :data:`T0`."""

from __future__ import annotations

import numpy as np

from llmscale.model import GPU_PRESETS, MODEL_PRESETS, ReplicaModel
from llmscale.sim.fleet import Observation, ScaleDecision
from llmscale.sim.trace import Trace

__all__ = ["MODEL", "T0", "Script", "uniform_trace"]

MODEL = ReplicaModel(arch=MODEL_PRESETS["llama-3.1-8b"], gpu=GPU_PRESETS["h100-sxm"])
T0 = 1_700_000_000.0


def uniform_trace(rate: float, seconds: float, seed: int = 0, batch: float = 0.0, long_every: int = 0) -> Trace:
    """``rate`` requests/s for ``seconds`` from :data:`T0`: prompts of 50–3,000 tokens (every
    ``long_every``-th 9,000: past an 8,192-token context), outputs of 1–800, a ``batch`` share
    marked batch."""
    rng = np.random.default_rng(seed)
    n = int(rng.poisson(rate * seconds))
    t = T0 + np.sort(rng.uniform(0, seconds, n))
    prompt = rng.integers(50, 3000, n)
    if long_every:
        prompt[::long_every] = 9000  # over the 8192-token context limit: rejected
    return Trace(t, prompt, rng.integers(1, 800, n), rng.random(n) < batch, T0, seconds)


class Script:
    """An autoscaler that follows a fixed timetable (``(seconds after T0, replicas)``) and records
    what it saw."""

    name = "script"

    def __init__(self, plan: list[tuple[float, int]], tick_s: float = 15.0, batch: int | None = None) -> None:
        self.plan = plan
        self.tick_s = tick_s
        self.batch = batch
        self.seen: list[Observation] = []

    def decide(self, obs: Observation) -> ScaleDecision:
        self.seen.append(obs)
        want = [n for t, n in self.plan if t <= obs.now - T0]
        return ScaleDecision(want[-1] if want else obs.state.interactive_replicas, self.batch)
