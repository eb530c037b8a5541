"""Tests of hpcgc.compressors: error handling: bad specs, parameters against d, bad inputs, invalid payloads.

Shared specs and checks: tests/compressor_checks.py.
"""
from __future__ import annotations

import numpy as np
import pytest

from hpcgc import compressors
from hpcgc.compressors.kernels import wire
from hpcgc.errors import ConfigError, PayloadError

from .compressor_checks import ALL_SPECS, rng


@pytest.mark.parametrize("spec,kwargs,param", [
    ("qsgd", {"s": 0}, "s"),
    ("qsgd", {"s": -3}, "s"),
    ("qsgd", {"s": 2.5}, "s"),
    ("qsgd", {"s": True}, "s"),
    ("qsgd", {"s": "four"}, "s"),
    ("qsgd", {"s": 2**31}, "s"),
    ("qsgd", {"s": float("inf")}, "s"),
    ("qsgd", {"bucket": -1}, "bucket"),
    ("qsgd:s=nan", {}, "s"),
    ("quant", {"p": 3}, "p"),
    ("quant", {"p": 1}, "p"),
    ("quant", {"p": "two"}, "p"),
    ("quant", {"block": 0}, "block"),
    ("quant", {"block": -4}, "block"),
    ("quant", {"block": 2.5}, "block"),
    ("quant:block=-inf", {}, "block"),
    ("terngrad", {"block": 0}, "block"),
    ("terngrad", {"p": 2}, "p"),
    ("randk", {}, "k"),
    ("randk", {"k": 0}, "k"),
    ("randk", {"k": -1}, "k"),
    ("randk", {"k": 2, "shared_seed": 1}, "shared_seed"),
    ("topk", {}, "k"),
    ("topk", {"k": 0}, "k"),
    ("topk", {"k": 1.5}, "k"),
    ("topk", {"k": 2**32}, "k"),
    ("threshold", {}, "lam"),
    ("threshold", {"lam": -1.0}, "lam"),
    ("threshold", {"lam": float("nan")}, "lam"),
    ("threshold", {"lam": float("inf")}, "lam"),
    ("sign", {"fp64": True}, "fp64"),
    ("bernoulli", {}, "p"),
    ("bernoulli", {"p": 0}, "p"),
    ("bernoulli", {"p": 1.5}, "p"),
    ("qsgd", {"p": 1}, "p"),
    ("natural", {"s": 2}, "s"),
    ("natural-dither", {"s": 0}, "s"),
    ("natural-dither", {"s": 63}, "s"),
    ("natural-dither", {"p": 3}, "p"),
    ("natural-dither", {"bucket": -1}, "bucket"),
    ("natural-randk", {}, "k"),
    ("natural-randk", {"k": 0}, "k"),
    ("scaled-sign", {"k": 3}, "k"),
    ("identity", {"fp64": "maybe"}, "fp64"),
    ("identity", {"fp64": 1}, "fp64"),
    ("qsgd:foo=1", {}, "foo"),
    ("qsgd:s=4", {"s": 4}, "s"),
    ("qsgd:s=4,s=5", {}, "s"),
])
def test_config_errors(spec, kwargs, param):
    with pytest.raises(ConfigError) as ei:
        compressors.make(spec, **kwargs)
    msg = str(ei.value)
    assert param in msg
    assert spec.split(":")[0] in msg


def test_config_error_messages_name_range():
    with pytest.raises(ConfigError, match=r"qsgd: parameter s=0 .*integer >= 1"):
        compressors.make("qsgd", s=0)
    with pytest.raises(ConfigError, match=r"quant: parameter p=3 .*one of 2, inf"):
        compressors.make("quant:p=3")
    with pytest.raises(ConfigError, match=r"unknown parameter 'foo'; parameters: s, bucket, p, fp64"):
        compressors.make("qsgd", foo=1)


def test_unknown_compressor_lists_available():
    with pytest.raises(ConfigError, match="unknown compressor 'nope'; available: .*identity, .*qsgd, quant, "):
        compressors.make("nope")
    with pytest.raises(ConfigError, match="available"):
        compressors.describe("nope:k=1")
    with pytest.raises(ConfigError):
        compressors.make("qsgd:s")
    with pytest.raises(ConfigError):
        compressors.make(3)


def test_k_larger_than_d():
    c = compressors.make("randk:k=10")
    with pytest.raises(ConfigError, match=r"randk: parameter k=10 .*d=5"):
        c.validate(5)
    with pytest.raises(ConfigError, match="k=10"):
        c.compress(np.ones(5), rng())
    c.validate(10)
    for bad in (0, -1, 2**32, 2.0, True):
        with pytest.raises(ConfigError, match="d"):
            compressors.make("qsgd").validate(bad)


@pytest.mark.parametrize("spec", ALL_SPECS)
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("where", [0, 777, 1999])
def test_nonfinite_input(spec, bad, where):
    c = compressors.make(spec)
    x = rng(1).standard_normal(2000)
    x[where] = bad
    with pytest.raises(ValueError, match="non-finite"):
        c.compress(x, rng())
    with pytest.raises(ValueError, match="non-finite"):
        c.compress(x.astype(np.float32), rng())


def test_float32_overflow_values():
    x = np.ones(10)
    x[4] = 1e40                   # beyond float32, and so is ‖x‖₁/d
    for spec in ("identity", "randk:k=10", "quant", "qsgd", "terngrad", "topk:k=3", "threshold:lam=0.5",
                 "scaled-sign", "bernoulli:p=1", "natural", "natural-randk:k=10", "natural-dither"):
        with pytest.raises(ValueError, match="fp64=true"):
            compressors.make(spec).compress(x, rng())
        c = compressors.make(spec, fp64=True)
        assert np.isfinite(c.decompress(c.compress(x, rng()), 10)).all()


