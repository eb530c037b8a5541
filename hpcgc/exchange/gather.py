"""``gather``: the parameter server (the default, as the seeds describe it).

    comm_up    Gather of one 4-byte length per rank + Gatherv of the payloads to rank 0
    server     rank 0 decodes, aggregates and steps
    comm_down  Bcast of the new iterate (float64) and one control word from rank 0

Cost model (α–β, P ranks, payload s_i bytes, d coordinates): the Gatherv moves Σ_{i≠0} s_i bytes
into rank 0's link, ≈ α·log P + β·Σ s_i; the broadcast 8(d + 1) bytes to every rank,
≈ (α + β·8(d + 1))·log P for a binomial tree (MPICH switches to scatter + allgather,
≈ 2β·8(d + 1), for large messages). The downlink is dense whatever the compressor.
"""
from __future__ import annotations

import numpy as np

from ..transport import wtime
from .base import DIVERGED, EMPTY, Exchange, exploded, messages


class Gather(Exchange):
    name = "gather"
    summary = "parameter server: Gatherv of the payloads to rank 0, step on rank 0, Bcast of the iterate"
    server_everywhere = False
    carries_control = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        d = self.x.shape[0]
        self.xbuf = np.zeros(d + 1)             # iterate + one control word

    def encode(self, ws):
        return EMPTY if ws is None else super().encode(ws)

    def exchange(self, msg, ss):
        t0 = wtime()
        got = self.t.gather_payloads(msg)
        t1 = wtime()
        if got is not None:
            self.msgs = messages(got, self.worker_ranks)
            self.xbuf[:-1] = self.alg.server_step(ss, self.msgs)
            t2 = wtime()
            control = self._stepped()
            self.xbuf[-1] = DIVERGED if exploded(self.xbuf[:-1]) else control
        else:
            t2 = t1
        t3 = wtime()
        self.t.bcast(self.xbuf)
        t4 = wtime()
        self.x[:] = self.xbuf[:-1]
        return 0.0, t1 - t0, t2 - t1, t4 - t3

    def control(self) -> float:
        return float(self.xbuf[-1])

    def account(self, bits_model, bits_wire) -> float:
        super().account(bits_model, bits_wire)
        return 8.0 * self.xbuf.nbytes

    def _deliver(self, payload):
        return self.t.gather_payloads(payload)
