"""The break-even model of ``run.collective = "reduce-scatter"`` (a compressed Allreduce: each rank
compresses n segments, MPI_Alltoallv, the owner of a segment decodes and sums its n pieces,
re-compresses the sum, MPI_Allgatherv; CGX, Markov et al. 2022).

One iteration is two operations for :mod:`hpcgc.analysis.breakeven` (``docs/cost-models.md``):

``reduce_scatter``     MPI_Alltoall of the n segment lengths + MPI_Alltoallv of the compressed
                       segments: ``nbytes`` = the whole compressed vector of one rank (C₁ of d
                       coordinates, n segments), of which (n − 1)/n leaves the rank
``segment_allgather``  MPI_Allgather of one length + MPI_Allgatherv of the re-compressed reduced
                       segments: ``nbytes`` = all n of them (C₂ of d coordinates), a block of
                       ``nbytes``/n per rank

Both sizes are the compressed size of d coordinates and do not change with n (each segment shrinks
as 1/n), so the projection to n = 128 and 1024 keeps them; the compute of an iteration (decode and
sum d/n · n coordinates, re-compress d/n, decode d) does not grow with n either, as under
``allreduce``. In a :class:`~hpcgc.analysis.breakeven.MethodModel` the first size is ``up_bytes``
and the second ``down_bytes``.
"""
from __future__ import annotations

import numpy as np

from . import costmodels as cm

RS_COLLECTIVE = "reduce-scatter"
RS_OPS = ("reduce_scatter", "segment_allgather")
LENGTH_BYTES = cm.LENGTH_BYTES


def rs_op_coefficients(op: str, nbytes, n):
    """(a, b, g) of one of :data:`RS_OPS` with ``nbytes`` the whole vector's compressed bytes."""
    nbytes = np.asarray(nbytes, dtype=float)
    pf = np.asarray(n, dtype=float)
    if op == "reduce_scatter":
        parts = (cm.coefficients("alltoall", LENGTH_BYTES, n),
                 cm.coefficients("alltoallv", (pf - 1) / pf * nbytes, n))
    elif op == "segment_allgather":
        parts = (cm.coefficients("allgather", LENGTH_BYTES, n), cm.coefficients("allgather", nbytes / pf, n))
    else:
        raise ValueError(f"unknown operation {op!r}")
    return tuple(sum(x) for x in zip(*parts))


def rs_messages(first, second) -> list[tuple[str, float, int]]:
    """The operations of one reduce-scatter iteration, as ``breakeven.iteration_messages`` lists them."""
    return [("reduce_scatter", float(first), 1), ("segment_allgather", float(second), 1)]


def rs_stage_bytes(run, up: float, k: int, crossed, n: int) -> tuple[float, float]:
    """(first, second): the whole compressed vector's bytes of each stage per rank and iteration.

    From the transport's per-collective ledger where the file has it: ``mpi_bytes/Alltoallv`` counts
    the segments a rank sent to the *other* ranks (its own stays in memory), so first = that ×
    n/(n − 1) (segments of equal size); ``mpi_bytes/Allgatherv`` counts its one re-compressed
    segment, so second = that × n. Else from ``up`` (bytes handed to MPI per iteration: the
    Alltoall's 4(n − 1) length bytes, (n − 1)/n·first, 4 + second/n) with the two stages of the
    same size: first = second = up − 4n. Means over the ranks in ``crossed``."""
    n = max(int(n), 2)
    led = getattr(run, "mpi_bytes", {}) or {}
    crossed = np.asarray(crossed, dtype=bool)

    def per(name):
        a = np.asarray(led[name], dtype=float)
        last = a[-1] if a.ndim == 2 else a
        sel = last[crossed] if crossed.size == last.size and crossed.any() else last
        return float(np.mean(sel)) / k

    if "Alltoallv" in led and "Allgatherv" in led:
        first, seg = per("Alltoallv") * n / (n - 1), per("Allgatherv")
        if first > 0:
            return first, seg * n
    first = max(up - LENGTH_BYTES * n, 0.0)
    return first, first
