"""What a run measured: rank 0's phase means, the target (f − f*, ‖∇f‖² ratio, an accuracy gap) and
its series, the measured time to a row; the constants and units of the break-even report.

Part of :mod:`hpcgc.analysis.breakeven` (the model and its documentation are in its docstring).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .. import baselines, tables

COMPUTE_PHASES = ("grad", "compress", "server")
HEADER_BYTES = 8                 # a compressed downlink's first Bcast (length, control word)
N_REFERENCE = 128                # the table's second rank count
N_LARGE = 1024                   # and its third (the compressed reduce-scatter's scaling)
BITS = 8e9                       # Gb/s → bytes/s: × 1e9 / 8


class BreakEvenError(tables.AnalysisError):
    """Bad input for the break-even report (exit 2)."""


def gbps_to_beta(gbps):
    """Inverse bandwidth β (seconds per byte) of a link of ``gbps`` Gb/s."""
    return 8.0 / (np.asarray(gbps, dtype=float) * 1e9)


def beta_to_gbps(beta):
    return 8.0 / (np.asarray(beta, dtype=float) * 1e9)


PHASES = ("grad", "compress", "wait_up", "comm_up", "server", "wait_down", "comm_down", "other", "iter")


def rank0_means(run) -> dict:
    """Rank 0's mean seconds per iteration of every phase of :data:`PHASES`, over the iterations
    after the first (``per_iteration/``; without it, one row of the cumulative totals / iterations),
    and ``first``: its first iteration's wall-clock (NaN without ``per_iteration/``) — the one place
    the break-even report reads phase times. Phases a file does not have count as 0."""
    pi = run.per_iteration
    if pi and "grad" in pi and len(pi["grad"]):
        out = {}
        for ph in PHASES:
            a = np.asarray(pi[ph], dtype=float)[:, 0] if ph in pi else np.zeros(1)
            a = a[1:] if a.size > 1 else a
            out[ph] = float(np.nanmean(a)) if np.isfinite(a).any() else 0.0
        out["first"] = float(np.asarray(pi["iter"], dtype=float)[0, 0]) if "iter" in pi else float("nan")
        return out
    k = max(int(run.series["iteration"][-1]), 1)
    out = {ph: float(np.asarray(run.time[ph], dtype=float)[-1, 0]) / k if ph in run.time else 0.0 for ph in PHASES}
    out["first"] = float("nan")
    return out


def target_series(run, metric: str) -> np.ndarray:
    """The series compared with the target: ``suboptimality`` (f − f*) or ``grad_ratio``
    (‖∇f(x^k)‖² / ‖∇f(x⁰)‖², the measure of runs without f*)."""
    if metric == "grad_ratio":
        g = np.asarray(run.series.get("grad_norm_sq", []), dtype=float)
        return g / g[0] if g.size and g[0] > 0 else np.full(g.shape, np.nan)
    return np.asarray(run.series.get(metric, []), dtype=float)


def run_metric(run) -> str:
    return "suboptimality" if str(run.attrs.get("stop_measure", "f - f*")).startswith("f - f*") else "grad_ratio"


@dataclass(frozen=True)
class Target:
    metric: str
    eps: float
    reference: dict = field(default_factory=dict, compare=False, hash=False)  # accuracy_gap: panel -> accuracy

    def describe(self) -> str:
        if self.metric == ACCURACY_GAP:
            return f"test accuracy within {100 * self.eps:g} points of the uncompressed run's final"
        what = "f − f*" if self.metric == "suboptimality" else "‖∇f‖²/‖∇f(x⁰)‖²"
        return f"{what} ≤ {self.eps:g}"


ACCURACY_GAP = "accuracy_gap"


def run_target_series(ri, target: Target) -> np.ndarray:
    """The series of run ``ri`` compared with ``target.eps`` (≤): :func:`target_series`, or for the
    accuracy target the gap to the panel's reference accuracy (:func:`accuracy_target`)."""
    if target.metric != ACCURACY_GAP:
        return target_series(ri.run, target.metric)
    acc = np.asarray(ri.run.series.get("accuracy", []), dtype=float)
    return target.reference[ri.method.panel] - acc


