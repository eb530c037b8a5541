"""``hpcgc breakeven``: below which bandwidth does a method beat the Allreduce a user would run?

For every method of an experiment (algorithm × compressor × collective) the time to reach the
experiment's target on a network of latency α and inverse bandwidth β, with ``n`` processes, is

    T(α, β, n) = K · ( c(n) + a(n)·α + b(n)·β + g(n)·γ )

- K: the iterations the run needed to reach the target (mean over seeds; assumed independent of n);
- c(n): everything of an iteration that is not a transfer, measured on rank 0's timeline (the
  root under ``gather``; any rank is on the critical path of a symmetric collective) as means over
  the iterations after the first (the first carries one-time costs: connections made at first
  contact, first touch of buffers; reported apart): its compute — grad + compress, plus the server
  phase (decode, aggregate, step: at the root under ``gather``, on every rank otherwise), scaled by
  n / n_run under ``gather`` and ``allgather`` (it decodes one message per worker) and constant under
  ``allreduce`` — its idle time before the collectives (``wait_up`` + ``wait_down``: waiting for the
  slowest rank, and for the server step) and hpcgc's bookkeeping (``other``); both assumed
  independent of the bandwidth and of n;
- a, b, g: the coefficients of the collectives the run issues per iteration, with the run's message
  sizes (bytes each worker handed to MPI, from the transport's ledger), in MPICH's algorithms
  (:mod:`hpcgc.analysis.costmodels`, Thakur, Rabenseifner & Gropp 2005):

  ``gather``    MPI_Gather of the 4-byte lengths + MPI_Gatherv of (n − 1) payloads into the root,
                then MPI_Bcast of the iterate (a compressed downlink: an 8-byte header + the payload)
  ``allreduce`` ``exchange_rounds`` MPI_Allreduce calls of the worker's vectors (PowerSGD: 2)
  ``allgather`` MPI_Allgather of the lengths + MPI_Allgatherv of the payloads
  ``reduce-scatter`` MPI_Alltoall of the segment lengths + MPI_Alltoallv of the compressed segments,
                MPI_Allgather of the lengths + MPI_Allgatherv of the re-compressed reduced segments
                (:mod:`hpcgc.analysis.reducescatter`).

The baseline b is the fastest uncompressed-equivalent Allreduce among fp16, bf16 and float32 that
reaches the target (:mod:`hpcgc.analysis.baselines`; a 16-bit one modelled from the float32 run when
there is no fp16/bf16 run, labelled so), the float32 one a second line. T is affine in β for fixed
n, so a method m beats the baseline b where ΔP + ΔQ·β < 0, with P = K(c + aα + gγ), Q = K·b: the
**break-even bandwidth** 1/β* with β* = ΔP / (−ΔQ) is exact, not read off a grid
(:func:`break_even`). α comes from a ``bench collectives`` file (each collective's fitted latency
divided by its model's latency coefficient at the file's rank count; the median over collectives)
or ``--latency-us``. Documented in ``docs/breakeven.md``; the formulas in ``docs/cost-models.md``.
"""
from __future__ import annotations

import argparse
import math
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..collectives import format_bytes
from . import baselines, tables
from . import costmodels as cm
from .projection import LENGTH_BYTES, first_reached
from .reducescatter import RS_COLLECTIVE, RS_OPS, rs_messages, rs_op_coefficients, rs_stage_bytes

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


# -- what a run measured ---------------------------------------------------------------------------
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


