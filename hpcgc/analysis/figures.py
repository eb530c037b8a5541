"""The figures of ``hpcgc report`` (:mod:`hpcgc.analysis.report`): convergence, accuracy, phases,
scaling and projection, as PNG/PDF with matplotlib (Agg; imported on first use). ``docs/analysis.md``
documents every figure."""
from __future__ import annotations

import math
import textwrap
from pathlib import Path

import numpy as np

from . import projection as proj
from .spread import order_ranks
from .tables import FLOOR, PHASES, Method, RunInfo, _col, _mean_if_all, bits_per_worker, panel_slug, panel_title, wall

# Okabe & Ito (2008), "Color universal design": distinguishable with every common colour-vision deficiency
OKABE_ITO = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000")
PHASE_COLORS = {"grad": "#56B4E9", "compress": "#009E73", "wait_up": "#F3D9A4", "comm_up": "#E69F00",
                "server": "#CC79A7", "wait_down": "#F2B9A0", "comm_down": "#D55E00", "other": "#999999"}
_RENDERED: dict = {}          # stem -> (PNG bytes, dpi) of every figure of the current report (report.html)


def _style(ms):
    """One colour per compressor (or per variant label), one line style per algorithm."""
    use_labels = any(m.runs[0].flat.get("label") for m in ms)
    colors, styles = {}, {}
    for m in ms:
        ckey = m.label if use_labels else m.compressor
        colors.setdefault(ckey, OKABE_ITO[len(colors) % len(OKABE_ITO)])
        styles.setdefault(m.algorithm, ("-", "--", ":", "-.")[len(styles) % 4])
        m.color = colors[ckey]
        m.linestyle = "-" if use_labels else styles[m.algorithm]


# -- figures ----------------------------------------------------------------------------------------
def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _save(fig, out: Path, stem: str, formats, dpi: int = 130) -> list[Path]:
    import io
    paths = []
    png = None
    for ext in formats:
        p = out / f"{stem}.{ext}"
        if ext == "png":                  # rendered once: the file and report.html's copy are the same bytes
            buf = io.BytesIO()
            fig.savefig(buf, format="png", dpi=dpi)
            png = buf.getvalue()
            p.write_bytes(png)
        else:
            fig.savefig(p)
        paths.append(p)
    if png is None:
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=dpi)
        png = buf.getvalue()
    _RENDERED[stem] = (png, dpi)
    _plt().close(fig)
    return paths


def aggregate(curves, log: bool = True, npts: int = 400):
    """Median over runs (seeds and/or repeats) with the band of the median's 95 % interval (order
    statistics, :func:`hpcgc.analysis.spread.order_ranks`; [min, max] for fewer than 6 runs), on a
    common x grid (the range every run covers).

    ``curves``: list of (x, y) with x non-decreasing; the median of log y when ``log`` (the same
    point). Returns (x, median, lo, hi) or None."""
    clean = []
    for x, y in curves:
        x, y = np.asarray(x, float), np.asarray(y, float)
        ok = np.isfinite(x) & np.isfinite(y)
        x, y = x[ok], y[ok]
        if x.size == 0:
            continue
        if log:
            y = np.log(np.maximum(y, FLOOR))
        x, idx = np.unique(x, return_index=True)
        clean.append((x, y[idx]))
    if not clean:
        return None
    if len(clean) == 1:
        x, y = clean[0]
        f = np.exp if log else (lambda a: a)
        return x, f(y), f(y), f(y)
    lo_x = max(c[0][0] for c in clean)
    hi_x = min(c[0][-1] for c in clean)
    if hi_x < lo_x:
        return None
    grid = np.unique(np.concatenate([c[0][(c[0] >= lo_x) & (c[0] <= hi_x)] for c in clean]))
    if grid.size > npts:
        grid = np.linspace(lo_x, hi_x, npts)
    Y = np.array([np.interp(grid, x, y) for x, y in clean])
    lo_rank, hi_rank, _ = order_ranks(len(Y))
    Ys = np.sort(Y, axis=0)
    mean, lo, hi = np.median(Y, axis=0), Ys[lo_rank - 1], Ys[hi_rank - 1]
    if log:
        mean, lo, hi = np.exp(mean), np.exp(lo), np.exp(hi)
    return grid, mean, lo, hi


