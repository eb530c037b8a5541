"""compose:A+B, hadamard (rotated quantization) and countsketch: statistics against the stated ω/δ
(fixed seeds, 4 standard errors), composition with identity bit for bit, wire format, plan-time refusals."""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.linalg import hadamard as hadamard_matrix

from hpcgc import compressors
from hpcgc.compressors.compose import split_parts
from hpcgc.compressors.hadamard import with_shared
from hpcgc.compressors.kernels.hadamard import fwht, padded, rotate, unrotate_add
from hpcgc.errors import ConfigError, PayloadError

UNBIASED = ["compose:randk:k=64+qsgd:s=4", "compose:randk:k=30+qsgd:s=2,p=inf", "compose:qsgd:s=8+randk:k=100",
            "compose:natural+qsgd:s=4,bucket=16", "compose:randk:k=100+randk:k=50+qsgd:s=8",
            "hadamard:s=4", "hadamard:s=1", "hadamard:s=2,p=2", "hadamard:s=8,bucket=64", "hadamard:s=4,fp64=true",
            "countsketch:rows=3,cols=60", "countsketch:rows=1,cols=200,fp64=true"]


def draws(c, x, n, seed):
    g = np.random.default_rng(seed)
    return np.stack([c.decompress(c.compress(x, g), x.shape[0]) for _ in range(n)])


def vectors(d):
    g = np.random.default_rng(7)
    return {"normal": g.standard_normal(d), "t2": g.standard_t(2, d), "spike": np.r_[1.0, np.full(d - 1, 0.06)],
            "sparse": np.where(g.random(d) < 0.05, g.standard_normal(d), 0.0) + np.eye(d)[0]}


@pytest.mark.parametrize("spec", UNBIASED)
def test_unbiased_and_variance_below_omega(spec):
    """E C(x) = x (n‖mean − x‖² against the mean squared error) and the Monte-Carlo
    E‖C(x) − x‖² ≤ ω‖x‖² + 4 SE on four vectors; fixed seeds."""
    c = compressors.make(spec)
    d = 240
    assert c.unbiased and c.delta(d) == (1 - c.omega(d) if c.omega(d) < 1 else None)
    for kind, x in vectors(d).items():
        n = 1500
        y = draws(c, x, n, seed=3)
        err = np.sum((y - x) ** 2, axis=1)
        nx2 = float(x @ x)
        assert err.mean() <= c.omega(d) * nx2 + 4 * err.std(ddof=1) / math.sqrt(n), (spec, kind, err.mean() / nx2)
        # unbiased: E n‖mean − x‖² = E‖C(x) − x‖², so the ratio is ≈ 1; a bias b adds n‖b‖²/E‖C(x) − x‖²
        # (coordinate-wise z-tests are unreliable here: empirical SEs of rarely-kept coordinates)
        ratio = n * float(np.sum((y.mean(axis=0) - x) ** 2)) / err.mean()
        assert ratio < 2.0, (spec, kind, ratio)


def test_omega_formulas():
    d = 1000
    r, q = compressors.make("randk:k=64"), compressors.make("qsgd:s=4")
    c = compressors.make("compose:randk:k=64+qsgd:s=4")
    wa, wb = r.omega(d), q.omega(64)                     # B's ω at the dimension it acts on (k)
    assert c.omega(d) == pytest.approx(wa + wb + wa * wb)
    t = compressors.make("compose:topk:k=100+qsgd:s=16")
    assert not t.unbiased and t.omega(d) is None
    assert t.delta(d) == pytest.approx(0.1 * (1 - compressors.make("qsgd:s=16").omega(100)))
    assert compressors.make("compose:topk:k=100+qsgd:s=2").delta(d) is None      # ω_B ≥ 1: no δ
    h = compressors.make("hadamard:s=4")
    assert h.omega(1000) == pytest.approx(min(1024 / 16, 32 / 4, (math.log(2048) + 1) / 32))
    assert compressors.make("hadamard:s=4,p=2").omega(1000) == pytest.approx(min(1024 / 16, 32 / 4))
    assert compressors.make("countsketch:rows=3,cols=50").omega(d) == pytest.approx((d - 1) / 150)


def test_countsketch_mean_variance_is_exactly_omega():
    """The row-mean estimator's E‖x̂ − x‖² = (d − 1)/(R·C)·‖x‖² (ideal hashes): equal within 4 SE."""
    c = compressors.make("countsketch:rows=2,cols=40")
    x = vectors(200)["t2"]
    err = np.sum((draws(c, x, 3000, seed=5) - x) ** 2, axis=1)
    assert abs(err.mean() - c.omega(200) * (x @ x)) <= 4 * err.std(ddof=1) / math.sqrt(3000)


