"""``allgather``: decentralized decode, no downlink (as GRACE and Horovod do for sparse messages).

    comm_up    Allgather of one 4-byte length per rank + Allgatherv of the payloads to every rank
    server     every rank decodes all n messages and takes the same step (identical iterates)
    comm_down  none (0)

Cost model (α–β, P ranks, payload s_i bytes): ring Allgatherv ≈ (P − 1)·α + β·Σ_{j≠i} s_j per
rank — every rank receives every other rank's payload, so its volume grows with P, unlike an
Allreduce; decode work is n messages on every rank instead of on rank 0 only.
"""
from __future__ import annotations

from ..transport import wtime
from .base import Exchange, messages


class Allgather(Exchange):
    name = "allgather"
    summary = "every rank Allgatherv's the payloads and decodes them all (no server, no downlink)"

    def exchange(self, msg, ss):
        t0 = wtime()
        got = self.t.allgather_payloads(msg)
        t1 = wtime()
        self.msgs = messages(got, self.worker_ranks)
        self.x[:] = self.alg.server_step(ss, self.msgs)
        t2 = wtime()
        self._stepped()
        return 0.0, t1 - t0, t2 - t1, 0.0
