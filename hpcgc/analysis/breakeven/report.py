"""The break-even table: :func:`build` (every method against its panel's baseline, at the runs' n,
N_REFERENCE and N_LARGE), the spread over a method's runs (intervals, measurably faster), Markdown.

Part of :mod:`hpcgc.analysis.breakeven` (the model and its documentation are in its docstring).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .. import baselines, tables
from .hierarchy import run_shape
from .measure import (
    N_LARGE,
    N_REFERENCE,
    BreakEvenError,
    Target,
    accuracy_target,
    common_target,
    gbps_to_beta,
    measured_time,
)
from .model import BreakEven, Latency, MethodModel, measure_run, method_break_even, method_models

COLUMNS = ("panel", "method", "collective", "ranks", "reached", "iterations_to_target", "compute_ms_per_iter",
           "up_bytes_per_worker_iter", "down_bytes_per_iter", "baseline", "break_even_run_n", "break_even_gbps_run_n",
           "break_even_n128", "break_even_gbps_n128", "break_even_n1024", "break_even_gbps_n1024",
           "break_even_run_n_fp32", "break_even_gbps_run_n_fp32", "break_even_n128_fp32",
           "break_even_gbps_n128_fp32", "break_even_n1024_fp32", "break_even_gbps_n1024_fp32",
           "time_s_at_1Gbps", "time_s_at_100Gbps")
SPREAD_COLUMNS = ("spread_over", "runs", "iterations_to_target_median", "iterations_to_target_lo",
                  "iterations_to_target_hi", "compute_ms_per_iter_median", "compute_ms_per_iter_lo",
                  "compute_ms_per_iter_hi", "break_even_run_n_interval", "break_even_gbps_run_n_lo",
                  "break_even_gbps_run_n_hi", "time_s_at_1Gbps_lo", "time_s_at_1Gbps_hi", "time_s_at_100Gbps_lo",
                  "time_s_at_100Gbps_hi", "measurably_faster_at_1Gbps", "measurably_faster_at_100Gbps", "interval")
"""The spread over each method's runs (repeats and/or seeds; :func:`spread_row`)."""

SPREAD_MD_COLUMNS = ("method", "spread_over", "runs", "iterations_to_target_median", "iterations_to_target_lo",
                     "iterations_to_target_hi", "compute_ms_per_iter_median", "compute_ms_per_iter_lo",
                     "compute_ms_per_iter_hi", "break_even_run_n_interval", "measurably_faster_at_1Gbps",
                     "measurably_faster_at_100Gbps")
COLUMNS += SPREAD_COLUMNS

MD_COLUMNS = ("method", "collective", "ranks", "iterations_to_target", "compute_ms_per_iter",
              "up_bytes_per_worker_iter", "baseline", "break_even_run_n", "break_even_n128", "break_even_n1024",
              "break_even_run_n_fp32", "break_even_n128_fp32", "break_even_n1024_fp32", "time_s_at_1Gbps",
              "time_s_at_100Gbps")
N_COLUMNS = ("panel", "method", "collective", "n", "baseline", "break_even", "break_even_gbps",
             "break_even_fp32", "break_even_gbps_fp32")


@dataclass
class Report:
    target: Target
    latency: Latency
    gbps: np.ndarray
    ns: list
    gamma: float
    panels: dict                      # panel -> (baseline, [models])
    rows: list = field(default_factory=list)
    n_rows: list = field(default_factory=list)
    notes: list = field(default_factory=list)
    models: list = field(default_factory=list)
    choices: dict = field(default_factory=dict)     # panel -> baselines.Choice


def bandwidth_sweep(lo: float, hi: float, points: int) -> np.ndarray:
    for name, v in (("minimum", lo), ("maximum", hi)):
        if not (math.isfinite(v) and v > 0):
            raise BreakEvenError(f"--bandwidth {name} {v!r} Gb/s: a bandwidth must be finite and > 0 "
                                 "(β = 1/bandwidth must be finite and > 0)")
    if points < 1 or lo > hi:
        raise BreakEvenError(f"--bandwidth {lo:g} {hi:g} with --points {points}: the sweep has no valid point "
                             "(need minimum <= maximum and at least one point)")
    return np.geomspace(lo, hi, points) if points > 1 and hi > lo else np.array([lo])


