"""The stochastic quantizers' kernels compute their levels without float → int64 conversions
(which AVX2 lacks), qsgd's and natural-dither's in 32-bit lanes of LLVM IR (``kernels/dither``,
``simd.fields_row``/``pack_row``): the same bits as the integer definitions they replaced.

* golden payloads: CRC-32 of two consecutive payloads per case, recorded from the integer
  kernels before the change (commit d70647a; the cases marked "1ac3590" from the scalar kernels
  before the row rules), input with zeros and tiny entries;
* boundary cases: the dithering rules on inputs built to sit within a few ulps of every
  rounding boundary, against the integer definitions evaluated with Python integers.
"""
from __future__ import annotations

import zlib

import numpy as np
import pytest
from numba import literally, njit

from hpcgc import compressors
from hpcgc.compressors.kernels.dither import QSGD, QSGD_WIDE, SMALL_S
from hpcgc.compressors.kernels.prng import TWO32, uniform_at, word_at
from hpcgc.compressors.kernels.simd import LANES, fields_row, row_param
from hpcgc.compressors.natural import natural_encode_f32
from hpcgc.compressors.natural_dither import NDITHER_KIND
from hpcgc.compressors.quant import ternary_dither

# (spec, d, dtype): CRC-32 of the first and second payload of compressors.make(spec) on the input
# below with np.random.default_rng(42)
GOLDEN = {
    ("qsgd:s=4", 5121, "float32"): (0xe05fe579, 0x3017b8bc),
    ("qsgd:s=4", 70001, "float64"): (0xcd5db342, 0xa6e5e202),
    ("qsgd:s=15,bucket=512,p=inf", 5121, "float64"): (0x342f223d, 0x4efac018),
    ("qsgd:s=15,bucket=512,p=inf", 70001, "float32"): (0x300bc37d, 0xaf61930b),
    ("qsgd:s=7,bucket=100", 70001, "float64"): (0xf861a1ec, 0xc177d733),
    ("qsgd:s=4,code=elias", 70001, "float32"): (0x08adcf65, 0x3fdc227f),
    ("qsgd:s=4,fp64=true", 70001, "float64"): (0x90de2a7c, 0xfb667b3c),   # float64 norms: recorded
    # with the tests' NUMBA_CPU_NAME=haswell (tests/conftest.py); native AVX-512 gives 0xb920ed04
    ("natural", 5121, "float32"): (0xf9983235, 0x9231ce63),
    ("natural", 70001, "float32"): (0xdcae3b68, 0x24848a48),
    ("natural", 70001, "float64"): (0xdcae3b68, 0x24848a48),
    ("natural-dither:s=8", 70001, "float32"): (0x8d584e19, 0xaf0b217d),
    ("natural-dither:s=3,bucket=100", 70001, "float64"): (0x9c5728eb, 0x32c922ce),
    ("terngrad", 70001, "float32"): (0x310839b4, 0xb0454c5e),
    ("terngrad", 70001, "float64"): (0x7b061799, 0xfa4b6273),
    ("terngrad:block=100", 5121, "float64"): (0xd686091c, 0x6943c04f),
    ("quant:p=2", 70001, "float32"): (0x6c53f362, 0xe3552a29),
    ("quant:p=inf,block=32", 70001, "float64"): (0x1f9abaa3, 0x5377243d),
    ("natural-randk:k=100", 70001, "float32"): (0xf68b42d7, 0x7aa6d2eb),
}


@pytest.mark.parametrize("case", sorted(GOLDEN))
def test_golden_payloads(case):
    spec, d, dtype = case
    x = np.random.default_rng(d).standard_normal(d).astype(dtype)
    x[::97] = 0.0
    x[3::101] *= 1e-30
    c = compressors.make(spec)
    g = np.random.default_rng(42)
    assert tuple(zlib.crc32(c.compress(x, g).tobytes()) for _ in range(2)) == GOLDEN[case]


