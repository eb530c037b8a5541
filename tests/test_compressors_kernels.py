"""Tests of hpcgc.compressors: the numba kernels against numpy: norms, PRNG, bit packing, fused row decoders,
float32 rounding, and the numpy references (hpcgc.compressors.kernels.reference) as oracles.

Shared specs and checks: tests/compressor_checks.py.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcgc import compressors
from hpcgc.compressors.kernels import reference, trits, wire
from hpcgc.compressors.kernels.norms import block_norms_l2

from .compressor_checks import block_scales, rng


@given(st.lists(st.integers(0, 2**32 - 1), max_size=200), st.integers(0, 32), st.integers(0, 3))
@settings(max_examples=60, deadline=None)
def test_pack_unpack_fixed_width(vals, width, offset):
    v = np.array(vals, dtype=np.int64) & ((1 << width) - 1)
    nbytes = wire.packed_bytes(v.size, width)
    out = np.full(offset + nbytes + 2, 0xAB, dtype=np.uint8)
    wire.pack_fixed_width(v, width, out, offset)
    assert np.all(out[:offset] == 0xAB) and np.all(out[offset + nbytes:] == 0xAB)
    # LSB-first stream, compared with numpy's bit order
    bits = ((v[:, None] >> np.arange(width)) & 1).astype(np.uint8).ravel()
    np.testing.assert_array_equal(out[offset:offset + nbytes],
                                  np.packbits(bits, bitorder="little") if bits.size else out[offset:offset])
    back = np.empty(v.size, dtype=np.int64)
    wire.unpack_fixed_width(out, offset, width, back)
    np.testing.assert_array_equal(back, v)


@given(st.integers(0, 3 * wire.FIELD_BLOCK + 40), st.integers(1, 32), st.integers(0, 7),
       st.integers(0, 2**32 - 1))
@settings(max_examples=80, deadline=None)
def test_pack_unpack_blocked_fields(n, width, offset, seed):
    """The blocked layout of dense level streams: bytes equal the independent numpy
    transcription (reference.pack_blocked), exact length, no write outside, round trip, max."""
    v = np.random.default_rng(seed).integers(0, 2**width, n).astype(np.uint32)
    nbytes = wire.packed_bytes(n, width)
    out = np.full(offset + nbytes + 2, 0xAB, dtype=np.uint8)
    wire.pack_fields(v, width, out, offset)
    assert np.all(out[:offset] == 0xAB) and np.all(out[offset + nbytes:] == 0xAB)
    np.testing.assert_array_equal(out[offset:offset + nbytes], reference.pack_blocked(v, width))
    back = np.empty(n, dtype=np.uint32)
    wire.unpack_fields(out, offset, width, back)
    np.testing.assert_array_equal(back, v)
    np.testing.assert_array_equal(reference.unpack_blocked(out[offset:offset + nbytes], n, width), v)
    assert wire.fields_max(out, offset, n, width) == (int(v.max()) if n else 0)
    for limit in {0, (2**width - 1) // 2, 2**width - 2, int(v.max()) if n else 0}:
        assert wire.fields_above(out, offset, n, width, limit) == bool(np.any(v > limit))   # SWAR path for 1, 2, 4, 8


@pytest.mark.parametrize("width", range(1, 33))
def test_blocked_fields_every_width(width):
    """Every width through the explicit-SIMD rows (compressors/simd.py), on a buffer of garbage
    (a word row's first write must store, not OR) at an unaligned offset: bytes equal the numpy
    transcription and unpack inverts pack, with all-ones fields (every bit of every row set)."""
    n = 2 * wire.FIELD_BLOCK + 5
    for v in (np.random.default_rng(width).integers(0, 2**width, n).astype(np.uint32),
              np.full(n, 2**width - 1, dtype=np.uint32)):
        nbytes = wire.packed_bytes(n, width)
        out = np.full(3 + nbytes + 1, 0xFF, dtype=np.uint8)
        out[3:3 + nbytes] = 0x5A
        wire.pack_fields(v, width, out, 3)
        np.testing.assert_array_equal(out[3:3 + nbytes], reference.pack_blocked(v, width))
        assert out[:3].tolist() == [0xFF] * 3 and out[-1] == 0xFF
        back = np.full(n, 0xDEADBEEF, dtype=np.uint32)
        wire.unpack_fields(out, 3, width, back)
        np.testing.assert_array_equal(back, v)


@pytest.mark.parametrize("width", [1, 2, 4, 8])
def test_fields_above_swar_finds_one_bad_field(width):
    """The SWAR validation flags a single out-of-range field anywhere: every position of a stream
    that crosses a block boundary and ends in a partial 8-byte word, every limit."""
    n = wire.FIELD_BLOCK + 45
    rng = np.random.default_rng(width)
    for limit in range(2**width - 1):
        v = rng.integers(0, limit + 1, n).astype(np.uint32)
        assert not wire.fields_above(_packed(v, width), 0, n, width, limit)
        for j in (0, 1, 63, wire.FIELD_BLOCK - 1, wire.FIELD_BLOCK, n - 1):
            w = v.copy()
            w[j] = rng.integers(limit + 1, 2**width)
            assert wire.fields_above(_packed(w, width), 0, n, width, limit), (limit, j)


def _packed(v, width):
    out = np.zeros(wire.packed_bytes(v.size, width), np.uint8)
    wire.pack_fields(v, width, out, 0)
    return out


@given(st.one_of(st.integers(0, 40), st.integers(0, 3 * trits.TRIT_GROUP + 12)), st.integers(0, 2**32 - 1),
       st.integers(0, 3))
@settings(max_examples=60, deadline=None)
def test_pack_unpack_trits(n, seed, offset):
    """The group-planar trit layout: bytes equal the independent numpy transcription
    (reference.pack_trits_planar), exactly ⌈n/5⌉ bytes written, round trip."""
    t = np.random.default_rng(seed).integers(0, 3, n).astype(np.uint8)
    nbytes = trits.trit_bytes(n)
    out = np.full(offset + nbytes + 1, 0xEE, dtype=np.uint8)
    trits.pack_trits(t, out, offset)
    assert np.all(out[:offset] == 0xEE) and out[-1] == 0xEE
    np.testing.assert_array_equal(out[offset:offset + nbytes], reference.pack_trits_planar(t))
    np.testing.assert_array_equal(reference.unpack_trits_planar(out[offset:offset + nbytes], n), t)
    back = np.full(n, 7, dtype=np.uint8)
    assert trits.count_bad_trit_bytes(out, offset, nbytes) == 0
    trits.unpack_trits(out, offset, back)
    np.testing.assert_array_equal(back, t)


def test_trit_digits_every_byte():
    b = np.arange(243)
    np.testing.assert_array_equal(np.array([trits.trit_digits(int(v)) for v in b]),
                                  (b[:, None] // 3 ** np.arange(5)) % 3)


def test_block_norm_kernels():
    x = rng(0).standard_cauchy(1003)
    for b in (1, 7, 1000, 1003):
        m = -(-x.size // b)
        pad = np.r_[x, np.zeros(-x.size % b)].reshape(m, b)
        np.testing.assert_allclose(block_scales(x, b, 2), np.linalg.norm(pad, axis=1), rtol=1e-13)
        np.testing.assert_array_equal(block_scales(x, b, math.inf), np.abs(pad).max(axis=1))
    assert block_scales(np.full(4, 1e-200), 4, 2)[0] == pytest.approx(2e-200)
    assert block_scales(np.full(4, 1e200), 4, 2)[0] == pytest.approx(2e200)


def _kernel_seed(seed):
    """The 64-bit kernel seed ``compress`` draws from ``default_rng(seed)``."""
    return rng(seed).integers(0, 2**64, dtype=np.uint64)


EXACT_ORACLE = ["qsgd:s=4,p=inf", "qsgd:s=3,bucket=7,p=inf,fp64=true", "quant:p=inf", "terngrad:block=9",
                "natural", "natural:fp64=true", "natural-dither:s=3,p=inf", "natural-dither:s=12,p=inf,bucket=100",
                "bernoulli:p=0.5", "bernoulli:p=0.5,fp64=true", "sign", "threshold:lam=0.7", "topk:k=37",
                "identity", "identity:fp64=true"]
"""Max-norm scales (no summation-order differences) or deterministic: bit-identical outputs."""


CLOSE_ORACLE = ["qsgd:s=4", "qsgd:s=2,bucket=64", "quant:p=2,block=50", "natural-dither",
                "natural-dither:s=4,bucket=128", "scaled-sign"]
"""ℓ2 scales: numpy's summation order may move a norm by an ulp, so a few decisions may differ."""


@pytest.mark.parametrize("spec", EXACT_ORACLE + CLOSE_ORACLE)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_matches_numpy_reference(spec, dtype):
    from hpcgc.compressors.kernels import reference
    c = compressors.make(spec)
    x = rng(12).standard_t(3, size=3001).astype(dtype)
    x[::50] = 0.0
    x[7] = 1e-41 if dtype == np.float32 else 1e-310                 # a subnormal
    d = x.size
    for seed in (1, 2, 3):
        y = c.decompress(c.compress(x, rng(seed)), d)
        want = reference.math_output(c, x, _kernel_seed(seed))
        if spec in EXACT_ORACLE:
            np.testing.assert_array_equal(y, want, err_msg=spec)
        else:
            close = np.isclose(y, want, rtol=1e-6, atol=0)
            assert close.mean() >= 0.999, (spec, close.mean())
        # the numpy reference's own round trip (with its own randomness) is consistent
        msg = reference.compress(c, x, rng(seed))
        z = reference.decompress(c, msg, d)
        assert z.shape == (d,) and np.isfinite(z).all()
        if c.name in ("topk", "threshold", "sign", "identity"):
            np.testing.assert_array_equal(z, y)


def test_reference_sparse_and_packing():
    from hpcgc.compressors.kernels import reference
    g = rng(3)
    for w in (0, 1, 3, 8, 13, 32):
        v = g.integers(0, 2**w, size=101) if w else np.zeros(101, np.int64)
        packed = reference.pack_fixed(v, w)
        out = np.zeros(wire.packed_bytes(101, w), np.uint8)
        wire.pack_fixed_width(v.astype(np.int64), w, out, 0)
        np.testing.assert_array_equal(packed, out)                # the same LSB-first layout
        np.testing.assert_array_equal(reference.unpack_fixed(packed, 101, w), v)
    x = g.standard_normal(500)
    for spec in ("randk:k=20", "natural-randk:k=20", "topk:k=20"):
        c = compressors.make(spec)
        z = reference.decompress(c, reference.compress(c, x, g), 500)
        assert np.count_nonzero(z) == 20
    assert not reference.has_reference(compressors.make("randk:k=3,shared_seed=true"))


@pytest.mark.parametrize("spec", ["qsgd:s=4", "qsgd:s=15,bucket=512,p=inf", "qsgd:s=8,bucket=100", "qsgd:s=1000",
                                  "natural-dither:s=8", "natural-dither:s=5,bucket=64,p=inf",
                                  "natural-dither:s=8,bucket=100", "quant:p=2", "terngrad",
                                  "quant:p=inf,block=32", "quant:p=2,block=64", "quant:p=inf,block=100"])
@pytest.mark.parametrize("d", [2 * 1024 + 17, 5120, 12003])
def test_fused_row_decoders_match_the_math(spec, d):
    """The fused row decoders (full field blocks / trit groups decoded straight into out) and the
    per-chunk path they fall back to give exactly the reference C(x), for one bucket, buckets that
    are multiples of 32 (and powers of two for trits) and buckets that are not; decompress_add is
    out + weight·C(x)."""
    c = compressors.make(spec)
    x = rng(d).standard_normal(d).astype(np.float32)
    p = c.compress(x, rng(5))
    seed = rng(5).integers(0, 2**64, dtype=np.uint64)
    y = c.decompress(p, d)
    np.testing.assert_array_equal(y, reference.math_output(c, x, seed))
    out = np.full(d, 2.0)
    c.decompress_add(p, d, out, -0.5)
    np.testing.assert_allclose(out, 2.0 - 0.5 * y, rtol=0, atol=1e-12 * np.abs(y).max())


def test_scalar_float32_round_up_is_the_array_rounding():
    """compressors.base.round_up_float32 (one scale: the block compressors' fast path) gives
    exactly wire.round_up_to_float32's values, over the float64 range and its edge cases."""
    from hpcgc.compressors.base import round_up_float32
    from hpcgc.compressors.kernels import wire
    rng = np.random.default_rng(0)
    v = np.abs(np.concatenate([rng.standard_normal(20000) * 10.0 ** rng.uniform(-320, 308, 20000),
                               [0.0, np.inf, np.nan, 3.4028235e38, 3.4028236e38, 3.5e38, 1e-46, 5e-324]]))
    with np.errstate(over="ignore"):
        want = wire.round_up_to_float32(v)
    assert np.array_equal(np.array([round_up_float32(float(a)) for a in v]), want, equal_nan=True)


def test_write_scales_kernel_rounds_and_writes_as_the_array_rounding():
    """kernels.norms.write_scales (the block compressors' front half in one call) rounds each
    block norm up to float32 exactly as wire.round_up_to_float32 does, writes the header and the
    scales little-endian, and reports non-finite norms (NaN/Inf) and float32 overflow apart."""
    from hpcgc.compressors.kernels import wire
    from hpcgc.compressors.kernels.norms import NONFINITE, OK, OVERFLOW, write_scales
    rng = np.random.default_rng(1)
    v = np.abs(np.concatenate([rng.standard_normal(20000) * 10.0 ** rng.uniform(-320, 38, 20000),
                               [0.0, 3.4028234663852886e38, 1e-46, 5e-324, 2.0 ** -149]]))
    head = np.arange(1, 9, dtype=np.uint8)
    want = wire.round_up_to_float32(v)
    norms = v.copy()
    p = np.full(8 + 4 * v.size + 3, 7, dtype=np.uint8)
    assert write_scales(v, 1, norms, False, False, head, p) == OK
    assert np.array_equal(p[:8], head) and np.array_equal(p[-3:], [7, 7, 7])     # the rest untouched
    assert np.array_equal(norms, want)
    assert np.array_equal(p[8:8 + 4 * v.size].view("<f4").astype(np.float64), want)
    for big in (3.4028236e38, 1e300):                       # rounds above the float32 range
        assert write_scales(v, 1, np.array([1.0, big]), False, False, head, p) == OVERFLOW
    x = rng.standard_normal(100)
    ref = np.empty(4)
    block_norms_l2(x, 30, ref)
    norms = np.empty(4)
    p = np.empty(40, dtype=np.uint8)
    assert write_scales(x, 30, norms, True, True, head, p) == OK          # fp64: the norms as they are
    assert np.array_equal(norms, ref) and np.array_equal(p[8:40].view("<f8"), ref)
    x[70] = np.inf
    assert write_scales(x, 30, norms, True, False, head, p) == NONFINITE
