"""Tests of hpcgc.compressors: statistics: unbiasedness and variance against ω and the closed-form
variance (Monte Carlo, fixed seeds, 4 standard errors).

Shared specs and checks: tests/compressor_checks.py.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from hpcgc import compressors
from hpcgc.compressors.kernels.prng import next_below, uniform_at

from .compressor_checks import check_unbiased, coord_variance, draws, rng

UNBIASED_SPECS = [
    "identity:fp64=true",
    "qsgd:s=1",
    "qsgd:s=4,bucket=16",
    "qsgd:s=3,bucket=50",
    "qsgd:s=4,fp64=true",
    "quant:p=2",
    "quant:p=2,block=10",
    "quant:p=inf,block=7",
    "terngrad",
    "randk:k=5",
    "randk:k=37",
    "randk:k=37,shared_seed=true",
    "randk:k=100",
    "bernoulli:p=0.3",
    "bernoulli:p=1.0",
    "qsgd:s=3,p=inf",
    "qsgd:s=2,p=inf,bucket=16",
    "natural",
    "natural:fp64=true",
    "natural-dither",
    "natural-dither:s=2,p=inf,bucket=32",
    "natural-dither:s=5,bucket=50,fp64=true",
    "natural-randk:k=30",
    "natural-randk:k=100,fp64=true",
]


def exact_variance(c, x):
    """E‖C(x) − x‖² in closed form."""
    return float(np.sum(coord_variance(c, x)))


@pytest.mark.parametrize("spec", UNBIASED_SPECS)
def test_unbiased(spec):
    c = compressors.make(spec)
    check_unbiased(c, spec, d=123 if "randk" in spec else 200, k_se=4.5)


def test_identity_float32_is_rounding():
    x = rng(1).standard_normal(50)
    c = compressors.make("identity")
    y = c.decompress(c.compress(x, rng()), 50)
    assert np.array_equal(y, x.astype(np.float32).astype(np.float64))


def _mc_variance(c, x, n, seed):
    y = draws(c, x, n, seed)
    err = np.sum((y - x) ** 2, axis=1)
    return err.mean(), err.std(ddof=1) / math.sqrt(n)


@pytest.mark.parametrize("spec,d,kind,omega_exact", [
    ("quant:p=2", 400, "flat", 19.0),
    ("quant:p=2,block=25", 400, "flat", 4.0),
    ("quant:p=inf", 400, "spike", 9.5),
    ("terngrad", 400, "spike", 9.5),
    ("quant:p=inf,block=16", 400, "spike", 1.5),
    ("randk:k=10", 300, "t", 29.0),
    ("randk:k=150", 300, "flat", 1.0),
    ("bernoulli:p=0.25", 300, "t", 3.0),
    ("natural", 400, "nat", 0.125),
    ("natural:fp64=true", 400, "nat", 0.125),
    ("natural-randk:k=40", 400, "nat", 1.125 * 9 + 0.125),
])
def test_variance_tight(spec, d, kind, omega_exact):
    """Worst-case vectors attain ω (the Monte-Carlo estimate matches ω within 4 SE)."""
    c = compressors.make(spec)
    assert c.omega(d) == pytest.approx(omega_exact)
    if kind == "flat":
        x = np.full(d, 0.7)
    elif kind == "spike":
        b = c.block_size(d)
        blk = np.full(b, 1.0 / (math.sqrt(b) + 1.0))
        blk[0] = 1.0
        x = np.tile(blk, d // b)
    elif kind == "nat":                       # |t| = (4/3)·2^a: C_nat's worst case
        g = rng(8)
        x = (4 / 3) * np.ldexp(1.0, g.integers(-30, 30, size=d)) * g.choice([-1.0, 1.0], size=d)
    else:
        x = rng(5).standard_t(1.5, size=d)
    nx2 = float(x @ x)
    est, se = _mc_variance(c, x, 2000, seed=3)
    # exact value: closed form with float32 scales; ≈ ω‖x‖² up to float32 rounding of the norm
    exact = exact_variance(c, x)
    assert exact == pytest.approx(omega_exact * nx2, rel=1e-6)
    assert abs(est - exact) <= 4 * se + 1e-6 * exact, (est / nx2, omega_exact)


@pytest.mark.parametrize("spec", ["qsgd:s=1", "qsgd:s=2", "qsgd:s=8,bucket=32", "qsgd:s=16",
                                  "quant:p=2", "quant:p=inf", "quant:p=2,block=24",
                                  "terngrad:block=50", "randk:k=20", "qsgd:s=4,p=inf",
                                  "qsgd:s=2,p=inf,bucket=16", "bernoulli:p=0.2", "natural",
                                  "natural-dither", "natural-dither:s=2", "natural-dither:s=3,p=inf,bucket=24",
                                  "natural-randk:k=20"])
@pytest.mark.parametrize("kind", ["flat", "cauchy", "t2", "normal", "spike", "sparse"])
def test_variance_bound(spec, kind):
    """E‖C(x) − x‖² ≤ ω‖x‖²: exact closed form on every vector; Monte Carlo on each."""
    c = compressors.make(spec)
    g = rng(7)
    d = 240
    x = {"flat": np.ones(d), "cauchy": g.standard_cauchy(d), "t2": g.standard_t(2, d),
         "normal": g.standard_normal(d), "spike": np.r_[1.0, np.full(d - 1, 0.06)],
         "sparse": np.where(g.random(d) < 0.05, g.standard_normal(d), 0.0)}[kind]
    nx2 = float(x @ x)
    omega = c.omega(d)
    exact = exact_variance(c, x)
    assert exact <= omega * nx2 * (1 + 1e-6)
    est, se = _mc_variance(c, x, 400, seed=9)
    assert abs(est - exact) <= 4 * se + 1e-12 * nx2
    assert est <= omega * nx2 + 4 * se


def test_randk_inclusion_uniform():
    """Every coordinate is kept with probability k/d; index sets have k distinct elements."""
    d, k, n = 50, 7, 4000
    c = compressors.make("randk", k=k)
    x = np.arange(1.0, d + 1)
    y = draws(c, x, n, seed=2)
    kept = y != 0
    assert np.all(kept.sum(axis=1) == k)
    freq = kept.mean(axis=0)
    p = k / d
    assert np.all(np.abs(freq - p) <= 4 * math.sqrt(p * (1 - p) / n))


def test_prng_helpers():
    u = np.array([uniform_at(np.uint64(12345), i) for i in range(20000)])
    assert 0.0 <= u.min() and u.max() < 1.0
    assert abs(u.mean() - 0.5) < 4 * math.sqrt(1 / 12 / u.size)
    st_ = np.uint64(99)
    counts = np.zeros(7)
    for _ in range(7000):
        st_, t = next_below(np.uint64(st_), 7)
        counts[t] += 1
    assert counts.min() > 850 and counts.max() < 1150
