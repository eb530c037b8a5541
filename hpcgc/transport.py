"""MPI transport: the only module of hpcgc that calls MPI.

The collectives a run uses (``run.collective``, :mod:`hpcgc.exchange`) are, per iteration:

* ``gather`` (parameter server): ``Gather`` of each rank's payload length (one 4-byte ``int32``)
  and ``Gatherv`` of the payloads (``uint8``, zero-length allowed) to rank 0, then ``Bcast`` of
  the new iterate (``float64``, plus one control word) from rank 0;
* ``allgather``: ``Allgather`` of the lengths and ``Allgatherv`` of the payloads to every rank;
* ``allreduce``: ``Allreduce`` (SUM) of a float32/float64 vector, once per round of the message.

Only buffer (upper-case) mpi4py methods are used on these hot paths; pickling methods appear only
in set-up and tear-down helpers. The transport keeps a *sender-side* ledger, per collective, of
every byte this rank handed to MPI (``ledger``), so the bit counts in the results file can be
checked against what really went through the network rather than against a formula.

Also here: per-rank phase timers on ``MPI.Wtime``, the error agreement that lets every rank
exit cleanly (non-zero, no hang) when any rank hits a user error during set-up, and the timed
primitives of the ``collectives`` micro-benchmark.
"""
from __future__ import annotations

import sys
import time
import traceback

import numpy as np
from mpi4py import MPI

from .errors import UserError

ROOT = 0
LENGTH_BYTES = 4  # one int32 length announcement per rank and iteration
PHASES = ("grad", "compress", "comm_up", "server", "comm_down", "iter")
LEDGER = ("Gather", "Gatherv", "Bcast", "Allgather", "Allgatherv", "Allreduce")
"""The collectives of the bit ledger, in the order of ``Transport.ledger``."""


def wtime() -> float:
    return MPI.Wtime()


def library_version() -> str:
    return MPI.Get_library_version().strip().splitlines()[0]


def processor_name() -> str:
    return MPI.Get_processor_name()


_GATHER, _GATHERV, _BCAST, _ALLGATHER, _ALLGATHERV, _ALLREDUCE = range(len(LEDGER))


