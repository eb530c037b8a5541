"""``sign`` (signSGD) and ``scaled-sign`` (‖x‖₁/d · sign x): one bit per entry, biased.

* ``sign``: C(x) = sign(x) (Bernstein, Wang, Azizzadenesheli, Anandkumar, *signSGD: Compressed
  Optimisation for Non-Convex Problems*, ICML 2018). Not a contraction in the ‖C(x) − x‖² ≤
  (1 − δ)‖x‖² sense (its scale ignores ‖x‖), so ``delta`` is None. Model bits: d.
* ``scaled-sign``: C(x) = (‖x‖₁/d)·sign(x) (Karimireddy, Rebjock, Stich, Jaggi, *Error Feedback
  Fixes SignSGD and other Gradient Compression Schemes*, ICML 2019). With s = ‖x‖₁/d,
  ‖C(x) − x‖² = ‖x‖² − 2s‖x‖₁ + d·s² = (1 − δ(x))‖x‖² exactly, δ(x) = ‖x‖₁²/(d‖x‖₂²) ≥ 1/d
  (`spec/compressors.md` Part C), so ``delta(d)`` = 1/d (attained by a one-spike vector) and
  ``contraction(x)`` = δ(x). Model bits: F + d.

One bit per entry cannot say "zero": sign(0) is sent as +1 (bit 0), for both. The identity above
uses |sign(x_j)| = 1 for every j, so it holds with zeros too. Bit j of the stream is 1 iff
x_j < 0 (LSB-first, 8 entries per byte; −0.0 counts as +).

Under ``allreduce`` (``sign`` only: :class:`SignSum`) the message is the vector of ±1 in the
smallest integer type whose SUM over the n workers cannot wrap — int8 for n ≤ 127, int16 for
n ≤ 32 767, else int32 (:func:`vote_dtype`) —, so MPI's integer SUM is the exact vote count
Σ_i sign(x_i) of signSGD with majority vote (Bernstein, Zhao, Azizzadenesheli, Anandkumar,
ICLR 2019): 1 model bit per entry, 8 wire bits (int8) — MPI cannot sum packed bits.

Wire format (after the 8-byte header): ``scaled-sign`` first sends the scale ‖x‖₁/d (float32,
round to nearest, or float64 with ``fp64=true``; ‖x‖₁ is summed in float64); then ⌈d/8⌉ bytes of
sign bits, unused high bits of the last byte zero.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from ..errors import ConfigError, PayloadError
from .base import Compressor, DecodeInto, draw_seed
from .kernels import wire
from .kernels.wire import le_word
from .params import FP64_PARAM
from .summable import SumCodec


@njit(cache=True)
def sign_pack(keys, neg0, mask, out, offset):
    """Bit t of out[offset + g] = [keys[8g + t] > neg0] (x < 0, from the IEEE bits: sign set and
    magnitude non-zero, so −0.0 counts as +), ⌈d/8⌉ bytes; returns max_i keys[i] & mask, which
    is ≥ the all-ones exponent iff x holds NaN/±Inf. ``keys`` = x viewed as uint32/uint64;
    ``neg0`` (= −0.0's bits) and ``mask`` (sign cleared) have its type. Integer-only, vectorises."""
    d = keys.shape[0]
    n8 = d // 8
    mx = keys[0] & mask
    ob = out[offset:offset + n8]
    for g in range(n8):
        b = np.uint8(0)
        for t in range(8):
            k = keys[8 * g + t]
            b |= np.uint8(k > neg0) << np.uint8(t)
            mx = max(mx, k & mask)
        ob[g] = b
    if n8 * 8 < d:
        b = np.uint8(0)
        for t in range(d - n8 * 8):
            k = keys[8 * n8 + t]
            b |= np.uint8(k > neg0) << np.uint8(t)
            mx = max(mx, k & mask)
        out[offset + n8] = b
    return mx


@njit(cache=True)
def abs_sum(x):
    """Σ|x_i| in float64, four accumulators; NaN/Inf propagate."""
    n = x.shape[0]
    a0 = 0.0
    a1 = 0.0
    a2 = 0.0
    a3 = 0.0
    for q in range(n // 4):
        a0 += abs(np.float64(x[4 * q]))
        a1 += abs(np.float64(x[4 * q + 1]))
        a2 += abs(np.float64(x[4 * q + 2]))
        a3 += abs(np.float64(x[4 * q + 3]))
    for i in range((n // 4) * 4, n):
        a0 += abs(np.float64(x[i]))
    return (a0 + a1) + (a2 + a3)


@njit(cache=True)
def sign_unpack_decode(src, offset, d, scale, out, weight, accumulate):
    """out[j] (+)= weight·scale·(1 − 2·bit_j) (``accumulate``), else out[j] = scale·(1 − 2·bit_j);
    64 entries per little-endian word of the bit stream (:func:`.kernels.wire.le_word`)."""
    s = weight * scale if accumulate else scale
    n64 = d // 64
    for g in range(n64):
        w = le_word(src, offset + 8 * g)
        for t in range(64):
            v = s * np.float64(1 - 2 * np.int64((w >> np.uint64(t)) & np.uint64(1)))
            if accumulate:
                out[64 * g + t] += v
            else:
                out[64 * g + t] = v
    for j in range(64 * n64, d):
        v = s * np.float64(1 - 2 * ((np.int64(src[offset + (j >> 3)]) >> (j & 7)) & 1))
        if accumulate:
            out[j] += v
        else:
            out[j] = v


def sign_keys(x: np.ndarray):
    """(keys, −0.0 bits, magnitude mask, exponent mask) of float32/float64 ``x``."""
    if x.dtype == np.float32:
        return x.view(np.uint32), np.uint32(0x80000000), np.uint32(0x7FFFFFFF), 0x7F800000
    return (x.view(np.uint64), np.uint64(0x8000000000000000), np.uint64(0x7FFFFFFFFFFFFFFF),
            0x7FF0000000000000)


def vote_dtype(n_workers: int):
    """The integer type of an Allreduce of n votes ±1 that cannot wrap: int8 (n ≤ 127), int16, int32."""
    for t in (np.int8, np.int16, np.int32):
        if n_workers <= np.iinfo(t).max:
            return t
    raise ConfigError(f"sign: {n_workers} workers exceed an int32 vote count")


class SignSum(SumCodec):
    """``sign`` under Allreduce: ±1 per entry (sign(0) = +1, −0.0 counts as +) in ``vote_dtype(n)``,
    summed exactly by MPI's integer SUM; decodes the vote count Σ_i sign(x_i) (times ``scale``).
    Unweighted: every worker has one vote (a weight other than 1 is refused)."""

    def __init__(self, d: int, dtype):
        self.d, self.dtype = d, dtype
        self._v = np.empty(d, dtype=dtype)

    def lengths(self):
        return (self.d,)

    def begin(self, x, weight, rng):
        draw_seed(rng)                                  # keep the stream aligned with compress()
        if weight != 1.0:
            raise ConfigError("sign under Allreduce sums unweighted votes: the workers' aggregation weights must "
                              "be equal")
        keys, neg0, mask, expmask = sign_keys(x)
        if int((keys & mask).max(initial=0)) >= expmask:
            raise ValueError("sign: input contains a non-finite value")
        np.subtract(1, 2 * (keys > neg0), out=self._v, casting="unsafe")
        return self._v

    def decode_add(self, total, out, scale=1.0):
        out += scale * total.astype(np.float64) if scale != 1.0 else total

    def own_add(self, out, weight):
        out += weight * self._v.astype(np.float64)

    def model_bits(self):
        return float(self.d)


class Sign(DecodeInto, Compressor):
    """signSGD: sign(x), 1 bit per entry (sign(0) = +1); biased, not contractive."""
    collectives = ("gather", "allreduce", "allgather", "reduce-scatter")
    segment_wise = True
    n_workers = 1                  # set by for_run: the vote type under Allreduce

    def for_run(self, *, d: int, n_workers: int) -> Sign:
        c = type(self)(**self._params)
        c.n_workers = n_workers
        return c

    def sum_codec(self, d: int, shape=None):
        return SignSum(d, vote_dtype(self.n_workers))

    name = "sign"
    description = ("sign(x), 1 bit per entry, sign(0) = +1 (signSGD, Bernstein et al. 2018; biased, "
                   "no delta); bits d; under allreduce a vote count in int8 (n <= 127)")
    PARAMS = ()
    FORMAT_ID = 7
    BITS_BY_LENGTH = True          # model bits: a function of d and the payload's length
    unbiased = False
    deterministic = True

    def omega(self, d: int) -> None:
        return None

    def delta(self, d: int) -> None:
        return None

    def _prefix_bytes(self) -> int:
        return 0

    def _body_bytes(self, d: int) -> int:
        return self._prefix_bytes() + (d + 7) // 8

    def model_bits(self, payload, d: int) -> int:
        self._check(self._as_payload(payload, d), d)
        return d

    def _check(self, payload: np.ndarray, d: int) -> None:
        self._check_payload(payload, d, self._body_bytes(d))
        tail = d % 8
        if tail and payload[-1] >> tail:
            raise PayloadError(f"{self.name}: corrupted payload: non-zero padding bits after entry {d}")

    def _compress(self, x: np.ndarray, seed: np.uint64) -> np.ndarray:
        d = x.shape[0]
        payload = self._new_payload(self._body_bytes(d), d)
        keys, neg0, mask, expmask = sign_keys(x)
        if int(sign_pack(keys, neg0, mask, payload, wire.HEADER_BYTES + self._prefix_bytes())) >= expmask:
            raise self._nonfinite_error(x)
        return payload

    def _scale_of(self, payload: np.ndarray) -> float:
        return 1.0

    def _decode(self, payload, d, out, weight, accumulate):
        self._check(payload, d)
        scale = self._scale_of(payload)
        sign_unpack_decode(payload, wire.HEADER_BYTES + self._prefix_bytes(), d, scale, out, weight,
                           accumulate)


class ScaledSign(Sign):
    """Scaled sign (‖x‖₁/d)·sign(x) (Karimireddy et al. 2019); biased, δ = 1/d, δ(x) = ‖x‖₁²/(d‖x‖²)."""

    name = "scaled-sign"
    collectives = ("gather", "allgather", "reduce-scatter")     # its scale differs by worker: no sum

    def sum_codec(self, d: int, shape=None):
        return Compressor.sum_codec(self, d, shape)
    description = ("scaled sign (||x||_1/d)*sign(x) (EF-SignSGD, Karimireddy et al. 2019; biased, "
                   "delta = 1/d, delta(x) = ||x||_1^2/(d ||x||_2^2)); bits F + d")
    PARAMS = (FP64_PARAM,)
    FORMAT_ID = 8

    def delta(self, d: int) -> float:
        return 1.0 / d

    @staticmethod
    def contraction(x) -> float:
        """δ(x) = ‖x‖₁²/(d‖x‖₂²): ‖C(x) − x‖² = (1 − δ(x))‖x‖² exactly (1 for x = 0)."""
        x = np.asarray(x, dtype=np.float64)
        n2 = float(x @ x)
        return 1.0 if n2 == 0.0 else float(np.abs(x).sum()) ** 2 / (x.shape[0] * n2)

    def _prefix_bytes(self) -> int:
        return self._scale_bytes

    def model_bits(self, payload, d: int) -> int:
        self._check(self._as_payload(payload, d), d)
        return self._float_bits + d

    def _compress(self, x: np.ndarray, seed: np.uint64) -> np.ndarray:
        d = x.shape[0]
        l1 = abs_sum(x)
        if not np.isfinite(l1):
            raise self._nonfinite_error(x, "l1 norm")
        scale = l1 / d
        if not self._fp64:
            with np.errstate(over="ignore"):
                scale = float(np.float32(scale))
            if not np.isfinite(scale):
                raise self._nonfinite_error(x, "scale ||x||_1/d (float32)")
        payload = super()._compress(x, seed)
        self._write_scales(payload, np.array([scale]))
        return payload

    def _scale_of(self, payload: np.ndarray) -> float:
        scale = float(wire.read_scales(payload, wire.HEADER_BYTES, 1, self._fp64)[0])
        if not np.isfinite(scale) or scale < 0:
            raise PayloadError(f"{self.name}: corrupted payload: invalid scale")
        return scale
