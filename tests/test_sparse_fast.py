"""The fast sparse compress paths: exact-uniform Floyd sampling on a bitset, the one-pass
finiteness-check-and-gather/select kernels, sampled top-k, and the word-wise Elias-omega encoders.

Golden payload checksums pin the wire bytes (they were produced by the previous, straightforward
implementation: the fast kernels must select the same entries and write the same bytes).
"""
from __future__ import annotations

import itertools
import math
import zlib

import numpy as np
import pytest
from numba import njit
from scipy import stats

from hpcgc import compressors
from hpcgc.compressors import randk, threshold, topk
from hpcgc.compressors.kernels import elias_omega, select, sparse

from .elias_ref import omega_string

# ------------------------------------------------------------------------------------------------
# rand-k sampling: exactly uniform k-subsets, the same on both paths
# ------------------------------------------------------------------------------------------------

def _subsets(sampler, d, k, n, seed0=1):
    out = []
    for s in range(n):
        idx = np.empty(k, dtype=np.int64)
        sampler(d, np.uint64(seed0 + 7919 * s), idx)
        out.append(tuple(idx))
    return out


def _bitset_sampler(d, seed, idx):
    randk.bitset_to_sorted(randk.floyd_bitset(d, seed, idx.shape[0]), idx)


@pytest.mark.parametrize("sampler", [_bitset_sampler, randk.floyd_hashed_sorted])
@pytest.mark.parametrize("d,k", [(6, 3), (7, 2), (5, 5), (66, 1)])
def test_every_k_subset_equally_likely(sampler, d, k):
    """Chi-square test over all C(d, k) subsets (deterministic seeds: no flakiness)."""
    n = 300 * math.comb(d, k)
    counts = dict.fromkeys(itertools.combinations(range(d), k), 0)
    for sub in _subsets(sampler, d, k, n):
        assert list(sub) == sorted(set(sub)) and 0 <= sub[0] and sub[-1] < d
        counts[sub] += 1
    assert sum(counts.values()) == n
    if len(counts) > 1:
        assert stats.chisquare(list(counts.values())).pvalue > 1e-4


