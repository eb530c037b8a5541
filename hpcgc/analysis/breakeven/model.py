"""The model T(α, β, n) = K·(c(n) + a(n)·α + b(n)·β + g(n)·γ) of a method (:class:`MethodModel`), the
collectives' coefficients, the exact break-even bandwidth, and α from a collectives file.

Part of :mod:`hpcgc.analysis.breakeven` (the model and its documentation are in its docstring).
"""
from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass, field

import numpy as np

from .. import baselines, tables
from .. import costmodels as cm
from ..projection import LENGTH_BYTES, first_reached
from ..reducescatter import RS_COLLECTIVE, RS_OPS, rs_messages, rs_op_coefficients, rs_stage_bytes
from .measure import HEADER_BYTES, BreakEvenError, Target, beta_to_gbps, rank0_means, run_target_series


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
    rounds: int = 1            # MPI_Allreduce calls per iteration (run.overlap: buckets, Allreduce or Allgather)
    down_bcasts: int = 1       # Bcasts per iteration (2 with a compressed downlink)
    baseline: bool = False
    runs: list = field(default_factory=list, repr=False)
    idle: float = 0.0          # seconds per iteration: rank 0's wait_up + wait_down
    other: float = 0.0         # seconds per iteration: rank 0's bookkeeping (``other``)
    precision: str = ""        # an uncompressed-equivalent Allreduce's wire type (baselines.precision_of)
    dense_bytes: float = 0.0   # the uncompressed float64 vector (8·d): what a node reduces in a hierarchical exchange
    modelled: bool = False     # a baseline modelled from another run (baselines.modelled_16bit)
    hide: float = 0.0          # run.overlap: seconds per iteration of backward pass after the first bucket's
    #                            start (the run's overlap_window_seconds), which hides communication

    def paid(self, comm):
        """The communication an iteration pays: all of it, or with ``run.overlap`` the exchange time
        that exceeds the remaining backward time, max(0, comm − H) (DDP's buckets; docs/breakeven.md)."""
        return np.maximum(np.asarray(comm, dtype=float) - self.hide, 0.0) if self.hide > 0 else comm

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
        """Modelled seconds to target at n processes, latency α (s), inverse bandwidth β (s/B);
        with overlap (``hide`` > 0) K·(c + max(0, aα + bβ + gγ − H)): piecewise affine in β."""
        if self.hide > 0:
            a, b, g = self.coefficients(n)
            comm = a * alpha + b * np.asarray(beta, dtype=float) + g * gamma
            return self.iterations * (self.compute(n) + self.paid(comm))
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
    if collective == "allgather":
        # run.overlap: one Allgather of a fixed-size slot per bucket (its 4-byte length inside), priced
        # as the announced Allgather(v) the collectives file measures: one 4-byte Allgather too many per bucket
        return [("allgather", max(float(up_bytes) / rounds - LENGTH_BYTES, 0.0), rounds)]
    payload = max(float(up_bytes) / rounds - LENGTH_BYTES, 0.0)      # run.overlap: one Gather per bucket
    if collective != "gather":
        raise ValueError(f"unknown collective {collective!r}")
    down = ([("bcast", float(down_bytes), 1)] if down_bcasts == 1 else
            [("bcast", float(HEADER_BYTES), 1), ("bcast", max(float(down_bytes) - HEADER_BYTES, 0.0), 1)])
    return [("gather", payload, rounds), *down]


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


def exchange_ranks(ri) -> int:
    """The processes of a run's collective: its ranks, or under ``run.topology = "hierarchical"`` its
    nodes (the leaders run the collective)."""
    if ri.run.attrs.get("topology", "flat") == "hierarchical":
        return int(ri.run.attrs.get("nodes", ri.ranks) or ri.ranks)
    return ri.ranks