@njit
def _rule(x, u, scale, b, kind):
    """The fields of x (a multiple of LANES entries, one bucket of this scale) under ``kind``'s
    row rule, with the uniforms u."""
    literally(kind)
    f = np.empty(x.shape[0], np.uint32)
    p = row_param(scale, b, kind)
    for r in range(0, x.shape[0], LANES):
        fields_row(f, r, x, r, u, r, p, b, kind)
    return f


@njit
def _tern(x, u, inv32):
    t = np.empty(x.shape[0], np.uint8)
    ternary_dither(x, u, t, np.uint64(0), np.uint64(x.shape[0]), inv32)
    return t


def _near(targets, scale, rng):
    """float64 v with v·scale + 0.5 within a few ulps of each target (either side), signed."""
    v = (np.asarray(targets, dtype=np.float64) - 0.5) / scale
    for _ in range(3):
        v = np.nextafter(v, np.where(rng.random(v.size) < 0.5, 0.0, np.inf))
    return np.where(rng.random(v.size) < 0.5, -v, v)


def test_qsgd_levels_at_boundaries():
    rng = np.random.default_rng(3)
    for s in (1, 4, 15, 255, 2**19 - 1, 2**19, 2**31 - 1):
        n = 4000
        u = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
        u[:8] = [0, 1, 2**32 - 1, 2**32 - 2, 2**31, 2**31 - 1, 0, 2**32 - 1]
        scale32 = TWO32 * s / 3.0                      # norm 3
        m = rng.integers(0, s + 1, n)
        x = _near(m * TWO32 - u.astype(np.float64), scale32, rng)   # level boundary R + u = m·2^32
        x[:8] = [0.0, -0.0, 3.0, -3.0, 1e-300, 3.0 * (1 - 2**-52), 2.9999, 1.5]
        want = []
        for q in range(n):
            r = int(abs(x[q]) * scale32 + 0.5)          # the integer definition
            lev = min((r + int(u[q])) >> 32, s)
            want.append((lev << 1) | int(x[q] < 0 and lev > 0))
        # the rule for this s, and the wide rule (valid for every s)
        for kind in ((QSGD, QSGD_WIDE) if s < SMALL_S else (QSGD_WIDE,)):
            got = _rule(x, u, 3.0, s, kind)
            bad = np.flatnonzero(got != np.array(want))
            assert bad.size == 0, (kind, s, [(x[q], int(u[q]), got[q], want[q]) for q in bad[:5]])


def test_ternary_at_boundaries():
    rng = np.random.default_rng(4)
    n = 4000
    u = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    u[:4] = [0, 2**32 - 1, 2**32 - 2, 1]
    inv32 = TWO32 / 2.5
    x = _near(u.astype(np.float64) + 1.0, inv32, rng)          # boundary R = u + 1
    x[:4] = [2.5, -2.5, 2.5 * (1 - 2**-52), 0.0]
    got = _tern(x, u, inv32)
    for q in range(n):
        xi = int(u[q]) < int(abs(x[q]) * inv32 + 0.5)
        assert got[q] == xi * (1 + int(x[q] < 0.0)), (q, x[q], int(u[q]))


