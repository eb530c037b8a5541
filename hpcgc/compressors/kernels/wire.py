"""Wire encoding shared by all compressors: the common header and the numba bit-packing kernels.

Every payload is a 1-D ``uint8`` array, exactly the bytes handed to MPI. It starts with an
8-byte little-endian header::

    offset  size  field
    0       1     format id      (one per wire format; the table is in ``docs/compressors.md``)
    1       1     flags          bit 0: scales/values are float64 (``fp64=true``);
                                 bit 1: sparse indices are Elias-omega coded gaps (else fixed
                                 ⌈log₂d⌉-bit fields); bits 2-7 zero
    2       2     fingerprint    uint16: low 16 bits of CRC-32 of the compressor's canonical spec
    4       4     d              uint32: dimension of the encoded vector

followed by the compressor's body (documented in each compressor module and in
``docs/compressors.md``). The fingerprint lets ``decompress`` detect a payload made by the same
compressor with different parameters (e.g. ``qsgd:s=4`` decoded as ``qsgd:s=8``) without spending
header bytes on every parameter.

Bit streams are LSB-first: field ``i`` of width ``w`` occupies stream bits ``[i*w, (i+1)*w)``,
stream bit ``b`` being bit ``b % 8`` of byte ``b // 8``. Dense field streams (the dithering
levels of ``qsgd`` and ``natural-dither``) use a *blocked* layout that vectorises
(:func:`pack_fields`): every full block of ``FIELD_BLOCK`` = 32·``LANES`` fields is stored as
``w``·``LANES`` little-endian uint32 words, lane ``l`` holding fields ``l, l + LANES, …,
l + 31·LANES`` of the block packed LSB-first into its words ``l, l + LANES, …`` (the vertical
layout of Lemire and Boytsov's SIMD-BP128); the remaining < ``FIELD_BLOCK`` fields follow
LSB-first as above. Both layouts take exactly ``w`` bits per field. Ternary streams (5 trits per byte) are
:mod:`.trits`.

The kernels are plain loops over contiguous arrays writing into caller-provided outputs; callers
check every length before calling them, so a kernel never reads or writes out of bounds.
"""
from __future__ import annotations

import sys
import zlib

import numpy as np
from numba import literally, njit

from ...errors import PayloadError
from .simd import LANES, decode_row, extract_row, shl_row, shr_row, values_row

if sys.byteorder != "little":  # pragma: no cover - every current HPC platform is little-endian
    raise ImportError("hpcgc.compressors assumes a little-endian host (wire format is little-endian)")

HEADER_BYTES = 8
MAX_D = 2**32 - 1          # d is stored as uint32
FLAGS_BYTE = 1
"""Offset of the flags byte in the header (after the format id)."""
FLAG_FP64 = 0x01
FLAG_ELIAS = 0x02
"""Sparse formats: the index stream is Elias-omega coded gaps (:mod:`.sparse`); ``qsgd`` with
``code=elias``: the levels are an Elias-omega stream (:mod:`.qsgd_elias`)."""
CHUNK = 5120
"""Entries per chunk in the dithering kernels: a multiple of 5 and of ``FIELD_BLOCK``, so every
chunk starts on a byte boundary of the trit stream and on a block boundary of any field stream."""
# LANES (imported from .simd): lanes of the blocked field layout (:func:`pack_fields`), 32 uint32
# words, two 512-bit vectors.
FIELD_BLOCK = 32 * LANES

_HEADER_DTYPE = np.dtype([("fmt", "u1"), ("flags", "u1"), ("fp", "<u2"), ("d", "<u4")])


def fingerprint(spec: str) -> int:
    """16-bit fingerprint of a canonical compressor spec, stored in the header."""
    return zlib.crc32(spec.encode("utf-8")) & 0xFFFF


def new_payload(nbytes_body: int, fmt: int, flags: int, fp: int, d: int) -> np.ndarray:
    """Allocate header + body (body uninitialised) and write the header."""
    buf = np.empty(HEADER_BYTES + nbytes_body, dtype=np.uint8)
    hdr = buf[:HEADER_BYTES].view(_HEADER_DTYPE)[0]
    hdr["fmt"], hdr["flags"], hdr["fp"], hdr["d"] = fmt, flags, fp, d
    return buf


