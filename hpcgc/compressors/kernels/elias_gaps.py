"""Decoding the Elias-omega gap stream of sparse messages (:mod:`.sparse`'s layout), table-driven.

The stream is LSB-first and each code is written first bit first, so the next code starts at bit 0
of a 64-bit window ``buf`` of the stream. The window is refilled by one unaligned 64-bit load
while 8 bytes remain, and :data:`DECODE_TABLE` maps its low :data:`PREFIX_BITS` bits to where the
gap's own group starts and how wide it is (lp, b): for every gap < 2^16 the code is that prefix,
the b bits of the gap MSB first, and a 0 — so one look-up in a 512-byte table, one bit reversal
and one shift per index. At d/k = 64 — top-k at d = 2²⁰, k = 16 384 — the gaps are ≈ 64 and their
codes 13 bits. The previous decoders (a 2^16-entry table of whole codes of ≤ 16 bits, whose
look-up missed L1 and whose refill went a byte at a time, 2026-11-27; before it bit by bit, kept
as the tests' oracle in ``tests/elias_ref.py``) decode every stream the same way: longer codes,
and codes near the stream's end, take that bit-by-bit path from the same state, so every stream
decodes to the same indices, the same bit count and the same error status (Elias, *Universal
codeword sets and representations of the integers*, IEEE Trans. IT 21(2), 1975).
"""
from __future__ import annotations

import sys

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

from ...errors import PayloadError
from . import wire
from .sparse import (
    _MESSAGES,
    ERR_PADDING,
    ERR_RANGE,
    ERR_TRAILING,
    ERR_TRUNCATED,
    bitreverse64,
    fixed_stream_bytes,
    indices_valid,
    prefetch,
    reverse_bits,
    scatter_scaled,
)

PREFIX_BITS = 7
"""Bits of the window that settle a code's prefix: :data:`DECODE_TABLE` has 2^PREFIX_BITS entries."""


def _decode_table() -> np.ndarray:
    """DECODE_TABLE[w] = (lp + b + 1) | lp << 5 | b << 10 | one << 15 for the low PREFIX_BITS bits
    w of the window.

    An Elias-omega code is groups read MSB first — the first of 2 bits, each next one of (the
    previous group's value + 1) bits — while the bit after a group is 1; a 0 ends the code and the
    last group is the gap (none for the code ``0`` of gap 1: ``one``). Seven bits always reach the
    end of the second group and the bit after it, so they give where the gap's own group starts
    (lp) and its width b, assuming it ends there — true for every gap < 2^16 (b ≤ 16): the
    decoder checks that the bit after it is the terminating 0 (else: a longer code, bit by bit)."""
    table = np.zeros(1 << PREFIX_BITS, dtype=np.int32)
    for w in range(1 << PREFIX_BITS):
        bit = [(w >> i) & 1 for i in range(PREFIX_BITS)]
        if bit[0] == 0:
            lp, b, one = 0, 0, 1                      # "0": gap 1
        elif bit[2] == 0:
            lp, b, one = 0, 2, 0                      # "1x0": gap 2 or 3
        else:
            v1 = 2 + bit[1]
            v2 = int("".join(map(str, bit[2:3 + v1])), 2)
            t = 3 + v1                                # the bit after the second group
            lp, b, one = (2, v1 + 1, 0) if bit[t] == 0 else (t, v2 + 1, 0)
        table[w] = (lp + b + 1) | lp << 5 | b << 10 | one << 15
    return table


DECODE_TABLE = _decode_table()


