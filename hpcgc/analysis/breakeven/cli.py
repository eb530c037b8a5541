"""``hpcgc breakeven``: the command line (argument parsing, tables written, figures).

Part of :mod:`hpcgc.analysis.breakeven` (the model and its documentation are in its docstring).
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from .. import tables
from .check import CHECK_COLUMNS, check, check_markdown
from .figures import figures
from .hierarchy import HIER_COLUMNS, hierarchy_markdown, hierarchy_rows, levels_from_file, run_levels
from .measure import BreakEvenError
from .model import Latency, latency_from_collectives
from .report import COLUMNS, N_COLUMNS, bandwidth_sweep, build, markdown, spread_markdown


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
               "With several ranks per node (--ranks-per-node K, or a collectives file measured with K > 1 ranks\n"
               "per node) also hierarchical.csv (and a table in breakeven.md): each method flat (all n ranks on the\n"
               "network) and hierarchical (intra-node Reduce + the method among the n/K node leaders + intra-node\n"
               "Bcast, each level with its own alpha, beta), the break-even of the hierarchical method against the\n"
               "hierarchical and the flat baseline.\n"
               "With --collectives also check.csv (and a second table in breakeven.md): the model checked\n"
               "against every run - predicted time to target at the run's own n with each collective's own\n"
               "α, β from the file, the measured one (rank 0's summed per-iteration time/iter up to the first\n"
               "row at the target, evaluation excluded), measured/predicted, OFF where off by > 25 %. A run with\n"
               "run.topology = \"hierarchical\" is predicted with the two levels of the collectives file (measured on\n"
               "its node shape): the leaders' collectives among its nodes at levels/inter, the node's Bcast at\n"
               "levels/intra (column intra_node_s); the node's Reduce is inside the measured grad phase.\n\n"
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
    p.add_argument("--ranks-per-node", type=int, default=None, metavar="K",
                   help="model flat vs hierarchical on nodes of K ranks (default: the collectives file's ranks per "
                        "node when it was measured with several, else 1: flat only); K must divide the runs' n")
    p.add_argument("--intra-latency-us", type=float, default=None, metavar="A",
                   help="intra-node (shared-memory) alpha in microseconds (default: the collectives file's "
                        "levels/intra)")
    p.add_argument("--intra-gbps", type=float, default=None, metavar="B",
                   help="intra-node bandwidth in Gb/s (default: the collectives file's levels/intra)")
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
        levels = levels_from_file(args.collectives, args.ranks_per_node, args.intra_latency_us, args.intra_gbps,
                                  latency.alpha)
        rep = build(args.results, latency, gbps, args.n_max, args.eps, args.metric, args.gamma_ns * 1e-9,
                    args.accuracy_within)
        hier = hierarchy_rows(rep.panels, levels, rep.gamma, (rep.gbps[0], rep.gbps[-1])) if levels else []
        checked = []
        if latency.per_op or math.isfinite(latency.machine_gbps):      # β known: a collectives file was given
            checked = check(rep.models, rep.target, latency, rep.gamma, run_levels(args.collectives))
    except tables.AnalysisError as exc:
        print(f"hpcgc: error: breakeven: {exc}", file=sys.stderr)
        return 2
    for note in rep.notes:
        print(f"# {note}" if note.startswith("warning") else f"# note: {note}", file=sys.stderr)
    md = markdown(rep) + "\n\n" + spread_markdown(rep)
    if hier:
        md += "\n\n" + hierarchy_markdown(hier, levels)
    if checked:
        md += "\n\n" + check_markdown(checked, rep.target, latency)
    if rep.notes:                           # the caveats, in the file too (stderr is not kept)
        md += "\n\nNotes:\n\n" + "\n".join(f"- {n}" for n in rep.notes)
    print(md)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if checked:
        tables.write_csv(out / "check.csv", checked, CHECK_COLUMNS)
    tables.write_csv(out / "breakeven.csv", rep.rows, COLUMNS)
    if hier:
        tables.write_csv(out / "hierarchical.csv", hier, HIER_COLUMNS)
    tables.write_csv(out / "breakeven-n.csv", rep.n_rows, N_COLUMNS)
    (out / "breakeven.md").write_text(md + "\n")
    figs = figures(rep, out)
    print(f"# wrote {out / 'breakeven.md'}, {out / 'breakeven.csv'}, {out / 'breakeven-n.csv'}, "
          + (f"{out / 'check.csv'}, " if checked else "") + (f"{out / 'hierarchical.csv'}, " if hier else "")
          + ", ".join(str(f) for f in figs))
    return 0