@dataclass
class MethodModel:
    """One method's measured quantities per iteration, and its modelled time to target."""
    label: str
    panel: tuple
    ranks: int                 # the run's n (MPI processes)
    collective: str
    iterations: float          # to target, mean over seeds (NaN: some seed never reached it)
    reached: str               # "seeds reached / seeds"
    workers: float             # seconds per iteration: rank 0's grad + compress (mean after the first)
    server: float              # seconds per iteration: rank 0's server phase at the run's n
    up_bytes: float            # bytes per worker per iteration handed to MPI on the uplink
    down_bytes: float = 0.0    # bytes broadcast per iteration (Bcast buffers, once each)
    rounds: int = 1            # MPI_Allreduce calls per iteration
    down_bcasts: int = 1       # Bcasts per iteration (2 with a compressed downlink)
    baseline: bool = False
    runs: list = field(default_factory=list, repr=False)
    idle: float = 0.0          # seconds per iteration: rank 0's wait_up + wait_down
    other: float = 0.0         # seconds per iteration: rank 0's bookkeeping (``other``)
    precision: str = ""        # an uncompressed-equivalent Allreduce's wire type (baselines.precision_of)
    modelled: bool = False     # a baseline modelled from another run (baselines.modelled_16bit)

    def compute(self, n) -> np.ndarray:
        """Seconds per iteration that are not transfers, at n processes: compute (the server's decoding
        ∝ n, except under Allreduce), idle and bookkeeping."""
        n = np.asarray(n, dtype=float)
        scale = 1.0 if self.collective in ("allreduce", RS_COLLECTIVE) else n / self.ranks
        return self.workers + self.server * scale + self.idle + self.other

    def messages(self) -> list[tuple[str, float, int]]:
        """(op, bytes per rank, calls) of one iteration (:func:`iteration_messages`)."""
        return iteration_messages(self.collective, self.up_bytes, self.down_bytes, self.rounds, self.down_bcasts)

    def coefficients(self, n):
        """(a, b, g) per iteration: communication = a·α + b·β + g·γ at n processes."""
        return exchange_coefficients(self.collective, self.up_bytes, self.down_bytes, n,
                                     self.rounds, self.down_bcasts)

    def affine(self, n, alpha: float, gamma: float = 0.0):
        """(P, Q) with time to target T = P + Q·β at n processes."""
        a, b, g = self.coefficients(n)
        return self.iterations * (self.compute(n) + a * alpha + g * gamma), self.iterations * b

    def time(self, n, alpha: float, beta, gamma: float = 0.0) -> np.ndarray:
        """Modelled seconds to target at n processes, latency α (s), inverse bandwidth β (s/B)."""
        p, q = self.affine(n, alpha, gamma)
        return p + q * np.asarray(beta, dtype=float)


def _add(*terms):
    return tuple(sum(x) for x in zip(*terms))


def op_coefficients(op: str, nbytes, n):
    """(a, b, g) of one operation as hpcgc issues it (and ``bench collectives`` measures it), with
    ``nbytes`` the bytes per rank: ``gather`` = MPI_Gather of the 4-byte lengths + MPI_Gatherv of
    (n − 1) payloads of ``nbytes``; ``allgather`` = MPI_Allgather of the lengths + MPI_Allgatherv;
    ``bcast``, ``allreduce`` = the one call. MPICH's algorithm selection (``auto``)."""
    nbytes = np.asarray(nbytes, dtype=float)
    n = np.asarray(n)
    if op == "gather":
        return _add(cm.coefficients("gather", LENGTH_BYTES, n), cm.coefficients("gatherv", (n - 1) * nbytes, n))
    if op == "allgather":
        return _add(cm.coefficients("allgather", LENGTH_BYTES, n), cm.coefficients("allgather", nbytes, n))
    if op in ("bcast", "allreduce", "alltoall", "alltoallv"):
        return cm.coefficients(op, nbytes, n)
    if op in RS_OPS:
        return rs_op_coefficients(op, nbytes, n)
    raise ValueError(f"unknown operation {op!r}")