@intrinsic
def load_u64(typingctx, src, pos):
    """The 8 bytes src[pos : pos + 8] of a C-contiguous uint8 array as a little-endian uint64: one
    unaligned load (the caller keeps pos + 8 ≤ len(src))."""
    if not (isinstance(src, types.Array) and src.dtype == types.uint8 and src.ndim == 1
            and src.layout == "C" and isinstance(pos, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        ary = context.make_array(sig.args[0])(context, builder, args[0])
        i = context.cast(builder, args[1], sig.args[1], types.intp)
        ptr = builder.bitcast(builder.gep(ary.data, [i]), ir.IntType(64).as_pointer())
        v = builder.load(ptr, align=1)
        if sys.byteorder != "little":
            v = builder.bswap(v)
        return v
    return types.uint64(src, pos), codegen


@njit(cache=True)
def decode_gaps(src, offset, end, d, idx, table, near=None):
    """:func:`elias_omega_decode_gaps` with the decode table as an argument (the kernel); with an
    array ``near``, the cache line of near[j] is asked for as each index j is decoded
    (:func:`~.sparse.prefetch`: a hint — the vector the entries will be applied to, whose lines
    then arrive while the rest of the stream decodes).

    While 8 bytes remain, the window is refilled by one unaligned 64-bit load (≥ 56 valid bits
    after it); a code whose gap is < 2^16 (≤ 23 bits) is then decoded from the table entry of its
    first 7 bits: the gap's group by one bit reversal, the code's length lp + b + 1 — a short
    chain of dependent operations per code, the table in L1. Other codes, and every code near the
    stream's end, take the bit-by-bit path from the same state: every stream decodes to the same
    indices, bit count and status as with the bit-by-bit decoder alone (``tests/elias_ref.py``).
    Bits of ``buf`` above ``nbuf`` are 0 or the stream's next bits (a refill ORs them in again)."""
    return decode_from(src, offset, end, d, idx, table, near, 0, np.uint64(0), 0, offset, -1)


@njit(cache=True)
def decode_from(src, offset, end, d, idx, table, near, i0, buf, nbuf, pos, prev):
    """:func:`decode_gaps` from a state of its loop: idx[:i0] decoded, the window ``buf`` with
    ``nbuf`` valid bits, the next byte ``pos`` and the last index ``prev`` (:func:`decode_pair`
    hands over its two streams' states here)."""
    low = np.uint64((1 << PREFIX_BITS) - 1)
    one64 = np.uint64(1)
    for i in range(i0, idx.shape[0]):
        if pos + 8 <= end:      # branch-free refill: whole bytes up to 56..63 valid bits
            buf |= load_u64(src, pos) << np.uint64(nbuf)
            pos += (63 - nbuf) >> 3
            nbuf |= 56
        else:
            while nbuf <= 56 and pos < end:
                buf |= np.uint64(src[pos]) << np.uint64(nbuf)
                pos += 1
                nbuf += 8
        e = table[buf & low]
        length = np.int64(e & 31)         # the code's length if the gap's group ends the code
        lp = np.int64((e >> 5) & 31)
        b = np.int64((e >> 10) & 31)
        if length <= nbuf and ((buf >> np.uint64(length - 1)) & one64) == 0:
            n = np.int64(((bitreverse64(buf >> np.uint64(lp)) >> np.uint64(63 - b)) >> one64)
                         | np.uint64(e >> 15))
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
        if near is not None:
            prefetch(near, j)
        idx[i] = j
        prev = j
    if pos < end or nbuf >= 8:  # whole bytes after the last code (loaded ahead or not)
        return ERR_TRAILING
    if nbuf > 0 and (buf & ((one64 << np.uint64(nbuf)) - one64)) != 0:
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
def decode_pair(a_src, a_off, a_end, a_idx, b_src, b_off, b_end, b_idx, d, table, near):
    """(status of a, status of b): :func:`decode_gaps` of two streams, ``a_src[a_off:a_end]`` into
    ``a_idx`` and ``b_src[b_off:b_end]`` into ``b_idx``, in lockstep — one code of each per round,
    two independent chains of dependent operations instead of one after the other, so that each
    hides the other's latency. The rounds take the table path only (both windows refilled by one
    load, both codes short); at the first code that would not, or at the shorter stream's end,
    each stream goes on alone from its state (:func:`decode_from`): the same indices, bit counts
    and statuses as two calls of :func:`decode_gaps`."""
    low = np.uint64((1 << PREFIX_BITS) - 1)
    one = np.uint64(1)
    abuf, bbuf = np.uint64(0), np.uint64(0)
    anb, bnb = 0, 0
    apos, bpos = a_off, b_off
    aprev, bprev = -1, -1
    n = min(a_idx.shape[0], b_idx.shape[0])
    i = 0
    while i < n and apos + 8 <= a_end and bpos + 8 <= b_end:
        abuf |= load_u64(a_src, apos) << np.uint64(anb)
        apos += (63 - anb) >> 3
        anb |= 56
        bbuf |= load_u64(b_src, bpos) << np.uint64(bnb)
        bpos += (63 - bnb) >> 3
        bnb |= 56
        ea = table[abuf & low]
        eb = table[bbuf & low]
        la, lb = np.int64(ea & 31), np.int64(eb & 31)
        if ((abuf >> np.uint64(la - 1)) & one) != 0 or ((bbuf >> np.uint64(lb - 1)) & one) != 0:
            break               # a long code: bit by bit, alone (≥ 56 valid bits ≥ every table code)
        ja = aprev + np.int64(((bitreverse64(abuf >> np.uint64((ea >> 5) & 31))
                                >> np.uint64(63 - ((ea >> 10) & 31))) >> one) | np.uint64(ea >> 15))
        jb = bprev + np.int64(((bitreverse64(bbuf >> np.uint64((eb >> 5) & 31))
                                >> np.uint64(63 - ((eb >> 10) & 31))) >> one) | np.uint64(eb >> 15))
        if ja >= d or jb >= d:
            break
        abuf >>= np.uint64(la)
        anb -= la
        bbuf >>= np.uint64(lb)
        bnb -= lb
        if near is not None:
            prefetch(near, ja)
            prefetch(near, jb)
        a_idx[i] = ja
        b_idx[i] = jb
        aprev, bprev = ja, jb
        i += 1
    sa = decode_from(a_src, a_off, a_end, d, a_idx, table, near, i, abuf, anb, apos, aprev)
    sb = decode_from(b_src, b_off, b_end, d, b_idx, table, near, i, bbuf, bnb, bpos, bprev)
    return sa, sb


@njit(cache=True)
def scaled_values(values, scale, vals):
    """vals[i] = float64(values[i])·scale — the products of numpy's ``np.multiply(values, scale,
    dtype=np.float64)`` —; True if every value is finite."""
    bad = False
    for i in range(values.shape[0]):
        v = values[i]
        bad |= (v != v) | (abs(v) == np.inf)
        vals[i] = np.float64(v) * scale
    return not bad


@njit(cache=True)
def decode_entries(src, ioff, idx, values, scale, vals, d, table, near):
    """A sparse message's entries in one call: idx ← the len(idx) indices of the Elias-omega
    stream ``src[ioff:]`` (:func:`decode_gaps`, prefetching ``near``'s lines unless None), and
    :func:`scaled_values`; returns (the stream's status, finite)."""
    return decode_gaps(src, ioff, src.shape[0], d, idx, table, near), scaled_values(values, scale, vals)


@njit(cache=True)
def decode_entries_pair(a_src, a_ioff, a_idx, a_values, a_scale, a_vals,
                        b_src, b_ioff, b_idx, b_values, b_scale, b_vals, d, table, near):
    """:func:`decode_entries` of two messages, their streams decoded in lockstep
    (:func:`decode_pair`); returns (status a, finite a, status b, finite b)."""
    sa, sb = decode_pair(a_src, a_ioff, a_src.shape[0], a_idx, b_src, b_ioff, b_src.shape[0], b_idx, d, table, near)
    return sa, scaled_values(a_values, a_scale, a_vals), sb, scaled_values(b_values, b_scale, b_vals)


@njit(cache=True)
def sparse_layout_bits(buf, starts, counts, fixed, nnz, ioff, vbits, d, out, table):
    """Rank 0's bit accounting of the workers' fixed-layout sparse payloads (``Exchange.account``;
    ``Compressor.sparse_layout``) in one call: out[m] = the model bits of worker m's payload
    ``buf[starts[m]:starts[m] + counts[m]]`` — fixed[m] (its value bits + nnz[m] fixed-width indices),
    or, when its header's Elias flag is set, vbits[m] + the bits of its Elias-omega stream of nnz[m]
    gaps from ioff[m] to the payload's end (:func:`decode_gaps`) —, or −1 where the message's own
    formula must decide (a payload shorter than ioff[m], a stream the decoder refuses). Returns the
    number of those."""
    most = 0
    for m in range(nnz.shape[0]):
        most = max(most, nnz[m])
    idx = np.empty(most, dtype=np.int64)
    left = 0
    for m in range(starts.shape[0]):
        a = starts[m]
        if counts[m] < ioff[m]:
            out[m] = -1.0
            left += 1
        elif buf[a + wire.FLAGS_BYTE] & wire.FLAG_ELIAS:
            got = decode_gaps(buf, a + ioff[m], a + counts[m], d, idx[:nnz[m]], table)
            if got < 0:
                out[m] = -1.0
                left += 1
            else:
                out[m] = vbits[m] + got
        else:
            out[m] = fixed[m]
    return left


@njit(cache=True)
def sparse_checked(src, head, k, fp64, width, d, idx, vals, raw, raw32, table):
    """Check a fixed-count sparse payload (:class:`~hpcgc.compressors.sparse_base.FixedKSparse`: the
    header, k plain values, the index stream; no count prefix) and decode it into ``idx`` (k int64)
    and ``vals`` (the k values widened to float64; ``raw``, ``raw32``: k uint64 and uint32 of work); returns 0, or 1 at the first failed check
    (the Python decoder, ``SparseCompressor._read_sparse`` and ``_read_values``, then names it).
    The same checks: the header is ``head`` (the format's flags) or ``head`` with the Elias flag;
    the payload holds the k values (float32, float64 with ``fp64``); the index stream ends the
    payload — Elias-omega gaps (:func:`decode_gaps`) shorter than k·``width`` bits, or exactly the
    fixed k ``width``-bit fields, strictly increasing in [0, d), zero padding bits —; every value
    is finite. The values are assembled from their bytes (any alignment)."""
    n = src.shape[0]
    h = head.shape[0]
    if n < h:
        return 1
    elias = False
    for t in range(h):
        if src[t] != head[t]:
            if t == wire.FLAGS_BYTE and src[t] == (head[t] | wire.FLAG_ELIAS):
                elias = True
            else:
                return 1
    nb = 8 if fp64 else 4
    iend = h + k * nb
    if n < iend:
        return 1
    if elias:
        status = decode_gaps(src, iend, n, d, idx, table)
        if status < 0 or status >= k * width:
            return 1
    else:
        if n - iend != (k * width + 7) // 8:
            return 1
        wire.unpack_fixed_width(src, iend, width, idx)
        if not indices_valid(idx, d):
            return 1
        tail = (k * width) % 8
        if tail and (src[n - 1] >> tail) != 0:
            return 1
    for i in range(k):
        w = np.uint64(0)
        for t in range(nb):
            w |= np.uint64(src[h + nb * i + t]) << np.uint64(8 * t)
        if fp64:
            raw[i] = w
        else:
            raw32[i] = np.uint32(w)
    if fp64:
        vals[:] = raw.view(np.float64)
    else:
        vals[:] = raw32.view(np.float32)
    for i in range(k):
        if not np.isfinite(vals[i]):
            return 1
    return 0


@njit(cache=True)
def sparse_add_many(buf, starts, lengths, weights, out, head, k, fp64, width, d, factor, table):
    """``Prepared.add_many`` of a fixed-count sparse format: for j = 0, 1, … in order, the payload
    ``buf[starts[j]:starts[j] + lengths[j]]`` checked and decoded (:func:`sparse_checked`), then
    out[idx] += (weights[j]·factor)·values (:func:`.sparse.scatter_scaled`, ``factor`` the
    format's scale: d/k for rand-k, 1 for top-k) — the products and sums of one
    ``SparseCompressor._decompress_add`` per payload. Returns the number added (it stops at the
    first invalid payload, nothing of that one added)."""
    idx = np.empty(k, dtype=np.int64)
    vals = np.empty(k)
    raw = np.empty(k, dtype=np.uint64)
    raw32 = np.empty(k, dtype=np.uint32)
    for j in range(starts.shape[0]):
        a = starts[j]
        if sparse_checked(buf[a:a + lengths[j]], head, k, fp64, width, d, idx, vals, raw, raw32, table) != 0:
            return j
        scatter_scaled(vals, idx, weights[j] * factor, out, True)
    return starts.shape[0]


def check_elias_status(status: int, nnz: int, d: int, who: str) -> None:
    """Raise PayloadError for a decoded Elias-omega stream's status (negative: the decoder's error)
    or for a stream not shorter than the fixed-width indices (the flag would not have been set)."""
    if status < 0:
        raise PayloadError(f"{who}: corrupted payload: {_MESSAGES[int(status)]}")
    if status >= nnz * wire.bits_for(d):
        raise PayloadError(f"{who}: corrupted payload: Elias-omega flag set but the stream is "
                           f"not shorter than fixed-width indices")


def read_indices(payload: np.ndarray, offset: int, nnz: int, d: int, use_elias: bool,
                 who: str) -> tuple[np.ndarray, int]:
    """Decode and validate the index stream at ``payload[offset:]``, which must end exactly at the
    end of the payload; returns (indices as int64, index bits as counted by the model)."""
    idx = np.empty(nnz, dtype=np.int64)
    end = payload.size
    if use_elias:
        status = int(elias_omega_decode_gaps(payload, offset, end, d, idx))
        check_elias_status(status, nnz, d, who)
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
