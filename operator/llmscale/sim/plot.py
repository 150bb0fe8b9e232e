"""Plot of a simulated day: load, replicas per policy and p95 TTFT per minute (matplotlib, Agg)."""

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
    ttft_slo_s: float,
    title: str = "",
    footnote: str = "",
    warmup_s: float = 0.0,
) -> Path:
    """Draw three stacked panels over the run and write a PNG.

    Panels: interactive load (requests/s per minute), billed interactive replicas per policy
    (per-minute mean), and p95 TTFT per minute per policy (log scale, the SLO as a dashed line).

    Args:
        series: ``{policy: minute_series(...)}`` from :func:`llmscale.sim.report.minute_series`;
            all policies share one time axis.
        out: path of the PNG to write.
        ttft_slo_s: the TTFT target, seconds.
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
    fig, axes = plt.subplots(3, 1, figsize=(11, 9), sharex=True, height_ratios=(1, 1.4, 1.4))
    ax_load, ax_rep, ax_ttft = axes
    ax_load.plot(hours, first["load_rps"], color="black", lw=0.8)
    ax_load.set_ylabel("load (req/s)")
    for name, s in series.items():
        style = {"lw": 1.6, "color": "black", "ls": "--"} if name == "oracle" else {"lw": 1.0}
        ax_rep.plot(hours, s["replicas"], label=name, **style)  # type: ignore[arg-type]
        ttft = np.asarray(s["ttft_p95_s"], dtype=np.float64)
        ax_ttft.plot(hours, np.clip(ttft, 1e-3, None), label=name, **style)  # type: ignore[arg-type]
    ax_rep.set_ylabel("replicas (billed)")
    ax_rep.legend(ncol=3, fontsize=8, loc="upper left")
    ax_ttft.axhline(ttft_slo_s, color="red", ls=":", lw=1.0, label="TTFT SLO")
    ax_ttft.set_yscale("log")
    ax_ttft.set_ylabel("TTFT p95 per minute (s)")
    ax_ttft.set_xlabel("hours from start (UTC)")
    if warmup_s > 0:
        for ax in axes:
            ax.axvspan(0, warmup_s / 3600.0, color="grey", alpha=0.15, lw=0)
    for ax in axes:
        ax.grid(alpha=0.3)
    if title:
        fig.suptitle(title, fontsize=11)
    if footnote:
        fig.text(0.01, 0.005, footnote, fontsize=7, color="dimgrey")
    fig.tight_layout(rect=(0, 0.02, 1, 1))
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
