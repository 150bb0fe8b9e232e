"""What the policy costs a tick: :func:`llmscale.policy.decide` and the live calibration's refit
(:func:`llmscale.policy.livefit.calibrate`), timed on the calls a simulated day makes.

For each case (a bundled spec, a diurnal stretch of the Azure conversation trace at a peak rate,
and optionally an engine faster than the model so that the live fit is taken) the simulator runs
llmscale once, keeping every call's arguments; then the calls are replayed in this process
``--repeat`` times and timed (the simulator's own time is not counted). Prints per case the ticks,
the mean milliseconds of ``decide`` a tick, the refits and their mean milliseconds, the policy's
share of a core at 1,000 LLMDeployments ticking every 15 s, and a digest of every decision's
replicas and reasons (and every refit's efficiencies), with whether it is the digest of what the
run itself was answered: the policy is a pure function of its arguments, so a replay must answer
the same (the script exits 1 when it does not). A change meant to make the policy faster and
nothing else must leave the digests as they were: run the script on the tree before and after it
(e.g. the commit before in a ``git worktree``) on the same machine — the digests are not a constant
to keep, since numpy's BLAS may round a least-squares solve differently on another CPU.

    .venv/bin/python benchmarks/policy_cost.py [--hours 4] [--repeat 2] [--cases all]

About a minute with the defaults on an idle core. The trace: Azure LLM inference trace 2023
(CC-BY 4.0; Patel et al., Splitwise, ISCA 2024).
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

import llmscale.policy as policy
from llmscale.api import LLMDeployment
from llmscale.data import trace_path
from llmscale.policy import livefit
from llmscale.sim.baselines import LlmscalePolicy
from llmscale.sim.runner import Scenario, run_autoscaler
from llmscale.sim.skew import SkewedCost
from llmscale.sim.trace import DiurnalEnvelope, load_azure_csv, synthesize

HERE = Path(__file__).resolve().parent

#: key: (spec file, peak requests/s, compute efficiency of the simulated engine against the model's).
CASES: dict[str, tuple[str, float, float]] = {
    "chat-8b": ("chat-llama-8b-h100.yaml", 20.0, 1.0),
    "chat-70b-batch": ("chat-llama-70b-h100-batch.yaml", 20.0, 1.0),
    "long-context-8b": ("long-context-llama-8b-h100.yaml", 3.0, 1.0),
    "chat-8b-engine-x2": ("chat-llama-8b-h100.yaml", 20.0, 2.0),
}

#: The operator's scale benchmark: 1,000 LLMDeployments ticking every 15 s.
FLEET, TICK_S = 1000, 15.0


@dataclasses.dataclass
class Recorded:
    """One case's calls: ``decide``'s and ``calibrate``'s positional arguments, in order, and the
    digest of what they answered in the run (:func:`digest_of`)."""

    decides: list[tuple[Any, ...]] = dataclasses.field(default_factory=list)
    refits: list[tuple[Any, ...]] = dataclasses.field(default_factory=list)
    answers: dict[str, list[str]] = dataclasses.field(default_factory=lambda: {"decide": [], "refit": []})

    @property
    def digest(self) -> str:
        """The digest of the run's answers, ``decide``'s then the refits'."""
        return digest_of(self.answers["decide"] + self.answers["refit"])


def answer_of(value: Any) -> str:
    """What a digest keeps of a ``decide`` answer (the whole :class:`~llmscale.policy.Decision`:
    replicas, reasons, the memory carried) or a refit (the fitted efficiencies and whether the
    policy uses them; ``None`` when no fit was possible)."""
    if isinstance(value, policy.Decision):
        return repr(value)  # every field, the policy memory's floats to the last digit
    if value is None:
        return "None"
    f = value.fit
    return repr((f.bandwidth_efficiency, f.compute_efficiency, f.step_overhead_s, f.seq_overhead_s,
                 f.attention_efficiency, f.request_overhead_s, value.used))


def digest_of(answers: list[str]) -> str:
    """The first 12 hex digits of the SHA-256 of ``answers`` in order."""
    h = hashlib.sha256()
    for a in answers:
        h.update(a.encode())
    return h.hexdigest()[:12]


