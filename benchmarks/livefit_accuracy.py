"""How far the live calibration reads from the engine it measures: the simulator's engine made
deliberately unlike the model, a pool held at a few steady loads, every judged minute folded as
the operator folds it (``llmscale.policy.livefit.advance``), then the capacity note of the fit
against the engine's own.

Each case is an engine whose compute or bandwidth efficiency, or per-step overhead, differs from
the model's (``llmscale.sim.skew.SkewedCost``, as in ``benchmarks/robustness.py``). The figures
compared are the ones the ``EngineCalibrated`` condition reports and the policy sizes with: the ITL
of one sequence and of ``max-num-seqs`` sequences at 1,024 tokens of context, and the prefill rate in
budget-sized chunks, each as a multiple of the model's (× > 1: faster). Truth is the model with the
engine's efficiencies, which is what ``SkewedCost`` runs.

    .venv/bin/python benchmarks/livefit_accuracy.py [--cases model,compute-x0.5] [--replicas 3]

Prints one row per case and the mean and largest error (``|ln(fit / truth)|``), and how many
figures are within 10 %. The trace: Azure LLM inference trace 2023 (CC-BY 4.0; Patel et al.,
Splitwise, ISCA 2024), lengths and timing reshaped to each rate.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import yaml

from llmscale.api import LLMDeployment, LLMDeploymentSpec
from llmscale.data import trace_path
from llmscale.model import ReplicaModel
from llmscale.policy import livefit
from llmscale.signals.minute import MinuteSample
from llmscale.sim.engine_args import engine_config
from llmscale.sim.fleet import FleetConfig, Observation, ScaleDecision, simulate
from llmscale.sim.skew import SkewedCost
from llmscale.sim.trace import Trace, load_azure_csv, synthesize

SPEC_FILE = Path(__file__).resolve().parent / "chat-llama-8b-h100.yaml"
START = 1_717_200_000.0  # a Saturday 00:00 UTC; any start does


@dataclass(frozen=True)
class Case:
    """An engine unlike the model: efficiencies relative to the model's, an overhead it lacks."""

    key: str
    compute: float = 1.0
    bandwidth: float = 1.0
    overhead_s: float = 0.0


CASES: tuple[Case, ...] = (
    Case("model"),
    Case("compute-x0.3", compute=0.3),
    Case("compute-x0.5", compute=0.5),
    Case("compute-x2", compute=2.0),
    Case("bandwidth-x0.3", bandwidth=0.3),
    Case("bandwidth-x0.5", bandwidth=0.5),
    Case("bandwidth-x1.2", bandwidth=1.2),
    Case("overhead-5ms", overhead_s=0.005),
)


class _Hold:
    """Holds the pool at ``replicas`` and keeps every judged minute the fleet hands it."""

    name = "hold"
    tick_s = 15.0

    def __init__(self, replicas: int) -> None:
        self.replicas = replicas
        self.minutes: dict[float, MinuteSample] = {}

    def decide(self, obs: Observation) -> ScaleDecision:
        for m in obs.minutes:
            self.minutes[m.end_s] = m
        return ScaleDecision(self.replicas, None)


def truth_of(model: ReplicaModel, case: Case) -> ReplicaModel:
    """The model :class:`SkewedCost` runs for ``case``.

    Raises:
        ValueError: an efficiency beyond the datasheet (above 1).
    """
    bw, comp = model.bandwidth_efficiency * case.bandwidth, model.compute_efficiency * case.compute
    if bw > 1.0 or comp > 1.0:
        raise ValueError(f"{case.key}: an efficiency above the datasheet ({bw:.2f}, {comp:.2f})")
    return model.with_changes(bandwidth_efficiency=bw, compute_efficiency=comp,
                              step_overhead_s=model.step_overhead_s + case.overhead_s)


