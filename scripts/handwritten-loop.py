"""DIANA + qsgd written by hand: hpcgc's kernels and the run's collectives, and nothing else.

The reference that says how much of an hpcgc iteration is hpcgc's own (issue 16, target 2;
``docs/performance.md``, "Against a hand-written loop"). Each rank holds a dense logistic
regression shard (random data of the default experiment's shape: 285 rows × 30 features per rank
at n = 2) and runs, per iteration, what a minimal simulator of DIANA with ``qsgd:s=2`` would:

    grad       Objective.grad (BLAS products + hpcgc's derivative kernels), Δ = g − h
    compress   the prepared codec's encode (one kernel), h += α·C(Δ) (one kernel)
    gather     MPI Gather of the 4-byte payload lengths to rank 0
    gatherv    MPI Gatherv of the payloads
    server     rank 0: decode and add each payload (one kernel each), the DIANA step (one kernel)
    bcast      MPI Bcast of the control word, then of the iterate

— the collectives ``python -m hpcgc.bench floor`` times for that run, with the same message
sizes. No bit ledger, no stop rules, no observers, no phase bookkeeping beyond seven clock
reads. Then rank 0 times the kernels alone, each in a tight loop (best of 5 × 2000 calls): the
"kernels' own time" of the target's floor.

    mpiexec -n 2 python scripts/handwritten-loop.py [--iterations 3000] [--rows 285] [--d 30] [--s 2] [--busy US] [--root-busy US] [--cpu]

``--busy US`` adds US µs of spinning on the clock to every rank's gradient phase, ``--root-busy US``
to rank 0's server step alone (where every other rank waits for it): at -n 32 on 2 cores they measure
what a microsecond of the ranks' own per-iteration work, and of rank 0's serial work, costs the
iteration (``NP=32 bash scripts/measure-performance.sh n32-busy``).

Compare with ``python -m hpcgc.bench floor --set run.iterations=3000 --set
'sweep.algorithm=["diana"]' --set 'sweep.compressor=["qsgd:s=2"]' --set run.tolerance=0`` run
in the same session (interleave them: the machine's speed drifts between runs).
"""
from __future__ import annotations

import argparse
import os
import time
import timeit

