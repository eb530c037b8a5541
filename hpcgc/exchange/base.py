"""The interface of an exchange strategy: how one iteration's messages travel and where the
server step runs (``run.collective``). GRACE calls this role the *communicator*; PyTorch DDP a
communication hook. The loop (:mod:`hpcgc.run.loop`) calls, per iteration::

    msg = exchange.encode(ws)                       # timed as "compress"
    extra, wait_up, up, server, wait_down, down = exchange.exchange(msg, ss)
                                                    # seconds: more compress work (PowerSGD between
                                                    # its rounds), wait_up, comm_up, server,
                                                    # wait_down, comm_down

``wait_*`` is the time a rank waits for other ranks before a transfer — MPI profilers' "late
sender" time — when ``split`` is on (``run.wait_phases``, the default), so that ``comm_*`` is the
collective's own transfer time. The wait is measured in a collective the exchange issues anyway
where it has one: the Gather / Allgather of the payload lengths before the payloads (the
receivers wait there for the last sender), the Bcast of the control word (or of the compressed
downlink's header) before the iterate (the workers wait there for rank 0's step); an Allreduce
has none, so a barrier (:meth:`Transport.sync`) precedes each round. With ``split`` off, ``wait_*``
is 0 and the waiting is inside ``comm_*`` (and ``gather``'s dense downlink is one Bcast).

and then :meth:`Exchange.control` on every rank (the per-iteration stop decision). Right after the
server step, outside the timed phases, rank 0 calls ``on_step()`` (set by the run: it accounts the
iteration's bits with :meth:`Exchange.account` and applies the bit and time budgets); under
``gather`` its decision rides the broadcast. Only the transport calls
MPI; an exchange composes transport calls with the algorithm's worker and server halves.

Adding a collective = one file in this package + one line in its ``REGISTRY``.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ..compressors.kernels.elias_gaps import DECODE_TABLE, sparse_layout_bits
from ..compressors.kernels.wire import bits_for
from ..errors import ConfigError
from ..transport import LEDGER, LENGTH_BYTES, wtime

CONTINUE, STOP, DIVERGED = 0.0, 1.0, 2.0
EMPTY = np.zeros(0, dtype=np.uint8)


def messages(got, worker_ranks):
    """The workers' :class:`Messages` [(worker index, payload view)] from a (buffer, counts, displs)
    triple of the transport."""
    return Messages.received(got, rank_selection(worker_ranks))


def rank_selection(worker_ranks):
    """What picks the workers' entries, in worker order, out of a per-rank array: a slice when the
    ranks are consecutive (a view: no copy per iteration), else an index array."""
    ranks = [int(r) for r in worker_ranks]
    first = ranks[0] if ranks else 0
    if ranks == list(range(first, first + len(ranks))):
        return slice(first, first + len(ranks))
    return np.array(ranks, dtype=np.int64)


class Messages(Sequence):
    """One iteration's messages as the server step reads them: [(worker index, payload view)],
    worker i's payload ``buf[starts[i]:starts[i] + lengths[i]]`` of the transport's receive buffer,
    the list made on first use only. ``batch`` = (buf, starts, lengths) in worker order (int64
    starts, int32 lengths: the transport's dtypes), which :meth:`hpcgc.algorithms.base.Algorithm.add_messages`
    hands to one kernel call (``Prepared.add_many``) instead of one Python-level decode per message
    (issue 31 target 3: 32 of them per iteration at -n 32)."""

    __slots__ = ("_items", "batch")

    def __init__(self, buf, starts, lengths):
        self.batch = (buf, starts, lengths)
        self._items = None

    @classmethod
    def received(cls, got, sel) -> Messages:
        """From the transport's (buffer, counts, displs) and the workers' :func:`rank_selection`."""
        buf, counts, displs = got
        return cls(buf, displs[sel], counts[sel])

    @classmethod
    def of(cls, payloads) -> Messages:
        """Worker i's message = ``payloads[i]``, copied into one buffer as a Gatherv would deliver them."""
        lengths = np.array([p.size for p in payloads], dtype=np.int32)
        starts = np.zeros(len(payloads), dtype=np.int64)
        np.cumsum(lengths[:-1], out=starts[1:])
        buf = np.concatenate([np.asarray(p, dtype=np.uint8) for p in payloads]) if payloads else EMPTY
        return cls(buf, starts, lengths)

    def items(self) -> list:
        if self._items is None:
            buf, starts, lengths = self.batch
            s, c = starts.tolist(), lengths.tolist()
            self._items = [(i, buf[a:a + n]) for i, (a, n) in enumerate(zip(s, c))]
        return self._items

    def __len__(self) -> int:
        return len(self.batch[1])

    def __getitem__(self, i):
        return self.items()[i]

    def __iter__(self):
        return iter(self.items())


def exploded(x, sq=None) -> bool:
    """The divergence test applied after every step: a non-finite or exploding iterate (‖x‖²
    non-finite or above 1e200); ``sq``: ‖x‖² when the step knows it (``Algorithm.step_norm_sq``),
    else one pass over x computes it."""
    if sq is None:
        sq = float(np.dot(x, x))
    return not math.isfinite(sq) or sq > 1e200


def mean_bytes(per_iteration, rank: int, collective: str) -> int:
    """Rank ``rank``'s mean bytes per iteration handed to ``collective`` (a ``LEDGER`` name)."""
    return int(round(float(per_iteration[rank][LEDGER.index(collective)])))


class Exchange:
    """Base class. ``server_everywhere``: every rank holds the server state and runs the step
    (no downlink); else rank 0 alone does and broadcasts the iterate."""

    name = "?"
    summary = ""
    server_everywhere = True
    carries_control = False
    """True when rank 0's per-iteration stop decision (bit and time budgets) reaches every rank
    with the iteration's own messages; otherwise those budgets are checked at evaluation points."""

    def __init__(self, transport, alg, worker_ranks, me, x, encode_rng, downlink=None, downlink_rng=None):
        self.t, self.alg = transport, alg
        self.downlink = downlink                # a .downlink.Downlink (gather only; checked at plan time)
        self.down_rng = downlink_rng            # rank 0's generator for the downlink compressor
        self.worker_ranks = worker_ranks
        self.me = me                            # worker index of this rank, None on a dedicated server
        self.x = x                              # the iterate every rank reads (updated in place); an
        #                                         exchange may replace it by a view of its own receive
        #                                         buffer: the run reads ``exchange.x`` after building it
        self.rng = encode_rng                   # the generator compressors draw from
        self.n = len(worker_ranks)
        self.holds_server = self.server_everywhere or transport.is_root
        self.msgs = []
        self.counts = np.zeros(0, dtype=np.int64)   # the workers' payload lengths of the last iteration
        self.on_step = lambda: CONTINUE         # rank 0, after the server step (see the module doc)
        self.split = True                       # a barrier before each collective (run.wait_phases)

    @classmethod
    def check(cls, *, alg_cls, compressor, server: str) -> None:
        """Plan-time check (no data): raise ConfigError if this run cannot use the collective."""
        if cls.server_everywhere and server == "dedicated":
            raise ConfigError(f"run.collective = {cls.name!r} has no server: every rank holds the state and "
                              "takes the step; run.server = 'dedicated' needs run.collective = 'gather'")
        if cls.name not in compressor.collectives:
            raise ConfigError(f"compressor {compressor.spec} cannot ride run.collective = {cls.name!r}; "
                              f"collectives it can use: {', '.join(compressor.collectives)}")
        if cls.name not in alg_cls.collectives:
            raise ConfigError(f"algorithm {alg_cls.name!r} cannot run under run.collective = {cls.name!r}: "
                              f"{alg_cls.collectives_why}")

    # -- per iteration -------------------------------------------------------------------------
    hooked = 0.0
    """Seconds of the last :meth:`compute` spent in the exchange's own work (``run.overlap``: the
    buckets' casts and MPI calls, reported in ``compress`` and ``comm_up``); the loop takes them out
    of ``grad``."""
    hidden = 0.0
    """Seconds of the last :meth:`compute` with a collective in flight (``comm_hidden``)."""

    def compute(self, ws, x, local, rng) -> None:
        """The worker's gradient (or local steps): ``alg.worker_compute``; an overlapping exchange
        (:mod:`.overlap`) also starts each bucket's collective as the backward pass completes it."""
        self.alg.worker_compute(ws, x, local, rng)

    def encode(self, ws):
        """The worker's message (byte payload by default)."""
        return self.alg.worker_encode(ws, self.rng)

    def exchange(self, msg, ss) -> tuple[float, float, float, float, float, float]:
        raise NotImplementedError

    _sel = None

    def _messages(self, got):
        """The received (buffer, counts, displs) as the workers' :class:`Messages`, kept in ``msgs``
        for the untimed bit accounting (and the workers' payload lengths in ``counts``: a view of
        the transport's array when the worker ranks are consecutive, valid in this iteration)."""
        sel = self._sel
        if sel is None:
            sel = self._sel = rank_selection(self.worker_ranks)
        self.msgs = Messages.received(got, sel)
        self.counts = self.msgs.batch[2]
        return self.msgs

    def floor_ops(self, per_iteration: np.ndarray, d: int) -> list:
        """The collectives one iteration issues on this rank, as [(kind, bytes this rank contributes,
        dtype)] for :meth:`hpcgc.transport.CollectiveTimer.sequence` (``python -m hpcgc.bench floor``):
        from ``per_iteration`` = the transport's sender ledger (bytes per collective, ``LEDGER``
        order) divided by the iterations done, per rank (``per_iteration[r]``: rank r's), i.e. the
        run's mean message sizes."""
        raise NotImplementedError

    def _arrive(self) -> tuple[float, float]:
        """(arrived, released): ``wtime()`` before and after a barrier when ``split`` is on (the
        wait of a collective with no announcement of its own: Allreduce); the same instant twice
        when it is off (no barrier)."""
        t0 = wtime()
        if not self.split:
            return t0, t0
        self.t.sync()
        return t0, wtime()

    def _late_sender(self, t0: float, t1: float, t2: float) -> tuple[float, float]:
        """(wait_up, comm_up) of an uplink that announced its lengths from t0 to t1 and moved the
        payloads from t1 to t2: the announcement is the wait when ``split`` is on; else all is comm."""
        return (t1 - t0, t2 - t1) if self.split else (0.0, t2 - t0)

    def place_server_state(self, ss) -> None:
        """Called once by the run right after ``server_init`` on the ranks that hold the server state:
        an exchange may move the state's iterate into a buffer of its own. Default: an exchange
        without a server (every rank steps) and an algorithm that ``steps_in_place`` make the
        server's x the loop's x (same values), so the step writes the iterate where every rank
        reads it and nothing is copied per iteration (8 MiB at d = 2²⁰); the exchange copies only
        when the step returns another array (:meth:`_set_x`)."""
        if self.server_everywhere and ss is not None and self.alg.steps_in_place:
            self.x[:] = ss.x
            ss.x = self.x

    _sq = None

    def _set_x(self, xs, sq=None) -> None:
        """The loop's x ← the step's result (nothing to do when the step wrote it in place);
        ``sq``: its ‖x‖² when the step knows it (``Algorithm.step_norm_sq``), for :meth:`control`."""
        if xs is not self.x:
            self.x[:] = xs
        self._sq = sq

    def _stepped(self):
        """After the server step: rank 0's untimed bookkeeping (bits, budgets)."""
        return self.on_step() if self.t.is_root else CONTINUE

    def control(self) -> float:
        """Every rank: CONTINUE, STOP or DIVERGED after this iteration (collective-free)."""
        sq, self._sq = self._sq, None
        return DIVERGED if exploded(self.x, sq) else CONTINUE

    def iterate(self):
        """The iterate the run reports (metrics, ``x_final``): the server's own x, which is the
        broadcast x on every rank unless the downlink is compressed."""
        return self.x

    def down_model_bits(self) -> float:
        """Rank 0: this iteration's downlink model bits (0: no downlink)."""
        return 0.0

    def account(self, bits_model, bits_wire) -> float:
        """Rank 0: add this iteration's per-worker model and wire bits; return downlink wire bits.
        Vectorised over the workers (issue 31: the per-worker loop cost ≈ 1 µs per worker per
        iteration at -n 32): the wire bits from the payload lengths in one array operation; the
        model bits too when every worker's bits are a function of its payload's length
        (:meth:`_bits_by_length`) and the lengths are those of the previous iteration (fixed-size
        formats: every iteration after the first), and also when every worker's compressor has a
        fixed sparse layout (:meth:`~hpcgc.compressors.base.Compressor.sparse_layout`: rand-k,
        top-k, natural-randk — value bits + fixed-width or, where the header's flag says so,
        Elias-coded index bits, for all workers at once: :meth:`_sparse_bits`); else per message. Same values, same
        sums."""
        counts = self.counts
        key = counts.tobytes()                  # the lengths compared as bytes (cheaper than np.array_equal)
        if key != self._wire_key:
            self._wire_key, self._wire_vector = key, 8.0 * (LENGTH_BYTES + counts)
        np.add(bits_wire, self._wire_vector, out=bits_wire)
        if self._bits_by_length() and key == self._bits_key:
            np.add(bits_model, self._bits_vector, out=bits_model)
            return 0.0
        layouts = self._sparse_layouts()
        if layouts is not None:
            bits_model += self._sparse_bits(layouts, counts)
            return 0.0
        model = np.array([self.alg.model_bits(i, p) for i, p in self.msgs], dtype=np.float64)
        bits_model += model
        self._bits_key, self._bits_vector = key, model
        return 0.0

    _wire_key = None
    _bits_key = None
    _by_length = None
    _layouts = False

    def _bits_by_length(self) -> bool:
        """True when every worker's model bits are its compressor's formula of (d, payload length)
        (``Compressor.BITS_BY_LENGTH`` and the algorithm's own ``model_bits`` not overridden)."""
        if self._by_length is None:
            from ..algorithms.base import Algorithm
            self._by_length = (type(self.alg).model_bits is Algorithm.model_bits
                               and all(c.BITS_BY_LENGTH for c in self.alg.compressors))
        return self._by_length

    def _sparse_layouts(self):
        """Every worker's (value bits + fixed-width index bits, nnz, index-stream offset, value
        bits) as arrays (``Compressor.sparse_layout``), or None when some worker's compressor has
        none or the algorithm counts its own bits."""
        if self._layouts is False:
            from ..algorithms.base import Algorithm
            lay = ([c.sparse_layout(self.alg.d) for c in self.alg.compressors]
                   if type(self.alg).model_bits is Algorithm.model_bits else [None])
            if any(x is None for x in lay):
                self._layouts = None
            else:
                vbits = np.array([x[0] for x in lay], dtype=np.float64)
                nnz = np.array([x[1] for x in lay], dtype=np.int64)
                self._layouts = (vbits + nnz * bits_for(self.alg.d), nnz,
                                 np.array([x[2] for x in lay], dtype=np.int64), vbits)
        return self._layouts

    def _sparse_bits(self, layouts, counts):
        """The workers' model bits of this iteration from their payloads' headers, in one kernel call
        (:func:`~hpcgc.compressors.kernels.elias_gaps.sparse_layout_bits`): value bits +
        nnz·⌈log₂d⌉, or + the Elias stream's bits where the flag is set; ``alg.model_bits`` per
        message for a payload shorter than its layout or a stream the kernel refuses (neither in a
        valid run: the server step decoded them). Where this rank's server step has just decoded
        the same messages' streams (``Algorithm.stream_bits``: EF's sparse step), their bits come
        from that decode — the same numbers — instead of a second pass of serial decoding."""
        fixed, nnz, ioff, vbits = layouts
        known = self.alg.stream_bits(self.msgs)
        if known is not None:             # the server step decoded these streams: their bits, not a second decode
            return np.where(known >= 0, vbits + known, fixed)
        buf, starts, _ = self.msgs.batch
        model = np.empty(counts.shape[0])
        if sparse_layout_bits(buf, starts, counts, fixed, nnz, ioff, vbits, self.alg.d, model, DECODE_TABLE):
            for i in np.flatnonzero(model < 0):
                model[i] = self.alg.model_bits(int(i), self.msgs[i][1])
        return model

    def state(self) -> dict:
        """What the exchange carries from one iteration to the next (checkpoints); default: nothing.
        A typed tree (:mod:`hpcgc.typed_state`): a dict of str → numpy array, int, float, bool, str
        or such a dict, with the same names, shapes and dtypes from the start of the run on (a
        resumed checkpoint is checked against it); ``restore`` gets the same tree back."""
        return {}

    def restore(self, state: dict) -> None:
        return None

    def one_time(self, payload, ss) -> dict:
        """The algorithm's one-time set-up message (e.g. DIANA+'s S_i), delivered to every rank
        that holds the server state; returns per-worker model and wire bits (rank 0)."""
        got = self._deliver(EMPTY if payload is None else payload)
        out = {"model": np.zeros(self.n), "wire": np.zeros(self.n)}
        if got is not None:
            msgs = messages(got, self.worker_ranks)
            self.alg.server_setup(ss, msgs)
            for i, p in msgs:
                out["wire"][i] = 8 * (LENGTH_BYTES + p.size)
                out["model"][i] = self.alg.one_time_model_bits(i, p)
        return out

    def _deliver(self, payload):
        return self.t.allgather_payloads(payload)


