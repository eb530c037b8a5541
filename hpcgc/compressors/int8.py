"""``int8``: an 8-bit integer cast with a scale shared by all ranks for the iteration, whose sum is
exact in int8 (so it rides ``MPI_Allreduce`` as ``MPI_INT8_T``).

Scale rule — a global max-norm scale agreed by one small Allreduce (MAX), not IntSGD's adaptive
scale (Mishchenko, Wang, Kovalev, Richtárik, "IntSGD: adaptive floatless compression of stochastic
gradients", ICLR 2022): IntSGD's α_k is computed from the iterates every rank already holds
(no extra message) but leaves the integer range to its clipping and an int32 sum; the max-norm
scale costs one 4-byte float32 MAX per iteration and *guarantees* that the int8 sum cannot wrap:

    s   = max over ranks of w_i‖x_i‖_∞, rounded up to float32      (Allreduce MAX, 32 bits)
    q   = ⌊127/n⌋ levels per rank (n workers; n ≤ 127, refused at plan time otherwise)
    C_i = (s/q)·SR(q·w_i x_i / s),  SR = stochastic rounding to an integer in [−q, q]
    Σ_i SR(...) ∈ [−n·q, n·q] ⊆ [−127, 127]: MPI's int8 SUM is exact; every rank decodes (s/q)·sum.

Unbiased: E[SR(y)] = y. Variance (per coordinate p(1−p) ≤ min(1/4, |y|) in units of s/q), in the
summed form the DCGD / DIANA / MARINA analyses use, Σ_i E‖C_i − w_i x_i‖² ≤ ω Σ_i ‖w_i x_i‖² with

    ω = min(n·d / (4q²), √(n·d) / q)

(d/4 per rank and s² ≤ Σ_i‖x_i‖²; or Σ_j|y_j| ≤ √d‖x_i‖·q/s and s·Σ_i‖x_i‖ ≤ √n·Σ_i‖x_i‖²).
Model bits = the wire type's: 8·d per rank, plus the 32-bit scale. A scale that is not a finite
float32 (a value beyond 3.4e38) is an overflow: the run ends with status ``overflow``.

Gather / allgather form (each rank's own scale, the same q and kernels): header | float32 s_i |
d int8 values; its ω is at most the one above (a rank's own scale is at most the shared one).
Under ``reduce-scatter`` each segment is sent in that form (its own scale; the owner decodes and
sums in float64, so the int8 range is not what limits the sum there).
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import ConfigError, PayloadError
from .base import Compressor, draw_seed, round_up_float32
from .kernels import casts, wire
from .summable import SumCodec

MAX_WORKERS = 127


def levels(n_workers: int) -> int:
    """q = ⌊127/n⌋: each rank's integer range [−q, q], so that n of them sum inside int8."""
    if n_workers > MAX_WORKERS:
        raise ConfigError(f"int8: {n_workers} workers leave no int8 level per rank (each rank gets ⌊127/n⌋ "
                          f"levels so that the int8 sum cannot overflow); int8 supports at most {MAX_WORKERS} workers")
    return MAX_WORKERS // max(1, n_workers)