def test_bad_input_shapes():
    c = compressors.make("qsgd")
    with pytest.raises(ValueError):
        c.compress(np.ones((3, 3)), rng())
    with pytest.raises(ConfigError):
        c.compress(np.ones(0), rng())
    with pytest.raises(ValueError):
        c.compress(np.array(["a", "b"]), rng())
    y = c.decompress(c.compress(np.arange(10), rng()), 10)     # ints are converted
    assert y.shape == (10,)


@pytest.mark.parametrize("spec", ALL_SPECS)
def test_payload_errors(spec):
    c = compressors.make(spec)
    d = 3000
    x = rng(1).standard_normal(d)
    p = c.compress(x, rng(2))
    out = np.zeros(d)

    def bad(payload, dd=d, match=None):
        with pytest.raises(PayloadError, match=match):
            c.decompress(payload, dd)
        with pytest.raises(PayloadError, match=match):
            c.model_bits(payload, dd)
        if dd == d:
            with pytest.raises(PayloadError, match=match):
                c.decompress_add(payload, dd, out, 1.0)
            assert np.all(out == 0)                        # untouched

    bad(p[:-1], match="truncated")
    bad(p[:3], match="truncated")
    bad(p[:0])
    bad(np.r_[p, np.uint8(0)], match="trailing")
    bad(p, d + 1, match="dimension")
    bad(p, d - 1, match="dimension")
    for i, match in ((0, "format"), (1, "flags"), (2, "parameters"), (3, "parameters"), (4, "dimension"),
                     (7, "dimension")):
        q = p.copy()
        q[i] ^= 0x10
        bad(q, match=match)
    with pytest.raises(PayloadError):
        c.decompress(p.astype(np.int16), d)
    with pytest.raises(PayloadError):
        c.decompress(p.reshape(1, -1), d)
    with pytest.raises(PayloadError):
        c.decompress(p, 0)


def test_payload_parameter_mismatch():
    x = rng(1).standard_normal(100)
    p = compressors.make("qsgd:s=4").compress(x, rng())
    with pytest.raises(PayloadError, match="different parameters"):
        compressors.make("qsgd:s=8").decompress(p, 100)
    with pytest.raises(PayloadError, match="format"):
        compressors.make("quant").decompress(p, 100)
    p = compressors.make("quant:p=inf,block=inf").compress(x, rng())
    with pytest.raises(PayloadError):
        compressors.make("terngrad").decompress(p, 100)
    with pytest.raises(PayloadError, match="flags"):
        compressors.make("quant:p=inf,fp64=true").decompress(p, 100)


def test_payload_body_corruption():
    d = 1000
    x = rng(1).standard_normal(d)
    H = wire.HEADER_BYTES
    out = np.zeros(d)
    # quant: a trit byte ≥ 243
    c = compressors.make("quant:p=2")
    p = c.compress(x, rng())
    p[H + 4 + 17] = 250
    with pytest.raises(PayloadError, match="243"):
        c.decompress(p, d)
    # quant: nonzero padding trits (d = 1001: the last byte holds one trit)
    p = c.compress(np.r_[x, 1.0], rng())
    p[-1] = 3
    with pytest.raises(PayloadError, match="padding"):
        c.decompress(p, d + 1)
    # qsgd s=4 (3 level bits, 4-bit fields): a level of 7 > s
    c = compressors.make("qsgd:s=4")
    p = c.compress(x, rng())
    p[H + 4 + 10] = 0xFF
    with pytest.raises(PayloadError, match="level"):
        c.decompress_add(p, d, out, 1.0)
    assert np.all(out == 0)
    # NaN or negative norm
    for bad_norm in (np.nan, -1.0):
        p = c.compress(x, rng())
        p[H:H + 4] = np.frombuffer(np.float32(bad_norm).tobytes(), np.uint8)
        with pytest.raises(PayloadError, match="norm"):
            c.decompress(p, d)
    # randk: indices out of range / not increasing
    c = compressors.make("randk:k=10")
    p = c.compress(x, rng())
    q = p.copy()
    q[H + 40:] = 0xFF             # every index = 1023 ≥ d
    with pytest.raises(PayloadError, match="indices"):
        c.decompress_add(q, d, out, 1.0)
    q = p.copy()
    q[H:H + 4] = np.frombuffer(np.float32(np.nan).tobytes(), np.uint8)
    with pytest.raises(PayloadError, match="non-finite"):
        c.decompress(q, d)
    c = compressors.make("identity")
    q = c.compress(x, rng())
    q[H + 8:H + 12] = np.frombuffer(np.float32(np.inf).tobytes(), np.uint8)
    with pytest.raises(PayloadError, match="non-finite"):
        c.decompress_add(q, d, out, 1.0)
    c = compressors.make("randk:k=10")
    q = p.copy()
    q[H + 40:] = 0                # all indices 0: duplicates
    with pytest.raises(PayloadError, match="indices"):
        c.decompress(q, d)
    assert np.all(out == 0)


def test_decompress_add_out_checks():
    c = compressors.make("qsgd")
    p = c.compress(np.ones(10), rng())
    for out in (np.zeros(11), np.zeros(10, np.float32), np.zeros((10, 1)), np.zeros(20)[::2]):
        with pytest.raises(ValueError):
            c.decompress_add(p, 10, out, 1.0)
