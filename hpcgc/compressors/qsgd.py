"""``qsgd``: random dithering with s levels (QSGD), ℓ2 or ℓ∞ scale, optionally per bucket.

Alistarh, Grubic, Li, Tomioka, Vojnovic, *QSGD: Communication-Efficient SGD via Gradient
Quantization and Encoding*, NeurIPS 2017 (Lemma 3.1). For a bucket v (the whole vector by default)

    Q_s(v)_i = ‖v‖₂ · sgn(v_i) · ξ_i,   ξ_i ∈ {l/s, (l+1)/s},   P[ξ_i = (l+1)/s] = s|v_i|/‖v‖₂ − l,

with l = ⌊s|v_i|/‖v‖₂⌋, so E Q_s(v) = v and E‖Q_s(v) − v‖² ≤ min(b/s², √b/s)·‖v‖² for bucket size b.
``‖v‖₂`` is the norm *as sent* (float32 rounded up by default), so every probability is ≤ 1. The
rounding up is drawn with 32-bit fixed-point probabilities (:func:`.kernels.prng.uniforms32`): the
operator is unbiased up to 2^-33 of a quantization step per entry. This is D^{2,s}_sta of the Natural Compression paper; with s = 1 it is
DIANA's Quant_2 (`quant:p=2`).

``p=inf`` scales by the bucket's max-norm instead (what QSGD's experiments do, and D^{∞,s}_sta of
the Natural Compression paper; with s = 1 it is TernGrad/Quant_∞). The same per-entry variance
unit²·f(1 − f) ≤ min(unit²/4, unit·|v_i|), unit = ‖v‖_∞/s ≤ ‖v‖₂/s, gives the same
ω = min(b/s², √b/s) (the spec's general formula with r = min(p, 2) = 2); the tighter
min(b/(4s²), (1 + √b)/(2s)) also holds and is noted in ``docs/compressors.md``.

Wire format (after the 8-byte header): m bucket norms (float32, or float64 with ``fp64=true``),
then d fields of 1 + ⌈log₂(s+1)⌉ bits (the blocked layout of ``wire.pack_fields``),
field = (level << 1) | sign (sign = 1 for negative, only when level > 0). Model bits:
F·m + d·(1 + ⌈log₂(s+1)⌉) (the paper's "naive" encoding). ``code=elias`` sends the same levels Elias-coded (QSGD Thm 3.2,
:mod:`.qsgd_elias`).
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit

from ..errors import PayloadError
from . import qsgd_elias
from .base import Compressor
from .kernels import simd, wire
from .kernels.dither import qsgd_encode
from .kernels.norms import BAD_HEADER as NORMS_BAD_HEADER
from .kernels.norms import BAD_SCALE, checked_scales, n_blocks
from .kernels.norms import OK as SCALES_OK
from .params import FP64_PARAM, Param


def _qsgd_row_values(builder, f, unit, _):
    """IR of the qsgd values of one row of fields (level << 1 | sign): ±level·unit, the signed
    level formed in i32 as (level ^ −sign) + sign, then one conversion and one multiply."""
    one = simd.splat_i(builder, f.type, 1)
    neg = builder.and_(f, one)
    lev = builder.lshr(f, one)
    signed = builder.add(builder.xor(lev, builder.sub(simd.splat_i(builder, f.type, 0), neg)), neg)
    return builder.fmul(builder.sitofp(signed, simd.F64ROW), simd.splat_f64(builder, unit))


class BucketDither(Compressor):
    """Shared orchestration of the bucketed random-dithering compressors (QSGD, natural dithering):
    s levels, ℓ_p bucket norms as scales, then d fixed-width fields (sign + level).

    Subclasses set ``_encode = staticmethod(kernel)``, the numba kernel
    ``(x, bucket, norms, l2, s, width, seed, fp64, head, payload) -> status`` that writes a
    whole payload: :func:`.kernels.norms.write_scales`, then the dithered fields packed after the
    scales (e.g. :func:`.kernels.dither.qsgd_encode`)."""
    collectives = ("gather", "allgather", "reduce-scatter")
    segment_wise = True

    _encode: staticmethod

    def _init(self) -> None:
        self.s = self._params["s"]
        self.p = self._params["p"]
        self._width = 1 + wire.bits_for(self.s + 1)      # sign + ⌈log₂(s+1)⌉ level bits

    def bucket_size(self, d: int) -> int:
        """Effective bucket size b' (d when bucket is 0 or ≥ d)."""
        b = self._params["bucket"]
        return d if b == 0 or b >= d else b

    def _body_bytes(self, d: int) -> tuple[int, int]:
        m = n_blocks(d, self.bucket_size(d))
        return m, m * self._scale_bytes + wire.packed_bytes(d, self._width)

    def _layout(self, d: int) -> tuple[int, int, int]:
        """(buckets m, body bytes, bucket size) at dimension d, computed once per d (they depend on
        d and the parameters only)."""
        cache = self.__dict__.setdefault("_layouts", {})
        got = cache.get(d)
        if got is None:
            got = cache[d] = (*self._body_bytes(d), self.bucket_size(d))
        return got

    def model_bits(self, payload, d: int) -> int:
        m, body = self._body_bytes(d)
        self._check_payload(self._as_payload(payload, d), d, body)
        return self._float_bits * m + d * self._width

    def _compress(self, x: np.ndarray, seed: np.uint64) -> np.ndarray:
        return self._codec_at(x.shape[0])[0](x, seed)

    def _make_codec(self, d: int) -> tuple:
        """The encoder at dimension d: block norms (ℓ∞ here, ℓ2 in the kernel), a new payload, then
        ``_encode`` writes header, scales and fields — one kernel call."""
        m, body, b = self._layout(d)
        head, n, s, width, fp64, encode = self._header_array(d), wire.HEADER_BYTES + body, self.s, self._width, \
            self._fp64, self._encode

        def enc(x, seed):
            norms, l2 = self._block_norms(x, b, m)
            payload = np.empty(n, dtype=np.uint8)
            status = encode(x, b, norms, l2, s, width, seed, fp64, head, payload)
            if status != SCALES_OK:
                raise self._scales_error(x, status, "bucket")
            return payload
        return enc, super()._make_codec(d)[1]

    def _checked_scales(self, payload: np.ndarray, d: int, level: str) -> tuple[np.ndarray, int]:
        """Check the header, the bucket norms and the level fields; return (scales, data offset).
        ``level`` names a level field in the error message."""
        m, body = self._body_bytes(d)
        self._check_payload(payload, d, body)
        scales = wire.read_scales(payload, wire.HEADER_BYTES, m, self._fp64)
        if not np.isfinite(scales).all() or (scales < 0).any():
            raise PayloadError(f"{self.name}: corrupted payload: invalid bucket norm")
        offset = wire.HEADER_BYTES + m * self._scale_bytes
        # levels above s (fields_above returns False at once when every field value is valid)
        if wire.fields_above(payload, offset, d, self._width, 2 * self.s + 1):
            raise PayloadError(f"{self.name}: corrupted payload: {level} above s={self.s}")
        return scales, offset