def build(results, latency: Latency, gbps, n_max: int = 1024, eps=None, metric=None, gamma: float = 0.0,
          accuracy_within: float | None = None) -> Report:
    if not (math.isfinite(latency.alpha) and latency.alpha > 0):
        raise BreakEvenError(f"latency α = {latency.alpha!r} s: it must be finite and > 0")
    if not (math.isfinite(gamma) and gamma >= 0):
        raise BreakEvenError(f"γ = {gamma!r} s/B: it must be finite and >= 0")
    if n_max < 2:
        raise BreakEvenError(f"--n-max {n_max}: the rank sweep needs n_max >= 2")
    coll = tables.collect(results, strict=False)
    target = (accuracy_target(coll, accuracy_within) if accuracy_within is not None
              else common_target(coll.runs, eps, metric))
    models = method_models(coll, target)
    panels: dict = {}
    for m in models:
        panels.setdefault(m.panel, []).append(m)
    rep = Report(target, latency, np.asarray(gbps, float), [], gamma, {}, notes=list(coll.notes) + latency.notes)
    rep.models = models
    hier = sorted({m.label for m in models if any(run_shape(ri.run) for ri in m.runs)})
    if hier:
        rep.notes.append(
            "runs with run.topology = 'hierarchical' (" + ", ".join(hier) + ") are modelled in this table as flat "
            "collectives among all their ranks at one bandwidth — the break-even sweep has one network level; "
            "check.csv prices them at two levels (the leaders among the nodes, the node's Bcast inside it; "
            "--collectives measured on their node shape), and hierarchical.csv models flat against "
            "hierarchical from a flat run (docs/breakeven.md)")
    powers = [2 ** i for i in range(1, int(math.log2(n_max)) + 1)]
    for panel, ms in panels.items():
        bases = [m for m in ms if m.baseline]
        title = tables.panel_title(panel)
        if not bases:
            raise BreakEvenError(
                f"no uncompressed Allreduce baseline among the runs of {title}: add a run with "
                f'run.collective = "allreduce" and run.compressor = "identity" (e.g. a [[variant]] with '
                f'run.algorithm = "dcgd", or --set run.collective=allreduce --set run.compressor=identity) '
                f"to the experiment, at the same rank count")
        reached = [b for b in bases if math.isfinite(b.iterations)]
        if not reached:
            raise BreakEvenError(f"the uncompressed Allreduce baseline of {title} ({bases[0].label}) never reaches "
                                 f"{target.describe()}; choose a target it reaches with --eps")
        beta_ref = float(gbps_to_beta(latency.machine_gbps if math.isfinite(latency.machine_gbps) else 1.0))
        choice = baselines.choose(ms, target, beta_ref, latency.alpha, gamma,
                                  time_of=lambda m: measured_time(m, target))
        base = choice.base
        if base.modelled:
            ms = [base, *ms]
        rep.panels[panel] = (base, ms)
        rep.choices[panel] = choice
        rep.notes.append(f"{title}: baseline {choice.how}")
        if latency.ranks and latency.ranks != base.ranks:
            rep.notes.append(f"warning: the collectives file was measured at n = {latency.ranks}, the runs of "
                             f"{title} at n = {base.ranks}; using α = {latency.alpha * 1e6:.3g} µs derived from "
                             f"the n = {latency.ranks} measurements (through the cost models) for every n")
        ns = sorted({*powers, base.ranks})
        panel_rows(rep, title, choice, ms, ns)
        rep.ns = ns
    return rep


@dataclass
class Corners:
    """A method's model at the ends of its inputs' 95 % intervals (:mod:`hpcgc.analysis.spread`):
    ``fast`` with the lower ends of iterations to target and of compute per iteration, ``slow``
    with the upper ends (message sizes do not vary between repeats; between seeds their mean is
    used). The modelled time is increasing in both, so [fast, slow] bounds it."""
    fast: MethodModel
    slow: MethodModel
    iterations: object                 # Spread of the runs' iterations to target
    compute: object                    # Spread of the runs' compute per iteration (seconds, at the run's n)
    over: str                          # what the runs differ in: repeats, seeds, repeats x seeds, one run


