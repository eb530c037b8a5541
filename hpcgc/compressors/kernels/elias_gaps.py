"""Decoding the Elias-omega gap stream of sparse messages (:mod:`.sparse`'s layout), table-driven.

The stream is LSB-first and each code is written first bit first, so the next code starts at bit 0
of a 64-bit window ``buf`` of the stream. :data:`DECODE_TABLE` maps every pattern of the window's
low :data:`DECODE_BITS` bits to (gap << 5) | code length when a complete code of at most
DECODE_BITS bits starts there (Elias-omega is prefix-free: a code of length L fills all
2^(DECODE_BITS − L) patterns that start with it), else 0. At d/k = 64 — top-k at d = 2²⁰,
k = 16 384 — the gaps are ≈ 64 and their codes 13 bits: one table look-up and one shift per index
instead of a loop over the code's groups and single bits (the previous decoder, kept as the
tests' oracle in ``tests/elias_ref.py``). Longer codes, and codes that would run past the bits
left in the stream, take that bit-by-bit path from the same state, so every stream decodes to
the same indices, the same bit count and the same error status as before (Elias, *Universal
codeword sets and representations of the integers*, IEEE Trans. IT 21(2), 1975).
"""
from __future__ import annotations

import numpy as np
from numba import njit

from ...errors import PayloadError
from . import wire
from .sparse import (
    _EO_TABLE,
    _LOW56,
    _MESSAGES,
    EO_TABLE_BITS,
    ERR_PADDING,
    ERR_RANGE,
    ERR_TRAILING,
    ERR_TRUNCATED,
    fixed_stream_bytes,
    indices_valid,
    reverse_bits,
)

DECODE_BITS = 16
"""Bits of the decode window: gaps below 512 (codes of ≤ 16 bits) are decoded by one look-up."""


def _decode_table() -> np.ndarray:
    """DECODE_TABLE[w] = (gap << 5) | |ω(gap)| for the code at bit 0 of the window w, 0 if none fits."""
    table = np.zeros(1 << DECODE_BITS, dtype=np.int32)
    for g in range(1, 1 << EO_TABLE_BITS):
        e = int(_EO_TABLE[g])
        code, length = e & int(_LOW56), e >> 56
        if length > DECODE_BITS:                 # |ω(g)| does not decrease with g
            break
        table[code + (np.arange(1 << (DECODE_BITS - length)) << length)] = (g << 5) | length
    return table


DECODE_TABLE = _decode_table()


@njit(cache=True)
def decode_gaps(src, offset, end, d, idx, table):
    """:func:`elias_omega_decode_gaps` with the decode table as an argument (the kernel)."""
    buf = np.uint64(0)
    nbuf = 0                    # valid bits at the bottom of buf, next stream bit = bit 0
    pos = offset                # next byte to load
    prev = -1
    low = np.uint64((1 << DECODE_BITS) - 1)
    for i in range(idx.shape[0]):
        while nbuf <= 56 and pos < end:
            buf |= np.uint64(src[pos]) << np.uint64(nbuf)
            pos += 1
            nbuf += 8
        e = table[buf & low]
        length = e & 31
        if length != 0 and length <= nbuf:
            n = np.int64(e >> 5)
            buf >>= np.uint64(length)
            nbuf -= length
        else:                   # a long code, or one the remaining bits may not hold: bit by bit
            n = 1
            while True:
                if nbuf == 0:
                    if pos >= end:
                        return ERR_TRUNCATED
                    buf = np.uint64(src[pos])
                    pos += 1
                    nbuf = 8
                bit = buf & np.uint64(1)
                buf >>= np.uint64(1)
                nbuf -= 1
                if bit == 0:
                    break
                if n > 31:      # a group of n + 1 > 32 bits: no valid gap (< 2^32) needs it
                    return ERR_RANGE
                while nbuf < n:
                    if pos >= end:
                        return ERR_TRUNCATED
                    buf |= np.uint64(src[pos]) << np.uint64(nbuf)
                    pos += 1
                    nbuf += 8
                chunk = buf & ((np.uint64(1) << np.uint64(n)) - np.uint64(1))
                buf >>= np.uint64(n)
                nbuf -= n
                n = np.int64(reverse_bits(chunk, n) | (np.uint64(1) << np.uint64(n)))
        j = prev + n
        if j >= d:
            return ERR_RANGE
        idx[i] = j
        prev = j
    if pos < end or nbuf >= 8:  # whole bytes after the last code (loaded ahead or not)
        return ERR_TRAILING
    if nbuf > 0 and buf != 0:
        return ERR_PADDING
    return (pos - offset) * 8 - nbuf


