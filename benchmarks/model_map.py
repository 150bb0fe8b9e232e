"""The model against the simulator, everywhere (issue 27, item 4): replicas-needed over a grid of mixes.

For each mix of the grid — prompt median (tokens), its log-normal spread σ, output median (tokens,
σ 0.5), ITL p95 SLO and ``--max-num-batched-tokens`` (the chunked-prefill step budget) — on
Llama-3.1-8B, one H100-SXM per replica, context 32k, TTFT p95 SLO 5 s:

- the **model**'s capacity per replica at the SLO for a pool of :data:`POOL` replicas
  (:func:`llmscale.model.capacity.capacity_per_replica`: what the load signal sizes the pool with);
- the **simulator**'s calibrated capacity: the highest per-replica rate at which a static pool of
  :data:`POOL` replicas meets both p95s in ≥ 99 % of the measured minutes of a Poisson load of that
  mix (:func:`llmscale.sim.calibrate.calibrate` probes, searched around the model's answer: a
  bracket by ×1.25 steps, then bisection to :data:`RESOLUTION`).

Replicas needed at a rate are inversely proportional to the capacity, so the model's need over the
simulator's is ``sim capacity / model capacity`` (> 1: the model asks for fewer replicas than the
SLO needs). Rows outside ±:data:`BAND` are marked ✗; docs/policy.md ("The model against the
simulator") explains those that are not fixed.

Usage (from the repository root)::

    nice .venv/bin/python benchmarks/model_map.py [--prompts 100,1000,8000] [--sigmas 0.3,1.5]
        [--outputs 1000,4000] [--itls 0.03,0.2] [--budgets 512,8192] [--minutes 15]

``--quick`` maps two mixes with short probes (what the test runs), not a result.
"""

from __future__ import annotations

import argparse
import itertools
import math
import sys
import time
from dataclasses import dataclass

import numpy as np

from llmscale.api import LLMDeploymentSpec
from llmscale.model import ReplicaModel
from llmscale.model.capacity import LengthDistribution, WorkloadShape, capacity_per_replica, engine_limits
from llmscale.sim.calibrate import calibrate
from llmscale.sim.engine_args import engine_config
from llmscale.sim.trace import Trace

#: The calibration pool: 4 replicas, as :func:`llmscale.sim.calibrate.calibrate`'s default.
POOL = 4
#: Largest disagreement of the model's need with the simulator's that passes: 20 %.
BAND = 0.20
#: The search stops when the bracket is narrower than this ratio: 2 %.
RESOLUTION = 1.02
#: Spread of the output lengths (log-normal σ) at every point.
OUTPUT_SIGMA = 0.5
CONTEXT = 32_768
TTFT_S = 5.0
START = 1_700_006_400.0  # 2023-11-15 00:00 UTC


@dataclass(frozen=True)
class Mix:
    """One grid point."""

    prompt: float
    sigma: float
    output: float
    itl_s: float
    budget: int

    @property
    def key(self) -> str:
        return f"p{self.prompt:g}/σ{self.sigma:g}/o{self.output:g}/itl{self.itl_s * 1e3:g}ms/b{self.budget}"


def mix_spec(mix: Mix) -> LLMDeploymentSpec:
    """Llama-3.1-8B on one H100-SXM with the mix's ITL SLO and step budget."""
    return LLMDeploymentSpec.model_validate({
        "model": {"name": "m", "preset": "llama-3.1-8b", "contextLimitTokens": CONTEXT},
        "engine": {"type": "vllm", "args": ["--max-num-batched-tokens", str(mix.budget)]},
        "resources": {"gpuType": "h100-sxm", "gpusPerReplica": 1},
        "slo": {"ttftP95Seconds": TTFT_S, "itlP95Seconds": mix.itl_s},
    })


def _lengths(median: float, sigma: float, n: int, rng: np.random.Generator, hi: int) -> np.ndarray:
    return np.clip(rng.lognormal(math.log(median), sigma, n), 1, hi).astype(np.int64)