def iteration_messages(collective: str, up_bytes, down_bytes, rounds: int = 1,
                       down_bcasts: int = 1) -> list[tuple[str, float, int]]:
    """The operations of one iteration of a run under ``collective``, as ``bench collectives``
    measures them: ``[(op, bytes per rank, calls), ...]`` with ``op`` one of ``allreduce``,
    ``allgather``, ``gather``, ``bcast``; ``up_bytes``: what each worker hands to MPI per iteration
    (under gather/allgather the 4-byte length word included), ``down_bytes``: the Bcast buffers of
    the iteration (a compressed downlink: an 8-byte header, then the payload)."""
    if collective == "allreduce":
        return [("allreduce", float(up_bytes) / rounds, rounds)]
    if collective == RS_COLLECTIVE:
        return rs_messages(up_bytes, down_bytes)
    payload = max(float(up_bytes) - LENGTH_BYTES, 0.0)
    if collective == "allgather":
        return [("allgather", payload, 1)]
    if collective != "gather":
        raise ValueError(f"unknown collective {collective!r}")
    down = ([("bcast", float(down_bytes), 1)] if down_bcasts == 1 else
            [("bcast", float(HEADER_BYTES), 1), ("bcast", max(float(down_bytes) - HEADER_BYTES, 0.0), 1)])
    return [("gather", payload, 1), *down]


def exchange_parts(collective: str, up_bytes, down_bytes, n, rounds: int = 1, down_bcasts: int = 1):
    """The cost-model coefficients of one iteration at n processes, per operation:
    ``[(op, (a, b, g)), ...]`` — :func:`op_coefficients` of each of :func:`iteration_messages`,
    times its calls, summed per operation."""
    parts: dict = {}
    for op, nbytes, calls in iteration_messages(collective, up_bytes, down_bytes, rounds, down_bcasts):
        abg = tuple(calls * c for c in op_coefficients(op, nbytes, n))
        parts[op] = _add(parts[op], abg) if op in parts else abg
    return list(parts.items())


def exchange_coefficients(collective: str, up_bytes, down_bytes, n, rounds: int = 1, down_bcasts: int = 1):
    """(a, b, g) of one iteration of a run under ``collective`` at n processes (the sum of
    :func:`exchange_parts`)."""
    return _add(*(abg for _, abg in exchange_parts(collective, up_bytes, down_bytes, n, rounds, down_bcasts)))


def measure_run(ri, target: Target) -> dict:
    """One run's iterations to target, rank 0's per-iteration means (:func:`rank0_means`) and bytes
    per iteration."""
    r = ri.run
    collective = r.attrs.get("collective", "gather")
    ph = rank0_means(r)
    it = np.asarray(r.series["iteration"])
    k = max(int(it[-1]), 1)
    wire = np.asarray(r.series.get("bits_up_wire", np.zeros((len(it), 1))), dtype=float)
    crossed = np.asarray(r.workers.get("crossed_network", []), dtype=bool)
    if crossed.size != wire.shape[1] or not crossed.any():
        crossed = np.ones(wire.shape[1], dtype=bool)
    up = float(wire[-1, crossed].mean() / 8 / k) if wire.size else 0.0
    down = float(np.asarray(r.series.get("bits_down_wire", [0.0]), dtype=float)[-1] / 8 / k)
    if collective == RS_COLLECTIVE:              # up, down: the two stages' whole compressed vectors
        up, down = rs_stage_bytes(r, up, k, crossed, ri.ranks)
    t = first_reached(run_target_series(ri, target), target.eps)
    return {"iterations": float(it[t]) if t is not None else float("nan"),
            "workers": ph["grad"] + ph["compress"], "server": ph["server"],
            "idle": ph["wait_up"] + ph["wait_down"], "other": ph["other"], "first": ph["first"],
            "up": up, "down": down, "collective": collective,
            "rounds": int(r.attrs.get("exchange_rounds", 1)),
            "down_bcasts": 1 if r.attrs.get("downlink", "dense") == "dense" else 2}


def is_baseline(ri) -> bool:
    """An uncompressed-equivalent Allreduce: identity (float32, float64) or its fp16/bf16 cast under
    ``run.collective = "allreduce"`` (:func:`hpcgc.analysis.baselines.run_precision`)."""
    return baselines.run_precision(ri) is not None


