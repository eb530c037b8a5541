#!/usr/bin/env python3
"""``run.wait = spin`` against ``yield`` on the same experiment: the table of
``NP=32 ROUNDS=3 bash scripts/measure-performance.sh n32-wait`` (issue 31 target 3).

    python scripts/wait-ab.py FILE.h5 ... [--csv OUT.csv]

Each FILE is a results file of ``hpcgc floor`` (so each run has ``floor_seconds`` and
``floor_kernels_seconds``); runs are grouped by their run id and their ``wait_mode``. Per run and
mode, per file in the order given: the median iteration (``per_iteration/iter`` over ranks and
iterations, the ``floor_ratio``'s numerator), collectives + kernels (``floor_kernels_seconds``, the
denominator — the same measurement under either mode: ``hpcgc.floor`` issues blocking collectives
and times the kernels alone) and their ratio; rank 0's median ``server`` and the workers' median
``wait_down``. The verdict column is the median over the rounds of each mode's ratio. ``--csv`` writes the
table's cells (header first) for ``docs/data/``.
"""
from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from hpcgc.results import load

MODES = ("spin", "yield")


def collect(paths):
    """{run id: {mode: [(iteration ms, +kernels ms, ratio, rank 0's wait_up ms, workers' wait_down ms,
    load1, workers' comm_down ms)]}}."""
    table: dict = {}
    for p in paths:
        for run in load(p):
            mode = run.attrs.get("wait_mode", "spin")
            it = run.per_iteration["iter"].astype(np.float64)
            med = float(np.median(it)) * 1e3
            kern = float(run.attrs["floor_kernels_seconds"]) * 1e3
            up = float(np.median(run.per_iteration["wait_up"][:, 0])) * 1e3
            down = float(np.median(run.per_iteration["wait_down"][:, 1:])) * 1e3
            comm = float(np.median(run.per_iteration["comm_down"][:, 1:])) * 1e3
            load1 = float(run.file_attrs.get("machine_start_load1", np.nan))
            table.setdefault(run.run_id, {m: [] for m in MODES})[mode].append((med, kern, med / kern, up, down, load1,
                                                                                comm))
    return table


def rows(table):
    head = ["run", "spin: median iteration (ms), per round", "yield: median iteration (ms), per round",
            "collectives + kernels (ms), spin / yield rounds", "rank 0's wait_up (ms), spin / yield",
            "workers' wait_down (ms), spin / yield", "workers' comm_down (ms), spin / yield",
            "× collectives + kernels: spin", "yield"]
    out = [head]
    f = (lambda v: f"{v:.2f}")

    def both(s, y, j):          # the median over the rounds of column j, spin / yield
        return " / ".join(f(float(np.median([r[j] for r in rs]))) if rs else "" for rs in (s, y))
    for rid, by in table.items():
        s, y = by["spin"], by["yield"]
        out.append([rid, " / ".join(f(r[0]) for r in s), " / ".join(f(r[0]) for r in y),
                    " / ".join(f(r[1]) for r in s + y), both(s, y, 3), both(s, y, 4), both(s, y, 6),
                    f(float(np.median([r[2] for r in s]))) if s else "", f(float(np.median([r[2] for r in y]))) if y else ""])
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+", help="results files of `hpcgc floor` (spin and yield runs, any order)")
    ap.add_argument("--csv", help="also write the table's cells to this CSV file")
    args = ap.parse_args(argv)
    table = collect(args.files)
    out = rows(table)
    widths = [max(len(r[i]) for r in out) for i in range(len(out[0]))]
    for r in out:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)))
    loads = sorted({r[5] for by in table.values() for m in MODES for r in by[m]})
    print(f"# 1-min load average at the start of each file: {', '.join(f'{v:.1f}' for v in loads)}")
    if args.csv:
        with open(args.csv, "w", newline="") as fh:
            csv.writer(fh).writerows(out)
        print(f"# wrote {args.csv}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
