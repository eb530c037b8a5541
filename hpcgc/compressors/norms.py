"""Block norms shared by the dithering compressors (QSGD buckets, DIANA Quant_p blocks).

Block ``l`` is ``x[l*b : min((l+1)*b, d)]``; the caller sizes ``norms`` as ceil(d/b). A NaN or
±Inf anywhere in a block makes that block's norm non-finite, so callers detect bad input from the
m norms alone (no extra pass over x).
"""
from __future__ import annotations

import numpy as np
from numba import njit


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
        acc = 0.0
        for i in range(xb.shape[0]):
            v = np.float64(xb[i])
            acc += v * v
        if acc >= 1e-280 and acc <= 1e280:
            norms[l] = np.sqrt(acc)
            continue
        m = 0.0
        chk = 0.0
        for i in range(xb.shape[0]):
            a = abs(np.float64(xb[i]))
            chk += a * 0.0
            m = max(m, a)
        m += chk                                   # NaN if the block holds NaN/Inf
        if m > 0.0 and m < np.inf:
            acc = 0.0
            for i in range(xb.shape[0]):
                v = np.float64(xb[i]) / m
                acc += v * v
            norms[l] = m * np.sqrt(acc)
        else:
            norms[l] = m                           # 0, or non-finite


@njit(cache=True)
def block_norms_linf(x, block, norms):
    """norms[l] = ‖x(l)‖_∞; NaN if the block holds a NaN (max alone would skip it)."""
    d = x.shape[0]
    for l in range(norms.shape[0]):
        xb = x[l * block:min((l + 1) * block, d)]
        m = 0.0
        chk = 0.0
        for i in range(xb.shape[0]):
            a = abs(np.float64(xb[i]))
            chk += a * 0.0
            if a > m:
                m = a
        norms[l] = m + chk


def n_blocks(d: int, block: int) -> int:
    return -(-d // block)
