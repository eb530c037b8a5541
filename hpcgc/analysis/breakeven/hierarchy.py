"""Flat against hierarchical on nodes of several ranks: the two-level model of ``hpcgc breakeven``.

With K ranks per node and n = N·K ranks, a method's time per iteration is modelled two ways
(``docs/breakeven.md``, "Ranks per node"; the formulas in ``docs/cost-models.md``):

* **flat**: the method's collectives on all n ranks, every message priced at the network's α, β
  (:meth:`MethodModel.affine` at n) — what runs today, without MPICH's node-aware algorithms and
  without the sharing of one NIC by K ranks;
* **hierarchical**: an uncompressed intra-node MPI_Reduce onto each node's leader and an MPI_Bcast
  back, at the intra-node α, β (:func:`hpcgc.analysis.costmodels.intra_node`), plus the method's own
  collectives among the N leaders at the network's α, β (:meth:`MethodModel.affine` at N: the server
  decodes N messages under gather/allgather). The vector a node reduces and broadcasts is the
  float64 gradient (8·d bytes) for every method, the baseline included — what the hierarchical
  exchange moves inside a node (compression and the wire's cast apply to the leaders' step only).

Both are affine in the network's β, so the break-even bandwidth stays exact (:func:`break_even`).
The intra-node α, β come from a ``bench collectives`` file measured with several ranks per node
(its ``levels/intra`` sweep) or from ``--intra-latency-us`` / ``--intra-gbps``; the network's α
from its ``levels/inter`` sweep (else the report's α).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from .. import costmodels as cm
from .. import tables
from .measure import N_LARGE, N_REFERENCE, BreakEvenError, gbps_to_beta
from .model import MethodModel, break_even, latency_from_tables

HIER_COLUMNS = ("panel", "method", "collective", "ranks", "ranks_per_node", "nodes", "intra_bytes",
                "time_flat_s_at_1Gbps", "time_hier_s_at_1Gbps", "time_flat_s_at_100Gbps", "time_hier_s_at_100Gbps",
                "break_even_hier_run_n", "break_even_gbps_hier_run_n", "break_even_hier_n128",
                "break_even_gbps_hier_n128", "break_even_hier_n1024", "break_even_gbps_hier_n1024",
                "break_even_hier_vs_flat_baseline_run_n", "break_even_gbps_hier_vs_flat_baseline_run_n")
HIER_MD_COLUMNS = ("method", "collective", "ranks", "ranks_per_node", "time_flat_s_at_1Gbps", "time_hier_s_at_1Gbps",
                   "time_flat_s_at_100Gbps", "time_hier_s_at_100Gbps", "break_even_hier_run_n",
                   "break_even_hier_n1024", "break_even_hier_vs_flat_baseline_run_n")


@dataclass
class Levels:
    """The two levels of the model: K ranks per node, the intra-node α (s) and β (s/B), the network's
    α (s); ``source`` says where each came from."""
    ranks_per_node: int
    intra_alpha: float
    intra_beta: float
    inter_alpha: float
    source: str


def levels_from_file(path, ranks_per_node: int | None, intra_latency_us: float | None,
                     intra_gbps: float | None, alpha: float) -> Levels | None:
    """The :class:`Levels` of ``hpcgc breakeven``: K from ``--ranks-per-node`` or the collectives file
    (``ranks_per_node`` when it has ``levels``); the intra-node α, β from the options or the file's
    ``levels/intra``; the network α from its ``levels/inter`` (else ``alpha``). None when K = 1."""
    res = None
    if path is not None:
        from hpcgc import results
        try:
            res = results.load_collectives(path)
        except (results.ResultsFormatError, OSError) as exc:
            raise BreakEvenError(f"--collectives {path}: {exc}") from None
    levels = getattr(res, "levels", {}) or {}
    k = ranks_per_node
    if k is None:
        k = int(res.attrs.get("ranks_per_node", 1) or 1) if res is not None and levels else 1
    if k < 1:
        raise BreakEvenError(f"--ranks-per-node {k}: must be >= 1")
    if k == 1:
        return None
    src = []
    intra = latency_from_tables(levels["intra"], int(levels["intra"].attrs["ranks"]), f"{path} levels/intra",
                                require_alpha=intra_latency_us is None) if "intra" in levels else None
    if intra_latency_us is not None:
        if not (math.isfinite(intra_latency_us) and intra_latency_us > 0):
            raise BreakEvenError(f"--intra-latency-us {intra_latency_us!r}: must be finite and > 0")
        a_in, src = intra_latency_us * 1e-6, [f"intra α {intra_latency_us:g} µs (--intra-latency-us)"]
    elif intra is not None:
        a_in, src = intra.alpha, [f"intra α {intra.alpha * 1e6:.3g} µs ({intra.source})"]
    else:
        raise BreakEvenError(f"--ranks-per-node {k}: the intra-node latency is unknown: give --intra-latency-us and "
                             "--intra-gbps, or a --collectives file measured with several ranks per node "
                             "(docs/collectives.md, 'Two levels')")
    if intra_gbps is not None:
        if not (math.isfinite(intra_gbps) and intra_gbps > 0):
            raise BreakEvenError(f"--intra-gbps {intra_gbps!r}: must be finite and > 0")
        b_in = float(gbps_to_beta(intra_gbps))
        src.append(f"intra {intra_gbps:g} Gb/s (--intra-gbps)")
    elif intra is not None and math.isfinite(intra.machine_gbps):
        b_in = float(gbps_to_beta(intra.machine_gbps))
        src.append(f"intra {intra.machine_gbps:.3g} Gb/s (levels/intra)")
    else:
        raise BreakEvenError(f"--ranks-per-node {k}: the intra-node bandwidth is unknown: give --intra-gbps, or a "
                             "--collectives file measured with several ranks per node")
    a_out, measured = alpha, False
    if "inter" in levels:
        inter = latency_from_tables(levels["inter"], int(levels["inter"].attrs["ranks"]), f"{path} levels/inter",
                                    require_alpha=False)
        if math.isfinite(inter.alpha) and inter.alpha > 0:
            a_out, measured = inter.alpha, True
            src.append(f"network α {a_out * 1e6:.3g} µs ({inter.source})")
    if not measured:
        src.append(f"network α {alpha * 1e6:.3g} µs (the report's)")
    return Levels(k, a_in, b_in, a_out, "; ".join(src))


def intra_bytes(m: MethodModel) -> float:
    """The vector a node reduces (and its leader broadcasts back): the float64 gradient (8·d bytes)
    for every method, the uncompressed baseline included — ``run.topology = "hierarchical"`` reduces
    the node's float64 gradient onto the leader and broadcasts the float64 iterate
    (:mod:`hpcgc.exchange.hierarchical`); the wire's cast applies between the leaders only. Without
    a recorded d (``dense_bytes`` 0), the baseline's own wire vector."""
    return m.dense_bytes if m.dense_bytes > 0 else m.up_bytes / max(m.rounds, 1)


