"""``hpcgc project`` (also ``python -m analysis.project``): the network projection's command line.

The model is :mod:`hpcgc.analysis.projection`; the rows are :func:`hpcgc.analysis.projection_table.projection_rows`.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import projection_table, tables
from .projection import PRESETS, network


# -- command line ------------------------------------------------------------------------------------
def build_parser():
    p = argparse.ArgumentParser(
        prog="hpcgc project",
        description="Project each run's time-to-ε onto networks with latency α and bandwidth β "
                    "(α–β model with the run's Gather/Gatherv/Bcast structure; docs/projection.md).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="presets: " + "; ".join(f"{k} = {v.describe()}" for k, v in PRESETS.items()))
    p.add_argument("results", nargs="+", help="results files (.h5, .h5.partial) and/or directories of them")
    p.add_argument("--eps", type=float, default=1e-8, help="target accuracy ε (default 1e-8)")
    p.add_argument("--metric", default="suboptimality", choices=("suboptimality", "dist_to_opt", "grad_norm_sq"),
                   help="series compared against ε (default suboptimality = f(x) − f*)")
    p.add_argument("--network", "-n", nargs="+", default=list(PRESETS), metavar="GBPS",
                   help="bandwidths in Gb/s; 1, 10, 100 are presets with their own α (default: 1 10 100)")
    p.add_argument("--latency-us", type=float, default=None, help="α in microseconds for every network")
    p.add_argument("--gather", choices=("linear", "tree"), default="linear",
                   help="gather model: linear (root receives serially, default) or tree (⌈log₂P⌉ latency rounds)")
    p.add_argument("-o", "--out", metavar="DIR", help="also write projection.csv and projection.md into DIR")
    p.add_argument("--baseline", metavar="ALG:COMPRESSOR", help="method for the speed-up columns")
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        nets = [network(s, args.latency_us) for s in args.network]
        coll = tables.collect(args.results, strict=False)
    except (ValueError, tables.AnalysisError) as exc:
        print(f"analysis: error: {exc}", file=sys.stderr)
        return 2
    for note in coll.notes:
        print(f"# note: {note}", file=sys.stderr)
    rows = projection_table.projection_rows(coll, args.eps, nets, args.gather, args.metric, args.baseline)
    print(tables.markdown_table(rows, projection_table.projection_columns(nets),
                                title=f"Projected time to {args.metric} ≤ {args.eps:g} "
                                      f"({args.gather} gather, binomial broadcast)"))
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        tables.write_csv(out / "projection.csv", rows, projection_table.projection_columns(nets))
        (out / "projection.md").write_text(tables.markdown_table(rows, projection_table.projection_columns(nets)) + "\n")
        print(f"# wrote {out / 'projection.csv'} and {out / 'projection.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
