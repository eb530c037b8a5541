"""``run.overlap`` under ``run.collective = "allgather"``: each bucket compressed alone and gathered
by every rank with ``MPI_Iallgather`` while the backward pass computes the layers below it.

The blocking ``allgather`` announces each payload's length (an ``Allgather`` of one int32) before
the ``Allgatherv`` of the payloads: two chained collectives, the second sized by the first. A
non-blocking pair would need the first to complete before the second can be posted, i.e. a wait in
the middle of the backward pass. Instead, a bucket's payload travels in a **slot** whose size every
rank knows before the pass starts — 4 bytes of payload length (little-endian uint32), the payload,
zero padding up to the compressor's :meth:`~hpcgc.compressors.base.Compressor.payload_bound` — and
one ``Iallgather`` of the slots per bucket moves it (:meth:`hpcgc.transport.Transport.iallgather_slots`)::

    backward pass                                    MPI
      layer L done → C_L(m[a_L:b_L]) → slot L → Iallgather(slot L)    … in flight …
      layer L−1 done → … → Iallgather(slot L−1), Testall              … in flight …
    exchange: Waitall → every rank decodes every worker's bucket payloads into m → the step

**Per-bucket compression.** Bucket j (one layer, :meth:`hpcgc.models.Model.buckets`) of length d_j
is compressed alone by ``C.segment(d, d_j)`` — the segment-wise form ``reduce-scatter`` uses
(:mod:`hpcgc.compressors.segments`): top-k and rand-k keep k_j = min(d_j, ⌈k·d_j/d⌉) coordinates,
so k_j/d_j ≥ k/d and rand-k's ω_j = d_j/k_j − 1 ≤ ω(d), top-k's δ_j = k_j/d_j ≥ δ(d): the
algorithms' whole-vector constants (DIANA's α and γ, DCGD's γ) stay valid for the per-bucket
compressor, which is top-k per layer as in Shi et al. (gTop-k, 2019) and DGC's per-layer selection
(Lin et al., ICLR 2018). Σ_j k_j can exceed k by fewer than one per bucket (the ceilings). This is
a different compressor from whole-vector top-k, so ``run.overlap_blocking = true`` runs the same
per-bucket method with blocking ``MPI_Allgather`` calls after the backward pass: the reference the
overlapped run equals bit for bit (same seed, same draws in the same order: each bucket's codec
draws one 64-bit word from the encode generator, output layer first, after the mini-batch's draws;
``tests/mpi/test_overlap_allgather_mpi.py``).

Supported (checked at plan time, :func:`hpcgc.exchange.overlap.refusal`): dcgd and diana with
rand-k (``shared_seed=false``), ef with top-k — compressors with a segment-wise form and a declared
payload bound. Refused: every other compressor (its payload length is not bounded in advance, or
it has no per-bucket form), ef with an unbiased compressor (its step scales the decoded sum by the
whole vector's s = 1/(1 + ω), not the buckets'). ``gather``: :mod:`.overlap_gather` (the same
slots, ``MPI_Igather`` to rank 0).

Bits: the ledger counts the slots handed to MPI (``Allgather``: padding and the 4-byte length
included, ``bits_wire``); ``bits_model`` counts each bucket payload's model bits, as the blocking
allgather does for its payload. Phases as in :mod:`.overlap` (``comm_hidden``, the window H).
"""
from __future__ import annotations

import numpy as np

from ..errors import PayloadError
from ..transport import LENGTH_BYTES, wtime
from .overlap import Bucketed


