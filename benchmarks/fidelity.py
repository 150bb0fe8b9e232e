"""Model fidelity: the roofline before and after calibration, and the simulator, against a live engine.

Runs ``llmscale calibrate`` on the engine at ``--url`` (every other argument is passed through:
the model, the hardware, the sweeps and the fixed rates) and prints, as Markdown, each fixed-rate
point's ITL and TTFT p95 four ways: measured on the engine, predicted by the capacity model with
the planning efficiencies (before), with the calibrated ones (after), and by the simulator running
the calibrated model on the very requests the point sent. The rate points are out of sample: the
fit saw only the lone prompts and the closed-loop decode sweeps. The last line says whether the
calibrated model is within ``--target`` (15 %) of the engine at every point; ``--rates-only``
prints the rate points and that line alone (the README's table).

Usage (the run in docs/benchmarks.md, real vLLM on the CPU with the tiny local model):
``.venv/bin/python benchmarks/fidelity.py --url http://127.0.0.1:8000 --config MODEL/config.json
--accelerator name=cpu-2core-xeon,memory=8589934592,bandwidth=21.8e9,flops=662e9
--max-num-batched-tokens 2048 --max-num-seqs 128 --rates 1,2,3,4``; ``--from-json FILE`` formats a
saved ``llmscale calibrate -o json`` document instead of measuring.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any


def _ms(x: float | None) -> str:
    return "—" if x is None else f"{x:,.1f}"


def _err(x: float | None) -> str:
    return "" if x is None else f" ({x:+.0%})"


def _spread(doc: dict[str, Any]) -> str:
    pts = [r for _, r in doc.get("itl_spread") or [] if r is not None]
    if not pts:
        return ""
    return f"; ITL p95 / p50 of a steady batch {min(pts):.2f}–{max(pts):.2f} (the model's ITL p95 are its steps times it)"


def _rate_rows(doc: dict[str, Any], target: float) -> tuple[list[str], str]:
    """The header line and the rate points' table, and the verdict line."""
    f = doc["fit"]
    lines = [
        f"Engine: {doc['model']} at {doc['url']} on {doc['accelerator']}. Fit: bandwidth efficiency "
        f"{f['bandwidth_efficiency']}, compute efficiency {f['compute_efficiency']}, per-step overhead "
        f"{f['step_overhead_s'] * 1e3:.3f} ms, per-sequence overhead {f['seq_overhead_s'] * 1e3:.4f} ms, attention efficiency "
        f"{f.get('attention_efficiency') or 'not needed'}, per-request overhead "
        f"{(f.get('request_overhead_s') or 0.0) * 1e3:.2f} ms (rms error {f['rms_relative_error']:.1%} over {f['observations']} "
        f"fitted points){_spread(doc)}.",
        "",
        "| load point | figure | real engine (ms) | roofline before (ms) | roofline after (ms) | simulator after (ms) |",
        "| --- | --- | ---: | ---: | ---: | ---: |",
    ]
    worst_after: float = 0.0
    worst_sim: float = 0.0
    compared = 0
    for fig in doc["figures"]:
        if fig["fitted"] or " p95 at " not in fig["name"]:
            continue
        kind, _, rest = fig["name"].partition(" p95 at ")
        lines.append(
            f"| {rest} | {kind} p95 | {_ms(fig['measured'])} | {_ms(fig['roofline'])}{_err(fig['roofline_error'])} "
            f"| {_ms(fig['calibrated'])}{_err(fig['calibrated_error'])} | {_ms(fig['simulated'])}{_err(fig['simulated_error'])} |"
        )
        if fig["calibrated_error"] is not None:
            compared += 1
            worst_after = max(worst_after, abs(fig["calibrated_error"]))
        if fig["simulated_error"] is not None:
            worst_sim = max(worst_sim, abs(fig["simulated_error"]))
    if not compared:
        return lines, f"No rate point was compared (a run with --no-rates, or none measured); target {target:.0%}: not judged."
    met = worst_after <= target
    verdict = (
        f"Largest error after calibration at the rate points: {worst_after:.0%} (capacity model), "
        f"{worst_sim:.0%} (simulator); target {target:.0%}: {'met' if met else 'NOT met'}."
    )
    return lines, verdict


