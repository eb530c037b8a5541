"""Tests for ``qsgd:code=elias`` (QSGD's Elias-coded levels, ``hpcgc/compressors/qsgd_elias.py``):
same levels and decoded vectors as ``code=fixed``, the exact bit stream (checked against a
pure-Python encoder), model bits, the QSGD Thm 3.2 bound, unbiasedness and ω, special inputs,
strict rejection of corrupted payloads (also fuzzed, optionally under ``NUMBA_BOUNDSCHECK=1``).
"""
from __future__ import annotations

import math
import os
import re
import zlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hpcgc import compressors
from hpcgc.compressors import qsgd_elias as qe
from hpcgc.compressors.kernels import wire
from hpcgc.errors import ConfigError, PayloadError

from .compressor_checks import check_decoded, check_unbiased, coord_variance, draws, fuzz_decoders
from .elias_ref import omega_string

SPECS = ["qsgd:s=4", "qsgd:s=1", "qsgd:s=2,bucket=16", "qsgd:s=3,bucket=50,p=inf",
         "qsgd:s=7,bucket=64,fp64=true", "qsgd:s=255,bucket=512", "qsgd:s=1000",
         "qsgd:s=4,p=inf,fp64=true", "qsgd:s=2147483647"]


def elias(spec: str):
    return compressors.make(spec + ",code=elias")


def rng(seed=0):
    return np.random.default_rng(seed)


def pack_bits(bits: str) -> np.ndarray:
    """A '0'/'1' string as LSB-first bytes, zero padded."""
    arr = np.array([int(b) for b in bits] + [0] * (-len(bits) % 8), dtype=np.uint8)
    return np.packbits(arr, bitorder="little")


def stream_string(levels: np.ndarray, d: int, zero: bool = False) -> tuple[str, int]:
    """(the stream as a bit string with the end marker, model entry bits) for signed levels;
    ``zero``: x = 0 (every scale 0), whose stream is empty."""
    parts = []
    prev = -1
    for j in np.flatnonzero(levels):
        lev = int(levels[j])
        parts += [omega_string(j - prev), "1" if lev < 0 else "0", omega_string(abs(lev))]
        prev = j
    entry_bits = sum(map(len, parts))
    if prev >= 0 or not zero:
        parts.append(omega_string(d - prev))
    return "".join(parts), entry_bits