def accuracy_target(coll, within_points: float) -> Target:
    """Test accuracy within ``within_points`` percentage points of the final test accuracy of the
    panel's uncompressed float32 Allreduce (else its first uncompressed-equivalent Allreduce; mean
    over seeds of the last recorded value): the first recorded row where accuracy ≥ reference −
    within. Computed from the recorded ``accuracy`` series (no stop rule: run a fixed budget)."""
    if not (math.isfinite(within_points) and within_points > 0):
        raise BreakEvenError(f"--accuracy-within {within_points!r}: it must be a finite number of points > 0")
    ref: dict = {}
    for m in tables.methods(coll):
        prec = baselines.run_precision(m.runs[0])
        if prec is None or (m.panel in ref and ref[m.panel][0] == "fp32"):
            continue
        finals = []
        for ri in m.runs:
            acc = np.asarray(ri.run.series.get("accuracy", []), dtype=float)
            acc = acc[np.isfinite(acc)]
            if not acc.size:
                raise BreakEvenError(f"--accuracy-within: {ri.run.run_id} in {ri.path} records no test accuracy "
                                     "(set data.test_fraction > 0 in the experiment)")
            finals.append(float(acc[-1]))
        ref[m.panel] = (prec, float(np.mean(finals)))
    if not ref:
        raise BreakEvenError("--accuracy-within: no uncompressed Allreduce run to take the reference accuracy from")
    return Target(ACCURACY_GAP, within_points / 100.0, {p: v for p, (_, v) in ref.items()})


def common_target(runs, eps: float | None, metric: str | None) -> Target:
    """The experiment's target: ``run.tolerance`` on its stop measure, the same for every run (or
    ``eps``/``metric`` given); a clear error when the runs have none in common."""
    metrics = {run_metric(ri.run): ri for ri in runs}
    if metric is None:
        if len(metrics) > 1:
            a, b = list(metrics.values())[:2]
            raise BreakEvenError(f"the runs have no common target: {a.run.run_id} ({a.path}) measures "
                                 f"{a.attrs.get('stop_measure')!r}, {b.run.run_id} ({b.path}) "
                                 f"{b.attrs.get('stop_measure')!r}; compare runs of one problem kind")
        metric = next(iter(metrics))
    if eps is None:
        tols = {}
        for ri in runs:
            tols.setdefault(float(ri.flat.get("run.tolerance", 0.0) or 0.0), ri)
        if len(tols) > 1:
            shown = "; ".join(f"{ri.run.run_id} in {ri.path}: {t:g}" for t, ri in list(tols.items())[:3])
            raise BreakEvenError(f"the runs have no common target: run.tolerance differs ({shown}); "
                                 f"choose one with --eps")
        eps = next(iter(tols))
        if eps <= 0:
            raise BreakEvenError("the runs have no target (run.tolerance = 0: they ran a fixed number of "
                                 "iterations); choose one with --eps")
    if not (math.isfinite(eps) and eps > 0):
        raise BreakEvenError(f"--eps {eps!r}: the target must be a finite number > 0")
    return Target(metric, float(eps))


def measured_run_time(run, row: int) -> float:
    """Measured seconds up to result row ``row``: rank 0's cumulative ``iter`` time (the sum of its
    per-iteration wall-clocks, ``time/iter``), i.e. the iteration loop without the evaluations,
    recording and HDF5 writing, which are outside every phase (docs/results.md, Phases)."""
    from ..projection import costs
    return float(costs(run).measured[row])


def measured_time(m, target) -> float:
    """Mean over seeds of the measured time to target (rank 0's summed ``time/iter`` up to the
    first row at the target); NaN when some seed missed it or the method has no runs."""
    from ..projection import first_reached
    out = []
    for ri in m.runs:
        t = first_reached(run_target_series(ri, target), target.eps)
        if t is None:
            return float("nan")
        out.append(measured_run_time(ri.run, t))
    return float(np.mean(out)) if out else float("nan")