class QSGD(BucketDither):
    """QSGD / standard random dithering with s levels (Alistarh et al. 2017), ℓ2 or ℓ∞ scale;
    unbiased, ω = min(b/s², √b/s) with b the bucket size (b = d for ``bucket=0``)."""

    name = "qsgd"
    description = ("QSGD random dithering with s levels per bucket, l2 (or p=inf) scale (Alistarh et al. 2017); "
                   "omega = min(b/s^2, sqrt(b)/s), b = bucket or d; bits F*m + d*(1+ceil(log2(s+1))), "
                   "code=elias: F*m + Elias-omega gaps and levels of the nonzeros (QSGD Thm 3.2)")
    PARAMS = (
        Param("s", int, 4, low=1, high=2**31 - 1, doc="number of quantization levels"),
        Param("bucket", int, 0, low=0, doc="bucket size, 0 = whole vector"),
        Param("p", float, 2, choices=(2, math.inf), in_spec="nondefault",
              doc="norm of the scale: 2 (QSGD) or inf (max-norm, as QSGD's experiments)"),
        FP64_PARAM,
        Param("code", str, "fixed", choices=("fixed", "elias"), in_spec="nondefault",
              doc="level encoding: fixed-width fields, or elias = Elias-omega gaps, sign, "
                  "Elias-omega level of the nonzeros (QSGD Thm 3.2; same levels)"),
    )
    FORMAT_ID = 2
    unbiased = True
    _encode = staticmethod(qsgd_encode)

    def _init(self) -> None:
        super()._init()
        self._elias = self._params["code"] == "elias"
        self.BITS_BY_LENGTH = not self._elias     # F·m + d·width; Elias: the levels'

    def omega(self, d: int) -> float:
        b = self.bucket_size(d)
        return min(b / self.s**2, math.sqrt(b) / self.s)

    def _decode(self, payload: np.ndarray, d: int, out: np.ndarray, weight: float, accumulate: bool) -> None:
        """Check the payload and decode it into ``out`` (``accumulate``: out += weight·value): the
        decoder bound at d (:meth:`_make_codec`)."""
        self._codec_at(d)[1](payload, out, weight, accumulate)

    def _make_codec(self, d: int) -> tuple:
        """code=fixed: the encoder of :class:`BucketDither` and a decoder that checks the header, the
        length, the bucket norms and the levels inside :func:`qsgd_checked_decode` (one kernel call:
        the checks of :meth:`Compressor._check_payload` and :meth:`BucketDither._checked_scales`,
        same order, same messages; ``out`` untouched when the payload is invalid). code=elias: its
        own module's functions."""
        if self._elias:
            return (lambda x, seed: qsgd_elias.compress(self, x, seed),
                    lambda payload, out, weight: qsgd_elias.decompress_add(self, payload, d, out, weight))
        enc = super()._make_codec(d)[0]
        m, body, b = self._layout(d)
        head, n, s, width, fp64 = self._header_array(d), wire.HEADER_BYTES + body, self.s, self._width, self._fp64

        def add(payload, out, weight, accumulate=True):
            bad = qsgd_checked_decode(payload, head, n, m, fp64, s, d, b, width, out, float(weight), accumulate)
            if bad == BAD_HEADER:
                self._check_payload(payload, d, body)       # raises the header's or the length's message
            if bad == BAD_NORM:
                raise PayloadError(f"{self.name}: corrupted payload: invalid bucket norm")
            if bad == BAD_LEVEL:
                raise PayloadError(f"{self.name}: corrupted payload: quantization level above s={self.s}")
        return enc, add

    def _add_many_at(self, d: int):
        """code=fixed: ``Prepared.add_many`` by :func:`qsgd_add_many` (the decoder of ``add``, per
        payload, inside one kernel call); code=elias: None."""
        if self._elias:
            return None
        m, body, b = self._layout(d)
        head, n, s, width, fp64 = self._header_array(d), wire.HEADER_BYTES + body, self.s, self._width, self._fp64

        def add_many(buf, starts, lengths, weights, out):
            return qsgd_add_many(buf, starts, lengths, weights, out, head, n, m, fp64, s, d, b, width)
        return add_many

    def _fused_update(self, d: int):
        """code=fixed, one bucket or buckets that tile :data:`UPDATE_CHUNK`: :func:`qsgd_decode_update`
        (the payload is checked as by ``add``); else None."""
        m, body, b = self._layout(d)
        if self._elias or (b < d and UPDATE_CHUNK % b):
            return None
        add = self._codec_at(d)[1]
        head, n, s, width, fp64 = self._header_array(d), wire.HEADER_BYTES + body, self.s, self._width, self._fp64
        tmp = np.empty(min(UPDATE_CHUNK, d))

        def update(payload, D, S, alpha, weight):
            if qsgd_decode_update(payload, head, n, m, fp64, s, d, b, width, float(weight), D, S, float(alpha), tmp):
                add(payload, np.zeros(d), weight)           # raises the message of the invalid payload
        return update

    # code=elias: same levels (kernels.dither), Elias-coded (hpcgc.compressors.qsgd_elias)
    def model_bits(self, payload, d: int) -> int:
        if self._elias:
            return qsgd_elias.model_bits(self, payload, d)
        return super().model_bits(payload, d)

    def _decompress(self, payload: np.ndarray, d: int) -> np.ndarray:
        if self._elias:
            return qsgd_elias.decompress(self, payload, d)
        out = np.empty(d)
        self._decode(payload, d, out, 1.0, False)
        return out

    def _decompress_add(self, payload: np.ndarray, d: int, out: np.ndarray, weight: float) -> None:
        self._codec_at(d)[1](payload, out, weight)


