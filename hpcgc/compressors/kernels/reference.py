"""Straightforward vectorised numpy implementations of the compressors: the baseline of the
micro-benchmark (``python -m hpcgc.bench micro`` reports the hpcgc/numpy speed-up) and test oracles.

Each reference is what a careful user would write with whole-array numpy operations: norms with
``np.linalg.norm``/``np.maximum.reduceat``, per-entry randomness from one ``uniforms(n)`` call
(``rng.random(n)`` or ``rng.integers``), bits packed with ``np.packbits`` over a (n, width) bit matrix,
top-k by ``np.argpartition``, random subsets by ``rng.choice(d, k, replace=False)``. As hpcgc's
compressors do, :func:`compress` first rejects NaN/±Inf in the input (``np.isfinite(x).all()``).

Per-entry randomness comes from a uniforms object: ``floats(n)`` (uniform doubles) and
``u32(d)`` (uniform 32-bit integers, the dithering kernels' fixed-point draws);
:class:`RngUniforms` wraps the Generator. ``compress(c, x, rng, uniforms=None)`` returns an opaque message (a tuple of arrays, already bit
packed) and ``decompress(c, msg, d)`` the dense float64 vector. Packed bytes follow the hpcgc body
layouts where that is natural (fixed-width fields LSB-first, 5 trits per byte, sign bits, nat
blocks), so the work matches; sparse indices always use the fixed ⌈log₂d⌉-bit encoding.

With ``uniforms=splitmix_uniforms(seed)`` — the numpy transcription of
:func:`hpcgc.compressors.kernels.prng.uniform_at` and
:func:`~hpcgc.compressors.kernels.prng.uniforms32` — and the seed a compressor drew, the
dithering references (qsgd, quant, terngrad, natural, natural-dither, bernoulli) make the *same*
random choices as the numba kernels, so tests can compare decoded vectors exactly. rand-k style
sampling (Floyd's algorithm there, ``rng.choice`` here) differs; deterministic compressors (top-k
without ties, threshold, sign) agree exactly.
"""
from __future__ import annotations

import numpy as np

from . import wire
from .trits import TRIT_GROUP

