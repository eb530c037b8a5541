"""numba kernels of the algorithms' server steps (the algorithms orchestrate; they call these).

:func:`shifted_step` is the step of DIANA, DCGD (Mishchenko et al. 2019, arXiv 1901.09269,
`spec/diana.md` §B.5) and DIANA+/DCGD+ (Wang, Safaryan, Richtárik 2022, Alg. 1–2), from the
aggregated message m:

    v = β·v + (h + m)   (β = 0: v = h + m),    x ← x − γ·v,    h ← h + α·m

one pass over the five vectors instead of five numpy passes (8 reads and 5 writes of d float64:
the server phase at d = 2²⁰ is memory-bound), with the numpy expressions' operations in the same
order — the same bits (``tests/test_step_kernels.py``). The ℓ1 prox, when any, follows it.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from ..compressors.kernels.sparse import clz64, prefetch


@njit(cache=True)
def shifted_step(x, h, v, m, gamma, alpha, beta):
    """In place: v = ((β·v) + h) + m when β ≠ 0, else h + m; x = x − v·γ; h = h + m·α when α ≠ 0."""
    for i in range(x.shape[0]):
        if beta != 0.0:
            vi = (v[i] * beta + h[i]) + m[i]
        else:
            vi = h[i] + m[i]
        v[i] = vi
        x[i] = x[i] - vi * gamma
        if alpha != 0.0:
            h[i] = h[i] + m[i] * alpha


@njit(cache=True)
def shifted_step_sum(x, h, v, total, scale, one, gamma, alpha, beta):
    """:func:`shifted_step` from an Allreduce's dense sum instead of the aggregate m: in place, with
    m_i = 0.0 + scale·total_i (numpy's ``m[:] = 0; m += scale * total``, the product in the sum's
    own type — float32 for the float32 wire, as numpy multiplies a float32 array by a Python
    float; ``one``: scale is 1 and numpy adds the sum itself), without writing m: one pass reads
    the sum, x, h, v and writes x, v, h — instead of zeroing m, adding the sum into it and the
    five-vector step. The same bits as numpy + :func:`shifted_step` (``tests/test_step_kernels.py``)."""
    for i in range(x.shape[0]):
        if one:
            mi = 0.0 + float(total[i])
        else:
            mi = 0.0 + float(scale * total[i])
        if beta != 0.0:
            vi = (v[i] * beta + h[i]) + mi
        else:
            vi = h[i] + mi
        v[i] = vi
        x[i] = x[i] - vi * gamma
        if alpha != 0.0:
            h[i] = h[i] + mi * alpha


@njit(cache=True)
def plain_step_sum(x, total, scale, one, gamma):
    """DCGD's step from an Allreduce's dense sum (α = 0, β = 0: h ≡ +0.0, v unread): x_i ←
    x_i − (h_i + m_i)·γ = x_i − m_i·γ with m_i = 0.0 + scale·total_i as in :func:`shifted_step_sum`
    (h_i + m_i = m_i exactly: m_i is never −0.0, since 0.0 + (±0) = +0.0). Reads the sum and x,
    writes x: 20 bytes per coordinate on a float32 wire, the mathematics' own (``hpcgc.traffic``)."""
    for i in range(x.shape[0]):
        if one:
            mi = 0.0 + float(total[i])
        else:
            mi = 0.0 + float(scale * total[i])
        x[i] = x[i] - mi * gamma


def warm() -> None:
    """Load (or compile) the kernels before a run's timed loop (:func:`hpcgc.run.experiment.warm_jit`)."""
    a = np.zeros(1)
    shifted_step(a, a.copy(), a.copy(), a.copy(), 1.0, 1.0, 0.5)
    for dt in (np.float32, np.float64):
        step_from_sum(a, a.copy(), a.copy(), np.zeros(1, dtype=dt), 0.5, 1.0, 1.0, 0.5, True)
        step_from_sum(a, a.copy(), a.copy(), np.zeros(1, dtype=dt), 0.5, 1.0, 0.0, 0.0, False)
    sparse_step(a, np.zeros(1, dtype=np.int64), a.copy(), np.array([0, 1], dtype=np.int64), np.zeros(4))


def step_from_sum(x, h, v, total, scale: float, gamma: float, alpha: float, beta: float, shifts: bool) -> None:
    """The DIANA/DCGD step from an Allreduce's dense sum (the scale in the sum's type, as numpy's
    ``scale * total``): :func:`plain_step_sum` for DCGD without momentum (``shifts`` False, β = 0:
    neither h nor v is read or written — v is read only when β ≠ 0), else :func:`shifted_step_sum`."""
    s, one = total.dtype.type(scale), scale == 1.0
    if not shifts and alpha == 0.0 and beta == 0.0:
        plain_step_sum(x, total, s, one, gamma)
    else:
        shifted_step_sum(x, h, v, total, s, one, gamma, alpha, beta)