def corners(m: MethodModel, target: Target) -> Corners:
    from dataclasses import replace

    from ..spread import spread
    per = [measure_run(ri, target) for ri in m.runs]
    its = spread([p["iterations"] for p in per])
    comp = spread([p["workers"] + p["server"] + p["idle"] + p["other"] for p in per])
    mean_c = m.workers + m.server + m.idle + m.other
    reached = math.isfinite(m.iterations)

    def at(it, c):
        f = c / mean_c if mean_c > 0 and math.isfinite(c) else 1.0
        return replace(m, iterations=it if reached else float("nan"), workers=m.workers * f, server=m.server * f,
                       idle=m.idle * f, other=m.other * f)
    reps = len({int(ri.run.attrs.get("repeat", 0)) for ri in m.runs})
    seeds = len({ri.run.attrs.get("seed") for ri in m.runs})
    over = ("repeats x seeds" if reps > 1 and seeds > 1 else "seeds" if seeds > 1 else
            "repeats" if reps > 1 else "one run")
    return Corners(at(its.lo, comp.lo), at(its.hi, comp.hi), its, comp, over)


def break_even_interval(cm: Corners, cb: Corners, n: int, alpha: float, gamma: float = 0.0) -> tuple:
    """(lo, hi, text): the break-even bandwidth's interval from the intervals of the inputs — the
    method at its fast end against the baseline at its slow end, and the other way round."""
    a = method_break_even(cm.fast, cb.slow, n, alpha, gamma)
    b = method_break_even(cm.slow, cb.fast, n, alpha, gamma)
    vals = [v for v in (a.gbps, b.gbps) if math.isfinite(v)]
    lo, hi = (min(vals), max(vals)) if vals else (float("nan"), float("nan"))
    if a.kind == b.kind and a.kind in ("below", "above"):
        text = f"{a.kind} {lo:.3g}–{hi:.3g} Gb/s"
    elif a.kind == b.kind:
        text = a.text()
    else:
        text = f"{b.text()} … {a.text()}"
    return lo, hi, text


def measurably_faster(cm: Corners, cb: Corners, n: int, alpha: float, beta: float, gamma: float = 0.0) -> str:
    """At inverse bandwidth ``beta``: 'faster' / 'slower' when the method's modelled time-to-target
    interval and the baseline's do not overlap (hpcgc.analysis.spread.separated), 'not measurably
    different' when they do; 'one run: no interval' when either has fewer than two runs."""
    if not (math.isfinite(cm.fast.iterations) and math.isfinite(cb.fast.iterations)):
        return "target not reached"
    if cm.iterations.n < 2 or cb.iterations.n < 2:
        return "one run: no interval"
    m_lo, m_hi = (float(c.time(n, alpha, beta, gamma)) for c in (cm.fast, cm.slow))
    b_lo, b_hi = (float(c.time(n, alpha, beta, gamma)) for c in (cb.fast, cb.slow))
    if not all(math.isfinite(v) for v in (m_lo, m_hi, b_lo, b_hi)):
        return ""
    return "faster" if m_hi < b_lo else "slower" if m_lo > b_hi else "not measurably different"


def spread_row(m: MethodModel, base: MethodModel, target: Target, latency: Latency, gamma: float = 0.0) -> dict:
    """The method's :data:`SPREAD_COLUMNS` against the panel's baseline."""
    from ..spread import describe
    cm, cb = corners(m, target), corners(base, target)
    lo, hi, text = break_even_interval(cm, cb, m.ranks, latency.alpha, gamma) if m is not base else (
        float("nan"), float("nan"), "baseline")
    row = {"spread_over": cm.over, "runs": len(m.runs),
           "iterations_to_target_median": cm.iterations.median, "iterations_to_target_lo": cm.iterations.lo,
           "iterations_to_target_hi": cm.iterations.hi, "compute_ms_per_iter_median": 1e3 * cm.compute.median,
           "compute_ms_per_iter_lo": 1e3 * cm.compute.lo, "compute_ms_per_iter_hi": 1e3 * cm.compute.hi,
           "break_even_run_n_interval": text, "break_even_gbps_run_n_lo": lo, "break_even_gbps_run_n_hi": hi,
           "interval": describe(len(m.runs))}
    for g in (1, 100):
        beta = float(gbps_to_beta(g))
        row[f"time_s_at_{g}Gbps_lo"] = float(cm.fast.time(m.ranks, latency.alpha, beta, gamma))
        row[f"time_s_at_{g}Gbps_hi"] = float(cm.slow.time(m.ranks, latency.alpha, beta, gamma))
        row[f"measurably_faster_at_{g}Gbps"] = ("baseline" if m is base else
                                                measurably_faster(cm, cb, m.ranks, latency.alpha, beta, gamma))
    return row


