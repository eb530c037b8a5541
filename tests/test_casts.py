"""The low-precision casts without MPI: the float16 / bfloat16 kernels against independent numpy
roundings, the spec syntax (bare flags, one wire type), bits, the overflow marker, and int8's
levels, ω and unbiasedness (the gather form; the Allreduce form: tests/mpi/test_casts_mpi.py)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from hpcgc import compressors, config
from hpcgc.compressors.kernels import casts
from hpcgc.compressors.params import parse_spec
from hpcgc.errors import ConfigError, PayloadError
from hpcgc.run.experiment import check_world
from hpcgc.run.setup import plan


def wide_sample(n=200_000, seed=0):
    g = np.random.default_rng(seed)
    x = g.standard_normal(n) * 10.0 ** g.uniform(-12, 8, n)
    edges = [65504.0, 65519.99, 65520.0, -65520.0, 2.0 ** -14, 2.0 ** -24, 2.0 ** -25, 3 * 2.0 ** -26,
             1.5 * 2.0 ** -24, 0.0, -0.0, 1.0 + 2.0 ** -11, 1.0 + 3 * 2.0 ** -11, 1e-30, 3.3e38, 3.4e38]
    return np.concatenate([x, edges])


def bf16_ref(x):
    """Round-to-nearest-even at 8 significant bits (frexp/rint in float64), in float32 (Inf beyond)."""
    m, e = np.frexp(x)
    with np.errstate(over="ignore"):
        return np.ldexp(np.rint(m * 256.0) / 256.0, e).astype(np.float32)


def test_fp16_kernel_equals_numpy_float16_bit_for_bit():
    x = wide_sample()
    h = np.empty(x.size, np.uint16)
    assert casts.to_half(x, 1.0, h) == casts.OVERFLOW
    with np.errstate(over="ignore"):
        ref = x.astype(np.float16)
    assert np.array_equal(h, ref.view(np.uint16))
    out = np.zeros(x.size)
    casts.half_add(h, 1.0, out, False)
    assert np.array_equal(out, ref.astype(np.float64))
    fin = np.abs(x) < 65504
    normal = fin & (np.abs(x) >= 2.0 ** -14)
    assert np.all(np.abs(out - x)[normal] <= 2.0 ** -11 * np.abs(x[normal]))
    assert np.all(np.abs(out - x)[fin & ~normal] <= 2.0 ** -25)


def test_bf16_kernel_one_rounding_from_float64():
    x = wide_sample(seed=1)
    x = x[np.abs(x) > 2.0 ** -120]                           # float32 normal range (no subnormal double rounding)
    h = np.empty(x.size, np.uint16)
    casts.to_bf16(x, 1.0, h)
    ref = bf16_ref(x)
    assert np.array_equal(h, (ref.view(np.uint32) >> 16).astype(np.uint16))
    out = np.zeros(x.size)
    casts.bf16_add(h, 1.0, out, False)
    fin = np.isfinite(ref)
    assert np.all(np.abs(out - x)[fin] <= 2.0 ** -8 * np.abs(x[fin]))
    # from float32 values: exactly the top 16 bits of float32 with round-to-nearest-even
    x32 = x[np.abs(x) < 3e38].astype(np.float32)
    casts.to_bf16(x32.astype(np.float64), 1.0, h[:x32.size])
    u = x32.view(np.uint32).astype(np.uint64)
    assert np.array_equal(h[:x32.size], ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16))


def test_bf16_sum_operation_is_float32_add_rounded_once():
    g = np.random.default_rng(3)
    a32, b32 = bf16_ref(g.standard_normal(5000)), bf16_ref(g.standard_normal(5000) * 100)
    a, b = (a32.view(np.uint32) >> 16).astype(np.uint16), (b32.view(np.uint32) >> 16).astype(np.uint16)
    casts.bf16_sum_into(a, b)
    ref = bf16_ref((a32 + b32).astype(np.float64))
    assert np.array_equal(b, (ref.view(np.uint32) >> 16).astype(np.uint16))


def test_spec_bare_flags_one_wire_type():
    assert parse_spec("identity:fp16") == ("identity", {"fp16": True})
    assert parse_spec("identity: fp64 ") == ("identity", {"fp64": True})
    with pytest.raises(ConfigError, match="got item"):
        parse_spec("identity:fp64,")
    assert compressors.make("identity:fp16").spec == "identity:fp16"
    assert compressors.make("identity:bf16=true").spec == "identity:bf16"
    assert compressors.make("identity:fp64").spec == "identity:fp64=true"          # unchanged canonical form
    for spec in ("identity:fp16,bf16", "identity:fp64,fp16", "identity:bf16,fp64=true"):
        with pytest.raises(ConfigError, match="conflict; choose one wire type"):
            compressors.make(spec)
    c = compressors.make("identity:fp16")
    assert compressors.make(c.spec) == c


@pytest.mark.parametrize("spec,bits,u", [("identity", 32, 2.0 ** -24), ("identity:fp64", 64, 2.0 ** -53),
                                         ("identity:fp16", 16, 2.0 ** -11), ("identity:bf16", 16, 2.0 ** -8)])
def test_bits_rounding_and_theory(spec, bits, u):
    c = compressors.make(spec)
    d = 77
    x = np.random.default_rng(4).standard_normal(d)
    p = c.compress(x, np.random.default_rng(0))
    assert p.size == 8 + bits // 8 * d
    assert c.model_bits(p, d) == bits * d
    assert c.rounding == u and c.unbiased and c.omega(d) == 0.0
    y = c.decompress(p, d)
    assert np.linalg.norm(y - x) <= u * np.linalg.norm(x)
    assert "allreduce" in c.collectives


@pytest.mark.parametrize("spec", ["identity:fp16", "identity:bf16"])
def test_cast_overflow_travels_as_inf_and_is_remembered(spec):
    c = compressors.make(spec)
    big = 7e4 if spec == "identity:fp16" else 3.5e38
    x = np.array([1.0, -big, 2.0])
    p = c.compress(x, np.random.default_rng(0))
    assert c.overflow == big
    y = c.decompress(p, 3)
    assert y[1] == -np.inf and y[0] == 1.0
    with pytest.raises(ValueError, match="non-finite"):
        c.compress(np.array([1.0, np.nan]), np.random.default_rng(0))
    bad = p.copy()
    bad[8 + 2:8 + 4] = np.frombuffer(np.array([0x7E01 if spec == "identity:fp16" else 0x7FC1], "<u2").tobytes(),
                                     np.uint8)
    with pytest.raises(PayloadError, match="NaN"):
        c.decompress(bad, 3)


def test_fp16_values_just_above_max_round_to_max():
    c = compressors.make("identity:fp16")
    y = c.decompress(c.compress(np.array([65519.0, -65510.0]), np.random.default_rng(0)), 2)
    assert y.tolist() == [65504.0, -65504.0] and c.overflow == 0.0


def test_int8_levels_omega_and_worker_limit():
    c = compressors.make("int8")
    assert c.spec == "int8" and c.unbiased
    r = c.for_run(d=1000, n_workers=4)
    assert r.q == 31 and r.n == 4
    assert r.omega(1000) == pytest.approx(min(4000 / (4 * 31 ** 2), math.sqrt(4000) / 31))
    assert c.for_run(d=10, n_workers=127).q == 1
    with pytest.raises(ConfigError, match="at most 127 workers"):
        c.for_run(d=10, n_workers=128)


def test_int8_plan_time_refusal_with_the_world_size():
    """n > 127: refused by prepare's world check (before any data is read), one line."""
    cfg = config.defaults()
    cfg["run"]["compressor"] = "int8"
    plans = plan(cfg)
    check_world(plans, 127)
    with pytest.raises(ConfigError) as e:
        check_world(plans, 128)
    assert "\n" not in str(e.value) and "at most 127 workers" in str(e.value)
    cfg["run"]["server"] = "dedicated"
    check_world(plan(cfg), 128)                              # 127 workers + the server