FIELDS_KIND = 2
"""qsgd's field format in ``simd.ROW_VALUES`` (its FORMAT_ID)."""
simd.register_row_values(FIELDS_KIND, _qsgd_row_values)


BAD_NORM, BAD_LEVEL, BAD_HEADER = BAD_SCALE, 2, NORMS_BAD_HEADER
"""What :func:`qsgd_checked_decode` returns for an invalid payload (0: decoded): those of
:func:`.kernels.norms.checked_scales` and BAD_LEVEL."""
UPDATE_CHUNK = 32 * wire.FIELD_BLOCK
"""Entries decoded at a time by :func:`qsgd_decode_update` (256 KiB of float64: the chunk stays in
the L2 cache between its decode and its use; 8–32 blocks measured alike, 1 block and the whole
vector slower)."""


@njit(cache=True)
def qsgd_checked_units(src, head, length, m, fp64, s, d, width):
    """(status, units, offset) of a fixed-width qsgd payload: it must be ``length`` bytes long and
    start with the header bytes ``head`` (else BAD_HEADER: the caller names the mismatch); the m
    bucket norms after the header (little-endian float32, or float64 with ``fp64``) must be finite
    and ≥ 0 (else BAD_NORM), every level ≤ s (else BAD_LEVEL: the d fields that follow the norms,
    each ``width`` bits, level << 1 | sign). With status 0: units = the norms / s (float64) and the
    offset of the fields (:func:`.kernels.norms.checked_scales`, then the levels)."""
    bad, units, offset = checked_scales(src, head, length, m, fp64)
    if bad != 0:
        return bad, units, 0
    for l in range(m):
        units[l] = units[l] / s
    limit = 2 * s + 1
    if limit < (1 << width) - 1:                 # else every field value is a valid level
        if width == 1 or width == 2 or width == 4 or width == 8:
            if wire.swar_any_above(src, offset, (d * width + 7) // 8, width, limit):
                return BAD_LEVEL, units[:0], 0
        elif wire.fields_max(src, offset, d, width) > limit:
            return BAD_LEVEL, units[:0], 0
    return 0, units, offset


@njit(cache=True)
def qsgd_checked_decode(src, head, length, m, fp64, s, d, bucket, width, out, weight, accumulate):
    """Check a fixed-width qsgd payload (:func:`qsgd_checked_units`: its status returned when not
    0) and only then decode it, value = ±level·norm/s (:func:`.kernels.wire.blocked_decode`;
    ``accumulate``: out += weight·value) and return 0 — an invalid payload leaves ``out``
    untouched. FIELDS_KIND is a compile-time constant here, so the literal dispatch costs nothing
    per call."""
    bad, units, offset = qsgd_checked_units(src, head, length, m, fp64, s, d, width)
    if bad != 0:
        return bad
    wire.blocked_decode(src, offset, d, bucket, units, 0, width, out, weight, accumulate, FIELDS_KIND)
    return 0


@njit(cache=True)
def qsgd_add_many(buf, starts, lengths, weights, out, head, length, m, fp64, s, d, bucket, width):
    """:func:`qsgd_checked_decode` accumulating the payloads ``buf[starts[j]:starts[j] + lengths[j]]``
    with ``weights[j]`` into ``out``, j = 0, 1, … in order (``Prepared.add_many``: the same calls
    as one ``add`` per payload, without a Python call each). Returns the number of payloads added:
    at the first invalid one it stops, that payload untouched."""
    for j in range(starts.shape[0]):
        a = starts[j]
        if qsgd_checked_decode(buf[a:a + lengths[j]], head, length, m, fp64, s, d, bucket, width, out,
                               weights[j], True) != 0:
            return j
    return starts.shape[0]


@njit(cache=True)
def qsgd_decode_update(src, head, length, m, fp64, s, d, bucket, width, weight, D, S, alpha, tmp):
    """D_i ← D_i + α·(m_i − S_i) with m = 0 + weight·(the decoded payload), without writing m: the
    payload is checked (:func:`qsgd_checked_units`: its status returned, D untouched, when not 0),
    then decoded ``tmp.shape[0]`` entries at a time (a multiple of FIELD_BLOCK: every chunk starts
    a block of the field stream — and a bucket, when ``bucket`` < d: the caller checked that it
    divides the chunk) into ``tmp``, zeroed and accumulated with ``weight`` — exactly m's values —
    and used at once while in the cache. The same bits as ``m[:] = 0; decode into m with weight;
    D += alpha * (m - S)``."""
    bad, units, offset = qsgd_checked_units(src, head, length, m, fp64, s, d, width)
    if bad != 0:
        return bad
    C = tmp.shape[0]
    for c0 in range(0, d, C):
        n = min(C, d - c0)
        t = tmp[:n]
        t[:] = 0.0
        l0 = c0 // bucket if bucket < d else 0
        wire.blocked_decode(src, offset + (c0 * width) // 8, n, bucket, units[l0:], 0, width, t, weight, True,
                            FIELDS_KIND)
        Dc, Sc = D[c0:c0 + n], S[c0:c0 + n]     # views: i ≥ 0 is plain to LLVM, and the loop vectorises
        for i in range(n):
            Dc[i] = Dc[i] + alpha * (t[i] - Sc[i])
    return 0
