"""Cost models of MPI collectives in the α–β (Hockney) model.

Minimal placeholder (only the ring Allreduce) for the emulated-cluster test; the full module with
every collective is written on the "breakeven" branch and replaces this one at merge.

α is the latency of one point-to-point message (seconds), β the inverse bandwidth of one link
(seconds per byte).
"""
from __future__ import annotations


def allreduce(nbytes: float, n: int, alpha: float, beta: float) -> float:
    """Time of a ring Allreduce of an ``nbytes`` vector on ``n`` ranks, in seconds.

    Reduce-scatter then allgather around a ring, each in n − 1 steps of nbytes/n per rank:
    T = 2(n − 1)·α + 2·(n − 1)/n · nbytes · β (the computation of the sum neglected).
    Thakur, Rabenseifner, Gropp, "Optimization of collective communication operations in MPICH",
    IJHPCA 19(1), 2005, Sec. 4.4 (the bandwidth term of Rabenseifner's algorithm is the same).
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if n == 1:
        return 0.0
    return 2 * (n - 1) * alpha + 2 * (n - 1) / n * nbytes * beta
