"""The run's side of the transport: :class:`Transport` (the collectives of an iteration, the sent and
received byte ledgers, the error agreement), the ledger and phase constants, the clock
(``wtime``) and :class:`RankOrderedJIT` — see :mod:`hpcgc.transport`."""
from __future__ import annotations

import sys
import traceback

import numpy as np
from mpi4py import MPI

from ..errors import UserError
from .reductions import reduction
from .waiting import YIELD_POLL, sleep_until

ROOT = 0
LENGTH_BYTES = 4  # one int32 length announcement per rank and iteration
DOWN_HEADER_BYTES = 8  # compressed downlink: int32 payload length + int32 control word, per iteration
PHASES = ("grad", "compress", "wait_up", "comm_up", "server", "wait_down", "comm_down", "other", "iter",
          "comm_hidden")
"""Per-rank phase timers of an iteration (what each contains: ``docs/results.md``, "Phases"): the
method's work (``grad``, ``compress``, ``server``), the idle time waiting for other ranks before a
transfer (``wait_up``, ``wait_down``: the lengths' Gather / the control word's Bcast, a barrier
before an Allreduce round; 0 with ``run.wait_phases = false``), the transfers (``comm_up``,
``comm_down``), and the iteration's wall-clock ``iter``, measured; ``other`` is not timed itself
but is ``iter`` minus the seven others: hpcgc's own bookkeeping inside the iteration (bit
accounting, stop checks, timer calls). Evaluation points are outside every phase. ``comm_hidden``
(``run.overlap``, :mod:`hpcgc.exchange.overlap`; 0 otherwise) is not part of that sum: the time of
``grad`` during which one of the iteration's non-blocking collectives was in flight."""
LEDGER = ("Gather", "Gatherv", "Bcast", "Allgather", "Allgatherv", "Allreduce", "Alltoall", "Alltoallv")
"""The collectives of the bit ledgers, in the order of ``Transport.ledger`` and ``Transport.received``
(``Alltoall``/``Alltoallv``, used by ``reduce-scatter`` only, were appended last)."""


wtime = MPI.Wtime
"""MPI's wall clock (seconds): the phase timers' clock — the C function itself, no Python frame."""


def processor_name() -> str:
    return MPI.Get_processor_name()


