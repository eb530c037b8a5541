"""``reduce-scatter``: a compressed Allreduce (CGX, Markov et al. 2022; DeepSpeed's compressed
Allreduce for 1-bit Adam, Tang et al. 2021; gTop-k, Shi et al. 2019, for top-k per segment).

Each rank splits its message into n contiguous balanced segments (segment j belongs to rank j;
:mod:`hpcgc.compressors.segments`), compresses each with the compressor's segment-wise form
(stage 1), and sends segment j to rank j; rank j decodes the n pieces of its segment and sums them
with the aggregation weights (S_j = Σ_i w_i C₁(Δ_i)[j]), compresses the reduced segment
(stage 2) and every rank gathers every compressed reduced segment, decodes the whole vector and
takes the same step: no server, identical iterates on every rank.

    compress   stage 1: the n segments' encode (timed by the loop), and stage 2: the owner's
               encode of its reduced segment (returned as the exchange's extra compress time)
    wait_up    ``Alltoall`` of the per-destination payload lengths (int32): every rank waits
               there for the last one (late sender)
    comm_up    ``Alltoallv`` of the compressed segments (uint8)
    server     the owner's decode-and-sum of its segment's n pieces, and every rank's decode of the
               n reduced segments and the step
    wait_down  ``Allgather`` of the reduced segment's length (and the rank's stage-1 bytes and model
               bits, for rank 0's bit accounting): 24 bytes per rank
    comm_down  ``Allgatherv`` of the compressed reduced segments

Why ``MPI_Alltoallv`` rather than a pairwise or ring schedule: the compressed pieces have sizes
known only after compression (sparse formats, Elias codes), so a lengths ``Alltoall`` and one
``Alltoallv`` of uint8 is the simplest schedule whose bytes are exactly the buffers' sizes; MPICH
then picks its own pairwise/scattered algorithm.

Second stage and the aggregate's state (``docs/methods.md``, "Compressed reduce-scatter"): the
owner of a segment keeps D = (the replicated aggregate state) − (the exact one) for its segment,
sends m = s₂·C₂(S − D) and updates D ← D + α₂(m − S); every rank hands m to the algorithm's
step as the aggregate. The algorithm chooses (α₂, s₂) (:meth:`Algorithm.second_stage`):
DCGD and MARINA (0, 1): plain C₂(S); DIANA (α, 1): its server shift stays unbiased for the mean of
the workers' shifts; EF and EF21 (1, s₂): error feedback on the owner (s₂ = 1/(1 + ω₂) for an
unbiased compressor, 1 for a contractive one). D is checkpointed (:meth:`state`).

Cost model (α–β, P ranks, b bits per coordinate after compression, headers aside): each rank
sends and receives (P − 1)/P of its compressed vector in the Alltoallv and again in the
Allgatherv: ≈ 2·d·b·(P − 1)/P bits per rank, independent of P in volume, plus the latency terms
of the two lengths' collectives and the two payload collectives — with MPICH's pairwise Alltoallv
and ring Allgatherv ≈ 2(P − 1)·α (+ the two small collectives' ≈ 2·log₂P·α). ``docs/cost-models.md``.
"""
from __future__ import annotations

import numpy as np

from ..compressors import make
from ..compressors import segments as seg
from ..errors import ConfigError
from ..transport import LENGTH_BYTES, wtime
from .base import Exchange, mean_bytes
from .kernels import second_stage_update


