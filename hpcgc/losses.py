"""numba kernels of the objectives' gradients (:class:`hpcgc.problems.Objective` orchestrates).

A dense shard keeps BLAS for its two products (``A @ x``, ``Aᵀv``: their summation order is the
BLAS kernel's) and does the rest in two kernels — :func:`dloss_into` (the derivative, in place
between the products) and :func:`add_l2` — instead of numpy's eight elementwise calls and their
temporaries: the 285 × 30 shard of the default experiment spends more time in call overheads than
in arithmetic.

One kernel, :func:`csr_grad`, computes the whole gradient of a sparse (CSR) shard in one pass over
its rows — for row j: t_j = a_jᵀx, v_j = w_j·ℓ'(t_j, y_j), g += v_j·a_j — and then g + l2·x.
It replaces four scipy/numpy calls (``A @ x``, the elementwise derivative, ``A.T @ v``, the l2
term), each with its own dispatch and temporaries: on an a9a shard (5 427 rows, 75 163 nonzeros)
the gradient took 178 µs that way, of which ~60 µs were scipy's Python layers (building the
transpose, checking formats) — paid on every rank every iteration (``docs/performance.md``).

**Same bits as the scipy path.** scipy's ``csr_matvec`` sums each row from 0 in storage order;
``A.T @ v`` is ``csc_matvec`` on the same arrays, which adds ``data[k]·v_j`` into ``g[indices[k]]``
row after row, in storage order; the derivative is the numpy expression evaluated element by
element in the same operation order (e.g. logreg ``(−w·y)·σ(−y·t)``, σ(u) = 1/(1 + exp(−u)) as
``scipy.special.expit``), and exp is the C library's (numba lowers ``math.exp`` to it; the
per-row scalar code is not vectorised, so Intel SVML is never substituted here). No fast-math:
LLVM contracts no multiply-add. ``tests/test_losses.py`` compares the bits with the scipy path.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit

LOGREG, SIGMOID, RIDGE = 0, 1, 2
"""Loss codes of :func:`csr_grad` (``Objective.kind`` → code: :data:`CODES`)."""
CODES = {"logreg": LOGREG, "sigmoid-loss": SIGMOID, "ridge": RIDGE}


def unsigned(index: np.ndarray) -> np.ndarray:
    """A CSR index array (int32 or int64, ≥ 0) viewed as unsigned: numba then indexes without the
    negative-index wrap-around test, which halved the row products' speed (a9a shard: 79 → 36 µs,
    scipy's own loop 38 µs)."""
    return index.view(np.uint32 if index.dtype.itemsize == 4 else np.uint64)


@njit(cache=True)
def _sigma(u):
    return 1.0 / (1.0 + math.exp(-u))


@njit(cache=True)
def _dloss(code, t, y, w):
    """w·∂ℓ/∂t at t for label y: logreg ℓ = log(1 + e^(−yt)), sigmoid-loss (1 − σ(yt))², ridge
    ½(t − y)² — in the operation order of :meth:`hpcgc.problems.Objective.loss`'s numpy twins."""
    if code == LOGREG:
        return (-w * y) * _sigma(-y * t)
    if code == SIGMOID:
        u = y * t
        s = _sigma(-u)
        return ((-2.0 * w) * y) * _sigma(u) * (s * s)
    return w * (t - y)


@njit(cache=True)
def _derivatives(code, indptr, indices, data, x, y, w):
    """v_j = w_j ℓ'(a_jᵀx, y_j) for every row of the CSR matrix: the products in one loop, the
    derivatives in the next (the exp calls apart from the rows' short sums)."""
    m = indptr.shape[0] - 1
    v = np.empty(m)
    for j in range(m):
        t = 0.0
        for k in range(indptr[j], indptr[j + 1]):
            t += data[k] * x[indices[k]]
        v[j] = t
    for j in range(m):
        v[j] = _dloss(code, v[j], y[j], w[j])
    return v


@njit(cache=True)
def csr_grad(code, indptr, indices, data, x, y, w, l2, out):
    """out = Σ_j w_j ℓ'(a_jᵀx, y_j)·a_j + l2·x for the CSR matrix (indptr, indices, data) with rows
    a_j; ``out`` (length d) is overwritten. Three passes (products, derivatives, scatter): the
    exp calls apart from the row loops let the rows' short sums overlap."""
    m = indptr.shape[0] - 1
    v = _derivatives(code, indptr, indices, data, x, y, w)
    out[:] = 0.0
    for j in range(m):
        vj = v[j]
        for k in range(indptr[j], indptr[j + 1]):
            out[indices[k]] += data[k] * vj
    for i in range(out.shape[0]):
        out[i] = out[i] + l2 * x[i]


GRAD, MINUS, ACCUMULATE = 0, 1, 2
"""What :func:`csr_grad_compact` writes: out = g; out = g − h; out = out + γ·g (error feedback)."""


def compact_columns(indices: np.ndarray, nnz: int) -> tuple[np.ndarray, np.ndarray]:
    """(cols, cidx): the sorted distinct columns of a CSR shard and each nonzero's position among
    them (cols[cidx[k]] = indices[k]), uint32 when the positions fit — the layout of
    :func:`csr_grad_compact`'s scatter, made once per shard."""
    cols, cidx = np.unique(indices[:nnz], return_inverse=True)
    return unsigned(cols.astype(indices.dtype)), cidx.astype(np.uint32 if cols.size < 2**32 else np.uint64)


