"""Tests of hpcgc.compressors: sparse index encoding: fixed width or Elias-omega gaps.

Shared specs and checks: tests/compressor_checks.py.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcgc import compressors
from hpcgc.compressors.kernels import wire
from hpcgc.errors import PayloadError

from .compressor_checks import rng
from .elias_ref import old_decode_gaps, omega_string


@given(st.lists(st.integers(1, 2**32 - 1), min_size=0, max_size=60), st.integers(0, 3))
@settings(max_examples=150, deadline=None)
def test_elias_omega_kernels(gaps, offset):
    from hpcgc.compressors.kernels import elias_gaps, sparse
    idx = np.cumsum(np.array(gaps, dtype=np.int64)) - 1
    d = int(idx[-1]) + 1 if idx.size else 1
    bits = "".join(omega_string(g) for g in gaps)
    assert sparse.elias_gap_bits(idx) == len(bits)
    assert all(sparse.elias_omega_length(g) == len(omega_string(g)) for g in gaps)
    nbytes = (len(bits) + 7) // 8
    out = np.full(offset + nbytes + 2, 0xCD, dtype=np.uint8)
    assert sparse.elias_omega_encode_gaps(idx, out, offset) == nbytes
    assert np.all(out[:offset] == 0xCD) and np.all(out[offset + nbytes:] == 0xCD)
    stream = np.array([int(b) for b in bits] + [0] * (-len(bits) % 8), dtype=np.uint8)
    np.testing.assert_array_equal(out[offset:offset + nbytes], np.packbits(stream, bitorder="little"))
    back = np.empty(idx.size, dtype=np.int64)
    assert elias_gaps.elias_omega_decode_gaps(out, offset, offset + nbytes, d, back) == len(bits)
    np.testing.assert_array_equal(back, idx)
    if nbytes:
        assert elias_gaps.elias_omega_decode_gaps(out, offset, offset + nbytes - 1, d, back) < 0
        assert elias_gaps.elias_omega_decode_gaps(out, offset, offset + nbytes + 1, d, back) == sparse.ERR_TRAILING
        if idx.size:
            assert elias_gaps.elias_omega_decode_gaps(out, offset, offset + nbytes, d - 1, back) == sparse.ERR_RANGE


@pytest.mark.parametrize("spread", [2, 64, 600, 70000])
def test_table_decoder_agrees_with_the_old_decoder_on_top_k_streams(spread):
    """Streams of every gap size (table hits, the bit-by-bit path, both mixed), cut short, with a
    byte too many and with d one too small: the same status and indices as the old decoder."""
    from hpcgc.compressors.kernels import elias_gaps, sparse
    g = np.random.default_rng(spread)
    gaps = np.maximum(1, g.geometric(1 / spread, 3000)).astype(np.int64)
    gaps[::97] = g.integers(1, 2**20, gaps[::97].size)
    idx = np.cumsum(gaps) - 1
    d = int(idx[-1]) + 1
    out = np.zeros(sparse.elias_gap_bits(idx) // 8 + 9, dtype=np.uint8)
    nbytes = sparse.elias_omega_encode_gaps(idx, out, 3)
    for end, dd in [(3 + nbytes, d), (3 + nbytes - 1, d), (3 + nbytes + 1, d), (3 + nbytes, d - 1), (40, d)]:
        a, b = np.full(idx.size, -1), np.full(idx.size, -1)
        sa = elias_gaps.elias_omega_decode_gaps(out, 3, end, dd, a)
        assert sa == old_decode_gaps(out, 3, end, dd, b)
        if sa >= 0:
            np.testing.assert_array_equal(a, idx)
            np.testing.assert_array_equal(a, b)


@given(st.binary(min_size=0, max_size=40), st.integers(0, 30), st.integers(1, 10**6))
@settings(max_examples=300, deadline=None)
def test_elias_omega_decoder_on_garbage(data, nnz, d):
    """Arbitrary bytes never make the decoder read past its end or emit invalid indices, and the
    table-driven decoder returns the old bit-by-bit decoder's status and indices."""
    from hpcgc.compressors.kernels import elias_gaps, sparse
    src = np.frombuffer(data + b"\xAA" * 8, dtype=np.uint8)      # sentinel bytes after the end
    idx = np.full(nnz, -7, dtype=np.int64)
    status = elias_gaps.elias_omega_decode_gaps(src, 0, len(data), d, idx)
    old = np.full(nnz, -7, dtype=np.int64)
    assert old_decode_gaps(src, 0, len(data), d, old) == status
    if status >= 0:
        np.testing.assert_array_equal(idx, old)
    if status >= 0:
        assert status <= 8 * len(data) and 8 * len(data) - status < 8
        assert sparse.indices_valid(idx, d)
        if nnz:
            re = np.zeros(len(data) + 1, dtype=np.uint8)
            n = sparse.elias_omega_encode_gaps(idx, re, 0)
            assert re[:n].tobytes() == data                      # canonical: re-encodes to the same bytes


