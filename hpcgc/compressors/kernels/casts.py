"""Low-precision casts on a (sub-)vector: float16 and bfloat16 round-to-nearest-even, and the int8
stochastic rounding of ``int8``. Pure numba kernels over contiguous 1-D arrays, so a segment
(``x[a:b]``) is cast exactly as the whole vector would be (the reduce-scatter collective's
segment-wise form).

Status of an encoder: ``OK`` (0), ``NONFINITE`` (x holds NaN/Inf: a divergence, not an overflow),
``OVERFLOW`` (some finite value is beyond the wire type's range: it is written as ±Inf, so a sum or
a decode that contains it is non-finite on every rank that sees it).

float16 (IEEE binary16): 1 sign, 5 exponent, 10 fraction bits; the largest finite value 65504; a
finite |x| ≥ 65520 rounds to Inf (round-to-nearest-even); relative error ≤ 2^-11 for normal values
(|x| ≥ 2^-14), absolute error ≤ 2^-25 below (subnormals). bfloat16: the top 16 bits of float32
(8 exponent bits), rounded to nearest even from float64 directly (one rounding): relative error
≤ 2^-8 over float32's normal range, the largest finite value (2 − 2^-7)·2^127.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit

from .prng import uniform_at

OK, NONFINITE, OVERFLOW = 0, 1, 2

HALF_MAX = 65504.0
HALF_OVERFLOW = 65520.0          # the smallest |x| that rounds to Inf
BF16_MAX = float.fromhex("0x1.fep127")
_U64 = np.uint64


@njit(cache=True, inline="always")
def _half_bits(v):
    """float64 v (finite or not) → binary16 bits (uint16 as int), round-to-nearest-even."""
    b = np.float64(v).view(np.uint64)
    sign = np.uint16((b >> _U64(48)) & _U64(0x8000))
    a = abs(v)
    if a != a:
        return sign | np.uint16(0x7E00)
    if a >= HALF_OVERFLOW:
        return sign | np.uint16(0x7C00)
    if a >= 6.103515625e-05:                         # 2^-14: normal
        ab = b & _U64(0x7FFFFFFFFFFFFFFF)
        ab = ab + _U64(0x1FFFFFFFFFF) + ((ab >> _U64(42)) & _U64(1))
        e = np.int64(ab >> _U64(52)) - 1008          # −1023 + 15
        m = np.int64((ab >> _U64(42)) & _U64(0x3FF))
        return sign | np.uint16((e << 10) | m)
    return sign | np.uint16(np.rint(a * 16777216.0))   # subnormal: a multiple of 2^-24 (1024 = 2^-14)


@njit(cache=True, inline="always")
def _half_value(h):
    """binary16 bits → float64 (exact)."""
    e = (h >> 10) & 0x1F
    m = h & 0x3FF
    if e == 0:
        v = m * 5.9604644775390625e-08               # 2^-24
    elif e == 31:
        v = np.inf if m == 0 else np.nan
    else:
        v = math.ldexp(np.float64(1024 + m), np.int64(e) - 25)
    return -v if h & 0x8000 else v


@njit(cache=True, inline="always")
def _bf16_bits(v):
    """float64 v → bfloat16 bits, one round-to-nearest-even at 8 significant bits, then the float32
    cast (exact for an 8-bit significand inside float32's normal range; Inf beyond it)."""
    if v != v or abs(v) == np.inf:
        return np.uint16(np.float32(v).view(np.uint32) >> np.uint32(16))
    b = np.float64(v).view(np.uint64)
    r = (b + _U64(0xFFFFFFFFFFF) + ((b >> _U64(45)) & _U64(1))) & _U64(0xFFFFE00000000000)
    f = np.float32(np.uint64(r).view(np.float64))
    return np.uint16(f.view(np.uint32) >> np.uint32(16))


@njit(cache=True, inline="always")
def _bf16_value(h):
    return np.float64(np.uint32(np.uint32(h) << np.uint32(16)).view(np.float32))


@njit(cache=True)
def to_half(x, weight, out):
    """out[i] = binary16 bits of weight·x[i]; returns the status (OK / NONFINITE / OVERFLOW)."""
    status = OK
    for i in range(x.shape[0]):
        v = weight * x[i]
        h = _half_bits(v)
        out[i] = h
        if (h & 0x7C00) == 0x7C00:
            if not math.isfinite(x[i]):
                status = NONFINITE
            elif status == OK:
                status = OVERFLOW
    return status


@njit(cache=True)
def to_bf16(x, weight, out):
    """out[i] = bfloat16 bits of weight·x[i]; returns the status (OK / NONFINITE / OVERFLOW)."""
    status = OK
    for i in range(x.shape[0]):
        h = _bf16_bits(weight * x[i])
        out[i] = h
        if (h & 0x7F80) == 0x7F80:
            if not math.isfinite(x[i]):
                status = NONFINITE
            elif status == OK:
                status = OVERFLOW
    return status


@njit(cache=True)
def half_add(h, weight, out, accumulate):
    """out[i] (+)= weight·value(h[i]); returns the index of the first non-finite value, or −1."""
    bad = -1
    for i in range(h.shape[0]):
        hi = np.int64(h[i])
        if (hi & 0x7C00) == 0x7C00 and bad < 0:
            bad = i
        v = weight * _half_value(hi)
        out[i] = out[i] + v if accumulate else v
    return bad


@njit(cache=True)
def bf16_add(h, weight, out, accumulate):
    """:func:`half_add` for bfloat16 bits."""
    bad = -1
    for i in range(h.shape[0]):
        if (h[i] & 0x7F80) == 0x7F80 and bad < 0:
            bad = i
        v = weight * _bf16_value(h[i])
        out[i] = out[i] + v if accumulate else v
    return bad


@njit(cache=True)
def bf16_sum_into(a, inout):
    """inout[i] = bf16(float32(a[i]) + float32(inout[i])): the bfloat16 SUM of the user-defined MPI
    operation (both operands exact in float32; their float32 sum rounded once more, to bfloat16)."""
    for i in range(a.shape[0]):
        s = np.float32(_bf16_value(a[i])) + np.float32(_bf16_value(inout[i]))
        inout[i] = _bf16_bits(np.float64(s))


@njit(cache=True)
def half_sum_into(a, inout):
    """:func:`bf16_sum_into` for float16 words: the float32 sum of two float16 values rounded once
    more to float16 equals the correctly rounded float16 sum (float32 has 24 ≥ 2·11 + 2 bits, so the
    double rounding is innocuous), i.e. what MPICH's native MPI_FLOAT16_T SUM computes."""
    for i in range(a.shape[0]):
        s = np.float32(_half_value(np.int64(a[i]))) + np.float32(_half_value(np.int64(inout[i])))
        inout[i] = _half_bits(np.float64(s))


@njit(cache=True)
def stochastic_int8(x, weight, inv_step, q, seed, out):
    """out[i] = an integer in [−q, q] with E[out[i]] = weight·x[i]·inv_step (stochastic rounding:
    up with probability equal to the fractional part; uniform i of ``seed``'s stream); the caller
    guarantees |weight·x[i]·inv_step| ≤ q. Returns NONFINITE if x holds NaN/Inf, else OK."""
    status = OK
    for i in range(x.shape[0]):
        y = weight * x[i] * inv_step
        if not math.isfinite(y):
            status = NONFINITE
            out[i] = 0
            continue
        f = math.floor(y)
        r = f + 1.0 if uniform_at(seed, i) < y - f else f
        out[i] = np.int8(min(max(r, -q), q))
    return status


@njit(cache=True)
def int8_add(v, step, out, accumulate):
    """out[i] (+)= step·v[i] (v int8 or any integer type)."""
    for i in range(v.shape[0]):
        y = step * np.float64(v[i])
        out[i] = out[i] + y if accumulate else y


@njit(cache=True)
def max_abs(x):
    """max_i |x[i]| (NaN if x holds NaN; 0 for an empty x)."""
    m = 0.0
    for i in range(x.shape[0]):
        a = abs(x[i])
        if not a <= m:
            m = a
    return m


def warm() -> None:
    """Compile/load every kernel here for float64 input (the run's path)."""
    x = np.linspace(-2.0, 2.0, 7)
    h = np.empty(7, np.uint16)
    out = np.zeros(7)
    to_half(x, 1.0, h)
    half_add(h, 1.0, out, True)
    to_bf16(x, 1.0, h)
    bf16_add(h, 1.0, out, True)
    bf16_sum_into(h, h.copy())
    half_sum_into(h, h.copy())
    b = np.empty(7, np.int8)
    stochastic_int8(x, 1.0, 10.0, 31, np.uint64(1), b)
    int8_add(b, 0.1, out, True)
    max_abs(x)
