"""``threshold``: hard threshold, keep every x_j with |x_j| ≥ λ (biased; used by DAGC-A).

C(x) = Σ_{j: |x_j| ≥ λ} x_j e_j. The dropped entries have |x_j| < λ, so
‖C(x) − x‖² ≤ (d − nnz)·λ² ≤ d·λ² — an *absolute* bound, not a contraction: there is no δ > 0
with ‖C(x) − x‖² ≤ (1 − δ)‖x‖² for all x (a vector below λ everywhere is sent as zero), so
``delta`` is None and ``error_bound(d)`` = d·λ² (`spec/compressors.md` Part C; DAGC code ``ht``;
Lu et al., *DAGC: Data-aware adaptive gradient compression*, INFOCOM 2023). The number of kept
entries varies from message to message.

One pass over x (:func:`~.kernels.select.select_at_least`): per 64 entries, vectorised integer compares
of the bit patterns (|x_j| ≥ λ ⇔ bits(|x_j|) ≥ the bits of the smallest float ≥ λ) give a hit
mask and the finiteness check, and the mask's set bits give indices and values in order; a
strided sample of 4096 entries sizes the buffers. Wire format (after the 8-byte header): nnz
(uint32), nnz values x_j (float32, or float64 with ``fp64=true``), the nnz indices (fixed
⌈log₂d⌉ bits or Elias-omega gaps, whichever is smaller, header flag bit 1; :mod:`.kernels.sparse`).
Model bits: nnz·F + index bits of the encoding used (≤ nnz·(F + ⌈log₂d⌉), the spec's count).
"""
from __future__ import annotations

import numpy as np

from .kernels.select import select_at_least
from .kernels.sparse import cast_finite, float_bits
from .params import FP64_PARAM, Param
from .sparse_base import SparseCompressor


def threshold_bits(lam: float, dtype) -> np.unsignedinteger:
    """The bit pattern of the smallest float of ``dtype`` (float32/float64) that is ≥ λ ≥ 0:
    |x_j| ≥ λ ⇔ bits(|x_j|) ≥ it, for finite x_j of that dtype (IEEE order; +Inf if λ is above
    the largest finite float32)."""
    if np.dtype(dtype) == np.float64:
        return np.float64(lam).view(np.uint64)
    with np.errstate(over="ignore"):
        f = np.float32(lam)
    if float(f) < lam:
        f = np.nextafter(f, np.float32(np.inf))
    return f.view(np.uint32)


_SAMPLE = 4096
"""Entries (evenly strided) whose hit rate sizes the output buffers before the pass."""


def expected_hits(keys: np.ndarray, mask, lo) -> int:
    """A generous estimate of #{j: keys[j] & mask ≥ lo} from a strided sample (the mean + 4σ,
    + 2 sample entries; all of them when d is small): the selection buffers then rarely grow."""
    d = keys.shape[0]
    if d <= 16 * _SAMPLE:
        return d
    step = d // _SAMPLE
    p = np.count_nonzero((keys[step // 2::step][:_SAMPLE] & mask) >= lo) / _SAMPLE
    return min(d, int(d * (p + 4.0 * np.sqrt(p * (1.0 - p) / _SAMPLE) + 2.0 / _SAMPLE)) + 1024)


class Threshold(SparseCompressor):
    """Hard threshold: keep |x_j| ≥ λ; biased, ‖C(x) − x‖² ≤ d·λ² (no δ)."""
    collectives = ("gather", "allgather", "reduce-scatter")
    segment_wise = True

    name = "threshold"
    description = ("hard threshold: keep x_j with |x_j| >= lam (biased; ||C(x)-x||^2 <= d*lam^2; "
                   "DAGC-A); bits nnz*F + min(nnz*ceil(log2 d), Elias-omega gaps)")
    PARAMS = (
        Param("lam", float, low=0.0, doc="threshold lambda >= 0 (0 keeps every entry)"),
        FP64_PARAM,
    )
    FORMAT_ID = 6
    unbiased = False
    deterministic = True
    VARIABLE_NNZ = True

    def _init(self) -> None:
        self.lam = self._params["lam"]

    def omega(self, d: int) -> None:
        return None

    def delta(self, d: int) -> None:
        return None

    def error_bound(self, d: int) -> float:
        """Absolute bound: ‖C(x) − x‖² ≤ d·λ² for every x."""
        return d * self.lam**2

    def _compress(self, x: np.ndarray, seed: np.uint64) -> np.ndarray:
        d = x.shape[0]
        keys, mask, inf_bits = float_bits(x)
        lo = threshold_bits(self.lam, x.dtype)
        idx, bits, status = select_at_least(keys, mask, lo, inf_bits, expected_hits(keys, mask, lo))
        if status != 0:
            raise self._nonfinite_error(x)
        payload, voff, vbytes = self._new_sparse_payload(idx, d)
        if not cast_finite(bits.view(x.dtype), payload[voff:voff + vbytes].view(self._dtype())):
            raise self._nonfinite_error(x, "value range (float32)")
        return payload
