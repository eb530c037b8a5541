"""Ternary streams: 5 trits per byte (``t0 + 3 t1 + 9 t2 + 27 t3 + 81 t4``, 3^5 = 243 ≤ 256), the
wire layout of ``quant`` / ``terngrad``'s signs and levels (:mod:`hpcgc.compressors.quant`); moved
out of :mod:`.wire` on 2026-11-27 (same kernels, same bytes).

1.6 bits per entry against the log₂3 ≈ 1.585 entropy bound. The stream is *group-planar*
(:func:`pack_trits`): it is cut into groups of ``TRIT_GROUP`` = 5120 trits (the last may be
shorter); a group of m trits, B = ⌊m/5⌋, has in its byte q < B the trits q, B + q, 2B + q,
3B + q, 4B + q of the group (as t0 … t4), and its last m − 5B trits in byte B (t0 + 3 t1 + …,
unused digits zero). Five contiguous streams per byte: the loops vectorise.

The kernels are plain loops over contiguous arrays writing into caller-provided outputs; callers
check every length before calling them (:func:`count_bad_trit_bytes` for bytes ≥ 243).
"""
from __future__ import annotations

from decimal import ROUND_CEILING, Decimal, localcontext
from functools import lru_cache

import numpy as np
from numba import njit

from .wire import CHUNK

TRITS_PER_BYTE = 5
TRIT_GROUP = CHUNK
"""Trits per group of the group-planar trit layout (:func:`pack_trits`): 1024 bytes (a dithering
kernel's chunk, :data:`.wire.CHUNK`, so every chunk starts on a byte boundary of the stream)."""


def _log2_3() -> Decimal:
    with localcontext() as ctx:
        ctx.prec = 60
        return Decimal(3).ln() / Decimal(2).ln()


_LOG2_3 = _log2_3()


@lru_cache(maxsize=256)
def ternary_bits(d: int) -> int:
    """⌈d·log₂3⌉, exactly: log₂3 to 60 digits, so for d < 2^32 the product is ~40 digits away
    from any rounding question (float64 would be off by one for some d)."""
    with localcontext() as ctx:
        ctx.prec = 60
        return int((Decimal(int(d)) * _LOG2_3).to_integral_value(rounding=ROUND_CEILING))



def trit_bytes(n: int) -> int:
    return (n + TRITS_PER_BYTE - 1) // TRITS_PER_BYTE



@njit(cache=True, inline="always")
def trit_group(trits, stream, offset, g0):
    """The trit group starting at trit g0 (a multiple of ``TRIT_GROUP``) of the stream at
    ``stream[offset:]``: (its m trits, its ⌈m/5⌉ bytes, B = ⌊m/5⌋, and the five runs of B trits
    that bytes 0 … B − 1 hold, as :func:`pack_trits` lays them out)."""
    m = min(TRIT_GROUP, trits.shape[0] - g0)
    nb = m // 5
    t = trits[g0:g0 + m]
    o = stream[offset + g0 // 5:offset + g0 // 5 + (m + 4) // 5]
    return t, o, nb, t[:nb], t[nb:2 * nb], t[2 * nb:3 * nb], t[3 * nb:4 * nb], t[4 * nb:5 * nb]


@njit(cache=True)
def pack_trits(trits, out, offset):
    """Pack ``trits`` (values 0, 1, 2) 5 per byte into ``out[offset:]``, ⌈n/5⌉ bytes, in the
    group-planar layout (module docstring): per group of ``TRIT_GROUP`` trits (the last may be
    shorter) of m trits and B = ⌊m/5⌋, byte q < B = t_q + 3t_{B+q} + 9t_{2B+q} + 27t_{3B+q} +
    81t_{4B+q}, and the last m − 5B trits fill byte B LSB-first in base 3. Five contiguous
    streams per byte: the loop vectorises, and a decoder can write five contiguous runs."""
    for g0 in range(0, trits.shape[0], TRIT_GROUP):
        t, o, nb, t0, t1, t2, t3, t4 = trit_group(trits, out, offset, g0)
        m = t.shape[0]
        for q in range(nb):
            o[q] = np.uint8(np.int64(t0[q]) + 3 * np.int64(t1[q]) + 9 * np.int64(t2[q])
                            + 27 * np.int64(t3[q]) + 81 * np.int64(t4[q]))
        if 5 * nb < m:
            b = 0
            mul = 1
            for j in range(5 * nb, m):
                b += mul * np.int64(t[j])
                mul *= 3
            o[nb] = b


@njit(cache=True, inline="always")
def trit_digits(b):
    """The five base-3 digits of a byte b < 243, lowest first (b // 3 = (171·b) >> 9 for b < 256:
    a multiply, not a division, so loops over bytes vectorise). For b ≥ 243 the last digit is
    clipped to 2."""
    q1 = (b * 171) >> 9
    q2 = (q1 * 171) >> 9
    q3 = (q2 * 171) >> 9
    q4 = (q3 * 171) >> 9
    return b - 3 * q1, q1 - 3 * q2, q2 - 3 * q3, q3 - 3 * q4, min(q4, 2)


@njit(cache=True)
def unpack_trits(src, offset, trits):
    """Inverse of :func:`pack_trits` (reads ⌈n/5⌉ bytes). Bytes must be < 243 (the caller
    checks with :func:`count_bad_trit_bytes`); a larger byte decodes to unspecified trits ≤ 2."""
    for g0 in range(0, trits.shape[0], TRIT_GROUP):
        t, o, nb, t0, t1, t2, t3, t4 = trit_group(trits, src, offset, g0)
        m = t.shape[0]
        for q in range(nb):
            t0[q], t1[q], t2[q], t3[q], t4[q] = trit_digits(np.int64(o[q]))
        if 5 * nb < m:
            b = np.int64(o[nb])
            for j in range(5 * nb, m):
                t[j] = b % 3
                b //= 3


@njit(cache=True)
def count_bad_trit_bytes(src, offset, nbytes):
    """Number of bytes in ``src[offset:offset+nbytes]`` that are not valid 5-trit groups (≥ 243)."""
    bad = 0
    for i in range(offset, offset + nbytes):
        if src[i] >= 243:
            bad += 1
    return bad