def _label(label: str) -> str:
    """The method's label without the ``collective=...`` that :func:`tables.methods` adds (the
    collective is a column of its own here)."""
    label = re.sub(r"(?<=[(, ])collective=[a-z-]+(, )?", "", label)
    return re.sub(r"\s*\((, )?\)|, \)", lambda mt: "" if "(" in mt.group(0) else ")", label).strip()


def method_models(coll, target: Target) -> list[MethodModel]:
    out = []
    for m in tables.methods(coll):
        per = [measure_run(ri, target) for ri in m.runs]
        its = [p["iterations"] for p in per]
        reached = sum(1 for v in its if math.isfinite(v))
        mean = {key: float(np.mean([p[key] for p in per]))
                for key in ("workers", "server", "idle", "other", "up", "down")}
        out.append(MethodModel(
            label=_label(m.label), panel=m.panel, ranks=m.ranks, collective=per[0]["collective"],
            iterations=float(np.mean(its)) if reached == len(its) else float("nan"),
            reached=f"{reached}/{len(its)}", workers=mean["workers"], server=mean["server"],
            up_bytes=mean["up"], down_bytes=mean["down"], rounds=per[0]["rounds"],
            down_bcasts=per[0]["down_bcasts"], baseline=is_baseline(m.runs[0]), runs=m.runs,
            idle=mean["idle"], other=mean["other"], precision=baselines.run_precision(m.runs[0]) or ""))
    seen: dict = {}
    for mm in out:
        seen.setdefault((mm.panel, mm.label), []).append(mm)
    for same in seen.values():           # methods that differ only by their collective
        if len(same) > 1:
            for mm in same:
                mm.label += f" via {mm.collective}"
    return out


# -- the break-even bandwidth ----------------------------------------------------------------------
@dataclass(frozen=True)
class BreakEven:
    """Where method m beats the baseline: ``kind`` is ``below`` (bandwidths below ``gbps``),
    ``above`` (above it), ``always``, ``never``, ``baseline`` or ``unreached``."""
    kind: str
    gbps: float = float("nan")

    def text(self, lo: float | None = None, hi: float | None = None) -> str:
        if self.kind in ("below", "above"):
            s = f"{self.kind} {self.gbps:.3g} Gb/s"
            if lo is not None and hi is not None and not lo <= self.gbps <= hi:
                s += " (outside the sweep)"
            return s
        return {"unreached": "target not reached"}.get(self.kind, self.kind)


def break_even(pm: float, qm: float, pb: float, qb: float) -> BreakEven:
    """From T_m = pm + qm·β and T_b = pb + qb·β (β > 0: seconds per byte): where T_m < T_b.

    ΔP = pm − pb, ΔQ = qm − qb. ΔQ < 0 (m moves fewer bytes): m wins for β > ΔP/(−ΔQ), i.e. below
    the bandwidth (−ΔQ)/ΔP, and at every bandwidth when ΔP ≤ 0. ΔQ > 0: m wins only above the
    bandwidth ΔQ/(−ΔP), when ΔP < 0. ΔQ = 0: everywhere or nowhere."""
    if not all(math.isfinite(v) for v in (pm, qm)):
        return BreakEven("unreached")
    dp, dq = pm - pb, qm - qb
    if dq < 0:
        return BreakEven("always") if dp <= 0 else BreakEven("below", float(beta_to_gbps(dp / -dq)))
    if dq > 0:
        return BreakEven("above", float(beta_to_gbps(-dp / dq))) if dp < 0 else BreakEven("never")
    return BreakEven("always") if dp < 0 else BreakEven("never")


def method_break_even(m: MethodModel, base: MethodModel, n: int, alpha: float, gamma: float = 0.0) -> BreakEven:
    if m is base:
        return BreakEven("baseline")
    pm, qm = m.affine(n, alpha, gamma)
    pb, qb = base.affine(n, alpha, gamma)
    return break_even(float(pm), float(qm), float(pb), float(qb))


