"""Cost of the casts' Allreduce: float32 (MPI_FLOAT SUM), float16 (MPICH's native MPI_FLOAT16_T SUM),
bfloat16 (hpcgc's user-defined SUM on 16-bit words: a Python callback into a numba kernel) and int8
(a 4-byte float32 MAX, then an MPI_INT8_T SUM), and float16 by the same kind of user-defined SUM
as bfloat16 (``float16-user``: identical results to MPICH's, in its own order), at d = 2^16 … 2^22, as a run issues them
(:meth:`hpcgc.transport.Transport.allreduce`), timed by the ``collectives`` benchmark's loop.

    mpiexec -n 4 python scripts/casts_cost.py [--out docs/data/casts/allreduce-casts.csv] [--max-seconds 1]

Writes the documented table (``docs/data/casts/allreduce-casts.csv`` + its provenance sidecar, as
docs/data/README.md describes; rank 0 writes): one row per d, each cell the mean over ranks of the
mean milliseconds per Allreduce and its ratio to float16's native one; then
``python -m hpcgc.docs_tables render`` puts it into docs/compressors.md.
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


COLUMNS = (("float32", "float32"), ("float16", "float16 (native)"), ("float16-user", "float16 (user op)"),
           ("bfloat16", "bfloat16 (user op)"), ("int8", "int8 (MAX + SUM)"))


def write_table(rows, out: Path, ranks: int, args, argv) -> None:
    """The documented table (docs/data/README.md): one row per d, each cell the mean ms per
    Allreduce over ranks and its ratio to float16's native one; the sidecar with the provenance."""
    import datetime
    import json
    import os
    import platform
    import subprocess
    table = [["d", *(label for _, label in COLUMNS)]]
    for d in sorted({r["d"] for r in rows}):
        at = {r["wire"]: r for r in rows if r["d"] == d}
        table.append([f"2^{int(np.log2(d))}", *(f"{1e3 * at[w]['avg_s']:.1f} ms ({at[w]['avg_over_float16']:.2f}x)"
                                               for w, _ in COLUMNS)])
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", newline="") as f:
        csv.writer(f).writerows(table)
    root = Path(__file__).resolve().parents[1]
    commit = subprocess.run(["git", "-C", str(root), "rev-parse", "--short=10", "HEAD"], capture_output=True,
                            text=True).stdout.strip() or "unknown"
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
               platform.processor() or "unknown") if os.path.exists("/proc/cpuinfo") else platform.processor()
    meta = {"source": "script", "commit": commit, "cpu": cpu, "cores": os.cpu_count(), "ranks": ranks,
            "mpi": " ".join(library_version().split()), "load": args.note or "not recorded",
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "command": f"mpiexec -n {ranks} python scripts/casts_cost.py " + " ".join(argv or sys.argv[1:]),
            "note": "mean seconds per Allreduce over ranks (each rank's mean over the timed iterations, "
                    "hpcgc collectives' loop); ratio to float16's native MPI_FLOAT16_T SUM at the same d"}
    out.with_suffix(".json").write_text(json.dumps(meta, indent=2) + "\n")


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
    if t.is_root:
        write_table(rows, Path(args.out), t.size, args, argv)
        for r in rows:
            print(f"{r['wire']:12s} d=2^{int(np.log2(r['d'])):<3d} {r['bytes_per_rank']:>9d} B  avg {1e3 * r['avg_s']:9.3f} ms"
                  f"  ({r['avg_over_float16']:.2f}x float16)")
        print(f"wrote {args.out} and its sidecar; render: python -m hpcgc.docs_tables render")
    return 0


if __name__ == "__main__":
    sys.exit(main())