def _ledger_ranks(ri, crossed):
    """The ranks whose per-collective ledger (``mpi_bytes/``, one column per world rank) counts the
    run's collective: the workers in ``crossed``; under ``run.topology = "hierarchical"`` the workers
    are the node leaders, so the mask is spread onto their world ranks (``workers/rank``)."""
    if exchange_ranks(ri) == ri.ranks:
        return crossed
    where = np.asarray(ri.run.workers.get("rank", []), dtype=int)
    if where.size != crossed.size:
        return crossed
    out = np.zeros(ri.ranks, dtype=bool)
    out[where[crossed]] = True
    return out


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
        up, down = rs_stage_bytes(r, up, k, _ledger_ranks(ri, crossed), exchange_ranks(ri))
    t = first_reached(run_target_series(ri, target), target.eps)
    buckets = int(r.attrs.get("overlap_buckets", 0))      # run.overlap: one Iallreduce / Iallgather per bucket
    hide = float(r.attrs.get("overlap_window_seconds", 0.0)) if buckets else 0.0
    return {"iterations": float(it[t]) if t is not None else float("nan"),
            "workers": ph["grad"] + ph["compress"], "server": ph["server"],
            "idle": ph["wait_up"] + ph["wait_down"], "other": ph["other"], "first": ph["first"],
            "up": up, "down": down, "collective": collective, "hide": hide if math.isfinite(hide) else 0.0,
            "rounds": buckets or int(r.attrs.get("exchange_rounds", 1)),
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
                for key in ("workers", "server", "idle", "other", "up", "down", "hide")}
        out.append(MethodModel(
            label=_label(m.label), panel=m.panel, ranks=m.ranks, collective=per[0]["collective"],
            iterations=float(np.mean(its)) if reached == len(its) else float("nan"),
            reached=f"{reached}/{len(its)}", workers=mean["workers"], server=mean["server"],
            up_bytes=mean["up"], down_bytes=mean["down"], rounds=per[0]["rounds"],
            down_bcasts=per[0]["down_bcasts"], baseline=is_baseline(m.runs[0]), runs=m.runs,
            idle=mean["idle"], other=mean["other"], precision=baselines.run_precision(m.runs[0]) or "",
            dense_bytes=8.0 * float(m.runs[0].run.attrs.get("d", 0) or 0), hide=mean["hide"]))
    seen: dict = {}
    for mm in out:
        seen.setdefault((mm.panel, mm.label), []).append(mm)
    for same in seen.values():           # methods that differ only by their collective
        if len(same) > 1:
            for mm in same:
                mm.label += f" via {mm.collective}"
    return out


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
    if m.hide > 0 or base.hide > 0:
        return overlapped_break_even(m, base, n, alpha, gamma)
    pm, qm = m.affine(n, alpha, gamma)
    pb, qb = base.affine(n, alpha, gamma)
    return break_even(float(pm), float(qm), float(pb), float(qb))


def _kink(mm: MethodModel, n, alpha: float, gamma: float) -> float:
    """The β > 0 where an overlapped method's communication aα + bβ + gγ reaches its window H (NaN: none)."""
    a, b, g = (float(v) for v in mm.coefficients(n))
    if mm.hide <= 0 or b <= 0:
        return float("nan")
    beta = (mm.hide - a * alpha - g * gamma) / b
    return beta if beta > 0 else float("nan")


def _piece(mm: MethodModel, n, alpha: float, gamma: float, beta: float) -> tuple[float, float]:
    """(P, Q) of T = P + Q·β on the piece of β that holds ``beta``: K·c and 0 while the overlapped
    communication fits in the window H, else K(c + aα + gγ − H) and K·b (H = 0 without overlap)."""
    a, b, g = (float(v) for v in mm.coefficients(n))
    c, fixed = float(mm.compute(n)), a * alpha + g * gamma
    if mm.hide > 0 and fixed + b * beta <= mm.hide:
        return mm.iterations * c, 0.0
    return mm.iterations * (c + fixed - max(mm.hide, 0.0)), mm.iterations * b


def overlapped_break_even(m: MethodModel, base: MethodModel, n: int, alpha: float, gamma: float = 0.0) -> BreakEven:
    """:func:`break_even` when either side overlaps (``hide`` > 0): T is then affine in β on each
    side of its kink (where its communication equals H), so the difference is affine between the
    (at most two) kinks; each piece is solved exactly as :func:`break_even` does. One crossing gives
    ``below``/``above`` as there; two (a method that wins in a band only) the first where the
    method wins towards lower bandwidths."""
    if not math.isfinite(m.iterations):
        return BreakEven("unreached")
    kinks = sorted(k for k in (_kink(m, n, alpha, gamma), _kink(base, n, alpha, gamma)) if math.isfinite(k))
    edges = [0.0, *kinks, math.inf]
    roots, sign = [], None
    for lo, hi in itertools.pairwise(edges):
        at = 0.5 * (lo + hi) if math.isfinite(hi) else (2.0 * lo if lo > 0 else 1e-9)
        (pm, qm), (pb, qb) = _piece(m, n, alpha, gamma, at), _piece(base, n, alpha, gamma, at)
        dp, dq = pm - pb, qm - qb
        sign = dp + dq * at < 0 if sign is None else sign
        if dq != 0 and lo < -dp / dq < hi:
            roots.append((-dp / dq, dq))
    if not roots:
        return BreakEven("always" if sign else "never")
    root, dq = next((r for r in roots if r[1] < 0), roots[-1])
    return BreakEven("below" if dq < 0 else "above", float(beta_to_gbps(root)))


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
    return latency_from_tables(res, n, str(path), require_alpha)


def latency_from_tables(res, n: int, path: str, require_alpha: bool = True) -> Latency:
    """:func:`latency_from_collectives` of the tables ``res`` (``{op: CollectiveTable}``) measured on
    ``n`` ranks; ``path`` names them in messages (a file, or a file's level)."""
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
