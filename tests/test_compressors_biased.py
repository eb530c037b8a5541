"""Tests of hpcgc.compressors: the biased compressors: top-k, hard threshold, sign, scaled sign.

Shared specs and checks: tests/compressor_checks.py.
"""
from __future__ import annotations

import numpy as np
import pytest

from hpcgc import compressors
from hpcgc.compressors.kernels import wire
from hpcgc.errors import PayloadError

from .compressor_checks import rng, topk_oracle


def _topk_inputs():
    g = rng(21)
    d = 5000
    yield "normal", g.standard_normal(d)
    yield "cauchy", g.standard_cauchy(d)
    yield "ties", g.integers(-3, 4, size=d).astype(np.float64)        # many equal magnitudes
    yield "flat", np.full(d, -0.25)
    yield "sparse", np.where(g.random(d) < 0.01, g.standard_normal(d), 0.0)
    yield "signed-zero", np.r_[np.full(10, -0.0), np.zeros(10), [1e-45, -1e-40, 3.0]]
    yield "tiny-huge", np.r_[g.standard_normal(100) * 1e-300, g.standard_normal(100) * 1e300]
    yield "close", 1.0 + np.arange(d) * 2.0**-52                        # differ in the last bits


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_topk_matches_sort_oracle(dtype):
    """The O(d) radix select returns exactly the stable-sort top-k (ties to the lowest index)."""
    for kind, x in _topk_inputs():
        if dtype == np.float32 and kind == "tiny-huge":
            continue
        x = x.astype(dtype)
        d = x.shape[0]
        for k in sorted({1, 2, 3, d // 100 + 1, d // 7, d // 2, d - 1, d} - {0}):
            c = compressors.make("topk", k=k, fp64=True)
            y = c.decompress(c.compress(x, rng()), d)
            np.testing.assert_array_equal(y, topk_oracle(x.astype(np.float64), k, True), err_msg=f"{kind} k={k}")


def test_topk_kernel_large_and_float32_values():
    x = rng(2).standard_normal(300_000).astype(np.float32)
    for k in (1, 3000, 150_000):
        c = compressors.make("topk", k=k)
        p = c.compress(x, rng())
        np.testing.assert_array_equal(c.decompress(p, x.size), topk_oracle(x.astype(np.float64), k))


@pytest.mark.parametrize("spec", ["topk:k=1", "topk:k=40", "topk:k=399", "scaled-sign", "scaled-sign:fp64=true"])
@pytest.mark.parametrize("kind", ["flat", "spike", "cauchy", "normal", "sparse", "t2"])
def test_contraction(spec, kind):
    """‖C(x) − x‖² ≤ (1 − δ)‖x‖² with δ = delta(d); scaled sign attains (1 − δ(x))‖x‖² exactly."""
    c = compressors.make(spec)
    g = rng(3)
    d = 400
    x = {"flat": np.ones(d), "spike": np.eye(1, d, 17).ravel(), "cauchy": g.standard_cauchy(d),
         "normal": g.standard_normal(d), "sparse": np.where(g.random(d) < 0.05, g.standard_normal(d), 0.0),
         "t2": g.standard_t(2, d)}[kind]
    y = c.decompress(c.compress(x, g), d)
    err, nx2 = float(np.sum((y - x) ** 2)), float(x @ x)
    dl = c.delta(d)
    assert dl == pytest.approx(c.k / d if c.name == "topk" else 1 / d)
    assert err <= (1 - dl) * nx2 + 1e-12 * nx2
    if c.name == "scaled-sign":
        dx = c.contraction(x)
        assert dl <= dx * (1 + 1e-12) <= 1 + 1e-12
        tol = 1e-12 if c.params["fp64"] else 1e-6             # float32 scale
        assert err == pytest.approx((1 - dx) * nx2, rel=tol, abs=tol * nx2)
        if kind == "spike":
            assert dx == pytest.approx(1 / d)                  # δ = 1/d is attained
        if kind == "flat":
            assert err <= 1e-12 * nx2                          # δ(x) = 1: exact


def test_threshold_absolute_bound_and_count():
    g = rng(4)
    d = 20_000
    for lam in (0.0, 0.1, 1.0, 3.0, 100.0):
        c = compressors.make("threshold", lam=lam)
        assert c.delta(d) is None and c.omega(d) is None and not c.unbiased
        assert c.error_bound(d) == d * lam**2
        for x in (g.standard_normal(d), g.standard_cauchy(d), np.full(d, 0.999 * lam)):
            p = c.compress(x, g)
            y = c.decompress(p, d)
            kept = np.abs(x) >= lam
            assert int.from_bytes(p[8:12].tobytes(), "little") == kept.sum()
            err = float(np.sum((y - x) ** 2))
            assert np.sum(x[~kept] ** 2) <= err <= c.error_bound(d) + 1e-12 * float(x @ x)
            np.testing.assert_array_equal(y[~kept], 0.0)


def test_sign_bits_and_zero_convention():
    x = np.array([1.0, -2.0, 0.0, -0.0, 3.0, -1e-300, 5e-324, -4.0, 2.0])
    c = compressors.make("sign")
    p = c.compress(x, rng())
    assert p.size == wire.HEADER_BYTES + 2
    assert p[8] == 0b10100010 and p[9] == 0                      # bit j = [x_j < 0]; -0.0 is +
    np.testing.assert_array_equal(c.decompress(p, 9), np.where(x < 0, -1.0, 1.0))
    assert c.model_bits(p, 9) == 9
    q = p.copy()
    q[9] = 0b10                                                   # padding bit set
    with pytest.raises(PayloadError, match="padding"):
        c.decompress(q, 9)
    s = compressors.make("scaled-sign")
    p = s.compress(x, rng())
    assert s.model_bits(p, 9) == 32 + 9 and p.size == wire.HEADER_BYTES + 4 + 2
    p[8:12] = np.frombuffer(np.float32(-1.0).tobytes(), np.uint8)
    with pytest.raises(PayloadError, match="scale"):
        s.decompress(p, 9)
    assert s.decompress(s.compress(np.zeros(9), rng()), 9).tolist() == [0.0] * 9


def test_delta_api():
    d = 100
    assert compressors.make("identity").delta(d) == 1.0
    assert compressors.make("qsgd:s=16").delta(d) == pytest.approx(1 - compressors.make("qsgd:s=16").omega(d))
    assert compressors.make("randk:k=10").delta(d) is None                  # ω = 9 ≥ 1
    assert compressors.make("topk:k=25").delta(d) == 0.25
    assert compressors.make("sign").delta(d) is None
    assert compressors.make("threshold:lam=1").delta(d) is None
    assert compressors.make("scaled-sign").delta(d) == 0.01
    assert compressors.make("powersgd").delta(d) is None and compressors.make("powersgd").omega(d) is None
