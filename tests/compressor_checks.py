"""Shared data and checks of the compressor tests (tests/test_compressors_*.py; also used by
test_qsgd_elias.py and test_powersgd.py): the specs covered, closed-form variances, decoded-value
checks, the decoders' fuzzing. Monte-Carlo checks use fixed seeds, so they are deterministic;
tolerances are 4 standard errors.
"""
from __future__ import annotations

import math
import zlib

import numpy as np
import pytest

from hpcgc import compressors
from hpcgc.compressors.kernels import wire
from hpcgc.compressors.kernels.norms import block_norms_l2, block_norms_linf
from hpcgc.errors import PayloadError

ALL_SPECS = ["identity", "identity:fp64=true", "qsgd", "qsgd:s=1", "qsgd:s=7,bucket=64",
             "qsgd:s=255,bucket=512", "quant", "quant:p=inf,block=32", "quant:p=2,block=100",
             "terngrad", "terngrad:block=33", "randk:k=1", "randk:k=10", "randk:k=1000",
             "randk:k=3,fp64=true", "quant:p=inf,fp64=true", "randk:k=10,shared_seed=true",
             "randk:k=900", "randk:k=3,shared_seed=true,fp64=true",
             "topk:k=1", "topk:k=10", "topk:k=700", "topk:k=5,fp64=true",
             "threshold:lam=0.5", "threshold:lam=2.5", "threshold:lam=0", "threshold:lam=1.0,fp64=true",
             "sign", "scaled-sign", "scaled-sign:fp64=true",
             "bernoulli:p=0.5", "bernoulli:p=1.0", "bernoulli:p=0.01,fp64=true",
             "qsgd:s=4,p=inf", "qsgd:s=1,p=inf,bucket=32", "qsgd:s=7,bucket=64,p=inf,fp64=true",
             "natural", "natural:fp64=true", "natural-dither", "natural-dither:s=1",
             "natural-dither:s=4,p=inf,bucket=100", "natural-dither:s=20,bucket=33,fp64=true",
             "natural-randk:k=1", "natural-randk:k=10", "natural-randk:k=900,fp64=true",
             "powersgd", "powersgd:rank=1", "powersgd:rank=4,fp64=true", "powersgd:rank=3,rows=10"]


MIN_PARAMS = {"identity": {}, "qsgd": {}, "quant": {}, "terngrad": {}, "randk": {"k": 1},
              "topk": {"k": 1}, "threshold": {"lam": 1.0}, "sign": {}, "scaled-sign": {},
              "bernoulli": {"p": 0.5}, "natural": {}, "natural-dither": {}, "natural-randk": {"k": 1},
              "powersgd": {"rank": 1}}
"""The compressors this file covers, with parameters valid for any d ≥ 1."""


def rng(seed=0):
    return np.random.default_rng(seed)


def draws(c, x, n, seed=0):
    """n decoded samples C(x) as an (n, d) array."""
    g = rng(seed)
    d = x.shape[0]
    return np.stack([c.decompress(c.compress(x, g), d) for _ in range(n)])


def f32_up(v):
    """Float32 rounding-up of float64 norms, as the compressors send them (float64 result)."""
    return wire.round_up_to_float32(np.asarray(v, dtype=np.float64))