def nodes_of(n: int, k: int) -> int:
    if n % k:
        raise BreakEvenError(f"--ranks-per-node {k} does not divide the rank count {n} (a node holds {k} ranks: "
                             f"n must be a multiple of {k})")
    return n // k


def hierarchical_affine(m: MethodModel, n: int, lv: Levels, gamma: float = 0.0):
    """(P, Q) with the hierarchical time to target T = P + Q·β (β: the network's) on n ranks of
    ``lv.ranks_per_node`` per node: K·(compute at N + leaders' collectives at N + intra-node
    Reduce + Bcast)."""
    nodes = nodes_of(n, lv.ranks_per_node)
    p, q = m.affine(nodes, lv.inter_alpha, gamma)
    intra = float(cm.intra_node(intra_bytes(m), lv.ranks_per_node, lv.intra_alpha, lv.intra_beta, gamma))
    return p + m.iterations * intra, q


def hierarchical_time(m: MethodModel, n: int, lv: Levels, beta, gamma: float = 0.0):
    p, q = hierarchical_affine(m, n, lv, gamma)
    return p + q * beta


def flat_time(m: MethodModel, n: int, lv: Levels, beta, gamma: float = 0.0):
    """The flat model at n ranks, every message at the network's α (``lv.inter_alpha``)."""
    p, q = m.affine(n, lv.inter_alpha, gamma)
    return p + q * beta


