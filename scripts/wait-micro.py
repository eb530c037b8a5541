#!/usr/bin/env python3
"""How a waiting rank should wait, alone: the skeleton of a parameter-server iteration with busy
loops for the work (no hpcgc), for choosing ``run.wait = "yield"``'s sleep
(``hpcgc/transport/waiting.py``, ``YIELD_POLL``; docs/performance.md, "Waiting ranks that yield").

    mpiexec -n 32 python scripts/wait-micro.py MODE [--iterations 400] [--server-ms 0.4]
        [--worker-ms 0.04] [--poll FIRST,MAX]

Per iteration every rank works ``--worker-ms`` (the gradient and message), then the 4-byte lengths'
Gather to rank 0, rank 0 works ``--server-ms`` (the step), then the Bcast of an 8-byte control word
and of a 31-float64 iterate (the default experiment's d + 1 = 31). MODE ``spin``: the blocking
collectives (MPI polls); ``sleep``: the non-blocking ones, tested with sleeps from FIRST doubling up
to MAX seconds in between (``--poll 1e-4,1e-4``: hpcgc's choice); ``sched``: tested with
``os.sched_yield()`` in between. Prints rank 0's median iteration, the mean over ranks of their
median, and the workers' mean wait in the downlink (ms).
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np
from mpi4py import MPI


def busy(seconds: float) -> None:
    t = time.perf_counter()
    while time.perf_counter() - t < seconds:
        pass


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("mode", choices=("spin", "sleep", "sched"))
    ap.add_argument("--iterations", type=int, default=400)
    ap.add_argument("--server-ms", type=float, default=0.4)
    ap.add_argument("--worker-ms", type=float, default=0.04)
    ap.add_argument("--poll", default="1e-4,1e-4", help="FIRST,MAX sleep in seconds (mode sleep)")
    a = ap.parse_args()
    first, most = (float(v) for v in a.poll.split(","))
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()

    def wait(req):
        if a.mode == "sched":
            while not req.Test():
                os.sched_yield()
            return
        poll = first
        while not req.Test():
            time.sleep(poll)
            poll = min(2 * poll, most)

    length, counts = np.zeros(1, np.int32), np.zeros(size, np.int32)
    ctrl, x = np.zeros(1), np.zeros(31)
    iters, downs = [], []
    comm.Barrier()
    for _ in range(a.iterations):
        t0 = MPI.Wtime()
        busy(a.worker_ms * 1e-3)
        if a.mode == "spin":
            comm.Gather(length, counts if rank == 0 else None, root=0)
        else:
            wait(comm.Igather(length, counts if rank == 0 else None, root=0))
        if rank == 0:
            busy(a.server_ms * 1e-3)
        t1 = MPI.Wtime()
        if a.mode == "spin":
            comm.Bcast(ctrl, root=0)
            comm.Bcast(x, root=0)
        else:
            wait(comm.Ibcast(ctrl, root=0))
            wait(comm.Ibcast(x, root=0))
        t2 = MPI.Wtime()
        iters.append(t2 - t0)
        downs.append(t2 - t1)
    medians = comm.gather((float(np.median(iters)), float(np.median(downs))), root=0)
    if rank == 0:
        m = np.array(medians)
        how = {"spin": "blocking", "sleep": f"sleep {a.poll}", "sched": "sched_yield"}[a.mode]
        print(f"{size} ranks, {how}: iteration {np.median(iters) * 1e3:.3f} ms (rank 0), "
              f"{m[:, 0].mean() * 1e3:.3f} ms (mean over ranks); workers' downlink wait "
              f"{m[1:, 1].mean() * 1e3:.3f} ms; server {a.server_ms} ms, worker {a.worker_ms} ms; "
              f"load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
