"""``identity``: no compression, the uncompressed baseline (ω = 0), and its low-precision casts.

Wire format: header | d values, little-endian float32 (F = 32 bits per entry, as the papers count
uncompressed communication), float64 with ``fp64`` (``identity:fp64``), float16 with ``fp16``,
bfloat16 with ``bf16`` (at most one of the three). Model bits: F·d (F = 32, 64, 16, 16).
The decoded vector is x rounded to the wire type (round-to-nearest-even), so ``identity`` is exact
only with ``fp64``. The casts are the baseline practitioners run (PyTorch DDP's
``fp16_compress_hook`` / ``bf16_compress_hook``, Horovod's ``Compression.fp16``).

Theory: the rounding is deterministic, hence biased, with a relative error per coordinate of at
most the unit roundoff u (``rounding``): 2^-24 for float32, 2^-53 for float64, 2^-11 for float16
(plus an absolute 2^-25 below 2^-14, float16's subnormals), 2^-8 for bfloat16. hpcgc treats every
cast as ω = 0 — the convention the papers use for float32 — so DCGD, DIANA, MARINA and the GD-style
baselines accept them; the neglected bias is ‖C(x) − x‖ ≤ u‖x‖ per message (δ = 1 − u² as a
contraction, ``docs/compressors.md``).

Overflow: a finite value beyond the wire type's range (float16: |x| ≥ 65520, which rounds to Inf;
65504 < |x| < 65520 rounds to 65504) is sent as ±Inf: the decoded aggregate, and so the iterate, is
non-finite on every rank and the run ends with status ``overflow`` (``hpcgc.run.run``), naming the
value, the iteration and the cast. Under ``allreduce`` the float16 sum of in-range values can also
overflow; the same status names the coordinate.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from ..errors import ConfigError, PayloadError
from .base import Compressor
from .kernels import casts, wire
from .kernels.norms import nonfinite_flag
from .params import FP64_PARAM, Param
from .summable import CastSum, DenseSum

WIRE_TYPES = {"fp16": ("float16", 16, 2.0 ** -11), "bf16": ("bfloat16", 16, 2.0 ** -8)}
"""Cast flag → (wire type, bits per value, unit roundoff)."""


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
    """The identity map: sends x itself (float32 by default; float64, float16 or bfloat16 with
    ``fp64`` / ``fp16`` / ``bf16``). ω = 0; model bits F·d."""

    name = "identity"
    description = ("no compression: send x as float32 (fp64: float64; fp16: float16; bf16: bfloat16, "
                   "round-to-nearest-even); omega = 0; bits F*d")
    PARAMS = (FP64_PARAM,
              Param("fp16", bool, False, doc="float16 values (rides Allreduce as MPI_FLOAT16_T)", in_spec="nondefault",
                    flag=True),
              Param("bf16", bool, False, doc="bfloat16 values (Allreduce: a user-defined SUM)", in_spec="nondefault",
                    flag=True))
    FORMAT_ID = 1
    BITS_BY_LENGTH = True          # model bits: a function of d and the payload's length
    unbiased = True
    deterministic = True
    collectives = ("gather", "allreduce", "allgather", "reduce-scatter")
    segment_wise = True

    def _init(self) -> None:
        on = [k for k in ("fp64", "fp16", "bf16") if self._params[k]]
        if len(on) > 1:
            raise ConfigError(f"identity: {' and '.join(on)} conflict; choose one wire type "
                              "(identity = float32, identity:fp64, identity:fp16, identity:bf16)")
        self.cast = on[0] if on and on[0] != "fp64" else None
        if self.cast is not None:
            self.wire_type, self._float_bits, self.rounding = WIRE_TYPES[self.cast]
            self._scale_bytes = 2
            self._encode = casts.to_half if self.cast == "fp16" else casts.to_bf16
            self._add = casts.half_add if self.cast == "fp16" else casts.bf16_add
            self.kernels = (casts.warm,)            # incl. the bfloat16 SUM of the MPI operation
        else:
            self.wire_type = "float64" if self._fp64 else "float32"
            self.rounding = 2.0 ** -53 if self._fp64 else 2.0 ** -24
        self.overflow = 0.0          # the largest finite |x| a cast sent as Inf (0: none), for the run's status

    def sum_codec(self, d: int, shape=None):
        if self.cast is not None:
            return CastSum(d, self)
        return DenseSum(d, self._fp64)

    def omega(self, d: int) -> float:
        return 0.0

    def _body_bytes(self, d: int) -> int:
        return d * self._scale_bytes

    def _dtype(self) -> str:
        return "<f8" if self._fp64 else "<u2" if self.cast else "<f4"

    def model_bits(self, payload, d: int) -> int:
        self._check_payload(self._as_payload(payload, d), d, self._body_bytes(d))
        return self._float_bits * d

    def encode_cast(self, x: np.ndarray, weight: float, out: np.ndarray) -> None:
        """out (uint16, len(x)) = the cast of weight·x: the segment-wise encoder (any sub-vector).
        A finite value beyond the range is written as ±Inf and remembered in ``overflow``; NaN/Inf
        in x raises ValueError (a diverged input, not an overflow)."""
        status = self._encode(x, weight, out)
        if status == casts.NONFINITE:
            raise self._nonfinite_error(x)
        if status == casts.OVERFLOW:
            self.overflow = max(self.overflow, abs(weight) * casts.max_abs(x))

    def decode_cast(self, bits: np.ndarray, weight: float, out: np.ndarray, accumulate: bool) -> int:
        """out (+)= weight·value(bits): the segment-wise decoder; returns the first non-finite
        coordinate (an overflow travelling as Inf), or −1."""
        return self._add(bits, weight, out, accumulate)

    def _compress(self, x: np.ndarray, seed: np.uint64) -> np.ndarray:
        d = x.shape[0]
        payload = self._new_payload(self._body_bytes(d), d)
        values = payload[wire.HEADER_BYTES:].view(self._dtype())
        if self.cast is not None:
            self.encode_cast(x, 1.0, values)
            return payload
        bad = (cast_copy64(x, values) >= 0x7FF0000000000000 if self._fp64
               else cast_copy32(x, values) >= 0x7F800000)
        if bad:                                  # NaN/Inf in x, or beyond the float32 range
            raise self._nonfinite_error(x, "value range (float32)")
        return payload

    def _values(self, payload: np.ndarray, d: int) -> np.ndarray:
        self._check_payload(payload, d, self._body_bytes(d))
        values = wire.read_array(payload, wire.HEADER_BYTES, d, self._dtype())
        if self.cast is None and nonfinite_flag(values) != 0.0:
            raise PayloadError(f"{self.name}: corrupted payload: non-finite value")
        return values

    def _cast_add(self, payload, d, out, weight, accumulate) -> None:
        values = self._values(payload, d)
        inf = 0x7C00 if self.cast == "fp16" else 0x7F80          # NaN: all exponent bits set, fraction ≠ 0
        if np.any((values & 0x7FFF) > inf):
            raise PayloadError(f"{self.name}: corrupted payload: NaN value")     # Inf: an overflow, passed on
        self._add(values, weight, out, accumulate)

    def _decompress(self, payload: np.ndarray, d: int) -> np.ndarray:
        if self.cast is not None:
            out = np.empty(d)
            self._cast_add(payload, d, out, 1.0, False)
            return out
        return self._values(payload, d).astype(np.float64)

    def _decompress_add(self, payload: np.ndarray, d: int, out: np.ndarray, weight: float) -> None:
        if self.cast is not None:
            return self._cast_add(payload, d, out, weight, True)
        scaled_add(self._values(payload, d), weight, out)