def test_natural_dither_levels_at_boundaries():
    rng = np.random.default_rng(5)
    for s in (1, 3, 8, 20, 62):
        n = 3008
        u = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
        low = 2.0 ** (s - 1) * TWO32
        x = _near(u.astype(np.float64) + 1.0, low, rng)        # r below the smallest level
        k = n // 3
        x[:k] = rng.uniform(-1, 1, k)                               # ordinary r ∈ [0, 1]
        mant = (u[k:2 * k].astype(np.int64) << 20) + 2**19 + rng.integers(-1, 2, k)
        mant = np.clip(mant, 0, 2**52 - 1)                          # u·2^20 + 2^19 ≤ M, ±1
        r = np.ldexp(1.0 + mant / 2.0**52, rng.integers(1 - s, 1, k))   # levels 2^{1−s} … 1
        x[k:2 * k] = np.where(rng.random(k) < 0.5, -r, r)
        # the edges of the two cases, each with u = 0, 2^31 and 2^32 − 1: y = fl(r·2^{s+31} + 0.5)
        # rounds up to 1 (tie to even) and to 2^32 + 1/2; the smallest level and the top; zero,
        # subnormal and smallest normal r; r just above 1
        special = [(1 - 2.0**-53) * 2.0**(-s - 32), np.nextafter(2.0**(1 - s), 0.0), 2.0**(1 - s), 2.0**-s,
                   0.0, 5e-324, 2.0**-1022, 1.0, np.nextafter(1.0, 0.0), 1.0 + 2.0**-52, 2.0**(-s - 32)]
        for i, (val, uu) in enumerate((a, b) for a in special for b in (0, 2**31, 2**32 - 1)):
            x[n - 1 - i], u[n - 1 - i] = val, uu
        got = _rule(x, u, 1.0, s, NDITHER_KIND)
        for q in range(n):
            r = abs(x[q])
            b = int(np.float64(r).view(np.uint64))
            es = (b >> 52) - (1023 - s)
            up = ((b & (2**52 - 1)) + 2**19) >> 20
            lev = es + int(int(u[q]) < up) if es >= 1 else int(int(u[q]) < int(r * low + 0.5))
            lev = min(lev, s)
            assert got[q] == (lev << 1) | int(x[q] < 0 and lev > 0), (s, q, x[q], int(u[q]))


def test_natural_rounding_bit_at_boundaries():
    """natural's P[up] test ``word < m << 41`` equals ``uniform_at < m·2^-23`` exactly, also
    for mantissas one step either side of the drawn uniform."""
    seed = np.uint64(987654321)
    n = 6000
    rng = np.random.default_rng(6)
    u = np.array([uniform_at(seed, j) for j in range(n)])
    mant = np.floor(u * 2**23).astype(np.int64) + rng.integers(0, 2, n)   # just below / above u
    mant = np.clip(mant, 0, 2**23 - 1)
    expo = rng.integers(0, 254, n)
    keys = ((rng.integers(0, 2, n) << 31) | (expo << 23) | mant).astype(np.uint32)
    lo = np.empty(n, np.uint8)
    hi = np.empty((n + 7) // 8, np.uint8)
    assert not natural_encode_f32(keys, seed, lo, hi)
    want = expo + (u < mant * 2.0**-23)
    assert np.array_equal(lo, (want & 0xFF).astype(np.uint8))
    assert all(int(word_at(seed, j)) >> 11 == int(u[j] * 2**53) for j in range(0, n, 97))


def _dither_sweep_input(d, dtype, s, g):
    """Zeros, values below the smallest level (2^{1−s} of the scale), exact powers of two, both
    signs, and the largest magnitudes the format takes (the scale itself)."""
    big = 1e38                                   # the float32 scale's range
    x = g.standard_normal(d) * np.ldexp(1.0, g.integers(-s - 40, 1, d))
    x[::5] = 0.0
    x[1::7] = np.ldexp(1.0, g.integers(-s - 3, 1, x[1::7].size)) * np.where(g.random(x[1::7].size) < 0.5, -1, 1)
    x[2::11] *= 2.0 ** -(s + 1)
    x[3] = big
    x[min(4, d - 1)] = -big
    return x.astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("bucket", [0, 7, 64])
def test_natural_dither_matches_reference_sweep(bucket, dtype):
    """natural-dither's kernel against the numpy reference (``kernels.reference``: frexp and
    float64 formulas of the rule, drawing the same uniforms) over s ∈ {1, 2, 3, 8, 16, 31, 62},
    max-norm scales (bit-identical in both) and lengths that leave partial rows and chunks: every
    decoded value equal."""
    from hpcgc.compressors.kernels import reference
    g = np.random.default_rng(bucket)
    for s in (1, 2, 3, 8, 16, 31, 62):
        for d in (5, 1000, 5000):
            c = compressors.make(f"natural-dither:s={s},p=inf,bucket={bucket}")
            x = _dither_sweep_input(d, dtype, s, g)
            seed = np.random.default_rng(s).integers(0, 2**64, dtype=np.uint64)
            y = c.decompress(c.compress(x, np.random.default_rng(s)), d)
            np.testing.assert_array_equal(y, reference.math_output(c, x, seed), err_msg=f"s={s} d={d}")