os.environ.setdefault("NUMBA_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np
from mpi4py import MPI

from hpcgc import compressors
from hpcgc.algorithms.kernels import shifted_step
from hpcgc.problems import Objective


def spin(seconds: float) -> None:
    """Busy for ``seconds`` on MPI's clock (``--busy``, ``--root-busy``): runnable, outside MPI."""
    until = MPI.Wtime() + seconds
    while MPI.Wtime() < until:
        pass


class CpuComm:
    """``--cpu``: the communicator, its calls' CPU time (``time.thread_time``, MPI's polling
    included) added up in ``mpi``."""

    def __init__(self, comm):
        self.comm, self.mpi = comm, 0.0

    def __getattr__(self, name):
        f = getattr(self.comm, name)

        def call(*a, **kw):
            c = time.thread_time()
            try:
                return f(*a, **kw)
            finally:
                self.mpi += time.thread_time() - c
        return call


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--iterations", type=int, default=3000)
    ap.add_argument("--rows", type=int, default=285, help="rows of each rank's shard")
    ap.add_argument("--d", type=int, default=30, help="features")
    ap.add_argument("--s", type=int, default=2, help="qsgd levels")
    ap.add_argument("--busy", type=float, default=0.0,
                    help="µs of extra Python work per rank and iteration, after the gradient (a spin on the "
                         "clock: how much a rank's own per-iteration overhead costs the iteration at -n 32)")
    ap.add_argument("--root-busy", type=float, default=0.0,
                    help="µs of extra work on rank 0 alone, in its server step (between the Gatherv and the "
                         "Bcast, where every other rank waits for it)")
    ap.add_argument("--cpu", action="store_true",
                    help="also print each rank's CPU time per iteration outside MPI and in grad + compress "
                         "(time.thread_time; as scripts/rank-cpu.py prints for an hpcgc run)")
    a = ap.parse_args()
    comm = MPI.COMM_WORLD
    rank, size, d = comm.rank, comm.size, a.d
    g = np.random.default_rng(rank)
    obj = Objective("logreg", g.standard_normal((a.rows, d)), np.sign(g.standard_normal(a.rows)),
                    np.full(a.rows, 1.0 / a.rows), 1e-3)
    comp = compressors.make(f"qsgd:s={a.s}")
    codec = comp.prepared(d)
    omega = comp.omega(d)
    alpha, gamma = 1.0 / (1.0 + omega), 0.1
    rng = np.random.default_rng(rank + 100)
    xbuf = np.zeros(d + 1)                       # iterate + control word, as hpcgc's gather
    x, ctrl = xbuf[:-1], xbuf[-1:]
    h, delta = np.zeros(d), np.empty(d)
    sx, sh, sv, sm = np.zeros(d), np.zeros(d), np.zeros(d), np.zeros(d)
    length = np.zeros(1, np.int32)
    counts, displs = np.zeros(size, np.int32), np.zeros(size, np.int64)
    recv = np.zeros(1 << 16, np.uint8)
    w = 1.0 / size
    busy, root_busy = a.busy * 1e-6, a.root_busy * 1e-6
    laps = np.zeros((a.iterations, 7))
    cpu = np.zeros((a.iterations, 3)) if a.cpu else None       # thread CPU at the start, MPI's so far, grad + compress
    if a.cpu:
        comm = CpuComm(comm)
    wt = MPI.Wtime
    for k in range(a.iterations):
        if cpu is not None:
            cpu[k, 0], cpu[k, 1] = time.thread_time(), comm.mpi
        t0 = wt()
        np.subtract(obj.grad(x), h, out=delta)
        if busy:
            spin(busy)
        t1 = wt()
        p = codec.encode(delta, rng)
        codec.add(p, h, alpha)
        t2 = wt()
        if cpu is not None:
            cpu[k, 2] = time.thread_time() - cpu[k, 0]
        length[0] = p.size
        comm.Gather(length, counts if rank == 0 else None, root=0)
        t3 = wt()
        if rank == 0:
            np.add.accumulate(counts[:-1], out=displs[1:])
            comm.Gatherv(p, [recv, counts, displs, MPI.BYTE], root=0)
            t4 = wt()
            sm[:] = 0.0
            for r in range(size):
                codec.add(recv[displs[r]:displs[r] + counts[r]], sm, w)
            shifted_step(sx, sh, sv, sm, gamma, alpha, 0.0)
            x[:] = sx
            if root_busy:
                spin(root_busy)
        else:
            comm.Gatherv(p, None, root=0)
            t4 = wt()
        t5 = wt()
        comm.Bcast(ctrl, root=0)
        comm.Bcast(x, root=0)
        t6 = wt()
        laps[k] = (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4, t6 - t5, t6 - t0)
    med = 1e6 * np.median(laps, axis=0)
    rows = comm.gather(med, root=0)
    if cpu is not None:
        d_cpu = np.diff(cpu[:, :2], axis=0)
        cpus = comm.gather((1e6 * np.median(d_cpu[:, 0] - d_cpu[:, 1]), 1e6 * np.median(cpu[:, 2])), root=0)
    if rank != 0:
        return
    names = ("grad", "compress", "gather", "gatherv", "server", "bcast", "iteration")
    print(f"hand-written DIANA + qsgd:s={a.s}, d = {d}, {a.rows} rows per rank, {size} ranks, "
          f"{a.iterations} iterations{f', {a.busy:g} µs busy per iteration' if a.busy else ''}"
          f"{f', {a.root_busy:g} µs busy on rank 0 in its server step' if a.root_busy else ''}: medians in µs")
    print("rank " + "".join(f"{n:>11}" for n in names))
    for r, m in enumerate(rows):
        print(f"{r:<5}" + "".join(f"{v:11.2f}" for v in m))

    def best(f, n=2000):
        return 1e6 * min(timeit.repeat(f, number=n, repeat=5)) / n
    p = codec.encode(delta, rng)
    own = {
        "grad": best(lambda: np.subtract(obj.grad(x), h, out=delta)),
        "encode": best(lambda: codec.encode(delta, rng)),
        "add (×(n + 1))": best(lambda: codec.add(p, sm, w)) * (size + 1),
        "step": best(lambda: shifted_step(sx, sh, sv, sm, 0.0, alpha, 0.0)),
    }
    if cpu is not None:
        c = np.array(cpus)
        print(f"# CPU µs per iteration outside MPI (median over {a.iterations - 1} iterations), {size} ranks")
        print(f"{'rank':<6}{'outside MPI':>12}{'grad + compress':>17}")
        for r, (out, work) in enumerate(c):
            print(f"{r:<6}{out:>12.1f}{work:>17.1f}")
        if size > 1:
            print(f"{'workers':<6}{c[1:, 0].mean():>12.1f}{c[1:, 1].mean():>17.1f}   (mean over ranks 1…)")
    print("kernels alone on rank 0 (tight loop, best of 5 × 2000), µs: "
          + ", ".join(f"{k} {v:.2f}" for k, v in own.items()) + f"; sum {sum(own.values()):.2f}")


if __name__ == "__main__":
    main()