@njit(cache=True)
def csr_grad_compact(code, indptr, indices, data, cols, cidx, x, y, w, l2, mode, h, gamma, out):
    """:func:`csr_grad` with the scatter into a compact buffer of the shard's distinct columns
    (``cols``, ``cidx``: :func:`compact_columns`) and one pass over the d-vectors that writes the
    result where it is used (``mode``):

        GRAD        out = g                   MINUS       out = g − h   (DIANA's Δ; h read)
        ACCUMULATE  out = out + γ·g           (EF's e ← e + γ·g)

    with g = Σ_j w_j ℓ'(a_jᵀx, y_j)·a_j + l2·x. Instead of zeroing a d-vector, scattering into it
    and passing over it again for the ℓ2 term (and again for g − h or e + γg, with a temporary),
    the d-vectors are read and written once: x, out (and h). The same bits as :func:`csr_grad`
    followed by numpy's ``g − h`` / ``out + γ·g``: each column's scatter sum starts from 0.0 and
    adds the same products in the same (storage) order, an untouched column's gradient is
    0.0 + l2·x_i as before, and the last operation is numpy's, element by element
    (``tests/test_losses.py``)."""
    m = indptr.shape[0] - 1
    v = _derivatives(code, indptr, indices, data, x, y, w)
    u = cols.shape[0]
    gc = np.zeros(u)
    for j in range(m):
        vj = v[j]
        for k in range(indptr[j], indptr[j + 1]):
            gc[cidx[k]] += data[k] * vj
    _write_blocked(cols, gc, x, l2, mode, h, gamma, out)


OUT_BLOCK = 8192
"""Coordinates per block of :func:`_write_blocked`: 64 KiB of x and of out (and h), which stay in
L2 between the block's dense pass and its fix-up of the touched columns."""


@njit(cache=True)
def _write_blocked(cols, gc, x, l2, mode, h, gamma, out):
    """The pass over the d-vectors of :func:`csr_grad_compact`, block by block: first the whole block
    as if no column were touched — a loop without a branch per entry, which the compiler vectorises
    and the hardware prefetcher streams from memory — then the block's touched columns rewritten
    from the same block's lines, now in cache. One pass with a test "is i the next touched
    column?" per entry mispredicted at every scattered column (≈ 43 000 on a does-it-pay shard:
    0.58 ms against 0.39 this way, ``scripts/phase-kernels.py``); gathering the touched columns
    *before* the dense pass (604f058, reverted) waited on memory for each of them. Every entry's
    value is the same expression as in one pass: ``0.0 + l2·x_i`` (or ``gc + l2·x_i``), then the
    mode's operation; under ``ACCUMULATE`` the block's new values go to ``keep`` (L1) first and are
    copied into out after the fix-up, which needs out's old values."""
    u = cols.shape[0]
    d = out.shape[0]
    keep = np.empty(min(OUT_BLOCK, d) if mode == ACCUMULATE else 0)
    c = 0
    for b0 in range(0, d, OUT_BLOCK):
        b1 = min(b0 + OUT_BLOCK, d)
        n = b1 - b0
        xb, ob = x[b0:b1], out[b0:b1]         # views: loops from 0, which the compiler vectorises
        if mode == MINUS:
            hb = h[b0:b1]
            for i in range(n):
                ob[i] = (0.0 + l2 * xb[i]) - hb[i]
            while c < u and cols[c] < b1:
                i = cols[c]
                out[i] = (gc[c] + l2 * x[i]) - h[i]
                c += 1
        elif mode == ACCUMULATE:
            kb = keep[:n]
            for i in range(n):
                kb[i] = ob[i] + gamma * (0.0 + l2 * xb[i])
            while c < u and cols[c] < b1:
                i = cols[c]
                keep[i - b0] = out[i] + gamma * (gc[c] + l2 * x[i])
                c += 1
            for i in range(n):
                ob[i] = kb[i]
        else:
            for i in range(n):
                ob[i] = 0.0 + l2 * xb[i]
            while c < u and cols[c] < b1:
                i = cols[c]
                out[i] = gc[c] + l2 * x[i]
                c += 1


@njit(cache=True)
def dloss_into(code, t, y, w):
    """t_j ← w_j·ℓ'(t_j, y_j) in place: a dense shard's derivative between its two BLAS products
    (numpy's elementwise expression, six calls with temporaries, in one pass — same operations in
    the same order, :func:`_dloss`)."""
    for j in range(t.shape[0]):
        t[j] = _dloss(code, t[j], y[j], w[j])


@njit(cache=True)
def add_l2(g, x, l2):
    """g ← g + l2·x in place (numpy's ``g + l2 * x``, element by element)."""
    for i in range(g.shape[0]):
        g[i] = g[i] + l2 * x[i]


def warm() -> None:
    """Load (or compile) :func:`csr_grad` for the int32 indices of every CSR matrix with fewer than
    2³¹ nonzeros, so that no run compiles it inside its first iteration
    (:func:`hpcgc.run.experiment.warm_jit`); larger matrices' int64 indices compile on first use."""
    one, idx = np.ones(1), np.array([0, 1], dtype=np.uint32)
    csr_grad(LOGREG, idx, idx[:1], one, np.zeros(1), one, one, 0.0, np.empty(1))
    csr_grad_compact(LOGREG, idx, idx[:1], one, idx[:1], idx[:1], np.zeros(1), one, one, 0.0, GRAD, one, 1.0,
                     np.empty(1))


def warm_dense() -> None:
    """Load (or compile) the dense gradient's kernels (:func:`dloss_into`, :func:`add_l2`)."""
    one = np.ones(1)
    dloss_into(LOGREG, one.copy(), one, one)
    add_l2(one.copy(), one, 0.0)