def signed_levels(c, payload, y):
    """Signed levels of a decoded vector y (scales read from the payload)."""
    d = y.shape[0]
    b = c.bucket_size(d)
    m = -(-d // b)
    scales = wire.read_scales(payload, wire.HEADER_BYTES, m, c.params["fp64"])
    unit = np.repeat(scales / c.s, b)[:d]
    lev = np.rint(np.abs(y) / np.where(unit > 0, unit, 1.0)).astype(np.int64)
    return np.where(y < 0, -lev, lev)


def check_against_fixed(spec, x, seed):
    """code=elias: levels the mathematics allows; the same decoded vector and decompress_add as
    code=fixed (bit for bit; skipped for s ≥ 2^30, see below); exactly the bytes of the
    pure-Python encoding of its levels. Returns (elias compressor, payload)."""
    cf, ce = compressors.make(spec), elias(spec)
    d = x.shape[0]
    pe = ce.compress(x, rng(seed))
    ye = ce.decompress(pe, d)
    check_decoded(ce, x, ye)
    out_e = np.linspace(-1, 1, d)
    ce.decompress_add(pe, d, out_e, -0.7)
    base = np.linspace(-1, 1, d)
    assert np.all(np.abs(out_e - (base - 0.7 * ye)) <= 1e-15 * (np.abs(base) + np.abs(ye)))
    pf = cf.compress(x, rng(seed))
    np.testing.assert_array_equal(ye, cf.decompress(pf, d), err_msg=spec)
    out_f = np.linspace(-1, 1, d)
    cf.decompress_add(pf, d, out_f, -0.7)
    np.testing.assert_array_equal(out_e, out_f, err_msg=spec)
    # the wire bytes: header (FLAG_ELIAS set), the scales of code=fixed, the Elias stream
    m = -(-d // ce.bucket_size(d))
    off = wire.HEADER_BYTES + m * (8 if ce.params["fp64"] else 4)
    assert pe[0] == pf[0] and pe[1] == pf[1] | wire.FLAG_ELIAS and bytes(pe[4:8]) == bytes(pf[4:8])
    assert bytes(pe[8:off]) == bytes(pf[8:off])
    bits, entry_bits = stream_string(signed_levels(ce, pe, ye), d, not x.any())
    assert bytes(pe[off:]) == pack_bits(bits).tobytes(), spec
    assert ce.model_bits(pe, d) == ce._float_bits * m + entry_bits
    return ce, pe


# ------------------------------------------------------------------------------------------------
# parameters
# ------------------------------------------------------------------------------------------------

def test_spec_and_describe():
    c = compressors.make("qsgd:s=4,code=elias")
    assert c.spec == "qsgd:s=4,bucket=0,code=elias"
    assert compressors.make(c.spec) == c and compressors.make("qsgd", s=4, code="ELIAS") == c
    assert compressors.make("qsgd:s=4").spec == "qsgd:s=4,bucket=0"           # default not listed
    assert compressors.make("qsgd:s=4,code=fixed") == compressors.make("qsgd:s=4")
    assert compressors.make("qsgd:s=3,p=inf,fp64=true,code=elias").spec == \
        "qsgd:s=3,bucket=0,p=inf,fp64=true,code=elias"
    assert c.params["code"] == "elias" and c.omega(400) == compressors.make("qsgd:s=4").omega(400)
    assert "code=fixed (one of fixed, elias" in compressors.describe("qsgd")
    with pytest.raises(ConfigError, match="code"):
        compressors.make("qsgd:code=huffman")
    with pytest.raises(ConfigError, match="code"):
        compressors.make("qsgd", code=1)


def test_bench_list_shows_code(capsys):
    from hpcgc import bench
    bench.main(["list"])
    assert "code=fixed (one of fixed, elias" in capsys.readouterr().out


# ------------------------------------------------------------------------------------------------
# same levels as code=fixed; the exact stream
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_same_levels_as_fixed(spec, dtype):
    g = rng(zlib.crc32(spec.encode()))
    for d in (1, 2, 5, 63, 1000, 5120, 5121, 12_345):
        x = g.standard_t(2.5, size=d).astype(dtype)
        x[::7] = 0.0
        for seed in (1, 2):
            check_against_fixed(spec, x, seed)


def test_long_codes_and_large_levels():
    """Gaps and levels ≥ FAST and codes longer than 32 bits take the encoder's and decoder's long
    paths: a sparse vector with far-apart entries, huge s, and an end marker of 36 bits."""
    g = rng(4)
    d = 300_000
    x = np.zeros(d)
    x[g.choice(d, 40, replace=False)] = g.standard_normal(40) * 10.0 ** g.integers(-3, 3, 40)
    for spec in ("qsgd:s=4", "qsgd:s=5000", "qsgd:s=2147483647", "qsgd:s=300,bucket=1000,p=inf"):
        check_against_fixed(spec, x, 3)
    d = 2**24 + 1
    x = np.zeros(d, dtype=np.float32)
    x[0] = -2.0
    c, p = check_against_fixed("qsgd:s=4", x, 0)
    assert len(omega_string(d)) == 36
    assert c.model_bits(p, d) == 32 + len(omega_string(1)) + 1 + len(omega_string(4))


@st.composite
def cases(draw):
    d = draw(st.integers(1, 3000))
    s = draw(st.sampled_from([1, 2, 3, 4, 7, 15, 16, 100, 2**31 - 1]))
    bucket = draw(st.sampled_from([0, 1, 3, 16, 64, 1000]))
    p = draw(st.sampled_from(["2", "inf"]))
    fp64 = draw(st.booleans())
    kind = draw(st.sampled_from(["normal", "sparse", "zeros", "onehot", "tiny", "huge", "flat", "t1"]))
    g = rng(draw(st.integers(0, 2**31)))
    x = {"normal": lambda: g.standard_normal(d), "zeros": lambda: np.zeros(d),
         "sparse": lambda: np.where(g.random(d) < 0.02, g.standard_normal(d), 0.0),
         "onehot": lambda: np.eye(1, d, int(g.integers(d)))[0] * -3.0,
         "tiny": lambda: g.standard_normal(d) * 1e-40, "huge": lambda: g.standard_normal(d) * 1e30,
         "flat": lambda: np.full(d, 0.5), "t1": lambda: g.standard_t(1, d)}[kind]()
    dtype = draw(st.sampled_from([np.float64, np.float32]))
    spec = f"qsgd:s={s},bucket={bucket},p={p}" + (",fp64=true" if fp64 else "")
    return spec, x.astype(dtype), draw(st.integers(0, 1000))


@given(cases())
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_properties(case):
    spec, x, seed = case
    c, p = check_against_fixed(spec, x, seed)
    d = x.shape[0]
    assert c.decompress(p, d).dtype == np.float64
    assert p.size <= wire.HEADER_BYTES + 8 * d + qe.stream_bound_bytes(d, c.s)


def test_bit_count_is_stream_minus_padding_and_end_marker():
    """model bits = F·m + 8·len(stream) − padding − |ω(d − j_last)|; wire − model is the 64-bit
    header, the end marker and < 8 bits of padding."""
    g = rng(9)
    for spec in ("qsgd:s=4", "qsgd:s=16,bucket=128", "qsgd:s=1024", "qsgd:s=2,fp64=true"):
        c = elias(spec)
        for d in (10, 4097, 100_000):
            x = g.standard_normal(d)
            p = c.compress(x, g)
            y = c.decompress(p, d)
            m = -(-d // c.bucket_size(d))
            off = wire.HEADER_BYTES + m * (8 if c.params["fp64"] else 4)
            nz = np.flatnonzero(y)
            end = len(omega_string(d - nz[-1]))           # the end marker
            bits, entry_bits = stream_string(signed_levels(c, p, y), d)
            padding = -len(bits) % 8
            assert len(bits) == entry_bits + end and (p.size - off) * 8 == len(bits) + padding
            assert c.model_bits(p, d) == c._float_bits * m + 8 * (p.size - off) - padding - end
            assert 8 * p.size - 64 - c.model_bits(p, d) == end + padding < end + 8


# ------------------------------------------------------------------------------------------------
# bits: QSGD Thm 3.2 and Cor 3.3
# ------------------------------------------------------------------------------------------------

def test_thm32_bound_formula():
    # s = √d: s(s + √d) = 2d and log₂(2·2d/2d) = 1, so the bound is (3 + 1.5)·2d + 32 = 9d + 32
    assert qe.thm32_bound_bits(10_000, 100) == pytest.approx(9 * 10_000 + 32)
    assert qe.thm32_bound_bits(10_000, 100, 64) == pytest.approx(9 * 10_000 + 64)
    nnz = 4 * (4 + 2**10)
    want = (3 + 1.5 * math.log2(2 * (16 + 2**20) / nnz)) * nnz + 32
    assert qe.thm32_bound_bits(2**20, 4) == pytest.approx(want)


@pytest.mark.parametrize("d", [2**12, 2**16, 2**20])
def test_thm32_bound(d):
    """Mean model bits (3 draws) ≤ QSGD Thm 3.2's bound without its o(1) term (the log log terms
    of the Elias code: it is exceeded by ≤ 1 % at d = 10⁴, s = 1 on a flat vector, hence 10 %
    margin for d < 2^16, none above), for vectors that maximise the number of nonzeros (flat),
    concentrate the norm (spike) or are typical (normal, sparse). For s = √d, Cor 3.3's 2.8d + 32
    holds for all but the flat vector, which costs 3d + 32 (+ the end marker): every entry has
    level 1, coded in 3 bits."""
    g = rng(d)
    root = math.isqrt(d)
    margin = 1.1 if d < 2**16 else 1.0
    for s in (1, 2, 4, 16, root):
        c = compressors.make(f"qsgd:s={s},code=elias")
        bound = qe.thm32_bound_bits(d, s)
        for kind in ("normal", "flat", "spike", "sparse", "cauchy"):
            x = {"normal": g.standard_normal(d), "flat": np.ones(d),
                 "spike": np.r_[1.0, np.full(d - 1, 1 / math.sqrt(d))],
                 "sparse": np.where(g.random(d) < 0.01, g.standard_normal(d), 0.0),
                 "cauchy": g.standard_cauchy(d)}[kind]
            bits = np.mean([c.model_bits(c.compress(x, g), d) for _ in range(3)])
            assert bits <= margin * bound, (d, s, kind, bits / bound)
            if s == root and kind == "flat":
                # every level is 1: 3 bits per entry (ω(1) gap, sign, ω(1) level), above Cor 3.3
                assert 3 * d <= bits <= 3 * d + 32 + len(omega_string(d))
            elif s == root:
                assert bits <= 2.8 * d + 32, (d, kind, bits / d)


# ------------------------------------------------------------------------------------------------
# statistics: unbiased, ω unchanged
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("spec", ["qsgd:s=1", "qsgd:s=4,bucket=16", "qsgd:s=3,bucket=50,p=inf",
                                  "qsgd:s=4,fp64=true", "qsgd:s=2,p=inf,bucket=16"])
def test_unbiased(spec):
    check_unbiased(elias(spec), spec, d=200, k_se=4)


@pytest.mark.parametrize("spec", ["qsgd:s=1", "qsgd:s=2", "qsgd:s=8,bucket=32", "qsgd:s=4,p=inf"])
@pytest.mark.parametrize("kind", ["flat", "cauchy", "normal", "spike", "sparse"])
def test_variance_bound(spec, kind):
    """E‖C(x) − x‖² ≤ ω‖x‖² with the ω of code=fixed: the closed form and a Monte-Carlo estimate."""
    c = elias(spec)
    assert c.omega(240) == compressors.make(spec).omega(240)
    g = rng(7)
    d = 240
    x = {"flat": np.ones(d), "cauchy": g.standard_cauchy(d), "normal": g.standard_normal(d),
         "spike": np.r_[1.0, np.full(d - 1, 0.06)],
         "sparse": np.where(g.random(d) < 0.05, g.standard_normal(d), 0.0)}[kind]
    nx2 = float(x @ x)
    exact = float(np.sum(coord_variance(c, x)))
    assert exact <= c.omega(d) * nx2 * (1 + 1e-6)
    y = draws(c, x, 400, seed=9)
    err = np.sum((y - x) ** 2, axis=1)
    est, se = err.mean(), err.std(ddof=1) / math.sqrt(err.size)
    assert abs(est - exact) <= 4 * se + 1e-12 * nx2
    assert est <= c.omega(d) * nx2 + 4 * se


# ------------------------------------------------------------------------------------------------
# special inputs
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("spec", ["qsgd:s=4", "qsgd:s=2,bucket=3,fp64=true"])
def test_zero_vector_is_empty_stream(spec):
    c = elias(spec)
    for d in (1, 7, 10_000):
        p = c.compress(np.zeros(d), rng())
        m = -(-d // c.bucket_size(d))
        assert p.size == wire.HEADER_BYTES + m * (8 if c.params["fp64"] else 4)   # scales only
        assert c.model_bits(p, d) == c._float_bits * m
        assert not c.decompress(p, d).any()
        out = np.full(d, 2.0)
        c.decompress_add(p, d, out, 3.0)
        assert np.all(out == 2.0)


def test_dimension_one_and_single_nonzero():
    c = elias("qsgd:s=4")
    p = c.compress(np.array([-3.0]), rng())      # r = s exactly: level s = 4, end marker ω(1)
    assert c.decompress(p, 1).tolist() == [-3.0]
    bits = omega_string(1) + "1" + omega_string(4) + omega_string(1)
    assert bytes(p[12:]) == pack_bits(bits).tobytes()
    assert c.model_bits(p, 1) == 32 + 1 + 1 + 6
    d = 1000
    for j in (0, 1, 499, 998, 999):
        x = np.zeros(d)
        x[j] = 2.5
        p = c.compress(x, rng(j))
        y = c.decompress(p, d)
        assert np.flatnonzero(y).tolist() == [j] and y[j] == np.float32(2.5)
        assert c.model_bits(p, d) == 32 + len(omega_string(j + 1)) + 1 + len(omega_string(4))
        assert bytes(p[12:]) == pack_bits(omega_string(j + 1) + "0" + omega_string(4)
                                          + omega_string(d - j)).tobytes()


def test_all_levels_dithered_to_zero():
    """x ≠ 0 whose levels all dither to 0: the stream is the end marker ω(d + 1) alone."""
    c = elias("qsgd:s=1")
    x = np.ones(4)                                  # each level is 1 with probability 1/2
    found = 0
    for seed in range(100):
        p = c.compress(x, rng(seed))
        if not c.decompress(p, 4).any():
            found += 1
            assert bytes(p[12:]) == pack_bits(omega_string(5)).tobytes()
            assert c.model_bits(p, 4) == 32
    assert found > 0


def test_buckets_not_dividing_d_and_empty_buckets():
    c = elias("qsgd:s=3,bucket=64")
    g = rng(5)
    d = 64 * 5 + 17
    x = g.standard_normal(d)
    x[64:192] = 0.0                              # two all-zero buckets (scale 0)
    x[-17:] = 0.0                                # the short last bucket is empty too
    check_against_fixed("qsgd:s=3,bucket=64", x, 1)
    x[-1] = 1e-3
    check_against_fixed("qsgd:s=3,bucket=64", x, 2)
    y = c.decompress(c.compress(x, g), d)
    assert not y[64:192].any()


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_nonfinite_input(bad):
    for spec in ("qsgd:s=4", "qsgd:s=4,bucket=10,p=inf"):
        x = np.ones(100)
        x[37] = bad
        with pytest.raises(ValueError, match="non-finite"):
            elias(spec).compress(x, rng())
    with pytest.raises(ValueError, match="fp64=true"):
        elias("qsgd:s=4").compress(np.full(10, 1e300), rng())


def test_deterministic():
    c = elias("qsgd:s=4,bucket=100")
    x = rng(1).standard_normal(5000)
    assert c.compress(x, rng(3)).tobytes() == c.compress(x, rng(3)).tobytes()
    assert c.compress(x, rng(3)).tobytes() != c.compress(x, rng(4)).tobytes()


# ------------------------------------------------------------------------------------------------
# corrupted payloads
# ------------------------------------------------------------------------------------------------

def with_stream(c, d, bits: str, scale=1.0) -> np.ndarray:
    """A payload of compressor c for dimension d with bucket scales ``scale`` and this stream."""
    m = -(-d // c.bucket_size(d))
    head = c.compress(np.zeros(d), rng())
    head[wire.HEADER_BYTES:].view("<f8" if c.params["fp64"] else "<f4")[:] = scale
    assert head.size == wire.HEADER_BYTES + m * (8 if c.params["fp64"] else 4)
    return np.r_[head, pack_bits(bits)]


def entry(gap, level, neg=False):
    return omega_string(gap) + ("1" if neg else "0") + omega_string(level)


def expect_error(c, d, payload, pattern):
    out = np.arange(d, dtype=np.float64)
    with pytest.raises(PayloadError, match=pattern):
        c.decompress(payload, d)
    with pytest.raises(PayloadError, match=pattern):
        c.decompress_add(payload, d, out, 1.0)
    with pytest.raises(PayloadError, match=pattern):
        c.model_bits(payload, d)
    assert np.array_equal(out, np.arange(d))      # out untouched


def test_hand_built_streams():
    c = elias("qsgd:s=4,bucket=8")
    d = 20
    ok = entry(1, 2) + entry(5, 4, True) + entry(14, 1) + omega_string(d - 19)
    p = with_stream(c, d, ok, scale=2.0)
    y = c.decompress(p, d)
    want = np.zeros(d)
    want[[0, 5, 19]] = [2 * 2 / 4, -4 * 2 / 4, 1 * 2 / 4]
    np.testing.assert_array_equal(y, want)
    assert c.model_bits(p, d) == 3 * 32 + len(ok) - len(omega_string(1))
    expect_error(c, d, with_stream(c, d, entry(1, 2) + entry(21, 1) + omega_string(1)), "beyond d")
    expect_error(c, d, with_stream(c, d, entry(1, 2) + omega_string(d + 5)), "beyond d")
    expect_error(c, d, with_stream(c, d, entry(3, 5) + omega_string(d - 2)), "level above s=4|above s")
    expect_error(c, d, with_stream(c, d, omega_string(d + 1), scale=0.0), "zero vector")
    expect_error(c, d, with_stream(c, d, "", scale=1.0), "truncated")
    q = with_stream(c, d, omega_string(d + 1), scale=1.0)      # all levels dithered to 0
    assert not c.decompress(q, d).any() and c.model_bits(q, d) == 3 * 32
    expect_error(c, d, with_stream(c, d, entry(1, 2)), "truncated")             # no end marker
    expect_error(c, d, with_stream(c, d, entry(1, 2) + omega_string(d))[:-1], "truncated")
    expect_error(c, d, np.r_[p, np.uint8(0)], "trailing bytes")
    expect_error(c, d, np.r_[p, np.uint8(0xFF)], "trailing bytes")
    q = p.copy()
    pad = -len(ok) % 8
    assert pad > 0
    q[-1] |= np.uint8(0x80)                                                      # a padding bit
    expect_error(c, d, q, "padding")
    expect_error(c, d, with_stream(c, d, "1" * 80), "over-long|truncated")
    expect_error(c, d, with_stream(c, d, "1111" + "1" * 40 + "0" * 30), "over-long")
    # an entry in a bucket whose norm is 0
    q = with_stream(c, d, entry(10, 1) + omega_string(d - 9), scale=1.0)
    q[wire.HEADER_BYTES + 4:wire.HEADER_BYTES + 8].view("<f4")[0] = 0.0             # bucket 1 = [8, 16)
    expect_error(c, d, q, "norm is 0")
    q = p.copy()
    q[wire.HEADER_BYTES:wire.HEADER_BYTES + 4].view("<f4")[0] = np.nan
    expect_error(c, d, q, "invalid bucket norm")
    q = p.copy()
    q[wire.HEADER_BYTES:wire.HEADER_BYTES + 4].view("<f4")[0] = -1.0
    expect_error(c, d, q, "invalid bucket norm")
    expect_error(c, d, p[:wire.HEADER_BYTES + 5], "truncated")                  # inside the scales


def test_every_truncation_and_extension_rejected():
    c = elias("qsgd:s=4,bucket=100")
    d = 1000
    g = rng(2)
    p = c.compress(g.standard_normal(d), g)
    for n in range(p.size):
        expect_error(c, d, p[:n], "truncated|dimension|format|fingerprint|flags|Elias")
    for extra in (0, 1, 0x80, 0xFF):
        expect_error(c, d, np.r_[p, np.uint8(extra)], "trailing bytes")


def test_codes_do_not_mix():
    """A code=fixed payload read as code=elias (and vice versa), or with other parameters, is
    rejected by the header check (flags, fingerprint)."""
    d = 500
    x = rng(1).standard_normal(d)
    cf, ce = compressors.make("qsgd:s=4"), elias("qsgd:s=4")
    with pytest.raises(PayloadError, match="flags"):
        ce.decompress(cf.compress(x, rng()), d)
    with pytest.raises(PayloadError, match="flags"):
        cf.decompress(ce.compress(x, rng()), d)
    with pytest.raises(PayloadError, match="fingerprint|parameters"):
        elias("qsgd:s=5").decompress(ce.compress(x, rng()), d)
    with pytest.raises(PayloadError, match="dimension"):
        ce.decompress(ce.compress(x, rng()), d + 1)


ELIAS_FUZZ_SPECS = ["qsgd:s=5,code=elias", "qsgd:s=3,p=inf,bucket=10,code=elias",
                    "qsgd:s=300,bucket=100,fp64=true,code=elias", "qsgd:s=1,code=elias"]


def fuzz_parse_kernel(trials=2000, seed=0):
    """Random byte strings straight into the parse kernel (sentinel bytes after the end): it never
    reads past the end, and a stream it accepts re-encodes to the same bytes (canonical)."""
    g = rng(seed)
    accepted = 0
    for t in range(trials):
        n = int(g.integers(0, 24))
        data = g.integers(0, 256, size=n).astype(np.uint8)
        if t % 2:                                   # mostly short codes: more valid streams
            data &= np.uint8(g.choice([0x00, 0x11, 0x55, 0x3F]))
        src = np.r_[data, np.full(8, 0xAA, np.uint8)]
        d = int(g.integers(1, 200))
        s = int(g.integers(1, 10))
        bucket = int(g.integers(1, d + 1))
        scales = np.ones(-(-d // bucket)) if t % 5 else np.zeros(-(-d // bucket))
        out = np.zeros(d)
        count, bits = qe.qsgd_elias_parse(src, 0, n, d, s, bucket, scales, out, 1.0, qe.MODE_WRITE)
        if count >= 0:
            accepted += 1
            levels = np.rint(out * s).astype(np.int64)
            stream, entry_bits = stream_string(levels, d, not scales.any())
            assert entry_bits == bits and pack_bits(stream).tobytes() == data.tobytes()
            assert np.count_nonzero(levels) == count
    return accepted


def test_fuzz_corrupted_payloads():
    accepted, rejected = fuzz_decoders(ELIAS_FUZZ_SPECS, trials=150)
    assert rejected > accepted
    assert fuzz_parse_kernel() > 20


@pytest.mark.skipif(not os.environ.get("HPCGC_TEST_BOUNDSCHECK"),
                    reason="set HPCGC_TEST_BOUNDSCHECK=1 (recompiles the decoders with bounds checks)")
@pytest.mark.slow
@pytest.mark.timeout(960)    # recompiles the decoders with bounds checks: minutes on a loaded machine
def test_fuzz_with_numba_boundscheck(boundscheck_fuzz):
    """The same fuzzing with NUMBA_BOUNDSCHECK=1: any out-of-bounds access in a kernel raises
    (tests/conftest.py: boundscheck_fuzz, one process for this test and test_compressors_fuzz.py's)."""
    ok, out, expected = boundscheck_fuzz["elias"]
    assert ok, out[-3000:]
    a, r, k = map(int, re.findall(r"\d+", out.strip().splitlines()[-1]))
    assert r > a and k > 0 and (a, r) == tuple(expected)      # as decoded without bounds checks
