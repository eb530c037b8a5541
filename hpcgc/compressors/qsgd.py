"""``qsgd``: ℓ2 random dithering with s levels (QSGD), optionally per bucket.

Alistarh, Grubic, Li, Tomioka, Vojnovic, *QSGD: Communication-Efficient SGD via Gradient
Quantization and Encoding*, NeurIPS 2017 (Lemma 3.1). For a bucket v (the whole vector by default)

    Q_s(v)_i = ‖v‖₂ · sgn(v_i) · ξ_i,   ξ_i ∈ {l/s, (l+1)/s},   P[ξ_i = (l+1)/s] = s|v_i|/‖v‖₂ − l,

with l = ⌊s|v_i|/‖v‖₂⌋, so E Q_s(v) = v and E‖Q_s(v) − v‖² ≤ min(b/s², √b/s)·‖v‖² for bucket size b.
``‖v‖₂`` is the norm *as sent* (float32 rounded up by default), which keeps the operator exactly
unbiased in exact arithmetic. This is D^{2,s}_sta of the Natural Compression paper; with s = 1 it is
DIANA's Quant_2 (`quant:p=2`).

Wire format (after the 8-byte header): m bucket norms (float32, or float64 with ``fp64=true``),
then d fields of 1 + ⌈log₂(s+1)⌉ bits, LSB-first, field = (level << 1) | sign (sign = 1 for
negative, only when level > 0). Model bits: F·m + d·(1 + ⌈log₂(s+1)⌉) (the paper's "naive"
encoding; its Elias-coded bound is not what is sent).
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit

from ..errors import PayloadError
from . import wire
from .base import FP64_PARAM, Compressor, Param
from .norms import block_norms_l2, n_blocks
from .prng import next_uniform


@njit(cache=True)
def qsgd_dither_pack(x, bucket, scales, s, width, seed, out, offset):
    """Randomly round s|x_i|/scale to a neighbouring integer level (unbiased) and bit-pack
    (level << 1 | sign) at ``width`` bits per entry into ``out[offset:]``."""
    state = np.uint64(seed)
    d = x.shape[0]
    acc = np.int64(0)
    nacc = 0
    pos = offset
    for l in range(scales.shape[0]):
        start = l * bucket
        stop = min(start + bucket, d)
        sc = scales[l]
        inv = s / sc if sc > 0.0 else 0.0
        for i in range(start, stop):
            v = np.float64(x[i])
            r = abs(v) * inv
            lev = np.int64(r)
            state, u = next_uniform(state)      # one draw per entry, branch-free
            lev += np.int64(u < r - lev)        # P[lev + 1] = r − lev: unbiased
            if lev > s:                         # only by rounding in r; r ≤ s in exact arithmetic
                lev = s
            field = (lev << 1) | np.int64(v < 0.0 and lev > 0)
            acc |= field << nacc
            nacc += width
            while nacc >= 8:
                out[pos] = acc & 0xFF
                acc >>= 8
                nacc -= 8
                pos += 1
    if nacc > 0:
        out[pos] = acc & 0xFF


@njit(cache=True)
def qsgd_unpack_decode(src, offset, d, bucket, units, width, out, weight, accumulate):
    """Decode d packed (level, sign) fields: value = ±level·units[bucket].

    ``accumulate``: out += weight·value, else out = value (weight ignored).
    """
    mask = (np.int64(1) << width) - 1
    acc = np.int64(0)
    nacc = 0
    pos = offset
    for l in range(units.shape[0]):
        start = l * bucket
        stop = min(start + bucket, d)
        u = units[l] * weight if accumulate else units[l]
        for i in range(start, stop):
            while nacc < width:
                acc |= np.int64(src[pos]) << nacc
                pos += 1
                nacc += 8
            field = acc & mask
            acc >>= width
            nacc -= width
            val = (field >> 1) * (u - 2.0 * u * (field & 1))
            if accumulate:
                out[i] += val
            else:
                out[i] = val


class QSGD(Compressor):
    """QSGD / ℓ2 random dithering with s levels (Alistarh et al. 2017); unbiased,
    ω = min(b/s², √b/s) with b the bucket size (b = d for ``bucket=0``)."""

    name = "qsgd"
    description = ("QSGD l2 random dithering with s levels per bucket (Alistarh et al. 2017); "
                   "omega = min(b/s^2, sqrt(b)/s), b = bucket or d; bits F*m + d*(1+ceil(log2(s+1)))")
    PARAMS = (
        Param("s", int, 4, low=1, high=2**31 - 1, doc="number of quantization levels"),
        Param("bucket", int, 0, low=0, doc="bucket size, 0 = whole vector"),
        FP64_PARAM,
    )
    FORMAT_ID = 2
    unbiased = True

    def _init(self) -> None:
        self.s = self._params["s"]
        self._width = 1 + wire.bits_for(self.s + 1)      # sign + ⌈log₂(s+1)⌉ level bits
        self._all_levels_valid = ((self.s + 1) & self.s) == 0  # s+1 a power of two

    def bucket_size(self, d: int) -> int:
        """Effective bucket size b' (d when bucket is 0 or ≥ d)."""
        b = self._params["bucket"]
        return d if b == 0 or b >= d else b

    def omega(self, d: int) -> float:
        b = self.bucket_size(d)
        return min(b / self.s**2, math.sqrt(b) / self.s)

    def _body_bytes(self, d: int) -> tuple[int, int]:
        m = n_blocks(d, self.bucket_size(d))
        return m, m * self._scale_bytes + wire.packed_bytes(d, self._width)

    def model_bits(self, payload, d: int) -> int:
        m, body = self._body_bytes(d)
        self._check_payload(self._as_payload(payload, d), d, body)
        return self._float_bits * m + d * self._width

    def _compress(self, x: np.ndarray, seed: np.uint64) -> np.ndarray:
        d = x.shape[0]
        b = self.bucket_size(d)
        m, body = self._body_bytes(d)
        norms = np.empty(m)
        block_norms_l2(x, b, norms)
        if not np.isfinite(norms).all():
            raise self._nonfinite_error(x)
        scales = self._scales_for_wire(norms)
        if not np.isfinite(scales).all():
            raise self._nonfinite_error(x, "bucket norm (float32)")
        payload = self._new_payload(body, d)
        self._write_scales(payload, scales)
        qsgd_dither_pack(x, b, scales, self.s, self._width, seed, payload,
                         wire.HEADER_BYTES + m * self._scale_bytes)
        return payload

    def _units(self, payload: np.ndarray, d: int) -> tuple[np.ndarray, int, int]:
        """Check the payload; return per-bucket units norm/s, bucket size and packed-data offset."""
        m, body = self._body_bytes(d)
        self._check_payload(payload, d, body)
        scales = wire.read_scales(payload, wire.HEADER_BYTES, m, self._fp64)
        if not np.isfinite(scales).all() or (scales < 0).any():
            raise PayloadError(f"{self.name}: corrupted payload: invalid bucket norm")
        offset = wire.HEADER_BYTES + m * self._scale_bytes
        if not self._all_levels_valid and wire.count_fields_above(
                payload, offset, d, self._width, 2 * self.s + 1):
            raise PayloadError(f"{self.name}: corrupted payload: quantization level above s={self.s}")
        return scales / self.s, self.bucket_size(d), offset

    def _decompress(self, payload: np.ndarray, d: int) -> np.ndarray:
        units, b, offset = self._units(payload, d)
        out = np.empty(d)
        qsgd_unpack_decode(payload, offset, d, b, units, self._width, out, 1.0, False)
        return out

    def _decompress_add(self, payload: np.ndarray, d: int, out: np.ndarray, weight: float) -> None:
        units, b, offset = self._units(payload, d)
        qsgd_unpack_decode(payload, offset, d, b, units, self._width, out, weight, True)

