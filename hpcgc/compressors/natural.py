"""Natural compression: ``natural`` (C_nat) and ``natural-randk`` (C_nat ∘ rand-k); natural
dithering (``natural-dither``) is :mod:`.natural_dither`.

Horváth, Ho, Horváth, Sahu, Canini, Richtárik, *Natural Compression for Distributed Deep
Learning*, MSML 2022 (arXiv 1905.10988): Thm 3 (C_nat, ω = 1/8), Thm 5 (composition), `spec/compressors.md` Part C.

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

**C_nat ∘ rand-k**: C(x) = (d/k)·C_nat(x_S), S a uniform k-subset: unbiased with
ω = ω_nat·ω_k + ω_nat + ω_k = (9/8)(d/k − 1) + 1/8 (Thm 5), tight on x with all |x_j| = (4/3)·2^a.
Wire: a nat block of the k values, then the k indices (fixed ⌈log₂d⌉ bits or Elias-omega gaps,
header flag bit 1; :mod:`.kernels.sparse`). Model bits 9k (12k) + index bits; the spec's Table 1 count is
(10 + log₂d)·k.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from ..errors import PayloadError
from .base import Compressor, DecodeInto
from .kernels import wire
from .kernels.norms import max_abs_bits32
from .kernels.prng import GAMMA, mix64, state_at, uniform_at
from .kernels.wire import CHUNK, le_word
from .params import Param
from .randk import sample_and_gather
from .sparse_base import FixedKSparse

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
    PLAIN_VALUES = False        # its values are encoded powers of two: no ``entries`` (EF's dense step)

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
