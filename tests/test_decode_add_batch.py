"""Rank 0's decode-adds in one kernel call (``Prepared.add_many``, ``Algorithm.add_messages``; issue
31 target 3) against one ``add`` per message, bit for bit, for every format that declares the batch
form: qsgd (code=fixed), quant / terngrad, rand-k (both index encodings, and an Elias stream exactly
as long as the fixed one — a tie, sent fixed), top-k; k = d; no payload at all; an invalid payload
among valid ones (the same error, the same partial sum); weights the caller passes. The payloads sit in one buffer as the
transport's Gatherv delivers them (:class:`hpcgc.exchange.base.Messages`). No MPI needed: the
decode is local to rank 0 (tests/mpi/ runs it under mpiexec)."""
from __future__ import annotations

import numpy as np
import pytest

from hpcgc import algorithms, compressors
from hpcgc.compressors.kernels import wire
from hpcgc.errors import PayloadError
from hpcgc.exchange.base import Messages, messages

BATCHED = ["qsgd:s=2", "qsgd:s=5,bucket=16", "qsgd:s=3,fp64=true", "quant:p=inf,block=8", "quant:p=2",
           "quant:p=2,block=3,fp64=true", "terngrad", "randk:k=6", "randk:k=25,fp64=true", "topk:k=5"]


def _alg(comp, n, d, rng):
    w = rng.random(n) + 0.1
    return algorithms.make("dcgd" if comp.unbiased else "ef", [comp] * n, d=d, n_workers=n, weights=w / w.sum(),
                           problem_info={"L_max": 1.0, "L": 1.0, "mu": 0.1, "kind": "logreg"}, options={})


def _per_message(alg, pays, out):
    for i, p in enumerate(pays):
        alg.codecs[i].add(p, out, alg.weights[i])


def _bits(a):
    return np.asarray(a).view(np.uint64)


@pytest.mark.parametrize("spec", BATCHED)
@pytest.mark.parametrize("d", [30, 1000, 5_200])
def test_batch_equals_one_add_per_message(spec, d):
    rng = np.random.default_rng(d)
    c = compressors.make(spec)
    n = 9
    pays = [c.compress(rng.standard_normal(d) * 10.0 ** rng.integers(-3, 3), rng) for _ in range(n)]
    alg = _alg(c, n, d, rng)
    assert alg.codecs[0].add_many is not None
    start = rng.standard_normal(d)
    want, got = start.copy(), start.copy()
    _per_message(alg, pays, want)
    alg.add_messages(got, Messages.of(pays))
    np.testing.assert_array_equal(_bits(got), _bits(want))
    got2 = start.copy()                                     # a plain list takes the per-message path
    alg.add_messages(got2, [(i, p) for i, p in enumerate(pays)])
    np.testing.assert_array_equal(_bits(got2), _bits(want))


@pytest.mark.parametrize("spec", ["qsgd:s=2", "randk:k=6", "topk:k=5"])
def test_batch_with_the_callers_weights(spec):
    """``add_messages(out, messages, weights)``: the weights a caller passes (EF's and EF21's
    w_i·s_i, signSGD's unweighted votes) in place of the workers' — the bits of one ``add`` per
    message with those weights, batched or not."""
    rng = np.random.default_rng(5)
    c, n, d = compressors.make(spec), 7, 1000
    pays = [c.compress(rng.standard_normal(d), rng) for _ in range(n)]
    alg = _alg(c, n, d, rng)
    w = rng.random(n) * 3.0
    want, got, got2 = np.zeros(d), np.zeros(d), np.zeros(d)
    for i, p in enumerate(pays):
        alg.codecs[i].add(p, want, w[i])
    alg.add_messages(got, Messages.of(pays), w)
    alg.add_messages(got2, [(i, p) for i, p in enumerate(pays)], w)
    np.testing.assert_array_equal(_bits(got), _bits(want))
    np.testing.assert_array_equal(_bits(got2), _bits(want))


def test_randk_both_index_encodings_and_k_equal_d():
    rng = np.random.default_rng(1)
    for spec, d in (("randk:k=6", 30), ("randk:k=30", 30), ("randk:k=29", 30), ("topk:k=64", 64)):
        c = compressors.make(spec)
        pays = [c.compress(rng.standard_normal(d), rng) for _ in range(40)]
        flags = {int(p[wire.FLAGS_BYTE]) & wire.FLAG_ELIAS for p in pays}
        if spec == "randk:k=6":
            assert flags == {0, wire.FLAG_ELIAS}                # both encodings in one batch
        elif c.k >= d - 1:
            assert flags == {wire.FLAG_ELIAS}                   # gaps of 1: Elias is shorter
        alg = _alg(c, len(pays), d, rng)
        want, got = np.zeros(d), np.zeros(d)
        _per_message(alg, pays, want)
        alg.add_messages(got, Messages.of(pays))
        np.testing.assert_array_equal(_bits(got), _bits(want))


