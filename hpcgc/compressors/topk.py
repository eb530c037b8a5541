"""``topk``: keep the k entries of largest magnitude (biased, contractive with δ = k/d).

C(x) = Σ_{j∈S} x_j e_j with S the indices of the k largest |x_j| (ties: lowest indices first).
‖C(x) − x‖² = Σ_{j∉S} x_j² ≤ (1 − k/d)‖x‖² for every x (the d − k smallest squares average at
most the mean square), so δ = k/d (`spec/compressors.md` Part C; flpytorch ``makeTopKCompressor``
"E[|C(x)−x|²] = (1−a)|x|², a = K/D"; Stich, Cordonnier, Jaggi, *Sparsified SGD with memory*,
NeurIPS 2018). Biased: use it with error feedback.

Selection is O(d), not a sort, and usually one pass over x (:func:`topk_sampled`): the order
statistics of m = 8192 sampled entries (1024 evenly strided runs of 8; :func:`~.kernels.topk_select.sample_bounds`)
give, with high probability, a magnitude lo just below the
k-th largest (and hi just above it); one pass (:func:`~.kernels.select.select_desc`, vectorised
compares of the IEEE-754 bit patterns of |x_j|, which order like the magnitudes, from the last entry down) collects the
≈ 1.4k entries ≥ lo (at k/d = 1/64) in index order and checks NaN/±Inf; a radix select among those in [lo, hi]
finds the exact k-th largest T; the result is every candidate > T and the first (k − #{> T})
entries = T (ties to the lowest indices), already sorted. Exact whatever the sample: when fewer
than k entries reach lo, or far more than expected (heavy ties), the two-pass radix select
(:func:`topk_indices`) runs instead: a histogram of the top magnitude bits — 12 bits
(exponent + 4 mantissa bits) for float32, 15 for float64 — locates the bucket b of the k-th
largest and the count above it, a second pass gathers (index, magnitude) of every entry in buckets
≥ b, and histograms of the next bits narrow bucket b to T. NaN/±Inf have the largest keys, so they
are always selected and detected among the values.

Wire format (after the 8-byte header): k values x_j (float32, or float64 with ``fp64=true``),
then the k indices (fixed ⌈log₂d⌉ bits or Elias-omega gaps, whichever is smaller, header flag
bit 1; :mod:`.kernels.sparse`). Model bits: k·F + index bits of the encoding used (≤ k·(F + ⌈log₂d⌉)).
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit

from .kernels.select import select_buffers, select_desc
from .kernels.sparse import (
    bit_length,
    cast_finite,
    float_bits,
    scatter_scaled,
    scratch,
)
from .kernels.topk_select import bucket_of_rank, narrow_to_rank, sample_bounds
from .params import FP64_PARAM, Param
from .sparse_base import FixedKSparse

_F32 = (np.uint32(0x7FFFFFFF), 12)         # magnitude mask, bits of the first histogram
_F64 = (np.uint64(0x7FFFFFFFFFFFFFFF), 15)


@njit(cache=True)
def magnitude_histogram(keys, mask, shift, hist4):
    """hist4[t, b] += #{i ≡ t (mod 4): (keys[i] & mask) >> shift == b}: four sub-histograms so
    that repeated buckets do not serialise on one counter. ``mask`` has the type of ``keys``
    (sign bit cleared: the value fits an int64)."""
    n = keys.shape[0]
    for q in range(n // 4):
        hist4[0, np.int64(keys[4 * q] & mask) >> shift] += 1
        hist4[1, np.int64(keys[4 * q + 1] & mask) >> shift] += 1
        hist4[2, np.int64(keys[4 * q + 2] & mask) >> shift] += 1
        hist4[3, np.int64(keys[4 * q + 3] & mask) >> shift] += 1
    for i in range((n // 4) * 4, n):
        hist4[0, np.int64(keys[i] & mask) >> shift] += 1


_BLOCK = 256
"""Entries per block in the candidate pass: a vectorised block maximum skips blocks with nothing
at or above the k-th largest magnitude's bucket."""


@njit(cache=True)
def gather_at_least(keys, mask, lo, cidx, cmag):
    """cidx, cmag ← every i with m_i = keys[i] & mask ≥ lo (int64), and m_i as int64, in
    increasing order; returns their number."""
    n = keys.shape[0]
    c = 0
    nfull = n - n % _BLOCK
    for b0 in range(0, nfull, _BLOCK):
        kb = keys[b0:b0 + _BLOCK]
        m = kb[0] & mask
        for i in range(_BLOCK):
            m = max(m, kb[i] & mask)
        if np.int64(m) >= lo:
            for i in range(_BLOCK):
                a = np.int64(kb[i] & mask)
                if a >= lo:
                    cidx[c] = b0 + i
                    cmag[c] = a
                    c += 1
    for i in range(nfull, n):
        a = np.int64(keys[i] & mask)
        if a >= lo:
            cidx[c] = i
            cmag[c] = np.int64(a)
            c += 1
    return c