def _draw(ax, m: Method, curves, log=True, label=True):
    a = aggregate(curves, log=log)
    if a is None:
        return
    x, mean, lo, hi = a
    ax.plot(x, mean, color=m.color, linestyle=m.linestyle, lw=1.6,
            label=(m.label + (f" ({len(curves)} runs)" if len(curves) > 1 else "")) if label else None)
    if len(curves) > 1:
        ax.fill_between(x, lo, hi, color=m.color, alpha=0.18, lw=0)


X_AXES = (("bits", "model bits sent per worker [bits]"),
          ("iteration", "iterations (communication rounds)"),
          ("wall", "wall-clock, iteration loop [s]"))
Y_LABELS = {"suboptimality": "f(x) − f*", "dist_to_opt": "‖x − x*‖² / ‖x⁰ − x*‖²", "loss": "loss F(x)",
            "grad_norm_sq": "‖∇f(x)‖²",
            "test_loss": "test loss"}


def _xdata(run, which):
    if which == "bits":
        return bits_per_worker(run)
    if which == "iteration":
        return np.asarray(run.series["iteration"], float)
    return wall(run)


def _has_series(group, y) -> bool:
    return any(_col(ri.run, y) is not None and np.isfinite(_col(ri.run, y)).any() for m in group for ri in m.runs)


class _All:
    """Every run of a collection as one pseudo-method (for :func:`_has_series`)."""

    def __init__(self, runs):
        self.runs = runs


def _y_series(group) -> list[str]:
    """The rows of a convergence figure: f − f* and ‖x − x*‖² where a reference optimum exists;
    otherwise (nonconvex problems, ``problem.reference`` off) ‖∇f(x)‖² and the loss."""
    ys = [y for y in ("suboptimality", "dist_to_opt") if _has_series(group, y)]
    return ys or [y for y in ("grad_norm_sq", "loss") if _has_series(group, y)] or ["loss"]


def fig_convergence(ms, panel, out, formats, eps, metric, logx=False) -> list[Path]:
    plt = _plt()
    group = [m for m in ms if m.panel == panel]
    ys = _y_series(group)
    fig, axes = plt.subplots(len(ys), 3, figsize=(16, 4.2 * len(ys)), squeeze=False)
    for i, y in enumerate(ys):
        for j, (xk, xl) in enumerate(X_AXES):
            ax = axes[i][j]
            for m in group:
                curves = [(_xdata(ri.run, xk), _col(ri.run, y)) for ri in m.runs]
                _draw(ax, m, curves, log=True, label=(i == 0 and j == 0))
            ax.set_yscale("log")
            if logx and xk != "iteration":
                ax.set_xscale("log")
            if y == metric:
                ax.axhline(eps, color="0.4", lw=0.8, ls=(0, (4, 3)))
            ax.set_xlabel(xl)
            ax.set_ylabel(Y_LABELS.get(y, y))
            ax.grid(True, which="major", alpha=0.3)
    fig.suptitle(f"Convergence — {panel_title(panel)}\n(median over runs, band: its 95 % interval, [min, max] below 6 runs; "
                 f"grey dashed: ε = {eps:g})", fontsize=11)
    _bottom_legend(fig, axes[0][0], len(group))
    return _save(fig, out, "convergence" + _suffix(ms, panel), formats)


COLUMN_WIDTH_IN = 3.4       # one column of a two-column journal page


