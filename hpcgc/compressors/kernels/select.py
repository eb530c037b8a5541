"""The selection passes over a float vector's bit patterns: every j with |x_j| ≥ a threshold, in
increasing index order, with the NaN/±Inf check on the way (moved out of :mod:`.sparse` on
2026-11-27; the same kernels).

* :func:`select_into` / :func:`select_at_least` — from the first entry up (``threshold``);
* :func:`select_desc` — from the *last* entry down to the first, filling the buffers from their
  end, so that the result is in increasing index order as before (``topk``). In a run, EF's
  memory e was just written from its first entry to its last by the gradient's pass; whatever of
  it the last-level cache still holds is its end, which a descending pass reads first, before its
  own traffic evicts it (an ascending pass evicts the lines it is about to read:
  least-recently-used order).

Both take 64 entries at a time (:func:`group_hits`: vectorised compares into a 64-bit hit mask),
ask for x's lines ``SELECT_AHEAD`` entries ahead, and take the set bits of the mask without a
branch per entry.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from .sparse import clz64, ctz64, popcount64, prefetch, scratch

SELECT_UNROLL = 2
"""Set bits of a 64-entry hit mask that :func:`select_at_least` writes unconditionally: a mask
with more hits loops over the rest (rare when few entries are selected)."""


SELECT_AHEAD = 2048
"""Keys ahead at which :func:`select_into` asks for x's lines (the stream prefetch alone: ≈ 1.4× slower)."""


SELECT_FULL = 2
"""Status of :func:`select_into`: the buffers may not hold the next 64 entries' hits."""
SELECT_DENSE = 24
"""Hits in a 64-entry group above which :func:`select_into` compacts all 64 entries branch-free
instead of walking the set bits."""


@njit(cache=True, inline="always")
def group_hits(keys, b, mask, lo, inf_bits):
    """(hit, bad) of the 64 keys from ``b`` (uint64): bit i of ``hit`` set when
    ``keys[b + i] & mask ≥ lo``; ``bad`` when one of them is NaN/±Inf (≥ ``inf_bits``). Vectorised
    compares, no branch per entry; shared by :func:`select_into` and
    :func:`select_desc`."""
    hit = np.uint64(0)
    for i in range(64):
        hit |= np.uint64((keys[b + np.uint64(i)] & mask) >= lo) << np.uint64(i)
    bad = False
    for i in range(64):
        bad |= (keys[b + np.uint64(i)] & mask) >= inf_bits
    return hit, bad


@njit(cache=True)
def select_into(keys, mask, lo, inf_bits, start, idx, bits, c):
    """Append to idx, bits (from slot c) every j ≥ ``start`` (a multiple of 64) with
    ``keys[j] & mask ≥ lo`` and its key, in increasing order; ``keys, mask, inf_bits`` =
    :func:`float_bits` (x), so the test is |x_j| ≥ the float with bits ``lo``. The same pass
    checks that every x_j (j ≥ start) is finite.

    Returns (c, resume, status): status 0 (done: c entries), 1 (x holds NaN/±Inf) or
    ``SELECT_FULL`` (fewer than 64 + SELECT_UNROLL free slots: grow the buffers and call again
    from ``resume`` with the same c).

    Per group of 64 entries, x's lines SELECT_AHEAD entries ahead are asked for
    (:func:`prefetch`), vectorised compares build a 64-bit hit mask and a NaN/Inf flag;
    the set bits of the mask (tzcnt) give the indices: no branch per entry. Indices are unsigned
    and nothing is sliced inside the loop (no wrap-around fix-ups, no reference counting).
    """
    n = keys.shape[0]
    room = idx.shape[0] - 64 - SELECT_UNROLL
    nfull = n - n % 64
    one = np.uint64(1)
    for w0 in range(start, nfull, 64):
        if c > room:
            return c, w0, SELECT_FULL
        for t in range(0, 64, 8):              # a 64-byte line per 8 keys, SELECT_AHEAD keys ahead
            prefetch(keys, min(w0 + SELECT_AHEAD + t, n - 1))
        b = np.uint64(w0)
        hit, bad = group_hits(keys, b, mask, lo, inf_bits)
        if bad:
            return c, w0, 1
        cnt = popcount64(hit)
        q = np.uint64(c)
        if cnt > SELECT_DENSE:
            for i in range(64):
                idx[q] = w0 + i
                bits[q] = keys[b + np.uint64(i)]
                q += (hit >> np.uint64(i)) & one
        else:
            for u in range(SELECT_UNROLL):     # slots past the hits are overwritten later
                j = np.uint64(ctz64(hit) & 63)
                idx[q + np.uint64(u)] = w0 + np.int64(j)
                bits[q + np.uint64(u)] = keys[b + j]
                hit &= hit - one
            q += np.uint64(SELECT_UNROLL)
            while hit:
                j = np.uint64(ctz64(hit))
                idx[q] = w0 + np.int64(j)
                bits[q] = keys[b + j]
                hit &= hit - one
                q += one
        c += cnt
    if nfull < n:                                # the last n mod 64 entries
        if c > room:
            return c, nfull, SELECT_FULL
        for j in range(nfull, n):
            a = keys[j] & mask
            if a >= inf_bits:
                return c, j, 1
            idx[c] = j
            bits[c] = keys[j]
            c += np.int64(a >= lo)
    return c, n, 0