def base_trace(mix: Mix, n: int = 4000, seed: int = 0) -> Trace:
    """Poisson arrivals at 1 request/s with the mix's log-normal lengths, prompt + output within the
    context (the calibration rescales its time to each probe's rate)."""
    rng = np.random.default_rng(seed)
    outputs = _lengths(mix.output, OUTPUT_SIGMA, n, rng, CONTEXT // 2)
    prompts = np.minimum(_lengths(mix.prompt, mix.sigma, n, rng, CONTEXT), CONTEXT - outputs - 1)
    t = START + np.cumsum(rng.exponential(1.0, n))
    return Trace(t, prompts, outputs, np.zeros(n, np.bool_), START, float(t[-1] - START) + 1.0,
                 source=f"Poisson, {mix.key}")


def model_capacity(mix: Mix) -> tuple[float, str]:
    """The model's requests/s per replica at the SLO in a pool of :data:`POOL`, and what binds."""
    spec = mix_spec(mix)
    model = ReplicaModel.from_spec(spec)
    # The model reads a mix as log-normal (median, σ): the fit the live mix gives for these lengths.
    shape = WorkloadShape(LengthDistribution(mix.prompt, mix.sigma), LengthDistribution(mix.output, OUTPUT_SIGMA),
                          0.0, "grid")
    per, _, bound = capacity_per_replica(model, shape, engine_limits(spec), mix.itl_s, TTFT_S, replicas=POOL)
    return per, bound


def sim_capacity(mix: Mix, start_rps: float, minutes: float, warmup_minutes: float = 3.0) -> float:
    """The simulator's highest per-replica rate meeting the SLO in ≥ 99 % of minutes, searched from
    ``start_rps``; 0 when not even a hundredth of it does."""
    spec = mix_spec(mix)
    model = ReplicaModel.from_spec(spec)
    base = base_trace(mix)
    engine = engine_config(spec)

    def meets(rate: float) -> bool:
        cap = calibrate(base, model, spec.slo, engine=engine, context_limit_tokens=CONTEXT, replicas=POOL,
                        duration_s=60.0 * (minutes + warmup_minutes), warmup_s=60.0 * warmup_minutes,
                        rate_rps=rate)
        return cap.minutes_meeting >= 0.99

    rate = max(start_rps, 1e-3)
    if meets(rate):
        lo, hi = rate, rate * 1.25
        while meets(hi):
            lo, hi = hi, hi * 1.25
            if hi > 100 * start_rps:
                return hi
    else:
        lo, hi = rate / 1.25, rate
        while not meets(lo):
            lo, hi = lo / 1.25, lo
            if lo < start_rps / 100:
                return 0.0
    while hi / lo > RESOLUTION:
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if meets(mid) else (lo, mid)
    return lo


def row(mix: Mix, minutes: float) -> dict[str, object]:
    """One row: the model's and the simulator's capacity, and the model's need over the simulator's."""
    t0 = time.perf_counter()
    model_rps, bound = model_capacity(mix)
    sim_rps = sim_capacity(mix, model_rps, minutes) if model_rps > 0 else 0.0
    ratio = sim_rps / model_rps if model_rps > 0 and sim_rps > 0 else (1.0 if model_rps == sim_rps else math.inf)
    return {"mix": mix, "model_rps": model_rps, "bound": bound, "sim_rps": sim_rps, "need_ratio": ratio,
            "wall_s": time.perf_counter() - t0}


def table(rows: list[dict[str, object]], command: str) -> str:
    """The Markdown table; ✗ where the model's need is more than :data:`BAND` off the simulator's."""
    out = [
        f"Command: `{command}`",
        "",
        "| prompt median | σ | output median | ITL SLO | step budget | model req/s per replica (binds) "
        "| simulator req/s per replica | model need / simulator need |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        m = r["mix"]
        assert isinstance(m, Mix)
        ratio = float(r["need_ratio"])  # type: ignore[arg-type]
        mark = "" if abs(ratio - 1.0) <= BAND else " ✗"
        out.append(
            f"| {m.prompt:,.0f} | {m.sigma:g} | {m.output:,.0f} | {m.itl_s * 1e3:g} ms | {m.budget:,} | "
            f"{float(r['model_rps']):.3f} ({r['bound']}) | {float(r['sim_rps']):.3f} | {ratio:.2f}{mark} |"  # type: ignore[arg-type]
        )
    inside = sum(1 for r in rows if abs(float(str(r["need_ratio"])) - 1.0) <= BAND)
    out.append("")
    out.append(f"{inside} of {len(rows)} mixes within ±{BAND:.0%}.")
    return "\n".join(out) + "\n"


def _floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--prompts", default="100,1000,8000")
    ap.add_argument("--sigmas", default="0.3,1.5")
    ap.add_argument("--outputs", default="1000,4000")
    ap.add_argument("--itls", default="0.03,0.2")
    ap.add_argument("--budgets", default="512,8192")
    ap.add_argument("--minutes", type=float, default=15.0, help="measured minutes of each probe")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    if args.quick:
        mixes = [Mix(1000, 0.3, 1000, 0.2, 8192), Mix(100, 1.5, 1000, 0.03, 512)]
        minutes = 4.0
    else:
        mixes = [Mix(p, s, o, i, int(b)) for p, s, o, i, b in itertools.product(
            _floats(args.prompts), _floats(args.sigmas), _floats(args.outputs), _floats(args.itls),
            _floats(args.budgets))]
        minutes = args.minutes
    rows = []
    for mix in mixes:
        r = row(mix, minutes)
        print(f"{mix.key}: model {float(r['model_rps']):.3f}, sim {float(r['sim_rps']):.3f}, "  # type: ignore[arg-type]
              f"need ratio {float(r['need_ratio']):.2f} ({float(r['wall_s']):.0f} s)", file=sys.stderr)  # type: ignore[arg-type]
        rows.append(r)
    command = "benchmarks/model_map.py " + " ".join(argv if argv is not None else sys.argv[1:])
    print(table(rows, command.strip()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
