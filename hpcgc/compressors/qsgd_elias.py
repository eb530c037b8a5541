"""``qsgd:code=elias``: QSGD's levels sent with the paper's Elias code (Alistarh et al. 2017, §3.2).

Alistarh, Grubic, Li, Tomioka, Vojnovic, *QSGD: Communication-Efficient SGD via Gradient
Quantization and Encoding*, NeurIPS 2017. The quantized vector Q_s(v) is the same as with
``code=fixed`` (same seed ⇒ same levels ⇒ identical decoded vector: both codes dither with
:mod:`hpcgc.compressors.kernels.dither`); only the encoding of the levels differs. Instead of
d fixed-width fields, only the entries with level ≥ 1 are sent: their positions as Elias-omega
coded gaps, a sign bit and the Elias-omega code of the level (ω(1) = ``0``,
ω(n) = R(n)·``0`` with R(1) empty and R(n) = R(⌊log₂n⌋)·binary(n); Elias 1975, the "recursive
Elias code" of QSGD §3.2).

Message (after the 8-byte header, whose flags byte has ``wire.FLAG_ELIAS`` set): the m bucket
scales (float32 rounded up, or float64 with ``fp64=true``, exactly as ``code=fixed``), then one
LSB-first bit stream (stream bit b is bit b mod 8 of byte ⌊b/8⌋, each code written first bit
first: the layout of :mod:`.kernels.elias_omega` and :mod:`.kernels.sparse`):

* for each entry j with level_j ≥ 1, in increasing j: ω(gap), one sign bit (1 = negative),
  ω(level_j); gap = j − j_prev, the first gap = j + 1;
* an **end marker** ω(d − j_last) (the gap that points one past the last entry, j = d;
  j_last = −1 when no level is nonzero);
* zero padding bits to the byte.

x = 0 (every bucket norm 0) is the **empty stream** (no end marker, no byte); any other x has
an end marker, also when every level dithered to 0 (ω(d + 1) alone). The end marker is needed
because ω(1) = ``0``: the entry (gap 1, +, level 1) is ``000``, so without it a stream and the
same stream with up to two such entries appended in its zero padding would be the same bytes,
and neither trailing bytes nor a payload cut after its norms could be detected.

Model bits (what QSGD Thm 3.2 bounds): F·m + Σ_{level_j ≥ 1} (|ω(gap_j)| + 1 + |ω(level_j)|),
F = 32 (64 with ``fp64=true``); wire bits = 64 (header) + model bits + |ω(d − j_last)| (end
marker, ≤ 45 bits; none for x = 0) + < 8 bits of padding.

QSGD Theorem 3.2 (no buckets, ℓ2 scale, F = 32; log base 2): for any v,

    E[bits] ≤ (3 + (3/2 + o(1))·log(2(s² + d)/(s(s + √d))))·s(s + √d) + 32,

the o(1) standing for the lower-order (log log) terms of the Elias code. For s = √d the bound is
9d + 32 and Corollary 3.3 states ≤ 2.8d + 32; the flat vector exceeds the latter: all its levels
are 1, at 3 bits each (3d + 32). :func:`thm32_bound_bits` evaluates the bound without the o(1)
term; ``tests/test_qsgd_elias.py`` checks measured model bits against it.

Decoding is strict: a stream that ends inside a code, a gap past d, a level above s, an entry in
a bucket whose scale is 0, a group longer than 33 bits, whole bytes after the end marker,
non-zero padding bits, an empty stream after nonzero norms or a non-empty one after zero norms
raise ``PayloadError``. The kernels check every bound themselves and never read outside the
stream. ``decompress_add`` first validates the
whole stream (one parsing pass that writes nothing), then parses it again to accumulate, so
``out`` is untouched on error without a dense or sparse temporary; ``decompress`` parses once into
a new zeroed array.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit

from ..errors import PayloadError
from .kernels import wire
from .kernels.dither import qsgd_fields
from .kernels.norms import n_blocks
from .kernels.sparse import bit_length, elias_omega_length, reverse_bits
from .kernels.wire import CHUNK

# parse status codes (negative: error)
ERR_TRUNCATED = -1
ERR_RANGE = -2
ERR_LEVEL = -3
ERR_LONG = -4
ERR_TRAILING = -5
ERR_PADDING = -6
ERR_EMPTY = -7
ERR_SCALE = -8
ERR_NOSTREAM = -9

_MESSAGES = {
    ERR_TRUNCATED: "Elias stream truncated (it ends inside a code)",
    ERR_RANGE: "Elias stream codes a position beyond d",
    ERR_LEVEL: "Elias stream codes a quantization level above s",
    ERR_LONG: "Elias stream has an over-long code (a group longer than 33 bits)",
    ERR_TRAILING: "Elias stream has trailing bytes after its end marker",
    ERR_PADDING: "Elias stream has non-zero padding bits",
    ERR_EMPTY: "Elias stream of a zero vector (every bucket norm 0) is not empty",
    ERR_NOSTREAM: "payload truncated: no Elias stream after nonzero bucket norms",
    ERR_SCALE: "Elias stream codes a nonzero level in a bucket whose norm is 0",
}

MODE_CHECK = 0        # parse and validate only
MODE_WRITE = 1        # out[j] = value (out zeroed by the caller)
MODE_ADD = 2          # out[j] += weight·value

# ω codes of 1 … SMALL − 1, first code bit at bit 0: the common short gaps and levels cost one
# lookup. Entries whose gap and level are both < FAST (|ω| ≤ 14 bits each) are appended as one
# ≤ 29-bit word.
SMALL = 1024
FAST = 256
# ENTRY[w] for the next PEEK stream bits w: if they start with a whole entry ω(gap), sign,
# ω(level), its gap | level << 8 | sign << 16 | bits << 17, else 0 (decoded the long way)
PEEK = 12


def omega_bits(n: int) -> str:
    """ω(n) as a string of '0'/'1', first bit first (pure Python; tables and tests)."""
    bits = "0"
    while n > 1:
        b = format(n, "b")
        bits = b + bits
        n = len(b) - 1
    return bits


def _omega_table(n: int) -> tuple[np.ndarray, np.ndarray]:
    codes = np.zeros(n, dtype=np.uint64)
    lengths = np.zeros(n, dtype=np.int64)
    for k in range(1, n):
        bits = omega_bits(k)
        lengths[k] = len(bits)
        codes[k] = int(bits[::-1], 2)          # first code bit → bit 0
    return codes, lengths


def _entry_table(peek: int) -> np.ndarray:
    table = np.zeros(1 << peek, dtype=np.uint32)
    codes = [(n, omega_bits(n)) for n in range(1, 1 << peek)]
    codes = [(n, c) for n, c in codes if len(c) <= peek - 2]    # n < 64 for peek = 12
    for gap, g in codes:
        for level, lv in codes:
            for sign in (0, 1):
                bits = g + str(sign) + lv
                if len(bits) > peek:
                    continue
                w = int(bits[::-1], 2)                          # first bit → bit 0
                entry = gap | level << 8 | sign << 16 | len(bits) << 17
                table[w::1 << len(bits)] = entry                # whatever bits follow it
    return table


_CODES, _LENGTHS = _omega_table(SMALL)
_ENTRY = _entry_table(PEEK)


# ------------------------------------------------------------------------------------------------
# numba kernels
# ------------------------------------------------------------------------------------------------

@njit(cache=True)
def omega_code(n):
    """(ω(n) with its first bit at bit 0, |ω(n)|) for 1 ≤ n < 2^40 (|ω(n)| ≤ 53 bits)."""
    if n < SMALL:
        return _CODES[n], _LENGTHS[n]
    code = np.uint64(0)          # natural order (first bit highest), built from the last group
    length = 1                   # the terminating 0
    while n > 1:
        b = bit_length(n)
        code |= np.uint64(n) << np.uint64(length)
        length += b
        n = b - 1
    return reverse_bits(code, length), length


@njit(cache=True)
def _put(o, pos, acc, nacc, code, length):
    """Append ``length`` ≤ 64 bits (``code``, first bit at bit 0) to the pending bits (acc, nacc
    < 32); whole 32-bit words go to ``o[pos:]``. Returns (pos, acc, nacc) with nacc < 32."""
    if length > 32:
        acc |= (code & np.uint64(0xFFFFFFFF)) << np.uint64(nacc)
        o[pos] = np.uint8(acc & np.uint64(0xFF))
        o[pos + 1] = np.uint8((acc >> np.uint64(8)) & np.uint64(0xFF))
        o[pos + 2] = np.uint8((acc >> np.uint64(16)) & np.uint64(0xFF))
        o[pos + 3] = np.uint8((acc >> np.uint64(24)) & np.uint64(0xFF))
        pos += 4
        acc >>= np.uint64(32)
        code >>= np.uint64(32)
        length -= 32
    acc |= code << np.uint64(nacc)
    nacc += length
    if nacc >= 32:
        o[pos] = np.uint8(acc & np.uint64(0xFF))
        o[pos + 1] = np.uint8((acc >> np.uint64(8)) & np.uint64(0xFF))
        o[pos + 2] = np.uint8((acc >> np.uint64(16)) & np.uint64(0xFF))
        o[pos + 3] = np.uint8((acc >> np.uint64(24)) & np.uint64(0xFF))
        pos += 4
        acc >>= np.uint64(32)
        nacc -= 32
    return pos, acc, nacc


@njit(cache=True)
def qsgd_elias_encode(x, bucket, scales, s, seed, out, offset):
    """QSGD dithering of x (per-bucket scales, the uniforms of ``code=fixed``) written as the Elias
    stream into ``out[offset:]``; returns (stream bytes, model entry bits).

    Per chunk of ``wire.CHUNK`` entries: :func:`.kernels.dither.qsgd_fields` fills a scratch array of
    fields, a branch-free loop collects the positions of the nonzero levels, and codes are emitted
    for those only (one ≤ 29-bit append for a gap and level < FAST), 32 bits at a time.
    ``out[offset:]`` must hold ``stream_bound_bytes`` bytes; it need not be zeroed."""
    d = x.shape[0]
    fields = np.empty(CHUNK, dtype=np.uint32)
    u = np.empty(CHUNK, dtype=np.uint32)
    nz = np.empty(CHUNK, dtype=np.int64)
    o = out[offset:]
    acc = np.uint64(0)            # pending bits (< 32), next stream bit at bit 0
    nacc = np.int64(0)
    pos = np.int64(0)
    prev = np.int64(-1)
    bits = np.int64(0)
    for c0 in range(0, d, CHUNK):
        c1 = min(c0 + CHUNK, d)
        f = fields[:c1 - c0]
        qsgd_fields(x, c0, c1, bucket, scales, s, seed, f, u)
        k = 0
        for b0 in range(0, c1 - c0, 64):    # positions of the nonzero levels, without branches,
            fb = f[b0:min(b0 + 64, c1 - c0)]  # skipping blocks of 64 zeros (vectorised max)
            mx = np.uint32(0)
            for q in range(fb.shape[0]):
                mx = max(mx, fb[q])
            if mx > 1:
                for q in range(fb.shape[0]):
                    nz[k] = b0 + q
                    k += np.int64(fb[q] > 1)
        for t in range(k):
            q = nz[t]
            v = np.int64(f[q])
            j = c0 + q
            gap = j - prev
            prev = j
            lev = v >> 1
            if gap < FAST and lev < FAST:
                gl = _LENGTHS[gap]
                ll = _LENGTHS[lev]
                code = (_CODES[gap] | (np.uint64(v & 1) << np.uint64(gl))
                        | (_CODES[lev] << np.uint64(gl + 1)))
                acc |= code << np.uint64(nacc)  # _put, inlined by hand (a call costs 2x here)
                nacc += gl + 1 + ll
                bits += gl + 1 + ll
                if nacc >= 32:
                    o[pos] = np.uint8(acc & np.uint64(0xFF))
                    o[pos + 1] = np.uint8((acc >> np.uint64(8)) & np.uint64(0xFF))
                    o[pos + 2] = np.uint8((acc >> np.uint64(16)) & np.uint64(0xFF))
                    o[pos + 3] = np.uint8((acc >> np.uint64(24)) & np.uint64(0xFF))
                    pos += 4
                    acc >>= np.uint64(32)
                    nacc -= 32
            else:
                code, length = omega_code(gap)
                pos, acc, nacc = _put(o, pos, acc, nacc, code, length)
                bits += length
                code, length = omega_code(lev)
                pos, acc, nacc = _put(o, pos, acc, nacc, (code << np.uint64(1)) | np.uint64(v & 1),
                                      length + 1)
                bits += length + 1
    if prev >= 0 or _any_positive(scales):  # end marker: the gap to j = d (empty stream: x = 0)
        code, length = omega_code(d - prev)
        pos, acc, nacc = _put(o, pos, acc, nacc, code, length)
        while nacc > 0:
            o[pos] = np.uint8(acc & np.uint64(0xFF))
            acc >>= np.uint64(8)
            nacc -= 8
            pos += 1
    return pos, bits


@njit(cache=True)
def _any_positive(scales):
    for l in range(scales.shape[0]):
        if scales[l] > 0.0:
            return True
    return False


@njit(cache=True)
def _read_omega(buf, nbuf):
    """Read one ω code from the bit buffer (next bit at bit 0, ≥ 57 valid bits unless the stream
    ends: every code fits, as a group longer than 33 bits is rejected at its first bit).
    Returns (value or negative status, buf, nbuf)."""
    one = np.uint64(1)
    n = np.int64(1)
    while True:
        if nbuf == 0:
            return np.int64(ERR_TRUNCATED), buf, nbuf
        bit = buf & one
        buf >>= one
        nbuf -= 1
        if bit == 0:
            return n, buf, nbuf
        if n > 32:
            return np.int64(ERR_LONG), buf, nbuf
        if nbuf < n:
            return np.int64(ERR_TRUNCATED), buf, nbuf
        nn = np.uint64(n)
        chunk = buf & ((one << nn) - one)
        buf >>= nn
        nbuf -= n
        n = np.int64(reverse_bits(chunk, n) | (one << nn))


@njit(cache=True)
def qsgd_elias_parse(src, offset, end, d, s, bucket, scales, out, weight, mode):
    """Parse the Elias stream ``src[offset:end]`` of a d-vector with s levels and per-bucket
    ``scales``; returns (number of entries, model entry bits), or (negative status, 0).

    ``mode``: MODE_CHECK validates only; MODE_WRITE sets out[j] = ±level·scale/s (out zeroed);
    MODE_ADD adds weight·(±level·scale/s), computed as ``code=fixed``'s decoder does, so both
    codes decode to the same floats. Reads only ``src[offset:end]``; writes only out[j], j < d,
    after j, the level and the scale have been checked (an invalid stream may have written some
    entries in MODE_WRITE/MODE_ADD: validate with MODE_CHECK first when ``out`` must stay
    untouched). An entry of ≤ PEEK bits is decoded by one lookup in ENTRY."""
    st = src[offset:end]
    nb = st.shape[0]
    if nb == 0:                             # only x = 0 (every scale 0) has the empty stream
        if _any_positive(scales):
            return np.int64(ERR_NOSTREAM), np.int64(0)
        return np.int64(0), np.int64(0)
    buf = np.uint64(0)            # unread bits, next stream bit at bit 0; bits above nbuf are 0
    nbuf = np.int64(0)
    pos = np.int64(0)             # next byte of st to load
    prev = np.int64(-1)
    count = np.int64(0)
    bend = np.int64(0)            # end of the current bucket
    unit = 0.0
    sc = 0.0
    peek_mask = np.uint64((1 << PEEK) - 1)
    while True:
        if nbuf < 32:                       # ≥ 32 bits for the table (whole words when possible)
            if pos + 4 <= nb:
                buf |= (np.uint64(st[pos]) | (np.uint64(st[pos + 1]) << np.uint64(8))
                        | (np.uint64(st[pos + 2]) << np.uint64(16))
                        | (np.uint64(st[pos + 3]) << np.uint64(24))) << np.uint64(nbuf)
                pos += 4
                nbuf += 32
            else:
                while nbuf <= 56 and pos < nb:
                    buf |= np.uint64(st[pos]) << np.uint64(nbuf)
                    pos += 1
                    nbuf += 8
        start_bits = 8 * pos - nbuf         # stream bits consumed before this entry
        e = np.int64(_ENTRY[buf & peek_mask])
        length = e >> 17
        if e != 0 and length <= nbuf and prev + (e & 0xFF) < d:
            j = prev + (e & 0xFF)
            n = (e >> 8) & 0xFF
            neg = (e >> 16) & 1
            buf >>= np.uint64(length)
            nbuf -= length
        else:
            while nbuf <= 56 and pos < nb:  # the long way: refill to ≥ 57 bits
                buf |= np.uint64(st[pos]) << np.uint64(nbuf)
                pos += 1
                nbuf += 8
            g, buf, nbuf = _read_omega(buf, nbuf)
            if g < 0:
                return g, np.int64(0)
            j = prev + g
            if j >= d:
                if j > d:
                    return np.int64(ERR_RANGE), np.int64(0)
                if count == 0 and not _any_positive(scales):
                    return np.int64(ERR_EMPTY), np.int64(0)
                break
            while nbuf <= 56 and pos < nb:
                buf |= np.uint64(st[pos]) << np.uint64(nbuf)
                pos += 1
                nbuf += 8
            if nbuf == 0:
                return np.int64(ERR_TRUNCATED), np.int64(0)
            neg = np.int64(buf & np.uint64(1))
            buf >>= np.uint64(1)
            nbuf -= 1
            n, buf, nbuf = _read_omega(buf, nbuf)
            if n < 0:
                return n, np.int64(0)
        if n > s:
            return np.int64(ERR_LEVEL), np.int64(0)
        if j >= bend:
            l = j // bucket
            bend = (l + 1) * bucket
            sc = scales[l]
            unit = sc / s
            if mode == MODE_ADD:
                unit = weight * unit
        if sc == 0.0:
            return np.int64(ERR_SCALE), np.int64(0)
        if mode == MODE_WRITE:
            out[j] = n * (unit - 2.0 * unit * neg)
        elif mode == MODE_ADD:
            out[j] += n * (unit - 2.0 * unit * neg)
        prev = j
        count += 1
    if 8 * (nb - pos) + nbuf >= 8:
        return np.int64(ERR_TRAILING), np.int64(0)
    if buf != 0:
        return np.int64(ERR_PADDING), np.int64(0)
    return count, start_bits


# ------------------------------------------------------------------------------------------------
# sizes and the Thm 3.2 bound
# ------------------------------------------------------------------------------------------------

def stream_bound_bits(d: int, s: int) -> int:
    """An upper bound on the stream length in bits, for any x: the gaps (end marker included) sum
    to d + 1 and |ω(g)| ≤ 1.5·g for every g ≥ 1 (equality at g = 2 and 4), so Σ|ω(gap)| ≤
    1.5(d + 1); each of the ≤ d entries adds a sign bit and |ω(level)| ≤ |ω(s)| bits."""
    return (3 * (d + 1)) // 2 + d * (1 + int(elias_omega_length(s)))


def stream_bound_bytes(d: int, s: int) -> int:
    """Buffer bytes for the encoder: the bound, plus a spare 32-bit word (words are written whole)."""
    return (stream_bound_bits(d, s) + 7) // 8 + 4


def thm32_bound_bits(d: int, s: int, float_bits: int = 32) -> float:
    """QSGD Thm 3.2 without its o(1) term: (3 + 1.5·log₂(2(s² + d)/(s(s + √d))))·s(s + √d) + F,
    a bound on the *expected* bits of one message (no buckets)."""
    nnz = s * (s + math.sqrt(d))
    return (3.0 + 1.5 * math.log2(2.0 * (s * s + d) / nnz)) * nnz + float_bits


# ------------------------------------------------------------------------------------------------
# the QSGD methods for code=elias (called by hpcgc.compressors.qsgd.QSGD)
# ------------------------------------------------------------------------------------------------

def _flags(c) -> int:
    return c._flags | wire.FLAG_ELIAS


def compress(c, x: np.ndarray, seed: np.uint64) -> np.ndarray:
    """The code=elias payload of x: scales as ``code=fixed``, then the Elias stream written into
    an upper-bound buffer (pages never touched are never faulted in) and copied out at its exact
    length."""
    d = x.shape[0]
    b = c.bucket_size(d)
    m = n_blocks(d, b)
    buf, scales, offset = c._compress_blocks(x, b, m, m * c._scale_bytes + stream_bound_bytes(d, c.s),
                                             "bucket")
    nbytes, _ = qsgd_elias_encode(x, b, scales, c.s, seed, buf, offset)
    payload = buf[:offset + nbytes].copy()
    payload[1] = _flags(c)
    return payload


def _checked(c, payload: np.ndarray, d: int) -> tuple[np.ndarray, int, int]:
    """Check header and bucket norms; return (scales, bucket size, stream offset)."""
    b = c.bucket_size(d)
    m = n_blocks(d, b)
    offset = wire.HEADER_BYTES + m * c._scale_bytes
    wire.check_header(payload, c.name, c.FORMAT_ID, _flags(c), c._fingerprint, d, offset, exact=False)
    scales = wire.read_scales(payload, wire.HEADER_BYTES, m, c._fp64)
    if not np.isfinite(scales).all() or (scales < 0).any():
        raise PayloadError(f"{c.name}: corrupted payload: invalid bucket norm")
    return scales, b, offset


def _parse(c, payload, d, scales, b, offset, out, weight, mode) -> tuple[int, int]:
    count, bits = qsgd_elias_parse(payload, offset, payload.size, d, c.s, b, scales, out, weight, mode)
    if count < 0:
        raise PayloadError(f"{c.name}: corrupted payload: {_MESSAGES[int(count)]}")
    return int(count), int(bits)


_NO_OUT = np.zeros(0)


def model_bits(c, payload, d: int) -> int:
    """F·m + Σ_{level ≥ 1} (|ω(gap)| + 1 + |ω(level)|) of a valid payload."""
    payload = c._as_payload(payload, d)
    scales, b, offset = _checked(c, payload, d)
    _, bits = _parse(c, payload, d, scales, b, offset, _NO_OUT, 0.0, MODE_CHECK)
    return c._float_bits * scales.shape[0] + bits


def decompress(c, payload: np.ndarray, d: int) -> np.ndarray:
    scales, b, offset = _checked(c, payload, d)
    out = np.zeros(d)
    _parse(c, payload, d, scales, b, offset, out, 1.0, MODE_WRITE)
    return out


def decompress_add(c, payload: np.ndarray, d: int, out: np.ndarray, weight: float) -> None:
    scales, b, offset = _checked(c, payload, d)
    _parse(c, payload, d, scales, b, offset, out, weight, MODE_CHECK)      # out untouched on error
    _parse(c, payload, d, scales, b, offset, out, weight, MODE_ADD)
