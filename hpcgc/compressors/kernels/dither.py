"""The bucketed dithering kernels of ``qsgd`` and ``natural-dither``, and QSGD's rounding rule.

A dithering rule turns SUB entries (their float64 values, their uniform 32-bit integers from
:func:`.prng.uniforms32` and their bucket's scale) into SUB fields ``level << 1 | sign``, in
LLVM IR with ``<SUB x i32>`` lanes (:class:`.simd.RowFields`, registered per compressor). Two
drivers run any registered rule over a vector, a row of :data:`.simd.LANES` entries at a time:

* :func:`dither_pack` quantizes and packs in one step (:func:`.simd.pack_row`): each row's
  fields are shifted straight into the words of the blocked layout (:func:`.wire.pack_fields`),
  never stored;
* :func:`dither_fields` stores the fields of one chunk (``qsgd``'s Elias code, the last chunk,
  buckets that are not a multiple of LANES).

Both give the same fields for the same seed (the uniforms of a chunk come from
:func:`.prng.uniforms32` from its first entry, as before this module had rows), so the fixed and
the Elias code of ``qsgd`` dither alike.

QSGD's rule (Alistarh et al., *QSGD*, NeurIPS 2017, Lemma 3.1): for a bucket v and
r = s·|v_i|/‖v‖, level_i = ⌊r⌋ + [u_i < frac(r)], capped at s; here in 32-bit fixed point,
level = ⌊(R + u)/2^32⌋ with R = ⌊|v_i|·2^32·s/‖v‖ + 0.5⌋ and u uniform on [0, 2^32).
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import literally, njit

from . import simd
from .norms import OK, write_scales
from .prng import TWO32, uniforms32
from .simd import LANES, fields_row, pack_row, row_param
from .wire import CHUNK, FIELD_BLOCK, pack_fields, row_words

SMALL_S = 1 << 19
"""Below this many levels QSGD's rule forms R = ⌊y⌋ < 2^52 with the 2^52 trick (kind
:data:`QSGD`); from SMALL_S on, with two floors (kind :data:`QSGD_WIDE`)."""
QSGD = 2
"""QSGD's rule for s < SMALL_S in ``simd.ROW_FIELDS`` (qsgd's FORMAT_ID)."""
QSGD_WIDE = 2 + 256
"""QSGD's rule for any s (not a format id: the same wire format as :data:`QSGD`)."""

_F64 = ir.DoubleType()
_I32 = ir.IntType(32)
_I64 = ir.IntType(64)


def _f64(v):
    return ir.Constant(_F64, v)


def _qsgd_param(builder, scale, s):
    """2^32·s/scale (0 for a zero scale): |v|·param = r·2^32."""
    q = builder.fdiv(builder.fmul(_f64(TWO32), builder.sitofp(s, _F64)), scale)
    return builder.select(builder.fcmp_ordered(">", scale, _f64(0.0)), q, _f64(0.0))


def _qsgd_y(builder, v, scale32):
    """y = |v|·scale32 + 0.5 (R = ⌊y⌋ = r·2^32 rounded to nearest, ties up)."""
    vt = v.type
    y = builder.fmul(simd.vector_call(builder, "llvm.fabs", v), simd.splat_sub(builder, scale32, vt))
    return builder.fadd(y, simd.splat_i(builder, vt, 0.5))


def _qsgd_levels(builder, v, u, hi1, lo, s):
    """The fields from R's high part plus one, ⌊R/2^32⌋ + 1 (``hi1``), and its low 32 bits
    (``lo``): level = ⌊R/2^32⌋ + [lo + u ≥ 2^32] (the carry of a 32-bit add) = hi1 − [u ≤ ~lo],
    capped at s; sign only for level > 0."""
    it = u.type
    no_carry = builder.icmp_unsigned("<=", u, builder.xor(lo, simd.splat_i(builder, it, -1)))
    lev = builder.add(hi1, builder.sext(no_carry, it))
    s32 = simd.splat_sub(builder, builder.trunc(s, _I32), it)
    lev = builder.select(builder.icmp_unsigned("<", lev, s32), lev, s32)
    neg = builder.fcmp_ordered("<", v, simd.splat_i(builder, v.type, 0.0))
    nz = builder.icmp_unsigned("!=", lev, simd.splat_i(builder, it, 0))
    return builder.or_(builder.shl(lev, simd.splat_i(builder, it, 1)), builder.zext(builder.and_(neg, nz), it))


