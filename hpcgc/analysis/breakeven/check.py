"""The model checked against measured runs: predicted time to the target (global α–β fits, a local
fit around each message size, the measured table) against the measured time.

Part of :mod:`hpcgc.analysis.breakeven` (the model and its documentation are in its docstring).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ...collectives import format_bytes
from .. import tables
from ..projection import first_reached
from .hierarchy import RunLevels, run_shape
from .measure import BreakEvenError, Target, gbps_to_beta, measured_run_time, run_target_series
from .model import Latency, MethodModel, exchange_parts, measure_run, op_coefficients

CHECK_TOLERANCE = 0.25          # |measured / predicted − 1| above this is marked
CHECK_COLUMNS = ("panel", "method", "collective", "ranks", "topology", "nodes", "ranks_per_node", "run_id", "up_to", "iterations",
                 "measured_s", "predicted_s", "ratio", "mark", "ratio_after_first", "predicted_s_global_fit",
                 "ratio_global_fit", "predicted_s_median_ab", "ratio_median_ab",
                 "predicted_s_measured_collectives", "ratio_measured_collectives", "compute_s", "idle_s", "other_s",
                 "first_iteration_s", "intra_node_s", "alpha_beta")
CHECK_MD_COLUMNS = ("method", "collective", "ranks", "topology", "up_to", "iterations", "measured_s", "predicted_s",
                    "ratio", "mark", "ratio_after_first", "ratio_global_fit", "ratio_measured_collectives",
                    "first_iteration_s", "alpha_beta")


def op_alpha_beta(latency: Latency, op: str) -> tuple[float, float]:
    """(α, β) point to point for the part of an iteration that ``op`` measures: each from that
    operation's own fit in the collectives file where it is > 0, else the median over the file's
    collectives (α of the break-even table, β of its bandwidth estimate)."""
    a, b = latency.per_op.get(op, (None, None))
    return (a if a is not None else latency.alpha,
            b if b is not None else float(gbps_to_beta(latency.machine_gbps)))


def predicted_run_time(m: MethodModel, latency: Latency, iterations: float, gamma: float = 0.0) -> float:
    """Modelled seconds of ``iterations`` iterations of ``m`` at its own n, each part of the iteration
    (:func:`exchange_parts`) with the α, β of the collective that measures it (:func:`op_alpha_beta`)."""
    comm = 0.0
    for op, (a, b, g) in exchange_parts(m.collective, m.up_bytes, m.down_bytes, m.ranks, m.rounds, m.down_bcasts):
        alpha, beta = op_alpha_beta(latency, op)
        comm += float(a) * alpha + float(b) * beta + float(g) * gamma
    return iterations * (float(m.compute(m.ranks)) + float(m.paid(comm)))


LOCAL_SPAN = 4.0                # the local fit uses the measured sizes within this factor of the message


@dataclass(frozen=True)
class LocalFit:
    """A local line t = α_c + β_c·s of one operation (:func:`local_fit`): α_c, β_c > 0, or NaN when no
    window of the file gives a physical line (then the global α, β are used); ``lo``, ``hi`` the sizes
    it was fitted over; ``note`` says how it fell back ("" when the first window gave α_c, β_c > 0)."""
    alpha_c: float
    beta_c: float
    lo: float
    hi: float
    note: str = ""

    @property
    def ok(self) -> bool:
        return math.isfinite(self.alpha_c) and math.isfinite(self.beta_c)

    def text(self, op: str, nbytes: float) -> str:
        line = (f"α_c {self.alpha_c * 1e6:.3g} µs, β_c {self.beta_c * 1e9:.3g} ns/B" if self.ok
                else "global α, β")
        return f"{op} {format_bytes(nbytes)}: {line}" + (f" ({self.note})" if self.note else "")


def _relative_line(size, avg, sel) -> tuple[float, float]:
    """(α_c, β_c) of t = α_c + β_c·s over ``sel``, least squares in relative error (as ``bench collectives``)."""
    A = np.stack([np.ones(sel.size), size[sel]], axis=1) / avg[sel, None]
    (ac, bc), *_ = np.linalg.lstsq(A, np.ones(sel.size), rcond=None)
    return float(ac), float(bc)


def _window(size, nbytes: float, span: float) -> np.ndarray:
    sel = np.flatnonzero((size >= nbytes / span) & (size <= nbytes * span))
    return sel if sel.size >= 2 else np.sort(np.argsort(np.abs(np.log(size / nbytes)))[:2])


def local_fit(latency: Latency, op: str, nbytes: float) -> LocalFit | None:
    """``op``'s time t = α_c + β_c·s fitted, like ``bench collectives`` (least squares in relative
    error), over the sizes the collectives file measured within a factor :data:`LOCAL_SPAN` of
    ``nbytes`` (at least the two nearest): the line through the regime the message is in. One line
    over 4 B … 8 MiB follows the many small sizes and misses the large-message slope on a shaped
    link (a token bucket passes its burst at full speed). A line with α_c ≤ 0 or β_c ≤ 0 is not
    physical (a few latency-bound sizes whose times fall with the size by noise give β_c < 0): the
    window then widens by :data:`LOCAL_SPAN` at a time, to the neighbouring sizes, until the line is
    physical — at the widest, every size: the file's one fit —, and failing that the fit is NaN
    (the global α, β of :func:`op_alpha_beta`); ``note`` says which. None when the file did not
    measure ``op``."""
    if op not in latency.measured or nbytes <= 0:
        return None
    size, avg = latency.measured[op]
    sel = _window(size, nbytes, LOCAL_SPAN)
    first = _relative_line(size, avg, sel)
    if first[0] > 0 and first[1] > 0:
        return LocalFit(*first, float(size[sel].min()), float(size[sel].max()))
    said = (f"the fit over {format_bytes(size[sel].min())}…{format_bytes(size[sel].max())} gave α_c "
            f"{first[0] * 1e6:.3g} µs, β_c {first[1] * 1e9:.3g} ns/B, not > 0")
    span = LOCAL_SPAN
    while sel.size < size.size:
        span *= LOCAL_SPAN
        sel = _window(size, nbytes, span)
        ac, bc = _relative_line(size, avg, sel)
        if ac > 0 and bc > 0:
            lo, hi = float(size[sel].min()), float(size[sel].max())
            return LocalFit(ac, bc, lo, hi, f"{said}; widened to {format_bytes(lo)}…{format_bytes(hi)}")
    return LocalFit(float("nan"), float("nan"), float(size.min()), float(size.max()),
                    f"{said}, nor over any wider span; the global α, β")


def message_seconds_local(latency: Latency, op: str, nbytes: float, n: int) -> float:
    """Seconds of one ``op`` of ``nbytes`` per rank at n processes from the cost model with a
    point-to-point α, β fitted locally (:func:`local_fit`): β = β_c over the model's bandwidth slope
    at that size and the file's rank count, α such that the model equals the local line there; at
    the file's own n this is the local line itself. Falls back to :func:`op_alpha_beta`."""
    nf = latency.ranks or n
    fit = local_fit(latency, op, nbytes)
    a, b, g = (float(v) for v in op_coefficients(op, nbytes, n))
    if fit is None or not fit.ok:
        alpha, beta = op_alpha_beta(latency, op)
        return a * alpha + b * beta
    ac, bc = fit.alpha_c, fit.beta_c
    af, bf, _ = (float(v) for v in op_coefficients(op, nbytes, nf))
    slope = (float(op_coefficients(op, nbytes * 1.01, nf)[1]) - bf) / (0.01 * nbytes)
    beta = bc / slope if slope > 0 and bc > 0 else op_alpha_beta(latency, op)[1]
    alpha = (ac + bc * nbytes - bf * beta) / af if af > 0 else float("nan")
    if not alpha > 0:                  # the model's latency part cannot be negative: the global α
        alpha = op_alpha_beta(latency, op)[0]
    return a * alpha + b * beta