def fig_convergence_column(ms, panel, out, formats, eps, metric, which, logx=False) -> list[Path]:
    """One journal column: f(x) − f* (and ‖x − x*‖²/‖x⁰ − x*‖²) against one x axis (``bits`` or
    ``wall``), 8-pt text at print size, legend below; file ``convergence_<which>[-panel]``."""
    plt = _plt()
    group = [m for m in ms if m.panel == panel]
    ys = _y_series(group)
    xl = dict(X_AXES)[which]
    rows = math.ceil(len(group) / 2)
    with plt.rc_context({"font.size": 7, "axes.labelsize": 7, "xtick.labelsize": 6.5, "ytick.labelsize": 6.5,
                         "legend.fontsize": 6.5, "lines.linewidth": 1.2}):
        fig, axes = plt.subplots(len(ys), 1, figsize=(COLUMN_WIDTH_IN, 1.9 * len(ys) + 0.25 + 0.16 * rows),
                                 sharex=True, squeeze=False, layout="constrained")
        for i, y in enumerate(ys):
            ax = axes[i][0]
            for m in group:
                _draw(ax, m, [(_xdata(ri.run, which), _col(ri.run, y)) for ri in m.runs], log=True, label=(i == 0))
            ax.set_yscale("log")
            if logx:
                ax.set_xscale("log")
            if y == metric:
                ax.axhline(eps, color="0.4", lw=0.7, ls=(0, (4, 3)))
            ax.set_ylabel(Y_LABELS.get(y, y))
            ax.grid(True, which="major", alpha=0.3)
        axes[-1][0].set_xlabel(xl)
        if which == "bits":                        # 1.2×10⁵, not 120000 overlapping its neighbours
            axes[-1][0].ticklabel_format(axis="x", style="sci", scilimits=(-3, 4), useMathText=True)
        fig.suptitle(textwrap.fill(panel_title(panel), 60), fontsize=7)
        fig.legend(*axes[0][0].get_legend_handles_labels(), loc="outside lower center", ncol=2, frameon=False,
                   handlelength=2.2, columnspacing=1.0)
        return _save(fig, out, f"convergence_{which}" + _suffix(ms, panel), formats, dpi=300)


def _bottom_legend(fig, ax, n):
    """The methods' legend under the axes, with room reserved for it (figure-relative)."""
    rows = math.ceil(n / 3)
    h = (0.3 + 0.22 * rows) / fig.get_figheight()
    fig.legend(*ax.get_legend_handles_labels(), loc="lower center", ncol=min(3, n), fontsize=9,
               bbox_to_anchor=(0.5, 0.0), frameon=False)
    fig.tight_layout(rect=(0, h, 1, 1))


def _suffix(ms, panel):
    return "" if len({m.panel for m in ms}) == 1 else "-" + panel_slug(panel)


def _has_accuracy(m):
    return any(np.isfinite(_col(ri.run, "accuracy") if _col(ri.run, "accuracy") is not None else [np.nan]).any()
               for ri in m.runs)


def fig_accuracy(ms, panel, out, formats) -> list[Path]:
    group = [m for m in ms if m.panel == panel and _has_accuracy(m)]
    if not group:
        return []
    plt = _plt()
    # a held-out split: 'accuracy' is the test accuracy and 'train_accuracy' differs from it
    both = any(_col(ri.run, "train_accuracy") is not None and
               not np.allclose(_col(ri.run, "train_accuracy"), _col(ri.run, "accuracy"), equal_nan=True)
               for m in group for ri in m.runs)
    cols = [("accuracy", "test accuracy [%]" if both else "training accuracy [%]")]
    if both:
        cols.append(("train_accuracy", "training accuracy [%]"))
    fig, axes = plt.subplots(1, len(cols), figsize=(7 * len(cols), 4.5), squeeze=False)
    for j, (c, lab) in enumerate(cols):
        ax = axes[0][j]
        for m in group:
            curves = [(ri.run.series["iteration"], 100 * _col(ri.run, c)) for ri in m.runs
                      if _col(ri.run, c) is not None]
            _draw(ax, m, curves, log=False, label=(j == 0))
        ax.set_xlabel("iterations (communication rounds)")
        ax.set_ylabel(lab)
        ax.grid(True, alpha=0.3)
    fig.suptitle(f"Accuracy — {panel_title(panel)}\n(median over runs, band: its 95 % interval, [min, max] below 6 runs)", fontsize=11)
    _bottom_legend(fig, axes[0][0], len(group))
    return _save(fig, out, "accuracy" + _suffix(ms, panel), formats)