_GAMMA = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def _mix64(z: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        z = (z ^ (z >> np.uint64(30))) * _M1
        z = (z ^ (z >> np.uint64(27))) * _M2
        return z ^ (z >> np.uint64(31))


def _words(seed, w: np.ndarray) -> np.ndarray:
    """z_w = mix64(seed + (w + 1)·γ), the 64-bit words of :mod:`hpcgc.compressors.kernels.prng`."""
    with np.errstate(over="ignore"):
        return _mix64(np.uint64(seed) + (w.astype(np.uint64) + np.uint64(1)) * _GAMMA)


class RngUniforms:
    """Per-entry randomness from a numpy Generator (what the benchmark's references use)."""

    def __init__(self, rng: np.random.Generator):
        self.rng = rng

    def floats(self, n: int) -> np.ndarray:
        return self.rng.random(n)

    def u32(self, d: int) -> np.ndarray:
        return self.rng.integers(0, 2**32, size=d, dtype=np.int64)


class SplitMixUniforms:
    """The kernels' randomness for one kernel seed, transcribed to numpy: ``floats(n)`` =
    [uniform_at(seed, i)], ``u32(d)`` = what :func:`hpcgc.compressors.kernels.prng.uniforms32` gives
    the chunks [c0, c0 + ``wire.CHUNK``) the dithering kernels draw per."""

    def __init__(self, seed):
        self.seed = np.uint64(seed)

    def floats(self, n: int) -> np.ndarray:
        return (_words(self.seed, np.arange(n)) >> np.uint64(11)).astype(np.float64) * 2.0**-53

    def u32(self, d: int) -> np.ndarray:
        cuts = np.arange(0, d, wire.CHUNK)
        m = np.diff(np.append(cuts, d))
        j = np.arange(d)
        a = np.repeat(cuts, m)                   # start of each entry's chunk
        h = np.repeat(m // 2, m)
        q = j - a
        word = np.where(q < h, a + q, np.where(q < 2 * h, a + q - h, a + h))
        z = _words(self.seed, word)
        hi = (q >= h) & (q < 2 * h)
        return np.where(hi, z >> np.uint64(32), z & np.uint64(0xFFFFFFFF)).astype(np.int64)


def splitmix_uniforms(seed) -> SplitMixUniforms:
    """The kernels' uniforms for kernel seed ``seed`` (see :class:`SplitMixUniforms`)."""
    return SplitMixUniforms(seed)


# -- packing helpers ------------------------------------------------------------------------------

def pack_fixed(values: np.ndarray, width: int) -> np.ndarray:
    """Fixed-width fields LSB-first (the hpcgc layout) via a (n, width) bit matrix."""
    if width == 0:
        return np.zeros(0, np.uint8)
    bits = ((values.astype(np.uint64)[:, None] >> np.arange(width, dtype=np.uint64)) & np.uint64(1))
    return np.packbits(bits.astype(np.uint8).ravel(), bitorder="little")


def unpack_fixed(packed: np.ndarray, n: int, width: int) -> np.ndarray:
    if width == 0:
        return np.zeros(n, np.int64)
    bits = np.unpackbits(packed, bitorder="little", count=n * width).reshape(n, width)
    return bits.astype(np.int64) @ (np.int64(1) << np.arange(width, dtype=np.int64))


def pack_blocked(fields: np.ndarray, width: int) -> np.ndarray:
    """The blocked layout of ``wire.pack_fields``: each full block of FIELD_BLOCK = 32·LANES
    fields is a (32, LANES) matrix whose column l (lane l) is packed LSB-first into ``width``
    uint32 words; the words are stored row-major as (width, LANES); the tail is packed LSB-first."""
    n, L = fields.shape[0], wire.LANES
    nb = n // wire.FIELD_BLOCK
    lanes = fields[:nb * wire.FIELD_BLOCK].reshape(nb, 32, L).transpose(0, 2, 1).reshape(-1)
    words = pack_fixed(lanes, width).view("<u4").reshape(nb, L, width).transpose(0, 2, 1)
    return np.concatenate([np.ascontiguousarray(words).reshape(-1).view(np.uint8),
                           pack_fixed(fields[nb * wire.FIELD_BLOCK:], width)])


def unpack_blocked(packed: np.ndarray, n: int, width: int) -> np.ndarray:
    """Inverse of :func:`pack_blocked`."""
    L = wire.LANES
    nb = n // wire.FIELD_BLOCK
    nbytes = 4 * width * L * nb
    words = packed[:nbytes].view("<u4").reshape(nb, width, L).transpose(0, 2, 1)
    lanes = unpack_fixed(np.ascontiguousarray(words).reshape(-1).view(np.uint8), nb * 32 * L, width)
    head = lanes.reshape(nb, L, 32).transpose(0, 2, 1).reshape(-1)
    return np.concatenate([head, unpack_fixed(packed[nbytes:], n - nb * wire.FIELD_BLOCK, width)])


def pack_trits_planar(trits: np.ndarray) -> np.ndarray:
    """The group-planar trit layout of ``trits.pack_trits``: per group of TRIT_GROUP trits, the
    first 5B (B = ⌊m/5⌋) as a (5, B) matrix whose column q is byte q's base-3 digits, then the
    m − 5B last trits in one more byte."""
    parts = []
    for g0 in range(0, trits.shape[0], TRIT_GROUP):
        t = trits[g0:g0 + TRIT_GROUP].astype(np.int64)
        nb = t.shape[0] // 5
        parts.append((3 ** np.arange(5)) @ t[:5 * nb].reshape(5, nb))
        if t.shape[0] > 5 * nb:
            parts.append([(3 ** np.arange(t.shape[0] - 5 * nb)) @ t[5 * nb:]])
    return np.concatenate(parts).astype(np.uint8) if parts else np.zeros(0, np.uint8)


def unpack_trits_planar(packed: np.ndarray, n: int) -> np.ndarray:
    """Inverse of :func:`pack_trits_planar`."""
    digits = (packed.astype(np.int64)[:, None] // (3 ** np.arange(5))) % 3      # (bytes, 5)
    out = []
    for g0 in range(0, n, TRIT_GROUP):
        m = min(TRIT_GROUP, n - g0)
        nb = m // 5
        dg = digits[g0 // 5:g0 // 5 + -(-m // 5)]
        out.append(dg[:nb].T.reshape(-1))
        out.append(dg[nb, :m - 5 * nb] if m > 5 * nb else np.zeros(0, np.int64))
    return np.concatenate(out) if out else np.zeros(0, np.int64)


def _bucket_norms(x: np.ndarray, b: int, p) -> np.ndarray:
    d = x.shape[0]
    starts = np.arange(0, d, b)
    if p == 2:
        return np.sqrt(np.add.reduceat(np.square(x, dtype=np.float64), starts))
    return np.maximum.reduceat(np.abs(x).astype(np.float64), starts)


def _per_entry(v: np.ndarray, b: int, d: int) -> np.ndarray:
    return np.repeat(v, b)[:d]


def _scales(c, norms):
    return norms if c.params.get("fp64") else wire.round_up_to_float32(norms)


def _vdtype(c):
    return np.float64 if c.params.get("fp64") else np.float32


def _bucket(c, d):
    return c.bucket_size(d) if hasattr(c, "bucket_size") else c.block_size(d)


# -- references -----------------------------------------------------------------------------------

def _identity(c, x, rng, u):
    return (x.astype(_vdtype(c)),)


def _identity_d(c, msg, d):
    return msg[0].astype(np.float64)


def _qsgd(c, x, rng, u):
    d, s = x.shape[0], c.s
    b = _bucket(c, d)
    sc = _scales(c, _bucket_norms(x, b, c.p))
    sc32 = np.where(sc > 0, 4294967296.0 * s / np.where(sc > 0, sc, 1.0), 0.0)
    R = np.floor(np.abs(x).astype(np.float64) * _per_entry(sc32, b, d) + 0.5).astype(np.int64)
    lev = np.minimum((R + u.u32(d)) >> 32, s)         # ⌊r⌋ + [u < frac(r)], 32-bit fixed point
    fields = (lev << 1) | ((x < 0) & (lev > 0))
    return sc, pack_blocked(fields, 1 + wire.bits_for(s + 1))


def _qsgd_d(c, msg, d):
    sc, packed = msg
    f = unpack_blocked(packed, d, 1 + wire.bits_for(c.s + 1))
    unit = _per_entry(sc / c.s, _bucket(c, d), d)
    return (f >> 1) * unit * (1 - 2 * (f & 1))


def _quant(c, x, rng, u):
    d = x.shape[0]
    b = _bucket(c, d)
    sc = _scales(c, _bucket_norms(x, b, c.p))
    inv32 = np.where(sc > 0, 4294967296.0 / np.where(sc > 0, sc, 1.0), 0.0)
    xi = u.u32(d) < np.floor(np.abs(x).astype(np.float64) * _per_entry(inv32, b, d) + 0.5)
    trits = xi * (1 + (x < 0))
    t = np.zeros(-(-d // 5) * 5, np.int64)
    t[:d] = trits
    return sc, (t.reshape(-1, 5) @ (3 ** np.arange(5))).astype(np.uint8)


def _quant_d(c, msg, d):
    sc, packed = msg
    t = (packed.astype(np.int64)[:, None] // (3 ** np.arange(5))) % 3
    t = t.ravel()[:d]
    return _per_entry(sc, _bucket(c, d), d) * ((t == 1).astype(np.float64) - (t == 2))


def _sparse_msg(c, x, idx):
    d = x.shape[0]
    idx = np.sort(idx)
    return idx.size, x[idx].astype(_vdtype(c)), pack_fixed(idx, wire.bits_for(d))


def _sparse_d(c, msg, d, scale=1.0):
    n, vals, packed = msg
    idx = unpack_fixed(packed, n, wire.bits_for(d))
    y = np.zeros(d)
    y[idx] = scale * vals.astype(np.float64)
    return y


def _randk(c, x, rng, u):
    return _sparse_msg(c, x, rng.choice(x.shape[0], c.k, replace=False))


def _randk_d(c, msg, d):
    return _sparse_d(c, msg, d, d / c.k)


def _topk(c, x, rng, u):
    d = x.shape[0]
    return _sparse_msg(c, x, np.argpartition(np.abs(x), d - c.k)[d - c.k:])


def _threshold(c, x, rng, u):
    return _sparse_msg(c, x, np.flatnonzero(np.abs(x) >= c.lam))


def _sparse_plain_d(c, msg, d):
    return _sparse_d(c, msg, d)


def _sign(c, x, rng, u):
    return (np.packbits(x < 0, bitorder="little"),)


def _sign_d(c, msg, d):
    return 1.0 - 2.0 * np.unpackbits(msg[-1], bitorder="little", count=d)


def _scaled_sign(c, x, rng, u):
    scale = np.abs(x).sum(dtype=np.float64) / x.shape[0]
    return scale.astype(_vdtype(c)), np.packbits(x < 0, bitorder="little")


def _scaled_sign_d(c, msg, d):
    return float(msg[0]) * _sign_d(c, msg, d)


def _bernoulli(c, x, rng, u):
    return (x.astype(_vdtype(c)),) if u.floats(1)[0] < c.p else ()


def _bernoulli_d(c, msg, d):
    return msg[0].astype(np.float64) / c.p if msg else np.zeros(d)


def _nat_exponents(c, x, uu):
    """Biased exponents of C_nat(x) (float32 layout; float64 with fp64) and the sign bits."""
    a = np.abs(x).astype(np.float64)
    m, e = np.frexp(a)                           # a = m·2^e, m ∈ [0.5, 1): lower power 2^(e−1)
    up = uu < 2 * m - 1
    bias, tiny = (1023, 2.0**-1022) if c.params.get("fp64") else (127, 2.0**-126)
    ex = np.where(a >= tiny, e - 1 + bias + up, (uu < np.where(a < tiny, a, 0.0) / tiny).astype(np.int64))
    ex = np.where(a == 0, 0, ex)
    return ex, (x < 0) & (ex != 0)


def _natural(c, x, rng, u):
    ex, neg = _nat_exponents(c, x, u.floats(x.shape[0]))
    return ex.astype(np.uint16 if c.params.get("fp64") else np.uint8), np.packbits(neg, bitorder="little")


def _nat_values(c, ex, negbits, n):
    bias = 1023 if c.params.get("fp64") else 127
    v = np.where(ex > 0, np.ldexp(1.0, ex.astype(np.int64) - bias), 0.0)
    return v * (1.0 - 2.0 * np.unpackbits(negbits, bitorder="little", count=n))


def _natural_d(c, msg, d):
    return _nat_values(c, msg[0], msg[1], d)


def _natural_randk(c, x, rng, u):
    d = x.shape[0]
    idx = np.sort(rng.choice(d, c.k, replace=False))
    ex, neg = _nat_exponents(c, x[idx], u.floats(c.k))
    return ex.astype(np.uint16 if c.params.get("fp64") else np.uint8), np.packbits(neg, bitorder="little"), \
        pack_fixed(idx, wire.bits_for(d))


def _natural_randk_d(c, msg, d):
    k = c.k
    idx = unpack_fixed(msg[2], k, wire.bits_for(d))
    y = np.zeros(d)
    y[idx] = (d / k) * _nat_values(c, msg[0], msg[1], k)
    return y


def _natural_dither(c, x, rng, u):
    d, s = x.shape[0], c.s
    b = _bucket(c, d)
    sc = _scales(c, _bucket_norms(x, b, c.p))
    inv = np.where(sc > 0, 1.0 / np.where(sc > 0, sc, 1.0), 0.0)
    r = np.abs(x).astype(np.float64) * _per_entry(inv, b, d)
    uu = u.u32(d)
    m, e = np.frexp(r)                           # r = m·2^e: lower level 2^(e−1), index e − 1 + s
    up = uu < np.floor((2 * m - 1) * 4294967296.0 + 0.5)          # mantissa fraction, 32 bits
    small = uu < np.floor(r * (2.0 ** (s - 1) * 4294967296.0) + 0.5)
    lev = np.where(e - 1 + s >= 1, e - 1 + s + up, small)
    lev = np.where(r == 0, 0, lev)
    lev = np.minimum(lev, s).astype(np.int64)
    fields = (lev << 1) | ((x < 0) & (lev > 0))
    return sc, pack_blocked(fields, 1 + wire.bits_for(s + 1))


def _natural_dither_d(c, msg, d):
    sc, packed = msg
    f = unpack_blocked(packed, d, 1 + wire.bits_for(c.s + 1))
    lev = f >> 1
    val = np.where(lev > 0, np.ldexp(1.0, lev - c.s), 0.0)
    return _per_entry(sc, _bucket(c, d), d) * val * (1 - 2 * (f & 1))


REFERENCES = {
    "identity": (_identity, _identity_d),
    "qsgd": (_qsgd, _qsgd_d),
    "quant": (_quant, _quant_d),
    "terngrad": (_quant, _quant_d),
    "randk": (_randk, _randk_d),
    "topk": (_topk, _sparse_plain_d),
    "threshold": (_threshold, _sparse_plain_d),
    "sign": (_sign, _sign_d),
    "scaled-sign": (_scaled_sign, _scaled_sign_d),
    "bernoulli": (_bernoulli, _bernoulli_d),
    "natural": (_natural, _natural_d),
    "natural-dither": (_natural_dither, _natural_dither_d),
    "natural-randk": (_natural_randk, _natural_randk_d),
}
"""Compressor name → (compress, decompress) numpy references."""


def has_reference(c) -> bool:
    return c.name in REFERENCES and not c.params.get("shared_seed", False)


def compress(c, x: np.ndarray, rng: np.random.Generator, uniforms=None):
    """The numpy reference message for compressor ``c`` (uniforms default: ``rng.random``).

    Like ``Compressor.compress``, it first rejects NaN/±Inf (``np.isfinite(x).all()``): the
    contract the benchmark compares includes that check, and hpcgc's kernels pay for it too."""
    if not has_reference(c):
        raise KeyError(f"no numpy reference for {c.spec}")
    x = np.asarray(x)
    if not np.isfinite(x).all():
        raise ValueError(f"{c.spec}: input contains NaN or Inf")
    return REFERENCES[c.name][0](c, x, rng, uniforms or RngUniforms(rng))


def decompress(c, msg, d: int) -> np.ndarray:
    """Dense float64 decoding of a reference message."""
    return REFERENCES[c.name][1](c, msg, d)


def math_output(c, x: np.ndarray, seed) -> np.ndarray:
    """C(x) as hpcgc computes it for the kernel seed ``seed`` (dithering compressors), or the
    deterministic C(x): the oracle the tests compare ``decompress(compress(x))`` with."""
    msg = REFERENCES[c.name][0](c, np.asarray(x), None, splitmix_uniforms(seed))
    return decompress(c, msg, np.asarray(x).shape[0])


__all__ = ["REFERENCES", "RngUniforms", "SplitMixUniforms", "compress", "decompress", "has_reference",
           "math_output", "pack_blocked", "pack_fixed", "splitmix_uniforms", "unpack_blocked", "unpack_fixed"]
