"""``quant``: DIANA's p-quantization Quant_p with blocks; ``terngrad``: the p = ∞ case.

Mishchenko, Gorbunov, Takáč, Richtárik, *Distributed Learning with Compressed Gradient
Differences*, arXiv 1901.09269 (2019). For each block Δ(l) (size ≤ b)

    Quant_p(Δ(l)) = ‖Δ(l)‖_p · sign(Δ(l)) ∘ ξ(l),   ξ_j ~ Bernoulli(|Δ_j| / ‖Δ(l)‖_p) independent,

so every entry becomes one of {−‖Δ(l)‖_p, 0, +‖Δ(l)‖_p}. Unbiased, with
E‖Quant_p(Δ) − Δ‖² = ‖Δ‖₁‖Δ‖_p − ‖Δ‖₂² per block, hence ω = √b − 1 (p = 2, tight on a flat
block) and ω = (√b − 1)/2 (p = ∞, tight on (1, 1/(√b+1), …)), b = min(block, d)
(`spec/diana.md` B.4). ``‖Δ(l)‖_p`` is the norm as sent (float32 rounded up by default), so the
probabilities never exceed 1; they are drawn in 32-bit fixed point (:func:`.kernels.prng.uniforms32`), so
the operator is unbiased up to 2^-33 of the block norm per entry.

TernGrad (Wen, Xu, Yan, Wu, Wang, Chen, Li, *TernGrad: Ternary Gradients to Reduce Communication in
Distributed Deep Learning*, NeurIPS 2017) is Quant_∞ (Natural Compression paper §3.1: TernGrad =
D^{∞,1}_sta); ``terngrad`` uses one block for the whole vector by default (its per-layer scalers
correspond to ``block`` = layer size; its clipping and scaler sharing are not implemented).

Wire format (after the 8-byte header): m block norms (float32, or float64 with ``fp64=true``),
then d trits (0: zero, 1: +norm, 2: −norm) packed 5 per byte, ⌈d/5⌉ bytes, group-planar
(:func:`.kernels.trits.pack_trits`).
Model bits: F·m + ⌈d·log₂3⌉ (`spec/diana.md` B.9, packed ternary).
"""
from __future__ import annotations

import math

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core.extending import intrinsic

from ..errors import PayloadError
from .base import Compressor
from .kernels import simd, trits, wire
from .kernels.norms import checked_scales, n_blocks
from .kernels.prng import TWO32, uniforms32
from .kernels.trits import TRIT_GROUP, TRITS_PER_BYTE, count_bad_trit_bytes, pack_trits, unpack_trits
from .kernels.wire import CHUNK
from .params import FP64_PARAM, Param


@njit(cache=True, inline="always")
def ternary_dither(x, u, trits, start, n, inv32):
    """trits[q] = ξ·(1 + [x_q < 0]) for q = start … start + n − 1 (uint64; x, u, trits are one
    chunk), ξ = [u_q < round(|x_q|·inv32)] ~ Bernoulli(|x_q|/scale) with inv32 = 2^32/scale and
    u uniform 32-bit integers (:func:`.kernels.prng.uniforms32`): P[ξ = 1] is |x_q|/scale rounded to 32
    fractional bits. Inlined into the chunk loop, unsigned indices: see ``docs/compressors.md``,
    Kernel notes. With y = |x_q|·inv32 + 0.5 and R = ⌊y⌋, u_q < R ⇔ u_q + 1 ≤ y for the integer
    u_q, exact in float64: no float → int64 conversion (which AVX2 lacks)."""
    for t in range(n):
        q = start + t
        v = np.float64(x[q])
        xi = np.float64(u[q]) + 1.0 <= abs(v) * inv32 + 0.5     # u_q < R ⇔ u_q + 1 ≤ y (below)
        trits[q] = np.uint8(xi) + np.uint8(xi & (v < 0.0))


