"""``allreduce``: no server; the messages are summed element-wise by ``MPI_Allreduce``.

    compress   the worker's round vectors and its own decoded message (PowerSGD: also the
               orthogonalization of the first sum and Mᵀ P̂ between its two rounds)
    wait_up    a barrier before each Allreduce round (``run.wait_phases``): idle until every rank is there
    comm_up    one Allreduce (SUM) per round of the message (PowerSGD: two)
    server     every rank decodes the one sum and takes the same step (identical iterates)
    wait_down, comm_down  none (0)

Only messages that add up ride it (:mod:`hpcgc.compressors.summable`): ``identity`` — the
uncompressed baseline a user would otherwise run (float32, or float64 with ``fp64=true``) — and
its 16-bit casts ``identity:fp16`` / ``identity:bf16`` (summed in the 16-bit type), ``int8``
(one float32 MAX of the shared scale, then an int8 SUM), ``sign`` (the majority vote of
``signsgd-mv``: an int8 SUM of ±1), ``randk:k=K,shared_seed=true`` and ``powersgd``. A cast
whose sum overflows (Inf in the decoded sum, the same on every rank) ends the run with status
``overflow``. Each worker applies its aggregation weight w_i
before the sum (with equal weights: none; the sum is scaled by w once), so every rank decodes
Σ_i w_i C(v_i) — the same aggregate a parameter server forms, to float rounding.

Cost model (α–β, P ranks, m bytes per rank): ring (reduce-scatter + allgather)
≈ 2(P − 1)·α + 2β·m·(P − 1)/P per rank, independent of P in volume; recursive doubling for small
messages ≈ log₂P·(α + β·m). MPICH chooses by size.
"""
from __future__ import annotations

import numpy as np

from ..transport import wtime
from .base import DIVERGED, Exchange


class Aggregate:
    """``add_sum(out)``: out += the decoded aggregate of the last round's sum (what
    ``Algorithm.server_reduced`` calls). ``dense`` = (sum, scale) when that aggregate is the sum
    itself times ``scale``, element by element (``identity``: :class:`~hpcgc.compressors.summable.DenseSum`),
    so that an algorithm may read the sum in its step instead of decoding it into a vector first
    (DIANA/DCGD: :func:`hpcgc.algorithms.kernels.step_from_sum`); else None."""

    __slots__ = ("codec", "dense", "scale", "total")

    def __init__(self, codec, total, scale: float):
        self.codec, self.total, self.scale = codec, total, scale
        self.dense = (total, scale) if getattr(codec, "dense_sum", False) else None

    def __call__(self, out) -> None:
        self.codec.decode_add(self.total, out, self.scale)


class Allreduce(Exchange):
    name = "allreduce"
    summary = "every rank sums the messages with MPI_Allreduce (summable compressors only), no server"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        alg = self.alg
        self.codec = alg.sum_codec(self.me)
        w = np.asarray(alg.weights, dtype=np.float64)
        equal = bool(np.all(w == w[0]))
        self.weight = 1.0 if equal else float(w[self.me])     # applied by the worker before the sum
        self.scale = float(w[0]) if equal else 1.0             # applied once to the sum
        self.sums = [np.empty(n, dtype=dt) for n, dt in zip(self.codec.lengths(), self.codec.round_dtypes())]
        self.ops = self.codec.reductions()

    @classmethod
    def check(cls, *, alg_cls, compressor, server: str) -> None:
        super().check(alg_cls=alg_cls, compressor=compressor, server=server)
        from ..transport import reduction
        wire = getattr(compressor, "wire_type", None)
        if wire in ("float16", "bfloat16"):
            reduction("sum", wire)               # UserError when this MPI has no such SUM
    def encode(self, ws):
        self.ws = ws
        return self.codec.begin(self.alg.worker_message(ws), self.weight, self.rng)

    def exchange(self, msg, ss):
        codec, v, extra, wait, up = self.codec, msg, 0.0, 0.0, 0.0
        t = self.t
        for r, total in enumerate(self.sums):
            t0, t1 = self._arrive()
            t.allreduce(v, total, *self.ops[r])
            t2 = wtime()
            wait += t1 - t0
            up += t2 - t1
            if r + 1 < len(self.sums):
                v = codec.advance(r + 1, total)
                extra += wtime() - t2
        t2 = wtime()
        self._set_x(self.alg.server_reduced(ss, Aggregate(codec, self.sums[-1], self.scale)))
        t3 = wtime()
        self.alg.worker_sent(self.ws, codec.own_add)
        t4 = wtime()
        self._stepped()
        return extra + t4 - t3, wait, up, t3 - t2, 0.0, 0.0

    def floor_ops(self, per_iteration, d: int) -> list:
        """One Allreduce per round, of the round's vector (its planned length and dtype) with the
        round's operation and wire type (the casts' float16 / bfloat16 SUM, int8's MAX and SUM)."""
        return [("allreduce", n * np.dtype(dt).itemsize, np.dtype(dt), *how)
                for n, dt, how in zip(self.codec.lengths(), self.codec.round_dtypes(), self.ops)]

    def control(self) -> float:
        """DIVERGED also when a cast overflowed (the run's status then says ``overflow``)."""
        return DIVERGED if self.codec.overflowed else super().control()

    def state(self) -> dict:
        return self.codec.state()                  # PowerSGD's warm-start Q

    def restore(self, state: dict) -> None:
        self.codec.restore(state)

    def account(self, bits_model, bits_wire) -> float:
        bits_wire += 8.0 * self.codec.wire_bytes()
        bits_model += self.codec.model_bits()
        return 0.0
