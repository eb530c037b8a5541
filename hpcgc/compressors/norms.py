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
    """norms[l] = ‖x(l)‖₂ (accumulated in float64)."""
    d = x.shape[0]
    for l in range(norms.shape[0]):
        start = l * block
        stop = min(start + block, d)
        acc = 0.0
        for i in range(start, stop):
            v = np.float64(x[i])
            acc += v * v
        norms[l] = np.sqrt(acc)


@njit(cache=True)
def block_norms_linf(x, block, norms):
    """norms[l] = ‖x(l)‖_∞; NaN if the block holds a NaN (max alone would skip it)."""
    d = x.shape[0]
    for l in range(norms.shape[0]):
        start = l * block
        stop = min(start + block, d)
        m = 0.0
        chk = 0.0
        for i in range(start, stop):
            a = abs(np.float64(x[i]))
            chk += a * 0.0
            if a > m:
                m = a
        norms[l] = m + chk


def n_blocks(d: int, block: int) -> int:
    return -(-d // block)