@njit(cache=True)
def topk_indices(keys, mask, shift, nbits, k, idx):
    """Sorted indices of the k largest magnitudes keys & mask (ties: lowest index first) into
    ``idx``, 1 ≤ k ≤ len(keys); ``shift`` = nbits − 1 − B for a first histogram of B bits.

    Pass 1: histogram of the top B magnitude bits → bucket b of the k-th largest and the count
    above it. Pass 2: gather (index, magnitude) of every entry in buckets ≥ b (k + |bucket b|
    entries at most). Then the exact k-th largest T is found among bucket b's magnitudes, and idx
    takes, in index order, the gathered entries > T and the first ones = T. NaN/±Inf have the
    largest magnitude keys, so they are always selected: the caller detects them among the values.
    """
    nb = np.int64(1) << (nbits - 1 - shift)
    hist4 = np.zeros((4, nb), dtype=np.int32)     # int32: 4 × 4096 counters stay in L1
    magnitude_histogram(keys, mask, shift, hist4)
    hist = (hist4[0].astype(np.int64) + hist4[1]) + (hist4[2].astype(np.int64) + hist4[3])
    b, above = bucket_of_rank(hist, k)
    ncand = above + hist[b]
    cidx = np.empty(ncand, dtype=np.int64)
    cmag = np.empty(ncand, dtype=np.int64)
    gather_at_least(keys, mask, np.int64(b) << shift, cidx, cmag)
    bucket = np.empty(hist[b], dtype=np.int64)
    c = 0
    for i in range(ncand):
        if (cmag[i] >> shift) == b:
            bucket[c] = cmag[i]
            c += 1
    T, above2 = narrow_to_rank(bucket, c, k - above, shift)
    ties = k - above - above2
    n = 0
    for i in range(ncand):
        a = cmag[i]
        if a > T:
            idx[n] = cidx[i]
            n += 1
        elif a == T and ties > 0:
            idx[n] = cidx[i]
            n += 1
            ties -= 1


def magnitude_keys(x: np.ndarray):
    """(keys, mask, shift, nbits): ``x`` (float32 or float64) viewed as unsigned integers, plus the
    constants of :func:`topk_indices` for its dtype."""
    if x.dtype == np.float32:
        mask, bits = _F32
        return x.view(np.uint32), mask, 31 - bits, 32
    mask, bits = _F64
    return x.view(np.uint64), mask, 63 - bits, 64


@njit(cache=True)
def rank_among_candidates(cbits, mask, k, lo, hi, nbits, band):
    """(T, #{> T}): the k-th largest magnitude key among the candidates' keys ``cbits & mask``
    (all ≥ lo; at least k of them); ``band`` is int64 work space of len(cbits). When hi ≥ lo is
    given (hi ≥ 0) and fewer than k candidates exceed it, only the band [lo, hi] is searched, and
    its values agree above bit bit_length(lo ^ hi): fewer entries and fewer radix rounds."""
    nc = cbits.shape[0]
    if hi >= lo:
        above = 0
        nb = 0
        for i in range(nc):
            a = np.int64(cbits[i] & mask)
            above += np.int64(a > hi)
            band[nb] = a
            nb += np.int64(a <= hi)
        if above < k:
            T, above2 = narrow_to_rank(band, nb, k - above, bit_length(lo ^ hi))
            return T, above + above2
    for i in range(nc):
        band[i] = np.int64(cbits[i] & mask)
    return narrow_to_rank(band, nc, k, nbits - 1)


@njit(cache=True)
def take_top(cidx, cbits, mask, T, ties, idx, bits):
    """idx, bits ← in index order, the candidates with magnitude key > T and the first ``ties``
    with key = T (cidx, cbits: increasing indices and their keys); branch-free, so idx and bits
    need one slot more than the number taken. The keys = T seen so far are counted apart from
    the number taken (two one-add chains per candidate, not a chain through the tie budget)."""
    n = 0
    seen = 0
    for i in range(cidx.shape[0]):
        a = np.int64(cbits[i] & mask)
        seen += np.int64(a == T)
        take = np.int64(a > T) | (np.int64(a == T) & np.int64(seen <= ties))
        idx[n] = cidx[i]
        bits[n] = cbits[i]
        n += take
    return n


_SAMPLE = 8192
"""Sample size of the threshold estimate (evenly strided entries of x). The result does not depend
on it; 32768 until 2026-11-27: gathering its cache lines and partitioning them cost about as much
as the selection pass over x at d = 2²⁰, for ≈ 1.2k candidates instead of ≈ 1.4k."""
_RUN = 8
"""The sample is taken in runs of this many consecutive entries (a 64-byte line of float64), m/8
evenly strided runs: 8× fewer cache lines than m strided entries (2026-11-27; the result does not
depend on it)."""
_SAMPLE_MIN_D = 1 << 16
"""Below this d (or for k > d/8) top-k uses the two-pass radix select directly."""


