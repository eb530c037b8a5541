"""Reductions shared by the compressors: block norms (QSGD buckets, DIANA Quant_p blocks) and
the cheap all-finite test.

Block ``l`` is ``x[l*b : min((l+1)*b, d)]``; the caller sizes ``norms`` as ceil(d/b). A NaN or
±Inf anywhere in a block makes that block's norm non-finite, so callers detect bad input from the
m norms alone (no extra pass over x).
"""
from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def nonfinite_flag(x):
    """Σ x_i·0 with 4 accumulators: 0.0 if every x_i is finite, NaN otherwise."""
    n = x.shape[0]
    a0 = 0.0
    a1 = 0.0
    a2 = 0.0
    a3 = 0.0
    for q in range(n // 4):
        a0 += np.float64(x[4 * q]) * 0.0
        a1 += np.float64(x[4 * q + 1]) * 0.0
        a2 += np.float64(x[4 * q + 2]) * 0.0
        a3 += np.float64(x[4 * q + 3]) * 0.0
    for i in range((n // 4) * 4, n):
        a0 += np.float64(x[i]) * 0.0
    return (a0 + a1) + (a2 + a3)


@njit(cache=True)
def sum_squares(x):
    """Σ x_i² in float64 with 4 independent accumulators (a fixed order: deterministic, and
    4× less add latency than one running sum)."""
    n = x.shape[0]
    a0 = 0.0
    a1 = 0.0
    a2 = 0.0
    a3 = 0.0
    for q in range(n // 4):
        v0 = np.float64(x[4 * q])
        v1 = np.float64(x[4 * q + 1])
        v2 = np.float64(x[4 * q + 2])
        v3 = np.float64(x[4 * q + 3])
        a0 += v0 * v0
        a1 += v1 * v1
        a2 += v2 * v2
        a3 += v3 * v3
    for i in range((n // 4) * 4, n):
        v = np.float64(x[i])
        a0 += v * v
    return (a0 + a1) + (a2 + a3)


@njit(cache=True)
def block_norms_l2(x, block, norms):
    """norms[l] = ‖x(l)‖₂, accumulated in float64.

    When the plain sum of squares leaves [1e-280, 1e280] (zero, tiny, huge or non-finite blocks)
    the block is recomputed scaled by its max, as BLAS dnrm2 does, so tiny vectors do not
    underflow to a zero norm and finite huge ones do not overflow.
    """
    d = x.shape[0]
    for l in range(norms.shape[0]):
        xb = x[l * block:min((l + 1) * block, d)]
        acc = sum_squares(xb)
        if acc >= 1e-280 and acc <= 1e280:
            norms[l] = np.sqrt(acc)
            continue
        m = max_abs(xb)                            # NaN if the block holds NaN/Inf
        if m > 0.0 and m < np.inf:
            acc = 0.0
            for i in range(xb.shape[0]):
                v = np.float64(xb[i]) / m
                acc += v * v
            norms[l] = m * np.sqrt(acc)
        else:
            norms[l] = m                           # 0, or non-finite


@njit(cache=True)
def max_abs(x):
    """max |x_i| (0 for an empty slice), NaN if x holds NaN or ±Inf; 4 independent lanes."""
    n = x.shape[0]
    m0 = 0.0
    m1 = 0.0
    m2 = 0.0
    m3 = 0.0
    for q in range(n // 4):
        m0 = max(m0, abs(np.float64(x[4 * q])))
        m1 = max(m1, abs(np.float64(x[4 * q + 1])))
        m2 = max(m2, abs(np.float64(x[4 * q + 2])))
        m3 = max(m3, abs(np.float64(x[4 * q + 3])))
    for i in range((n // 4) * 4, n):
        m0 = max(m0, abs(np.float64(x[i])))
    return max(max(m0, m1), max(m2, m3)) + nonfinite_flag(x)


@njit(cache=True)
def block_norms_linf(x, block, norms):
    """norms[l] = ‖x(l)‖_∞; NaN if the block holds NaN or ±Inf."""
    d = x.shape[0]
    for l in range(norms.shape[0]):
        norms[l] = max_abs(x[l * block:min((l + 1) * block, d)])


def n_blocks(d: int, block: int) -> int:
    return -(-d // block)
