"""Natural dithering ``natural-dither`` D^{p,s}_nat.

Horváth, Ho, Horváth, Sahu, Canini, Richtárik, *Natural Compression for Distributed Deep
Learning*, MSML 2022 (arXiv 1905.10988): Thm 7 and Table 1; `spec/compressors.md` Part C.
C_nat itself (``natural``, ``natural-randk``) is :mod:`.natural`.

**natural dithering** D^{p,s}_nat: per bucket (the whole vector by default), r = |x_j|/‖x‖_p ∈
[0, 1] is rounded unbiasedly to one of the levels 0, 2^{1−s}, 2^{2−s}, …, 1/2, 1 (the two
neighbours of r), i.e. C_nat inside [2^{1−s}, 1] and standard dithering between 0 and 2^{1−s}.
ω = 1/8 + b^{1/r}·2^{1−s}·min{1, b^{1/r}·2^{1−s}}, r = min(p, 2) (Thm 7; for p ∈ {2, ∞} r = 2 and
Thm 7 and Table 1 agree). Wire: m bucket norms (float32 rounded up, or float64), then d fields
of 1 + ⌈log₂(s+1)⌉ bits (level index l ∈ 0…s, value 2^{l−s}, 0 for l = 0; field = l << 1 | sign),
as ``qsgd``. Model bits F·m + d·(1 + ⌈log₂(s+1)⌉) (the paper's Table 1 counts 31 + d(2 + log₂s),
the same for s a power of two up to the norm's bit).
"""
from __future__ import annotations

import math

import numpy as np
from llvmlite import ir
from numba import njit

from ..errors import PayloadError
from .kernels import simd, wire
from .kernels.dither import dither_pack
from .kernels.norms import OK as SCALES_OK
from .kernels.norms import write_scales
from .params import FP64_PARAM, Param
from .qsgd import BucketDither

NDITHER_KIND = 11
"""natural-dither's dithering rule in ``simd.ROW_FIELDS`` and its field format in
``simd.ROW_VALUES`` (its FORMAT_ID)."""


def _natural_dither_param(builder, scale, s):
    """1/scale (0 for a zero scale): r = |x|·param ∈ [0, 1]."""
    f64 = ir.DoubleType()
    inv = builder.fdiv(ir.Constant(f64, 1.0), scale)
    return builder.select(builder.fcmp_ordered(">", scale, ir.Constant(f64, 0.0)), inv, ir.Constant(f64, 0.0))


