"""Natural compression: ``natural`` (C_nat), ``natural-dither`` (D^{p,s}_nat) and
``natural-randk`` (C_nat ∘ rand-k).

Horváth, Ho, Horváth, Sahu, Canini, Richtárik, *Natural Compression for Distributed Deep
Learning*, MSML 2022 (arXiv 1905.10988): Thm 3 (C_nat, ω = 1/8), Thm 5 (composition), Thm 7 and
Table 1 (natural dithering); `spec/compressors.md` Part C.

**C_nat** rounds each t ≠ 0 with 2^a ≤ |t| < 2^{a+1} to sign(t)·2^a with probability
(2^{a+1} − |t|)/2^a and to sign(t)·2^{a+1} otherwise: unbiased, with
E(C(t) − t)² = (|t| − 2^a)(2^{a+1} − |t|) ≤ t²/8, equality at |t| = (4/3)·2^a, so ω = 1/8 (tight).
The result is ±2^e: a sign and an exponent, 9 bits per entry with float32's 8-bit exponent
(12 bits with float64's 11-bit exponent, ``fp64=true``). The probability of rounding up is
exactly the mantissa fraction m/2^52 of |t| (float64 bits); the kernels compare it with the
53-bit uniform ``uniform_at(seed, j)``, which makes P[up] exact. Magnitudes below the smallest
normal 2^-126 (fp32; 2^-1022 for fp64) round to 0 or 2^-126 with P[up] = |t|/2^-126, still
unbiased, but with variance above t²/8 (the ω bound holds in the normal range only); |t| > 2^127
could round to 2^128 (no float32) and is rejected: use ``fp64=true``.

Wire layout of n C_nat values ("nat block"): n exponent bytes (the float32 biased exponent,
0 = zero, 255 invalid), then ⌈n/8⌉ bytes of sign bits (LSB-first, 1 = negative). With
``fp64=true``: n bytes holding the low 8 bits of the float64 biased exponent, then ⌈n/2⌉ bytes of
nibbles (entry 2i in the low nibble): bits 0-2 the high exponent bits, bit 3 the sign. Exactly
9 (12) bits per entry plus < 1 byte of padding.

**natural dithering** D^{p,s}_nat: per bucket (the whole vector by default), r = |x_j|/‖x‖_p ∈
[0, 1] is rounded unbiasedly to one of the levels 0, 2^{1−s}, 2^{2−s}, …, 1/2, 1 (the two
neighbours of r), i.e. C_nat inside [2^{1−s}, 1] and standard dithering between 0 and 2^{1−s}.
ω = 1/8 + b^{1/r}·2^{1−s}·min{1, b^{1/r}·2^{1−s}}, r = min(p, 2) (Thm 7; for p ∈ {2, ∞} r = 2 and
Thm 7 and Table 1 agree). Wire: m bucket norms (float32 rounded up, or float64), then d fields
of 1 + ⌈log₂(s+1)⌉ bits (level index l ∈ 0…s, value 2^{l−s}, 0 for l = 0; field = l << 1 | sign),
as ``qsgd``. Model bits F·m + d·(1 + ⌈log₂(s+1)⌉) (the paper's Table 1 counts 31 + d(2 + log₂s),
the same for s a power of two up to the norm's bit).

**C_nat ∘ rand-k**: C(x) = (d/k)·C_nat(x_S), S a uniform k-subset: unbiased with
ω = ω_nat·ω_k + ω_nat + ω_k = (9/8)(d/k − 1) + 1/8 (Thm 5), tight on x with all |x_j| = (4/3)·2^a.
Wire: a nat block of the k values, then the k indices (fixed ⌈log₂d⌉ bits or Elias-omega gaps,
header flag bit 1; :mod:`.kernels.sparse`). Model bits 9k (12k) + index bits; the spec's Table 1 count is
(10 + log₂d)·k.
"""
from __future__ import annotations

import math

import numpy as np
from llvmlite import ir
from numba import njit