def predicted_run_time_local(m: MethodModel, latency: Latency, iterations: float) -> float:
    """Like :func:`predicted_run_time`, with α, β fitted per message size (:func:`message_seconds_local`)."""
    comm = sum(calls * message_seconds_local(latency, op, nbytes, m.ranks) for op, nbytes, calls in
               m.messages() if nbytes > 0)
    return iterations * (float(m.compute(m.ranks)) + float(m.paid(comm)))


def table_seconds(latency: Latency, op: str, nbytes: float) -> float:
    """Seconds of one ``op`` with ``nbytes`` per rank as the collectives file measured it: its mean
    time interpolated log-log between the measured sizes (proportional beyond the largest); NaN
    when the file did not measure ``op``."""
    if op not in latency.measured or nbytes <= 0:
        return float("nan") if op not in latency.measured else 0.0
    size, avg = latency.measured[op]
    if nbytes >= size[-1]:
        return float(avg[-1] * nbytes / size[-1])
    return float(np.exp(np.interp(np.log(nbytes), np.log(size), np.log(avg))))


def predicted_run_time_table(m: MethodModel, latency: Latency, iterations: float) -> float:
    """Like :func:`predicted_run_time`, with every collective of an iteration priced at the time the
    collectives file measured for that operation and message size instead of the α-β model: it
    separates the α-β fit's error from everything else (compute, waiting, bookkeeping)."""
    comm = sum(calls * table_seconds(latency, op, nbytes) for op, nbytes, calls in m.messages())
    return iterations * (float(m.compute(m.ranks)) + float(m.paid(comm)))