_GATHER, _GATHERV, _BCAST, _ALLGATHER, _ALLGATHERV, _ALLREDUCE, _ALLTOALL, _ALLTOALLV = range(len(LEDGER))


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
        self._heads, self._tails = self._counts[:-1], self._displs[1:]   # displs[1:] = running sum of counts[:-1]
        self._recv = np.zeros(1 << 16, dtype=np.uint8)
        self._down_head = np.zeros(DOWN_HEADER_BYTES // 4, dtype=np.int32)   # downlink length, control word
        self._down = np.zeros(1 << 16, dtype=np.uint8)
        self._a2a_send = np.zeros(self.size, dtype=np.int32)     # Alltoall: bytes this rank sends to each rank
        self._a2a_recv = np.zeros(self.size, dtype=np.int32)     #           bytes it receives from each rank
        self._a2a_sdispls = np.zeros(self.size, dtype=np.int64)
        self._a2a_rdispls = np.zeros(self.size, dtype=np.int64)
        self._a2a_buf = np.zeros(1 << 16, dtype=np.uint8)
        self._pending = []                                       # run.overlap: the started non-blocking requests
        self.yielding = False
        """``run.wait = "yield"`` (set by the run, alike on every rank): the collectives in which a rank
        waits for another rank's computation — the payload lengths' Gather / Allgather / Alltoall,
        the downlink's Bcasts, the barrier before an Allreduce round, the overlapped requests' wait
        and the fixed slots' Gather / Allgather (``run.overlap``), the evaluation's control Bcast —
        start in their non-blocking form and complete in :meth:`idle` (test, sleep) instead of
        spinning; the same bytes in the same buffers. The payloads' Gatherv / Allgatherv /
        Alltoallv and every Allreduce (a reduction whose order a non-blocking algorithm could
        change) stay blocking."""
        self.reset_ledger()

    # -- ledger ---------------------------------------------------------------------------------
    def reset_ledger(self):
        """Zero the sender-side ledger: ``ledger[j]`` = bytes this rank handed to MPI as the
        sending side of collective ``LEDGER[j]`` (a Bcast counts at the root only), and the
        receiver-side ledger: ``received[j]`` = bytes MPI delivered into this rank's receive buffers
        from the other ranks in ``LEDGER[j]``; and ``intra`` = (bytes sent, bytes received) inside this
        rank's node under ``run.topology = "hierarchical"`` (:mod:`.nodes`). Zeroed in place once they
        exist: a node's leaders' transport writes into the same arrays (:class:`.nodes.Nodes`)."""
        if getattr(self, "ledger", None) is None:
            self.ledger = np.zeros(len(LEDGER))
            self.received = np.zeros(len(LEDGER))
            self.intra = np.zeros(2)
        self.ledger[:] = 0.0
        self.received[:] = 0.0
        self.intra[:] = 0.0

    def idle(self, req) -> None:
        """Complete a started collective the yielding way (:func:`sleep_until` with ``YIELD_POLL``)."""
        sleep_until(req, *YIELD_POLL)

    def waiting(self, comm, op: str, *args, **kw) -> None:
        """``comm.<op>(*args)`` (``"Gather"``, ``"Allgather"``, ``"Alltoall"``, ``"Bcast"``,
        ``"Barrier"``) where a rank waits for another rank's computation: blocking, or — yielding —
        its non-blocking form ``comm.I<op>`` completed in :meth:`idle`."""
        if self.yielding:
            self.idle(getattr(comm, "I" + op.lower())(*args, **kw))
        else:
            getattr(comm, op)(*args, **kw)

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
        np.add.accumulate(self._heads, out=self._tails)     # the ufunc on kept views: ≈ 0.3 µs (cumsum: 1.5)
        total = int(self._displs[-1]) + int(self._counts[-1])
        if total > self._recv.size:
            self._recv = np.zeros(max(total, 2 * self._recv.size), dtype=np.uint8)
        return total

    def gather_lengths(self, payload: np.ndarray) -> np.ndarray:
        """The uplink's announcement, first half of :meth:`gather_payloads`: ``Gather`` of this
        rank's payload length (one int32) to rank 0. A receiving rank — rank 0, and the ranks inside
        MPI's gather tree — blocks here until its last sender has arrived: the uplink's "late
        sender" time (``wait_up``; the 4 bytes themselves cost one latency). Returns the payload as
        :meth:`gatherv` sends it."""
        payload = self._lengths(payload)
        self.waiting(self.comm, "Gather", self._len, self._counts if self.is_root else None, root=ROOT)
        self.ledger[_GATHER] += LENGTH_BYTES
        if self.is_root:
            self.received[_GATHER] += LENGTH_BYTES * (self.size - 1)
        return payload

    def gatherv(self, payload: np.ndarray):
        """Second half of :meth:`gather_payloads`: ``Gatherv`` of the payloads whose lengths
        :meth:`gather_lengths` just announced."""
        self.ledger[_GATHERV] += payload.nbytes
        if self.is_root:
            total = self._layout()
            self.comm.Gatherv(payload, [self._recv, self._counts, self._displs, MPI.BYTE], root=ROOT)
            self.received[_GATHERV] += total - payload.nbytes
            return self._recv, self._counts, self._displs
        self.comm.Gatherv(payload, None, root=ROOT)
        return None

    def gather_payloads(self, payload: np.ndarray):
        """Send this rank's ``uint8`` payload to rank 0 (:meth:`gather_lengths`, then :meth:`gatherv`).

        Returns, on rank 0, ``(buffer, counts, displs)`` where worker r's bytes are
        ``buffer[displs[r]:displs[r] + counts[r]]`` (the transport's reused arrays: valid until the
        next call); ``None`` on the other ranks.
        """
        return self.gatherv(self.gather_lengths(payload))

    def allgather_lengths(self, payload: np.ndarray) -> np.ndarray:
        """First half of :meth:`allgather_payloads`: ``Allgather`` of the payload lengths, where
        every rank waits for the last one to arrive (``wait_up``)."""
        payload = self._lengths(payload)
        self.waiting(self.comm, "Allgather", self._len, self._counts)
        self.ledger[_ALLGATHER] += LENGTH_BYTES
        self.received[_ALLGATHER] += LENGTH_BYTES * (self.size - 1)
        return payload

    def allgather_announce(self, payload: np.ndarray, info) -> np.ndarray:
        """Like :meth:`allgather_lengths`, with ``len(info)`` float64 words beside the length (one
        ``Allgather`` of 8·(1 + len(info)) bytes per rank): ``reduce-scatter`` announces its reduced
        segment's length and what its rank sent in the iteration's first stage, so that rank 0 can
        account every worker's bits. Returns the (size, 1 + len(info)) float64 table (valid until the
        next call); the payload lengths go where :meth:`allgatherv` reads them."""
        payload = self._lengths(payload)
        k = 1 + len(info)
        if getattr(self, "_ann", None) is None or self._ann.shape[1] != k:
            self._ann, self._ann_all = np.zeros((1, k)), np.zeros((self.size, k))
        self._ann[0, 0] = payload.nbytes
        self._ann[0, 1:] = info
        self.waiting(self.comm, "Allgather", self._ann, self._ann_all)
        self._counts[:] = self._ann_all[:, 0]
        self.ledger[_ALLGATHER] += self._ann.nbytes
        self.received[_ALLGATHER] += self._ann.nbytes * (self.size - 1)
        return self._ann_all

    def allgatherv(self, payload: np.ndarray):
        """Second half of :meth:`allgather_payloads`: ``Allgatherv`` of the announced payloads."""
        self.ledger[_ALLGATHERV] += payload.nbytes
        total = self._layout()
        self.comm.Allgatherv(payload, [self._recv, self._counts, self._displs, MPI.BYTE])
        self.received[_ALLGATHERV] += total - payload.nbytes
        return self._recv, self._counts, self._displs

    def allgather_payloads(self, payload: np.ndarray):
        """Every rank's ``uint8`` payload to every rank: ``(buffer, counts, displs)`` on every rank,
        as :meth:`gather_payloads` returns on rank 0 (views valid until the next call)."""
        return self.allgatherv(self.allgather_lengths(payload))

    def allreduce(self, vec: np.ndarray, out: np.ndarray, op: str, wire: str) -> np.ndarray:
        """``out = op_ranks vec`` (``MPI_Allreduce``) on every rank, reduced in wire type ``wire``
        (:func:`reduction`: "float32"/"float64" buffers of that dtype, "float16"/"bfloat16"
        uint16 words, "int8" int8; op "sum" or "max"); contiguous arrays of one length and dtype.
        In the ledger: ``vec.nbytes`` (the bytes this rank hands to MPI)."""
        dt, mop = reduction(op, wire)
        self.comm.Allreduce([vec, dt], [out, dt], op=mop)
        self.ledger[_ALLREDUCE] += vec.nbytes
        self.received[_ALLREDUCE] += out.nbytes
        return out

    def iallreduce(self, vec: np.ndarray, out: np.ndarray, op: str, wire: str) -> None:
        """Start ``out = op_ranks vec`` (``MPI_Iallreduce``, the non-blocking :meth:`allreduce`: same
        datatypes and operations, same ledger entries, counted when started) and keep its request
        among the pending ones (:meth:`test_pending`, :meth:`wait_pending`). Neither buffer may be
        touched until :meth:`wait_pending` returns. ``run.overlap`` (:mod:`hpcgc.exchange.overlap`):
        every rank starts the same buckets in the same order."""
        dt, mop = reduction(op, wire)
        self._pending.append(self.comm.Iallreduce([vec, dt], [out, dt], op=mop))
        self.ledger[_ALLREDUCE] += vec.nbytes
        self.received[_ALLREDUCE] += out.nbytes

    def allgather_slots(self, slot: np.ndarray, out: np.ndarray) -> np.ndarray:
        """``MPI_Allgather`` of one fixed-size ``uint8`` slot per rank into ``out`` (size·slot bytes,
        rank r's slot at r·slot.size): the blocking form of :meth:`iallgather_slots` (``run.overlap``
        under ``allgather``, ``run.overlap_blocking``). No announcement: every rank knows the size.
        Ledger ``Allgather``: the slot sent, the others' slots received."""
        self.waiting(self.comm, "Allgather", [slot, MPI.BYTE], [out, MPI.BYTE])
        self.ledger[_ALLGATHER] += slot.nbytes
        self.received[_ALLGATHER] += slot.nbytes * (self.size - 1)
        return out

    def iallgather_slots(self, slot: np.ndarray, out: np.ndarray) -> None:
        """Start :meth:`allgather_slots` (``MPI_Iallgather``) and keep its request among the pending
        ones, like :meth:`iallreduce` (same ledger entries, counted when started); neither buffer may
        be touched until :meth:`wait_pending` returns."""
        self._pending.append(self.comm.Iallgather([slot, MPI.BYTE], [out, MPI.BYTE]))
        self.ledger[_ALLGATHER] += slot.nbytes
        self.received[_ALLGATHER] += slot.nbytes * (self.size - 1)

    def gather_slots(self, slot: np.ndarray, out: np.ndarray | None) -> None:
        """``MPI_Gather`` of one fixed-size ``uint8`` slot per rank into rank 0's ``out`` (size·slot
        bytes; None elsewhere): the parameter server's form of :meth:`allgather_slots` (``run.overlap``
        under ``gather`` with ``run.overlap_blocking``). Ledger ``Gather``: the slot sent; rank 0 also
        counts the others' slots received."""
        recv = [out, MPI.BYTE] if self.is_root else None
        self.waiting(self.comm, "Gather", [slot, MPI.BYTE], recv, root=ROOT)
        self.ledger[_GATHER] += slot.nbytes
        if self.is_root:
            self.received[_GATHER] += slot.nbytes * (self.size - 1)

    def igather_slots(self, slot: np.ndarray, out: np.ndarray | None) -> None:
        """Start :meth:`gather_slots` (``MPI_Igather``), kept among the pending requests like
        :meth:`iallreduce` (same ledger entries, counted when started)."""
        self._pending.append(self.comm.Igather([slot, MPI.BYTE], [out, MPI.BYTE] if self.is_root else None,
                                               root=ROOT))
        self.ledger[_GATHER] += slot.nbytes
        if self.is_root:
            self.received[_GATHER] += slot.nbytes * (self.size - 1)

    def test_pending(self) -> bool:
        """``MPI_Testall`` on the pending requests: lets MPI progress them (the tests between layers of
        ``run.overlap``) and says whether every one has completed (they stay pending until
        :meth:`wait_pending`)."""
        return bool(MPI.Request.Testall(self._pending)) if self._pending else True

    def wait_pending(self) -> None:
        """``MPI_Waitall`` on the pending requests (yielding: :meth:`idle` on them); afterwards none
        is pending."""
        if self._pending:
            if self.yielding:
                self.idle(self._pending)
            else:
                MPI.Request.Waitall(self._pending)
            self._pending.clear()

    def alltoall_lengths(self, counts: np.ndarray) -> np.ndarray:
        """First half of :meth:`alltoallv`: ``Alltoall`` of one int32 per destination rank — the
        number of bytes this rank will send it (``counts[r]``; its own entry included, 4 bytes each
        on the wire). Every rank waits here for the last sender (``wait_up``). Returns the int32
        byte counts this rank will receive from each rank."""
        self._a2a_send[:] = counts
        self.waiting(self.comm, "Alltoall", self._a2a_send, self._a2a_recv)
        self.ledger[_ALLTOALL] += LENGTH_BYTES * (self.size - 1)
        self.received[_ALLTOALL] += LENGTH_BYTES * (self.size - 1)
        return self._a2a_recv

    def alltoallv(self, sendbuf: np.ndarray):
        """Second half: ``Alltoallv`` of ``sendbuf`` (uint8; the bytes for rank r are the
        ``counts[r]`` announced by :meth:`alltoall_lengths`, in rank order). Returns ``(buffer,
        counts, displs)`` — rank r's bytes for this rank are ``buffer[displs[r]:displs[r] +
        counts[r]]`` (views valid until the next call). Ledgers: the bytes sent to and received from
        the *other* ranks (the piece a rank keeps for itself moves inside its own memory)."""
        if sendbuf.dtype != np.uint8 or sendbuf.ndim != 1:
            raise TypeError("alltoallv: sendbuf must be a 1-D uint8 array")
        sendbuf = np.ascontiguousarray(sendbuf)
        sc, rc, me = self._a2a_send, self._a2a_recv, self.rank
        np.add.accumulate(sc[:-1], out=self._a2a_sdispls[1:])
        np.add.accumulate(rc[:-1], out=self._a2a_rdispls[1:])
        total = int(self._a2a_rdispls[-1]) + int(rc[-1])
        if total > self._a2a_buf.size:
            self._a2a_buf = np.zeros(max(total, 2 * self._a2a_buf.size), dtype=np.uint8)
        self.comm.Alltoallv([sendbuf, sc, self._a2a_sdispls, MPI.BYTE],
                            [self._a2a_buf, rc, self._a2a_rdispls, MPI.BYTE])
        self.ledger[_ALLTOALLV] += int(sc.sum()) - int(sc[me])
        self.received[_ALLTOALLV] += total - int(rc[me])
        return self._a2a_buf, rc, self._a2a_rdispls

    def bcast(self, buf: np.ndarray):
        """Broadcast ``buf`` (a contiguous numpy array) from rank 0, in place."""
        self._bcast(buf)
        if self.is_root:
            self.ledger[_BCAST] += buf.nbytes
        else:
            self.received[_BCAST] += buf.nbytes

    def bcast_header(self, payload: np.ndarray | None, control: int):
        """The compressed downlink (``run.downlink``, EF21-P), first of two ``Bcast`` calls: rank 0
        broadcasts an 8-byte header (int32 length of its ``uint8`` ``payload``, int32 control word).
        Every other rank blocks here until rank 0 has stepped: the downlink's late-sender time
        (``wait_down``). Returns (payload — rank 0's, contiguous; None elsewhere —, length, control)
        on every rank, for :meth:`bcast_body`."""
        if self.is_root:
            payload = self._lengths(payload)
            self._down_head[0], self._down_head[1] = payload.nbytes, control
        self._bcast(self._down_head)
        if self.is_root:
            self.ledger[_BCAST] += self._down_head.nbytes
        else:
            self.received[_BCAST] += self._down_head.nbytes
        return payload, int(self._down_head[0]), int(self._down_head[1])

    def bcast_body(self, payload: np.ndarray | None, n: int) -> np.ndarray:
        """Second of the compressed downlink's ``Bcast`` calls: the ``n`` payload bytes (skipped
        when 0), in the ``Bcast`` ledger like the header; returns the payload on every rank (other
        ranks: a view of the transport's buffer, valid until the next call)."""
        if not self.is_root:
            if n > self._down.size:
                self._down = np.zeros(max(n, 2 * self._down.size), dtype=np.uint8)
            payload = self._down[:n]
        if n:
            self._bcast(payload)
            if self.is_root:
                self.ledger[_BCAST] += n
            else:
                self.received[_BCAST] += n
        return payload

    def _bcast(self, buf) -> None:
        self.waiting(self.comm, "Bcast", buf, root=ROOT)

    def sync(self):
        """Wait until every rank has arrived (``MPI_Barrier``): issued before each Allreduce round
        when the run separates idle time (``wait_up``) from transfer (``comm_up``) — an Allreduce has
        no announcement of its own to wait in (``gather`` and ``allgather`` wait in the lengths'
        collective, :meth:`gather_lengths`). No bytes: not in the ledger. Yielding: ``MPI_Ibarrier``
        and :meth:`idle`."""
        self.waiting(self.comm, "Barrier")

    # -- measurement traffic: not part of the algorithm, not in the ledger ------------------------
    def bcast_control(self, buf: np.ndarray):
        """Broadcast a decision taken at an evaluation point (stop / continue). Measurement
        infrastructure, like the timer gathers: excluded from the bit ledger and the phase timers.
        Yielding: the other ranks sleep while rank 0 evaluates."""
        self._bcast(buf)

    def allreduce_sum_measure(self, vec: np.ndarray) -> np.ndarray:
        """Sum a contiguous float64 buffer over all ranks, in place, for an evaluation (the loss and
        gradient of the shards, ``problem.reference = "none"``). Measurement traffic: not in the
        bit ledger."""
        if vec.dtype != np.float64 or not vec.flags.c_contiguous:
            raise TypeError("allreduce_sum_measure needs a contiguous float64 buffer")
        self.comm.Allreduce(MPI.IN_PLACE, vec, op=MPI.SUM)
        return vec

    # -- set-up / tear-down (small, may pickle) ---------------------------------------------------
    def barrier(self):
        self.comm.Barrier()

    def quiet_barrier(self, first_poll: float = 5e-5, max_poll: float = 5e-3):
        """A barrier whose waiters sleep instead of spinning (set-up, tear-down, rank 0's writes).

        While rank 0 alone parses data, solves for f* or writes the results file, the other ranks
        would otherwise busy-poll inside MPI and, on an oversubscribed node (32 ranks on 2 cores),
        starve rank 0 of CPU: measured, this turns 1 s of set-up into 15 s. The sleeps double from
        ``first_poll`` up to ``max_poll``, so a short wait ends with little delay and a long one
        costs few wake-ups (each is ~10 µs of CPU; at -n 32, 31 waiters polling every 1 ms took
        ~0.4 of a core from rank 0: ``docs/performance.md``).
        """
        sleep_until(self.comm.Ibarrier(), first_poll, max_poll)

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