def record(spec_file: str, peak_rps: float, compute: float, hours: float) -> Recorded:
    """Run llmscale over ``hours`` of a diurnal day (its peak at the middle) and keep its calls."""
    spec = LLMDeployment.model_validate(yaml.safe_load((HERE / spec_file).read_text(encoding="utf-8"))).spec
    base = load_azure_csv(trace_path("azure-llm-2023-conv"))
    duration = 3600.0 * hours
    # The stretch of the day around its 15:00 peak (mornings and evenings: the rate moves).
    trace = synthesize(base, duration_s=duration, peak_rps=peak_rps, envelope=DiurnalEnvelope(15, 0.25),
                       start_s=15 * 3600.0 - duration / 2)
    sc = Scenario.build(spec, trace, base, capacity_rps=peak_rps / 4)
    if compute != 1.0:
        sc = dataclasses.replace(sc, model=SkewedCost(sc.model, compute=compute))
    out = Recorded()
    decide, calibrate = policy.decide, livefit.calibrate

    def kept(kind: str, calls: list[tuple[Any, ...]], fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any) -> Any:
            calls.append(args)
            answer = fn(*args)
            out.answers[kind].append(answer_of(answer))
            return answer
        return wrapper

    policy.decide = kept("decide", out.decides, decide)  # type: ignore[assignment]
    livefit.calibrate = kept("refit", out.refits, calibrate)  # type: ignore[assignment]
    try:
        run_autoscaler(LlmscalePolicy(spec), sc)
    finally:
        policy.decide, livefit.calibrate = decide, calibrate  # type: ignore[assignment]
    return out


def replay(rec: Recorded, repeat: int) -> tuple[float, float, str]:
    """Replay ``rec``'s calls once for their answers (:attr:`Recorded.digest`'s order), then
    ``repeat`` times timed; return the mean seconds of a ``decide`` and of a refit, and the digest."""
    answers: list[str] = []
    seconds = []
    for calls, fn in ((rec.decides, policy.decide), (rec.refits, livefit.calibrate)):
        answers += [answer_of(fn(*args)) for args in calls]
        started = time.perf_counter()
        for _ in range(repeat):
            for args in calls:
                fn(*args)
        seconds.append((time.perf_counter() - started) / repeat / max(len(calls), 1))
    return seconds[0], seconds[1], digest_of(answers)


def main(argv: list[str] | None = None) -> int:
    """Run the cases and print the table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default="all", help=f"comma-separated, of: {', '.join(CASES)} (default all)")
    ap.add_argument("--hours", type=float, default=4.0, help="simulated hours per case (default 4)")
    ap.add_argument("--repeat", type=int, default=2, help="replays of the recorded calls (default 2)")
    args = ap.parse_args(argv)
    keys = list(CASES) if args.cases == "all" else args.cases.split(",")
    unknown = [k for k in keys if k not in CASES]
    if unknown:
        ap.error(f"unknown case(s) {', '.join(unknown)}; known: {', '.join(CASES)}")
    if args.hours <= 0 or args.repeat < 1:
        ap.error("--hours must be > 0 and --repeat ≥ 1")
    print(f"{'case':<20} {'ticks':>6} {'decide ms':>10} {'refits':>7} {'refit ms':>9} {'ms a tick':>10} "
          f"{'core at 1,000':>14}  digest        as in the run")
    pure = True
    for key in keys:
        rec = record(*CASES[key], args.hours)
        decide_s, refit_s, digest = replay(rec, args.repeat)
        per_tick = decide_s + refit_s * len(rec.refits) / max(len(rec.decides), 1)
        same = digest == rec.digest
        pure &= same
        print(f"{key:<20} {len(rec.decides):>6} {decide_s * 1e3:>10.3f} {len(rec.refits):>7} {refit_s * 1e3:>9.2f} "
              f"{per_tick * 1e3:>10.3f} {per_tick * FLEET / TICK_S:>13.0%}  {digest}  "
              f"{'yes' if same else 'NO: ' + rec.digest}", flush=True)
    return 0 if pure else 1


if __name__ == "__main__":
    raise SystemExit(main())