def _ratio(measured: float, predicted: float) -> float:
    return measured / predicted if predicted > 0 else float("nan")


def _two_level(ri, levels: RunLevels | None, latency: Latency):
    """(collective's ranks, its Latency, node shape text, intra-node seconds per iteration) of a run:
    a flat run's own n and the file's main sweep; a ``run.topology = "hierarchical"`` run's N nodes,
    the file's ``levels/inter`` sweep (the leaders' communicator) and the intra-node Bcast of the
    iterate (float64 d + the control word) at ``levels/intra``'s local fits. The node's Reduce of
    the gradient runs inside the leader's measured ``grad`` phase, so it is part of the measured
    non-transfer time and not priced again."""
    shape = run_shape(ri.run)
    if shape is None:
        return ri.ranks, latency, None, 0.0
    nodes, k = shape
    if levels is None:
        raise BreakEvenError(f"run {ri.run.run_id} ran with run.topology = 'hierarchical' ({nodes} nodes x {k} ranks): "
                             "its check needs a --collectives file measured on the same node shape (with levels/intra "
                             "and levels/inter; docs/collectives.md, 'Two levels')")
    if (levels.nodes, levels.ranks_per_node) != (nodes, k):
        raise BreakEvenError(f"run {ri.run.run_id} ran on {nodes} nodes x {k} ranks, the --collectives file "
                             f"{levels.path} measured {levels.nodes} nodes x {levels.ranks_per_node} ranks: measure "
                             "the collectives on the runs' node shape")
    d = float(ri.run.attrs.get("d", 0) or 0)
    intra = sum(message_seconds_local(levels.intra, "bcast", nbytes, k) for nbytes in (8.0, 8.0 * d))
    return nodes, levels.inter, (nodes, k), intra


