"""Each rank's CPU time per iteration outside MPI, in an hpcgc run (issue 31, target 3).

On an oversubscribed host (32 ranks on 2 cores) wall-clock phases include the time a rank waits
for a core, and MPI's waiting ranks poll on the CPU; a rank's own work per iteration is its *CPU*
time outside MPI calls. This runs ``python -m hpcgc.bench ARGS`` with three wrappers, nothing else
changed: ``Clock.lap`` (once per iteration) reads the thread's CPU clock (``time.thread_time``), the
transport's collective methods add up the CPU time spent inside them (MPI's polling included), and
``Exchange.compute`` / ``Exchange.encode`` (the gradient and the message) theirs. Per rank, median
over the iterations (evaluation iterations are the upper tail): ``outside MPI`` = the iteration's
CPU minus the collectives', of it ``grad + compress``; then the workers' mean. Compare with
``scripts/handwritten-loop.py --cpu`` at the same -n (the same figures for the hand-written loop).

    mpiexec -n 32 python scripts/rank-cpu.py floor --config jobs/experiments/default.toml \\
        --set run.iterations=1000 --set run.tolerance=0 --set 'sweep.algorithm=["diana"]' \\
        --set 'sweep.compressor=["qsgd:s=2"]' -q -o /tmp/rank-cpu.h5 --overwrite
"""
from __future__ import annotations

import sys
import time

import numpy as np

from hpcgc.exchange import base
from hpcgc.run import observers
from hpcgc.transport import core

COLLECTIVES = ("gather_lengths", "gatherv", "bcast", "bcast_header", "bcast_body", "allgather_lengths",
               "allgather_announce", "allgatherv", "allreduce", "iallreduce", "wait_pending", "test_pending",
               "alltoall_lengths", "alltoallv", "gather_rows", "allgather_slots", "gather_slots", "sync")
clock = time.thread_time
inside = {"mpi": 0.0, "work": 0.0}
laps: list = []


def timed(cls, name: str, key: str) -> None:
    f = getattr(cls, name, None)
    if f is None:
        return

    def g(self, *a, **kw):
        c = clock()
        try:
            return f(self, *a, **kw)
        finally:
            inside[key] += clock() - c
    setattr(cls, name, g)


for name in COLLECTIVES:
    timed(core.Transport, name, "mpi")
timed(base.Exchange, "compute", "work")
timed(base.Exchange, "encode", "work")
_lap = observers.Clock.lap


def lap(self, *a, **kw):
    laps.append((clock(), inside["mpi"], inside["work"]))
    return _lap(self, *a, **kw)


observers.Clock.lap = lap


def main() -> int:
    from mpi4py import MPI

    from hpcgc.bench import main as bench
    rc = bench(sys.argv[1:])
    t = np.diff(np.array(laps), axis=0) * 1e6 if len(laps) > 1 else np.zeros((0, 3))
    mine = (np.median(t[:, 0] - t[:, 1]), np.median(t[:, 2])) if t.shape[0] else (np.nan, np.nan)
    rows = MPI.COMM_WORLD.gather(mine, root=0)
    if MPI.COMM_WORLD.rank == 0:
        rows = np.array(rows)
        print(f"# CPU µs per iteration outside MPI (median over {t.shape[0]} iterations), {len(rows)} ranks")
        print(f"{'rank':<6}{'outside MPI':>12}{'grad + compress':>17}")
        for r, (out, work) in enumerate(rows):
            print(f"{r:<6}{out:>12.1f}{work:>17.1f}")
        if len(rows) > 1:
            print(f"{'workers':<6}{rows[1:, 0].mean():>12.1f}{rows[1:, 1].mean():>17.1f}   (mean over ranks 1…)")
    return rc


if __name__ == "__main__":
    sys.exit(main())
