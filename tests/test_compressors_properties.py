"""Tests of hpcgc.compressors: hypothesis properties over d, parameters and special inputs.

Shared specs and checks: tests/compressor_checks.py.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hpcgc import compressors
from hpcgc.compressors.kernels import wire
from hpcgc.errors import PayloadError

from .compressor_checks import MIN_PARAMS, check_decoded, rng


@st.composite
def compressor_specs(draw, d):
    name = draw(st.sampled_from(sorted(MIN_PARAMS)))
    fp64 = draw(st.booleans())
    if name == "qsgd":
        params = {"s": draw(st.sampled_from([1, 2, 3, 4, 7, 8, 15, 100, 255, 256, 2**20])),
                  "bucket": draw(st.one_of(st.just(0), st.integers(1, 70), st.integers(1, 4000))),
                  "p": draw(st.sampled_from([2, math.inf]))}
    elif name in ("quant", "terngrad"):
        params = {"block": draw(st.one_of(st.just(math.inf), st.integers(1, 70), st.integers(1, 4000)))}
        if name == "quant":
            params["p"] = draw(st.sampled_from([2, math.inf]))
    elif name == "randk":
        params = {"k": draw(st.integers(1, d)), "shared_seed": draw(st.booleans())}
    elif name == "topk":
        params = {"k": draw(st.one_of(st.integers(1, d), st.integers(max(1, d - 3), d)))}
    elif name == "natural-dither":
        params = {"s": draw(st.sampled_from([1, 2, 3, 7, 8, 30])), "p": draw(st.sampled_from([2, math.inf])),
                  "bucket": draw(st.one_of(st.just(0), st.integers(1, 70)))}
    elif name == "natural-randk":
        params = {"k": draw(st.integers(1, d))}
    elif name == "bernoulli":
        params = {"p": draw(st.sampled_from([0.01, 0.5, 1.0]))}
    elif name == "powersgd":
        rows = draw(st.one_of(st.just(0), st.integers(1, d)))
        shape = compressors.make("powersgd", rank=1, rows=rows).matrix_shape(d)
        params = {"rows": rows, "rank": draw(st.integers(1, min(shape)))}
    elif name == "threshold":
        params = {"lam": draw(st.sampled_from([0.0, 1e-30, 0.1, 1.0, 2.0, 1e30]))}
    else:
        params = {}
    if name == "sign":
        return compressors.make(name)
    return compressors.make(name, fp64=fp64, **params)


@st.composite
def vectors(draw):
    d = draw(st.integers(1, 3000))
    kind = draw(st.sampled_from(["zeros", "one", "normal", "cauchy", "tiny", "large", "ints",
                                 "const", "sparse"]))
    g = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    if kind == "zeros":
        x = np.zeros(d)
    elif kind == "one":
        x = np.zeros(d)
        x[draw(st.integers(0, d - 1))] = draw(st.sampled_from([1.0, -3.5, 1e-30, 1e30]))
    elif kind == "normal":
        x = g.standard_normal(d)
    elif kind == "cauchy":
        x = g.standard_cauchy(d)
    elif kind == "tiny":
        x = g.standard_normal(d) * 1e-30
    elif kind == "large":
        x = g.standard_normal(d) * 1e30
    elif kind == "ints":
        x = g.integers(-3, 4, size=d).astype(np.float64)
    elif kind == "const":
        x = np.full(d, -2.0)
    else:
        x = np.where(g.random(d) < 0.1, g.standard_normal(d), 0.0)
    if draw(st.booleans()):
        x = x.astype(np.float32)
    return x


@given(data=st.data())
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_properties(data):
    x = data.draw(vectors())
    d = x.shape[0]
    c = data.draw(compressor_specs(d))
    c.validate(d)
    seed = data.draw(st.integers(0, 2**32 - 1))
    p = c.compress(x, rng(seed))
    np.testing.assert_array_equal(p, c.compress(x, rng(seed)))
    assert p.dtype == np.uint8 and p.ndim == 1
    assert p[4:8].view("<u4")[0] == d
    model = c.model_bits(p, d)
    assert 8 * p.size - 8 * wire.HEADER_BYTES <= model + 40 + model // 50     # padding + 1.6/1.585
    assert 8 * p.size >= model
    y = c.decompress(p, d)
    x64 = x.astype(np.float64)
    check_decoded(c, x64, y)
    if not np.any(x64) and c.name != "sign":
        assert not np.any(y)
    w = data.draw(st.sampled_from([1.0, -0.5, 3.0]))
    out = np.linspace(-1, 1, d)
    ref = out + w * y
    c.decompress_add(p, d, out, w)
    np.testing.assert_allclose(out, ref, rtol=1e-12, atol=1e-300)
    # round trip of the spec, and ω well defined for this d
    assert compressors.make(c.spec) == c
    om = c.omega(d)
    if c.unbiased:
        assert om >= 0.0 and math.isfinite(om)
    else:
        assert om is None
        dl = c.delta(d)
        assert dl is None or 0.0 < dl <= 1.0
        if dl is not None:       # ‖C(x) − x‖² ≤ (1 − δ)‖x‖² (+ float32 rounding of values)
            nx2 = np.sum(x64**2)
            assert np.sum((y - x64) ** 2) <= (1 - dl) * nx2 + 1e-12 * nx2 + 1e-300
    # truncated payloads are always rejected
    with pytest.raises(PayloadError):
        c.decompress(p[:-1], d)