from ..errors import PayloadError
from .base import FP64_PARAM, Compressor, DecodeInto, FixedKSparse, Param
from .kernels import simd, wire
from .kernels.dither import dither_pack
from .kernels.norms import OK as SCALES_OK
from .kernels.norms import max_abs_bits32, write_scales
from .kernels.prng import GAMMA, mix64, state_at, uniform_at
from .kernels.wire import CHUNK, le_word
from .qsgd import BucketDither
from .randk import sample_and_gather

_MAG = np.uint64(0x7FFFFFFFFFFFFFFF)
_MANT = np.uint64(0x000FFFFFFFFFFFFF)
_S52 = np.uint64(52)
_S20 = np.uint64(20)
_HALF20 = np.uint64(1 << 19)
_S63 = np.uint64(63)
_S41 = np.uint64(41)
_TWO_M52 = 2.0**-52
_TWO_126 = 2.0**126
_MAX32 = np.uint64(0x47E0000000000000)       # bits of 2^127: larger magnitudes may round to 2^128
_MAX64 = np.uint64(0x7FE0000000000000)       # bits of 2^1023
_NAT_SALT = np.uint64(0xC0FFEE0DDBA11)


@njit(cache=True)
def _pack_nat_hi(ex, sg, m, fp64, hi, h0):
    """Sign bits (fp32) or (high exponent bits | sign << 3) nibbles (fp64) of m entries (``ex``
    is read only for fp64)."""
    if fp64:
        for g in range(m // 2):
            hi[h0 + g] = (((ex[2 * g] >> 8) & 7) | (sg[2 * g] << 3)
                          | ((((ex[2 * g + 1] >> 8) & 7) | (sg[2 * g + 1] << 3)) << 4))
        if m % 2:
            hi[h0 + m // 2] = ((ex[m - 1] >> 8) & 7) | (sg[m - 1] << 3)
    else:
        for g in range(m // 8):
            v = np.uint8(0)
            for t in range(8):
                v |= np.uint8(sg[8 * g + t]) << np.uint8(t)
            hi[h0 + g] = v
        if m % 8:
            v = np.uint8(0)
            for t in range(m - m % 8, m):
                v |= np.uint8(sg[t]) << np.uint8(t - (m - m % 8))
            hi[h0 + m // 8] = v


_PACK8 = np.uint64(0x0102040810204080)
_S56 = np.uint64(56)


@njit(cache=True)
def _pack_signs8(sg, m, hi, h0):
    """hi[h0 + g] = the sign bits (LSB-first) of sg[8g:8g + 8], m entries, for sg ∈ {0, 1} (uint8):
    the bytes' little-endian word w = Σ b_t·2^{8t} times Σ_t 2^{56−7t} puts b_t at bit 56 + t and
    every cross term b_t·2^{56+8t−7t'} (t ≠ t') outside bits 56…63 at its own position, so no
    carry reaches the top byte: (w·0x0102040810204080) >> 56 is the packed byte. One load, one
    multiply and a shift per 8 entries instead of eight shifts and ors (the same bytes as
    :func:`_pack_nat_hi`)."""
    for g in range(m // 8):
        hi[h0 + g] = np.uint8((le_word(sg, 8 * g) * _PACK8) >> _S56)
    if m % 8:
        v = np.uint8(0)
        for t in range(m - m % 8, m):
            v |= np.uint8(sg[t]) << np.uint8(t - (m - m % 8))
        hi[h0 + m // 8] = v


@njit(cache=True)
def natural_encode_f32(keys, seed, lo, hi):
    """Fast path of :func:`natural_encode` for float32 input and the float32 format: ``keys`` is x
    viewed as uint32, so the output exponent is the input's plus [u < mantissa/2^23] (also for
    float32 subnormals, whose exponent field is 0). Returns True if some |x_j| > 2^127 or is not
    finite. With z the 64 bits of ``uniform_at(seed, j)`` (u = ⌊z/2^11⌋·2^-53) and m the 23-bit
    mantissa, u < m·2^-23 ⇔ ⌊z/2^11⌋ < m·2^30 ⇔ z < m·2^41 ⇔ ⌊z/2^41⌋ < m: a 32-bit compare
    instead of two int → float conversions (which AVX2 lacks for 64-bit integers) — the same
    bits."""
    n = keys.shape[0]
    sg = np.empty(CHUNK, dtype=np.uint8)
    amax = np.uint32(0)
    for c0 in range(0, n, CHUNK):
        m = min(CHUNK, n - c0)
        kc = keys[c0:c0 + m]
        lc = lo[c0:c0 + m]
        amax = max(amax, max_abs_bits32(kc))   # its own 32-bit reduction: fused, it ran in 64-bit lanes
        w = state_at(seed, c0)                # word c0 + q is mix64(w), w += γ (no multiply)
        for q in range(m):
            k = kc[q]
            a = k & np.uint32(0x7FFFFFFF)
            top = np.uint32(mix64(w) >> _S41)      # ⌊z/2^41⌋, z the 64 bits of uniform_at(seed, c0 + q)
            w += GAMMA
            eo = np.uint32(a >> np.uint32(23)) + np.uint32(top < (a & np.uint32(0x7FFFFF)))
            lc[q] = np.uint8(eo)
            sg[q] = np.uint8(k >> np.uint32(31)) & np.uint8(eo != 0)
        _pack_signs8(sg, m, hi, c0 // 8)
    return amax > np.uint32(0x7F000000)


@njit(cache=True)
def natural_encode(x, seed, fp64, lo, hi):
    """C_nat of every x_j (float32/float64) as a nat block: ``lo`` (n bytes), ``hi`` (⌈n/8⌉ sign
    bytes, or ⌈n/2⌉ nibble bytes if ``fp64``). Entry j uses ``uniform_at(seed, j)``.

    Returns True if some |x_j| is too large for the format (> 2^127, or > 2^1023 with fp64) or
    not finite. Works in float64 chunks viewed as uint64 (integer exponent/mantissa arithmetic).
    """
    n = x.shape[0]
    buf = np.empty(CHUNK, dtype=np.float64)
    bits = buf.view(np.uint64)
    ex = np.empty(CHUNK, dtype=np.int64)
    sg = np.empty(CHUNK, dtype=np.int64)
    amax = np.uint64(0)
    for c0 in range(0, n, CHUNK):
        m = min(CHUNK, n - c0)
        xc = x[c0:c0 + m]
        for q in range(m):
            buf[q] = xc[q]
        if fp64:
            for q in range(m):
                a = bits[q] & _MAG
                amax = max(amax, a)
                u = uniform_at(seed, c0 + q)
                ex[q] = np.int64(a >> _S52) + np.int64(u < np.float64(a & _MANT) * _TWO_M52)
        else:
            for q in range(m):
                a = bits[q] & _MAG
                amax = max(amax, a)
                e = np.int64(a >> _S52)
                u = uniform_at(seed, c0 + q)
                normal = e - 896 + np.int64(u < np.float64(a & _MANT) * _TWO_M52)
                tiny = np.int64(u < abs(buf[q]) * _TWO_126)      # |t| < 2^-126: 0 or 2^-126
                ex[q] = normal if e >= 897 else tiny
        for q in range(m):
            sg[q] = np.int64(bits[q] >> _S63) & np.int64(ex[q] != 0)
        lc = lo[c0:c0 + m]
        for q in range(m):
            lc[q] = ex[q] & 0xFF
        _pack_nat_hi(ex, sg, m, fp64, hi, c0 // 8 if not fp64 else c0 // 2)
    return amax > (_MAX64 if fp64 else _MAX32)


def encode_nat_block(x: np.ndarray, seed, fp64: bool, lo: np.ndarray, hi: np.ndarray) -> bool:
    """Dispatch to the float32 fast path or the general kernel; True if x is out of range."""
    if x.dtype == np.float32 and not fp64:
        return bool(natural_encode_f32(x.view(np.uint32), seed, lo, hi))
    return bool(natural_encode(x, seed, fp64, lo, hi))


@njit(cache=True)
def natural_block_invalid(lo, hi, n, fp64):
    """True if the nat block is invalid: an all-ones exponent (fp32: byte 255; fp64: 2047) or
    non-zero padding bits after entry n."""
    if fp64:
        for g in range(n // 2):
            h = np.int64(hi[g])
            if (lo[2 * g] == 255 and (h & 7) == 7) or (lo[2 * g + 1] == 255 and ((h >> 4) & 7) == 7):
                return True
        if n % 2:
            h = np.int64(hi[n // 2])
            if h >> 4 or (lo[n - 1] == 255 and (h & 7) == 7):
                return True
        return False
    bad = 0
    for i in range(n):
        bad |= np.int64(lo[i] == 255)
    if n % 8 and np.int64(hi[n // 8]) >> (n % 8):
        return True
    return bad != 0


def natural_lut(fp64: bool) -> np.ndarray:
    """LUT[e] = value of biased exponent e: 2^(e − bias), 0 for e = 0 (invalid top entry: NaN)."""
    e = np.arange(2047 if fp64 else 255)
    lut = np.append(np.ldexp(1.0, e - (1023 if fp64 else 127)), np.nan)
    lut[0] = 0.0
    return lut


_LUT32 = natural_lut(False)
_LUT64 = natural_lut(True)


@njit(cache=True)
def natural_decode(lo, hi, n, fp64, lut, idx, scale, out, weight, accumulate):
    """Decode a nat block of n values; value i = scale·(±LUT[e_i]) goes to out[i] (``idx`` empty)
    or out[idx[i]]; ``accumulate``: out += weight·value."""
    s = scale * weight if accumulate else scale
    sparse = idx.shape[0] > 0
    for i in range(n):
        if fp64:
            h = np.int64(hi[i >> 1]) >> (4 * (i & 1))
            e = np.int64(lo[i]) | ((h & 7) << 8)
            neg = (h >> 3) & 1
        else:
            e = np.int64(lo[i])
            neg = (np.int64(hi[i >> 3]) >> (i & 7)) & 1
        v = s * lut[e]
        if neg:
            v = -v
        j = idx[i] if sparse else i
        if accumulate:
            out[j] += v
        else:
            out[j] = v


@njit(cache=True)
def natural_decode32_dense(lo, hi, n, s, out, accumulate):
    """Fast path of :func:`natural_decode` for dense fp32 blocks: the value ±2^(e−127) is the
    float32 whose bits are sign << 31 | e << 23 (e = 0 gives 0; 255 was rejected before), built
    with integer ops (no table gather), 64 entries per little-endian word of sign bits
    (:func:`.kernels.wire.le_word`)."""
    n64 = n // 64
    for g in range(n64):
        w = le_word(hi, 8 * g)
        for t in range(64):
            i = 64 * g + t
            neg = np.uint32((w >> np.uint64(t)) & np.uint64(1))
            bits = np.uint32((np.uint32(lo[i]) << np.uint32(23)) | (neg << np.uint32(31)))
            v = s * np.float64(bits.view(np.float32))
            if accumulate:
                out[i] += v
            else:
                out[i] = v
    for i in range(64 * n64, n):
        neg = (np.uint32(hi[i >> 3]) >> np.uint32(i & 7)) & np.uint32(1)
        bits = np.uint32((np.uint32(lo[i]) << np.uint32(23)) | (neg << np.uint32(31)))
        v = s * np.float64(bits.view(np.float32))
        if accumulate:
            out[i] += v
        else:
            out[i] = v


def nat_block_bytes(n: int, fp64: bool) -> tuple[int, int]:
    """(exponent bytes, sign/nibble bytes) of a nat block of n values."""
    return n, ((n + 1) // 2 if fp64 else (n + 7) // 8)


class Natural(DecodeInto, Compressor):
    """Natural compression C_nat (Horváth et al. 2022): unbiased rounding to ±2^e; ω = 1/8,
    9 bits per entry (12 with fp64)."""
    collectives = ("gather", "allgather", "reduce-scatter")
    segment_wise = True

    name = "natural"
    description = ("natural compression C_nat: unbiased rounding to a power of two (Horvath et al. "
                   "2022); omega = 1/8; bits 9*d (12*d with fp64)")
    PARAMS = (Param("fp64", bool, False, in_spec="nondefault",
                    doc="float64 exponent range: 12 bits per entry"),)
    FORMAT_ID = 9
    unbiased = True

    def omega(self, d: int) -> float:
        return 0.125

    def _bits_per_entry(self) -> int:
        return 12 if self._fp64 else 9

    def _body_bytes(self, d: int) -> int:
        return sum(nat_block_bytes(d, self._fp64))

    def model_bits(self, payload, d: int) -> int:
        self._check(self._as_payload(payload, d), d)
        return self._bits_per_entry() * d

    def _compress(self, x: np.ndarray, seed: np.uint64) -> np.ndarray:
        d = x.shape[0]
        payload = self._new_payload(self._body_bytes(d), d)
        H = wire.HEADER_BYTES
        if encode_nat_block(x, seed, self._fp64, payload[H:H + d], payload[H + d:]):
            raise self._nonfinite_error(x, "rounding to a power of two (float32 exponent)")
        return payload

    def _check(self, payload: np.ndarray, d: int):
        self._check_payload(payload, d, self._body_bytes(d))
        H = wire.HEADER_BYTES
        lo, hi = payload[H:H + d], payload[H + d:]
        if natural_block_invalid(lo, hi, d, self._fp64):
            raise PayloadError(f"{self.name}: corrupted payload: all-ones exponent or non-zero padding")
        return lo, hi

    def _decode(self, payload, d, out, weight, accumulate):
        lo, hi = self._check(payload, d)
        if self._fp64:
            natural_decode(lo, hi, d, True, _LUT64, np.empty(0, np.int64), 1.0, out, weight, accumulate)
        else:
            natural_decode32_dense(lo, hi, d, weight if accumulate else 1.0, out, accumulate)


class NaturalRandK(DecodeInto, FixedKSparse):
    """C_nat ∘ rand-k: (d/k)·C_nat(x_S); ω = (9/8)(d/k − 1) + 1/8."""

    name = "natural-randk"
    description = ("C_nat o rand-k: k random coordinates, each rounded to a power of two, scaled by "
                   "d/k; omega = (9/8)(d/k-1) + 1/8; bits 9k (12k fp64) + index bits")
    PARAMS = (
        Param("k", int, low=1, high=2**32 - 1, doc="number of coordinates kept, k <= d"),
        Param("fp64", bool, False, in_spec="nondefault", doc="float64 exponent range: 12-bit values"),
    )
    FORMAT_ID = 10
    unbiased = True
    DENSE_DECODE = False        # the decoder writes only the k sampled entries

    def omega(self, d: int) -> float:
        return 1.125 * (d / self.k - 1.0) + 0.125

    def _value_bytes(self, nnz: int) -> int:
        return sum(nat_block_bytes(nnz, self._fp64))

    def _value_bits(self, nnz: int) -> int:
        return (12 if self._fp64 else 9) * nnz

    def _compress(self, x: np.ndarray, seed: np.uint64) -> np.ndarray:
        idx, vals, finite = sample_and_gather(x, seed, self.k, reuse=True)    # one pass over x
        if not finite:
            raise self._nonfinite_error(x)
        payload, voff, vbytes = self._new_sparse_payload(idx, x.shape[0])
        k = self.k
        if encode_nat_block(vals, np.uint64(mix64(seed ^ _NAT_SALT)), self._fp64,
                            payload[voff:voff + k], payload[voff + k:voff + vbytes]):
            raise self._nonfinite_error(x, "rounding to a power of two (float32 exponent)")
        return payload

    def _decode(self, payload, d, out, weight, accumulate):
        payload, voff, nnz, idx, _ = self._read_sparse(payload, d)
        vbytes = self._value_bytes(nnz)
        lo, hi = payload[voff:voff + nnz], payload[voff + nnz:voff + vbytes]
        if natural_block_invalid(lo, hi, nnz, self._fp64):
            raise PayloadError(f"{self.name}: corrupted payload: all-ones exponent or non-zero padding")
        natural_decode(lo, hi, nnz, self._fp64, _LUT64 if self._fp64 else _LUT32, idx, d / self.k,
                       out, weight, accumulate)


# ------------------------------------------------------------------------------------------------
# natural dithering
# ------------------------------------------------------------------------------------------------

NDITHER_KIND = 11
"""natural-dither's dithering rule in ``simd.ROW_FIELDS`` and its field format in
``simd.ROW_VALUES`` (its FORMAT_ID)."""


def _natural_dither_param(builder, scale, s):
    """1/scale (0 for a zero scale): r = |x|·param ∈ [0, 1]."""
    f64 = ir.DoubleType()
    inv = builder.fdiv(ir.Constant(f64, 1.0), scale)
    return builder.select(builder.fcmp_ordered(">", scale, ir.Constant(f64, 0.0)), inv, ir.Constant(f64, 0.0))


def _natural_dither_fields(builder, v, u, inv, s):
    """IR of natural dithering's fields l << 1 | sign of SUB entries: r = |v|·inv ∈ [0, 1]
    rounded unbiasedly to the neighbouring levels of {0, 2^{1−s}, …, 1/2, 1}; level index l
    (value 2^{l−s}, 0 for l = 0). u: uniform 32-bit integers (:func:`.kernels.prng.uniforms32`).

    The rule (the wire contract, unchanged since the integer kernels): with 2^e ≤ r < 2^{e+1}
    and e + s ≥ 1, l = e + s + [u < up], up = ⌊(M + 2^19)/2^20⌋ for the 52-bit mantissa M of r
    (P[up] = M/2^52 to 32 bits, ties up), i.e. l = e + s + [u·2^20 + 2^19 ≤ M]; below the smallest
    non-zero level (r < 2^{1−s}), l = [u + 1 ≤ y] with y = fl(r·2^{s+31} + 0.5) (standard
    dithering on [0, 2^{1−s}], P[1] = r·2^{s−1} to 32 bits).

    Both cases run as the first: a small r is replaced by a surrogate t in the binade
    [2^{−s}, 2^{1−s}) (so e + s = 0) whose mantissa M_t makes the same test give its level.
    With G = 2^20·y = fl(r·2^{s+51} + 2^19) (the same rounding, scaled), u + 1 ≤ y ⇔
    (u + 1)·2^20 ≤ ⌊G⌋ ⇔ u·2^20 + 2^19 ≤ ⌊G⌋ − 2^19 =: M_t, and
    t = (⌊G⌋ + 2^52 − 2^19)·2^{−52−s} has exactly that mantissa (every step exact: ⌊G⌋ ≤
    2^52 + 2^19, and r·2^{s+51}, the sum and the power-of-two scaling are exact; the two affine
    steps are ``llvm.fmuladd``, the same rounding fused or not). When y = 2^32 + 1/2 (its largest
    value) t is 2^{1−s} itself: level 1 + [u·2^20 + 2^19 ≤ 0] = 1, as u + 1 ≤ y. r is small
    iff G < 2^52 + 2^19 (a constant: one register fewer), except the largest r below 2^{1−s},
    whose G is 2^52 + 2^19 (a tie, to even): r itself then gives 0 + [u·2^20 + 2^19 ≤ 2^52 − 1]
    = 1, as u + 1 ≤ y. So l = e_t + s + [u·2^20 + 2^19 ≤ M_t] for every lane, capped at s: no
    u → float64 conversion, one compare and no select of levels.

    The test in 32-bit lanes: with the high word of t, H = E·2^20 + (M_t's top 20 bits) (E its
    biased exponent, ≥ 1; 12 bits with the sign, as before), D = (top bits − u >> 12) − borrow,
    borrow = [lo < u << 20 | 2^19] = [lo ≤ u << 20 | (2^19 − 1)] (the low words' subtraction),
    the test is D ≥ 0, and (H − u >> 12 − borrow) >> 20 = E − [D < 0] (|D| < 2^20): the level is
    that shift minus 1022 − s, one unsigned compare, no equality test, no mask."""
    it, ft = u.type, v.type
    n = it.count
    f64, i64 = ir.DoubleType(), s.type

    def pow2(expo):                      # 2^expo (an i64 value) as a double, from its exponent bits
        return builder.bitcast(builder.shl(builder.add(expo, ir.Constant(i64, 1023)), ir.Constant(i64, 52)), f64)

    def splat(x):
        return simd.splat_sub(builder, x, ft)

    r = builder.fmul(simd.vector_call(builder, "llvm.fabs", v), splat(inv))
    # G = r·2^{s+51} + 2^19, t = ⌊G⌋·2^{−52−s} + (2^52 − 2^19)·2^{−52−s}: exact products, one rounding
    g = simd.vector_call(builder, "llvm.fmuladd", r, splat(pow2(builder.add(s, ir.Constant(i64, 51)))),
                         simd.splat_i(builder, ft, 2.0**19))
    down = pow2(builder.sub(ir.Constant(i64, -52), s))
    t = simd.vector_call(builder, "llvm.floor", g)
    t = simd.vector_call(builder, "llvm.fmuladd", t, splat(down),
                         splat(builder.fmul(ir.Constant(f64, 2.0**52 - 2.0**19), down)))
    small = builder.fcmp_ordered("<", g, simd.splat_i(builder, ft, 2.0**52 + 2.0**19))
    t = builder.select(small, t, r)
    words = builder.bitcast(t, ir.VectorType(ir.IntType(32), 2 * n))
    undef = ir.Constant(words.type, ir.Undefined)
    lo = builder.shuffle_vector(words, undef, ir.Constant(ir.VectorType(ir.IntType(32), n), list(range(0, 2 * n, 2))))
    hi = builder.shuffle_vector(words, undef, ir.Constant(ir.VectorType(ir.IntType(32), n), list(range(1, 2 * n, 2))))
    s32 = builder.trunc(s, ir.IntType(32))
    # (H − u >> 12 − borrow) >> 20 − (1022 − s) = e + s + [u·2^20 + 2^19 ≤ M_t] (see above)
    ulm = builder.or_(builder.shl(u, simd.splat_i(builder, it, 20)), simd.splat_i(builder, it, (1 << 19) - 1))
    hd = builder.add(builder.sub(hi, builder.lshr(u, simd.splat_i(builder, it, 12))),
                     builder.sext(builder.icmp_unsigned("<=", lo, ulm), it))
    lev = builder.sub(builder.lshr(hd, simd.splat_i(builder, it, 20)),
                      simd.splat_sub(builder, builder.sub(ir.Constant(ir.IntType(32), 1022), s32), it))
    sv = simd.splat_sub(builder, s32, it)
    lev = builder.select(builder.icmp_signed("<", lev, sv), lev, sv)   # r = 1 (or above) stays at the top
    neg = builder.fcmp_ordered("<", v, simd.splat_i(builder, ft, 0.0))
    nz = builder.icmp_unsigned("!=", lev, simd.splat_i(builder, it, 0))
    return builder.or_(builder.shl(lev, simd.splat_i(builder, it, 1)), builder.zext(builder.and_(neg, nz), it))


simd.register_row_fields(NDITHER_KIND, _natural_dither_param, _natural_dither_fields)


@njit(cache=True)
def natural_dither_pack(x, bucket, scales, s, width, seed, out, offset):
    """Natural dithering of x with per-bucket scales, fields packed at ``width`` bits
    (:func:`.kernels.dither.dither_pack` with the rule above)."""
    dither_pack(x, bucket, scales, s, width, seed, out, offset, NDITHER_KIND)


@njit(cache=True)
def natural_dither_encode(x, bucket, norms, l2, s, width, seed, fp64, head, payload):
    """A whole natural-dither payload in one call (:func:`.kernels.dither.qsgd_encode`'s shape:
    :func:`.kernels.norms.write_scales`, then :func:`natural_dither_pack`)."""
    status = write_scales(x, bucket, norms, l2, fp64, head, payload)
    if status == SCALES_OK:
        natural_dither_pack(x, bucket, norms, s, width, seed, payload,
                            head.shape[0] + norms.shape[0] * (8 if fp64 else 4))
    return status


def _natural_dither_row_values(builder, f, sc, s):
    """IR of the natural-dither values of one row of fields (l << 1 | sign): ±sc·2^{l−s}, built
    from the float64 bits ((l − s + 1023) << 52) | (sign << 63), zero where l = 0 (no table)."""
    i64row = ir.VectorType(ir.IntType(64), f.type.count)
    one = simd.splat_i(builder, f.type, 1)
    lev = builder.zext(builder.lshr(f, one), i64row)
    sign = builder.zext(builder.and_(f, one), i64row)
    sv = builder.insert_element(ir.Constant(i64row, ir.Undefined), s, ir.Constant(ir.IntType(32), 0))
    sv = builder.shuffle_vector(sv, ir.Constant(i64row, ir.Undefined),
                                ir.Constant(ir.VectorType(ir.IntType(32), f.type.count), None))
    expo = builder.add(builder.sub(lev, sv), simd.splat_i(builder, i64row, 1023))
    bits = builder.or_(builder.shl(expo, simd.splat_i(builder, i64row, 52)),
                       builder.shl(sign, simd.splat_i(builder, i64row, 63)))
    nonzero = builder.icmp_unsigned("!=", lev, simd.splat_i(builder, i64row, 0))
    bits = builder.select(nonzero, bits, simd.splat_i(builder, i64row, 0))
    return builder.fmul(builder.bitcast(bits, simd.F64ROW), simd.splat_f64(builder, sc))


class NaturalDither(BucketDither):
    """Natural dithering D^{p,s}_nat (Horváth et al. 2022): levels 0, 2^{1−s}, …, 1/2, 1 of the
    bucket norm; ω = 1/8 + √b·2^{1−s}·min{1, √b·2^{1−s}}."""
    collectives = ("gather", "allgather", "reduce-scatter")
    segment_wise = True

    name = "natural-dither"
    description = ("natural dithering D^{p,s}_nat: levels 0, 2^(1-s), ..., 1/2, 1 of the l_p bucket "
                   "norm (Horvath et al. 2022); omega = 1/8 + sqrt(b)2^(1-s)min(1, sqrt(b)2^(1-s)); "
                   "bits F*m + d*(1+ceil(log2(s+1)))")
    PARAMS = (
        Param("s", int, 8, low=1, high=62, doc="number of non-zero levels 2^(1-s), ..., 1"),
        Param("p", float, 2, choices=(2, math.inf), doc="norm used for the scale"),
        Param("bucket", int, 0, low=0, doc="bucket size, 0 = whole vector"),
        FP64_PARAM,
    )
    FORMAT_ID = 11
    unbiased = True

    _encode = staticmethod(natural_dither_encode)

    def omega(self, d: int) -> float:
        t = math.sqrt(self.bucket_size(d)) * 2.0 ** (1 - self.s)     # b^{1/r}·2^{1−s}, r = 2
        return 0.125 + t * min(1.0, t)

    def _scales(self, payload: np.ndarray, d: int):
        scales, offset = self._checked_scales(payload, d, "level index")
        tail = (d * self._width) % 8
        if tail and payload[-1] >> tail:
            raise PayloadError(f"{self.name}: corrupted payload: non-zero padding bits")
        return scales, self.bucket_size(d), offset

    def _decompress(self, payload: np.ndarray, d: int) -> np.ndarray:
        scales, b, offset = self._scales(payload, d)
        out = np.empty(d)
        natural_dither_decode(payload, offset, d, b, scales, self.s, self._width, out, 1.0, False)
        return out

    def _decompress_add(self, payload: np.ndarray, d: int, out: np.ndarray, weight: float) -> None:
        scales, b, offset = self._scales(payload, d)
        natural_dither_decode(payload, offset, d, b, scales, self.s, self._width, out, weight, True)


simd.register_row_values(NDITHER_KIND, _natural_dither_row_values)


@njit(cache=True)
def natural_dither_decode(src, offset, d, bucket, scales, s, width, out, weight, accumulate):
    """Decode d fields, value = ±scale_bucket·2^{l−s} (0 for l = 0) (:func:`.kernels.wire.blocked_decode`;
    ``accumulate``: out += weight·value)."""
    wire.blocked_decode(src, offset, d, bucket, scales, s, width, out, weight, accumulate, NDITHER_KIND)