@njit(cache=True)
def ternary_dither_pack(x, block, scales, seed, out, offset):
    """Quant_p dithering of x with per-block scales, packed 5 trits per byte into ``out[offset:]``
    (⌈d/5⌉ bytes); trit 0: zero, 1: +scale, 2: −scale."""
    d = x.shape[0]
    trits = np.empty(min(CHUNK, d), dtype=np.uint8)
    u = np.empty(min(CHUNK, d), dtype=np.uint32)
    for c0 in range(0, d, CHUNK):
        c1 = min(c0 + CHUNK, d)
        uniforms32(seed, c0, u[:c1 - c0])
        xc = x[c0:c1]
        i = c0
        l = c0 // block                   # then l += 1: no division per block
        while i < c1:                       # the blocks that intersect this chunk
            e = min((l + 1) * block, c1)
            sc = scales[l]
            ternary_dither(xc, u, trits, np.uint64(i - c0), np.uint64(e - i), TWO32 / sc if sc > 0.0 else 0.0)
            i = e
            l += 1
        pack_trits(trits[:c1 - c0], out, offset + c0 // TRITS_PER_BYTE)


@njit(cache=True, inline="always")
def ternary_values(trits, out, start, n, u, weight, accumulate):
    """out[q] (+)= weight·u·(0, +1, −1)[trits[q]] for q = start … start + n − 1 (uint64; trits and
    out are one chunk)."""
    wu = weight * u if accumulate else u
    for t in range(n):
        q = start + t
        tt = np.int64(trits[q])
        if accumulate:
            out[q] += wu * ((tt & 1) - (tt >> 1))
        else:
            out[q] = wu * ((tt & 1) - (tt >> 1))


_BYTES = ir.VectorType(ir.IntType(8), simd.LANES)


@intrinsic
def ternary_row(typingctx, out, ooff, run, src, soff, u0, u1, u2, u3, u4, accumulate):
    """Fused decode of LANES bytes of a full trit group (:func:`.kernels.trits.pack_trits`) at
    ``src[soff:]``: their 5·LANES trits go to the five runs ``out[ooff + k·run:][:LANES]``,
    k = 0 … 4, as u_k·(0, +1, −1)[trit] (added when ``accumulate``). Digits by multiply-shift
    (:func:`.kernels.trits.trit_digits`), all in vector registers."""
    simd.check_f64_out(out)
    f64 = types.float64
    sig = types.void(out, ooff, run, src, soff, f64, f64, f64, f64, f64, accumulate)

    def codegen(context, builder, sig, args):
        i32row = ir.VectorType(ir.IntType(32), simd.LANES)
        b = builder.zext(builder.load(simd.row_ptr(context, builder, sig.args[3], args[3], args[4], _BYTES),
                                      align=1), i32row)
        c171, c9, c3 = (simd.splat_i(builder, i32row, v) for v in (171, 9, 3))
        one, two = simd.splat_i(builder, i32row, 1), simd.splat_i(builder, i32row, 2)
        flag = context.cast(builder, args[10], sig.args[10], types.boolean)
        run = context.cast(builder, args[2], sig.args[2], types.int64)
        ooff = context.cast(builder, args[1], sig.args[1], types.int64)
        for k in range(5):
            if k < 4:
                q = builder.lshr(builder.mul(b, c171), c9)            # b // 3
                t = builder.sub(b, builder.mul(q, c3))
                b = q
            else:
                t = builder.select(builder.icmp_unsigned(">", b, two), two, b)
            v = builder.sub(builder.and_(t, one), builder.lshr(t, one))
            v = builder.fmul(builder.sitofp(v, simd.F64ROW), simd.splat_f64(builder, args[5 + k]))
            off = builder.add(ooff, builder.mul(run, ir.Constant(ir.IntType(64), k)))
            simd.put_f64_row(context, builder, sig.args[0], args[0], off, v, flag)
        return context.get_dummy_value()

    return sig, codegen


@njit(cache=True)
def ternary_unpack_decode(src, offset, d, block, scales, out, weight, accumulate):
    """Decode d packed trits: value = (0, +scale_l, −scale_l)[trit].

    ``accumulate``: out += weight·value, else out = value (weight ignored). The caller has
    checked that every byte is < 243. With one block, or blocks of 2^p ≥ LANES entries, the
    full trit groups are decoded LANES bytes at a time straight into ``out``
    (:func:`ternary_row`); the rest, and other block sizes, are unpacked a chunk at a time,
    then accumulated.
    """
    w = weight if accumulate else 1.0
    done = 0
    one = block >= d
    if one or (block >= simd.LANES and block & (block - 1) == 0):
        p = 0 if one else int(np.log2(block))      # block index of entry j: j >> p
        done = (d // TRIT_GROUP) * TRIT_GROUP
        run = TRIT_GROUP // TRITS_PER_BYTE
        for g0 in range(0, done, TRIT_GROUP):
            for r in range(0, run, simd.LANES):
                j = g0 + r
                if one:
                    u0 = u1 = u2 = u3 = u4 = scales[0] * w
                else:
                    u0 = scales[j >> p] * w
                    u1 = scales[(j + run) >> p] * w
                    u2 = scales[(j + 2 * run) >> p] * w
                    u3 = scales[(j + 3 * run) >> p] * w
                    u4 = scales[(j + 4 * run) >> p] * w
                ternary_row(out, j, run, src, offset + g0 // TRITS_PER_BYTE + r, u0, u1, u2, u3, u4, accumulate)
    trits = np.empty(min(CHUNK, d - done), dtype=np.uint8)
    for c0 in range(done, d, CHUNK):
        c1 = min(c0 + CHUNK, d)
        unpack_trits(src, offset + c0 // TRITS_PER_BYTE, trits[:c1 - c0])
        oc = out[c0:c1]
        i = c0
        l = c0 // block                   # then l += 1: no division per block
        while i < c1:
            e = min((l + 1) * block, c1)
            ternary_values(trits, oc, np.uint64(i - c0), np.uint64(e - i), scales[l], weight, accumulate)
            i = e
            l += 1


BAD_TRITS = 2
"""What :func:`quant_checked_decode` returns for a byte ≥ 243 or non-zero padding trits (besides
:func:`.kernels.norms.checked_scales`' BAD_SCALE and BAD_HEADER)."""


@njit(cache=True)
def quant_checked_decode(src, head, length, m, fp64, d, block, out, weight):
    """Check a quant payload — length and header, the m block norms (:func:`.kernels.norms.checked_scales`),
    every trit byte < 243, zero padding trits after entry d — and only then add it into ``out``,
    out += weight·value (:func:`ternary_unpack_decode`); returns 0, or the first failed check's
    status with ``out`` untouched (the caller's :meth:`Quant._scales` then names it): the checks
    and the decode of :meth:`Quant._decompress_add` in one call."""
    bad, scales, offset = checked_scales(src, head, length, m, fp64)
    if bad != 0:
        return bad
    nbytes = (d + TRITS_PER_BYTE - 1) // TRITS_PER_BYTE
    if count_bad_trit_bytes(src, offset, nbytes):
        return BAD_TRITS
    tail = d % TRITS_PER_BYTE
    if tail and src[offset + nbytes - 1] >= 3**tail:
        return BAD_TRITS
    ternary_unpack_decode(src, offset, d, block, scales, out, weight, True)
    return 0


@njit(cache=True)
def quant_add_many(buf, starts, lengths, weights, out, head, length, m, fp64, d, block):
    """:func:`quant_checked_decode` of the payloads ``buf[starts[j]:starts[j] + lengths[j]]`` with
    ``weights[j]``, j = 0, 1, … in order (``Prepared.add_many``); returns the number added (it stops
    at the first invalid payload, nothing of that one added)."""
    for j in range(starts.shape[0]):
        a = starts[j]
        if quant_checked_decode(buf[a:a + lengths[j]], head, length, m, fp64, d, block, out, weights[j]) != 0:
            return j
    return starts.shape[0]


class Quant(Compressor):
    """DIANA's block p-quantization Quant_p, p ∈ {2, ∞} (Mishchenko et al. 2019): ternary
    {−‖Δ(l)‖_p, 0, +‖Δ(l)‖_p} per block; ω = √b − 1 (p = 2) or (√b − 1)/2 (p = ∞)."""
    collectives = ("gather", "allgather", "reduce-scatter")
    segment_wise = True

    name = "quant"
    description = ("DIANA block p-quantization Quant_p, ternary per block (Mishchenko et al. 2019); "
                   "omega = sqrt(b)-1 (p=2), (sqrt(b)-1)/2 (p=inf), b = min(block, d); "
                   "bits F*m + ceil(d*log2(3))")
    PARAMS = (
        Param("p", float, 2, choices=(2, math.inf), doc="norm used for the scale"),
        Param("block", int, math.inf, low=1, allow_inf=True, doc="block size, inf = whole vector"),
        FP64_PARAM,
    )
    FORMAT_ID = 3
    BITS_BY_LENGTH = True          # model bits: a function of d and the payload's length
    unbiased = True

    def _init(self) -> None:
        self.p = self._params.get("p", math.inf)

    def block_size(self, d: int) -> int:
        """Effective block size b = min(block, d)."""
        b = self._params["block"]
        return d if b >= d else int(b)

    def omega(self, d: int) -> float:
        root = math.sqrt(self.block_size(d))
        return root - 1.0 if self.p == 2 else (root - 1.0) / 2.0

    def _body_bytes(self, d: int) -> tuple[int, int]:
        m = n_blocks(d, self.block_size(d))
        return m, m * self._scale_bytes + trits.trit_bytes(d)

    def model_bits(self, payload, d: int) -> int:
        m, body = self._body_bytes(d)
        self._check_payload(self._as_payload(payload, d), d, body)
        return self._float_bits * m + trits.ternary_bits(d)

    def _compress(self, x: np.ndarray, seed: np.uint64) -> np.ndarray:
        d = x.shape[0]
        b = self.block_size(d)
        m, body = self._body_bytes(d)
        payload, scales, offset = self._compress_blocks(x, b, m, body, "block")
        ternary_dither_pack(x, b, scales, seed, payload, offset)
        return payload

    def _scales(self, payload: np.ndarray, d: int) -> tuple[np.ndarray, int, int]:
        """Check the payload; return block scales, block size and trit offset."""
        m, body = self._body_bytes(d)
        self._check_payload(payload, d, body)
        scales = wire.read_scales(payload, wire.HEADER_BYTES, m, self._fp64)
        if not np.isfinite(scales).all() or (scales < 0).any():
            raise PayloadError(f"{self.name}: corrupted payload: invalid block norm")
        offset = wire.HEADER_BYTES + m * self._scale_bytes
        nbytes = trits.trit_bytes(d)
        if count_bad_trit_bytes(payload, offset, nbytes):
            raise PayloadError(f"{self.name}: corrupted payload: byte value >= 243 in the trit stream")
        tail = d % TRITS_PER_BYTE
        if tail and payload[offset + nbytes - 1] >= 3**tail:
            raise PayloadError(f"{self.name}: corrupted payload: nonzero padding trits after entry {d}")
        return scales, self.block_size(d), offset

    def _decompress(self, payload: np.ndarray, d: int) -> np.ndarray:
        scales, b, offset = self._scales(payload, d)
        out = np.empty(d)
        ternary_unpack_decode(payload, offset, d, b, scales, out, 1.0, False)
        return out

    def _decompress_add(self, payload: np.ndarray, d: int, out: np.ndarray, weight: float) -> None:
        self._codec_at(d)[1](payload, out, weight)

    def _make_codec(self, d: int) -> tuple:
        """The encoder, and an ``add`` that checks and decodes in one kernel call
        (:func:`quant_checked_decode`; :meth:`_scales` names a failed check)."""
        m, body = self._body_bytes(d)
        head, n, b, fp64 = self._header_array(d), wire.HEADER_BYTES + body, self.block_size(d), self._fp64

        def add(payload, out, weight):
            if quant_checked_decode(payload, head, n, m, fp64, d, b, out, float(weight)) != 0:
                self._scales(payload, d)            # raises the failed check's message
                raise PayloadError(f"{self.name}: corrupted payload")
        return self._compress, add

    def _add_many_at(self, d: int):
        """``Prepared.add_many``: :func:`quant_add_many` (the checks and decode of ``add``, per payload)."""
        m, body = self._body_bytes(d)
        head, n, b, fp64 = self._header_array(d), wire.HEADER_BYTES + body, self.block_size(d), self._fp64

        def add_many(buf, starts, lengths, weights, out):
            return quant_add_many(buf, starts, lengths, weights, out, head, n, m, fp64, d, b)
        return add_many


class TernGrad(Quant):
    """TernGrad (Wen et al. 2017) = Quant_∞: one block (the whole vector) by default;
    ω = (√b − 1)/2."""

    name = "terngrad"
    description = ("TernGrad ternary quantization = Quant_inf (Wen et al. 2017), one block by default; "
                   "omega = (sqrt(b)-1)/2, b = min(block, d); bits F*m + ceil(d*log2(3))")
    PARAMS = (
        Param("block", int, math.inf, low=1, allow_inf=True,
              doc="block size (e.g. layer size), inf = whole vector"),
        FP64_PARAM,
    )