def elias_omega_decode_gaps(src, offset: int, end: int, d: int, idx) -> int:
    """Decode len(idx) Elias-omega gaps from ``src[offset:end]`` into increasing indices.

    Returns the number of bits consumed (≥ 0), or a negative status: ERR_TRUNCATED (the stream
    ends inside a code), ERR_RANGE (an index ≥ d or a group longer than 32 bits), ERR_TRAILING
    (whole unused bytes after the last code), ERR_PADDING (non-zero padding bits). Reads only
    ``src[offset:end]``.
    """
    return decode_gaps(src, offset, end, d, idx, DECODE_TABLE)


@njit(cache=True)
def stream_bits(buf, starts, ends, nnz, d, out, table):
    """:func:`elias_stream_bits` with the decode table as an argument (the kernel)."""
    most = 0
    for m in range(nnz.shape[0]):
        most = max(most, nnz[m])
    idx = np.empty(most, dtype=np.int64)
    for m in range(nnz.shape[0]):
        out[m] = decode_gaps(buf, starts[m], ends[m], d, idx[:nnz[m]], table)


def elias_stream_bits(buf, starts, ends, nnz, d: int, out) -> None:
    """out[m] = the bits of the Elias-omega stream of ``nnz[m]`` gaps at ``buf[starts[m]:ends[m]]``
    (:func:`elias_omega_decode_gaps`'s return: negative if the stream is invalid), for every m in
    one call: rank 0's bit accounting of the gathered payloads (``Exchange.account``)."""
    stream_bits(buf, starts, ends, nnz, d, out, DECODE_TABLE)


def read_indices(payload: np.ndarray, offset: int, nnz: int, d: int, use_elias: bool,
                 who: str) -> tuple[np.ndarray, int]:
    """Decode and validate the index stream at ``payload[offset:]``, which must end exactly at the
    end of the payload; returns (indices as int64, index bits as counted by the model)."""
    idx = np.empty(nnz, dtype=np.int64)
    end = payload.size
    if use_elias:
        status = int(elias_omega_decode_gaps(payload, offset, end, d, idx))
        if status < 0:
            raise PayloadError(f"{who}: corrupted payload: {_MESSAGES[status]}")
        if status >= nnz * wire.bits_for(d):
            raise PayloadError(f"{who}: corrupted payload: Elias-omega flag set but the stream is "
                               f"not shorter than fixed-width indices")
        return idx, status
    need = fixed_stream_bytes(nnz, d)
    if end - offset != need:
        what = "truncated" if end - offset < need else "has trailing bytes"
        raise PayloadError(f"{who}: payload {what}: {end} bytes, expected {offset + need} for d={d}")
    wire.unpack_fixed_width(payload, offset, wire.bits_for(d), idx)
    if not indices_valid(idx, d):
        raise PayloadError(f"{who}: corrupted payload: indices not strictly increasing in [0, {d})")
    tail = (nnz * wire.bits_for(d)) % 8
    if tail and payload[end - 1] >> tail:
        raise PayloadError(f"{who}: corrupted payload: non-zero padding bits after the last index")
    return idx, nnz * wire.bits_for(d)