class OverlapAllgather(Bucketed):
    """``allgather`` with one ``Iallgather`` of fixed-size slots per bucket (``blocking``: the same
    per-bucket method with blocking ``Allgather`` calls after the backward pass)."""

    name = "allgather"
    summary = "every rank gathers each layer's compressed bucket with MPI_Iallgather as the backward pass completes it"

    def __init__(self, *args, buckets, blocking: bool = False, **kwargs):
        super().__init__(*args, buckets=buckets, **kwargs)
        self.blocking = bool(blocking)
        d, size = self.alg.d, self.t.size
        self.comps = [[c.segment(d, b - a) for a, b in self.buckets] for c in self.alg.compressors]
        self.codecs = [[c.prepared(b - a) for c, (a, b) in zip(row, self.buckets)] for row in self.comps]
        bounds = [max(row[j].payload_bound(b - a) for row in self.comps) for j, (a, b) in enumerate(self.buckets)]
        self.slot_bytes = [LENGTH_BYTES + s for s in bounds]
        self.slots = [np.zeros(s, dtype=np.uint8) for s in self.slot_bytes]
        self.recv = [np.zeros((size, s), dtype=np.uint8) for s in self.slot_bytes]
        self.lengths = [0] * len(self.buckets)

    # -- the worker's buckets --------------------------------------------------------------------
    def _encode_bucket(self, j: int, a: int, b: int):
        """C_j(m[a:b]) into slot j: its length, the payload, zeros."""
        payload = self.codecs[self.me][j].encode(self.alg.worker_message(self.ws)[a:b], self.rng)
        slot, n = self.slots[j], payload.size
        if n > slot.size - LENGTH_BYTES:
            raise RuntimeError(f"run.overlap: bucket {j}'s payload has {n} bytes, more than the bound "
                               f"{slot.size - LENGTH_BYTES} of {self.comps[self.me][j].spec}")
        slot[:LENGTH_BYTES] = np.frombuffer(np.uint32(n).tobytes(), dtype=np.uint8)
        slot[LENGTH_BYTES:LENGTH_BYTES + n] = payload
        slot[LENGTH_BYTES + n:] = 0
        self.lengths[j] = n
        return slot

    def _start_bucket(self, j: int, v) -> None:
        self.t.iallgather_slots(v, self.recv[j])

    def compute(self, ws, x, local, rng) -> None:
        if not self.blocking:
            return super().compute(ws, x, local, rng)
        self.ws, self.hooked, self.hidden = ws, 0.0, 0.0
        self.alg.worker_compute(ws, x, local, rng)

    def encode(self, ws):
        if self.blocking:                                 # every bucket after the pass, in the same order
            for j, (a, b) in enumerate(self.buckets):
                self._encode_bucket(j, a, b)
        return None                                       # else: every bucket was encoded in compute

    def window_seconds(self) -> float:
        return 0.0 if self.blocking else super().window_seconds()

    # -- after the backward pass -----------------------------------------------------------------
    def _payloads(self, j: int):
        """[(worker index, payload view)] of bucket j as received."""
        rows = self.recv[j]
        out = []
        for i, rk in enumerate(self.worker_ranks):
            n = int.from_bytes(rows[rk, :LENGTH_BYTES].tobytes(), "little")
            if n > rows.shape[1] - LENGTH_BYTES:
                raise PayloadError(f"run.overlap: worker {i}'s bucket {j} announces {n} bytes in a slot of "
                                   f"{rows.shape[1] - LENGTH_BYTES}")
            out.append((i, rows[rk, LENGTH_BYTES:LENGTH_BYTES + n]))
        return out

    def _add_sum(self, out) -> None:
        """out += Σ_i w_i C_ij(payload_ij) on every bucket j (workers in order, as ``server_step``)."""
        weights = self.alg.weights
        for j, (a, b) in enumerate(self.buckets):
            for i, p in self._payloads(j):
                self.codecs[i][j].add(p, out[a:b], weights[i])

    def _own_add(self, out, weight) -> None:
        """out += weight·C(m) from this worker's own bucket payloads (``worker_sent``)."""
        for j, (a, b) in enumerate(self.buckets):
            n = self.lengths[j]
            self.codecs[self.me][j].add(self.slots[j][LENGTH_BYTES:LENGTH_BYTES + n], out[a:b], weight)

    def exchange(self, msg, ss):
        t0 = wtime()
        if self.blocking:
            arrived, t0 = self._arrive()
            for j in range(len(self.buckets)):
                self.t.allgather_slots(self.slots[j], self.recv[j])
        else:
            arrived = t0
            self.t.wait_pending()
        t1 = wtime()
        self._set_x(self.alg.server_reduced(ss, self._add_sum))
        t2 = wtime()
        self.alg.worker_sent(self.ws, self._own_add)
        t3 = wtime()
        self._stepped()
        if self.blocking:
            return t3 - t2, t0 - arrived, t1 - t0, t2 - t1, 0.0, 0.0
        return self._compress + t3 - t2, 0.0, self._comm + t1 - t0, t2 - t1, 0.0, 0.0

    def floor_ops(self, per_iteration, d: int) -> list:
        """One Allgather of the slots per bucket (blocking: the floor measures the transfers)."""
        return [("allgather", s, np.uint8) for s in self.slot_bytes]

    def account(self, bits_model, bits_wire) -> float:
        """Rank 0: the slots' bytes (wire) and the bucket payloads' model bits, per worker."""
        bits_wire += 8.0 * sum(self.slot_bytes)
        for j, (a, b) in enumerate(self.buckets):
            for i, p in self._payloads(j):
                bits_model[i] += self.comps[i][j].decoded_model_bits(p, b - a)
        return 0.0
