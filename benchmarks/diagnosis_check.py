"""Diagnoses that hold when applied (issue 27, item 6): the prefill-interference remedy, run in the simulator.

For each case — Llama-3.1-8B on one H100-SXM, long prompts (log-normal, median and σ given), 300-token
answers (σ 0.5), an ITL p95 SLO and the ``--max-num-batched-tokens`` in force — at a rate that needs
about :data:`POOL` replicas, the ``Diagnosis`` condition's numbers
(:func:`llmscale.policy.diagnosis.budget_remedy`, what ``PrefillInterference`` says) are applied in
the simulator:

- **applied**: a static pool of the replicas the model says the SLO needs *with* the recommended
  budget, running that budget: the share of minutes whose ITL p95 meets the SLO it was recommended
  for, and of minutes meeting both p95s;
- **with / without**: the fewest replicas of a static pool meeting both p95s in ≥ 99 % of the
  minutes, searched in the simulator with the recommended budget and with the one in force,
  against the model's "the SLO needs N replicas with it, M without". Goal: within 15 %.

Usage (from the repository root)::

    nice .venv/bin/python benchmarks/diagnosis_check.py [--minutes 15]

``--quick`` checks one case with short runs (what the test runs), not a result.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import dataclass

import numpy as np

from llmscale.api import LLMDeploymentSpec
from llmscale.model import ReplicaModel
from llmscale.model.capacity import Burstiness, LengthDistribution, WorkloadShape, capacity_per_replica
from llmscale.policy.diagnosis import BudgetRemedy, budget_remedy
from llmscale.policy.load import capacity_context
from llmscale.sim.engine_args import engine_config
from llmscale.sim.fleet import FleetConfig, Observation, ScaleDecision, simulate
from llmscale.sim.report import minute_scores
from llmscale.sim.trace import Trace, synthesize

#: The pool the rate is chosen for: the model's replicas without the remedy, about 16 (15 % of it is 2 replicas).
POOL = 16
#: Largest relative difference of the model's replicas from the simulator's that passes: 15 %.
BAND = 0.15
OUTPUT_MEDIAN = 300.0
OUTPUT_SIGMA = 0.5
CONTEXT = 32_768
TTFT_S = 5.0
START = 1_700_006_400.0  # 2023-11-15 00:00 UTC


@dataclass(frozen=True)
class Case:
    prompt: float
    sigma: float
    itl_s: float
    budget: int

    @property
    def key(self) -> str:
        return f"p{self.prompt:g}/σ{self.sigma:g}/itl{self.itl_s * 1e3:g}ms/b{self.budget}"


CASES: tuple[Case, ...] = (
    Case(4000, 1.0, 0.03, 8192),
    Case(4000, 1.0, 0.05, 16384),
    Case(8000, 0.5, 0.03, 16384),
    Case(2000, 1.0, 0.025, 8192),
)


def case_spec(case: Case, budget: int | None = None) -> LLMDeploymentSpec:
    return LLMDeploymentSpec.model_validate({
        "model": {"name": "m", "preset": "llama-3.1-8b", "contextLimitTokens": CONTEXT},
        "engine": {"type": "vllm", "args": ["--max-num-batched-tokens", str(budget or case.budget)]},
        "resources": {"gpuType": "h100-sxm", "gpusPerReplica": 1},
        "replicas": {"min": 1, "max": 200},
        "slo": {"ttftP95Seconds": TTFT_S, "itlP95Seconds": case.itl_s},
    })


def case_shape(case: Case) -> WorkloadShape:
    return WorkloadShape(LengthDistribution(case.prompt, case.sigma),
                         LengthDistribution(OUTPUT_MEDIAN, OUTPUT_SIGMA), 0.0, "diagnosis check")


def base_trace(case: Case, n: int = 4000, seed: int = 0) -> Trace:
    rng = np.random.default_rng(seed)
    outputs = np.clip(rng.lognormal(math.log(OUTPUT_MEDIAN), OUTPUT_SIGMA, n), 1, 4096).astype(np.int64)
    prompts = np.clip(rng.lognormal(math.log(case.prompt), case.sigma, n), 1, CONTEXT - outputs - 1).astype(np.int64)
    t = START + np.cumsum(rng.exponential(1.0, n))
    return Trace(t, prompts, outputs, np.zeros(n, np.bool_), START, float(t[-1] - START) + 1.0,
                 source=f"Poisson, {case.key}")


def _flat(seconds_of_day: np.ndarray) -> np.ndarray:
    return np.ones_like(np.asarray(seconds_of_day, dtype=np.float64))


def _probe(case: Case, budget: int, rate: float, replicas: int, minutes: float) -> tuple[float, float]:
    """(share of minutes meeting both p95s, share meeting the ITL p95) of a static pool of
    ``replicas`` running ``budget`` at ``rate`` requests/s (as :func:`llmscale.sim.calibrate.calibrate`
    probes: a flat Poisson load, least-outstanding routing, the first 3 minutes not judged)."""
    spec = case_spec(case, budget)
    warm = 3.0
    trace = synthesize(base_trace(case), duration_s=60.0 * (minutes + warm), peak_rps=rate, envelope=_flat, seed=0)
    fleet = FleetConfig(initial_replicas=replicas, min_replicas=replicas, max_replicas=replicas, drain_cap_s=600)
    res = simulate(trace, _Static(replicas), ReplicaModel.from_spec(spec), engine=engine_config(spec), fleet=fleet,
                   context_limit_tokens=CONTEXT, itl_slo_s=case.itl_s)
    meets, _, i95, _ = minute_scores(res, spec.slo, 60.0 * warm)
    itl_ok = ~(i95 > case.itl_s)
    return float(meets.mean()), float(itl_ok.mean())


class _Static:
    """A fixed pool."""

    name = "static"
    tick_s = 15.0

    def __init__(self, replicas: int) -> None:
        self.replicas = replicas

    def decide(self, obs: Observation) -> ScaleDecision:
        return ScaleDecision(self.replicas)


def sim_need(case: Case, budget: int, rate: float, start: int, minutes: float, most: int = 64) -> int | None:
    """The fewest replicas of a static pool meeting both p95s in ≥ 99 % of minutes, searched from
    ``start``; ``None`` when not even ``most`` do."""
    def ok(n: int) -> bool:
        return _probe(case, budget, rate, n, minutes)[0] >= 0.99

    n = max(start, 1)
    if ok(n):
        while n > 1 and ok(n - 1):
            n -= 1
        return n
    while n < most:
        n += 1
        if ok(n):
            return n
    return None


def check(case: Case, minutes: float) -> dict[str, object]:
    """The model's remedy and what the simulator finds of it."""
    t0 = time.perf_counter()
    spec = case_spec(case)
    cap = capacity_context(spec, case_shape(case), True, Burstiness(), 1.0)
    assert cap is not None
    per, _, _ = capacity_per_replica(cap.model, cap.shape, cap.limits, case.itl_s, TTFT_S, replicas=POOL)
    rate = per * POOL * 0.9
    r = budget_remedy(cap, case.itl_s, rate)
    row: dict[str, object] = {"case": case, "rate": rate, "remedy": r}
    if r.best <= 0 or r.with_replicas is None or r.without_replicas is None:
        row.update(applied=None, applied_itl=None, sim_with=None, sim_without=None)
    else:
        applied, applied_itl = _probe(case, r.best, rate, r.with_replicas, minutes)
        row.update(applied=applied, applied_itl=applied_itl,
                   sim_with=sim_need(case, r.best, rate, r.with_replicas, minutes),
                   sim_without=sim_need(case, case.budget, rate, r.without_replicas, minutes))
    row["wall_s"] = time.perf_counter() - t0
    return row