@pytest.mark.parametrize("d,k", [(200, 13), (1000, 2), (129, 64), (4096, 700)])
def test_inclusion_frequencies_uniform(d, k):
    """Each coordinate is kept with probability k/d (chi-square over coordinates), pairs of
    neighbours too (k(k−1)/(d(d−1)))."""
    n = max(2000, 40 * d // k)
    hits = np.zeros(d)
    pairs = np.zeros(d - 1)
    for s in range(n):
        idx = np.empty(k, dtype=np.int64)
        randk.sample_k_of_d_sorted(d, np.uint64(12345 + 7919 * s), idx)
        assert np.all(np.diff(idx) > 0) and idx[0] >= 0 and idx[-1] < d
        mask = np.zeros(d, bool)
        mask[idx] = True
        hits += mask
        pairs += mask[:-1] & mask[1:]
    assert stats.chisquare(hits).pvalue > 1e-4
    p2 = k * (k - 1) / (d * (d - 1))
    assert abs(pairs.mean() / n - p2) <= 5 * math.sqrt(p2 / (n * (d - 1))) + 1e-12


@pytest.mark.parametrize("d,k", [(1, 1), (2, 1), (63, 63), (64, 1), (65, 65), (1000, 999), (10**5, 7),
                                 (10**5, 3000), (2**20 + 5, 10_000), (777, 200)])
def test_bitset_and_hashed_paths_agree(d, k):
    """Both paths run the same Floyd draws: the same subset for the same seed."""
    for s in range(4):
        seed = np.uint64(99 + s)
        a = np.empty(k, dtype=np.int64)
        b = np.empty(k, dtype=np.int64)
        c = np.empty(k, dtype=np.int64)
        _bitset_sampler(d, seed, a)
        randk.floyd_hashed_sorted(d, seed, b)
        randk.sample_k_of_d_sorted(d, seed, c)
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(a, c)
        assert len(set(a.tolist())) == k


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("d,k", [(1, 1), (64, 64), (1000, 3), (1025, 1024), (70_001, 700), (70_001, 5)])
def test_sample_and_gather(dtype, d, k):
    x = np.random.default_rng(d).standard_normal(d).astype(dtype)
    idx, vals, finite = randk.sample_and_gather(x, np.uint64(5), k)
    want = np.empty(k, dtype=np.int64)
    randk.sample_k_of_d_sorted(d, np.uint64(5), want)
    assert finite
    np.testing.assert_array_equal(idx, want)
    np.testing.assert_array_equal(vals, x[want])
    assert vals.dtype == x.dtype


@pytest.mark.parametrize("d,k", [(70_001, 1), (70_001, 2), (70_001, 3), (4096, 4096), (4097, 4095), (130, 2)])
def test_gather_bitset_stays_in_its_buffers(d, k):
    """The unconditional slots never pass the end of idx/values (sentinels after them)."""
    x = np.random.default_rng(d).standard_normal(d).astype(np.float32)
    keys, mask, inf_bits = sparse.float_bits(x)
    for s in range(20):
        words = randk.floyd_bitset(d, np.uint64(s), k)
        ibuf = np.full(k + 8, -7, dtype=np.int64)
        vbuf = np.full(k + 8, 123.0, dtype=np.float32)
        assert randk.gather_bitset(x, keys, mask, inf_bits, words, ibuf[:k], vbuf[:k])
        assert np.all(ibuf[k:] == -7) and np.all(vbuf[k:] == 123.0)
        want = np.empty(k, dtype=np.int64)
        randk.bitset_to_sorted(words, want)
        np.testing.assert_array_equal(ibuf[:k], want)
        np.testing.assert_array_equal(vbuf[:k], x[want])
        obuf = np.full(k + 8, -7, dtype=np.int64)
        randk.bitset_to_sorted(words, obuf[:k])
        assert np.all(obuf[k:] == -7)


# ------------------------------------------------------------------------------------------------
# select_at_least (threshold, top-k candidates)
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("d", [1, 63, 64, 130, 5000, 70_001])
@pytest.mark.parametrize("lam", [0.0, 0.3, 1.0, 2.576, 50.0])
def test_select_at_least_matches_numpy(dtype, d, lam):
    x = np.random.default_rng(d).standard_normal(d).astype(dtype)
    x[::17] = 0.0
    x[1::19] = -0.0
    keys, mask, inf_bits = sparse.float_bits(x)
    lo = threshold.threshold_bits(lam, x.dtype)
    want = np.flatnonzero(np.abs(x) >= lam)
    for cap in (0, 5, d):                      # buffers that must grow, and ample ones
        idx, bits, status = select.select_at_least(keys, mask, lo, inf_bits, cap)
        assert status == 0
        np.testing.assert_array_equal(idx, want)
        np.testing.assert_array_equal(bits.view(x.dtype), x[want])
    if want.size > 200:
        _, _, status = select.select_at_least(keys, mask, lo, inf_bits, 10, grow=False)
        assert status == select.SELECT_FULL


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_threshold_bits_is_exact(dtype):
    """|x| ≥ λ ⇔ bits(|x|) ≥ threshold_bits(λ), also for the floats next to λ."""
    for lam in [0.0, 1e-45, 5e-324, 1e-300, 0.1, 1 / 3, 2.576, 1.0, 3.4028234663852886e38, 1e300]:
        t = np.asarray(lam, dtype=np.float64)
        near = np.array([np.nextafter(t, 0), t, np.nextafter(t, np.inf), t * 0.5, t * 2], dtype=np.float64)
        with np.errstate(over="ignore"):
            x = near.astype(dtype)
        x = x[np.isfinite(x)]
        lo = threshold.threshold_bits(lam, dtype)
        mag = (x.view(np.uint32 if dtype == np.float32 else np.uint64)
               & (np.uint32(0x7FFFFFFF) if dtype == np.float32 else np.uint64(2**63 - 1)))
        np.testing.assert_array_equal(mag >= lo, np.abs(x).astype(np.float64) >= lam)


# ------------------------------------------------------------------------------------------------
# top-k: the sampled threshold is exact whatever the data
# ------------------------------------------------------------------------------------------------

def topk_oracle(x, k):
    a = np.abs(x.astype(np.float64))
    order = np.lexsort((np.arange(x.size), -a))       # largest first, ties to the lowest index
    return np.sort(order[:k])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("kind,d,k", [
    ("normal", 2**16, 1), ("normal", 2**17 + 3, 1311), ("normal", 2**17, 16_000), ("cauchy", 2**17 + 5, 999),
    ("ties", 2**18, 2000), ("zeros", 2**18, 2000), ("few", 2**16 + 1, 300), ("clustered", 2**17, 5000),
])
def test_topk_sampled_exact(dtype, kind, d, k):
    g = np.random.default_rng(3)
    x = {"normal": g.standard_normal(d), "cauchy": g.standard_cauchy(d),
         "ties": g.integers(-3, 4, d).astype(float),
         "zeros": np.where(g.random(d) < 0.005, g.standard_normal(d), 0.0),
         "few": np.where(np.arange(d) % 997 == 0, 100.0 + np.arange(d) % 7, g.standard_normal(d)),
         "clustered": np.where((np.arange(d) // 4096) == 7, 10 * g.standard_normal(d), g.standard_normal(d)),
         }[kind].astype(dtype)
    want = topk_oracle(x, k)
    res = topk.topk_sampled(x, k)
    assert (res is None) == (kind in ("ties", "zeros"))  # heavy ties: the two-pass fallback
    if res is not None:
        idx, bits, status = res
        assert status == 0
        np.testing.assert_array_equal(idx, want)
        np.testing.assert_array_equal(bits.view(dtype), x[want])
    c = compressors.make("topk", k=k, fp64=True)
    y = c.decompress(c.compress(x, np.random.default_rng(0)), d)
    np.testing.assert_array_equal(np.flatnonzero(y), want[x[want] != 0])
    np.testing.assert_array_equal(y[want], x[want].astype(np.float64))


# ------------------------------------------------------------------------------------------------
# NaN/±Inf anywhere (first chunk, chunk edges, the last partial 64-group) is rejected
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("spec", ["randk:k=700", "randk:k=3", "randk:k=700,shared_seed=true", "topk:k=700",
                                  "topk:k=5", "threshold:lam=2.0", "threshold:lam=0", "bernoulli:p=1.0",
                                  "bernoulli:p=0.01"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_nonfinite_anywhere(spec, dtype):
    d = 2**16 + 37
    c = compressors.make(spec)
    base = np.random.default_rng(1).standard_normal(d).astype(dtype)
    for where in (0, 63, 64, 1023, 1024, 40_000, d - 38, d - 37, d - 1):
        for bad in (np.nan, np.inf, -np.inf):
            x = base.copy()
            x[where] = bad
            with pytest.raises(ValueError, match="non-finite"):
                c.compress(x, np.random.default_rng(where))


# ------------------------------------------------------------------------------------------------
# Elias-omega encoders
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("scale", [1, 3, 100, 5000, 10**6, 2**31])
def test_elias_words_match_reference(scale):
    g = np.random.default_rng(scale)
    for n in (0, 1, 2, 63, 500):
        gaps = np.minimum(g.geometric(1 / scale, n), 2**32 - 1).astype(np.int64)
        idx = np.cumsum(gaps) - 1
        bits = "".join(omega_string(int(v)) for v in gaps)
        assert sparse.elias_gap_bits(idx) == len(bits)
        for limit in (len(bits) + 1, len(bits), max(len(bits) - 1, 0), len(bits) // 2):
            words = np.full(limit // 64 + 2, 0xDEADBEEF, dtype=np.uint64)
            got = sparse.elias_omega_words(idx, words, limit)
            if len(bits) >= limit:
                assert got == -1
                continue
            assert got == len(bits)
            out = np.full((len(bits) + 7) // 8 + 3, 0xCD, dtype=np.uint8)
            assert sparse.copy_stream_bytes(words, got, out, 1) == (len(bits) + 7) // 8
            stream = "".join(str((int(out[1 + b // 8]) >> (b % 8)) & 1) for b in range(len(bits)))
            assert stream == bits
            assert out[0] == 0xCD and out[-1] == 0xCD
            pad = (-len(bits)) % 8
            if pad:
                assert int(out[(len(bits) + 7) // 8]) >> (8 - pad) == 0


def test_elias_words_never_write_out_of_bounds_on_bad_input():
    """Non-increasing (garbage) indices: the encoder stays inside ``words``."""
    g = np.random.default_rng(0)
    for _ in range(200):
        idx = g.integers(-2**40, 2**40, int(g.integers(1, 50)))
        limit = int(g.integers(0, 300))
        words = np.zeros(limit // 64 + 2 + 4, dtype=np.uint64)
        words[limit // 64 + 2:] = 0xABCDEF
        sparse.elias_omega_words(idx, words, limit)
        assert np.all(words[limit // 64 + 2:] == 0xABCDEF)


@pytest.mark.parametrize("k", [1, 2, 3, 7, 8, 100, 4095, 4096, 123_456, 2**31, 2**40 + 5, 2**52 + 1, 2**62 - 1])
def test_eo_write_length(k):
    assert elias_omega.eo_length(k) == len(omega_string(k))
    for pos in (0, 5):
        out = np.zeros(24, dtype=np.uint8)
        end = elias_omega.eo_write(out, pos, k)
        assert end == pos + len(omega_string(k))
        bits = "".join(str((int(out[b >> 3]) >> (b & 7)) & 1) for b in range(pos, end))
        assert bits == omega_string(k)
        assert not any((int(out[b >> 3]) >> (b & 7)) & 1 for b in range(end, 8 * out.size))
        assert elias_omega.eo_read(out, pos, 8 * out.size) == (k, end)


@njit
def _intrinsics(v):
    return sparse.clz64(v), sparse.ctz64(v), sparse.popcount64(v), sparse.bitreverse64(v)


def test_bit_intrinsics():
    for v in [0, 1, 2, 3, 2**31, 2**32 + 7, 2**62 + 5, 2**63 - 1, 2**64 - 1]:
        clz, ctz, pop, rev = _intrinsics(np.uint64(v))
        assert (clz, ctz, pop) == (64 - v.bit_length(), (v & -v).bit_length() - 1 if v else 64, v.bit_count())
        assert int(rev) == int(format(v, "064b")[::-1], 2)
        if v < 2**63:
            assert sparse.bit_length(v) == v.bit_length()
        for n in (1, 7, 33, 64):
            want = int(format(v & ((1 << n) - 1), f"0{n}b")[::-1], 2)
            assert int(sparse.reverse_bits(np.uint64(v), n)) == want


# ------------------------------------------------------------------------------------------------
# wire bytes: unchanged from the straightforward implementation
# ------------------------------------------------------------------------------------------------

GOLDEN = {
    ("randk:k=5", 1000): 0x3ada0c35,
    ("randk:k=900", 1000): 0xbe418bf9,
    ("randk:k=2600", 262147): 0xd3938fc0,
    ("randk:k=131000", 262147): 0x12c43eb7,
    ("randk:k=77,shared_seed=true", 70001): 0xe8786e9f,
    ("topk:k=7", 1000): 0xd26b3ab8,
    ("topk:k=2600", 262147): 0xf1bcf071,
    ("threshold:lam=1.5", 1000): 0x2a08094b,
    ("threshold:lam=2.576", 262147): 0x8212742b,
}
GOLDEN_FP64 = {
    ("randk:k=40,fp64=true", 70001): (0x2001a888, 0x6f2f6c71),
    ("topk:k=30000,fp64=true", 262147): (0x13b530be, 0x66c0e9db),
    ("threshold:lam=0.2,fp64=true", 262147): (0x5f371ddf, 0x1235fc31),
}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_golden_payloads(dtype):
    cases = {**{key: (v, v) for key, v in GOLDEN.items()}, **GOLDEN_FP64}
    for (spec, d), crcs in cases.items():
        x = np.random.default_rng(d).standard_normal(d).astype(dtype)
        p = compressors.make(spec).compress(x, np.random.default_rng(42))
        assert zlib.crc32(p.tobytes()) == crcs[dtype == "float64"], (spec, d, dtype)


# ------------------------------------------------------------------------------------------------
# reused work arrays never leak into payloads, also across threads
# ------------------------------------------------------------------------------------------------

SPECS_REUSING = ["randk:k=900", "randk:k=900,shared_seed=true", "topk:k=900", "threshold:lam=2.0",
                 "natural-randk:k=900"]


def test_payloads_independent_of_later_calls():
    d = 70_001
    xs = [np.random.default_rng(s).standard_normal(d).astype(np.float32) for s in range(3)]
    for spec in SPECS_REUSING:
        c = compressors.make(spec)
        p0 = c.compress(xs[0], np.random.default_rng(0))
        keep = p0.copy()
        y0 = c.decompress(p0, d)
        for x in xs[1:]:
            c.decompress(c.compress(x, np.random.default_rng(1)), d)
        np.testing.assert_array_equal(p0, keep)
        np.testing.assert_array_equal(c.decompress(p0, d), y0)


def test_threads_do_not_share_work_arrays():
    from concurrent.futures import ThreadPoolExecutor
    d = 70_001
    jobs = [(spec, s) for spec in SPECS_REUSING for s in range(6)]

    def run(job):
        spec, s = job
        x = np.random.default_rng(s).standard_normal(d).astype(np.float32)
        c = compressors.make(spec)
        p = c.compress(x, np.random.default_rng(s))
        return p.tobytes(), c.decompress(p, d).tobytes()

    want = [run(j) for j in jobs]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(run, jobs))
    assert got == want