class ReduceScatter(Exchange):
    name = "reduce-scatter"
    summary = ("compressed Allreduce: Alltoallv of compressed segments, owner decodes and sums, "
               "re-compresses, Allgatherv (segment-wise compressors), no server")

    @classmethod
    def check(cls, *, alg_cls, compressor, server: str) -> None:
        super().check(alg_cls=alg_cls, compressor=compressor, server=server)
        compressor.segment(1 << 20, 1 << 18)            # a compressor without a segment-wise form: ConfigError
        if getattr(compressor, "shared_randomness", False):
            raise ConfigError(f"{compressor.spec} draws shared randomness; under run.collective = 'reduce-scatter' "
                              "the second stage draws on one rank only: use it without shared_seed")

    def __init__(self, transport, alg, worker_ranks, me, x, encode_rng, downlink=None, downlink_rng=None):
        super().__init__(transport, alg, worker_ranks, me, x, encode_rng, downlink, downlink_rng)
        if worker_ranks != list(range(transport.size)):
            raise ConfigError("run.collective = 'reduce-scatter' needs every rank to be a worker")
        d, n = alg.d, self.n
        self.bounds = seg.bounds(d, n)
        comp = alg.compressors[me]
        self.comps = seg.segment_compressors(comp, d, n)
        self.codecs = [c.prepared(b - a) for c, (a, b) in zip(self.comps, self.bounds)]
        self._dense_comp = dense = make("identity:fp64=true")      # dense rounds (EF21's first, MARINA's)
        self.dense = [dense.prepared(b - a) for a, b in self.bounds]
        self.weights = np.asarray(alg.weights, dtype=np.float64)
        self.alpha2, self.scale2 = alg.second_stage(d, n)
        a, b = self.bounds[me]
        self.D = np.zeros(b - a)                        # replicated − exact aggregate state, own segment
        self._S = np.zeros(b - a)
        self._u = np.zeros(b - a)                       # S − D, stage 2's input
        self._m = np.zeros(b - a)                       # s₂·C₂(S − D) decoded; zero between iterations
        self._agg = np.zeros(d)
        self._info = None
        self._sent = np.zeros(2)                        # this iteration's stage-1 bytes to others, model bits

    # -- per iteration -------------------------------------------------------------------------
    def encode(self, ws):
        self.ws = ws
        vec, dense = self.alg.rs_message(ws)
        self._dense = dense
        codecs = self.dense if dense else self.codecs
        rng = self.rng
        pays = [c.encode(vec[a:b], rng) for c, (a, b) in zip(codecs, self.bounds)]

        def own_add(out, w):
            for c, p, (a, b) in zip(codecs, pays, self.bounds):
                c.add(p, out[a:b], w)
        self.alg.rs_sent(ws, own_add, dense)
        counts = np.array([p.size for p in pays], dtype=np.int32)
        me = self.me
        comps = [self._dense_comp] * self.n if dense else self.comps
        self._sent[0] = float(counts.sum() - counts[me])
        self._sent[1] = float(sum(c.model_bits(p, b - a) for j, (c, p, (a, b))
                                  in enumerate(zip(comps, pays, self.bounds)) if j != me))
        return np.concatenate(pays), counts

    def exchange(self, msg, ss):
        t, me, n = self.t, self.me, self.n
        sendbuf, counts = msg
        dense = self._dense
        codecs = self.dense if dense else self.codecs
        mine = codecs[me]
        t0 = wtime()
        t.alltoall_lengths(counts)                      # every rank waits here for the last one
        t1 = wtime()
        buf, rc, rd = t.alltoallv(sendbuf)
        t2 = wtime()
        S, w = self._S, self.weights
        S[:] = 0.0
        for r in range(n):
            mine.add(buf[rd[r]:rd[r] + rc[r]], S, w[r])
        t3 = wtime()
        p2, model2 = self.recompress(S)
        t4 = wtime()
        self._info = t.allgather_announce(p2, (self._sent[0], self._sent[1] + model2)).copy()
        t5 = wtime()
        got, cnt, dis = t.allgatherv(p2)
        t6 = wtime()
        s2, bounds = self.scale2, self.bounds

        def add_sum(out):
            for j, (c, (a, b)) in enumerate(zip(codecs, bounds)):
                c.add(got[dis[j]:dis[j] + cnt[j]], out[a:b], s2)
        self._set_x(self.alg.rs_reduced(ss, add_sum, dense))
        t7 = wtime()
        self._stepped()
        wait_up, up = self._late_sender(t0, t1, t2)
        wait_down, down = self._late_sender(t4, t5, t6)
        return t4 - t3, wait_up, up, (t3 - t2) + (t7 - t6), wait_down, down

    def recompress(self, S):
        """Stage 2 on the owner of segment ``me`` (the caller summed its n stage-1 pieces into S):
        the payload of C₂(S − D) and its model bits; with α₂ ≠ 0, D ← D + α₂·(s₂·C₂(S − D) − S)
        (module doc). No MPI. S − D is written into a buffer of the exchange's, and D is updated in
        one pass: by the codec's fused decode where it has one (``Prepared.update``: qsgd), else
        by a decode into m and :func:`.kernels.second_stage_update` (which also re-zeroes m) —
        the same bits as ``u = S - D`` … ``m[:] = 0; add(p, m, s₂); D += α₂·(m − S)``."""
        me, dense = self.me, self._dense
        mine = (self.dense if dense else self.codecs)[me]
        u = self._u
        np.subtract(S, self.D, out=u)
        p2 = np.ascontiguousarray(mine.encode(u, self.rng))
        if self.alpha2 != 0.0:
            if mine.update is not None:
                mine.update(p2, self.D, S, self.alpha2, self.scale2)
            else:
                mine.add(p2, self._m, self.scale2)
                second_stage_update(self.D, self._m, S, self.alpha2)
        a, b = self.bounds[me]
        return p2, (self._dense_comp if dense else self.comps[me]).model_bits(p2, b - a)

    def account(self, bits_model, bits_wire) -> float:
        """Rank 0: every worker's bits of this iteration, from the announced table: wire = its
        lengths' Alltoall (4 bytes to each other rank) + the stage-1 bytes it sent to the other
        ranks + its 24-byte announcement + its reduced segment's payload; model = the papers' bits
        of the stage-1 segments it sent to other ranks and of its stage-2 segment."""
        info, n = self._info, self.n
        ann = 8 * info.shape[1]
        bits_wire += 8.0 * (LENGTH_BYTES * (n - 1) + info[:, 1] + ann + info[:, 0])
        bits_model += info[:, 2]
        return 0.0

    def floor_ops(self, per_iteration, d: int) -> list:
        """Alltoall + Alltoallv of this rank's mean stage-1 bytes to the other ranks, then Allgather +
        Allgatherv of its mean reduced-segment payload."""
        r = self.t.rank
        return [("alltoall", mean_bytes(per_iteration, r, "Alltoallv"), np.uint8),
                ("allgather", mean_bytes(per_iteration, r, "Allgatherv"), np.uint8)]

    def state(self) -> dict:
        return {"D": self.D.copy()}

    def restore(self, state: dict) -> None:
        if "D" in state:
            self.D[:] = state["D"]
