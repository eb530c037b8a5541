"""EF's server decode of sparse messages (``Prepared.entries`` + ``sparse_base.decode_entries``):
two Elias-omega streams decoded in lockstep give what two single decodes give — indices, bit
counts, statuses — on valid, cut, over-long, out-of-range and arbitrary streams; and the decoded
entries are the old path's (read_indices + the values' check + numpy's product), bit for bit,
with the same error for each corrupted message, in message order."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcgc import compressors
from hpcgc.compressors.kernels import wire
from hpcgc.compressors.kernels.elias_gaps import DECODE_TABLE, decode_gaps, decode_pair, read_indices
from hpcgc.compressors.sparse_base import decode_entries
from hpcgc.errors import PayloadError


def _stream(spread, n, seed):
    from hpcgc.compressors.kernels import sparse
    g = np.random.default_rng(seed)
    gaps = np.maximum(1, g.geometric(1 / spread, n)).astype(np.int64)
    gaps[::97] = g.integers(1, 2**20, gaps[::97].size)     # long codes: the bit-by-bit path inside
    idx = np.cumsum(gaps) - 1
    out = np.zeros(sparse.elias_gap_bits(idx) // 8 + 9, dtype=np.uint8)
    nbytes = sparse.elias_omega_encode_gaps(idx, out, 3)
    return out, 3 + nbytes, idx


def _single(src, off, end, d, n):
    idx = np.full(n, -1, dtype=np.int64)
    return decode_gaps(src, off, end, d, idx, DECODE_TABLE), idx


@pytest.mark.parametrize("spreads", [(64, 64), (2, 600), (70000, 64), (64, 3)])
def test_pair_decoder_agrees_with_two_single_decodes(spreads):
    (a, a_end, ia), (b, b_end, ib) = (_stream(s, n, i) for i, (s, n) in enumerate(zip(spreads, (3000, 2500))))
    d = int(max(ia[-1], ib[-1])) + 1
    near = np.zeros(d)
    for da, db in [(0, 0), (-1, 0), (0, 1), (1, -1), (-40, 0)]:
        for dd in (d, int(ia[-1]), int(ib[-1])):
            ea, eb = a_end + da, b_end + db
            got_a, got_b = np.full(ia.size, -1), np.full(ib.size, -1)
            sa, sb = decode_pair(a, 3, ea, got_a, b, 3, eb, got_b, dd, DECODE_TABLE, near)
            want_sa, want_a = _single(a, 3, ea, dd, ia.size)
            want_sb, want_b = _single(b, 3, eb, dd, ib.size)
            assert (sa, sb) == (want_sa, want_sb)
            if sa >= 0:
                np.testing.assert_array_equal(got_a, want_a)
                np.testing.assert_array_equal(got_a, ia)
            if sb >= 0:
                np.testing.assert_array_equal(got_b, want_b)


@given(st.binary(min_size=0, max_size=60), st.binary(min_size=0, max_size=60), st.integers(0, 30),
       st.integers(0, 30), st.integers(1, 10**6))
@settings(max_examples=200, deadline=None)
def test_pair_decoder_on_garbage(x, y, na, nb, d):
    a = np.frombuffer(x + b"\xAA" * 8, dtype=np.uint8)
    b = np.frombuffer(y + b"\x55" * 8, dtype=np.uint8)
    got_a, got_b = np.full(na, -7, dtype=np.int64), np.full(nb, -7, dtype=np.int64)
    sa, sb = decode_pair(a, 0, len(x), got_a, b, 0, len(y), got_b, d, DECODE_TABLE, None)
    want_sa, want_a = _single(a, 0, len(x), d, na)
    want_sb, want_b = _single(b, 0, len(y), d, nb)
    assert (sa, sb) == (want_sa, want_sb)
    if sa >= 0:
        np.testing.assert_array_equal(got_a, want_a)
    if sb >= 0:
        np.testing.assert_array_equal(got_b, want_b)


def _old_entries(comp, payload, d, weight):
    """The entries as the code before 2026-11-27 (branch efserver) made them."""
    payload, voff, nnz, idx, _ = comp._read_sparse(payload, d)
    values = comp._read_values(payload, voff, nnz)
    return idx, np.multiply(values, weight * comp._scale(d, nnz), dtype=np.float64)


@pytest.mark.parametrize("spec,d", [("topk:k=1024", 2**16), ("topk:k=700,fp64=true", 2**16), ("topk:k=3", 10_000),
                                    ("randk:k=500", 4000), ("threshold:lam=0.5", 3000)])
@pytest.mark.parametrize("n", [1, 2, 3, 5])
def test_entries_have_the_bits_of_the_old_decode(spec, d, n):
    comp = compressors.make(spec)
    codec = comp.prepared(d)
    g = np.random.default_rng(n)
    payloads = [codec.encode(g.standard_normal(d) * 10.0 ** g.uniform(-3, 3, d), g) for _ in range(n)]
    weights = [0.5, -1.0 / 3.0, 2.0, 1e-3, 0.25][:n]
    parts = [codec.entries(p, w) for p, w in zip(payloads, weights)]
    total = sum(p.nnz for p in parts)
    idx, vals = np.full(total + 3, -1, dtype=np.int64), np.full(total + 3, np.nan)
    starts = decode_entries(parts, idx, vals, np.zeros(d))
    assert starts[-1] == total and np.isnan(vals[total:]).all()
    for q, (p, w) in enumerate(zip(payloads, weights)):
        want_i, want_v = _old_entries(comp, p, d, w)
        a, b = starts[q], starts[q + 1]
        np.testing.assert_array_equal(idx[a:b], want_i)
        assert np.array_equal(vals[a:b].view(np.uint64), want_v.view(np.uint64))
        one_i, one_v = parts[q].decode()
        np.testing.assert_array_equal(one_i, want_i)
        assert np.array_equal(one_v.view(np.uint64), want_v.view(np.uint64))


def _corrupt(payload, how, comp, d):
    p = payload.copy()
    ioff = comp.prepared(d).entries(p, 1.0).ioff
    if how == "value":
        p[wire.HEADER_BYTES:wire.HEADER_BYTES + 4] = np.frombuffer(np.float32(np.nan).tobytes(), dtype=np.uint8)
    elif how == "cut":
        p = p[:-1]
    elif how == "tail":
        p = np.concatenate([p, np.zeros(1, dtype=np.uint8)])
    elif how == "stream":
        p[ioff:] = 0xFF
    return p


@pytest.mark.parametrize("bad", [[0], [1], [0, 1], [2], [1, 2]])
@pytest.mark.parametrize("how", ["value", "cut", "tail", "stream"])
def test_a_corrupted_message_raises_the_old_error_in_message_order(bad, how):
    spec, d = "topk:k=1024", 2**16
    comp = compressors.make(spec)
    codec = comp.prepared(d)
    g = np.random.default_rng(7)
    payloads = [codec.encode(g.standard_normal(d), g) for _ in range(3)]
    assert all(codec.entries(p, 1.0).elias for p in payloads)
    for q in bad:
        payloads[q] = _corrupt(payloads[q], how, comp, d)
    with pytest.raises(PayloadError) as old:
        for p in payloads:
            _old_entries(comp, p, d, 1.0)
    with pytest.raises(PayloadError) as new:
        parts = [codec.entries(p, 1.0) for p in payloads]
        decode_entries(parts, np.empty(3 * 1024, dtype=np.int64), np.empty(3 * 1024), np.zeros(d))
    assert str(new.value) == str(old.value)


def test_read_indices_is_unchanged_for_fixed_width_streams():
    comp = compressors.make("topk:k=3")
    d = 10_000
    x = np.zeros(d)
    x[[5, 5000, 9000]] = 1.0                         # long gaps: fixed-width indices are shorter
    p = comp.compress(x, np.random.default_rng(0))
    e = comp.prepared(d).entries(p, 1.0)
    assert not e.elias
    np.testing.assert_array_equal(e.decode()[0], read_indices(p, e.ioff, 3, d, False, "topk")[0])
