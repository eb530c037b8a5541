"""``run.overlap`` under ``run.collective = "gather"``: the parameter server receives each bucket by
``MPI_Igather`` while the backward pass computes the layers below it.

The slots and the per-bucket compressors are those of :mod:`.overlap_allgather` (each layer
compressed alone by ``C.segment(d, d_j)``, its payload in a slot of the compressor's payload bound
with its 4-byte length, no announcement); each bucket's slot goes to rank 0 alone
(:meth:`hpcgc.transport.Transport.igather_slots`). After the backward pass every rank waits for its
requests (``MPI_Waitall``: rank 0 for every worker's buckets), rank 0 decodes them into the
aggregate and steps (``server_reduced``), and the downlink is :class:`.gather.Gather`'s — the control
word and the iterate, or the compressed downlink (EF21-P), unchanged. ``run.overlap_blocking = true``:
the same per-bucket method with a blocking ``MPI_Gather`` per bucket after the pass (the reference an
overlapped run equals bit for bit; ``tests/mpi/test_overlap_allgather_mpi.py``).

Phases: as :mod:`.overlap` on the uplink (``wait_up`` 0: rank 0's wait for the last worker is in
``comm_up``, the final wait), as ``gather`` on the downlink. ``run.server = "dedicated"`` is refused
(a rank without data has no backward pass to start buckets from).
"""
from __future__ import annotations

import numpy as np

from ..transport import wtime
from .gather import Gather
from .overlap_allgather import OverlapAllgather


class OverlapGather(OverlapAllgather, Gather):
    """``gather`` with one ``Igather`` of fixed-size slots per bucket to rank 0, then the server's
    step and the downlink of :class:`Gather`."""

    name = "gather"
    summary = "parameter server: each layer's compressed bucket goes to rank 0 by MPI_Igather as the backward pass completes it"
    server_everywhere = False
    carries_control = True

    def _start_bucket(self, j: int, v) -> None:
        self.t.igather_slots(v, self.recv[j] if self.t.is_root else None)

    def _up(self, msg):
        """(rank 0: True, else None; t0, t0, t2): every bucket received; no announcement to wait in."""
        t0 = wtime()
        if self.blocking:
            for j in range(len(self.buckets)):
                self.t.gather_slots(self.slots[j], self.recv[j] if self.t.is_root else None)
        else:
            self.t.wait_pending()
        return (True if self.t.is_root else None), t0, t0, wtime()

    def _server(self, ss, got):
        return self.alg.server_reduced(ss, self._add_sum)

    def exchange(self, msg, ss):
        out = Gather.exchange(self, msg, ss)
        t0 = wtime()
        self.alg.worker_sent(self.ws, self._own_add)
        own = wtime() - t0
        if self.blocking:
            return (out[0] + own, *out[1:])
        return (out[0] + own + self._compress, out[1], out[2] + self._comm, *out[3:])

    def account(self, bits_model, bits_wire) -> float:
        OverlapAllgather.account(self, bits_model, bits_wire)
        return self._down_wire_bits()

    def floor_ops(self, per_iteration, d: int) -> list:
        """One Gather of the slots per bucket, then :class:`Gather`'s downlink."""
        return [("gather", s, np.uint8) for s in self.slot_bytes] + Gather.floor_ops(self, per_iteration, d)[1:]