@pytest.mark.parametrize("spec,d,want_elias", [
    ("topk:k=2000", 10_000, True),          # clustered or dense indices: gaps are cheap
    ("topk:k=3", 10_000, False),
    ("threshold:lam=0", 5000, True),        # every gap 1: one bit per index
    ("randk:k=5000", 10_000, True),
    ("randk:k=10", 100_000, False),
])
def test_index_encoding_choice(spec, d, want_elias):
    from hpcgc.compressors.kernels import sparse
    c = compressors.make(spec)
    x = rng(1).standard_normal(d)
    p = c.compress(x, rng(2))
    elias = bool(p[1] & wire.FLAG_ELIAS)
    assert elias == want_elias
    y = c.decompress(p, d)
    idx = np.flatnonzero(y) if c.name != "threshold" else np.arange(d)
    nnz = idx.size
    fixed = nnz * wire.bits_for(d)
    eo = int(sparse.elias_gap_bits(idx))
    assert c.model_bits(p, d) == nnz * 32 + min(fixed, eo)
    assert (eo < fixed) == elias
    prefix = 4 if c.name == "threshold" else 0
    assert p.size == wire.HEADER_BYTES + prefix + 4 * nnz + (min(fixed, eo) + 7) // 8


def test_sparse_payload_corruption():
    d = 5000
    x = rng(1).standard_normal(d)
    H = wire.HEADER_BYTES
    out = np.zeros(d)
    for spec in ("topk:k=2000", "topk:k=10", "threshold:lam=1.5", "threshold:lam=0.1", "randk:k=3000"):
        c = compressors.make(spec)
        p = c.compress(x, rng())
        pre = 4 if c.name == "threshold" else 0
        nnz = int.from_bytes(p[8:12].tobytes(), "little") if pre else c.k
        istart = H + pre + 4 * nnz
        # flipping the index-encoding flag: the stream no longer parses (or is not canonical)
        q = p.copy()
        q[1] ^= wire.FLAG_ELIAS
        with pytest.raises(PayloadError):
            c.decompress_add(q, d, out, 1.0)
        # every single-bit flip in the index stream is rejected or decodes to valid indices
        g = rng(5)
        for bit in g.choice(8 * (p.size - istart), size=min(200, 8 * (p.size - istart)), replace=False):
            q = p.copy()
            q[istart + bit // 8] ^= np.uint8(1 << (bit % 8))
            try:
                y = c.decompress(q, d)
            except PayloadError:
                continue
            assert y.shape == (d,) and np.isfinite(y).all()
        if pre:
            for bad in (d + 1, nnz + 1, 2**32 - 1):
                q = p.copy()
                q[8:12] = np.frombuffer(np.uint32(bad).tobytes(), np.uint8)
                with pytest.raises(PayloadError):
                    c.decompress_add(q, d, out, 1.0)
        with pytest.raises(PayloadError, match="truncated"):
            c.decompress(p[:istart - 1], d)
    assert np.all(out == 0)


def test_randk_shared_seed():
    d, k = 1000, 50
    c = compressors.make("randk", k=k, shared_seed=True)
    x = rng(3).standard_normal(d)
    g = rng(4)
    ps = [c.compress(x, g) for _ in range(20)]
    assert all(p.size == wire.HEADER_BYTES + 4 + 4 * k for p in ps)
    assert all(c.model_bits(p, d) == 32 * k for p in ps)
    supports = {tuple(np.flatnonzero(c.decompress(p, d))) for p in ps}
    assert len(supports) == 20                                 # fresh indices every call
    # a second worker (its own Generator) gets other indices; same Generator state, same payload
    other = compressors.make("randk", k=k, shared_seed=True).compress(x, rng(5))
    assert tuple(np.flatnonzero(c.decompress(other, d))) not in supports
    np.testing.assert_array_equal(c.compress(x, rng(4)), ps[0])
    # the server regenerates exactly the sender's index set from the 4-byte seed
    y = c.decompress(ps[0], d)
    assert np.count_nonzero(y) == k
    np.testing.assert_array_equal(y[y != 0], (d / k) * x[y != 0].astype(np.float32).astype(np.float64))
    # a shared-seed payload is not a plain rand-k payload
    with pytest.raises(PayloadError):
        compressors.make("randk", k=k).decompress(ps[0], d)