def test_topk_after_sketch_recovers_heavy_hitters():
    c = compressors.make("countsketch:rows=5,cols=100,decode=topk,k=3")
    assert not c.unbiased and c.omega(500) is None and c.delta(500) is None
    x = 0.01 * np.random.default_rng(2).standard_normal(500)
    x[[3, 50, 400]] = [5.0, -4.0, 3.0]
    y = c.decompress(c.compress(x, np.random.default_rng(0)), 500)
    assert set(np.flatnonzero(y)) == {3, 50, 400}
    assert np.allclose(y[[3, 50, 400]], x[[3, 50, 400]], atol=0.1)


# -- composition with identity, bit for bit ------------------------------------------------------
@pytest.mark.parametrize("other", ["qsgd:s=4", "randk:k=10", "topk:k=10", "natural", "threshold:lam=1.5",
                                   "randk:k=10,fp64=true", "sign", "hadamard:s=4", "compose:randk:k=64+qsgd:s=2"])
@pytest.mark.parametrize("first", [True, False])
def test_composition_with_identity_is_the_other_bit_for_bit(other, first):
    spec = f"compose:identity:fp64=true+{other}" if first else f"compose:{other}+identity:fp64=true"
    c, b = compressors.make(spec), compressors.make(other)
    d = 300
    x = np.random.default_rng(1).standard_normal(d)
    for seed in range(3):
        p, q = c.compress(x, np.random.default_rng(seed)), b.compress(x, np.random.default_rng(seed))
        if first or not other.startswith("compose"):            # (a chain's second header is where the
            assert np.array_equal(p[8:], q)                       # no-op sits) its payload after the header
        assert np.array_equal(c.decompress(p, d), b.decompress(q, d))
        assert c.model_bits(p, d) == b.model_bits(q, d)
        out1, out2 = np.ones(d), np.ones(d)
        c.decompress_add(p, d, out1, 0.3)
        b.decompress_add(q, d, out2, 0.3)
        assert np.array_equal(out1, out2)
    assert c.unbiased == b.unbiased and c.omega(d) == b.omega(d) and c.delta(d) == b.delta(d)


def test_identity_float32_in_a_composition_is_a_cast():
    x = np.random.default_rng(1).standard_normal(50)
    c = compressors.make("compose:randk:k=50,fp64=true+identity")
    y = c.decompress(c.compress(x, np.random.default_rng(0)), 50)
    assert np.array_equal(y, x.astype(np.float32).astype(np.float64))