# -- α from a collectives file ---------------------------------------------------------------------
@dataclass
class Latency:
    alpha: float                      # seconds, point to point
    source: str
    machine_gbps: float = float("nan")  # the file's point-to-point bandwidth estimate (median)
    ranks: int | None = None
    notes: list = field(default_factory=list)
    per_op: dict = field(default_factory=dict)   # op -> (α, β) point to point from that op's own fit (None: not > 0)
    measured: dict = field(default_factory=dict)  # op -> (sizes, mean seconds) as measured by the file


def latency_from_collectives(path, require_alpha: bool = True) -> Latency:
    """Point-to-point α (and bandwidth) from each collective's fit t(s) = α_c + β_c·s in a ``bench
    collectives`` file: α = α_c / a(0, n_file), β = β_c / (∂b/∂s at the largest size), a, b the model's
    coefficients of that operation (:func:`op_coefficients`); the median over collectives.
    ``require_alpha=False`` (α given by ``--latency-us``): a file where no fit has α > 0 still
    gives its β and its measured table (α is then NaN)."""
    from hpcgc import results
    try:
        res = results.load_collectives(path)
    except (results.ResultsFormatError, OSError) as exc:
        raise BreakEvenError(f"--collectives {path}: {exc}") from None
    n = int(res.attrs.get("world_size", 0) or 0)
    if n < 2:
        raise BreakEvenError(f"--collectives {path}: measured on {n} rank(s); the fit needs at least 2")
    alphas, betas, notes = {}, {}, []
    for op, tb in res.items():
        a0 = float(op_coefficients(op, 0.0, n)[0])
        s = float(np.max(tb.size))
        slope = float(op_coefficients(op, s, n)[1] - op_coefficients(op, 0.0, n)[1]) / s
        if math.isfinite(tb.alpha) and tb.alpha > 0 and a0 > 0:
            alphas[op] = tb.alpha / a0
        else:
            notes.append(f"{path}: {op}: fitted α = {tb.alpha!r} s is not > 0; not used for α")
        if math.isfinite(tb.beta) and tb.beta > 0 and slope > 0:
            betas[op] = tb.beta / slope
    if not alphas and require_alpha:
        raise BreakEvenError(f"--collectives {path}: no collective has a latency α > 0 (fitted: " +
                             ", ".join(f"{op} {tb.alpha:g} s" for op, tb in res.items()) +
                             "); measure again or give --latency-us")
    alpha = float(np.median(list(alphas.values()))) if alphas else float("nan")
    src = (f"{path} (n = {n}): median of " +
           ", ".join(f"{op} {a * 1e6:.3g} µs" for op, a in alphas.items()))
    gb = float(beta_to_gbps(np.median(list(betas.values())))) if betas else float("nan")
    per_op = {op: (alphas.get(op), betas.get(op)) for op in {*alphas, *betas}}
    measured = {op: (np.asarray(tb.size, float), np.asarray(tb.avg, float)) for op, tb in res.items()}
    return Latency(alpha, src, gb, n, notes, per_op, measured)


# -- the report ------------------------------------------------------------------------------------
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
        choice = baselines.choose(ms, target, beta_ref, latency.alpha, gamma)
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


# -- the spread over a method's runs ----------------------------------------------------------------
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

    from .spread import spread
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
    from .spread import describe
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


# -- the model checked against measured runs --------------------------------------------------------
CHECK_TOLERANCE = 0.25          # |measured / predicted − 1| above this is marked
CHECK_COLUMNS = ("panel", "method", "collective", "ranks", "run_id", "up_to", "iterations",
                 "measured_s", "predicted_s", "ratio", "mark", "ratio_after_first", "predicted_s_global_fit",
                 "ratio_global_fit", "predicted_s_median_ab", "ratio_median_ab",
                 "predicted_s_measured_collectives", "ratio_measured_collectives", "compute_s", "idle_s", "other_s",
                 "first_iteration_s", "alpha_beta")