def _natural_dither_fields(builder, v, u, inv, s):
    """IR of natural dithering's fields l << 1 | sign of SUB entries: r = |v|·inv ∈ [0, 1]
    rounded unbiasedly to the neighbouring levels of {0, 2^{1−s}, …, 1/2, 1}; level index l
    (value 2^{l−s}, 0 for l = 0). u: uniform 32-bit integers (:func:`.kernels.prng.uniforms32`).

    The rule (the wire contract, unchanged since the integer kernels): with 2^e ≤ r < 2^{e+1}
    and e + s ≥ 1, l = e + s + [u < up], up = ⌊(M + 2^19)/2^20⌋ for the 52-bit mantissa M of r
    (P[up] = M/2^52 to 32 bits, ties up), i.e. l = e + s + [u·2^20 + 2^19 ≤ M]; below the smallest
    non-zero level (r < 2^{1−s}), l = [u + 1 ≤ y] with y = fl(r·2^{s+31} + 0.5) (standard
    dithering on [0, 2^{1−s}], P[1] = r·2^{s−1} to 32 bits).

    Both cases run as the first: a small r is replaced by a surrogate t in the binade
    [2^{−s}, 2^{1−s}) (so e + s = 0) whose mantissa M_t makes the same test give its level.
    With G = 2^20·y = fl(r·2^{s+51} + 2^19) (the same rounding, scaled), u + 1 ≤ y ⇔
    (u + 1)·2^20 ≤ ⌊G⌋ ⇔ u·2^20 + 2^19 ≤ ⌊G⌋ − 2^19 =: M_t, and
    t = (⌊G⌋ + 2^52 − 2^19)·2^{−52−s} has exactly that mantissa (every step exact: ⌊G⌋ ≤
    2^52 + 2^19, and r·2^{s+51}, the sum and the power-of-two scaling are exact; the two affine
    steps are ``llvm.fmuladd``, the same rounding fused or not). When y = 2^32 + 1/2 (its largest
    value) t is 2^{1−s} itself: level 1 + [u·2^20 + 2^19 ≤ 0] = 1, as u + 1 ≤ y. r is small
    iff G < 2^52 + 2^19 (a constant: one register fewer), except the largest r below 2^{1−s},
    whose G is 2^52 + 2^19 (a tie, to even): r itself then gives 0 + [u·2^20 + 2^19 ≤ 2^52 − 1]
    = 1, as u + 1 ≤ y. So l = e_t + s + [u·2^20 + 2^19 ≤ M_t] for every lane, capped at s: no
    u → float64 conversion, one compare and no select of levels.

    The test in 32-bit lanes: with the high word of t, H = E·2^20 + (M_t's top 20 bits) (E its
    biased exponent, ≥ 1; 12 bits with the sign, as before), D = (top bits − u >> 12) − borrow,
    borrow = [lo < u << 20 | 2^19] = [lo ≤ u << 20 | (2^19 − 1)] (the low words' subtraction),
    the test is D ≥ 0, and (H − u >> 12 − borrow) >> 20 = E − [D < 0] (|D| < 2^20): the level is
    that shift minus 1022 − s, one unsigned compare, no equality test, no mask."""
    it, ft = u.type, v.type
    n = it.count
    f64, i64 = ir.DoubleType(), s.type

    def pow2(expo):                      # 2^expo (an i64 value) as a double, from its exponent bits
        return builder.bitcast(builder.shl(builder.add(expo, ir.Constant(i64, 1023)), ir.Constant(i64, 52)), f64)

    def splat(x):
        return simd.splat_sub(builder, x, ft)

    r = builder.fmul(simd.vector_call(builder, "llvm.fabs", v), splat(inv))
    # G = r·2^{s+51} + 2^19, t = ⌊G⌋·2^{−52−s} + (2^52 − 2^19)·2^{−52−s}: exact products, one rounding
    g = simd.vector_call(builder, "llvm.fmuladd", r, splat(pow2(builder.add(s, ir.Constant(i64, 51)))),
                         simd.splat_i(builder, ft, 2.0**19))
    down = pow2(builder.sub(ir.Constant(i64, -52), s))
    t = simd.vector_call(builder, "llvm.floor", g)
    t = simd.vector_call(builder, "llvm.fmuladd", t, splat(down),
                         splat(builder.fmul(ir.Constant(f64, 2.0**52 - 2.0**19), down)))
    small = builder.fcmp_ordered("<", g, simd.splat_i(builder, ft, 2.0**52 + 2.0**19))
    t = builder.select(small, t, r)
    words = builder.bitcast(t, ir.VectorType(ir.IntType(32), 2 * n))
    undef = ir.Constant(words.type, ir.Undefined)
    lo = builder.shuffle_vector(words, undef, ir.Constant(ir.VectorType(ir.IntType(32), n), list(range(0, 2 * n, 2))))
    hi = builder.shuffle_vector(words, undef, ir.Constant(ir.VectorType(ir.IntType(32), n), list(range(1, 2 * n, 2))))
    s32 = builder.trunc(s, ir.IntType(32))
    # (H − u >> 12 − borrow) >> 20 − (1022 − s) = e + s + [u·2^20 + 2^19 ≤ M_t] (see above)
    ulm = builder.or_(builder.shl(u, simd.splat_i(builder, it, 20)), simd.splat_i(builder, it, (1 << 19) - 1))
    hd = builder.add(builder.sub(hi, builder.lshr(u, simd.splat_i(builder, it, 12))),
                     builder.sext(builder.icmp_unsigned("<=", lo, ulm), it))
    lev = builder.sub(builder.lshr(hd, simd.splat_i(builder, it, 20)),
                      simd.splat_sub(builder, builder.sub(ir.Constant(ir.IntType(32), 1022), s32), it))
    sv = simd.splat_sub(builder, s32, it)
    lev = builder.select(builder.icmp_signed("<", lev, sv), lev, sv)   # r = 1 (or above) stays at the top
    neg = builder.fcmp_ordered("<", v, simd.splat_i(builder, ft, 0.0))
    nz = builder.icmp_unsigned("!=", lev, simd.splat_i(builder, it, 0))
    return builder.or_(builder.shl(lev, simd.splat_i(builder, it, 1)), builder.zext(builder.and_(neg, nz), it))


simd.register_row_fields(NDITHER_KIND, _natural_dither_param, _natural_dither_fields)


@njit(cache=True)
def natural_dither_pack(x, bucket, scales, s, width, seed, out, offset):
    """Natural dithering of x with per-bucket scales, fields packed at ``width`` bits
    (:func:`.kernels.dither.dither_pack` with the rule above)."""
    dither_pack(x, bucket, scales, s, width, seed, out, offset, NDITHER_KIND)


