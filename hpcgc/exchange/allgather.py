"""``allgather``: decentralized decode, no downlink (as GRACE and Horovod do for sparse messages).

    wait_up    Allgather of one 4-byte length per rank (the announcement): every rank waits in it
               for the last one to arrive (late sender), plus one latency
    comm_up    Allgatherv of the payloads to every rank
    server     every rank decodes all n messages and takes the same step (identical iterates)
    wait_down, comm_down  none (0)

Cost model (α–β, P ranks, payload s_i bytes): ring Allgatherv ≈ (P − 1)·α + β·Σ_{j≠i} s_j per
rank — every rank receives every other rank's payload, so its volume grows with P, unlike an
Allreduce; decode work is n messages on every rank instead of on rank 0 only.
"""
from __future__ import annotations

import numpy as np

from ..transport import wtime
from .base import Exchange, mean_bytes


class Allgather(Exchange):
    name = "allgather"
    summary = "every rank Allgatherv's the payloads and decodes them all (no server, no downlink)"

    def exchange(self, msg, ss):
        t0 = wtime()
        msg = self.t.allgather_lengths(msg)         # every rank waits here for the last one
        t1 = wtime()
        got = self.t.allgatherv(msg)
        t2 = wtime()
        xs = self.alg.server_step(ss, self._messages(got))
        self._set_x(xs, self.alg.step_norm_sq(ss))
        t3 = wtime()
        self._stepped()
        return (0.0, *self._late_sender(t0, t1, t2), t3 - t2, 0.0, 0.0)

    def floor_ops(self, per_iteration, d: int) -> list:
        """Allgather + Allgatherv of this rank's mean payload."""
        return [("allgather", mean_bytes(per_iteration, self.t.rank, "Allgatherv"), np.uint8)]
