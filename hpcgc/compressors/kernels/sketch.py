"""Count-sketch kernels (Charikar, Chen, Farach-Colton 2002; FetchSGD, Rothchild et al. ICML 2020).

Row r of an R×C table hashes coordinate j to bucket h_r(j) ∈ [0, C) with sign s_r(j) = ±1, both from
one 64-bit word z = mix64(mix64(seed + r·γ) + j·γ) (:mod:`.prng`): h = ⌊(z >> 32)·C / 2³²⌋ (Lemire's
multiply-shift), s = −1 if bit 0 of z is set. ``sketch_add``: table[r, h_r(j)] += s_r(j)·w·x_j, a linear
map, so sketches with the same seed add up. ``unsketch``: per coordinate the R row estimates
s_r(j)·table[r, h_r(j)], their mean (``median=False``) or median.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from .prng import GAMMA, mix64

_LOW32 = np.uint64(0xFFFFFFFF)
_S32 = np.uint64(32)
_ONE = np.uint64(1)


@njit(cache=True)
def row_seed(seed, r):
    return mix64(np.uint64(seed) + np.uint64(r + 1) * GAMMA)


@njit(cache=True)
def sketch_add(x, seed, weight, table):
    """table (R×C float64) += sketch of weight·x; returns False if x holds NaN/±Inf."""
    R, C = table.shape
    cc = np.uint64(C)
    ok = True
    for r in range(R):
        w = row_seed(seed, r)
        row = table[r]
        for j in range(x.shape[0]):
            w += GAMMA
            z = mix64(w)
            v = np.float64(x[j])
            if not np.isfinite(v):
                ok = False
            h = np.int64(((z >> _S32) * cc) >> _S32)
            row[h] += -weight * v if (z & _ONE) else weight * v
    return ok


@njit(cache=True)
def unsketch(table, seed, median, out):
    """out[j] = mean (or median) over rows r of s_r(j)·table[r, h_r(j)], for j < len(out)."""
    R, C = table.shape
    cc = np.uint64(C)
    d = out.shape[0]
    if not median or R == 1:
        for j in range(d):
            out[j] = 0.0
        for r in range(R):
            w = row_seed(seed, r)
            row = table[r]
            for j in range(d):
                w += GAMMA
                z = mix64(w)
                h = np.int64(((z >> _S32) * cc) >> _S32)
                out[j] += -row[h] if (z & _ONE) else row[h]
        for j in range(d):
            out[j] /= R
        return
    est = np.empty((R, d))
    for r in range(R):
        w = row_seed(seed, r)
        row = table[r]
        for j in range(d):
            w += GAMMA
            z = mix64(w)
            h = np.int64(((z >> _S32) * cc) >> _S32)
            est[r, j] = -row[h] if (z & _ONE) else row[h]
    buf = np.empty(R)
    for j in range(d):
        for r in range(R):
            buf[r] = est[r, j]
        out[j] = np.median(buf)