def _qsgd_fields(builder, v, u, scale32, s):
    """QSGD's fields for s < SMALL_S: y ≤ s·2^32 + 1 < 2^52, so ⌊y⌋ + 2^52 is exact and its
    float64 bits are 2^52's exponent with R as the mantissa — and ⌊y⌋ + 2^52 + 2^32 (< 2^53, also
    exact) has R + 2^32: its low word is R's low 32 bits, the high word's low 20 bits are
    ⌊R/2^32⌋ + 1 ≤ s + 1 (no float → int64 conversion, which AVX2 lacks)."""
    n = u.type.count
    i64v = ir.VectorType(_I64, n)
    y = _qsgd_y(builder, v, scale32)
    t = builder.fadd(simd.vector_call(builder, "llvm.floor", y), simd.splat_i(builder, y.type, 2.0**52 + TWO32))
    bits = builder.bitcast(t, i64v)
    lo = builder.trunc(bits, u.type)
    hi = builder.trunc(builder.lshr(bits, simd.splat_i(builder, i64v, 32)), u.type)
    hi = builder.and_(hi, simd.splat_i(builder, u.type, (1 << 20) - 1))
    return _qsgd_levels(builder, v, u, hi, lo, s)


def _qsgd_fields_wide(builder, v, u, scale32, s):
    """QSGD's fields for any s < 2^31 (y < 2^63): ⌊R/2^32⌋ = ⌊y·2^-32⌋ and R mod 2^32 =
    ⌊y⌋ − ⌊y·2^-32⌋·2^32, both exact in float64, converted to 32-bit integers."""
    ft = v.type
    y = _qsgd_y(builder, v, scale32)
    yh = simd.vector_call(builder, "llvm.floor", builder.fmul(y, simd.splat_i(builder, ft, 2.0**-32)))
    hi = builder.add(builder.fptosi(yh, u.type), simd.splat_i(builder, u.type, 1))   # ≤ s + 1 < 2^31
    lo = builder.fsub(simd.vector_call(builder, "llvm.floor", y), builder.fmul(yh, simd.splat_i(builder, ft, TWO32)))
    lo = builder.fptosi(builder.fsub(lo, simd.splat_i(builder, ft, 2.0**31)), u.type)   # lo − 2^31 fits i32
    lo = builder.xor(lo, simd.splat_i(builder, u.type, -(1 << 31)))
    return _qsgd_levels(builder, v, u, hi, lo, s)


simd.register_row_fields(QSGD, _qsgd_param, _qsgd_fields)
simd.register_row_fields(QSGD_WIDE, _qsgd_param, _qsgd_fields_wide)


@njit(cache=True)
def dither_fields(x, c0, c1, bucket, scales, b, seed, fields, u, kind):
    """fields[q] = the field of entry c0 + q of x (c0 ≤ c0 + q < c1, one chunk: c0 a multiple of
    CHUNK, c1 − c0 ≤ CHUNK) under ``kind``'s rule, bucket l of size ``bucket`` scaled by
    scales[l]; the uniforms are :func:`.prng.uniforms32` from c0, in the scratch ``u`` (CHUNK
    entries). Rows inside one bucket are one :func:`.simd.fields_row`; a row that straddles
    buckets, or the last partial row, is computed once per bucket it meets on a padded copy."""
    literally(kind)
    m = c1 - c0
    uniforms32(seed, c0, u[:m])
    xrow = np.zeros(LANES)                       # float64: exact for float32 x as well
    frow = np.empty(LANES, dtype=np.uint32)
    l = c0 // bucket
    nextb = (l + 1) * bucket                    # first entry of bucket l + 1
    p = row_param(scales[l], b, kind)
    for r in range(0, m, LANES):
        p0 = c0 + r
        if p0 >= nextb:
            while p0 >= nextb:
                l += 1
                nextb += bucket
            p = row_param(scales[l], b, kind)
        n = min(LANES, m - r)
        if n == LANES and p0 + LANES <= nextb:
            fields_row(fields, r, x, p0, u, r, p, b, kind)
            continue
        for t in range(n):
            xrow[t] = x[p0 + t]
        q = 0
        while True:                              # once per bucket the row meets
            e = min(nextb - p0, n)
            fields_row(frow, 0, xrow, 0, u, r, p, b, kind)
            for t in range(q, e):
                fields[r + t] = frow[t]
            q = e
            if q >= n:
                break
            l += 1
            nextb += bucket
            p = row_param(scales[l], b, kind)