CHECK_MD_COLUMNS = ("method", "collective", "ranks", "up_to", "iterations", "measured_s", "predicted_s",
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
    return iterations * (float(m.compute(m.ranks)) + comm)


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
    return iterations * (float(m.compute(m.ranks)) + comm)


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
    return iterations * (float(m.compute(m.ranks)) + comm)


def measured_run_time(run, row: int) -> float:
    """Measured seconds up to result row ``row``: rank 0's cumulative ``iter`` time (the sum of its
    per-iteration wall-clocks, ``time/iter``), i.e. the iteration loop without the evaluations,
    recording and HDF5 writing, which are outside every phase (docs/results.md, Phases)."""
    from .projection import costs
    return float(costs(run).measured[row])


def _ratio(measured: float, predicted: float) -> float:
    return measured / predicted if predicted > 0 else float("nan")


def check(models: list[MethodModel], target: Target, latency: Latency, gamma: float = 0.0) -> list[dict]:
    """Model against measurement, run by run: the predicted time to target at the run's own n (its
    iterations to target, rank 0's measured non-transfer time per iteration, its message sizes, the collectives file's α, β
    per operation) next to the measured one (:func:`measured_run_time`), and their ratio. A run that
    never reached the target is compared over all its iterations (``up_to`` says which)."""
    rows = []
    for m in models:
        for ri in m.runs:
            p = measure_run(ri, target)
            r = ri.run
            it = np.asarray(r.series["iteration"])
            t = first_reached(run_target_series(ri, target), target.eps)
            row = t if t is not None else len(it) - 1
            k = float(it[row])
            one = MethodModel(m.label, m.panel, m.ranks, p["collective"], k, "", p["workers"], p["server"],
                              p["up"], p["down"], p["rounds"], p["down_bcasts"], idle=p["idle"], other=p["other"])
            pred = predicted_run_time_local(one, latency, k)
            pred_glob = predicted_run_time(one, latency, k, gamma)
            pred_med = float(one.time(m.ranks, latency.alpha, gbps_to_beta(latency.machine_gbps), gamma))
            meas = measured_run_time(r, row)
            pred_tab = predicted_run_time_table(one, latency, k)
            ratio = meas / pred if pred > 0 else float("nan")
            first = p["first"]
            after = ((meas - first) / (pred * (k - 1) / k) if k > 1 and pred > 0 and math.isfinite(first)
                     else float("nan"))
            used = []
            for op, nbytes, _ in one.messages():
                fit = local_fit(latency, op, nbytes) if nbytes > 0 else None
                if fit is not None:
                    used.append(fit.text(op, nbytes))
            off = math.isfinite(ratio) and abs(ratio - 1) > CHECK_TOLERANCE
            rows.append({
                "panel": tables.panel_title(m.panel), "method": m.label, "collective": one.collective,
                "ranks": m.ranks, "run_id": r.run_id,
                "up_to": "target" if t is not None else "last row (target not reached)",
                "iterations": int(k), "measured_s": meas, "predicted_s": pred, "ratio": ratio,
                "mark": (f"OFF {100 * (ratio - 1):+.0f} %" if off else "ok") if math.isfinite(ratio) else "?",
                "ratio_after_first": after,
                "predicted_s_global_fit": pred_glob, "ratio_global_fit": _ratio(meas, pred_glob),
                "predicted_s_median_ab": pred_med, "ratio_median_ab": _ratio(meas, pred_med),
                "predicted_s_measured_collectives": pred_tab, "ratio_measured_collectives": _ratio(meas, pred_tab),
                "compute_s": k * (one.workers + one.server), "idle_s": k * one.idle, "other_s": k * one.other,
                "first_iteration_s": first, "alpha_beta": "; ".join(used)})
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


def markdown(rep: Report) -> str:
    chosen = "; ".join(f"{tables.panel_title(p)}: {c.how}" for p, c in rep.choices.items())
    head = (f"Break-even against the fastest uncompressed-equivalent Allreduce (fp16, bf16 or fp32) that reaches "
            f"the target, time to {rep.target.describe()} — {chosen}; columns *_fp32: against the float32 "
            f"Allreduce (the second line). α = {rep.latency.alpha * 1e6:.3g} µs ({rep.latency.source}), bandwidth "
            f"swept {rep.gbps[0]:g}–{rep.gbps[-1]:g} Gb/s; n = {N_REFERENCE} and {N_LARGE} projected; "
            f"break-even = the bandwidth below which the method is faster")
    return tables.markdown_table(rep.rows, MD_COLUMNS, title=head)


# -- command line ------------------------------------------------------------------------------------
def build_parser():
    p = argparse.ArgumentParser(
        prog="hpcgc breakeven",
        description="For every method of an experiment (algorithm × compressor × collective): the modelled "
                    "time to the experiment's target against the link bandwidth, and the break-even bandwidth "
                    "below which the method beats the fastest uncompressed-equivalent Allreduce that reaches the "
                    "target among identity:fp16, identity:bf16 and identity (float32) under run.collective = "
                    "\"allreduce\" (16 bits by default; without an fp16/bf16 run the 16-bit one is modelled "
                    "from the float32 run - its iterations and compute, half its bytes - and labelled "
                    "'modelled'; the float32 one is a second set of columns, *_fp32), at the runs' rank "
                    "count and at n = 128 and 1024. The model: the "
                    "runs' measured time per iteration outside the transfers (compute, idle, bookkeeping: rank 0's "
                    "means after the first iteration) and iterations to target, and MPICH's "
                    "collective algorithms (Thakur, Rabenseifner & Gropp 2005) with the runs' message sizes "
                    "and the latency α of a `bench collectives` file. docs/breakeven.md, docs/cost-models.md.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="outputs (in -o DIR): breakeven.md and breakeven.csv (one row per method: the break-even at the\n"
               "runs' n, 128 and 1024 against the baseline - column 'baseline': fp16, bf16, fp32 or 'fp16 (modelled)'\n"
               "- and, columns *_fp32, against the float32 Allreduce), breakeven-n.csv (the\n"
               "break-even bandwidth for n = 2, 4, ... n-max), breakeven-<panel>.png (time to target against\n"
               "bandwidth, the baseline dashed black) and breakeven-n-<panel>.png (break-even against n).\n"
               "With --collectives also check.csv (and a second table in breakeven.md): the model checked\n"
               "against every run - predicted time to target at the run's own n with each collective's own\n"
               "α, β from the file, the measured one (rank 0's summed per-iteration time/iter up to the first\n"
               "row at the target, evaluation excluded), measured/predicted, OFF where off by > 25 %.\n\n"
               "assumed: iterations to target do not change with n; compute per worker does not change with n\n"
               "(the server's decoding grows ∝ n under gather and allgather); no contention, no overlap; a\n"
               "modelled 16-bit baseline has the float32 run's iterations and compute.\n\n"
               "spread: over each method's runs (run.repeats and/or seeds), the median and 95 % interval\n"
               "(order statistics of the median; [min, max] below 6 runs) of iterations to target and compute\n"
               "per iteration; the break-even bandwidth's interval and the modelled time's come from those\n"
               "(method fast vs baseline slow and the reverse); 'measurably faster' = the intervals do not\n"
               "overlap (second table of breakeven.md, columns *_lo/*_hi/*_interval of breakeven.csv).\n\n"
               "example:\n"
               "  mpiexec -n 4 hpcgc collectives --max-size 64M -o coll.h5\n"
               "  hpcgc breakeven results/does-it-pay.h5 --collectives coll.h5 -o breakeven/\n\n"
               "exit status 2 on bad input (α or β not finite and > 0, an empty sweep, no common target,\n"
               "no uncompressed-equivalent Allreduce baseline).")
    p.add_argument("results", nargs="+", help="results files (.h5, .h5.partial) and/or directories of them")
    p.add_argument("--collectives", metavar="COLL.h5",
                   help="a `hpcgc collectives` file: α (point to point) = each collective's fitted latency "
                        "divided by its model's latency term, median over the collectives (required unless "
                        "--latency-us)")
    p.add_argument("--latency-us", type=float, default=None, metavar="A",
                   help="α in microseconds (overrides the collectives file's)")
    p.add_argument("--bandwidth", type=float, nargs=2, default=(0.1, 400.0), metavar=("MIN", "MAX"),
                   help="bandwidth sweep in Gb/s (default 0.1 400)")
    p.add_argument("--points", type=int, default=200, help="points of the sweep, log-spaced (default 200)")
    p.add_argument("--n-max", type=int, default=1024, help="largest rank count of the n sweep (default 1024)")
    p.add_argument("--eps", type=float, default=None,
                   help="target (default: the runs' common run.tolerance on their stop measure)")
    p.add_argument("--metric", choices=("suboptimality", "grad_ratio"), default=None,
                   help="target measure: f − f*, or ‖∇f‖²/‖∇f(x⁰)‖² (default: the runs' stop measure)")
    p.add_argument("--accuracy-within", type=float, default=None, metavar="POINTS",
                   help="target: test accuracy within POINTS percentage points of the final test accuracy of "
                        "the panel's uncompressed float32 Allreduce run (e.g. 0.5; needs data.test_fraction > 0; "
                        "read from the recorded series, replaces --eps/--metric)")
    p.add_argument("--gamma-ns", type=float, default=0.0,
                   help="γ, reduction time per byte in ns, for MPI_Allreduce (default 0: not modelled)")
    p.add_argument("-o", "--out", metavar="DIR", default="breakeven",
                   help="output directory (default ./breakeven)")
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        gbps = bandwidth_sweep(args.bandwidth[0], args.bandwidth[1], args.points)
        if args.latency_us is not None:
            if not (math.isfinite(args.latency_us) and args.latency_us > 0):
                raise BreakEvenError(f"--latency-us {args.latency_us!r}: α must be finite and > 0")
            latency = Latency(args.latency_us * 1e-6, "--latency-us")
            if args.collectives:
                other = latency_from_collectives(args.collectives, require_alpha=False)
                latency.machine_gbps, latency.ranks, latency.measured = other.machine_gbps, other.ranks, other.measured
        elif args.collectives:
            latency = latency_from_collectives(args.collectives)
        else:
            raise BreakEvenError("give --collectives COLL.h5 (measured with `mpiexec -n N hpcgc collectives`) "
                                 "or --latency-us")
        rep = build(args.results, latency, gbps, args.n_max, args.eps, args.metric, args.gamma_ns * 1e-9,
                    args.accuracy_within)
    except tables.AnalysisError as exc:
        print(f"hpcgc: error: breakeven: {exc}", file=sys.stderr)
        return 2
    for note in rep.notes:
        print(f"# {note}" if note.startswith("warning") else f"# note: {note}", file=sys.stderr)
    md = markdown(rep) + "\n\n" + spread_markdown(rep)
    checked = []
    if latency.per_op or math.isfinite(latency.machine_gbps):      # β known: a collectives file was given
        checked = check(rep.models, rep.target, latency, rep.gamma)
        md += "\n\n" + check_markdown(checked, rep.target, latency)
    print(md)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if checked:
        tables.write_csv(out / "check.csv", checked, CHECK_COLUMNS)
    tables.write_csv(out / "breakeven.csv", rep.rows, COLUMNS)
    tables.write_csv(out / "breakeven-n.csv", rep.n_rows, N_COLUMNS)
    (out / "breakeven.md").write_text(md + "\n")
    figs = figures(rep, out)
    print(f"# wrote {out / 'breakeven.md'}, {out / 'breakeven.csv'}, {out / 'breakeven-n.csv'}, "
          + (f"{out / 'check.csv'}, " if checked else "")
          + ", ".join(str(f) for f in figs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