def select_buffers(cap: int, dtype) -> tuple[np.ndarray, np.ndarray]:
    """The work arrays (idx int64, bits of ``dtype``; :func:`scratch`) for a selection pass that
    should find about ``cap`` entries: ``cap`` + one 64-entry group + SELECT_UNROLL + 1 slots, so
    :func:`select_into` / :func:`select_desc` report SELECT_FULL only past ``cap``."""
    size = max(int(cap), 0) + 64 + SELECT_UNROLL + 1
    return scratch("select-idx", size, np.int64), scratch("select-bits", size, dtype)


def select_at_least(keys: np.ndarray, mask, lo, inf_bits, cap: int, grow: bool = True
                    ) -> tuple[np.ndarray, np.ndarray, int]:
    """(idx, bits, status) for every j with ``keys[j] & mask ≥ lo`` (:func:`select_into`): idx
    int64 and the keys of x_j, status 0, 1 (x holds NaN/±Inf) or ``SELECT_FULL`` (more than
    about ``cap`` entries qualify and not ``grow``; else the buffers double as needed). idx and
    bits are work arrays (:func:`scratch`): valid until the next call in this thread."""
    idx, bits = select_buffers(cap, keys.dtype)
    size = idx.shape[0]
    c, start = 0, 0
    while True:
        c, start, status = select_into(keys, mask, lo, inf_bits, start, idx, bits, c)
        if status != SELECT_FULL or not grow:
            return idx[:c], bits[:c], status
        size = 2 * size
        idx2 = np.empty(size, dtype=np.int64)
        bits2 = np.empty(size, dtype=keys.dtype)
        idx2[:c] = idx[:c]
        bits2[:c] = bits[:c]
        idx, bits = idx2, bits2


@njit(cache=True)
def select_desc(keys, mask, lo, inf_bits, idx, bits):
    """Every j with ``keys[j] & mask ≥ lo`` and its key into the *ends* of idx, bits, in
    increasing order, with the check that every x_j is finite (``keys, mask, inf_bits`` =
    :func:`~.sparse.float_bits` (x)); x is read from its last entry down (module docstring).

    Returns (first, status): the entries are idx[first:], bits[first:]; status 0, 1 (x holds
    NaN/±Inf) or ``SELECT_FULL`` (the buffers cannot hold them all: fewer than 64 + SELECT_UNROLL
    free slots before a group of 64). Per group of 64: x's lines SELECT_AHEAD entries below are
    asked for, vectorised compares build the hit mask and a NaN/Inf flag, and the set bits are
    taken from the highest (lzcnt), each written one slot further down — the same entries in the
    same order as :func:`select_into`.
    """
    n = keys.shape[0]
    q = np.int64(idx.shape[0])                 # the entries found so far are idx[q:]
    room = 64 + SELECT_UNROLL
    nfull = n - n % 64
    one = np.uint64(1)
    if nfull < n:                              # the last n mod 64 entries first
        if q < room:
            return q, SELECT_FULL
        for j in range(n - 1, nfull - 1, -1):
            a = keys[j] & mask
            if a >= inf_bits:
                return q, 1
            idx[q - 1] = j
            bits[q - 1] = keys[j]
            q -= np.int64(a >= lo)
    for g in range(nfull // 64 - 1, -1, -1):
        w0 = g * 64
        if q < room:
            return q, SELECT_FULL
        for t in range(0, 64, 8):              # a 64-byte line per 8 keys, SELECT_AHEAD keys below
            prefetch(keys, max(w0 - SELECT_AHEAD + t, 0))
        b = np.uint64(w0)
        hit, bad = group_hits(keys, b, mask, lo, inf_bits)
        if bad:
            return q, 1
        cnt = popcount64(hit)
        top = np.uint64(q - 1)
        if cnt > SELECT_DENSE:
            for i in range(63, -1, -1):
                idx[top] = w0 + i
                bits[top] = keys[b + np.uint64(i)]
                top -= (hit >> np.uint64(i)) & one
        else:
            for u in range(SELECT_UNROLL):     # slots below the hits are overwritten later
                j = np.uint64((63 - clz64(hit)) & 63)
                idx[top - np.uint64(u)] = w0 + np.int64(j)
                bits[top - np.uint64(u)] = keys[b + j]
                hit &= ~(one << j)
            top -= np.uint64(SELECT_UNROLL)
            while hit:
                j = np.uint64(63 - clz64(hit))
                idx[top] = w0 + np.int64(j)
                bits[top] = keys[b + j]
                hit &= ~(one << j)
                top -= one
        q -= cnt
    return q, 0
