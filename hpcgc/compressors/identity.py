"""``identity``: no compression, the uncompressed baseline (ω = 0).

Wire format: header | d values, little-endian float32 (F = 32 bits per entry, as the papers count
uncompressed communication), or float64 with ``fp64=true``. Model bits: F·d.
With float32 values the decoded vector is x rounded to float32, so ``identity`` is exact only with
``fp64=true``.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from ..errors import PayloadError
from .base import FP64_PARAM, Compressor
from .kernels import wire
from .kernels.norms import nonfinite_flag
from .summable import DenseSum


@njit(cache=True)
def cast_copy32(x, out):
    """out[i] = float32(x[i]); returns the largest |out[i]| bit pattern (≥ 0x7F800000 iff some
    value is NaN/Inf or overflowed float32): copy and check in one pass."""
    m = np.uint32(0)
    for i in range(x.shape[0]):
        v = np.float32(x[i])
        out[i] = v
        m = max(m, v.view(np.uint32) & np.uint32(0x7FFFFFFF))
    return m


@njit(cache=True)
def cast_copy64(x, out):
    """:func:`cast_copy32` into float64 (bit patterns ≥ 0x7FF0000000000000 iff NaN/Inf)."""
    m = np.uint64(0)
    for i in range(x.shape[0]):
        v = np.float64(x[i])
        out[i] = v
        m = max(m, v.view(np.uint64) & np.uint64(0x7FFFFFFFFFFFFFFF))
    return m


@njit(cache=True)
def scaled_add(values, weight, out):
    """out += weight * values (values float32 or float64)."""
    for i in range(values.shape[0]):
        out[i] += weight * values[i]


class Identity(Compressor):
    """The identity map: sends x itself (float32 by default). ω = 0; model bits F·d."""

    name = "identity"
    description = "no compression: send x as float32 (fp64=true: float64); omega = 0; bits F*d"
    PARAMS = (FP64_PARAM,)
    FORMAT_ID = 1
    BITS_BY_LENGTH = True          # model bits: a function of d and the payload's length
    unbiased = True
    collectives = ("gather", "allreduce", "allgather")

    def sum_codec(self, d: int, shape=None):
        return DenseSum(d, self._fp64)

    def omega(self, d: int) -> float:
        return 0.0

    def _body_bytes(self, d: int) -> int:
        return d * self._scale_bytes

    def _dtype(self) -> str:
        return "<f8" if self._fp64 else "<f4"

    def model_bits(self, payload, d: int) -> int:
        self._check_payload(self._as_payload(payload, d), d, self._body_bytes(d))
        return self._float_bits * d

    def _compress(self, x: np.ndarray, seed: np.uint64) -> np.ndarray:
        d = x.shape[0]
        payload = self._new_payload(self._body_bytes(d), d)
        values = payload[wire.HEADER_BYTES:].view(self._dtype())
        bad = (cast_copy64(x, values) >= 0x7FF0000000000000 if self._fp64
               else cast_copy32(x, values) >= 0x7F800000)
        if bad:                                  # NaN/Inf in x, or beyond the float32 range
            raise self._nonfinite_error(x, "value range (float32)")
        return payload

    def _values(self, payload: np.ndarray, d: int) -> np.ndarray:
        self._check_payload(payload, d, self._body_bytes(d))
        values = wire.read_array(payload, wire.HEADER_BYTES, d, self._dtype())
        if nonfinite_flag(values) != 0.0:
            raise PayloadError(f"{self.name}: corrupted payload: non-finite value")
        return values

    def _decompress(self, payload: np.ndarray, d: int) -> np.ndarray:
        return self._values(payload, d).astype(np.float64)

    def _decompress_add(self, payload: np.ndarray, d: int, out: np.ndarray, weight: float) -> None:
        scaled_add(self._values(payload, d), weight, out)
