"""Cost of the casts' Allreduce: float32 (MPI_FLOAT SUM), float16 (MPICH's native MPI_FLOAT16_T SUM),
bfloat16 (hpcgc's user-defined SUM on 16-bit words: a Python callback into a numba kernel) and int8
(a 4-byte float32 MAX, then an MPI_INT8_T SUM), and float16 by the same kind of user-defined SUM
as bfloat16 (``float16-user``: identical results to MPICH's, in its own order), at d = 2^16 … 2^22, as a run issues them
(:meth:`hpcgc.transport.Transport.allreduce`), timed by the ``collectives`` benchmark's loop.

    mpiexec -n 4 python scripts/casts_cost.py [--out docs/data/casts/allreduce-casts.csv] [--max-seconds 1]

Writes one CSV row per (wire type, d): ranks, bytes per rank, min/avg/max over ranks of the mean
seconds per Allreduce, timed iterations, and the ratio to float16 at the same d (rank 0 writes).
The transport's own MPI calls only (this script calls no MPI itself).
"""
from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hpcgc.transport import CollectiveTimer, Transport, library_version

WIRES = {"float32": [("sum", "float32", np.float32)],
         "float16": [("sum", "float16", np.uint16)],
         "float16-user": [("sum", "float16-user", np.uint16)],
         "bfloat16": [("sum", "bfloat16", np.uint16)],
         "int8": [("max", "float32", None), ("sum", "int8", np.int8)]}


def operation(t: Transport, wire: str, d: int):
    """One Allreduce (int8: two) of d values in ``wire``, on buffers of its own."""
    calls = []
    for op, w, dtype in WIRES[wire]:
        n = 1 if dtype is None else d
        dt = np.float32 if dtype is None else dtype
        send = np.ones(n, dtype=dt)
        if wire != "float32" and dtype is np.uint16:
            send[:] = 0x3F80 if wire == "bfloat16" else 0x3C00         # 1.0 in each format
        recv = np.zeros(n, dtype=dt)
        calls.append((send, recv, op, w))

    def run():
        for send, recv, op, w in calls:
            t.allreduce(send, recv, op, w)
    run.nbytes = sum(s.nbytes for s, _, _, _ in calls)
    return run


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="docs/data/casts/allreduce-casts.csv")
    p.add_argument("--min-log2", type=int, default=16)
    p.add_argument("--max-log2", type=int, default=22)
    p.add_argument("--max-seconds", type=float, default=1.0, help="time budget per (wire, d) (default 1 s)")
    p.add_argument("--note", default="", help="a note stored in every row (e.g. 'machine loaded')")
    args = p.parse_args(argv)
    t = Transport()
    timer = CollectiveTimer(t)
    rows = []
    for k in range(args.min_log2, args.max_log2 + 1):
        d = 2 ** k
        for wire in WIRES:
            op = operation(t, wire, d)
            tmin, tavg, tmax, iters = timer.measure_op(op, 50, 3, max_seconds=args.max_seconds)
            rows.append({"wire": wire, "d": d, "ranks": t.size, "bytes_per_rank": op.nbytes, "min_s": tmin,
                         "avg_s": tavg, "max_s": tmax, "iterations": iters})
            t.reset_ledger()
    for r in rows:
        f16 = next(x for x in rows if x["d"] == r["d"] and x["wire"] == "float16")
        r["avg_over_float16"] = r["avg_s"] / f16["avg_s"]
        r["mpi"] = library_version()
        r["note"] = args.note
    if t.is_root:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        with out.open("w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
        for r in rows:
            print(f"{r['wire']:9s} d=2^{int(np.log2(r['d'])):<3d} {r['bytes_per_rank']:>9d} B  avg {1e3 * r['avg_s']:9.3f} ms"
                  f"  ({r['avg_over_float16']:.2f}x float16)")
        print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
