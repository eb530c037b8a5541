"""Top-k's selection kernels (:mod:`hpcgc.compressors.topk`): order statistics by radix select, the
threshold sample and its two order statistics in one call.

* :func:`narrow_to_rank` — the need-th largest of int64 keys by histograms of ≤ 11 bits at a time;
* :func:`sample_bounds` — the threshold estimate of :func:`~hpcgc.compressors.topk.topk_sampled`:
  the magnitude keys of m/8 evenly strided runs of 8 consecutive entries (each run's line asked for
  :data:`SAMPLE_AHEAD` runs ahead, :func:`~.sparse.prefetch`: the runs' lines come from memory
  in parallel, not one miss after another), then the r-th and r_hi-th largest of them — the
  values ``np.partition`` puts at m − r and m − r_hi, into work arrays (no temporaries);
* the selection pass itself is :func:`~.select.select_desc` (:mod:`.select`, beside the ascending
  pass the threshold compressor uses).
"""
from __future__ import annotations

import numpy as np
from numba import njit

from .sparse import prefetch


@njit(cache=True)
def bucket_of_rank(hist, need):
    """Walk buckets from the top: the bucket b holding the need-th largest (need ≥ 1) and the
    count strictly above it."""
    above = 0
    b = hist.shape[0] - 1
    while b > 0:
        h = hist[b]
        if above + h >= need:
            return b, above
        above += h
        b -= 1
    return 0, above


@njit(cache=True)
def narrow_to_rank(cand, nc, need, sh):
    """The need-th largest of cand[:nc] (int64 values that agree above bit ``sh``), by histograms
    of ≤ 11 bits at a time; returns (T, #{cand > T}). Reorders/overwrites ``cand``."""
    above = 0
    while sh > 0 and nc > 1:
        w = min(sh, 11)
        sh -= w
        m2 = (np.int64(1) << w) - 1
        h2 = np.zeros(np.int64(1) << w, dtype=np.int64)
        for i in range(nc):
            h2[(cand[i] >> sh) & m2] += 1
        b2, above2 = bucket_of_rank(h2, need)
        need -= above2
        above += above2
        c = 0
        for i in range(nc):
            if ((cand[i] >> sh) & m2) == b2:
                cand[c] = cand[i]
                c += 1
        nc = c
    return cand[0], above           # one candidate left, or sh = 0: the remaining ones are equal


SAMPLE_AHEAD = 32
"""Runs ahead at which :func:`sample_bounds` asks for a run's cache lines."""


SAMPLE_SORT_MAX = 2048
"""Most sampled keys in the top buckets that :func:`sample_bounds` sorts (more — heavy ties —: two
radix selects)."""


@njit(cache=True)
def sample_bounds(keys, mask, lines, step, off, run, r, r_hi, nbits, work):
    """(lo, hi): the r-th and r_hi-th largest (r_hi ≤ r ≤ m, hi = −1 when r_hi < 1) of the m = lines·run
    magnitude keys ``keys[l·step + off + t] & mask`` (0 ≤ l < lines, 0 ≤ t < run) — the values
    ``np.partition`` puts at m − r and m − r_hi; ``work``: int64 work space of 2m.

    The runs are gathered with each run's lines asked for SAMPLE_AHEAD runs ahead, and a
    histogram of their top 11 magnitude bits taken on the way; the keys in the buckets at and
    above the r-th largest's (all that can be the r-th or r_hi-th largest, r_hi < r) are sorted
    (:data:`SAMPLE_SORT_MAX` of them at most; else two radix selects, :func:`narrow_to_rank`)."""
    m = lines * run
    a = work[:m]
    last = keys.shape[0] - 1
    sh = nbits - 12
    hist = np.zeros(2048, dtype=np.int32)
    for q in range(min(SAMPLE_AHEAD, lines)):
        prefetch(keys, q * step + off)
        prefetch(keys, min(q * step + off + run - 1, last))
    for q in range(lines):
        p = (q + SAMPLE_AHEAD) * step + off
        prefetch(keys, min(p, last))
        prefetch(keys, min(p + run - 1, last))
        s = q * step + off
        for t in range(run):
            v = np.int64(keys[s + t] & mask)
            a[q * run + t] = v
            hist[v >> sh] += 1
    b, above = bucket_of_rank(hist, r)
    c = above + hist[b]
    if c <= SAMPLE_SORT_MAX:
        top = work[m:m + c]
        n = 0
        for i in range(m):
            top[n] = a[i]
            n += np.int64((a[i] >> sh) >= b)
            if n == c:
                break
        srt = np.sort(top)
        return srt[c - r], srt[c - r_hi] if r_hi >= 1 else np.int64(-1)
    work[m:2 * m] = a
    lo, _ = narrow_to_rank(a, m, r, nbits - 1)
    hi = np.int64(-1)
    if r_hi >= 1:
        hi, _ = narrow_to_rank(work[m:2 * m], m, r_hi, nbits - 1)
    return lo, hi
