"""``llmscale demo``: the end-to-end demo on the local cluster (see :mod:`llmscale.demo`, docs/demo.md)."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from llmscale.commands.output import add_output_argument, write_document

__all__ = ["add_arguments", "main"]


def _positive(text: str) -> float:
    """An argparse ``type``: a number above zero (checked before anything starts)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r}: must be > 0")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the demo's flags to ``parser``."""
    parser.add_argument("--minutes", type=_positive, default=7.0,
                        help="wall minutes one compressed day of traffic lasts (default 7)")
    parser.add_argument("--peak-rps", type=_positive, default=2.0,
                        help="requests per wall second at the daily peak (default 2: what 2 CPU cores carry)")
    parser.add_argument("--trace", default=None, metavar="PATH|NAME",
                        help="trace CSV in the Azure LLM inference trace format, or a bundled trace's name "
                             "(default azure-llm-2023-conv: the Azure LLM inference trace 2023, CC-BY 4.0, "
                             "shipped with llmscale)")
    parser.add_argument("--out", type=Path, default=Path("out"),
                        help="folder for demo-compare.png, demo.png and demo-summary.json, relative to the repository "
                             "(default out)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the trace's time rescaling (default 0)")
    add_output_argument(parser, ("json", "yaml"), "json")


def main(args: argparse.Namespace) -> int:
    """Run the demo; print the summary (``-o json`` or ``yaml``). Returns 0; 2 when the trace cannot
    be read (checked before anything starts); 1 when the demo could not run (no checkout, a part of
    the stack that failed)."""
    import importlib.util

    if importlib.util.find_spec("matplotlib") is None:
        print("llmscale demo: error: the demo plots with matplotlib: pip install 'llmscale[plot]' "
              "(make install does)", file=sys.stderr)
        return 2
    from llmscale.demo import DemoConfig, DemoError, DemoInputError, run_demo

    cfg = DemoConfig(minutes=args.minutes, peak_rps=args.peak_rps, trace=args.trace, out_dir=args.out,
                     seed=args.seed)
    try:
        summary = run_demo(cfg)
    except DemoInputError as exc:
        print(f"llmscale demo: error: {exc}", file=sys.stderr)
        return 2
    except DemoError as exc:
        print(f"llmscale demo: {exc}", file=sys.stderr)
        return 1
    except subprocess.CalledProcessError as exc:
        print(f"llmscale demo: {' '.join(map(str, exc.cmd))} failed with exit status {exc.returncode}",
              file=sys.stderr)
        return 1
    write_document(summary, args.output)
    print(f"llmscale demo: wrote {cfg.out_dir}/demo-compare.png, {cfg.out_dir}/demo.png and "
          f"{cfg.out_dir}/demo-summary.json", file=sys.stderr)
    return 0
