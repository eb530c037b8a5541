#!/usr/bin/env python3
"""What ``run.overlap`` saves per iteration on the MLP, and how MPI makes progress (docs/overlap.md).

    python scripts/overlap-bench.py [-n 2] [--emulated NAME] [--hidden 256] [--depth 3] [--batch 0]
                                    [--iterations 30] [--collective allreduce] [--algorithm dcgd]
                                    [--compressor identity] [--modes ...] [--table NAME]

Three launches of ``python -m hpcgc.bench`` on the same MLP (DCGD + identity under ``run.collective =
"allreduce"`` by default, same seed, so the same iterates), one per mode:

    off      run.overlap = false: one blocking Allreduce of the whole vector after the backward pass
    tests    run.overlap = true: a non-blocking Iallreduce per layer, MPI_Testall between layers
    thread   run.overlap = true with MPICH's asynchronous progress thread (MPIR_CVAR_ASYNC_PROGRESS=1)

``--collective allgather`` or ``gather`` (with ``--algorithm ef --compressor topk:k=...`` or
``--algorithm dcgd|diana --compressor randk:k=...``): the per-bucket method of
:mod:`hpcgc.exchange.overlap_allgather` / :mod:`~hpcgc.exchange.overlap_gather`, one Iallgather or
Igather per layer; its reference is the mode

    blocking run.overlap = true, run.overlap_blocking = true: the same per-bucket compressor (the same
             iterates), blocking Allgather / Gather calls after the backward pass

(the default modes are then blocking, tests, thread; ``off`` there is the whole-vector compressor,
another method). The saving is against ``blocking`` when it ran, else against ``off``.

and prints, per mode, the median over iterations (the first 3 dropped) of the rank-mean iteration
time, of comm_up (communication paid), comm_hidden (communication in flight during the backward
pass) and grad, the saving against ``off``, the machine and its load before and after. With
``--emulated NAME`` every launch goes through ``scripts/emulated-cluster.sh run --name NAME``
(a cluster brought up beforehand: ``up --nodes N --rate R --name NAME``; docs/emulated-cluster.md).
``--table NAME`` also writes the table as ``docs/data/NAME.csv`` (the cells as
docs/overlap.md shows them) with its provenance sidecar ``docs/data/NAME.json`` (docs/data/README.md);
``python -m hpcgc.docs_tables render`` then puts it into the page. This script calls no MPI itself.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hpcgc import machine, results  # noqa: E402

MODES = {"off": ({"run.overlap": "false"}, {}),
         "blocking": ({"run.overlap": "true", "run.overlap_blocking": "true"}, {}),
         "tests": ({"run.overlap": "true"}, {}),
         "thread": ({"run.overlap": "true"}, {"MPIR_CVAR_ASYNC_PROGRESS": "1"})}
WARM = 3
"""Iterations dropped before the medians (MPI connection set-up, first touches)."""


def launch(args, mode: str, out: Path) -> None:
    sets, extra = MODES[mode]
    sets = {**sets, "name": "overlap-bench", "data.dataset": args.dataset, "data.partition": "iid",
            "problem.kind": "mlp", "problem.hidden": str(args.hidden), "problem.depth": str(args.depth),
            "problem.l2": "1e-4", "run.algorithm": args.algorithm, "run.compressor": args.compressor,
            "run.collective": args.collective, "run.learning_rate": "0.05", "run.batch": str(args.batch),
            "run.iterations": str(args.iterations), "run.eval_every": str(args.iterations), "run.seed": "1"}
    hpcgc = [sys.executable, "-m", "hpcgc.bench", *[f"--set={k}={v}" for k, v in sets.items()], "-o", str(out)]
    env = {**os.environ, "NUMBA_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MPIEXEC_TIMEOUT": "900",
           "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", **extra}
    if args.emulated:
        cmd = ["bash", str(ROOT / "scripts" / "emulated-cluster.sh"), "run", "--name", args.emulated, "--",
               "-n", str(args.n), *hpcgc]
        env.setdefault("HPCGC_MPIEXEC", mpiexec())
    else:                                     # hydra passes the environment (and the CVAR) to every rank
        cmd = [mpiexec(), "-n", str(args.n), *hpcgc]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=ROOT)
    if p.returncode != 0:
        sys.exit(f"overlap-bench: the {mode} launch failed ({p.returncode}):\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")


def mpiexec() -> str:
    return shutil.which("mpiexec", path=str(Path(sys.executable).parent)) or shutil.which("mpiexec") or "mpiexec"


def medians(path: Path) -> dict:
    """Median over iterations (after WARM) of the rank-mean per-iteration phase times, ms."""
    run = results.load(path)[0]
    out = {}
    for ph in ("iter", "comm_up", "comm_hidden", "grad", "compress", "server"):
        v = np.asarray(run.per_iteration[ph], dtype=float)          # (iterations, ranks)
        out[ph] = 1e3 * float(np.median(v[WARM:].mean(axis=1)))
    out["d"] = int(run.attrs["d"])
    return out


def write_table(args, rows, snap, load0: float, load1: float, where: str) -> None:
    """docs/data/<table>.csv (the cells as shown) and its provenance sidecar (docs/data/README.md)."""
    from hpcgc.transport import library_version
    path = ROOT / "docs" / "data" / f"{args.table}.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["mode", "iteration (ms)", "comm_up (ms)", "comm_hidden (ms)", "grad (ms)", "saving vs off"])
        for r in rows:
            w.writerow([{"off": "off", "blocking": "per-bucket, blocking", "tests": "tests between layers",
                         "thread": "progress thread"}[r["mode"]],
                        f"{r['iter']:.1f}", f"{r['comm_up']:.1f}", f"{r['comm_hidden']:.1f}", f"{r['grad']:.1f}",
                        "—" if r["mode"] == reference(rows) else f"{r['saving_ms']:+.1f} ms ({r['saving_pct']:+.0f} %)"])
    commit = subprocess.run(["git", "rev-parse", "--short=10", "HEAD"], capture_output=True, text=True,
                            cwd=ROOT).stdout.strip()
    side = {"source": "script", "commit": commit, "cpu": snap["cpu_model"], "cores": snap["cores"],
            "ranks": args.n, "mpi": " ".join(library_version().split()),
            "load": f"average {load0:.2f} before, {load1:.2f} after, on {os.cpu_count()} CPUs",
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "command": "python scripts/overlap-bench.py " + " ".join(sys.argv[1:]),
            "note": (f"MLP {args.hidden} x {args.depth} on {args.dataset} (d = {rows[0]['d']}), {args.algorithm} + "
                     f"{args.compressor} under {args.collective}, {args.n} ranks on {where}; medians over iterations "
                     f"{WARM + 1}..{args.iterations} of the rank-mean per-iteration times; saving = "
                     f"{reference(rows)}'s iteration minus this mode's")}
    path.with_suffix(".json").write_text(json.dumps(side, indent=2, ensure_ascii=False) + "\n")


def reference(rows) -> str:
    """The mode savings are measured against: ``blocking`` when it ran, else ``off``."""
    return "blocking" if any(r["mode"] == "blocking" for r in rows) else "off"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=2, help="ranks (with --emulated: the cluster's nodes)")
    ap.add_argument("--emulated", default="", help="launch on this emulated cluster (its --name)")
    ap.add_argument("--dataset", default="digits")
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--depth", type=int, default=3)
    ap.add_argument("--batch", type=int, default=0, help="rows per worker and iteration (0: the whole shard)")
    ap.add_argument("--iterations", type=int, default=30)
    ap.add_argument("--collective", default="allreduce", choices=("allreduce", "allgather", "gather"))
    ap.add_argument("--algorithm", default="dcgd", help="dcgd, diana or ef (docs/overlap.md: what each collective takes)")
    ap.add_argument("--compressor", default="identity")
    ap.add_argument("--modes", nargs="+", default=None, choices=list(MODES),
                    help="default: off tests thread (allreduce), blocking tests thread (allgather)")
    ap.add_argument("--table", default="", help="write docs/data/NAME.csv + NAME.json (e.g. overlap/shm)")
    args = ap.parse_args(argv)
    if args.modes is None:
        args.modes = ["off" if args.collective == "allreduce" else "blocking", "tests", "thread"]
    if "blocking" in args.modes and args.collective == "allreduce":
        ap.error("--modes blocking is for --collective allgather or gather (under allreduce the blocking form is off)")
    before = machine.snapshot()
    load0 = os.getloadavg()[0]
    rows = []
    with tempfile.TemporaryDirectory(prefix="overlap-bench-") as tmp:
        for mode in args.modes:
            out = Path(tmp) / f"{mode}.h5"
            launch(args, mode, out)
            rows.append({"mode": mode, **medians(out)})
    load1 = os.getloadavg()[0]
    base = next((r["iter"] for r in rows if r["mode"] == reference(rows)), float("nan"))
    where = f"emulated cluster {args.emulated!r}" if args.emulated else "this host"
    print(f"# run.overlap on the MLP {args.hidden} x {args.depth} ({args.dataset}, d = {rows[0]['d']}, batch "
          f"{args.batch or 'whole shard'}), {args.algorithm} + {args.compressor} under {args.collective}, {args.n} "
          f"ranks on {where}; saving against {reference(rows)}")
    print(machine.describe(before))
    print(f"# load average {load0:.2f} before, {load1:.2f} after, on {os.cpu_count()} CPUs")
    print(f"# medians over iterations {WARM + 1}..{args.iterations} of the rank-mean per-iteration times (ms)")
    head = f"{'mode':<8} {'iter':>9} {'comm_up':>9} {'hidden':>9} {'grad':>9} {'saving':>9} {'saving%':>8}"
    print(head)
    for r in rows:
        r["saving_ms"] = base - r["iter"]
        r["saving_pct"] = 100.0 * r["saving_ms"] / base
        print(f"{r['mode']:<8} {r['iter']:>9.2f} {r['comm_up']:>9.2f} {r['comm_hidden']:>9.2f} {r['grad']:>9.2f} "
              f"{r['saving_ms']:>9.2f} {r['saving_pct']:>7.1f}%")
    if args.table:
        write_table(args, rows, before, load0, load1, where)
    return 0


if __name__ == "__main__":
    sys.exit(main())
