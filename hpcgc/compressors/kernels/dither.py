"""QSGD's dithering rule, shared by both level codes of ``qsgd`` (fixed-width fields in
:mod:`hpcgc.compressors.qsgd`, Elias-omega in :mod:`hpcgc.compressors.qsgd_elias`).

Alistarh et al., *QSGD*, NeurIPS 2017, Lemma 3.1: for a bucket v and r = s·|v_i|/‖v‖,
level_i = ⌊r⌋ + [u_i < frac(r)], capped at s. Both codes dither through :func:`qsgd_dither_chunk`
on the same chunks with the same uniforms, so the same seed gives the same levels (and the same
decoded vector) whichever code is sent.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from .prng import TWO32, uniforms32

SMALL_S = 1 << 19
"""Below this many levels, :func:`qsgd_dither` forms R = ⌊y⌋ < 2^52 with the 2^52 trick."""
_TWO52 = 2.0**52
_MASK52 = np.uint64((1 << 52) - 1)


@njit(cache=True, inline="always")
def qsgd_dither(x, u, fields, start, n, scale32, s):
    """fields[q] = level << 1 | sign for q = start … start + n − 1 (uint64; x, u, fields are one
    chunk): with r = |x_q|·s/scale, level = ⌊r⌋ + [u_q < frac(r)·2^32] = ⌊(R + u_q)/2^32⌋,
    R = round(r·2^32) = ⌊|x_q|·scale32 + 0.5⌋, capped at s; u_q a uniform 32-bit integer
    (:func:`.prng.uniforms32`). Inlined into the chunk loop, unsigned indices: see
    ``docs/compressors.md``, Kernel notes.

    For s < ``SMALL_S``, y = |x_q|·scale32 + 0.5 ≤ s·2^32 + 1 < 2^52, so R = ⌊y⌋ is an integer
    below 2^52 and ⌊y⌋ + 2^52 is exact: its float64 bits are 2^52's exponent and R as the
    mantissa (a floor, an add and a mask instead of a float → int64 conversion, which AVX2 lacks
    and LLVM scalarised). Larger s take :func:`qsgd_dither_wide`, the plain conversion."""
    for t in range(n):
        q = start + t
        v = np.float64(x[q])
        r = np.int64(np.float64(np.floor(abs(v) * scale32 + 0.5) + _TWO52).view(np.uint64) & _MASK52)
        lev = min((r + np.int64(u[q])) >> 32, s)
        fields[q] = (lev << 1) | np.int64((v < 0.0) & (lev > 0))


@njit(cache=True, inline="always")
def qsgd_dither_wide(x, u, fields, start, n, scale32, s):
    """:func:`qsgd_dither` for any s (R up to ~2^63: a float → int64 conversion)."""
    for t in range(n):
        q = start + t
        v = np.float64(x[q])
        lev = min((np.int64(abs(v) * scale32 + 0.5) + np.int64(u[q])) >> 32, s)
        fields[q] = (lev << 1) | np.int64((v < 0.0) & (lev > 0))


@njit(cache=True)
def qsgd_dither_chunk(x, c0, c1, bucket, scales, s, seed, fields, u):
    """fields[q] = level << 1 | sign of entry c0 + q of x, c0 ≤ c0 + q < c1 (one chunk): the
    buckets that intersect the chunk, with the chunk's uniforms (:func:`.prng.uniforms32` from
    c0). Both level codes (fixed and Elias) dither through here, so they decode to
    the same vector. ``u`` is scratch of ≥ c1 − c0 entries."""
    uniforms32(seed, c0, u[:c1 - c0])
    xc = x[c0:c1]
    i = c0
    l = c0 // bucket                      # then l += 1: no division per bucket
    while i < c1:
        e = min((l + 1) * bucket, c1)
        sc = scales[l]
        scale32 = TWO32 * s / sc if sc > 0.0 else 0.0
        if s < SMALL_S:
            qsgd_dither(xc, u, fields, np.uint64(i - c0), np.uint64(e - i), scale32, s)
        else:
            qsgd_dither_wide(xc, u, fields, np.uint64(i - c0), np.uint64(e - i), scale32, s)
        i = e
        l += 1