@njit(cache=True)
def dither_pack(x, bucket, scales, b, width, seed, out, offset, kind):
    """Dither x (bucket l of size ``bucket`` scaled by scales[l]) under ``kind``'s rule and pack
    the fields at ``width`` bits into ``out[offset:]`` (the layout of :func:`.wire.pack_fields`).

    The chunks made of full blocks (every chunk but the last, when each row lies in one bucket:
    bucket ≥ d or a multiple of LANES) are quantized and packed row by row
    (:func:`.simd.pack_row`); the rest goes through :func:`dither_fields` and
    :func:`.wire.pack_fields`. Same bytes either way."""
    literally(kind)
    d = x.shape[0]
    if d == 0:
        return
    rows = min(CHUNK, -(-d // LANES) * LANES)    # whole rows of LANES (fields_row reads u by rows)
    u = np.empty(rows, dtype=np.uint32)          # d ≥ CHUNK whenever a full chunk is used: rows = CHUNK
    full = (d // CHUNK) * CHUNK if bucket >= d or bucket % LANES == 0 else 0
    wpl = width * LANES                          # words per block
    words = out[offset:offset + (full * width) // 8].view(np.uint32)
    rk = np.empty(32, dtype=np.int64)           # row i of a block: its first word row (·LANES),
    rn = np.empty(32, dtype=np.int64)           # the next one if it straddles (else < 0), its shift
    rs = np.empty(32, dtype=np.int64)
    for i in range(32):
        k, sh, nxt = row_words(i, width)
        rk[i] = k * LANES
        rn[i] = nxt * LANES if nxt >= 0 else -(1 << 62)
        rs[i] = sh
    l = 0
    nextb = bucket
    p = row_param(scales[0], b, kind)
    for c0 in range(0, full, CHUNK):
        uniforms32(seed, c0, u)
        for blk in range(c0 // FIELD_BLOCK, (c0 + CHUNK) // FIELD_BLOCK):
            wb = blk * wpl
            pos = blk * FIELD_BLOCK
            for i in range(32):
                if pos >= nextb:                 # rows never straddle buckets here
                    while pos >= nextb:
                        l += 1
                        nextb += bucket
                    p = row_param(scales[l], b, kind)
                pack_row(words, wb + rk[i], wb + rn[i], rs[i], x, pos, u, pos - c0, p, b, kind)
                pos += LANES
    if full < d:
        fields = np.empty(min(CHUNK, -(-(d - full) // LANES) * LANES), dtype=np.uint32)
        for c0 in range(full, d, CHUNK):
            c1 = min(c0 + CHUNK, d)
            dither_fields(x, c0, c1, bucket, scales, b, seed, fields, u, kind)
            pack_fields(fields[:c1 - c0], width, out, offset + (c0 * width) // 8)


@njit(cache=True)
def qsgd_fields(x, c0, c1, bucket, scales, s, seed, fields, u):
    """QSGD's fields of one chunk (:func:`dither_fields` with the rule for this s); used by
    both level codes, so they decode to the same vector."""
    if s < SMALL_S:
        dither_fields(x, c0, c1, bucket, scales, s, seed, fields, u, QSGD)
    else:
        dither_fields(x, c0, c1, bucket, scales, s, seed, fields, u, QSGD_WIDE)


@njit(cache=True)
def qsgd_pack(x, bucket, scales, s, width, seed, out, offset):
    """QSGD dithering of x with per-bucket scales, packed at ``width`` bits into ``out[offset:]``
    (:func:`dither_pack` with the rule for this s)."""
    if s < SMALL_S:
        dither_pack(x, bucket, scales, s, width, seed, out, offset, QSGD)
    else:
        dither_pack(x, bucket, scales, s, width, seed, out, offset, QSGD_WIDE)


@njit(cache=True)
def qsgd_encode(x, bucket, norms, l2, s, width, seed, fp64, head, payload):
    """A whole fixed-width qsgd payload in one call, into ``payload``: :func:`.norms.write_scales`
    (header, bucket norms rounded up to the wire's scales) then :func:`qsgd_pack` of the fields
    after them. Returns the status of :func:`.norms.write_scales` (no fields written unless OK)."""
    status = write_scales(x, bucket, norms, l2, fp64, head, payload)
    if status == OK:
        qsgd_pack(x, bucket, norms, s, width, seed, payload, head.shape[0] + norms.shape[0] * (8 if fp64 else 4))
    return status
