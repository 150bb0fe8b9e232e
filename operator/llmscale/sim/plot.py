"""Plot of a simulated run: the load, then one panel per policy (small multiples) with its billed
replicas, the oracle's for reference, and the minutes that missed the SLO (matplotlib, Agg)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

__all__ = ["plot_day"]


def plot_day(
    series: Mapping[str, Mapping[str, NDArray[np.float64]]],
    out: str | Path,
    *,
    title: str = "",
    footnote: str = "",
    warmup_s: float = 0.0,
) -> Path:
    """Draw the load and one panel per policy over the run and write a PNG.

    Each policy's panel has its own y axis (a policy that runs away to the maximum does not flatten
    the others): its billed interactive replicas per minute, the oracle's as a dashed grey line
    when an ``oracle`` series is present, and a red tick under every minute that missed the SLO
    (``series[...]["meets"]`` of :func:`llmscale.sim.report.minute_series`); the panel's title gives
    the share of minutes met.

    Args:
        series: ``{label: minute_series(...)}``; all share one time axis, in panel order.
        out: path of the PNG to write.
        title: figure title.
        footnote: text under the figure (the trace's citation).
        warmup_s: the excluded warm-up, shaded.

    Returns:
        The path written.

    Raises:
        ValueError: ``series`` is empty.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not series:
        raise ValueError("Nothing to plot")
    first = next(iter(series.values()))
    t0 = float(first["t_s"][0])
    hours = (np.asarray(first["t_s"]) - t0) / 3600.0
    span_h = float(hours[-1]) if len(hours) else 1.0
    oracle = series.get("oracle")
    names = list(series)
    n = len(names)
    fig, axes = plt.subplots(
        n + 1, 1, figsize=(11, 1.6 + 1.35 * (n + 1)), sharex=True, height_ratios=(1.2, *([1.0] * n))
    )
    ax_load = axes[0]
    ax_load.plot(hours, first["load_rps"], color="black", lw=0.7)
    ax_load.set_ylabel("load\n(req/s)")
    warm_h = warmup_s / 3600.0
    for ax, name in zip(axes[1:], names, strict=True):
        s = series[name]
        rep = np.asarray(s["replicas"], dtype=np.float64)
        if oracle is not None and name != "oracle":
            ax.plot(hours, oracle["replicas"], color="grey", lw=0.8, ls="--", label="oracle")
        color = "tab:blue" if name.startswith("llmscale") else ("black" if name == "oracle" else "tab:purple")
        ax.plot(hours, rep, color=color, lw=1.0)
        meets = np.asarray(s.get("meets", np.ones_like(rep)), dtype=np.float64)
        measured = hours >= warm_h
        missed = (meets < 0.5) & measured
        share = float(np.mean(meets[measured])) if measured.any() else float("nan")
        top = max(float(np.nanmax(rep)) if len(rep) else 1.0, 1.0)
        if oracle is not None:
            top = max(top, float(np.nanmax(oracle["replicas"])))
        if missed.any():
            ax.vlines(hours[missed], 0, top * 0.06, color="red", lw=0.8)
        ax.set_ylim(0, top * 1.12)
        ax.set_ylabel("replicas", fontsize=8)
        ax.set_title(f"{name} — {share:.1%} of minutes met the SLO (red: missed)", fontsize=8, loc="left", pad=2)
    for ax in axes:
        if warm_h > 0:
            ax.axvspan(0, warm_h, color="grey", alpha=0.15, lw=0)
        ax.grid(alpha=0.3)
        ax.tick_params(labelsize=7)
    axes[-1].set_xlabel("hours from start (UTC)")
    axes[-1].set_xlim(0, span_h)
    if title:
        fig.suptitle(title, fontsize=10)
    if footnote:
        fig.text(0.01, 0.004, footnote, fontsize=7, color="dimgrey")
    fig.tight_layout(rect=(0, 0.015, 1, 1))
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