def block_scales(x, b, p):
    m = -(-x.shape[0] // b)
    norms = np.empty(m)
    (block_norms_l2 if p == 2 else block_norms_linf)(x, b, norms)
    return norms


def coord_variance(c, x):
    """Per-coordinate Var C(x)_j in closed form (scales as sent: float32 rounded up)."""
    d = x.shape[0]
    if c.name in ("quant", "terngrad"):
        b = c.block_size(d)
        sc = block_scales(x, b, c.p)
        sc = sc if c.params["fp64"] else f32_up(sc)
        per = np.repeat(sc, b)[:d]
        return np.abs(x) * per - x**2                   # Σ_j: ‖Δ(l)‖₁‖Δ(l)‖_p − ‖Δ(l)‖₂²
    if c.name == "qsgd":
        b = c.bucket_size(d)
        sc = block_scales(x, b, c.p)
        sc = sc if c.params["fp64"] else f32_up(sc)
        unit = np.repeat(sc, b)[:d] / c.s
        r = np.abs(x) / np.where(unit > 0, unit, 1.0)
        frac = r - np.floor(r)
        return unit**2 * frac * (1 - frac)
    if c.name == "randk":
        return (d / c.k - 1.0) * x**2
    if c.name == "bernoulli":
        return (1.0 / c.p - 1.0) * x**2
    if c.name == "natural":
        return nat_variance(x, c.params["fp64"])
    if c.name == "natural-randk":
        return (d / c.k) * (x**2 + nat_variance(x, c.params["fp64"])) - x**2
    if c.name == "natural-dither":
        b = c.bucket_size(d)
        sc = block_scales(x, b, c.p)
        sc = np.repeat(sc if c.params["fp64"] else f32_up(sc), b)[:d]
        r = np.abs(x) / np.where(sc > 0, sc, 1.0)
        lo = np.where(r > 0, 2.0 ** np.floor(np.log2(np.maximum(r, 1e-300))), 0.0)
        low_end = 2.0 ** (1 - c.s)
        lo = np.where(r < low_end, 0.0, lo)
        hi = np.where(r < low_end, low_end, 2 * lo)
        return sc**2 * (r - lo) * (hi - r)
    if c.name == "identity":
        return np.zeros(d)
    raise AssertionError(c.name)


def nat_variance(x, fp64):
    """Var C_nat(x_j): (|t| − lo)(2lo − |t|), lo = 2^⌊log₂|t|⌋ ≥ smallest normal (0 below it)."""
    a = np.abs(x)
    tiny = 2.0**-1022 if fp64 else 2.0**-126
    _, e = np.frexp(a)
    lo = np.where(a >= tiny, np.ldexp(0.5, e), 0.0)
    hi = np.where(a >= tiny, 2 * lo, tiny)
    return (a - lo) * (hi - a)


def check_unbiased(c, spec, d, k_se):
    """Mean of 2000 draws of C(x) on a heavy-tailed x (x_3 = 0) against x: every coordinate within
    ``k_se`` exact standard errors (empirical ones are unreliable for rarely-kept coordinates), and
    the mean z² ≈ 1, which catches a small common bias that a per-coordinate rule cannot; the zero
    coordinate always decodes to 0. With 200 coordinates a 4-SE rule alone fails ~1 % of correct
    runs (200 × 6e-5); 4.5 SE keeps the family-wise false alarm near 0.1 %."""
    g = rng(11)
    x = g.standard_t(2.5, size=d)
    x[3] = 0.0
    n = 2000
    y = draws(c, x, n, seed=zlib.crc32(spec.encode()))
    mean = y.mean(axis=0)
    se = np.sqrt(coord_variance(c, x) / n)
    assert np.all(np.abs(mean - x) <= k_se * se + 1e-6 * np.abs(x)), spec
    ok = se > 1e-9 * np.abs(x)
    if ok.any():
        z = (mean[ok] - x[ok]) / se[ok]
        if c.name != "bernoulli":         # one coin for all coordinates: z_j are not independent
            assert np.mean(z**2) < 1.5, spec
    assert np.all(y[:, 3] == 0.0)


def check_decoded(c, x, y):
    """y = decompress(compress(x)) takes the values the mathematics allows."""
    d = x.shape[0]
    assert y.dtype == np.float64 and y.shape == (d,)
    if c.name in ("sign", "scaled-sign"):
        scale = 1.0
        if c.name == "scaled-sign":
            scale = np.abs(x).sum() / d
            if not c.params["fp64"]:                # float32 scale: equal up to float32 rounding
                scale = float(np.float32(scale))
                ys = np.abs(y[0])
                assert ys == scale or ys == np.nextafter(np.float32(scale), np.float32(np.inf)) \
                    or ys == np.nextafter(np.float32(scale), np.float32(0)), (ys, scale)
                scale = ys
        np.testing.assert_allclose(y, np.where(x < 0, -scale, scale), rtol=1e-14, atol=0)
        assert np.all(np.abs(y) == np.abs(y[0]))
        return
    if c.name == "powersgd":
        check_powersgd_decoded(c, x, y)
        return
    nonzero = y != 0
    assert np.all(np.sign(y[nonzero]) == np.sign(x[nonzero]))
    assert np.all(y[x == 0] == 0)
    vals = x if c.params.get("fp64") else x.astype(np.float32).astype(np.float64)
    if c.name == "topk":
        np.testing.assert_array_equal(y, topk_oracle(x, c.k, c.params["fp64"]))
    elif c.name == "threshold":
        np.testing.assert_array_equal(y, np.where(np.abs(x) >= c.lam, vals, 0.0))
    elif c.name == "identity":
        want = x if c.params["fp64"] else x.astype(np.float32).astype(np.float64)
        assert np.array_equal(y, want)
    elif c.name in ("quant", "terngrad"):
        b = c.block_size(d)
        sc = block_scales(x, b, c.p)
        sc = sc if c.params["fp64"] else f32_up(sc)
        per = np.repeat(sc, b)[:d]
        assert np.all((np.abs(y) == per) | (y == 0))
        if c.p == math.inf:       # the max entry of each block is always kept
            for l in range(sc.shape[0]):
                blk = slice(l * b, min((l + 1) * b, d))
                j = l * b + int(np.argmax(np.abs(x[blk])))
                if x[j] != 0 and c.params["fp64"]:
                    assert abs(y[j]) == sc[l]
    elif c.name == "qsgd":
        b = c.bucket_size(d)
        sc = block_scales(x, b, c.p)
        sc = sc if c.params["fp64"] else f32_up(sc)
        unit = np.repeat(sc / c.s, b)[:d]
        safe = np.where(unit > 0, unit, 1.0)
        lev = np.abs(y) / safe
        assert np.allclose(lev, np.round(lev), rtol=0, atol=1e-9 * c.s)
        r = np.abs(x) / safe                       # lev ∈ {⌊r⌋, ⌊r⌋ + 1}, up to rounding in r
        lev = np.round(lev)
        assert np.all(lev >= np.floor(r * (1 - 1e-12)))
        assert np.all(lev <= np.minimum(np.floor(r * (1 + 1e-12)) + 1, c.s))
    elif c.name == "bernoulli":
        assert np.all(y == 0) or np.array_equal(y, vals / c.p)
    elif c.name in ("natural", "natural-randk"):
        scale = 1.0
        if c.name == "natural-randk":
            scale = d / c.k
            assert np.count_nonzero(y) <= c.k
        nz = y != 0
        a, r = np.abs(x[nz]), np.abs(y[nz]) / scale
        assert np.all(np.frexp(r)[0] == 0.5)                               # powers of two
        tiny = 2.0**-1022 if c.params["fp64"] else 2.0**-126
        assert np.all((r <= 2 * a) & ((r >= a) | (r * 2 >= a))), (r, a)     # a neighbour of |x_j|
        assert np.all(r >= np.minimum(tiny, 2.0 ** np.floor(np.log2(np.maximum(a, 1e-320)))))
    elif c.name == "natural-dither":
        b = c.bucket_size(d)
        sc = block_scales(x, b, c.p)
        sc = np.repeat(sc if c.params["fp64"] else f32_up(sc), b)[:d]
        nz = y != 0
        rel = np.abs(y[nz]) / sc[nz]
        ls = np.log2(rel)
        assert np.allclose(ls, np.round(ls), atol=1e-12) and np.all(ls <= 0) and np.all(ls >= 1 - c.s - 1e-12)
        r = np.abs(x[nz]) / sc[nz]
        assert np.all(rel <= np.maximum(2 * r, 2.0 ** (1 - c.s)) * (1 + 1e-12))
    elif c.name == "randk":
        k = c.k
        scale = d / k
        assert np.count_nonzero(y) <= k
        vals = x if c.params["fp64"] else x.astype(np.float32).astype(np.float64)
        nz = np.flatnonzero(y)
        assert np.array_equal(y[nz], scale * vals[nz])
    else:
        raise AssertionError(c.name)


def check_powersgd_decoded(c, x, y):
    """PowerSGD decodes P̂P̂ᵀM (an orthogonal projection of the reshaped x, factors rounded to
    float32 unless fp64): ‖y‖ ≤ ‖x‖ and ‖y − x‖ ≤ ‖x‖ up to that rounding; exact (to float64
    rounding) with fp64 when rank = min(rows, cols), i.e. P̂ spans every column."""
    nx = np.linalg.norm(x)
    tol = 1e-12 if c.params["fp64"] else 1e-5
    assert np.linalg.norm(y) <= (1 + tol) * nx + 1e-300
    assert np.linalg.norm(y - x) <= (1 + tol) * nx + 1e-300
    if c.params["fp64"] and c.rank == min(c.matrix_shape(x.shape[0])):
        assert np.linalg.norm(y - x) <= 1e-10 * nx


def topk_oracle(x, k, fp64=False):
    """Top-k by a stable full sort: the k largest |x_j|, ties to the lowest index."""
    order = np.argsort(-np.abs(x), kind="stable")[:k]
    y = np.zeros(x.shape[0])
    y[order] = x[order] if fp64 else x[order].astype(np.float32)
    return y


FUZZ_SPECS = ["topk:k=50", "threshold:lam=1", "randk:k=300", "randk:k=30,shared_seed=true", "natural-randk:k=40",
              "natural", "natural:fp64=true", "natural-dither:s=3", "natural-dither:s=8,p=inf,bucket=50", "sign",
              "scaled-sign", "bernoulli:p=0.5", "qsgd:s=5", "qsgd:s=3,p=inf,bucket=10", "quant",
              "terngrad:block=10", "identity", "powersgd", "powersgd:rank=3,rows=20"]


FUZZ_D = 777
"""The fuzzed vectors' dimension."""


def fuzz_payloads(specs, trials=120, seed=0) -> list:
    """The fuzzing's payloads: for each spec, a random vector's payload corrupted ``trials`` times —
    bits flipped, truncated, or the body replaced with random bytes (plus extra bytes) →
    [(spec, its compressor, [payload, ...])]. Made apart from the decoding so that another process
    can decode them (tests/conftest.py: boundscheck_fuzz recompiles only the decoders with bounds
    checks, not the encoders that made the payloads)."""
    g = rng(seed)
    cases = []
    d = FUZZ_D
    for spec in specs:
        c = compressors.make(spec)
        p = c.compress(g.standard_normal(d), g)
        qs = []
        for trial in range(trials):
            q = p.copy()
            kind = trial % 3
            if kind == 0:
                for _ in range(1 + trial % 4):
                    q[g.integers(8, q.size) if q.size > 8 else 0] ^= np.uint8(1 << g.integers(8))
            elif kind == 1:
                q = q[:g.integers(0, q.size)]
            else:
                q = np.r_[q, g.integers(0, 256, size=g.integers(1, 5)).astype(np.uint8)]
                q[8:] = g.integers(0, 256, size=q.size - 8)
            qs.append(q)
        cases.append((spec, c, qs))
    return cases


def fuzz_decode(cases) -> tuple[int, int]:
    """Decode :func:`fuzz_payloads`' payloads: every decode must raise PayloadError or return a
    finite vector, and decompress_add must agree with it → (accepted, rejected)."""
    rejected = accepted = 0
    d = FUZZ_D
    for spec, c, qs in cases:
        for q in qs:
            out = np.zeros(d)
            try:
                y = c.decompress(q, d)
            except PayloadError:
                rejected += 1
                with pytest.raises(PayloadError):
                    c.decompress_add(q, d, out, 1.0)
                assert not out.any()
                continue
            accepted += 1
            assert np.isfinite(y).all(), spec
            c.decompress_add(q, d, out, 1.0)
            np.testing.assert_allclose(out, y, rtol=1e-15, atol=0)
    return accepted, rejected


def fuzz_decoders(specs, trials=120, seed=0) -> tuple[int, int]:
    """Corrupt each spec's payload ``trials`` times and decode it (:func:`fuzz_payloads`,
    :func:`fuzz_decode`) → (accepted, rejected)."""
    return fuzz_decode(fuzz_payloads(specs, trials, seed))


def save_fuzz_payloads(path, cases) -> None:
    """:func:`fuzz_payloads`' payloads as one .npz (plain arrays, no pickles)."""
    arrays = {f"p{i}_{j}": q for i, (_, _, qs) in enumerate(cases) for j, q in enumerate(qs)}
    np.savez(path, specs=np.array([spec for spec, _, _ in cases]),
             counts=np.array([len(qs) for _, _, qs in cases]), **arrays)


def load_fuzz_payloads(path) -> list:
    """:func:`save_fuzz_payloads`' file → [(spec, a fresh compressor, [payload, ...])]."""
    with np.load(path, allow_pickle=False) as f:
        return [(str(spec), compressors.make(str(spec)), [f[f"p{i}_{j}"] for j in range(int(n))])
                for i, (spec, n) in enumerate(zip(f["specs"], f["counts"]))]