def test_spec_parsing_round_trip_and_wire():
    assert split_parts("randk:k=4+qsgd:s=2") == ["randk:k=4", "qsgd:s=2"]
    assert split_parts("quant++qsgd") == ["quant+", "qsgd"]
    assert split_parts("rand-tau+:tau=3+qsgd") == ["rand-tau+:tau=3", "qsgd"]
    assert split_parts("randk:k=4+compose:qsgd+natural") == ["randk:k=4", "qsgd", "natural"]
    for spec in ["compose:randk:k=64+qsgd:s=4", "compose: RANDK:k=8 + natural", "compose:topk:k=5+qsgd:s=16",
                 "compose:randk:k=9+randk:k=3+natural", "hadamard", "hadamard:s=3,p=2,fp64=true",
                 "countsketch:cols=9", "countsketch:rows=2,cols=9,decode=topk,k=4"]:
        c = compressors.make(spec)
        assert compressors.make(c.spec) == c and compressors.make(c) is c
    c = compressors.make("compose:randk:k=64+qsgd:s=4")
    assert c.spec == "compose:randk:k=64+qsgd:s=4,bucket=0"
    d = 1000
    p = c.compress(np.random.default_rng(0).standard_normal(d), np.random.default_rng(1))
    q = compressors.make("qsgd:s=4")
    nnz, ibytes = p[8:16].view("<u4")                          # header | nnz | index bytes | indices | B
    inner = p[16 + ibytes:]
    assert p[:8].view("<u4")[1] == d and nnz == 64 and q.decompress(inner, 64).shape == (64,)
    ibits = c.model_bits(p, d) - q.model_bits(inner, 64)       # the index stream: ≤ 64·⌈log₂1000⌉ bits
    assert 8 * ibytes - 7 <= ibits <= 8 * ibytes <= 8 * ((64 * 10 + 7) // 8)


@pytest.mark.parametrize("spec, words", [
    ("compose:randk:k=8+topk:k=4", "constants are not defined (topk:k=4 is biased and comes second)"),
    ("compose:sign+qsgd", "constants are not defined (sign is biased and is not a coordinate selection)"),
    ("compose:qsgd", "at least two parts"),
    ("compose", "parts are required"),
    ("compose:randk:k=4,shared_seed=true+qsgd", "cannot be composed"),
    ("compose:powersgd+qsgd", "cannot be composed"),
    ("compose:threshold:lam=1+randk:k=3", "variable support"),
    ("compose:randk:k=4+nosuch", "unknown compressor 'nosuch'"),
    ("hadamard:s=0", "parameter s=0 is out of range"),
    ("hadamard:p=1", "parameter p=1 is not allowed"),
    ("countsketch:rows=2,cols=10,decode=topk,k=11", "needs 1 <= k <= cols"),
    ("countsketch:rows=2,cols=10,decode=topk", "needs 1 <= k <= cols"),
    ("countsketch:rows=0,cols=10", "parameter rows=0 is out of range"),
    ("countsketch:rows=65,cols=10", "parameter rows=65 is out of range"),
    ("countsketch:cols=0", "parameter cols=0 is out of range"),
    ("countsketch:rows=2", "parameter cols is required"),
])
def test_bad_specs_are_one_line(spec, words):
    with pytest.raises(ConfigError) as exc:
        compressors.make(spec)
    assert words in str(exc.value) and "\n" not in str(exc.value), str(exc.value)


def test_dimension_checks_and_corrupt_payloads():
    with pytest.raises(ConfigError, match="k=64 is out of range for d=10"):
        compressors.make("compose:randk:k=64+qsgd").validate(10)
    with pytest.raises(ConfigError, match="k=50 is out of range for d=10"):
        compressors.make("compose:randk:k=10+randk:k=50").validate(100)
    for spec in ["compose:randk:k=8+qsgd", "hadamard:s=4", "countsketch:rows=2,cols=8"]:
        c = compressors.make(spec)
        p = c.compress(np.arange(1.0, 41.0), np.random.default_rng(0))
        with pytest.raises(PayloadError):
            c.decompress(p[:-3], 40)
        with pytest.raises(PayloadError):
            c.decompress(p, 41)
        with pytest.raises(ValueError):
            c.compress(np.r_[np.arange(39.0), np.nan], np.random.default_rng(0))


# -- the Walsh–Hadamard kernel and the shared rotation -------------------------------------------
@pytest.mark.parametrize("n", [1, 2, 8, 1024, 4096, 8192])
def test_fwht_is_the_hadamard_matrix(n):
    y = np.random.default_rng(n).standard_normal(n)
    z = y.copy()
    fwht(z)
    assert np.allclose(z, hadamard_matrix(n) @ y, rtol=1e-12, atol=1e-9)


def test_rotation_is_orthogonal_and_inverted():
    x = np.random.default_rng(0).standard_normal(1000)
    y = np.empty(padded(1000))
    assert padded(1000) == 1024 and padded(1024) == 1024 and padded(1) == 1
    assert rotate(x, np.uint64(9), y)
    assert np.isclose(y @ y, x @ x)
    out = np.zeros(1000)
    unrotate_add(y, np.uint64(9), out, 1.0, False)
    assert np.allclose(out, x, atol=1e-12)


def test_rotation_comes_from_the_shared_generator():
    """Two workers (own generators differ, shared one equal): the same rotation seed in the payload,
    different quantization; without a shared generator the seed is per message."""
    c = compressors.make("hadamard:s=4")
    x = np.random.default_rng(0).standard_normal(100)
    p1 = c.compress(x, with_shared(np.random.default_rng(1), np.random.default_rng(5)))
    p2 = c.compress(x, with_shared(np.random.default_rng(2), np.random.default_rng(5)))
    assert np.array_equal(p1[8:16], p2[8:16]) and not np.array_equal(p1[16:], p2[16:])
    enc = c.prepared(100).encode
    p3 = enc(x, with_shared(np.random.default_rng(3), np.random.default_rng(5)))
    assert np.array_equal(p1[8:16], p3[8:16])
    q1, q2 = c.compress(x, np.random.default_rng(1)), c.compress(x, np.random.default_rng(2))
    assert not np.array_equal(q1[8:16], q2[8:16])


def test_countsketch_sums_are_the_sketch_of_the_sum():
    """Linear with shared hashes: Σ_i w_i·table_i decodes (row mean) to Σ_i w_i·decode(table_i)."""
    c = compressors.make("countsketch:rows=3,cols=50,fp64=true")
    xs = np.random.default_rng(0).standard_normal((4, 300))
    codecs = [c.sum_codec(300) for _ in range(4)]
    vs = [cd.begin(x, 0.25, np.random.default_rng(9)).copy() for cd, x in zip(codecs, xs)]
    out = np.zeros(300)
    codecs[0].decode_add(np.sum(vs, axis=0), out)
    ref = np.zeros(300)
    for x in xs:
        c.decompress_add(c.compress(x, np.random.default_rng(9)), 300, ref, 0.25)
    assert np.allclose(out, ref, rtol=1e-12, atol=1e-12)
    assert codecs[0].wire_bytes() == 3 * 50 * 8 and codecs[0].model_bits() == 3 * 50 * 64
