"""What giving probes up saves the simulator's capacity search (``llmscale.sim.calibrate``).

For each spec, the capacity curve (``calibrate_sizes``: a bisection in rate at each fleet size) is
searched twice in this process, once giving a probe up as soon as its final minutes already miss the
target and once running every probe to its end; prints the seconds of each, their ratio, and
whether the two curves are the same (they must be: the script exits 1 when they are not).

    .venv/bin/python benchmarks/calibration_search.py

About five and a half minutes on an idle core with the defaults (the four bundled specs, fleet sizes
1, 2, 4, 8).
The trace: Azure LLM inference trace 2023 (CC-BY 4.0; Patel et al., Splitwise, ISCA 2024).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import yaml

from llmscale.api import LLMDeployment
from llmscale.data import trace_path
from llmscale.model.roofline import ReplicaModel
from llmscale.sim.calibrate import CURVE_SIZES, calibrate_sizes
from llmscale.sim.engine_args import engine_config
from llmscale.sim.trace import load_azure_csv

HERE = Path(__file__).resolve().parent
SPECS = ("chat-llama-8b-h100.yaml", "chat-llama-70b-h100.yaml", "long-context-llama-8b-h100.yaml",
         "long-context-llama-70b-h100x8.yaml")


def main(argv: list[str] | None = None) -> int:
    """Run the comparison; return 0, or 1 when a curve differs between the two searches."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--specs", default=",".join(SPECS), help="spec files in benchmarks/, comma-separated")
    ap.add_argument("--sizes", default=",".join(map(str, CURVE_SIZES)), help="fleet sizes, comma-separated")
    ap.add_argument("--duration", type=float, default=1800.0, help="seconds each probe replays (default 1800)")
    args = ap.parse_args(argv)
    sizes = tuple(int(s) for s in args.sizes.split(","))
    base = load_azure_csv(trace_path("azure-llm-2023-conv"))
    print(f"{'spec':<38} {'given up':>9} {'whole':>9} {'ratio':>6}  same curve")
    total = {True: 0.0, False: 0.0}
    same_all = True
    for name in args.specs.split(","):
        spec = LLMDeployment.model_validate(yaml.safe_load((HERE / name).read_text())).spec
        model = ReplicaModel.from_spec(spec)
        curves, seconds = {}, {}
        for early in (True, False):
            started = time.perf_counter()
            curves[early] = calibrate_sizes(
                base, model, spec.slo, sizes=sizes, engine=engine_config(spec),
                context_limit_tokens=spec.model.context_limit_tokens, duration_s=args.duration, give_up_early=early,
            )
            seconds[early] = time.perf_counter() - started
            total[early] += seconds[early]
        same = curves[True] == curves[False]
        same_all &= same
        print(f"{name:<38} {_row(seconds)}  {'yes' if same else 'NO'}", flush=True)
    print(f"{'all':<38} {_row(total)}")
    return 0 if same_all else 1


def _row(seconds: dict[bool, float]) -> str:
    """Seconds given up, whole, and their ratio, as table cells."""
    return f"{seconds[True]:>8.1f}s {seconds[False]:>8.1f}s {seconds[True] / seconds[False]:>6.2f}"


if __name__ == "__main__":
    raise SystemExit(main())
