"""``bernoulli``: the "lazy" compressor, send x/p with probability p, else nothing.

C(x) = (ξ/p)·x with ξ ~ Bernoulli(p): unbiased, E‖C(x) − x‖² = (1/p − 1)‖x‖², so ω = 1/p − 1
exactly (`spec/compressors.md` Part C; marina ``makeLazyCompressor``; the "lazy aggregation"
building block of, e.g., Mishchenko, Wang, Kovalev, Richtárik, *IntSGD*, and of
loopless/variance-reduced methods). Expected traffic: p·d·F bits.

The coin is ``uniform_at(seed, 0) < p``. Wire format (after the 8-byte header): either nothing
(ξ = 0: the message is the header alone, 0 model bits) or the d values x_j *unscaled* (float32, or
float64 with ``fp64=true``); the decoder applies 1/p in float64. Model bits: F·d if sent, else 0.
NaN/±Inf in x is rejected whether or not the coin says send.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from ..errors import PayloadError
from .base import Compressor
from .identity import scaled_add
from .kernels import wire
from .kernels.norms import nonfinite_flag
from .kernels.prng import uniform_at
from .kernels.sparse import FINITE_CHUNK, chunk_nonfinite, float_bits
from .params import FP64_PARAM, Param


@njit(cache=True)
def copy_finite(x, out, okeys, mask, inf_bits):
    """out[i] = x[i] (cast to out's dtype) and True if every out[i] is finite, in one pass: per
    chunk of FINITE_CHUNK entries, the copy then a vectorised integer max over the copied bits
    (``okeys, mask, inf_bits`` = :func:`~.kernels.sparse.float_bits` (out)). A NaN/±Inf in x, or a float32
    overflow of the cast, gives False."""
    n = x.shape[0]
    for c0 in range(0, n, FINITE_CHUNK):
        xb = x[c0:c0 + FINITE_CHUNK]
        ob = out[c0:c0 + FINITE_CHUNK]
        for i in range(xb.shape[0]):
            ob[i] = xb[i]
        if chunk_nonfinite(okeys, c0, mask, inf_bits):
            return False
    return True


class Bernoulli(Compressor):
    """Lazy compressor: x/p with probability p, else 0; ω = 1/p − 1 (exact)."""

    name = "bernoulli"
    description = ("Bernoulli/lazy: send x/p with probability p, else nothing; omega = 1/p - 1; "
                   "bits F*d with probability p, else 0")
    PARAMS = (
        Param("p", float, low=0.0, low_open=True, high=1.0, doc="probability of sending"),
        FP64_PARAM,
    )
    FORMAT_ID = 12
    BITS_BY_LENGTH = True          # model bits: a function of d and the payload's length
    unbiased = True

    def _init(self) -> None:
        self.p = self._params["p"]

    def omega(self, d: int) -> float:
        return 1.0 / self.p - 1.0

    def _dtype(self) -> str:
        return "<f8" if self._fp64 else "<f4"

    def _sent(self, payload: np.ndarray, d: int) -> bool:
        """Check the payload; True if it carries the vector, False if it is the empty message."""
        full = d * self._scale_bytes
        self._check_payload_any(payload, d)
        n = payload.size - wire.HEADER_BYTES
        if n not in (0, full):
            what = "has trailing bytes" if n > full else "is truncated or has trailing bytes"
            raise PayloadError(f"{self.name}: payload {what}: {payload.size} bytes, expected "
                               f"{wire.HEADER_BYTES} or {wire.HEADER_BYTES + full} for d={d}")
        return n == full

    def _check_payload_any(self, payload: np.ndarray, d: int) -> None:
        wire.check_header(payload, self.name, self.FORMAT_ID, self._flags, self._fingerprint, d,
                          wire.HEADER_BYTES, exact=False)

    def model_bits(self, payload, d: int) -> int:
        return self._float_bits * d if self._sent(self._as_payload(payload, d), d) else 0

    def _compress(self, x: np.ndarray, seed: np.uint64) -> np.ndarray:
        d = x.shape[0]
        if not uniform_at(seed, 0) < self.p:
            if nonfinite_flag(x) != 0.0:           # rejected even when nothing is sent
                raise self._nonfinite_error(x)
            return self._new_payload(0, d)
        payload = self._new_payload(d * self._scale_bytes, d)
        values = payload[wire.HEADER_BYTES:].view(self._dtype())
        if not copy_finite(x, values, *float_bits(values)):   # one pass: copy + check
            raise self._nonfinite_error(x, "value range (float32)")
        return payload

    def _values(self, payload: np.ndarray, d: int):
        if not self._sent(payload, d):
            return None
        values = wire.read_array(payload, wire.HEADER_BYTES, d, self._dtype())
        if nonfinite_flag(values) != 0.0:
            raise PayloadError(f"{self.name}: corrupted payload: non-finite value")
        return values

    def _decompress(self, payload: np.ndarray, d: int) -> np.ndarray:
        values = self._values(payload, d)
        if values is None:
            return np.zeros(d)
        return values.astype(np.float64) / self.p

    def _decompress_add(self, payload: np.ndarray, d: int, out: np.ndarray, weight: float) -> None:
        values = self._values(payload, d)
        if values is not None:
            scaled_add(values, weight / self.p, out)