def test_int8_gather_form_unbiased_within_variance():
    """Mean of 2000 decoded int8 messages (own scale, q = ⌊127/n⌋ at n = 8) within 4.5 exact
    standard errors per coordinate; the Monte-Carlo E‖C(x) − x‖² within ω‖x‖² (fixed seeds)."""
    d, n, reps = 200, 8, 2000
    c = compressors.make("int8").for_run(d=d, n_workers=n)
    x = np.random.default_rng(11).standard_t(2.5, d)
    g = np.random.default_rng(12)
    ys = np.stack([c.decompress(c.compress(x, g), d) for _ in range(reps)])
    s = float(np.float32(np.max(np.abs(x))))
    s = s if s >= np.max(np.abs(x)) else float(np.nextafter(np.float32(s), np.float32(np.inf)))
    step = s / c.q
    frac = x / step - np.floor(x / step)
    se = np.sqrt(step ** 2 * frac * (1 - frac) / reps)
    mean = ys.mean(axis=0)
    assert np.all(np.abs(mean - x) <= 4.5 * se + 1e-12)
    assert np.all(np.abs(ys / step - np.rint(ys / step)) < 1e-9)          # multiples of s/q
    err = np.sum((ys - x) ** 2, axis=1).mean()
    assert err <= c.omega(d) * float(x @ x)
