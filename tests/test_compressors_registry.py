"""Tests of hpcgc.compressors: the registry, compressor specs (parsing, canonical forms) and describe, ω values.

Shared specs and checks: tests/compressor_checks.py.
"""
from __future__ import annotations

import numpy as np
import pytest

from hpcgc import compressors

from .compressor_checks import ALL_SPECS, MIN_PARAMS

BIASED = ("topk", "threshold", "sign", "scaled-sign", "powersgd")


def test_registry_and_describe():
    names = compressors.available()
    assert names == sorted(names)
    assert {"identity", "qsgd", "quant", "terngrad", "randk"} <= set(names)
    for n in names:
        line = compressors.describe(n)
        assert "\n" not in line and line.startswith(n + ":")
        assert compressors.REGISTRY[n].name == n
    assert "s=4" in compressors.describe("qsgd") and "bucket=0" in compressors.describe("qsgd")
    assert "k=required" in compressors.describe("randk")


@pytest.mark.parametrize("spec", ALL_SPECS)
def test_spec_round_trip(spec):
    c = compressors.make(spec)
    c2 = compressors.make(c.spec)
    assert c2 == c and c2.spec == c.spec and c2.params == c.params
    assert compressors.make(c.name, **c.params) == c
    assert isinstance(c.unbiased, bool)


def test_spec_canonical_forms():
    assert compressors.make("qsgd", s=4).spec == "qsgd:s=4,bucket=0"
    assert compressors.make("qsgd:s=4").spec == "qsgd:s=4,bucket=0"
    assert compressors.make(" QSGD : s = 4 , bucket = 512 ").spec == "qsgd:s=4,bucket=512"
    assert compressors.make("qsgd:s=4,fp64=true").spec == "qsgd:s=4,bucket=0,fp64=true"
    assert compressors.make("quant:p=inf,block=32").spec == "quant:p=inf,block=32"
    assert compressors.make("quant:p=2.0,block=32.0").spec == "quant:p=2,block=32"
    assert compressors.make("quant", p=float("inf")).spec == "quant:p=inf,block=inf"
    assert compressors.make("terngrad").spec == "terngrad:block=inf"
    assert compressors.make("randk:k=10").spec == "randk:k=10"
    assert compressors.make("randk:k=1e3").params["k"] == 1000
    assert compressors.make("randk", k=np.int64(7)).params == {"k": 7, "shared_seed": False, "fp64": False}
    assert compressors.make("randk:k=7,shared_seed=true").spec == "randk:k=7,shared_seed=true"
    assert compressors.make("topk:k=7").spec == "topk:k=7"
    assert compressors.make("threshold:lam=0.5").spec == "threshold:lam=0.5"
    assert compressors.make("threshold", lam=1).spec == "threshold:lam=1.0"
    assert compressors.make("sign").spec == "sign"
    assert compressors.make("scaled-sign:fp64=true").spec == "scaled-sign:fp64=true"
    assert compressors.make("identity").spec == "identity"
    c = compressors.make("qsgd:s=4")
    assert compressors.make(c) is c
    assert compressors.make(c, bucket=8).spec == "qsgd:s=4,bucket=8"


def test_omega_values():
    assert compressors.make("identity").omega(100) == 0.0
    assert compressors.make("randk:k=10").omega(100) == pytest.approx(9.0)
    q = compressors.make("qsgd:s=4")
    assert q.omega(400) == pytest.approx(min(400 / 16, 20 / 4))
    assert compressors.make("qsgd:s=4,bucket=64").omega(400) == pytest.approx(min(64 / 16, 8 / 4))
    assert compressors.make("qsgd:s=4,bucket=1000").omega(400) == q.omega(400)
    assert compressors.make("quant:p=2").omega(400) == pytest.approx(19.0)
    assert compressors.make("quant:p=inf").omega(400) == pytest.approx(9.5)
    assert compressors.make("quant:p=inf,block=16").omega(400) == pytest.approx(1.5)
    assert compressors.make("quant:p=2,block=1000").omega(400) == pytest.approx(19.0)
    assert compressors.make("terngrad").omega(400) == pytest.approx(9.5)
    for name, params in MIN_PARAMS.items():
        c = compressors.make(name, **params)
        assert c.unbiased == (name not in BIASED)
        assert (c.omega(10) is not None) == c.unbiased