class Int8(Compressor):
    """8-bit integers with a shared max-norm scale and stochastic rounding (unbiased)."""

    name = "int8"
    description = ("int8 stochastic rounding, scale = max over ranks of |x|_inf (one float32 Allreduce MAX), "
                   "q = 127/n levels per rank so the int8 sum is exact; unbiased; bits 8d + 32")
    FORMAT_ID = 14
    unbiased = True
    collectives = ("gather", "allreduce", "allgather", "reduce-scatter")
    segment_wise = True            # reduce-scatter: the gather form on each segment (decoded in float64)
    kernels = (casts.warm,)

    def _init(self) -> None:
        self.n = 1
        self.q = MAX_WORKERS
        self.overflow = 0.0

    def for_run(self, *, d: int, n_workers: int) -> Int8:
        c = type(self)(**self._params)
        c.n, c.q = n_workers, levels(n_workers)
        return c

    def check_workers(self, n_workers: int) -> None:
        levels(n_workers)

    def omega(self, d: int) -> float:
        nd = self.n * d
        return min(nd / (4.0 * self.q ** 2), math.sqrt(nd) / self.q)

    def model_bits(self, payload, d: int) -> int:
        self._check_payload(self._as_payload(payload, d), d, 4 + d)
        return 8 * d + 32

    def sum_codec(self, d: int, shape=None):
        return Int8Sum(d, self)

    # -- the segment-wise kernels' callers ------------------------------------------------------------
    def scale_of(self, x: np.ndarray, weight: float) -> float:
        """w·‖x‖_∞ rounded up to float32 (inf when it is not a finite float32; the value is then
        remembered in ``overflow``)."""
        m = abs(weight) * casts.max_abs(x)
        s = round_up_float32(m) if math.isfinite(m) else math.inf
        if not math.isfinite(s):
            if not math.isfinite(m):
                raise self._nonfinite_error(x)
            self.overflow = max(self.overflow, m)
        return s

    def encode_int8(self, x, weight: float, s: float, seed, out: np.ndarray) -> None:
        """out (int8) = SR(q·w·x/s) with the shared scale s (finite, > 0)."""
        if casts.stochastic_int8(x, weight, self.q / s, self.q, seed, out) != casts.OK:
            raise self._nonfinite_error(x)

    # -- gather / allgather form ----------------------------------------------------------------------
    def _compress(self, x: np.ndarray, seed: np.uint64) -> np.ndarray:
        d = x.shape[0]
        payload = self._new_payload(4 + d, d)
        body = payload[wire.HEADER_BYTES:]
        s = self.scale_of(x, 1.0)
        body[:4].view("<f4")[0] = s
        values = body[4:].view(np.int8)
        if s == 0.0 or not math.isfinite(s):
            values[:] = 0                    # an overflow travels as an Inf scale
        else:
            self.encode_int8(x, 1.0, s, seed, values)
        return payload

    def _read(self, payload, d):
        self._check_payload(payload, d, 4 + d)
        s = float(payload[wire.HEADER_BYTES:wire.HEADER_BYTES + 4].view("<f4")[0])
        if not (s >= 0.0):
            raise PayloadError(f"{self.name}: corrupted payload: scale {s}")
        return s, payload[wire.HEADER_BYTES + 4:].view(np.int8)

    def _decompress(self, payload: np.ndarray, d: int) -> np.ndarray:
        out = np.zeros(d)
        self._decompress_add(payload, d, out, 1.0)
        return out

    def _decompress_add(self, payload: np.ndarray, d: int, out: np.ndarray, weight: float) -> None:
        s, values = self._read(payload, d)
        if math.isinf(s):
            out += np.inf                    # the sender's scale overflowed: the aggregate is non-finite
            return
        casts.int8_add(values, weight * s / self.q, out, True)


class Int8Sum(SumCodec):
    """``int8`` under Allreduce: round 0 = one float32 (MAX) — the shared scale —, round 1 = d int8
    (SUM, exact). A non-finite scale sets ``overflowed`` on every rank (the same MAX everywhere)."""

    rounds = 2
    dtype = np.int8

    def __init__(self, d: int, comp: Int8):
        self.d, self.comp = d, comp
        self._s = np.zeros(1, dtype=np.float32)
        self._v = np.zeros(d, dtype=np.int8)

    def lengths(self):
        return (1, self.d)

    def round_dtypes(self):
        return (np.float32, np.int8)

    def reductions(self):
        return (("max", "float32"), ("sum", "int8"))

    def begin(self, x, weight, rng):
        self._seed = draw_seed(rng)
        self._x, self._w = x, weight
        self._s[0] = self.comp.scale_of(x, weight)
        return self._s

    def advance(self, r, total):
        s = self.step = float(total[0])
        if not math.isfinite(s):
            self.overflowed = True
            self._v[:] = 0
        elif s == 0.0:
            self._v[:] = 0
        else:
            self.comp.encode_int8(self._x, self._w, s, self._seed, self._v)
        self.step = s / self.comp.q if math.isfinite(s) else 0.0
        return self._v

    def decode_add(self, total, out, scale=1.0):
        casts.int8_add(total, scale * self.step, out, True)

    def own_add(self, out, weight):
        casts.int8_add(self._v, weight * self.step / self._w, out, True)

    def model_bits(self):
        return float(8 * self.d + 32)
