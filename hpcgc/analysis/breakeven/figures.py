"""The break-even figures: modelled time to the target against the bandwidth, one per panel and n.

Part of :mod:`hpcgc.analysis.breakeven` (the model and its documentation are in its docstring).
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from .. import tables
from .measure import N_REFERENCE, gbps_to_beta
from .model import MethodModel
from .report import Report, corners


def _slug(panel) -> str:
    return tables.panel_slug(panel)


def figures(rep: Report, out: Path) -> list[Path]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    beta = gbps_to_beta(rep.gbps)
    for panel, (base, ms) in rep.panels.items():
        ns = [base.ranks] + ([N_REFERENCE] if N_REFERENCE != base.ranks else [])
        fig, axes = plt.subplots(1, len(ns), figsize=(6.2 * len(ns), 4.6), squeeze=False)
        for ax, n in zip(axes[0], ns):
            for m in ms:
                if not math.isfinite(m.iterations):
                    continue
                t = m.time(n, rep.latency.alpha, beta, rep.gamma)
                if m is base:
                    ax.plot(rep.gbps, t, color="black", lw=2.6, ls="--", label=f"{m.label} (baseline)", zorder=5)
                else:
                    ax.plot(rep.gbps, t, lw=1.6, label=m.label)
                band(ax, m, rep, n, beta, "black" if m is base else ax.lines[-1].get_color())
            if math.isfinite(rep.latency.machine_gbps) and rep.gbps[0] <= rep.latency.machine_gbps <= rep.gbps[-1]:
                ax.axvline(rep.latency.machine_gbps, color="grey", lw=0.8, ls=":")
                ax.text(rep.latency.machine_gbps, 0.98, " this machine (collectives file)", rotation=90, va="top",
                        fontsize=7, color="grey", transform=ax.get_xaxis_transform())
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel("link bandwidth (Gb/s)")
            ax.set_ylabel("modelled time to target (s)")
            ax.set_title(f"n = {n}" + (" (as run)" if n == base.ranks else " (projected)") +
                         f", α = {rep.latency.alpha * 1e6:.3g} µs", fontsize=9)
            ax.grid(True, which="both", alpha=0.3)
        axes[0][0].legend(fontsize=7)
        fig.suptitle(f"{tables.panel_title(panel)}; target: {rep.target.describe()}", fontsize=9)
        fig.tight_layout()
        p = out / f"breakeven-{_slug(panel)}.png"
        fig.savefig(p, dpi=130)
        plt.close(fig)
        written.append(p)
        # break-even bandwidth against n
        fig, ax = plt.subplots(figsize=(6.2, 4.6))
        for m in ms:
            if m is base:
                continue
            pts = [(r["n"], r["break_even_gbps"]) for r in rep.n_rows
                   if r["panel"] == tables.panel_title(panel) and r["method"] == m.label and r["break_even"] == "below"]
            if pts:
                x, y = zip(*pts)
                ax.plot(x, y, marker="o", ms=3, label=m.label)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("processes n")
        ax.set_ylabel("break-even bandwidth (Gb/s): the method wins below it")
        ax.set_title(f"against the {base.precision} Allreduce{' (modelled)' if base.modelled else ''}, "
                     f"α = {rep.latency.alpha * 1e6:.3g} µs", fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=7)
        fig.tight_layout()
        p = out / f"breakeven-n-{_slug(panel)}.png"
        fig.savefig(p, dpi=130)
        plt.close(fig)
        written.append(p)
    return written


def band(ax, m: MethodModel, rep: Report, n: int, beta, color) -> None:
    """The modelled time's band from the spread of the method's runs (:func:`corners`), when it has several."""
    if len(m.runs) < 2:
        return
    c = corners(m, rep.target)
    lo, hi = (c.fast.time(n, rep.latency.alpha, beta, rep.gamma), c.slow.time(n, rep.latency.alpha, beta, rep.gamma))
    if np.all(np.isfinite(lo)) and np.all(np.isfinite(hi)):
        ax.fill_between(rep.gbps, lo, hi, color=color, alpha=0.15, lw=0)