def _sparse_payload(c, idx, vals, d, elias: bool):
    """A rand-k payload with these indices and values, its index stream in the encoding asked for."""
    idx = np.asarray(idx, dtype=np.int64)
    width = wire.bits_for(d)
    if elias:
        from hpcgc.compressors.kernels.sparse import elias_omega_encode_gaps
        stream = np.zeros(8 * len(idx) + 8, dtype=np.uint8)
        nbytes = elias_omega_encode_gaps(idx, stream, 0)
        stream = stream[:nbytes]
    else:
        stream = np.zeros(wire.packed_bytes(len(idx), width), dtype=np.uint8)
        wire.pack_fixed_width(idx, width, stream, 0)
    flags = c._flags | (wire.FLAG_ELIAS if elias else 0)
    p = wire.new_payload(4 * len(idx) + stream.size, c.FORMAT_ID, flags, c._fingerprint, d)
    p[8:8 + 4 * len(idx)].view("<f4")[:] = vals
    p[8 + 4 * len(idx):] = stream
    return p


def test_tie_is_sent_fixed_and_decoded_alike():
    """d = 4 (2-bit indices), indices 0 and 2: gaps 1, 2 code in 1 + 3 bits = the fixed 4 bits."""
    c = compressors.make("randk:k=2")
    d, rng = 4, np.random.default_rng(2)
    from hpcgc.compressors.kernels.sparse import elias_gap_bits, encode_indices
    idx = np.array([0, 2])
    assert elias_gap_bits(idx) == 2 * wire.bits_for(d)
    assert encode_indices(idx, d)[0] is False                   # ties go to the fixed encoding
    fixed = _sparse_payload(c, idx, [1.5, -2.25], d, elias=False)
    other = c.compress(rng.standard_normal(d), rng)
    alg = _alg(c, 3, d, rng)
    pays = [fixed, other, fixed]
    want, got = np.zeros(d), np.zeros(d)
    _per_message(alg, pays, want)
    alg.add_messages(got, Messages.of(pays))
    np.testing.assert_array_equal(_bits(got), _bits(want))
    tie = _sparse_payload(c, idx, [1.5, -2.25], d, elias=True)  # Elias-flagged but not shorter: invalid
    _same_failure(alg, [fixed, tie, other], d)


def _same_failure(alg, pays, d):
    """The batch raises the per-message error of the first invalid payload, with the same partial sum."""
    want, got = np.zeros(d), np.zeros(d)
    with pytest.raises(PayloadError) as e1:
        _per_message(alg, pays, want)
    with pytest.raises(PayloadError) as e2:
        alg.add_messages(got, Messages.of(pays))
    assert str(e2.value) == str(e1.value)
    np.testing.assert_array_equal(_bits(got), _bits(want))


def _corruptions(spec, p):
    """Invalid variants of a valid payload p of ``spec``: truncated, wrong header, bad body."""
    short, head, body = p[:-1].copy(), p.copy(), p.copy()
    head[0] ^= 0xFF
    f = np.float64 if "fp64" in spec else np.float32
    first = np.frombuffer(f(np.nan if spec.startswith("qsgd") else np.inf).tobytes(), dtype=np.uint8)
    if spec.startswith(("quant", "terngrad")):
        body[-1] = 250                                          # a trit byte ≥ 243
    else:
        body[8:8 + first.size] = first                          # a NaN norm (qsgd), an Inf value (sparse)
    return [short, head, body]


@pytest.mark.parametrize("spec", BATCHED)
def test_invalid_payload_same_error_same_partial_sum(spec):
    d, rng = 50, np.random.default_rng(3)
    c = compressors.make(spec)
    pays = [c.compress(rng.standard_normal(d), rng) for _ in range(5)]
    alg = _alg(c, 5, d, rng)
    for bad in _corruptions(spec, pays[2]):
        _same_failure(alg, pays[:2] + [bad] + pays[3:], d)


@pytest.mark.parametrize("spec", ["qsgd:s=2", "quant:p=inf,block=8", "randk:k=6", "topk:k=3"])
def test_no_payload_adds_nothing(spec):
    c = compressors.make(spec)
    out = np.arange(30.0)
    batch = Messages.of([])
    assert c.prepared(30).add_many(*batch.batch, np.zeros(0), out) == 0
    np.testing.assert_array_equal(out, np.arange(30.0))


@pytest.mark.parametrize("spec", ["qsgd:s=2,code=elias", "natural-randk:k=5", "randk:k=6,shared_seed=true",
                                  "natural", "threshold:lam=0.5", "identity"])
def test_formats_without_the_batch_form_add_one_by_one(spec):
    d, rng = 40, np.random.default_rng(4)
    c = compressors.make(spec)
    assert c.prepared(d).add_many is None
    alg = algorithms.make("ef" if spec.startswith("threshold") else "dcgd", [c] * 4, d=d, n_workers=4,
                          weights=np.full(4, 0.25),
                          problem_info={"L_max": 1.0, "L": 1.0, "mu": 0.1, "kind": "logreg"}, options={})
    pays = [c.compress(rng.standard_normal(d), rng) for _ in range(4)]
    want, got = np.zeros(d), np.zeros(d)
    _per_message(alg, pays, want)
    alg.add_messages(got, Messages.of(pays))
    np.testing.assert_array_equal(_bits(got), _bits(want))