def topk_sampled(x: np.ndarray, k: int):
    """Top-k by a sampled threshold: (idx, keys, status) or None when the estimate fails; idx and
    keys are work arrays (:func:`~.kernels.sparse.scratch`), valid until the next call in this thread.

    With q = k/d and m = 8192 entries (m/8 evenly strided runs of 8 consecutive ones), the (qm + 4√(qm) + 4)-th largest sampled
    magnitude lo is, with high probability, below the k-th largest of x but not far below, and
    the (qm − 4√(qm) − 4)-th largest hi above it (:func:`~.kernels.topk_select.sample_bounds`: the runs'
    lines asked for ahead, the two order statistics in the same kernel). One pass
    (:func:`~.kernels.select.select_desc`, from x's last entry down: in EF, whatever of e the
    cache still holds after the gradient's ascending pass is its end) collects every entry ≥ lo —
    about 1.4 k candidates at q = 1/64; NaN/Inf are detected on the way
    (status 1) — then the exact k-th largest T (radix select among the candidates in [lo, hi],
    :func:`rank_among_candidates`) decides: entries > T and the first ties = T, in index order.
    The result is exact whatever the sample; if fewer than k entries reach lo, or many more than
    expected (heavy ties), it returns None and the caller uses :func:`topk_indices`.
    """
    d = x.shape[0]
    if d < _SAMPLE_MIN_D or 8 * k > d:
        return None
    keys, mask, inf_bits = float_bits(x)
    nbits = 8 * x.dtype.itemsize
    m = min(_SAMPLE, d // 16)
    lines = m // _RUN
    step = d // lines
    off = (step // 2) & -_RUN
    m = lines * _RUN
    qm = k * m / d
    r = math.ceil(qm + 4.0 * math.sqrt(qm) + 4.0)
    if r >= m:
        return None
    r_hi = math.floor(qm - 4.0 * math.sqrt(qm) - 4.0)
    lo, hi = sample_bounds(keys, mask, lines, step, off, _RUN, r, r_hi, nbits, scratch("topk-sample", 2 * m, np.int64))
    cap = int(1.25 * d * r / m) + 4096
    sidx, sbits = select_buffers(cap, keys.dtype)
    first, status = select_desc(keys, mask, keys.dtype.type(lo), inf_bits, sidx, sbits)
    if status == 1:
        return None, None, 1
    cidx, cbits = sidx[first:], sbits[first:]
    if status != 0 or cidx.shape[0] < k:
        return None
    T, above = rank_among_candidates(cbits, mask, k, lo, hi, nbits,
                                     scratch("topk-band", cidx.shape[0], np.int64))
    idx = scratch("topk-idx", k + 1, np.int64)
    bits = scratch("topk-bits", k + 1, keys.dtype)
    take_top(cidx, cbits, mask, T, k - above, idx, bits)
    return idx[:k], bits[:k], 0


class TopK(FixedKSparse):
    """Top-k sparsification: the k largest |x_j|; biased, δ = k/d."""
    collectives = ("gather", "allgather", "reduce-scatter")
    segment_wise = True

    name = "topk"
    description = ("top-k: keep the k largest |x_j| (biased; delta = k/d; O(d) radix select); "
                   "bits k*F + min(k*ceil(log2 d), Elias-omega gaps)")
    PARAMS = (
        Param("k", int, low=1, high=2**32 - 1, doc="number of coordinates kept, k <= d"),
        FP64_PARAM,
    )
    FORMAT_ID = 5
    unbiased = False
    deterministic = True
    BATCH_ADD = True

    def omega(self, d: int) -> None:
        return None

    def delta(self, d: int) -> float:
        return self.k / d

    def _compress(self, x: np.ndarray, seed: np.uint64) -> np.ndarray:
        d = x.shape[0]
        res = topk_sampled(x, self.k)
        if res is None:                        # exact two-pass radix select
            keys, mask, shift, nbits = magnitude_keys(x)
            idx = np.empty(self.k, dtype=np.int64)
            topk_indices(keys, mask, shift, nbits, self.k, idx)
            vals = x[idx]                      # NaN/±Inf are always selected: checked below
        else:
            idx, bits, status = res
            if status != 0:
                raise self._nonfinite_error(x)
            vals = bits.view(x.dtype)
        payload, voff, vbytes = self._new_sparse_payload(idx, d)
        wire_vals = payload[voff:voff + vbytes].view(self._dtype())
        if not cast_finite(vals, wire_vals):
            raise self._nonfinite_error(x, "value range (float32)")
        kept = self.__dict__.get("_kept_idx")
        if kept is None or kept.shape[0] != idx.shape[0]:
            kept = self._kept_idx = np.empty(idx.shape[0], dtype=np.int64)
        kept[:] = idx                          # idx may be a work array the next call overwrites
        self._kept = (payload, kept, wire_vals)
        return payload

    def _own_at(self, d: int, add):
        """The payload's indices and wire values as ``_compress`` wrote them, kept (the indices
        copied: they may be a work array): ``decompress_add`` would decode exactly these — the
        same entries, the same products weight·value — so the worker's own message is added
        without decoding its Elias stream again."""
        def own(payload, out, weight):
            kept = self.__dict__.get("_kept")
            if kept is None or kept[0] is not payload:
                return add(payload, out, weight)
            scatter_scaled(kept[2], kept[1], weight, out, True)
            return kept[1]
        return own