def as_payload(payload) -> np.ndarray:
    """View ``payload`` (uint8 array, bytes, bytearray, memoryview) as a contiguous 1-D uint8 array."""
    if isinstance(payload, np.ndarray):
        if payload.dtype != np.uint8 or payload.ndim != 1:
            raise PayloadError(f"payload must be a 1-D uint8 array, got dtype {payload.dtype} "
                               f"with shape {payload.shape}")
        return np.ascontiguousarray(payload)
    try:
        return np.frombuffer(payload, dtype=np.uint8)
    except TypeError:
        raise PayloadError(f"payload must be a uint8 array or a bytes-like object, "
                           f"got {type(payload).__name__}") from None


def check_header(payload: np.ndarray, who: str, fmt: int, flags: int, fp: int, d: int,
                 expected_len: int, free_flags: int = 0, exact: bool = True) -> int:
    """Raise PayloadError unless ``payload`` has this header and exactly ``expected_len`` bytes
    (at least ``expected_len`` if not ``exact``: variable-length bodies check their end
    themselves). Flag bits in ``free_flags`` may take either value; the flags byte is returned."""
    n = payload.size
    if n < HEADER_BYTES:
        raise PayloadError(f"{who}: payload truncated: {n} bytes, shorter than the "
                           f"{HEADER_BYTES}-byte header")
    p_fmt, p_flags = int(payload[0]), int(payload[1])
    p_fp = int(payload[2]) | (int(payload[3]) << 8)
    p_d = int(payload[4]) | (int(payload[5]) << 8) | (int(payload[6]) << 16) | (int(payload[7]) << 24)
    if p_fmt != fmt:
        raise PayloadError(f"{who}: corrupted or foreign payload: format id {p_fmt}, expected {fmt}")
    if (p_flags & ~free_flags) != flags:
        raise PayloadError(f"{who}: corrupted header or parameter mismatch: flags {p_flags:#04x}, "
                           f"expected {flags:#04x}")
    if p_fp != fp:
        raise PayloadError(f"{who}: payload was produced with different parameters or its header "
                           f"is corrupted (fingerprint {p_fp:#06x}, expected {fp:#06x})")
    if p_d != d:
        raise PayloadError(f"{who}: payload encodes dimension d={p_d}, but d={d} was requested")
    if n < expected_len or (exact and n != expected_len):
        what = "truncated" if n < expected_len else "has trailing bytes"
        raise PayloadError(f"{who}: payload {what}: {n} bytes, expected {expected_len} for d={d}")
    return p_flags


def read_scales(payload: np.ndarray, offset: int, count: int, fp64: bool) -> np.ndarray:
    """Little-endian float32/float64 scales at ``offset`` as a new float64 array (any alignment)."""
    dt = "<f8" if fp64 else "<f4"
    with np.errstate(invalid="ignore"):          # a corrupted scale may be a signalling NaN
        return np.frombuffer(payload, dtype=dt, count=count, offset=offset).astype(np.float64)


def read_array(payload: np.ndarray, offset: int, count: int, dtype: str) -> np.ndarray:
    """Little-endian array of ``count`` items at ``offset``: a zero-copy view when the address is
    aligned (always for payloads this package allocates), else an aligned copy. Read-only."""
    a = np.frombuffer(payload, dtype=dtype, count=count, offset=offset)
    return a if a.flags.aligned else a.copy()


def round_up_to_float32(v: np.ndarray) -> np.ndarray:
    """Smallest float32 values ≥ ``v`` (float64 array), returned as float64.

    Dithering uses the scale *as sent*: rounding the norm up keeps every probability |x|/scale ≤ 1
    and keeps the compressor exactly unbiased in exact arithmetic.
    """
    with np.errstate(over="ignore"):
        f = v.astype(np.float32)
    low = f.astype(np.float64) < v
    if low.any():
        f[low] = np.nextafter(f[low], np.float32(np.inf))
    return f.astype(np.float64)


