"""Sparse messages: the index encoding shared by rand-k, top-k, hard threshold and C_nat ∘ rand-k.

A sparse message carries nnz values and their indices j_0 < j_1 < … < j_{nnz−1} in [0, d). The
indices travel in whichever of two encodings is smaller for this message, recorded in header flag
bit 1 (``wire.FLAG_ELIAS``):

* **fixed** (flag 0): nnz fields of ``w = ⌈log₂d⌉`` bits, LSB-first (``wire.pack_fixed_width``),
  nnz·w bits;
* **Elias-omega gaps** (flag 1): the gaps g_0 = j_0 + 1, g_i = j_i − j_{i−1} (all ≥ 1), each
  Elias-omega coded (Elias, *Universal codeword sets and representations of the integers*, IEEE
  Trans. IT 21(2), 1975), Σ_i |ω(g_i)| bits. The code of n is the recursive prefix
  ``ω(⌊log₂n⌋) · binary(n) · 0`` with ω(1) = ``0``; groups are written MSB-first (the usual bit
  order of this code): stream bit b is bit 7 − (b mod 8) of byte ⌊b/8⌋; the last byte is padded
  with zero bits.

Ties go to the fixed encoding. Both are bounds-checked on decode: a stream that runs past its
end, codes a gap that leaves [0, d), has a group longer than 32 bits, leaves whole bytes unused or
non-zero padding bits is rejected (PayloadError); the decoder never reads outside the payload.
Model bits of a sparse message count the encoding actually used: nnz·F + min(nnz·w, Σ|ω(g_i)|)
(the papers' k·(F + ⌈log₂d⌉) when the fixed encoding is smaller).
"""
from __future__ import annotations

import numpy as np
from numba import njit

from ..errors import PayloadError
from . import wire

# decode status codes (negative: error)
ERR_TRUNCATED = -1
ERR_RANGE = -2
ERR_TRAILING = -3
ERR_PADDING = -4

_MESSAGES = {
    ERR_TRUNCATED: "Elias-omega index stream truncated",
    ERR_RANGE: "Elias-omega index stream codes an index outside [0, d) or an over-long group",
    ERR_TRAILING: "Elias-omega index stream has trailing bytes",
    ERR_PADDING: "Elias-omega index stream has non-zero padding bits",
}


@njit(cache=True)
def bit_length(n):
    """Number of bits of n ≥ 0 (0 for n = 0), for n < 2^63."""
    n = np.int64(n)
    r = 0
    if n >= np.int64(1) << 32:
        n >>= 32
        r += 32
    if n >= 65536:
        n >>= 16
        r += 16
    if n >= 256:
        n >>= 8
        r += 8
    if n >= 16:
        n >>= 4
        r += 4
    if n >= 4:
        n >>= 2
        r += 2
    if n >= 2:
        n >>= 1
        r += 1
    return r + np.int64(n)


@njit(cache=True)
def elias_omega_length(n):
    """|ω(n)| in bits, n ≥ 1: 1 for n = 1, else bit_length(n) + |ω(bit_length(n) − 1)|."""
    length = 1
    while n > 1:
        b = bit_length(n)
        length += b
        n = b - 1
    return length


@njit(cache=True)
def elias_gap_bits(idx):
    """Σ_i |ω(g_i)| for the gaps of the increasing indices ``idx`` (g_0 = idx[0] + 1)."""
    total = 0
    prev = -1
    for i in range(idx.shape[0]):
        j = np.int64(idx[i])
        total += elias_omega_length(j - prev)
        prev = j
    return total


@njit(cache=True)
def elias_omega_encode_gaps(idx, out, offset):
    """Write the Elias-omega codes of the gaps of increasing ``idx`` MSB-first into
    ``out[offset:]``; returns the number of bytes written (= ⌈elias_gap_bits(idx)/8⌉)."""
    groups = np.empty(8, dtype=np.int64)
    widths = np.empty(8, dtype=np.int64)
    acc = np.uint64(0)
    nacc = 0
    pos = offset
    prev = -1
    for i in range(idx.shape[0]):
        j = np.int64(idx[i])
        n = j - prev
        prev = j
        ng = 0
        while n > 1:                      # groups from the last (binary(g)) to the first
            b = bit_length(n)
            groups[ng] = n
            widths[ng] = b
            ng += 1
            n = b - 1
        for t in range(ng - 1, -1, -1):
            acc = (acc << np.uint64(widths[t])) | np.uint64(groups[t])
            nacc += widths[t]
            while nacc >= 8:
                nacc -= 8
                out[pos] = np.uint8((acc >> np.uint64(nacc)) & np.uint64(0xFF))
                pos += 1
        acc <<= np.uint64(1)              # the terminating 0
        nacc += 1
        if nacc >= 8:
            nacc -= 8
            out[pos] = np.uint8((acc >> np.uint64(nacc)) & np.uint64(0xFF))
            pos += 1
    if nacc > 0:
        out[pos] = np.uint8((acc << np.uint64(8 - nacc)) & np.uint64(0xFF))
        pos += 1
    return pos - offset