def hierarchy_rows(panels: dict, lv: Levels, gamma: float = 0.0, bounds=(None, None)) -> list[dict]:
    """One row per method of every panel (``{panel: (baseline, [models])}``): flat and hierarchical
    times at 1 and 100 Gb/s at the runs' n, the hierarchical break-even against the hierarchical
    baseline at the runs' n, 128 and 1024 ranks, and against the flat baseline at the runs' n."""
    rows = []
    k = lv.ranks_per_node
    for panel, (base, ms) in panels.items():
        title = tables.panel_title(panel)
        for m in ms:
            nodes = nodes_of(m.ranks, k)
            row = {"panel": title, "method": m.label, "collective": m.collective, "ranks": m.ranks,
                   "ranks_per_node": k, "nodes": nodes, "intra_bytes": intra_bytes(m)}
            for g in (1, 100):
                beta = float(gbps_to_beta(g))
                row[f"time_flat_s_at_{g}Gbps"] = float(flat_time(m, m.ranks, lv, beta, gamma))
                row[f"time_hier_s_at_{g}Gbps"] = float(hierarchical_time(m, m.ranks, lv, beta, gamma))
            for col, n in (("run_n", m.ranks), ("n128", N_REFERENCE), ("n1024", N_LARGE)):
                if m is base:
                    text, gb = "baseline", float("nan")
                elif n % k:
                    text, gb = f"n = {n} not a multiple of {k}", float("nan")
                else:
                    be = break_even(*(float(v) for v in (*hierarchical_affine(m, n, lv, gamma),
                                                         *hierarchical_affine(base, n, lv, gamma))))
                    text, gb = be.text(*bounds), be.gbps
                row[f"break_even_hier_{col}"], row[f"break_even_gbps_hier_{col}"] = text, gb
            pf = base.affine(m.ranks, lv.inter_alpha, gamma)
            be = break_even(*(float(v) for v in (*hierarchical_affine(m, m.ranks, lv, gamma), *pf)))
            row["break_even_hier_vs_flat_baseline_run_n"] = be.text(*bounds)
            row["break_even_gbps_hier_vs_flat_baseline_run_n"] = be.gbps
            rows.append(row)
    return rows


def hierarchy_markdown(rows: list, lv: Levels) -> str:
    head = (f"Flat vs hierarchical with {lv.ranks_per_node} ranks per node ({lv.source}): modelled time to "
            f"target; hierarchical = intra-node Reduce + the method's collectives among the nodes' leaders + "
            f"intra-node Bcast; break-even of the hierarchical method against the hierarchical baseline (and "
            f"against the flat baseline)")
    return tables.markdown_table(rows, HIER_MD_COLUMNS, title=head)


@dataclass
class RunLevels:
    """The two levels a ``bench collectives`` file measured with several ranks per node, for the
    check of runs with ``run.topology = "hierarchical"`` (:func:`hpcgc.analysis.breakeven.check.check`):
    ``intra`` the node's communicator (its K ranks), ``inter`` the node leaders' (N ranks), each with its
    own fits and measured table (:class:`~.model.Latency`)."""
    ranks_per_node: int
    nodes: int
    intra: object
    inter: object
    path: str


def run_levels(path) -> RunLevels | None:
    """:class:`RunLevels` of the collectives file ``path`` (None when it has no ``levels/``: measured
    with one rank per node)."""
    if path is None:
        return None
    from hpcgc import results
    try:
        res = results.load_collectives(path)
    except (results.ResultsFormatError, OSError) as exc:
        raise BreakEvenError(f"--collectives {path}: {exc}") from None
    levels = getattr(res, "levels", {}) or {}
    if "intra" not in levels or "inter" not in levels:
        return None
    intra = latency_from_tables(levels["intra"], int(levels["intra"].attrs["ranks"]), f"{path} levels/intra",
                                require_alpha=False)
    inter = latency_from_tables(levels["inter"], int(levels["inter"].attrs["ranks"]), f"{path} levels/inter",
                                require_alpha=False)
    return RunLevels(int(res.attrs.get("ranks_per_node", 1) or 1), int(inter.ranks), intra, inter, str(path))


def run_shape(run) -> tuple[int, int] | None:
    """(nodes, ranks per node) of a run with ``run.topology = "hierarchical"`` (None: flat). A run
    whose nodes hold different rank counts is refused: the check prices one intra-node level."""
    if run.attrs.get("topology", "flat") != "hierarchical":
        return None
    per = [int(v) for v in (run.attrs.get("ranks_per_node") if run.attrs.get("ranks_per_node") is not None
                            else [])]
    nodes = int(run.attrs.get("nodes", len(per)) or len(per))
    if not per or len(set(per)) != 1:
        raise BreakEvenError(f"run {run.run_id}: run.topology = 'hierarchical' with nodes of {per or '?'} ranks; "
                             "the check needs every node to hold the same number of ranks")
    return nodes, per[0]
