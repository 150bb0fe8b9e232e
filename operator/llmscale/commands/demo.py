"""``llmscale demo``: the end-to-end demo on the local cluster (see :mod:`llmscale.demo`, docs/demo.md)."""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path

__all__ = ["add_arguments", "main"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the demo's flags to ``parser``."""
    parser.add_argument("--minutes", type=float, default=7.0,
                        help="wall minutes one compressed day of traffic lasts (default 7)")
    parser.add_argument("--peak-rps", type=float, default=2.0,
                        help="requests per wall second at the daily peak (default 2: what 2 CPU cores carry)")
    parser.add_argument("--trace", default=None, metavar="PATH|NAME",
                        help="trace CSV in the Azure LLM inference trace format, or a bundled trace's name "
                             "(default azure-llm-2023-conv: the Azure LLM inference trace 2023, CC-BY 4.0, "
                             "shipped with llmscale)")
    parser.add_argument("--out", type=Path, default=Path("out"),
                        help="folder for demo.png and demo-summary.json, relative to the repository (default out)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the trace's time rescaling (default 0)")


def main(args: argparse.Namespace) -> int:
    """Run the demo; print the summary. Returns 0, or 1 when the demo could not run."""
    from llmscale.demo import DemoConfig, DemoError, run_demo

    cfg = DemoConfig(minutes=args.minutes, peak_rps=args.peak_rps, trace=args.trace, out_dir=args.out,
                     seed=args.seed)
    try:
        summary = run_demo(cfg)
    except DemoError as exc:
        print(f"llmscale demo: {exc}")
        return 1
    except subprocess.CalledProcessError as exc:
        print(f"llmscale demo: {' '.join(map(str, exc.cmd))} failed with exit status {exc.returncode}")
        return 1
    print(json.dumps(summary, indent=2))
    print(f"llmscale demo: wrote {cfg.out_dir}/demo.png and {cfg.out_dir}/demo-summary.json")
    return 0
