"""Elias-omega bit streams: the kernels behind the smoothness papers' encodings.

Elias, *Universal codeword sets and representations of the integers*, IEEE Trans. Inf. Theory 21
(1975). For k ≥ 1: |EO(1)| = 1 ("0"); EO(k) = R(k)‖"0" with R(1) = "" and
R(k) = R(⌊log₂k⌋)‖bin(k). The smoothness-aware papers count a dithered vector as
32 + Σ_{level_j > 0} (|EO(gap_j)| + 1 + |EO(level_j)|) bits (`spec/smoothness.md` §6; gaps from
j_prev = −1) and these kernels write exactly those codes, so the wire stream is the model stream
plus a few count codes and byte padding.

Two stream layouts share the code:

* **dithering** (``dither``, ``quant+``, ``block-dither``, ``block-quant+``): for each block l,
  EO(nnz_l + 1), then per nonzero entry EO(gap), one sign bit (1 = negative), EO(level); gaps are
  local to the block (first gap = local index + 1).
* **sparse** (``rand-tau+``): EO(nnz + 1), then EO(gap) per kept index; the kept values follow the
  stream as float32/float64 after byte padding.

Bits are written LSB-first into bytes (stream bit b is bit b % 8 of byte b // 8, as in
:mod:`hpcgc.compressors.kernels.wire`), each code in its natural order (first code bit first). Readers
check every bound and return a negative error code instead of reading past the stream.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from .prng import uniform_at
from .sparse import (
    _EO_PREFIX,
    _EO_PREFIX_LEN,
    _EO_TABLE,
    _LOW56,
    EO_TABLE_BITS,
    bit_length,
    elias_omega_length,
    reverse_bits,
)

ERR_OVERRUN = -1      # stream ended inside a code
ERR_RANGE = -2        # index outside its block / beyond d
ERR_CODE = -3         # code too long (value ≥ 2^62) or a zero level
ERR_PADDING = -4      # nonzero padding bits or bytes left over
MAX_CODE = np.int64(1) << 62


@njit(cache=True)
def eo_length(k):
    """|EO(k)| for k ≥ 1 (1 for k ≤ 1): two table lookups (:func:`~.sparse.elias_omega_length`)."""
    return elias_omega_length(k)


@njit(cache=True)
def put_bits(out, pos, v, n):
    """OR the n low bits of v (uint64, higher bits zero, n ≤ 64) into the stream ``out`` from bit
    ``pos`` (LSB-first); returns pos + n. Touches only the bytes holding those bits."""
    v = np.uint64(v)
    while n > 0:
        s = pos & 7
        out[pos >> 3] |= np.uint8((v << np.uint64(s)) & np.uint64(0xFF))
        step = min(8 - s, n)
        v >>= np.uint64(8 - s)
        pos += step
        n -= step
    return pos


@njit(cache=True)
def eo_write(out, pos, k):
    """Write EO(k) (k ≥ 1) into the zeroed stream ``out`` at bit ``pos``; return the new position.

    A code is R(⌊log₂k⌋)·binary(k)·"0": codes of k < 2^EO_TABLE_BITS come whole from a table,
    others as the table prefix R(b − 1) then binary(k) bit-reversed (b = bit_length(k)); the bits
    go in byte-wise."""
    if k <= 1:
        return pos + 1                        # "0" (the stream is zeroed)
    if k < (1 << EO_TABLE_BITS):
        e = _EO_TABLE[k]
        return put_bits(out, pos, e & _LOW56, np.int64(e >> np.uint64(56)))
    b = bit_length(k)
    pos = put_bits(out, pos, _EO_PREFIX[b], _EO_PREFIX_LEN[b])
    pos = put_bits(out, pos, reverse_bits(k, b), b)
    return pos + 1                            # the terminating "0"


@njit(cache=True)
def read_bit(src, pos):
    return (np.int64(src[pos >> 3]) >> (pos & 7)) & 1


@njit(cache=True)
def eo_read(src, pos, end):
    """Read one EO code from bit ``pos`` (stream ends at bit ``end``): (value, new pos), value < 0
    on error."""
    n = np.int64(1)
    while True:
        if pos >= end:
            return ERR_OVERRUN, pos
        if read_bit(src, pos) == 0:
            return n, pos + 1
        if n >= 62:
            return ERR_CODE, pos
        if pos + n + 1 > end:
            return ERR_OVERRUN, pos
        v = np.int64(0)
        for q in range(n + 1):                # the leading 1 and n more bits
            v = (v << 1) | read_bit(src, pos + q)
        pos += n + 1
        n = v


# -- dithering streams --------------------------------------------------------------------------
@njit(cache=True)
def dither_levels(x, starts, inv_steps, scales, seed, levels):
    """Signed levels: for j in block l, t = |x_j|/(scale_l·Δ_j), level = ⌊t⌋ + [U_j < t − ⌊t⌋],
    sign of x_j (unbiased: E level·scale·Δ = |x_j|). ``inv_steps`` = 1/Δ_j."""
    for l in range(starts.shape[0] - 1):
        r = scales[l]
        inv = 1.0 / r if r > 0.0 else 0.0
        for j in range(starts[l], starts[l + 1]):
            v = np.float64(x[j])
            t = abs(v) * inv * inv_steps[j]
            lev = np.int64(t)
            lev += np.int64(uniform_at(seed, j) < t - lev)
            levels[j] = -lev if v < 0.0 else lev


@njit(cache=True)
def dither_stream_bits(levels, starts):
    """(stream bits incl. the per-block count codes, model entry bits Σ |EO(gap)| + 1 + |EO(level)|)."""
    stream = np.int64(0)
    entries = np.int64(0)
    for l in range(starts.shape[0] - 1):
        prev = starts[l] - 1
        nnz = 0
        for j in range(starts[l], starts[l + 1]):
            lev = levels[j]
            if lev != 0:
                entries += eo_length(j - prev) + 1 + eo_length(abs(lev))
                prev = j
                nnz += 1
        stream += eo_length(nnz + 1)
    return stream + entries, entries


@njit(cache=True)
def dither_stream_write(levels, starts, out, offset):
    """Write the dithering stream into ``out`` from byte ``offset`` (bytes must be zeroed)."""
    s = out[offset:]
    pos = np.int64(0)
    for l in range(starts.shape[0] - 1):
        nnz = 0
        for j in range(starts[l], starts[l + 1]):
            nnz += np.int64(levels[j] != 0)
        pos = eo_write(s, pos, nnz + 1)
        prev = starts[l] - 1
        for j in range(starts[l], starts[l + 1]):
            lev = levels[j]
            if lev != 0:
                pos = eo_write(s, pos, j - prev)
                if lev < 0:
                    s[pos >> 3] |= np.uint8(1 << (pos & 7))
                pos += 1
                pos = eo_write(s, pos, abs(lev))
                prev = j
    return pos


@njit(cache=True)
def dither_stream_read(src, offset, nbytes, starts, steps, scales, idx, vals):
    """Decode a dithering stream: idx[q], vals[q] = scale_l·sign·level·Δ_j for the q-th nonzero.

    Returns (count, model entry bits); count < 0 is an error code. The stream must fill exactly
    ``nbytes`` bytes (zero padding)."""
    s = src[offset:offset + nbytes]
    end = np.int64(nbytes) * 8
    pos = np.int64(0)
    q = 0
    entries = np.int64(0)
    for l in range(starts.shape[0] - 1):
        c, pos = eo_read(s, pos, end)
        if c < 0:
            return c, entries
        nnz = c - 1
        if nnz > starts[l + 1] - starts[l]:
            return ERR_RANGE, entries
        j = starts[l] - 1
        for _ in range(nnz):
            g, pos = eo_read(s, pos, end)
            if g < 0:
                return g, entries
            if g > starts[l + 1] - 1 - j:
                return ERR_RANGE, entries
            j += g
            if pos >= end:
                return ERR_OVERRUN, entries
            neg = read_bit(s, pos)
            pos += 1
            lev, pos = eo_read(s, pos, end)
            if lev < 0:
                return lev, entries
            entries += eo_length(g) + 1 + eo_length(lev)
            idx[q] = j
            v = scales[l] * lev * steps[j]
            vals[q] = -v if neg else v
            q += 1
    if (end - pos) >= 8:
        return ERR_PADDING, entries
    while pos < end:
        if read_bit(s, pos):
            return ERR_PADDING, entries
        pos += 1
    return q, entries


# -- sparse (index) streams ---------------------------------------------------------------------
@njit(cache=True)
def bernoulli_keep(x, probs, seed, keep):
    """keep[q] = indices j with U_j < p_j, increasing; returns their number."""
    k = 0
    for j in range(x.shape[0]):
        if uniform_at(seed, j) < probs[j]:
            keep[k] = j
            k += 1
    return k


@njit(cache=True)
def gap_stream_bits(idx):
    """(stream bits incl. EO(nnz + 1), Σ |EO(gap)|)."""
    prev = -1
    gaps = np.int64(0)
    for q in range(idx.shape[0]):
        gaps += eo_length(idx[q] - prev)
        prev = idx[q]
    return gaps + eo_length(idx.shape[0] + 1), gaps


@njit(cache=True)
def gap_stream_write(idx, out, offset):
    s = out[offset:]
    pos = eo_write(s, np.int64(0), idx.shape[0] + 1)
    prev = -1
    for q in range(idx.shape[0]):
        pos = eo_write(s, pos, idx[q] - prev)
        prev = idx[q]
    return pos


@njit(cache=True)
def gap_stream_read(src, offset, limit, d, idx):
    """Read EO(nnz + 1) and the gaps from ``src[offset:offset + limit]`` into ``idx``; returns
    (nnz or error code, stream bytes used, Σ |EO(gap)|). Padding bits must be zero."""
    s = src[offset:offset + limit]
    end = np.int64(limit) * 8
    c, pos = eo_read(s, np.int64(0), end)
    if c < 0:
        return c, 0, 0
    nnz = c - 1
    if nnz > d:
        return ERR_RANGE, 0, 0
    j = np.int64(-1)
    gaps = np.int64(0)
    for q in range(nnz):
        g, pos = eo_read(s, pos, end)
        if g < 0:
            return g, 0, 0
        if g > d - 1 - j:
            return ERR_RANGE, 0, 0
        j += g
        idx[q] = j
        gaps += eo_length(g)
    used = (pos + 7) >> 3
    while pos < used * 8:
        if read_bit(s, pos):
            return ERR_PADDING, 0, 0
        pos += 1
    return nnz, used, gaps