def check(models: list[MethodModel], target: Target, latency: Latency, gamma: float = 0.0,
          levels: RunLevels | None = None) -> list[dict]:
    """Model against measurement, run by run: the predicted time to target at the run's own n (its
    iterations to target, rank 0's measured non-transfer time per iteration, its message sizes, the collectives file's α, β
    per operation) next to the measured one (:func:`measured_run_time`), and their ratio. A run that
    never reached the target is compared over all its iterations (``up_to`` says which). A run with
    ``run.topology = "hierarchical"`` is priced with the two levels of the collectives file
    (``levels``, :func:`hierarchy.run_levels`): the leaders' collectives among its N nodes at the
    ``levels/inter`` fits, plus the node's Bcast at ``levels/intra`` (:func:`_two_level`)."""
    rows = []
    for m in models:
        for ri in m.runs:
            p = measure_run(ri, target)
            r = ri.run
            n_coll, lat, shape, intra = _two_level(ri, levels, latency)
            it = np.asarray(r.series["iteration"])
            t = first_reached(run_target_series(ri, target), target.eps)
            row = t if t is not None else len(it) - 1
            k = float(it[row])
            one = MethodModel(m.label, m.panel, n_coll, p["collective"], k, "", p["workers"], p["server"],
                              p["up"], p["down"], p["rounds"], p["down_bcasts"], idle=p["idle"],
                              other=p["other"] + intra, hide=p["hide"])
            pred = predicted_run_time_local(one, lat, k)
            pred_glob = predicted_run_time(one, lat, k, gamma)
            pred_med = float(one.time(n_coll, lat.alpha, gbps_to_beta(lat.machine_gbps), gamma))
            meas = measured_run_time(r, row)
            pred_tab = predicted_run_time_table(one, lat, k)
            ratio = meas / pred if pred > 0 else float("nan")
            first = p["first"]
            after = ((meas - first) / (pred * (k - 1) / k) if k > 1 and pred > 0 and math.isfinite(first)
                     else float("nan"))
            used = []
            for op, nbytes, _ in one.messages():
                fit = local_fit(lat, op, nbytes) if nbytes > 0 else None
                if fit is not None:
                    used.append(fit.text(op, nbytes))
            off = math.isfinite(ratio) and abs(ratio - 1) > CHECK_TOLERANCE
            rows.append({
                "panel": tables.panel_title(m.panel), "method": m.label, "collective": one.collective,
                "ranks": m.ranks, "topology": "hierarchical" if shape else "flat",
                "nodes": shape[0] if shape else m.ranks, "ranks_per_node": shape[1] if shape else 1,
                "run_id": r.run_id,
                "up_to": "target" if t is not None else "last row (target not reached)",
                "iterations": int(k), "measured_s": meas, "predicted_s": pred, "ratio": ratio,
                "mark": (f"OFF {100 * (ratio - 1):+.0f} %" if off else "ok") if math.isfinite(ratio) else "?",
                "ratio_after_first": after,
                "predicted_s_global_fit": pred_glob, "ratio_global_fit": _ratio(meas, pred_glob),
                "predicted_s_median_ab": pred_med, "ratio_median_ab": _ratio(meas, pred_med),
                "predicted_s_measured_collectives": pred_tab, "ratio_measured_collectives": _ratio(meas, pred_tab),
                "compute_s": k * (one.workers + one.server), "idle_s": k * one.idle,
                "other_s": k * (one.other - intra), "first_iteration_s": first, "intra_node_s": k * intra,
                "alpha_beta": "; ".join(used)})
    return rows


def check_markdown(rows: list[dict], target: Target, latency: Latency) -> str:
    head = (f"Model against measurement: time to {target.describe()} at each run's own n; measured = rank 0's "
            f"summed per-iteration wall-clock (time/iter) up to the first row at the target (evaluation and "
            f"writing excluded); predicted = iterations × (rank 0's measured non-transfer time per iteration — "
            f"compute, idle, bookkeeping; means after the first iteration — + the collectives' cost models with "
            f"α, β fitted in {latency.source.split(' (')[0]} over the sizes within a factor {LOCAL_SPAN:g} of each "
            f"message, alpha_beta); ratio = measured / predicted, OFF where it is off by more than "
            f"{100 * CHECK_TOLERANCE:.0f} %; ratio_after_first: the same without the first iteration (one-time "
            f"costs); ratio_global_fit: with each operation's one fit over all sizes; ratio_measured_collectives: "
            f"with each collective priced at the file's measured time for its message size (no fit)")
    return tables.markdown_table(rows, CHECK_MD_COLUMNS, title=head)
