"""The fast Walsh–Hadamard transform and the seeded random sign flip of the rotated compressors.

``rotate(x, seed, y)``: y = (1/√n)·H_n·D·x_pad with D = diag(ε), ε_j = ±1 from bit 0 of word j of the
stream of ``seed`` (:func:`.prng.word_at`; ``unrotate_add`` reads the same signs), x zero-padded to n = len(y) (a power of two) and H_n the
Sylvester Hadamard matrix (H_1 = [1], H_{2m} = [[H_m, H_m], [H_m, −H_m]]). (1/√n)·H_n·D is orthogonal,
so ``unrotate`` applies its transpose, D·(1/√n)·H_n (H_n is symmetric).

:func:`fwht` is the in-place iterative butterfly, O(n log n) additions: log₂n passes of n/2 butterflies
(a, b) → (a + b, a − b), two passes fused (radix 4: one read and one write per entry for two passes).
The first passes (spans < ``BLOCK``) run block by block, each block of BLOCK floats staying in cache for
all its short spans; the passes with longer spans then stream over the array, two per sweep.
Ailon & Chazelle (2009); the rotation of DRIVE/EDEN (Vargaftik et al. 2021, 2022) and THC (Li et al.,
NSDI 2024). Word j of the stream of ``seed`` is ``mix64(seed + (j + 1)·γ)`` (the Weyl state carried).
"""
from __future__ import annotations

import numpy as np
from numba import njit

from .prng import GAMMA, mix64, state_at

BLOCK = 8192
"""Floats per cache-resident block of the first butterfly passes (64 KiB of float64)."""


@njit(cache=True)
def _radix2(y, h, start, stop):
    """One butterfly pass of span h over y[start:stop] (stop − start a multiple of 2h)."""
    for i in range(start, stop, 2 * h):
        for j in range(i, i + h):
            a = y[j]
            b = y[j + h]
            y[j] = a + b
            y[j + h] = a - b


@njit(cache=True)
def _radix4(y, h, start, stop):
    """The passes of spans h and 2h fused (one read and one write of each entry for two passes)
    over y[start:stop] (a multiple of 4h)."""
    for i in range(start, stop, 4 * h):
        for j in range(i, i + h):
            a = y[j]
            b = y[j + h]
            c = y[j + 2 * h]
            d = y[j + 3 * h]
            s0 = a + b
            s1 = a - b
            s2 = c + d
            s3 = c - d
            y[j] = s0 + s2
            y[j + h] = s1 + s3
            y[j + 2 * h] = s0 - s2
            y[j + 3 * h] = s1 - s3


@njit(cache=True)
def _first4(y, start, stop):
    """The passes of spans 1 and 2 fused, four entries at a time (no inner loop of length 1)."""
    for j in range(start, stop, 4):
        a = y[j]
        b = y[j + 1]
        c = y[j + 2]
        d = y[j + 3]
        s0 = a + b
        s1 = a - b
        s2 = c + d
        s3 = c - d
        y[j] = s0 + s2
        y[j + 1] = s1 + s3
        y[j + 2] = s0 - s2
        y[j + 3] = s1 - s3


@njit(cache=True)
def _passes(y, h, stop_span, start, stop):
    """Passes of spans h, 2h, … < stop_span over y[start:stop], two at a time where possible."""
    if h == 1 and stop_span >= 4:
        _first4(y, start, stop)
        h = 4
    while 4 * h <= stop_span:
        _radix4(y, h, start, stop)
        h *= 4
    if h < stop_span:
        _radix2(y, h, start, stop)
        h *= 2
    return h


@njit(cache=True)
def fwht(y):
    """In-place unnormalised Walsh–Hadamard transform of y (length a power of two): y ← H·y."""
    n = y.shape[0]
    blk = min(n, BLOCK)
    for s in range(0, n, blk):
        _passes(y, 1, blk, s, s + blk)
    _passes(y, blk, n, 0, n)


@njit(cache=True)
def sign_flip_pad(x, seed, y):
    """y[j] = ε_j·x[j] for j < len(x), 0 after (ε_j = ±1 from bit 0 of word j of ``seed``'s stream);
    returns False if x holds NaN/±Inf."""
    d = x.shape[0]
    w = state_at(seed, 0)
    ok = True
    for j in range(d):
        v = np.float64(x[j])
        if not np.isfinite(v):
            ok = False
        z = mix64(w)
        y[j] = -v if (z & np.uint64(1)) else v
        w += GAMMA
    for j in range(d, y.shape[0]):
        y[j] = 0.0
    return ok


@njit(cache=True)
def rotate(x, seed, y):
    """y = (1/√n)·H·D·x_pad (module doc), n = len(y) ≥ len(x) a power of two; False if x is not finite."""
    ok = sign_flip_pad(x, seed, y)
    fwht(y)
    c = 1.0 / np.sqrt(np.float64(y.shape[0]))
    for j in range(y.shape[0]):
        y[j] *= c
    return ok


@njit(cache=True)
def unrotate_add(y, seed, out, weight, accumulate):
    """out (length d ≤ len(y)) = or += weight·(D·(1/√n)·H·y)[:d]; y is overwritten (H·y in place)."""
    fwht(y)
    c = weight / np.sqrt(np.float64(y.shape[0]))
    w = state_at(seed, 0)
    for j in range(out.shape[0]):
        z = mix64(w)
        v = y[j] * c
        v = -v if (z & np.uint64(1)) else v
        if accumulate:
            out[j] += v
        else:
            out[j] = v
        w += GAMMA


def padded(d: int) -> int:
    """The smallest power of two ≥ d."""
    return 1 << max(0, (d - 1).bit_length())