def test_per_worker_compressors_add_one_by_one():
    d, rng = 300, np.random.default_rng(5)
    comps = [compressors.make(f"randk:k={k}") for k in (3, 40, 1)]
    alg = algorithms.make("dcgd", comps, d=d, n_workers=3, weights=np.full(3, 1 / 3),
                          problem_info={"L_max": 1.0, "L": 1.0, "mu": 0.1, "kind": "logreg"}, options={})
    assert alg._add_many is None
    pays = [c.compress(rng.standard_normal(d), rng) for c in comps]
    want, got = np.zeros(d), np.zeros(d)
    _per_message(alg, pays, want)
    alg.add_messages(got, Messages.of(pays))
    np.testing.assert_array_equal(_bits(got), _bits(want))


@pytest.mark.parametrize("name", ["dcgd", "diana"])
@pytest.mark.parametrize("spec", ["qsgd:s=2", "quant:p=inf,block=8", "randk:k=6"])
def test_server_step_same_iterate(name, spec):
    """DIANA / DCGD's server step (the default experiment's) on the gathered buffer: the same x, h, v."""
    d, n, rng = 30, 8, np.random.default_rng(6)
    c = compressors.make(spec)
    alg = algorithms.make(name, [c] * n, d=d, n_workers=n, weights=np.full(n, 1 / n),
                          problem_info={"L_max": 2.0, "L": 1.0, "mu": 0.1, "kind": "logreg"}, options={})
    s1, s2 = alg.server_init(rng.standard_normal(d)), None
    s2 = alg.server_init(s1.x)
    for _ in range(5):
        pays = [c.compress(rng.standard_normal(d), rng) for _ in range(n)]
        buf = Messages.of(pays)
        x1 = alg.server_step(s1, [(i, p) for i, p in enumerate(pays)])
        x2 = alg.server_step(s2, buf)
        for a, b in ((x1, x2), (s1.h, s2.h), (s1.v, s2.v)):
            np.testing.assert_array_equal(_bits(a), _bits(b))


def test_messages_is_the_list_it_replaces():
    rng = np.random.default_rng(7)
    pays = [rng.integers(0, 255, size=s, dtype=np.uint8) for s in (3, 0, 7, 1)]
    m = Messages.of(pays)
    buf, starts, lengths = m.batch
    s, c = starts.tolist(), lengths.tolist()
    old = [(i, buf[s[i]:s[i] + c[i]]) for i in range(4)]                 # the list it replaces
    assert all(np.array_equal(a, b) for (_, a), (_, b) in zip(messages((buf, lengths, starts), range(4)), old))
    assert len(m) == 4 and [i for i, _ in m] == [i for i, _ in old] == list(range(4))
    assert all(np.array_equal(a, b) for (_, a), (_, b) in zip(m, old))
    assert np.array_equal(m[2][1], pays[2]) and [i for i, _ in m[1:3]] == [1, 2]
    assert starts.dtype == np.int64 and lengths.dtype == np.int32      # the transport's dtypes


@pytest.mark.parametrize("spec,d", [("randk:k=6", 30), ("randk:k=30", 30), ("randk:k=1", 1), ("randk:k=9,fp64=true", 1000),
                                    ("randk:k=5", 1 << 20), ("randk:k=3000", 70_001)])
def test_randk_one_kernel_encoder_same_bytes_and_own_add(spec, d):
    """The worker's rand-k encoder in one kernel call (randk_encode: bitset or hashed sampling, Elias
    or fixed indices) writes the bytes of the step-by-step path; the worker's own decode-add from
    the kept indices (Prepared.add_own) adds what the decoder would."""
    c = compressors.make(spec)
    codec = c.prepared(d)
    for s in range(4):
        x = np.random.default_rng(s).standard_normal(d) * 10.0 ** (s - 2)
        seed = np.uint64(0x9E3779B97F4A7C15 * (s + 1) % 2**64)
        p = c._compress(x, seed)
        assert p.tobytes() == c._compress_steps(x, seed).tobytes()
        rng1, rng2 = np.random.default_rng(s), np.random.default_rng(s)
        p = codec.encode(x, rng1)
        assert p.tobytes() == c._compress_steps(x, np.uint64(rng2.bit_generator.random_raw())).tobytes()
        start = np.random.default_rng(9).standard_normal(d)
        want, got = start.copy(), start.copy()
        codec.add(p, want, 0.37)
        codec.add_own(p, got, 0.37)
        np.testing.assert_array_equal(_bits(got), _bits(want))


def test_randk_one_kernel_encoder_refuses_what_the_steps_refuse():
    c = compressors.make("randk:k=30")
    for bad, what in ((np.nan, "non-finite"), (1e300, "value range")):
        x = np.ones(30)
        x[7] = bad
        with pytest.raises(ValueError) as e1:
            c._compress_steps(x, np.uint64(5))
        with pytest.raises(ValueError) as e2:
            c._compress(x, np.uint64(5))
        assert str(e1.value) == str(e2.value) and what in str(e2.value)