def phase_ms(ri: RunInfo) -> dict:
    """Mean time per iteration [ms] of each phase: grad and compress averaged over the worker ranks,
    server on rank 0, wait_* / comm_* / other averaged over all ranks; 'iter' on rank 0."""
    r = ri.run
    tm = r.time
    it = np.asarray(r.series["iteration"], float)
    ok = np.flatnonzero(np.isfinite(tm["iter"][:, 0])) if "iter" in tm else np.array([], int)
    if ok.size == 0 or it[ok[-1]] == 0:
        return {}
    t = ok[-1]
    k = it[t]
    P = tm["iter"].shape[1]
    wr = np.asarray(r.workers.get("rank", np.arange(P)), int)
    wr = wr[wr < P] if wr.size else np.arange(P)
    out = {}
    for ph in PHASES:
        if ph not in tm:
            continue
        row = np.asarray(tm[ph][t], float)
        v = row[wr].mean() if ph in ("grad", "compress") else row[0] if ph == "server" else row.mean()
        out[ph] = 1e3 * v / k
    out["iter"] = 1e3 * tm["iter"][t, 0] / k
    return out


PHASE_BAR_LABELS = {
    "grad": "gradient",
    "compress": "compress (and own decode)",
    "wait_up": "wait before the uplink: idle until every rank has its message (load imbalance)",
    "comm_up": "comm up: Gather+Gatherv (transfer; older files: incl. waiting for the slowest worker)",
    "server": "server: decode, aggregate, step",
    "wait_down": "wait before the downlink: idle while rank 0 steps (workers)",
    "comm_down": "comm down: Bcast (transfer; older files: incl. waiting for the server step)",
    "other": "hpcgc's bookkeeping (bit accounting, stop decisions, timers)",
}


def phase_bars(ms) -> list:
    """Per method, the phase breakdown of two kinds of rank, from :meth:`phases_frame`: rank 0 and
    the mean worker rank (ranks ≥ 1), each in ms per iteration, mean over seeds. Each bar is one
    rank's own iteration, so its stack adds up to that rank's whole iteration (``iter``)."""
    from hpcgc.results.frames import phases_frame
    out = []
    for m in sorted(ms, key=lambda m: (m.panel[:-1] != ms[0].panel[:-1], m.ranks)):
        df = phases_frame([ri.run for ri in m.runs])
        if df.empty:
            continue
        bars = {}
        for who, sel in (("rank 0", df["rank"] == 0), ("workers", df["rank"] > 0)):
            part = df[sel]
            if part.empty:
                continue
            # mean over the ranks of the group within a run, then over the runs (seeds)
            per_run = part.groupby(["run_id", "file", "phase"])["ms_per_iteration"].mean()
            bars[who] = per_run.groupby(level="phase").mean().to_dict()
        out.append((m, bars))
    return out