PREFETCH = 128
"""Entries ahead of the x update at which :func:`sparse_step` asks for x's cache line: from memory,
128 ahead arrive in time where 64 did not (``scripts/ef-server-parts.py --evict``: the step 165 →
138–144 µs at d = 2²⁰, n·k = 32 768; docs/performance.md, "EF + top-k: what bounds the server step")."""


@njit(cache=True)
def block_ends(idx, starts, shift, nb):
    """ends[i, b] = the first entry of message i (idx[starts[i]:starts[i + 1]], increasing) at or
    past block b (coordinates ≥ b·2^shift), for b = 0 … nb: one branch-free pass over the entries
    (each writes one past itself at its block + 1; the last write wins), then a running maximum."""
    n = starts.shape[0] - 1
    ends = np.zeros((n, nb + 1), dtype=np.int64)
    for i in range(n):
        for q in range(starts[i], starts[i + 1]):
            ends[i, (np.uint64(idx[q]) >> np.uint64(shift)) + np.uint64(1)] = q + 1
        ends[i, 0] = starts[i]
        for b in range(1, nb + 1):
            ends[i, b] = max(ends[i, b], ends[i, b - 1])
    return ends


@njit(cache=True)
def sparse_step(x, idx, vals, starts, block):
    """x_j ← x_j − m_j with m_j = ((0.0 + v_0j) + v_1j) + … summed over the messages that hold j,
    in message order: EF's step from n sparse messages (Karimireddy et al. 2019, Alg. 2,
    x ← x − Σ_i w_i C(e_i)). Message i is idx[starts[i]:starts[i + 1]] (increasing, in [0, d))
    with the weighted values vals (w_i·s_i·value, float64) at the same places.

    x is visited in blocks of len(block) coordinates (``block``: float64 work space of a power of
    two entries, +0.0 on entry and on return; 4096 is 32 KiB, in L1): the messages but the last
    add their entries in the block into it in message order; the last message's entries complete
    their sums and are applied at once, x_j ← x_j − (block_j + v), block_j ← 0; then the other
    messages' entries x_j ← x_j − block_j, block_j ← 0 — x is touched once per entry, in ascending
    blocks, and no d-vector aggregate exists. Where each message enters each block comes from one
    branch-free pass (:func:`block_ends`). The entries' x lines are mostly not in cache (the
    gradient evicts x between steps; EF's decode asks for them first) and their addresses are
    known ahead: the loops ask for the line PREFETCH entries ahead
    (:func:`~hpcgc.compressors.kernels.sparse.prefetch`). The same bits as decoding every message
    into a zero d-vector m (m_j += v), then x −= m: at a repeated j the later visit subtracts
    +0.0, which changes no float64 (``tests/test_step_kernels.py``).

    Returns Σ_j (x_j,new² − x_j,old²) over the touched entries (each visit's own change; a
    repeated j's later visits change nothing): ‖x‖²'s change, from which the caller keeps the
    divergence test's ‖x‖² without a pass over the d coordinates (:meth:`hpcgc.algorithms.ef.EF.step_norm_sq`)."""
    d = x.shape[0]
    n = starts.shape[0] - 1
    if n == 0:
        return 0.0
    bs = block.shape[0]
    shift = 63 - clz64(np.int64(bs))
    nb = (d + bs - 1) >> shift
    ends = block_ends(idx, starts, shift, nb)
    last = n - 1
    top = starts[n] - 1
    dsq = 0.0
    for b in range(nb):
        b0 = np.uint64(b) << np.uint64(shift)
        for i in range(last):
            for q in range(ends[i, b], ends[i, b + 1]):
                block[np.uint64(idx[q]) - b0] += vals[q]
                prefetch(x, idx[min(q + PREFETCH, top)])
        for q in range(ends[last, b], ends[last, b + 1]):
            j = np.uint64(idx[q])
            old = x[j]
            new = old - (block[j - b0] + vals[q])
            x[j] = new
            dsq += new * new - old * old
            block[j - b0] = 0.0
            prefetch(x, idx[min(q + PREFETCH, top)])
        for i in range(last):
            for q in range(ends[i, b], ends[i, b + 1]):
                j = np.uint64(idx[q])
                old = x[j]
                new = old - block[j - b0]
                x[j] = new
                dsq += new * new - old * old
                block[j - b0] = 0.0
    return dsq
