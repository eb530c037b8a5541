"""Rank 0's bit accounting over the workers at once (``Exchange.account``, issue 31 target 3)
against the per-message formulas (``alg.model_bits`` of each payload), on the transport's layout
of gathered payloads: one buffer, counts and displacements. No MPI needed: the accounting is
local to rank 0 once the Gatherv delivered the bytes (tests/mpi/ runs it under mpiexec)."""
from __future__ import annotations

import numpy as np
import pytest

from hpcgc import algorithms, compressors
from hpcgc.compressors.kernels import wire
from hpcgc.exchange.base import Exchange
from hpcgc.transport import LENGTH_BYTES


def _exchange(specs, d, alg_name="diana", seed=0):
    """An Exchange holding one iteration's gathered payloads of n workers (worker i: specs[i])."""
    comps = [compressors.make(s) for s in specs]
    n = len(comps)
    alg = algorithms.make(alg_name, comps, d=d, n_workers=n, weights=np.full(n, 1 / n),
                          problem_info={"L_max": 1.0, "L": 1.0, "mu": 0.1, "kind": "logreg"}, options={})
    rng = np.random.default_rng(seed)
    pays = [c.compress(rng.standard_normal(d), rng) for c in comps]
    counts = np.array([p.size for p in pays], dtype=np.int32)
    displs = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int32)
    ex = Exchange.__new__(Exchange)
    ex.alg, ex.worker_ranks = alg, list(range(n))
    ex._messages((np.concatenate(pays), counts, displs))
    return ex, alg, pays


@pytest.mark.parametrize("specs,d,alg_name", [
    (["randk:k=6"] * 32, 30, "diana"),                        # the default experiment: Elias and fixed mixed
    (["randk:k=6,shared_seed=true"] * 8, 30, "diana"),
    (["natural-randk:k=5"] * 8, 200, "diana"),
    (["randk:k=3", "randk:k=40", "randk:k=1"] * 3, 300, "dcgd"),  # per-worker k (an allocation)
    (["randk:k=7,fp64=true"] * 5, 1000, "dcgd"),
    (["topk:k=4"] * 6, 50, "ef"),
])
def test_sparse_layout_accounting_equals_per_message(specs, d, alg_name):
    ex, alg, pays = _exchange(specs, d, alg_name)
    assert ex._sparse_layouts() is not None                     # the vectorised path is taken
    flags = [int(p[wire.FLAGS_BYTE]) & wire.FLAG_ELIAS for p in pays]
    if specs[0] == "randk:k=6":
        assert 0 < sum(f != 0 for f in flags) < len(flags)      # both index encodings occur
    bm, bw = np.zeros(len(specs)), np.zeros(len(specs))
    for _ in range(3):
        ex.account(bm, bw)
    want = np.array([alg.model_bits(i, p) for i, p in enumerate(pays)], dtype=np.float64)
    np.testing.assert_array_equal(bm, 3 * want)
    np.testing.assert_array_equal(bw, 3 * 8.0 * (LENGTH_BYTES + np.array([p.size for p in pays])))


def test_formats_without_a_sparse_layout_count_per_message():
    ex, alg, pays = _exchange(["threshold:lam=0.5"] * 4, 40, "ef")
    assert ex._sparse_layouts() is None
    bm, bw = np.zeros(4), np.zeros(4)
    ex.account(bm, bw)
    np.testing.assert_array_equal(bm, [alg.model_bits(i, p) for i, p in enumerate(pays)])


@pytest.mark.parametrize("specs,d", [
    (["topk:k=64"] * 5, 4096),                                 # Elias-omega gaps: decoded in pairs and one alone
    (["randk:k=6"] * 32, 30),                                  # Elias and fixed-width indices mixed
    (["topk:k=3", "randk:k=40", "topk:k=90"], 300),
])
def test_ef_accounting_takes_the_server_steps_stream_bits(specs, d, monkeypatch):
    """After EF's sparse server step decoded the messages, the accounting takes each Elias stream's
    bits from that decode (``Algorithm.stream_bits``) instead of decoding again — the same values as
    the per-message formula; before any step, or after a step on other messages, it decodes itself."""
    ex, alg, pays = _exchange(specs, d, "ef")
    want = np.array([alg.model_bits(i, p) for i, p in enumerate(pays)], dtype=np.float64)
    assert alg.stream_bits(ex.msgs) is None                    # no step yet: the kernel path
    bm, bw = np.zeros(len(specs)), np.zeros(len(specs))
    ex.account(bm, bw)
    np.testing.assert_array_equal(bm, want)
    ss = alg.server_init(np.zeros(d))
    alg.codecs = [c.prepared(d) for c in alg.compressors]
    alg.server_step(ss, ex.msgs)
    bits = alg.stream_bits(ex.msgs)
    assert bits is not None and bits.shape == (len(specs),)
    flags = np.array([int(p[wire.FLAGS_BYTE]) & wire.FLAG_ELIAS for p in pays])
    assert np.all((bits >= 0) == (flags != 0))
    monkeypatch.setattr("hpcgc.exchange.base.sparse_layout_bits",
                        lambda *a: pytest.fail("decoded the streams again"))
    bm[:] = 0.0
    ex.account(bm, bw)
    np.testing.assert_array_equal(bm, want)
    other = Exchange.__new__(Exchange)                          # other messages: not the step's
    other.alg, other.worker_ranks = alg, list(range(len(specs)))
    other._messages((np.concatenate(pays), np.array([p.size for p in pays], dtype=np.int32),
                     np.concatenate([[0], np.cumsum([p.size for p in pays])[:-1]]).astype(np.int32)))
    assert alg.stream_bits(other.msgs) is None