def measure(case: Case, spec: LLMDeploymentSpec, base: Trace, replicas: int, rates: list[float],
            minutes: int) -> dict[str, float]:
    """Fold ``case``'s engine's minutes at each rate and compare the fit with the truth; returns
    the figures as multiples of the model's (``fit_*``, ``truth_*``), the fit's rms error and
    whether the policy would use it."""
    model = ReplicaModel.from_spec(spec)
    engine = SkewedCost(model, case.compute, case.bandwidth, case.overhead_s)
    samples: list[MinuteSample] = []
    for k, rate in enumerate(rates):
        trace = synthesize(base, duration_s=60.0 * minutes, peak_rps=rate, envelope=lambda s: np.ones_like(s),
                           seed=k, start_s=START)
        hold = _Hold(replicas)
        simulate(trace, hold, engine, engine=engine_config(spec),
                 fleet=FleetConfig(initial_replicas=replicas, min_replicas=replicas, max_replicas=replicas),
                 context_limit_tokens=spec.model.context_limit_tokens)
        # The first two minutes fill the pool; the rest are steady.
        samples += [m for t, m in sorted(hold.minutes.items()) if t - trace.start_s > 120.0]
    record = None
    for i, m in enumerate(samples):  # one minute after the other, as the operator folds them
        record = livefit.advance(record, spec, 0, [replace(m, end_s=START + 60.0 * (i + 1))], START + 60.0 * (i + 1))
    cal = livefit.calibrate(spec, record) if record is not None else None
    if cal is None:
        raise RuntimeError(f"{case.key}: no calibration from {len(samples)} minutes")
    prior, fit, true = cal.prior_note, cal.note, livefit.capacity_note(truth_of(model, case), spec)
    return {
        "fit_itl1": prior.itl_batch1_s / fit.itl_batch1_s, "truth_itl1": prior.itl_batch1_s / true.itl_batch1_s,
        "fit_itlfull": prior.itl_full_s / fit.itl_full_s, "truth_itlfull": prior.itl_full_s / true.itl_full_s,
        "fit_prefill": fit.prefill_tok_s / prior.prefill_tok_s, "truth_prefill": true.prefill_tok_s / prior.prefill_tok_s,
        "rms": cal.fit.rms_relative_error, "used": float(cal.used), "minutes": float(cal.minutes),
    }


FIGURES = ("itl1", "itlfull", "prefill")


def errors(row: dict[str, float]) -> list[float]:
    """``|ln(fit / truth)|`` of each figure of a row."""
    return [abs(math.log(row[f"fit_{f}"] / row[f"truth_{f}"])) for f in FIGURES]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--cases", default=",".join(c.key for c in CASES))
    ap.add_argument("--replicas", type=int, default=3)
    ap.add_argument("--rates", default="4,8,12", help="comma-separated steady loads, requests/s")
    ap.add_argument("--minutes", type=int, default=12, help="minutes simulated at each rate")
    args = ap.parse_args(argv)
    by_key = {c.key: c for c in CASES}
    keys = [k for k in args.cases.split(",") if k]
    unknown = [k for k in keys if k not in by_key]
    if unknown:
        print(f"Unknown cases {', '.join(unknown)}; known: {', '.join(by_key)}", file=sys.stderr)
        return 2
    rates = [float(r) for r in args.rates.split(",") if r]
    if not rates or any(not (math.isfinite(r) and r > 0) for r in rates) or args.replicas < 1 or args.minutes < 4:
        print("--rates must be positive, --replicas at least 1, --minutes at least 4", file=sys.stderr)
        return 2
    spec = LLMDeployment.model_validate(yaml.safe_load(SPEC_FILE.read_text(encoding="utf-8"))).spec
    base = load_azure_csv(trace_path("azure-llm-2023-conv"))
    print("| engine | ITL at batch 1: fit / truth | ITL at max-num-seqs | prefill tok/s | rms error | used |")
    print("| --- | --- | --- | --- | --- | --- |")
    all_errors: list[float] = []
    t0 = time.perf_counter()
    for key in keys:
        row = measure(by_key[key], spec, base, args.replicas, rates, args.minutes)
        all_errors += errors(row)
        cells = " | ".join(f"×{row[f'fit_{f}']:.2f} / ×{row[f'truth_{f}']:.2f}" for f in FIGURES)
        print(f"| {key} | {cells} | {row['rms']:.1%} | {'yes' if row['used'] else 'no'} |", flush=True)
    within = sum(1 for e in all_errors if e <= math.log(1.1))
    print(f"\nerror |ln(fit/truth)|: mean {float(np.mean(all_errors)):.3f}, largest {max(all_errors):.3f}; "
          f"{within} of {len(all_errors)} figures within 10 % ({time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