@njit(cache=True)
def elias_omega_decode_gaps(src, offset, end, d, idx):
    """Decode len(idx) Elias-omega gaps from ``src[offset:end]`` into increasing indices.

    Returns the number of bits consumed (≥ 0), or a negative status: ERR_TRUNCATED (the stream
    ends inside a code), ERR_RANGE (an index ≥ d or a group longer than 32 bits), ERR_TRAILING
    (whole unused bytes after the last code), ERR_PADDING (non-zero padding bits). Reads only
    ``src[offset:end]``.
    """
    buf = np.uint64(0)
    nbuf = 0                    # valid bits at the bottom of buf
    pos = offset                # next byte to load
    prev = -1
    for i in range(idx.shape[0]):
        n = 1
        while True:
            if nbuf == 0:
                if pos >= end:
                    return ERR_TRUNCATED
                buf = (buf << np.uint64(8)) | np.uint64(src[pos])
                pos += 1
                nbuf = 8
            nbuf -= 1
            if (buf >> np.uint64(nbuf)) & np.uint64(1) == 0:
                break
            if n > 31:          # a group of n + 1 > 32 bits: no valid gap (< 2^32) needs it
                return ERR_RANGE
            while nbuf < n:
                if pos >= end:
                    return ERR_TRUNCATED
                buf = (buf << np.uint64(8)) | np.uint64(src[pos])
                pos += 1
                nbuf += 8
            nbuf -= n
            val = (buf >> np.uint64(nbuf)) & ((np.uint64(1) << np.uint64(n)) - np.uint64(1))
            n = np.int64(val | (np.uint64(1) << np.uint64(n)))
        j = prev + n
        if j >= d:
            return ERR_RANGE
        idx[i] = j
        prev = j
    if pos < end:
        return ERR_TRAILING
    if nbuf > 0 and (buf & ((np.uint64(1) << np.uint64(nbuf)) - np.uint64(1))) != 0:
        return ERR_PADDING
    if nbuf >= 8:                # cannot happen (bytes are loaded only when needed)
        return ERR_TRAILING
    return (pos - offset) * 8 - nbuf


@njit(cache=True)
def indices_valid(idx, d):
    """True if ``idx`` is strictly increasing and inside [0, d)."""
    prev = -1
    for i in range(idx.shape[0]):
        j = idx[i]
        if j <= prev or j >= d:
            return False
        prev = j
    return True


@njit(cache=True)
def gather_checked(x, idx, values):
    """values[i] = x[idx[i]] (cast to values' dtype); returns 0.0, or NaN if a value is non-finite."""
    chk = 0.0
    for i in range(idx.shape[0]):
        values[i] = x[idx[i]]
        chk += values[i] * 0.0
    return chk


@njit(cache=True)
def scatter_scaled(values, idx, scale, out, accumulate):
    """out[idx[i]] (+)= scale·values[i]; the caller zeroes ``out`` when not accumulating."""
    if accumulate:
        for i in range(idx.shape[0]):
            out[idx[i]] += scale * values[i]
    else:
        for i in range(idx.shape[0]):
            out[idx[i]] = scale * values[i]


# ------------------------------------------------------------------------------------------------
# Python helpers used by the sparse compressors
# ------------------------------------------------------------------------------------------------

def index_bits(idx: np.ndarray, d: int) -> tuple[bool, int]:
    """(use Elias-omega?, index bits) for increasing ``idx``: the smaller encoding, ties fixed."""
    fixed = idx.shape[0] * wire.bits_for(d)
    elias = int(elias_gap_bits(idx)) if idx.shape[0] else 0
    return (True, elias) if elias < fixed else (False, fixed)


def write_indices(idx: np.ndarray, d: int, use_elias: bool, out: np.ndarray, offset: int) -> None:
    """Write the index stream (sized by :func:`index_bits`) at ``out[offset:]``."""
    if use_elias:
        elias_omega_encode_gaps(idx, out, offset)
    else:
        wire.pack_fixed_width(idx, wire.bits_for(d), out, offset)


def fixed_stream_bytes(nnz: int, d: int) -> int:
    return wire.packed_bytes(nnz, wire.bits_for(d))


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