def _off(model: int | None, sim: object) -> float:
    if model is None or not isinstance(sim, int):
        return math.inf
    return abs(model - sim) / sim


def table(rows: list[dict[str, object]], command: str) -> str:
    out = [
        f"Command: `{command}`",
        "",
        "| case | rate (req/s) | full step at the budget in force | recommended budget | applied: minutes ITL p95 ≤ SLO (both p95s) "
        "| replicas with it: model / simulator | without: model / simulator |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in rows:
        c, r = row["case"], row["remedy"]
        assert isinstance(c, Case)
        assert isinstance(r, BudgetRemedy)
        applied, applied_itl = row["applied"], row["applied_itl"]
        a_text = "—" if applied is None else (
            f"{float(applied_itl):.1%}{'' if float(applied_itl) >= 0.99 else ' ✗'} ({float(applied):.1%})"  # type: ignore[arg-type]
        )
        w_off, wo_off = _off(r.with_replicas, row["sim_with"]), _off(r.without_replicas, row["sim_without"])
        out.append(
            f"| {c.key} | {float(row['rate']):.2f} | {r.step_s * 1e3:.0f} ms | {r.best:,} | {a_text} | "  # type: ignore[arg-type]
            f"{r.with_replicas} / {row['sim_with']}{'' if w_off <= BAND else ' ✗'} | "
            f"{r.without_replicas} / {row['sim_without']}{'' if wo_off <= BAND else ' ✗'} |"
        )
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--minutes", type=float, default=15.0, help="measured minutes of each run")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    cases, minutes = (CASES[:1], 3.0) if args.quick else (CASES, args.minutes)
    rows = []
    for case in cases:
        row = check(case, minutes)
        print(f"{case.key}: {row}", file=sys.stderr)
        rows.append(row)
    command = "benchmarks/diagnosis_check.py " + " ".join(argv if argv is not None else sys.argv[1:])
    print(table(rows, command.strip()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