class Transport:
    """Payload Gatherv to rank 0 and Bcast back, with a sender-side byte ledger."""

    def __init__(self, comm=None):
        self.comm = comm if comm is not None else MPI.COMM_WORLD
        self.rank = self.comm.Get_rank()
        self.size = self.comm.Get_size()
        self.is_root = self.rank == ROOT
        self._len = np.zeros(1, dtype=np.int32)
        self._counts = np.zeros(self.size, dtype=np.int32)
        self._displs = np.zeros(self.size, dtype=np.int64)
        self._recv = np.zeros(1 << 16, dtype=np.uint8)
        self.reset_ledger()

    # -- ledger ---------------------------------------------------------------------------------
    def reset_ledger(self):
        """Zero the sender-side ledger: ``ledger[j]`` = bytes this rank handed to MPI as the
        sending side of collective ``LEDGER[j]`` (a Bcast counts at the root only)."""
        self.ledger = np.zeros(len(LEDGER))

    @property
    def up_bytes(self) -> int:
        """Bytes handed to MPI on the uplink: length words and payloads (Gather[v], Allgather[v])
        plus Allreduce vectors."""
        return int(self.ledger.sum() - self.ledger[_BCAST])

    @property
    def down_bytes(self) -> int:
        """Bytes of the downlink broadcast buffers (counted once, at the root)."""
        return int(self.ledger[_BCAST])

    # -- hot path ---------------------------------------------------------------------------------
    def _lengths(self, payload: np.ndarray) -> np.ndarray:
        if payload.dtype != np.uint8 or payload.ndim != 1:
            raise TypeError("payload must be a 1-D uint8 array")
        payload = np.ascontiguousarray(payload)
        self._len[0] = payload.nbytes
        return payload

    def _layout(self) -> int:
        np.cumsum(self._counts[:-1], out=self._displs[1:])
        total = int(self._displs[-1] + self._counts[-1])
        if total > self._recv.size:
            self._recv = np.zeros(max(total, 2 * self._recv.size), dtype=np.uint8)
        return total

    def gather_payloads(self, payload: np.ndarray):
        """Send this rank's ``uint8`` payload to rank 0.

        Returns, on rank 0, ``(buffer, counts, displs)`` where worker r's bytes are
        ``buffer[displs[r]:displs[r] + counts[r]]`` (views into a reused buffer: valid until the
        next call); ``None`` on the other ranks.
        """
        payload = self._lengths(payload)
        self.comm.Gather(self._len, self._counts if self.is_root else None, root=ROOT)
        self.ledger[_GATHER] += LENGTH_BYTES
        self.ledger[_GATHERV] += payload.nbytes
        if self.is_root:
            self._layout()
            self.comm.Gatherv(payload, [self._recv, self._counts, self._displs, MPI.BYTE], root=ROOT)
            return self._recv, self._counts.copy(), self._displs.copy()
        self.comm.Gatherv(payload, None, root=ROOT)
        return None

    def allgather_payloads(self, payload: np.ndarray):
        """Every rank's ``uint8`` payload to every rank: ``(buffer, counts, displs)`` on every rank,
        as :meth:`gather_payloads` returns on rank 0 (views valid until the next call)."""
        payload = self._lengths(payload)
        self.comm.Allgather(self._len, self._counts)
        self.ledger[_ALLGATHER] += LENGTH_BYTES
        self.ledger[_ALLGATHERV] += payload.nbytes
        self._layout()
        self.comm.Allgatherv(payload, [self._recv, self._counts, self._displs, MPI.BYTE])
        return self._recv, self._counts.copy(), self._displs.copy()

    def allreduce_sum(self, vec: np.ndarray, out: np.ndarray) -> np.ndarray:
        """``out = Σ_ranks vec`` (element-wise, ``MPI_Allreduce`` SUM) on every rank; float32 or
        float64 contiguous arrays of one length and dtype."""
        self.comm.Allreduce(vec, out, op=MPI.SUM)
        self.ledger[_ALLREDUCE] += vec.nbytes
        return out

    def bcast(self, buf: np.ndarray):
        """Broadcast ``buf`` (a contiguous numpy array) from rank 0, in place."""
        self.comm.Bcast(buf, root=ROOT)
        if self.is_root:
            self.ledger[_BCAST] += buf.nbytes

    # -- measurement traffic: not part of the algorithm, not in the ledger ------------------------
    def bcast_control(self, buf: np.ndarray):
        """Broadcast a decision taken at an evaluation point (stop / continue). Measurement
        infrastructure, like the timer gathers: excluded from the bit ledger and the phase timers."""
        self.comm.Bcast(buf, root=ROOT)

    # -- set-up / tear-down (small, may pickle) ---------------------------------------------------
    def barrier(self):
        self.comm.Barrier()

    def quiet_barrier(self, poll_seconds: float = 1e-3):
        """A barrier whose waiters sleep instead of spinning (set-up phases only).

        While rank 0 alone parses data or solves for f*, the other ranks would otherwise busy-poll
        inside MPI and, on an oversubscribed node (32 ranks on 2 cores), starve rank 0 of CPU:
        measured, this turns 1 s of set-up into 15 s.
        """
        req = self.comm.Ibarrier()
        while not req.Test():
            time.sleep(poll_seconds)

    def gather_rows(self, row: np.ndarray):
        """Gather one equally-shaped float64 row per rank to rank 0 → (size, len) array or None."""
        row = np.ascontiguousarray(row, dtype=np.float64)
        out = np.empty((self.size, row.size)) if self.is_root else None
        self.comm.Gather(row, out, root=ROOT)
        return out

    def bcast_object(self, obj):
        return self.comm.bcast(obj, root=ROOT)

    def scatter_object(self, objs):
        """Rank 0 sends objs[r] to rank r (set-up only: data shards)."""
        return self.comm.scatter(objs, root=ROOT)

    def gather_object(self, obj):
        return self.comm.gather(obj, root=ROOT)

    def allreduce_max(self, value: float) -> float:
        return self.comm.allreduce(value, op=MPI.MAX)

    def allreduce_max_array(self, values: np.ndarray) -> np.ndarray:
        out = np.empty_like(values)
        self.comm.Allreduce(np.ascontiguousarray(values), out, op=MPI.MAX)
        return out

    def agree(self, error: BaseException | None):
        """Collective error check after a phase that can fail on some ranks only.

        Every rank calls this. If any rank passed an error, every rank raises a
        :class:`UserError` carrying the first (lowest-rank) message, so all ranks exit alike.
        """
        self.quiet_barrier()
        failed = self.comm.allreduce(1 if error is not None else 0, op=MPI.SUM)
        if not failed:
            return
        msg = None
        if error is not None:
            msg = str(error) if isinstance(error, UserError) else "".join(
                traceback.format_exception(type(error), error, error.__traceback__))
        msgs = self.comm.allgather(msg)
        first = next(m for m in msgs if m is not None)
        who = next(r for r, m in enumerate(msgs) if m is not None)
        text = first if self.size == 1 or failed == self.size else f"(rank {who}) {first}"
        raise UserError(text)

    def abort(self, code: int = 1):
        """Terminate every rank (used when a rank fails inside the iteration loop)."""
        sys.stdout.flush()
        sys.stderr.flush()
        if self.size > 1:
            self.comm.Abort(code)
        raise SystemExit(code)


class RankOrderedJIT:
    """Compile/load numba kernels on rank 0 first, then on the others from the on-disk cache.

    When 32 ranks start at once with an empty cache, letting all of them compile wastes minutes
    and races on the cache files; rank 0 compiles and writes the cache, the rest wait at a barrier
    and then only load it.
    """

    def __init__(self, transport: Transport):
        self.t = transport

    def run(self, warm):
        error = None
        if self.t.is_root:
            try:
                warm()
            except BaseException as exc:  # noqa: BLE001 - reported collectively
                error = exc
        self.t.agree(error)
        if not self.t.is_root:
            try:
                warm()
            except BaseException as exc:  # noqa: BLE001
                error = exc
        self.t.agree(error)