def spread_markdown(rep: Report) -> str:
    head = ("Spread over each method's runs (repeats and/or seeds): median and 95 % interval (order statistics "
            "of the median; [min, max] below 6 runs, with its actual coverage); measurably faster = the modelled "
            "time-to-target intervals of the method and the baseline do not overlap")
    return tables.markdown_table(rep.rows, SPREAD_MD_COLUMNS, title=head)


def panel_rows(rep: Report, title: str, choice, ms: list, ns: list):
    """The table rows (``rep.rows``) and the break-even against n (``rep.n_rows``) of one panel: the
    break-even against the chosen baseline at the runs' n, :data:`N_REFERENCE` and :data:`N_LARGE`,
    and against the float32 Allreduce (the second line, columns ``*_fp32``)."""
    base, wide = choice.base, choice.wide
    lo, hi = rep.gbps[0], rep.gbps[-1]
    alpha, gamma = rep.latency.alpha, rep.gamma
    for m in ms:
        row = {"panel": title, "method": m.label + choice.tag(m), "collective": m.collective, "ranks": m.ranks,
               "reached": m.reached if not m.modelled else "modelled", "iterations_to_target": m.iterations,
               "compute_ms_per_iter": 1e3 * float(m.compute(m.ranks)),
               "up_bytes_per_worker_iter": m.up_bytes, "down_bytes_per_iter": m.down_bytes,
               "baseline": base.precision + (" (modelled)" if base.modelled else "")}
        for tag, against in (("", base), ("_fp32", wide)):
            for col, n in (("run_n", m.ranks), ("n128", N_REFERENCE), ("n1024", N_LARGE)):
                if against is None:
                    be = BreakEven("none")
                else:
                    be = method_break_even(m, against, n, alpha, gamma)
                row[f"break_even_{col}{tag}"] = be.text(lo, hi) if against is not None else "no fp32 run"
                row[f"break_even_gbps_{col}{tag}"] = be.gbps
        row["time_s_at_1Gbps"], row["time_s_at_100Gbps"] = (
            float(m.time(m.ranks, alpha, gbps_to_beta(g), gamma)) for g in (1, 100))
        row.update(spread_row(m, base, rep.target, rep.latency, gamma))
        rep.rows.append(row)
        for n in ns:
            be = method_break_even(m, base, n, alpha, gamma)
            b32 = method_break_even(m, wide, n, alpha, gamma) if wide is not None else BreakEven("none")
            rep.n_rows.append({"panel": title, "method": m.label, "collective": m.collective, "n": n,
                               "baseline": row["baseline"], "break_even": be.kind, "break_even_gbps": be.gbps,
                               "break_even_fp32": b32.kind, "break_even_gbps_fp32": b32.gbps})


def markdown(rep: Report) -> str:
    chosen = "; ".join(f"{tables.panel_title(p)}: {c.how}" for p, c in rep.choices.items())
    head = (f"Break-even against the fastest uncompressed-equivalent Allreduce (fp16, bf16 or fp32) that reaches "
            f"the target, time to {rep.target.describe()} — {chosen}; columns *_fp32: against the float32 "
            f"Allreduce (the second line). α = {rep.latency.alpha * 1e6:.3g} µs ({rep.latency.source}), bandwidth "
            f"swept {rep.gbps[0]:g}–{rep.gbps[-1]:g} Gb/s; n = {N_REFERENCE} and {N_LARGE} projected; "
            f"break-even = the bandwidth below which the method is faster")
    return tables.markdown_table(rep.rows, MD_COLUMNS, title=head)
