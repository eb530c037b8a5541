"""Tests of hpcgc.compressors: exact round trips (decoded values against the math), determinism, the prepared codec.

Shared specs and checks: tests/compressor_checks.py.
"""
from __future__ import annotations

import numpy as np
import pytest

from hpcgc import compressors
from hpcgc.errors import ConfigError, PayloadError

from .compressor_checks import ALL_SPECS, check_decoded, rng

DETERMINISTIC = ("identity", "topk", "threshold", "sign", "scaled-sign")


@pytest.mark.parametrize("spec", ALL_SPECS)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_round_trip(spec, dtype):
    c = compressors.make(spec)
    d = 1000
    x = rng(4).standard_t(3, size=d).astype(dtype)
    x[::97] = 0.0
    p = c.compress(x, rng(8))
    assert isinstance(p, np.ndarray) and p.dtype == np.uint8 and p.ndim == 1
    y = c.decompress(p, d)
    check_decoded(c, x.astype(np.float64), y)
    out = rng(9).standard_normal(d)
    ref = out + 0.37 * y
    c.decompress_add(p, d, out, 0.37)
    np.testing.assert_allclose(out, ref, rtol=1e-13, atol=1e-300)
    # payload given as bytes, or as an unaligned slice of a bigger buffer (as from Gatherv)
    big = np.zeros(p.size + 3, dtype=np.uint8)
    big[3:] = p
    np.testing.assert_array_equal(c.decompress(big[3:], d), y)
    np.testing.assert_array_equal(c.decompress(p.tobytes(), d), y)


def test_randk_exact_k_nonzeros():
    d, k = 1000, 37
    x = rng(3).standard_normal(d) + 10.0   # no zeros
    c = compressors.make("randk", k=k)
    y = c.decompress(c.compress(x, rng(1)), d)
    nz = np.flatnonzero(y)
    assert nz.size == k
    np.testing.assert_array_equal(y[nz], (d / k) * x[nz].astype(np.float32).astype(np.float64))


def test_randk_all_coordinates():
    d = 64
    x = rng(3).standard_normal(d)
    c = compressors.make("randk:k=64,fp64=true")
    np.testing.assert_array_equal(c.decompress(c.compress(x, rng(1)), d), x)


@pytest.mark.parametrize("spec", ALL_SPECS)
def test_small_dimensions(spec):
    c = compressors.make(spec)
    g = rng(6)
    for d in range(1, 13):
        if (c.name in ("randk", "topk", "natural-randk") and c.k > d) or \
                (c.name == "powersgd" and c.rank > min(c.matrix_shape(d))):
            with pytest.raises(ConfigError):
                c.compress(np.ones(d), g)
            continue
        for x in (g.standard_normal(d), np.zeros(d), np.eye(1, d, d // 2).ravel()):
            p = c.compress(x, g)
            y = c.decompress(p, d)
            check_decoded(c, x, y)
            out = np.ones(d)
            c.decompress_add(p, d, out, 2.0)
            np.testing.assert_allclose(out, 1 + 2 * y, rtol=1e-14)


def test_zero_vector_and_huge_values():
    for spec in ALL_SPECS:
        c = compressors.make(spec)
        d = 1500
        if "randk" in spec and c.k > d:
            continue
        y = c.decompress(c.compress(np.zeros(d), rng()), d)
        assert np.all(y == (1.0 if c.name == "sign" else 0.0)), spec      # sign(0) is sent as +1
    # tiny vectors do not underflow to a zero norm; huge ones need fp64 scales
    x = np.full(100, 1e-170)
    c = compressors.make("quant:p=2,fp64=true")
    assert c.decompress(c.compress(x, rng()), 100).sum() > 0
    x = np.full(100, 1e200)
    c = compressors.make("qsgd:s=4,fp64=true")
    y = c.decompress(c.compress(x, rng()), 100)
    assert np.all(np.isfinite(y)) and np.allclose(y.mean(), 1e200, rtol=0.5)
    with pytest.raises(ValueError, match="fp64"):
        compressors.make("qsgd:s=4").compress(x, rng())


@pytest.mark.parametrize("spec", ALL_SPECS)
def test_deterministic(spec):
    c = compressors.make(spec)
    x = rng(5).standard_normal(5000)
    g1, g2 = rng(42), rng(42)
    p1 = [c.compress(x, g1) for _ in range(3)]
    p2 = [c.compress(x, g2) for _ in range(3)]
    for a, b in zip(p1, p2):
        np.testing.assert_array_equal(a, b)
    assert g1.integers(2**62) == g2.integers(2**62)         # both drew the same amount
    if c.name not in DETERMINISTIC and not (c.name == "randk" and c.k >= 5000) and \
            c.name != "bernoulli":             # bernoulli: equal (empty) messages are likely
        assert not np.array_equal(p1[0], p1[1])              # fresh randomness every call
    # a compressor draws exactly one number from the Generator per call
    g3, g4 = rng(7), rng(7)
    c.compress(x, g3)
    g4.integers(0, 2**64, dtype=np.uint64)
    assert g3.integers(2**62) == g4.integers(2**62)


def test_prepared_codec_is_compress_and_decompress_add_and_copies_rebind():
    """Compressor.prepared(d) gives the bytes of compress and the values of decompress_add (the
    runner's path), still checks a payload's contents, and a copy of a compressor that was
    prepared binds its own kernels (the bound callables are not copied with it)."""
    import copy
    for spec in ("qsgd:s=2", "qsgd:bucket=8,p=inf", "qsgd:code=elias", "natural-dither", "randk:k=5", "topk:k=3"):
        c = compressors.make(spec)
        codec = c.prepared(30)
        x = np.random.default_rng(3).standard_normal(30)
        p = codec.encode(x, np.random.default_rng(7))
        assert np.array_equal(p, c.compress(x, np.random.default_rng(7)))
        a, b = np.ones(30), np.ones(30)
        codec.add(p, a, 0.25)
        c.decompress_add(p, 30, b, 0.25)
        assert np.array_equal(a, b)
        bad = p.copy()
        bad[2] ^= 0xFF                                      # fingerprint
        with pytest.raises(PayloadError):
            codec.add(bad, a, 1.0)
        with pytest.raises(PayloadError):
            codec.add(p[:-1], a, 1.0)
        assert np.array_equal(a, b)                         # untouched by the invalid payloads
        assert "_codecs_at" not in copy.copy(c).__dict__
    with pytest.raises(ConfigError):
        compressors.make("randk:k=40").prepared(30)        # the parameters against d, once
