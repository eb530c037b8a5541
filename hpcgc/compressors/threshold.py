"""``threshold``: hard threshold, keep every x_j with |x_j| ≥ λ (biased; used by DAGC-A).

C(x) = Σ_{j: |x_j| ≥ λ} x_j e_j. The dropped entries have |x_j| < λ, so
‖C(x) − x‖² ≤ (d − nnz)·λ² ≤ d·λ² — an *absolute* bound, not a contraction: there is no δ > 0
with ‖C(x) − x‖² ≤ (1 − δ)‖x‖² for all x (a vector below λ everywhere is sent as zero), so
``delta`` is None and ``error_bound(d)`` = d·λ² (`spec/compressors.md` Part C; DAGC code ``ht``;
Lu et al., *DAGC: Data-aware adaptive gradient compression*, INFOCOM 2023). The number of kept
entries varies from message to message.

Two passes over x: count (and check finiteness), then gather indices and values. Wire format
(after the 8-byte header): nnz (uint32), nnz values x_j (float32, or float64 with
``fp64=true``), the nnz indices (fixed ⌈log₂d⌉ bits or Elias-omega gaps, whichever is smaller,
header flag bit 1; :mod:`.sparse`). Model bits: nnz·F + index bits of the encoding used
(≤ nnz·(F + ⌈log₂d⌉), the spec's count).
"""
from __future__ import annotations

import numpy as np
from numba import njit

from .base import FP64_PARAM, Param
from .sparse import SparseCompressor


@njit(cache=True)
def count_at_least(x, lam):
    """(#{j: |x_j| ≥ lam}, 0.0 or NaN if x holds NaN/±Inf)."""
    n = 0
    chk = 0.0
    for i in range(x.shape[0]):
        v = np.float64(x[i])
        n += np.int64(abs(v) >= lam)
        chk += v * 0.0
    return n, chk


@njit(cache=True)
def gather_at_least(x, lam, idx, values):
    """idx, values ← the j with |x_j| ≥ lam and x_j (cast to values' dtype), in index order;
    returns 0.0, or NaN if a cast value is non-finite (float32 overflow)."""
    n = 0
    chk = 0.0
    for i in range(x.shape[0]):
        v = np.float64(x[i])
        if abs(v) >= lam:
            idx[n] = i
            values[n] = v
            chk += values[n] * 0.0
            n += 1
    return chk


class Threshold(SparseCompressor):
    """Hard threshold: keep |x_j| ≥ λ; biased, ‖C(x) − x‖² ≤ d·λ² (no δ)."""

    name = "threshold"
    description = ("hard threshold: keep x_j with |x_j| >= lam (biased; ||C(x)-x||^2 <= d*lam^2; "
                   "DAGC-A); bits nnz*F + min(nnz*ceil(log2 d), Elias-omega gaps)")
    PARAMS = (
        Param("lam", float, low=0.0, doc="threshold lambda >= 0 (0 keeps every entry)"),
        FP64_PARAM,
    )
    FORMAT_ID = 6
    unbiased = False
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
        nnz, chk = count_at_least(x, self.lam)
        if chk != 0.0:
            raise self._nonfinite_error(x)
        idx = np.empty(nnz, dtype=np.int64)
        values = np.empty(nnz, dtype=self._dtype())
        if gather_at_least(x, self.lam, idx, values) != 0.0:
            raise self._nonfinite_error(x, "value range (float32)")
        payload, voff, vbytes = self._new_sparse_payload(idx, d)
        payload[voff:voff + vbytes] = values.view(np.uint8)
        return payload
