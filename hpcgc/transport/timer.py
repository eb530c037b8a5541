"""The ``collectives`` micro-benchmark's and ``bench floor``'s timed primitives (part of the
transport: the only code that calls MPI): OSU-style timing of the collectives hpcgc uses, issued
exactly as a run issues them, on buffers of their own — never in the run's ledger."""
from __future__ import annotations

import numpy as np
from mpi4py import MPI

from .core import ROOT, Transport
from .reductions import reduction

# -- the ``collectives`` micro-benchmark (hpcgc.collectives): timed, never in the ledger ----------
COLLECTIVES = ("gather", "bcast", "allreduce", "allgather")
"""The collectives of ``python -m hpcgc.bench collectives`` by default, each issued exactly as a run issues it."""
MORE_COLLECTIVES = ("alltoall",)
"""Timed only when asked for (``--collectives alltoall``): ``reduce-scatter``'s first stage."""


class CollectiveTimer:
    """OSU-style timing of the collectives hpcgc uses, on the communicator of a :class:`Transport`.

    Each operation is the same sequence of MPI calls as the run's hot path, on buffers of its own
    (so ``Transport.ledger`` and the phase timers are never touched: benchmark traffic is not
    algorithm traffic). ``nbytes`` is the message size *per rank* (what each rank contributes, as
    in OSU):

    * ``gather``: ``Gather`` of the 4-byte int32 length, root computes the displacements,
      ``Gatherv`` of ``nbytes`` uint8 from every rank to rank 0;
    * ``allgather``: ``Allgather`` of the length, displacements, ``Allgatherv`` of the payloads;
    * ``bcast``: ``Bcast`` from rank 0 of ``nbytes / 8`` float64;
    * ``allreduce``: ``Allreduce`` (SUM) of ``nbytes / itemsize`` float32 (or float64);
    * ``alltoall``: ``Alltoall`` of the int32 byte counts, then ``Alltoallv`` of ``nbytes`` uint8
      split evenly over the other ranks (``reduce-scatter``'s first stage; the receive buffer is
      allocated at the first call, untimed in the warm-up).

    :meth:`measure` runs warm-up iterations (untimed), a barrier, then the timed iterations, each
    timed alone with ``MPI.Wtime`` and followed by an untimed barrier (as OSU's collective
    benchmarks do); it returns the min / avg / max over ranks of each rank's mean time.
    """

    def __init__(self, transport: Transport):
        self.t = transport
        self.comm = transport.comm
        self._counts = np.zeros(transport.size, dtype=np.int32)     # of the last gather/allgather operation()
        self._displs = np.zeros(transport.size, dtype=np.int64)
        self._one = np.zeros(1)
        self._all = np.zeros(transport.size)
        self.release()

    # -- buffers ------------------------------------------------------------------------------
    def allocate(self, kind: str, max_bytes: int, dtype=np.float32):
        """Buffers for ``kind`` at its largest message size (smaller sizes use views); pages are
        touched here so that first-touch faults are not timed."""
        self.release()
        self.dtype = np.dtype(dtype if kind == "allreduce" else (np.float64 if kind == "bcast" else np.uint8))
        count = max_bytes // self.dtype.itemsize
        self._send = np.ones(count, dtype=self.dtype)
        recv = {"allreduce": count, "allgather": count * self.t.size}.get(kind, 0)
        if kind == "gather" and self.t.is_root:
            recv = count * self.t.size
        if recv:
            self._recv = np.empty(recv, dtype=self.dtype)
            self._recv.fill(0)          # written, so mapped now (np.zeros would map pages lazily)

    def release(self):
        self._send = self._recv = None

    # -- one operation, exactly as the run issues it --------------------------------------------
    def _issue(self, kind: str, send: np.ndarray, recv: np.ndarray | None, counts=None, displs=None, how=()):
        """A zero-argument callable issuing one ``kind`` collective of ``send`` (this rank's
        contribution) into ``recv`` (gather: the root's; allgather, allreduce: every rank's).
        ``how``: an Allreduce's (op, wire type) as a run issues it (:func:`reduction`; default
        SUM in the buffers' own type)."""
        comm, root = self.comm, self.t.is_root
        if kind in ("gather", "allgather"):
            length = np.array([send.nbytes], dtype=np.int32)
            counts = np.zeros(self.t.size, dtype=np.int32) if counts is None else counts
            displs = np.zeros(self.t.size, dtype=np.int64) if displs is None else displs
            spec = [recv, counts, displs, MPI.BYTE] if recv is not None else None
            if kind == "gather":
                cto = counts if root else None

                def op():
                    comm.Gather(length, cto, root=ROOT)
                    if root:
                        np.cumsum(counts[:-1], out=displs[1:])
                    comm.Gatherv(send, spec, root=ROOT)
            else:
                def op():
                    comm.Allgather(length, counts)
                    np.cumsum(counts[:-1], out=displs[1:])
                    comm.Allgatherv(send, spec)
        elif kind == "alltoall":
            size, me = self.t.size, self.t.rank
            sc = np.zeros(size, dtype=np.int32)                # send.nbytes split evenly over the other ranks
            others = [r for r in range(size) if r != me]
            if others:
                q, rem = divmod(send.nbytes, len(others))
                for j, r in enumerate(others):
                    sc[r] = q + (1 if j < rem else 0)
            rc = np.zeros(size, dtype=np.int32)
            sd, rd = np.zeros(size, dtype=np.int64), np.zeros(size, dtype=np.int64)
            np.cumsum(sc[:-1], out=sd[1:])
            box = {}

            def op():
                comm.Alltoall(sc, rc)
                np.cumsum(rc[:-1], out=rd[1:])
                total = int(rd[-1]) + int(rc[-1])
                buf = box.get("recv")
                if buf is None or buf.size < total:
                    buf = box["recv"] = np.zeros(max(total, 1), dtype=np.uint8)
                comm.Alltoallv([send, sc, sd, MPI.BYTE], [buf, rc, rd, MPI.BYTE])
        elif kind == "bcast":
            def op():
                comm.Bcast(send, root=ROOT)
        elif kind == "allreduce" and how:
            dt, mop = reduction(*how)
            sbuf, rbuf = [send, dt], [recv, dt]

            def op():
                comm.Allreduce(sbuf, rbuf, op=mop)
        elif kind == "allreduce":
            def op():
                comm.Allreduce(send, recv, op=MPI.SUM)
        else:
            raise ValueError(f"unknown collective {kind!r}")
        return op

    def operation(self, kind: str, nbytes: int):
        """A zero-argument callable doing one ``kind`` collective of ``nbytes`` per rank (views into
        the buffers of :meth:`allocate`)."""
        count = nbytes // self.dtype.itemsize
        recv = None
        if kind == "allreduce":
            recv = self._recv[:count]
        elif kind == "allgather" or (kind == "gather" and self.t.is_root):
            recv = self._recv
        return self._issue(kind, self._send[:count], recv, self._counts, self._displs)

    def sequence(self, ops):
        """A zero-argument callable issuing, in order, the collectives ``ops`` = [(kind, nbytes,
        dtype[, op, wire type])] — this rank's own message sizes (they may differ between ranks, as a run's payloads
        do; every rank lists the same kinds in the same order) — on buffers of its own, touched
        now. ``python -m hpcgc.bench floor`` times a run's iteration this way."""
        calls, buffers = [], []
        for kind, nbytes, dtype, *how in ops:
            dtype = np.dtype(dtype)
            count = int(nbytes) // dtype.itemsize
            send = np.ones(count, dtype=dtype)
            recv = None
            if kind == "allreduce":
                recv = np.zeros(count, dtype=dtype)
            elif kind in ("gather", "allgather"):
                total = self._sum_over_ranks(send.nbytes)        # collective: every rank calls it
                if kind == "allgather" or self.t.is_root:
                    recv = np.zeros(total, dtype=np.uint8)
            calls.append(self._issue(kind, send, recv, how=tuple(how)))
            buffers.append((send, recv))

        def op():
            for call in calls:
                call()
        op.buffers = buffers            # [(send, recv)] per collective (recv None where nothing arrives)
        return op

    def _sum_over_ranks(self, value: int) -> int:
        self._one[0] = value
        out = np.zeros(1)
        self.comm.Allreduce(self._one, out, op=MPI.SUM)
        return int(out[0])

    # -- timing ------------------------------------------------------------------------------------
    def _max_over_ranks(self, value: float) -> float:
        self._one[0] = value
        out = np.zeros(1)
        self.comm.Allreduce(self._one, out, op=MPI.MAX)
        return float(out[0])

    def _timed_loop(self, op, iterations: int) -> float:
        """Seconds per iteration on this rank: each iteration timed alone, an untimed barrier after."""
        comm = self.comm
        total = 0.0
        comm.Barrier()
        for _ in range(iterations):
            t0 = MPI.Wtime()
            op()
            total += MPI.Wtime() - t0
            comm.Barrier()
        return total / iterations

    def period(self, op, iterations: int) -> float:
        """Seconds per operation on this rank when ``op`` runs ``iterations`` times back to back
        (a barrier before, none in between: the rhythm of a run's iteration loop)."""
        self.comm.Barrier()
        t0 = MPI.Wtime()
        for _ in range(iterations):
            op()
        return (MPI.Wtime() - t0) / iterations

    def measure(self, kind: str, nbytes: int, iterations: int, warmup: int, max_seconds: float = 0.0,
                min_iterations: int = 3):
        """Time ``kind`` at ``nbytes`` per rank → ``(min, avg, max, iterations)``: seconds over ranks
        of each rank's mean time per iteration, and the number of timed iterations.

        With ``max_seconds > 0`` and ``warmup ≥ 1`` the timed iterations are cut to about
        ``max_seconds`` (never below ``min_iterations``) from the slowest rank's mean warm-up time
        after the first warm-up iteration (which may pay one-time costs), and the warm-up itself to
        about a quarter of ``max_seconds`` (at least 2 iterations when ``warmup ≥ 2``); the decision
        is taken collectively, so every rank runs the same number of operations.
        """
        return self.measure_op(self.operation(kind, nbytes), iterations, warmup, max_seconds, min_iterations)

    def measure_op(self, op, iterations: int, warmup: int, max_seconds: float = 0.0, min_iterations: int = 3):
        """:meth:`measure` of any zero-argument collective callable (:meth:`operation`, :meth:`sequence`)."""
        if warmup > 0:
            est = self._max_over_ranks(self._timed_loop(op, 1))
            more = warmup - 1
            if max_seconds > 0 and est > 0:
                more = min(more, max(1, int(0.25 * max_seconds / est)))
            if more > 0:
                est = self._max_over_ranks(self._timed_loop(op, more))
            if max_seconds > 0 and est > 0:
                iterations = min(iterations, max(min_iterations, int(max_seconds / est)))
        mean = self._timed_loop(op, iterations)
        self._one[0] = mean
        self.comm.Allgather(self._one, self._all)
        return float(self._all.min()), float(self._all.mean()), float(self._all.max()), iterations