def rate_table(doc: dict[str, Any], target: float) -> str:
    """The rate points of one ``llmscale calibrate -o json`` document, one row a rate (the engine,
    then the calibrated model and the simulator with their errors), and the verdict, as Markdown:
    the README's table."""
    _, verdict = _rate_rows(doc, target)
    rows: dict[str, dict[str, dict[str, Any]]] = {}
    for fig in doc["figures"]:
        if not fig["fitted"] and " p95 at " in fig["name"]:
            kind, _, rest = fig["name"].partition(" p95 at ")
            rows.setdefault(rest, {})[kind] = fig

    def cells(fig: dict[str, Any] | None) -> str:
        if fig is None:
            return "— | — | —"
        return (f"{_ms(fig['measured'])} | {_ms(fig['calibrated'])}{_err(fig['calibrated_error'])} "
                f"| {_ms(fig['simulated'])}{_err(fig['simulated_error'])}")

    lines = [
        "| rate | ITL p95 (ms): engine | model | simulator | TTFT p95 (ms): engine | model | simulator |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
        *(f"| {rate} | {cells(k.get('ITL'))} | {cells(k.get('TTFT'))} |" for rate, k in rows.items()),
    ]
    return "\n".join([*lines, "", verdict])


def table(doc: dict[str, Any], target: float) -> str:
    """The fidelity table of one ``llmscale calibrate -o json`` document, as Markdown: the rate
    points, then every capacity-note figure."""
    lines, verdict = _rate_rows(doc, target)
    lines += [
        "",
        "| capacity-note figure (* not fitted) | real engine | roofline before | roofline after |",
        "| --- | ---: | ---: | ---: |",
    ]
    for fig in doc["figures"]:
        if fig["fitted"] or " p95 at " not in fig["name"]:
            unit = fig["unit"]
            lines.append(
                f"| {fig['name']} ({unit}){'' if fig['fitted'] else ' *'} | {_ms(fig['measured'])} | {_ms(fig['roofline'])}{_err(fig['roofline_error'])} "
                f"| {_ms(fig['calibrated'])}{_err(fig['calibrated_error'])} |"
            )
    return "\n".join([*lines, "", verdict])


def _share(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not 0.0 < value < 1.0:
        raise argparse.ArgumentTypeError(f"a share between 0 and 1 (0.15 for 15 %), got {text!r}")
    return value


def parse(argv: list[str] | None = None) -> tuple[argparse.Namespace, list[str]]:
    """This script's own options, and the rest for ``llmscale calibrate``. No abbreviations: the
    calibration's ``--rates`` would otherwise be read as this script's ``--rates-only``."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--from-json", type=Path, default=None, help="format a saved llmscale calibrate -o json")
    parser.add_argument("--target", type=_share, default=0.15, help="largest relative error allowed, 0-1 (default 0.15)")
    parser.add_argument("--save-json", type=Path, default=None, help="also write the calibrate document here")
    parser.add_argument("--rates-only", action="store_true", help="print the rate points and the verdict only")
    return parser.parse_known_args(argv)


def main() -> int:
    args, rest = parse()
    if args.from_json is not None:
        if rest or args.save_json is not None:
            print(f"fidelity.py: error: --from-json formats a saved document; these apply to a measurement: "
                  f"{' '.join([*(['--save-json'] if args.save_json is not None else []), *rest])}", file=sys.stderr)
            return 2
        try:
            doc = json.loads(args.from_json.read_text(encoding="utf-8"))
            if not isinstance(doc, dict) or not {"fit", "figures"} <= doc.keys():
                raise ValueError("not an llmscale calibrate -o json document (no fit and figures)")
        except (OSError, ValueError) as exc:
            print(f"fidelity.py: error: --from-json {args.from_json}: {exc}", file=sys.stderr)
            return 2
    else:
        if args.save_json is not None and (args.save_json.is_dir() or not args.save_json.parent.is_dir()):
            print(f"fidelity.py: error: --save-json {args.save_json}: not a file in an existing folder", file=sys.stderr)
            return 2
        done = subprocess.run(
            [sys.executable, "-m", "llmscale.cli", "calibrate", *rest, "-o", "json"],
            stdout=subprocess.PIPE, text=True, check=False,
        )
        if done.returncode != 0:
            return done.returncode
        doc = json.loads(done.stdout)
        if args.save_json is not None:
            args.save_json.write_text(done.stdout, encoding="utf-8")
    print((rate_table if args.rates_only else table)(doc, args.target))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
