"""The runner's per-iteration shortcuts give what the general paths give (issue 16, target 2).

* qsgd decodes through one checking kernel (``qsgd_checked_decode``): every payload check of the
  general path stays (bucket norms finite and ≥ 0, levels ≤ s, header and length), for every
  level width (SWAR scan for widths 1, 2, 4, 8; ``fields_max`` otherwise), with ``out`` untouched
  on a bad payload; decoded values are checked against an independent numpy decoder of the wire
  format (``docs/compressors.md``: norms, then fields of 1 + ⌈log₂(s+1)⌉ bits, level << 1 | sign,
  in the blocked layout of ``wire.pack_fields``).
* ``decoded_model_bits`` (the runner's bit accounting) equals ``model_bits`` payload by payload.
* DIANA's step without temporaries equals the textbook recursion computed here with numpy.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from hpcgc import algorithms, compressors
from hpcgc.compressors.kernels import wire
from hpcgc.compressors.kernels.simd import LANES
from hpcgc.errors import PayloadError

H = wire.HEADER_BYTES


def unpack_blocked(body: np.ndarray, n: int, width: int) -> np.ndarray:
    """Independent numpy reader of the blocked field layout (``wire`` module doc): each full block of
    32·LANES fields is width·LANES little-endian uint32 words, lane l holding fields l, l + LANES, …
    LSB-first in its words l, l + LANES, …; the rest LSB-first."""
    block = 32 * LANES
    nb = n // block
    out = np.zeros(n, dtype=np.int64)
    words = body[:4 * nb * width * LANES].view("<u4").astype(np.uint64)
    for blk in range(nb):
        w = words[blk * width * LANES:(blk + 1) * width * LANES].reshape(width, LANES)
        for lane in range(LANES):
            bits = sum(int(w[r, lane]) << (32 * r) for r in range(width))
            for i in range(32):
                out[blk * block + i * LANES + lane] = (bits >> (i * width)) & ((1 << width) - 1)
    tail = body[4 * nb * width * LANES:]
    stream = int.from_bytes(tail.tobytes(), "little")
    for j in range(n - nb * block):
        out[nb * block + j] = (stream >> (j * width)) & ((1 << width) - 1)
    return out


def reference_decode(c, payload: np.ndarray, d: int) -> np.ndarray:
    """qsgd (code=fixed) decoded from its bytes with numpy and Python integers only."""
    b = c.bucket_size(d)
    m = math.ceil(d / b)
    fp64 = c.params["fp64"]
    nb = 8 if fp64 else 4
    norms = np.frombuffer(payload[H:H + nb * m].tobytes(), "<f8" if fp64 else "<f4").astype(np.float64)
    width = 1 + (c.s).bit_length()              # 1 + ⌈log₂(s+1)⌉
    fields = unpack_blocked(payload[H + nb * m:], d, width)
    level, negative = fields >> 1, fields & 1
    units = np.repeat(norms / c.s, b)[:d]
    return np.where(negative == 1, -1.0, 1.0) * level * units


SPECS = ["qsgd:s=2", "qsgd:s=1", "qsgd:s=4", "qsgd:s=7", "qsgd:s=64", "qsgd:s=2,bucket=7",
         "qsgd:s=4,bucket=16,fp64=true", "qsgd:s=3,bucket=100,p=inf", "qsgd:s=1000"]


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("d", [1, 30, 515, 2 * 32 * LANES + 37])
def test_qsgd_decode_matches_the_wire_format(spec, d):
    c = compressors.make(spec)
    g = np.random.default_rng(d)
    x = g.standard_normal(d)
    p = c.compress(x, g)
    ref = reference_decode(c, p, d)
    np.testing.assert_array_equal(c.decompress(p, d), ref)
    out = g.standard_normal(d)
    expect = out + 0.3 * ref
    c.decompress_add(p, d, out, 0.3)
    np.testing.assert_allclose(out, expect, rtol=1e-14, atol=1e-14 * np.abs(expect).max())
    # an unaligned copy (a payload at an odd offset of the Gatherv buffer) decodes the same
    big = np.zeros(p.size + 5, dtype=np.uint8)
    big[5:] = p
    np.testing.assert_array_equal(c.decompress(big[5:], d), ref)


def corrupt_level(c, p: np.ndarray, d: int) -> np.ndarray:
    """A copy of p whose last field holds level s + 1 (sign 0) — or, when no field value is above s
    (2s + 1 = 2^width − 1), None."""
    width = 1 + (c.s).bit_length()
    if 2 * c.s + 1 >= (1 << width) - 1:
        return None
    q = p.copy()
    m = math.ceil(d / c.bucket_size(d))
    nb = 8 if c.params["fp64"] else 4
    body = q[H + nb * m:]
    block = 32 * LANES
    assert d < block              # tail layout: field j at stream bits [j·w, (j+1)·w)
    bit = (d - 1) * width
    stream = int.from_bytes(body.tobytes(), "little")
    stream &= ~(((1 << width) - 1) << bit)
    stream |= ((c.s + 1) << 1) << bit
    body[:] = np.frombuffer(stream.to_bytes(body.size, "little"), np.uint8)
    return q


@pytest.mark.parametrize("spec", ["qsgd:s=2", "qsgd:s=5", "qsgd:s=9,bucket=8", "qsgd:s=2,fp64=true,bucket=5",
                                  "qsgd:s=64"])
def test_qsgd_decode_rejects_what_it_rejected(spec):
    """Bad norms (NaN, inf, negative; in any bucket) and levels above s: PayloadError from
    decompress and decompress_add, out untouched — for level widths the SWAR scan reads (s = 5: 4
    bits, s = 64: 8) and those ``fields_max`` reads (s = 2: 3 bits, s = 9: 5)."""
    c = compressors.make(spec)
    d = 30
    g = np.random.default_rng(1)
    p = c.compress(g.standard_normal(d), g)
    m = math.ceil(d / c.bucket_size(d))
    fp64 = c.params["fp64"]
    nb = 8 if fp64 else 4
    bad = []
    for value in (np.nan, np.inf, -1.0):
        for bucket in {0, m - 1}:
            q = p.copy()
            raw = (np.float64(value) if fp64 else np.float32(value)).tobytes()
            q[H + nb * bucket:H + nb * (bucket + 1)] = np.frombuffer(raw, np.uint8)
            bad.append((q, "invalid bucket norm"))
    q = corrupt_level(c, p, d)
    if q is not None:
        bad.append((q, f"level above s={c.s}"))
    bad.append((p[:-1], "truncated"))
    for q, msg in bad:
        with pytest.raises(PayloadError, match=msg):
            c.decompress(q, d)
        out = np.ones(d)
        with pytest.raises(PayloadError, match=msg):
            c.decompress_add(q, d, out, 1.0)
        assert np.all(out == 1.0)
    # -0.0 is a valid norm (as before: only negative norms are refused)
    q = p.copy()
    q[H:H + nb] = np.frombuffer((np.float64(-0.0) if fp64 else np.float32(-0.0)).tobytes(), np.uint8)
    assert np.isfinite(c.decompress(q, d)).all()


@pytest.mark.parametrize("spec", ["qsgd:s=2", "qsgd:s=4,bucket=8", "qsgd:s=3,code=elias", "randk:k=6",
                                  "topk:k=5", "quant:p=inf,block=8", "terngrad", "natural", "threshold:lam=0.5",
                                  "identity", "identity:fp64=true", "sign", "scaled-sign", "bernoulli:p=0.5"])
def test_decoded_model_bits_is_model_bits(spec):
    c = compressors.make(spec)
    g = np.random.default_rng(2)
    for d in (30, 30, 31, 200, 30):
        for scale in (1.0, 0.0, 3.0):
            x = scale * g.standard_t(2, size=d)
            p = c.compress(x, g)
            c.decompress(p, d)
            assert c.decoded_model_bits(p, d) == c.model_bits(p, d), (spec, d)
    # the lookup is taken only where the formula is a function of d and the length alone
    assert c.BITS_BY_LENGTH == (spec in ("qsgd:s=2", "qsgd:s=4,bucket=8", "quant:p=inf,block=8", "terngrad",
                                         "identity", "identity:fp64=true", "sign", "scaled-sign", "bernoulli:p=0.5"))


@pytest.mark.parametrize("momentum,alpha,l1", [(0.0, None, 0.0), (0.5, 0.3, 0.01)])
def test_diana_step_is_the_recursion(momentum, alpha, l1):
    """v = βv + h + m, x = prox_{γ·l1}(x − γv), h += α·m with m = Σ_i w_i C(Δ_i), from decoded messages
    (`spec/diana.md` §B.5), three steps."""
    d, n = 30, 3
    comps = [compressors.make("qsgd:s=2")] * n
    alg = algorithms.get("diana")(comps, d=d, n_workers=n, weights=np.full(n, 1 / n),
                                 problem_info={"L_max": 2.0, "L": 1.0, "mu": 0.1, "kind": "logreg"},
                                 options={"momentum": momentum, "alpha": alpha, "l1": l1})
    g = np.random.default_rng(3)
    x0 = g.standard_normal(d)
    ss = alg.server_init(x0)
    x, h, v = x0.copy(), np.zeros(d), np.zeros(d)
    for _ in range(3):
        msgs = [(i, comps[i].compress(g.standard_normal(d), g)) for i in range(n)]
        m = sum(comps[i].decompress(p, d) / n for i, p in msgs)
        v = momentum * v + (h + m)
        x = x - alg.gamma * v
        if l1:
            x = np.sign(x) * np.maximum(np.abs(x) - alg.gamma * l1, 0.0)
        h = h + alg.alpha * m
        got = alg.server_step(ss, msgs)
        np.testing.assert_allclose(got, x, rtol=1e-13, atol=1e-15)
        np.testing.assert_allclose(ss.h, h, rtol=1e-13, atol=1e-15)