def fig_phases(ms, out, formats) -> list[Path]:
    rows = phase_bars(ms)
    if not rows:
        return []
    plt = _plt()
    multi_p = len({m.ranks for m, _ in rows}) > 1
    n = len(rows)
    fig, ax = plt.subplots(figsize=(max(7.0, 1.25 * n + 2.5), 6.2))
    width = 0.38
    xs, labels = [], []
    for i, (m, bars) in enumerate(rows):
        for j, who in enumerate(("rank 0", "workers")):
            if who not in bars:
                continue
            x = i + (j - 0.5) * (width + 0.04)
            bottom = 0.0
            for ph in PHASES:
                v = bars[who].get(ph, 0.0)
                ax.bar(x, v, bottom=bottom, width=width, color=PHASE_COLORS[ph], edgecolor="white", lw=0.5,
                       label=PHASE_BAR_LABELS[ph] if (i == 0 and j == 0) else None)
                bottom += v
            ax.text(x, bottom, "0" if who == "rank 0" else "W", ha="center", va="bottom", fontsize=8)
        xs.append(i)
        labels.append(m.label + (f"\n{m.ranks} ranks" if multi_p else ""))
    ax.set_xticks(xs)
    ax.set_xticklabels(labels, rotation=20, ha="right", fontsize=8)
    ax.set_ylabel("time per iteration [ms]")
    ax.margins(y=0.08)
    ranks = sorted({m.ranks for m, _ in rows})
    ax.set_title("Time per iteration by phase" + ("" if multi_p else f", {ranks[0]} ranks") +
                 "\nbars: 0 = rank 0, W = mean worker rank (ranks ≥ 1); mean over iterations and seeds",
                 fontsize=10)
    ax.grid(True, axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    handles, labs = ax.get_legend_handles_labels()
    fig.legend(handles, labs, loc="lower center", ncol=1, fontsize=8, frameon=False, bbox_to_anchor=(0.5, 0.0))
    fig.tight_layout(rect=(0, 1.15 / fig.get_figheight(), 1, 1))
    return _save(fig, out, "phases", formats)


def matplotlib_null():
    from matplotlib.ticker import NullLocator
    return NullLocator()


def fig_scaling(ms, per_run, out, formats) -> list[Path]:
    groups: dict = {}
    for m in ms:
        groups.setdefault((m.key[0]), []).append(m)
    groups = {k: sorted(v, key=lambda m: m.ranks) for k, v in groups.items() if len({m.ranks for m in v}) > 1}
    if not groups:
        return []
    plt = _plt()
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.5))
    for ms_ in groups.values():
        P = [m.ranks for m in ms_]
        it_ms = [np.mean([phase_ms(ri).get("iter", np.nan) for ri in m.runs]) for m in ms_]
        tte = [_mean_if_all([per_run[id(ri)]["time_to_eps_s"] for ri in m.runs]) for m in ms_]
        up = [np.mean([per_run[id(ri)]["wire_bytes_up"] / max(per_run[id(ri)]["iterations"], 1) for ri in m.runs])
              for m in ms_]
        m0 = ms_[0]
        lab = m0.label.split(" (")[0]
        for ax, v in zip(axes, (it_ms, tte, up)):
            ax.plot(P, v, marker="o", color=m0.color, linestyle=m0.linestyle, label=lab)
    from matplotlib.ticker import FuncFormatter
    plain = FuncFormatter(lambda v, _: f"{v:g}")
    ticks = sorted({m.ranks for v in groups.values() for m in v})
    for ax, yl in zip(axes, ("time per iteration [ms]", "time to ε [s]", "uplink bytes per iteration [B]")):
        ax.set_xscale("log", base=2)
        ax.set_xticks(ticks, [str(t) for t in ticks])
        ax.xaxis.set_minor_locator(matplotlib_null())
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(plain)
        ax.yaxis.set_minor_formatter(plain)
        ax.set_xlabel("MPI ranks")
        ax.set_ylabel(yl)
        ax.grid(True, which="both", alpha=0.3)
    fig.suptitle("Scaling with the number of ranks\n(mean over seeds; time to ε only where every seed "
                 "reached ε)", fontsize=11)
    _bottom_legend(fig, axes[0], len(groups))
    return _save(fig, out, "scaling", formats)


def fig_projection(ms, panel, out, formats, nets, gather, eps, metric) -> list[Path]:
    plt = _plt()
    group = [m for m in ms if m.panel == panel]
    if not any(np.isfinite(_col(ri.run, metric) if _col(ri.run, metric) is not None else [np.nan]).any()
               for m in group for ri in m.runs):
        return []
    fig, axes = plt.subplots(1, len(nets) + 1, figsize=(4.6 * (len(nets) + 1), 4.3), sharey=True)
    for j, net in enumerate([None, *nets]):
        ax = axes[j]
        for m in group:
            curves = []
            for ri in m.runs:
                c = proj.costs(ri.run)
                x = c.measured if net is None else proj.project(c, net, gather)
                curves.append((x, _col(ri.run, metric)))
            _draw(ax, m, curves, log=True, label=(j == 0))
        ax.set_yscale("log")
        ax.set_xscale("log")
        from matplotlib.ticker import NullFormatter
        ax.xaxis.set_minor_formatter(NullFormatter())      # minor labels collide on a short log range
        ax.axhline(eps, color="0.4", lw=0.8, ls=(0, (4, 3)))
        ax.set_xlabel("wall-clock [s]" + (" (measured here)" if net is None else " (projected)"))
        ax.set_title("measured on this machine" if net is None else net.describe(), fontsize=9)
        ax.grid(True, which="major", alpha=0.3)
    axes[0].set_ylabel(Y_LABELS.get(metric, metric))
    fig.suptitle(f"Projected convergence — {panel_title(panel)}\n(α–β model, {gather} gather + binomial "
                 "broadcast, measured compute; docs/projection.md)", fontsize=11)
    _bottom_legend(fig, axes[0], len(group))
    return _save(fig, out, "projection" + _suffix(ms, panel), formats)
