"""``randk``: random sparsification, keep k uniformly random coordinates scaled by d/k.

C(x) = (d/k) Σ_{j∈S} x_j e_j with S a uniformly random k-subset of {0, …, d−1}: unbiased with
E‖C(x) − x‖² = (d/k − 1)‖x‖² for every x, so ω = d/k − 1 exactly (`spec/compressors.md` Part C;
used as the unbiased sparsifier in DIANA and its successors, e.g. Mishchenko et al. 2019,
arXiv 1901.09269).

Sampling: Floyd's algorithm (k random integers, a d-byte membership mask), then the indices in
increasing order. Wire format (after the 8-byte header): k values x_j *unscaled* (float32, or
float64 with ``fp64=true``), then the k indices, increasing, ⌈log₂d⌉ bits each, LSB-first. The d/k
scale is applied in float64 at decode, so the wire carries exactly the coordinates of x.
Model bits: k·(F + ⌈log₂d⌉).
"""
from __future__ import annotations

import numpy as np
from numba import njit

from ..errors import ConfigError, PayloadError
from . import wire
from .base import FP64_PARAM, Compressor, Param
from .norms import nonfinite_flag
from .prng import next_below


@njit(cache=True)
def sample_k_of_d_sorted(d, seed, idx):
    """Uniformly random k-subset of range(d), k = len(idx), written to ``idx`` in increasing order.

    Floyd's algorithm: exactly k random draws and a d-byte membership mask; then the subset is
    sorted (~k log k) or, when that is dearer, read off the mask in order (~d).
    """
    state = np.uint64(seed)
    k = idx.shape[0]
    mask = np.zeros(d, dtype=np.uint8)
    for n, j in enumerate(range(d - k, d)):
        state, t = next_below(state, j + 1)      # uniform in [0, j]
        if mask[t]:
            t = j
        mask[t] = 1
        idx[n] = t
    logk = 1
    while (1 << logk) < k:
        logk += 1
    if d <= 16 * k * logk:
        n = 0
        for i in range(d):
            if mask[i]:
                idx[n] = i
                n += 1
    else:
        idx.sort()


@njit(cache=True)
def gather_checked(x, idx, values):
    """values[i] = x[idx[i]] (cast to values' dtype); returns 0.0, or NaN if a value is non-finite."""
    chk = 0.0
    for i in range(idx.shape[0]):
        values[i] = x[idx[i]]
        chk += values[i] * 0.0
    return chk


@njit(cache=True)
def indices_valid(idx, d):
    """True if ``idx`` is strictly increasing and inside [0, d)."""
    prev = -1
    for i in range(idx.shape[0]):
        j = idx[i]
        if j <= prev or j >= d:
            return False
        prev = j
    return True


@njit(cache=True)
def scatter_scaled(values, idx, scale, out, accumulate):
    """out[idx[i]] (+)= scale·values[i]; the caller zeroes ``out`` when not accumulating."""
    for i in range(idx.shape[0]):
        if accumulate:
            out[idx[i]] += scale * values[i]
        else:
            out[idx[i]] = scale * values[i]


class RandK(Compressor):
    """Rand-k sparsification: k uniform random coordinates scaled by d/k; ω = d/k − 1 (exact)."""

    name = "randk"
    description = ("rand-k: keep k uniformly random coordinates scaled by d/k; omega = d/k - 1; "
                   "bits k*(F + ceil(log2 d))")
    PARAMS = (
        Param("k", int, low=1, doc="number of coordinates kept, k <= d"),
        FP64_PARAM,
    )
    FORMAT_ID = 4
    unbiased = True

    def _init(self) -> None:
        self.k = self._params["k"]

    def _validate(self, d: int) -> None:
        if self.k > d:
            raise ConfigError(f"{self.name}: parameter k={self.k} is out of range for d={d}; "
                              f"allowed: 1 <= k <= d")

    def omega(self, d: int) -> float:
        return d / self.k - 1.0

    def _dtype(self) -> str:
        return "<f8" if self._fp64 else "<f4"

    def _body_bytes(self, d: int) -> int:
        return self.k * self._scale_bytes + wire.packed_bytes(self.k, wire.bits_for(d))

    def model_bits(self, payload, d: int) -> int:
        self._check(payload, d)
        return self.k * (self._float_bits + wire.bits_for(d))

    def _check(self, payload, d: int) -> np.ndarray:
        payload = self._as_payload(payload, d)
        if self.k > d:
            raise PayloadError(f"{self.name}: requested d={d} is smaller than k={self.k}")
        self._check_payload(payload, d, self._body_bytes(d))
        return payload

    def _compress(self, x: np.ndarray, seed: np.uint64) -> np.ndarray:
        d = x.shape[0]
        if nonfinite_flag(x) != 0.0:
            raise self._nonfinite_error(x)
        idx = np.empty(self.k, dtype=np.int64)
        sample_k_of_d_sorted(d, seed, idx)
        payload = self._new_payload(self._body_bytes(d), d)
        vbytes = self.k * self._scale_bytes
        values = payload[wire.HEADER_BYTES:wire.HEADER_BYTES + vbytes].view(self._dtype())
        if gather_checked(x, idx, values) != 0.0:
            raise self._nonfinite_error(x, "value range (float32)")
        wire.pack_fixed_width(idx, wire.bits_for(d), payload, wire.HEADER_BYTES + vbytes)
        return payload

    def _decode(self, payload: np.ndarray, d: int) -> tuple[np.ndarray, np.ndarray]:
        """Check the payload; return (values, indices)."""
        vbytes = self.k * self._scale_bytes
        values = wire.read_array(payload, wire.HEADER_BYTES, self.k, self._dtype())
        if nonfinite_flag(values) != 0.0:
            raise PayloadError(f"{self.name}: corrupted payload: non-finite value")
        idx = np.empty(self.k, dtype=np.int64)
        wire.unpack_fixed_width(payload, wire.HEADER_BYTES + vbytes, wire.bits_for(d), idx)
        if not indices_valid(idx, d):
            raise PayloadError(f"{self.name}: corrupted payload: indices not strictly increasing "
                               f"in [0, {d})")
        return values, idx

    def _decompress(self, payload: np.ndarray, d: int) -> np.ndarray:
        values, idx = self._decode(self._check(payload, d), d)
        out = np.zeros(d)
        scatter_scaled(values, idx, d / self.k, out, False)
        return out

    def _decompress_add(self, payload: np.ndarray, d: int, out: np.ndarray, weight: float) -> None:
        values, idx = self._decode(self._check(payload, d), d)
        scatter_scaled(values, idx, weight * (d / self.k), out, True)
