"""Top-k's selection kernels (hpcgc/compressors/kernels/topk_select.py), bit for bit against the
code they replaced: the threshold sample's order statistics against ``np.partition`` of the same
strided runs, the descending selection pass against the ascending ``select_into`` (the same
entries, keys, statuses — NaN/±Inf anywhere, buffers too small)."""
from __future__ import annotations

import numpy as np
import pytest

from hpcgc.compressors.kernels import sparse
from hpcgc.compressors.kernels.select import SELECT_FULL, SELECT_UNROLL, select_desc, select_into
from hpcgc.compressors.kernels.topk_select import SAMPLE_AHEAD, narrow_to_rank, sample_bounds


def _data(kind, d, dtype, seed=0):
    g = np.random.default_rng(seed)
    x = {"normal": g.standard_normal(d), "cauchy": g.standard_cauchy(d),
         "ties": g.integers(-3, 4, d).astype(float),
         "zeros": np.where(g.random(d) < 0.01, g.standard_normal(d), 0.0),
         "tiny": g.standard_normal(d) * 1e-310,
         }[kind].astype(dtype)
    x[::13] *= -1.0
    return x


def _sample_partition(x, lines, step, off, run, r, r_hi):
    """The code sample_bounds replaced (topk_sampled until 2026-11-27)."""
    keys, mask, _ = sparse.float_bits(x)
    sample = (keys[:lines * step].reshape(lines, step)[:, off:off + run] & mask).ravel()
    m = lines * run
    part = np.partition(sample, [m - r, m - max(r_hi, 1)])
    return int(part[m - r]), (int(part[m - r_hi]) if r_hi >= 1 else -1)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("kind", ["normal", "cauchy", "ties", "zeros", "tiny"])
@pytest.mark.parametrize("d,lines,run", [(2**16, 512, 8), (2**17 + 77, 1024, 8), (5000, 3, 8), (4096, 64, 1),
                                         (2**16, SAMPLE_AHEAD + 1, 8)])
def test_sample_bounds_matches_partition(dtype, kind, d, lines, run):
    x = _data(kind, d, dtype, seed=d)
    keys, mask, _ = sparse.float_bits(x)
    step = d // lines
    off = (step // 2) & -run
    m = lines * run
    work = np.full(2 * m, -5, dtype=np.int64)
    for r, r_hi in [(1, -3), (1, 1), (m, m), (m, 0), (max(m // 7, 1), max(m // 9, 1)), (m // 2 + 1, 2)]:
        got = sample_bounds(keys, mask, lines, step, off, run, r, r_hi, 8 * x.itemsize, work)
        assert tuple(int(v) for v in got) == _sample_partition(x, lines, step, off, run, r, r_hi)


def test_narrow_to_rank_against_sort():
    g = np.random.default_rng(1)
    for n in (1, 2, 7, 1000):
        v = g.integers(0, 2**62, n)
        v[::3] = v[0]                           # ties
        srt = np.sort(v)[::-1]
        for need in range(1, n + 1, max(n // 13, 1)):
            T, above = narrow_to_rank(v.copy(), n, need, 63)
            assert T == srt[need - 1] and above == int(np.sum(v > T))


def _select_asc(keys, mask, lo, inf_bits, size):
    idx = np.zeros(size, dtype=np.int64)
    bits = np.zeros(size, dtype=keys.dtype)
    c, _, status = select_into(keys, mask, lo, inf_bits, 0, idx, bits, 0)
    return idx[:c], bits[:c], status


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("d", [1, 63, 64, 65, 130, 5000, 70_001])
@pytest.mark.parametrize("q", [0.0, 0.01, 0.3, 0.6, 1.0])
def test_select_desc_matches_select_into(dtype, d, q):
    x = _data("normal", d, dtype, seed=d)
    x[::17] = 0.0
    keys, mask, inf_bits = sparse.float_bits(x)
    mags = np.sort(keys & mask)
    lo = mags[min(int((1 - q) * d), d - 1)] if q > 0 else mask        # q: the fraction selected
    size = d + 64 + SELECT_UNROLL + 1
    want_idx, want_bits, want_status = _select_asc(keys, mask, lo, inf_bits, size)
    assert want_status == 0
    idx = np.full(size, -9, dtype=np.int64)
    bits = np.zeros(size, dtype=keys.dtype)
    first, status = select_desc(keys, mask, lo, inf_bits, idx, bits)
    assert status == 0
    np.testing.assert_array_equal(idx[first:], want_idx)
    np.testing.assert_array_equal(bits[first:], want_bits)
    if want_idx.size > 100:                     # too small buffers: SELECT_FULL, never a wrong answer
        small = 64 + SELECT_UNROLL + 50
        _, status = select_desc(keys, mask, lo, inf_bits, np.empty(small, dtype=np.int64),
                                np.empty(small, dtype=keys.dtype))
        assert status == SELECT_FULL


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("where", [0, 63, 64, 4999, 70_000])
def test_select_desc_nonfinite(dtype, bad, where):
    d = 70_001
    x = _data("normal", d, dtype)
    x[where] = bad
    keys, mask, inf_bits = sparse.float_bits(x)
    lo = keys.dtype.type(np.sort(keys & mask)[d - 700])
    size = d + 100
    _, status = select_desc(keys, mask, lo, inf_bits, np.empty(size, dtype=np.int64), np.empty(size, dtype=keys.dtype))
    assert status == 1
    assert _select_asc(keys, mask, lo, inf_bits, size)[2] == 1