def bits_for(n_values: int) -> int:
    """⌈log₂ n⌉: bits needed for an integer in [0, n) (0 for n = 1)."""
    return (int(n_values) - 1).bit_length()


def packed_bytes(n_fields: int, width: int) -> int:
    return (n_fields * width + 7) // 8


# ------------------------------------------------------------------------------------------------
# numba kernels
# ------------------------------------------------------------------------------------------------

@njit(cache=True)
def le_word(src, i):
    """The little-endian uint64 made of ``src[i:i + 8]`` (bit 8b + t is bit t of src[i + b]): 64
    bits of a 1-bit-per-entry stream at once. Decoders loop over the 64 entries of a word with the
    shift as loop variable (``(w >> t) & 1``), which vectorises; indexing the byte of each entry
    (``src[i >> 3] >> (i & 7)``) does not."""
    w = np.uint64(0)
    for b in range(8):
        w |= np.uint64(src[i + b]) << np.uint64(8 * b)
    return w


@njit(cache=True)
def pack_fixed_width(values, width, out, offset):
    """Write ``values[i]`` (non-negative, < 2**width, width ≤ 32) LSB-first into ``out[offset:]``.

    Writes exactly ``ceil(len(values)*width/8)`` bytes (unused high bits of the last byte are 0).
    For width ≤ 8, groups of 8 fields (= ``width`` whole bytes) go through one 64-bit word.
    """
    n = values.shape[0]
    i0 = 0
    pos = offset
    if width <= 8:
        w = np.uint64(width)
        for g in range(n // 8):
            acc = np.uint64(0)
            sh = np.uint64(0)
            for t in range(8):
                acc |= np.uint64(values[8 * g + t]) << sh
                sh += w
            for b in range(width):
                out[pos + b] = np.uint8(acc & np.uint64(0xFF))
                acc >>= np.uint64(8)
            pos += width
        i0 = (n // 8) * 8
    acc = np.int64(0)
    nacc = 0
    for i in range(i0, n):
        acc |= np.int64(values[i]) << nacc
        nacc += width
        while nacc >= 8:
            out[pos] = acc & 0xFF
            acc >>= 8
            nacc -= 8
            pos += 1
    if nacc > 0:
        out[pos] = acc & 0xFF


@njit(cache=True)
def unpack_fixed_width(src, offset, width, values):
    """Inverse of :func:`pack_fixed_width`: fill ``values`` from ``src[offset:]``.

    Reads exactly ``ceil(len(values)*width/8)`` bytes.
    """
    n = values.shape[0]
    i0 = 0
    pos = offset
    if width <= 8:
        w = np.uint64(width)
        m = (np.uint64(1) << w) - np.uint64(1)
        for g in range(n // 8):
            acc = np.uint64(0)
            sh = np.uint64(0)
            for b in range(width):
                acc |= np.uint64(src[pos + b]) << sh
                sh += np.uint64(8)
            for t in range(8):
                values[8 * g + t] = acc & m
                acc >>= w
            pos += width
        i0 = (n // 8) * 8
    mask = (np.int64(1) << width) - 1
    acc = np.int64(0)
    nacc = 0
    for i in range(i0, n):
        while nacc < width:
            acc |= np.int64(src[pos]) << nacc
            pos += 1
            nacc += 8
        values[i] = acc & mask
        acc >>= width
        nacc -= width


@njit(cache=True, inline="always")
def row_words(i, width):
    """Row i of a block of the blocked layout: (its first word row k, the shift of its fields in
    that word, the next word row if its fields straddle into it, else −1)."""
    bit = i * width
    k = bit >> 5
    sh = bit & 31
    return k, sh, k + 1 if sh + width > 32 else -1


@njit(cache=True)
def pack_fields(values, width, out, offset):
    """Write ``values[i]`` (< 2**width, 1 ≤ width ≤ 32) into ``out[offset:]`` in the blocked
    layout (module docstring): full blocks of ``FIELD_BLOCK`` fields vertically, 4·width·LANES
    bytes each, then the tail LSB-first (:func:`pack_fixed_width`). Writes exactly
    ``ceil(len(values)*width/8)`` bytes. Row i of a block (its fields i·LANES … (i+1)·LANES − 1)
    goes to word row ⌊i·w/32⌋ shifted left by i·w mod 32, and its bits beyond the word to the
    next word row: one vector shift per row (:mod:`.simd`). A word row's first write stores,
    later ones OR."""
    n = values.shape[0]
    nb = n // FIELD_BLOCK
    wpl = width * LANES                       # words per block
    words = out[offset:offset + 4 * nb * wpl].view(np.uint32)
    for blk in range(nb):
        wb = blk * wpl
        vb = blk * FIELD_BLOCK
        for i in range(32):
            k, sh, nxt = row_words(i, width)
            shl_row(words, wb + k * LANES, values, vb + i * LANES, sh, sh != 0)
            if nxt >= 0:
                shr_row(words, wb + nxt * LANES, values, vb + i * LANES, 32 - sh)
    pack_fixed_width(values[nb * FIELD_BLOCK:], width, out, offset + 4 * nb * wpl)


@njit(cache=True)
def unpack_fields(src, offset, width, values):
    """Inverse of :func:`pack_fields`: fill ``values`` from ``src[offset:]`` (reads exactly
    ``ceil(len(values)*width/8)`` bytes); one vector shift-and-mask per row (two for a row that
    straddles two word rows)."""
    n = values.shape[0]
    nb = n // FIELD_BLOCK
    wpl = width * LANES
    mask = np.uint32((np.uint64(1) << np.uint64(width)) - np.uint64(1))
    words = src[offset:offset + 4 * nb * wpl].view(np.uint32)
    for blk in range(nb):
        wb = blk * wpl
        vb = blk * FIELD_BLOCK
        for i in range(32):
            k, sh, nxt = row_words(i, width)
            extract_row(values, vb + i * LANES, words, wb + k * LANES, wb + nxt * LANES if nxt >= 0 else -1,
                        sh, mask)
    unpack_fixed_width(src, offset + 4 * nb * wpl, width, values[nb * FIELD_BLOCK:])


@njit(cache=True, inline="always")
def scaled_into(tmp, out, start, n, a, accumulate):
    """out[q] (+)= a·tmp[q] for q = start … start + n − 1 (uint64)."""
    for t in range(n):
        q = start + t
        if accumulate:
            out[q] += a * tmp[q]
        else:
            out[q] = a * tmp[q]


@njit(cache=True)
def blocked_decode(src, offset, d, bucket, scales, b, width, out, weight, accumulate, kind):
    """Decode the d-field blocked stream at ``src[offset:]`` of the format ``kind`` (its
    ``simd.ROW_VALUES`` entry, ``b`` its integer parameter): out[j] (+)= weight·scales[bucket of
    j]·value_j (``accumulate``), else out[j] = scales[…]·value_j.

    Full blocks are decoded a row at a time straight into ``out`` (:func:`.simd.decode_row`)
    when no row straddles two buckets (bucket ≥ d or a multiple of LANES). The rest (the tail of
    < FIELD_BLOCK fields, or every block when rows straddle buckets) is unpacked a chunk at a
    time, turned into values with scale 1 (:func:`.simd.values_row`) and then scaled per bucket."""
    literally(kind)
    w = weight if accumulate else 1.0
    done = 0
    if bucket >= d or bucket % LANES == 0:
        done = (d // FIELD_BLOCK) * FIELD_BLOCK
        words = src[offset:offset + (done * width) // 8].view(np.uint32)
        mask = np.uint32((np.uint64(1) << np.uint64(width)) - np.uint64(1))
        wpl = width * LANES
        l = 0
        nextb = bucket
        for blk in range(done // FIELD_BLOCK):
            for i in range(32):
                pos = blk * FIELD_BLOCK + i * LANES
                while pos >= nextb:
                    l += 1
                    nextb += bucket
                k, sh, nxt = row_words(i, width)
                decode_row(out, pos, words, blk * wpl + k * LANES, blk * wpl + nxt * LANES if nxt >= 0 else -1,
                           sh, mask, scales[l] * w, b, accumulate, kind)
    if done == d:
        return
    size = min(CHUNK, -(-(d - done) // LANES) * LANES)     # rows of LANES: a small d allocates little
    fields = np.empty(size, dtype=np.uint32)
    tmp = np.empty(size)
    for c0 in range(done, d, CHUNK):
        c1 = min(c0 + CHUNK, d)
        unpack_fields(src, offset + (c0 * width) // 8, width, fields[:c1 - c0])
        for r in range(0, c1 - c0, LANES):          # CHUNK is a multiple of LANES
            values_row(tmp, r, fields, r, 1.0, b, kind)
        oc = out[c0:c1]
        i = c0
        l = c0 // bucket                  # then l += 1: no division per bucket
        while i < c1:
            e = min((l + 1) * bucket, c1)
            scaled_into(tmp, oc, np.uint64(i - c0), np.uint64(e - i), scales[l] * w, accumulate)
            i = e
            l += 1


@njit(cache=True)
def fields_max(src, offset, n, width):
    """Largest of the ``n`` fields of the :func:`pack_fields` stream at ``src[offset:]`` (the
    decoders validate level fields with it before writing any output)."""
    buf = np.empty(min(CHUNK, n), dtype=np.uint32)
    m = np.uint32(0)
    for c0 in range(0, n, CHUNK):
        b = buf[:min(CHUNK, n - c0)]
        unpack_fields(src, offset + (c0 * width) // 8, width, b)
        for q in range(b.shape[0]):
            m = max(m, b[q])
    return np.int64(m)


@njit(cache=True)
def swar_any_above(src, offset, nbytes, width, limit):
    """True if some ``width``-bit field (width 1, 2, 4 or 8: fields never straddle a byte, in
    either layout) of ``src[offset:offset+nbytes]`` exceeds ``limit`` (0 ≤ limit < 2^width − 1).
    Eight bytes at a time, all fields at once (SWAR): with b a field's top bit, r its low bits and
    h = 2^(width−1), a field is > limit iff (limit < h) b or r + (h − 1 − limit) ≥ h, or
    (limit ≥ h) b and r + (2^width − 1 − limit) ≥ h — carries never cross a field."""
    per = 64 // width
    unit = np.uint64(0)
    for t in range(per):
        unit |= np.uint64(1) << np.uint64(t * width)
    top = unit << np.uint64(width - 1)
    low = ~top
    half = 1 << (width - 1)
    big = limit >= half
    c = unit * np.uint64(((1 << width) - 1 - limit) if big else (half - 1 - limit))
    nw = nbytes // 8
    words = src[offset:offset + 8 * nw].view(np.uint64)
    bad = np.uint64(0)
    if big:
        for i in range(nw):
            x = words[i]
            bad |= x & ((x & low) + c)
    else:
        for i in range(nw):
            x = words[i]
            bad |= x | ((x & low) + c)
    bad &= top
    x = np.uint64(0)
    for b in range(8 * nw, nbytes):               # the last < 8 bytes (zero-extended: 0 is valid)
        x |= np.uint64(src[offset + b]) << np.uint64(8 * (b - 8 * nw))
    y = x & ((x & low) + c) if big else x | ((x & low) + c)
    return (bad | (y & top)) != np.uint64(0)


def fields_above(src: np.ndarray, offset: int, n: int, width: int, limit: int) -> bool:
    """True if some of the ``n`` fields of the :func:`pack_fields` stream at ``src[offset:]``
    exceeds ``limit`` (validation before any output is written): a SWAR scan of the bytes for
    widths 1, 2, 4, 8, else :func:`fields_max`."""
    if limit >= (1 << width) - 1:
        return False
    if width in (1, 2, 4, 8):
        return bool(swar_any_above(src, offset, packed_bytes(n, width), width, limit))
    return fields_max(src, offset, n, width) > limit