@njit(cache=True)
def natural_dither_encode(x, bucket, norms, l2, s, width, seed, fp64, head, payload):
    """A whole natural-dither payload in one call (:func:`.kernels.dither.qsgd_encode`'s shape:
    :func:`.kernels.norms.write_scales`, then :func:`natural_dither_pack`)."""
    status = write_scales(x, bucket, norms, l2, fp64, head, payload)
    if status == SCALES_OK:
        natural_dither_pack(x, bucket, norms, s, width, seed, payload,
                            head.shape[0] + norms.shape[0] * (8 if fp64 else 4))
    return status


def _natural_dither_row_values(builder, f, sc, s):
    """IR of the natural-dither values of one row of fields (l << 1 | sign): ±sc·2^{l−s}, built
    from the float64 bits ((l − s + 1023) << 52) | (sign << 63), zero where l = 0 (no table)."""
    i64row = ir.VectorType(ir.IntType(64), f.type.count)
    one = simd.splat_i(builder, f.type, 1)
    lev = builder.zext(builder.lshr(f, one), i64row)
    sign = builder.zext(builder.and_(f, one), i64row)
    sv = builder.insert_element(ir.Constant(i64row, ir.Undefined), s, ir.Constant(ir.IntType(32), 0))
    sv = builder.shuffle_vector(sv, ir.Constant(i64row, ir.Undefined),
                                ir.Constant(ir.VectorType(ir.IntType(32), f.type.count), None))
    expo = builder.add(builder.sub(lev, sv), simd.splat_i(builder, i64row, 1023))
    bits = builder.or_(builder.shl(expo, simd.splat_i(builder, i64row, 52)),
                       builder.shl(sign, simd.splat_i(builder, i64row, 63)))
    nonzero = builder.icmp_unsigned("!=", lev, simd.splat_i(builder, i64row, 0))
    bits = builder.select(nonzero, bits, simd.splat_i(builder, i64row, 0))
    return builder.fmul(builder.bitcast(bits, simd.F64ROW), simd.splat_f64(builder, sc))


class NaturalDither(BucketDither):
    """Natural dithering D^{p,s}_nat (Horváth et al. 2022): levels 0, 2^{1−s}, …, 1/2, 1 of the
    bucket norm; ω = 1/8 + √b·2^{1−s}·min{1, √b·2^{1−s}}."""
    collectives = ("gather", "allgather", "reduce-scatter")
    segment_wise = True

    name = "natural-dither"
    description = ("natural dithering D^{p,s}_nat: levels 0, 2^(1-s), ..., 1/2, 1 of the l_p bucket "
                   "norm (Horvath et al. 2022); omega = 1/8 + sqrt(b)2^(1-s)min(1, sqrt(b)2^(1-s)); "
                   "bits F*m + d*(1+ceil(log2(s+1)))")
    PARAMS = (
        Param("s", int, 8, low=1, high=62, doc="number of non-zero levels 2^(1-s), ..., 1"),
        Param("p", float, 2, choices=(2, math.inf), doc="norm used for the scale"),
        Param("bucket", int, 0, low=0, doc="bucket size, 0 = whole vector"),
        FP64_PARAM,
    )
    FORMAT_ID = 11
    unbiased = True

    _encode = staticmethod(natural_dither_encode)

    def omega(self, d: int) -> float:
        t = math.sqrt(self.bucket_size(d)) * 2.0 ** (1 - self.s)     # b^{1/r}·2^{1−s}, r = 2
        return 0.125 + t * min(1.0, t)

    def _scales(self, payload: np.ndarray, d: int):
        scales, offset = self._checked_scales(payload, d, "level index")
        tail = (d * self._width) % 8
        if tail and payload[-1] >> tail:
            raise PayloadError(f"{self.name}: corrupted payload: non-zero padding bits")
        return scales, self.bucket_size(d), offset

    def _decompress(self, payload: np.ndarray, d: int) -> np.ndarray:
        scales, b, offset = self._scales(payload, d)
        out = np.empty(d)
        natural_dither_decode(payload, offset, d, b, scales, self.s, self._width, out, 1.0, False)
        return out

    def _decompress_add(self, payload: np.ndarray, d: int, out: np.ndarray, weight: float) -> None:
        scales, b, offset = self._scales(payload, d)
        natural_dither_decode(payload, offset, d, b, scales, self.s, self._width, out, weight, True)


simd.register_row_values(NDITHER_KIND, _natural_dither_row_values)


@njit(cache=True)
def natural_dither_decode(src, offset, d, bucket, scales, s, width, out, weight, accumulate):
    """Decode d fields, value = ±scale_bucket·2^{l−s} (0 for l = 0) (:func:`.kernels.wire.blocked_decode`;
    ``accumulate``: out += weight·value)."""
    wire.blocked_decode(src, offset, d, bucket, scales, s, width, out, weight, accumulate, NDITHER_KIND)
