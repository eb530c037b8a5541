"""The memory-traffic floor's byte counts (:mod:`hpcgc.traffic`) against a hand count on a small
problem: a 3 × 6 CSR shard with 5 nonzeros in 4 distinct columns (int32 indices)."""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from hpcgc import compressors
from hpcgc import traffic as tr


def shard():
    #   row 0: columns 0, 2      row 1: column 2      row 2: columns 3, 5
    A = sp.csr_matrix((np.ones(5), np.array([0, 2, 2, 3, 5], dtype=np.int32), np.array([0, 2, 3, 5], dtype=np.int32)),
                      shape=(3, 6))
    return tr.shard_counts(A)


def total(items):
    return sum(b for _, b in items)


def test_shard_counts():
    assert shard() == {"sparse": True, "m": 3, "z": 5, "u": 4, "I": 4}


def test_gradient_by_hand():
    d = 6
    # margins: 5 nonzeros x (8 value + 4 index) + 4 row pointers x 4 = 76; x at 4 columns 32; labels and
    # weights 3 x 16 = 48; scatter 60; gradient at 4 columns read-modify-write 64; l2: x 48; output 48
    dcgd = 76 + 32 + 48 + 60 + 64 + 48 + 48
    assert total(tr.grad_items("dcgd", d, shard(), 0.1)) == dcgd == 376
    assert total(tr.grad_items("dcgd", d, shard(), 0.0)) == dcgd - 48
    assert total(tr.grad_items("diana", d, shard(), 0.1)) == dcgd + 48          # the shift h read
    # EF: no message vector of its own; e read and written in place (96)
    assert total(tr.grad_items("ef", d, shard(), 0.1)) == dcgd - 48 + 96


def test_compress_and_server_by_hand():
    d, n = 6, 2
    qsgd, topk, ident = compressors.make("qsgd:s=2"), compressors.make("topk:k=2"), compressors.make("identity")
    # qsgd: two passes over the message (96), payload 40; DIANA's own decode: payload 40 + h r/w 96
    assert total(tr.compress_items("diana", qsgd, "gather", d, 40, own_decode=True)) == 96 + 40 + 40 + 96
    assert total(tr.compress_items("dcgd", ident, "allreduce", d, 24, own_decode=False)) == 48 + 24
    # EF + top-k: one pass (48), payload 30, own decode 30 + 2 entries r/w 32
    assert total(tr.compress_items("ef", topk, "allgather", d, 30, own_decode=True)) == 48 + 30 + 30 + 32
    # gather, DIANA: payloads 40 + 44; aggregate: first written 48, second read-modify-write 96; the step:
    # x r/w 96, aggregate read 48, h r/w 96
    assert total(tr.server_items("diana", qsgd, "gather", d, n, [40, 44], 0, alpha=0.5, beta=0.0)) == \
        84 + 48 + 96 + 96 + 48 + 96
    # allreduce, DCGD: the float32 sum read (24), x r/w 96
    assert total(tr.server_items("dcgd", ident, "allreduce", d, n, [], 24, alpha=0.0, beta=0.0)) == 24 + 96
    # allgather, EF + top-k: payloads 30 + 30, x at 2 entries per message r/w: 2 x 2 x 16
    assert total(tr.server_items("ef", topk, "allgather", d, n, [30, 30], 0, alpha=0.0, beta=0.0)) == 60 + 64
    # reduce-scatter's stage 2 on a segment of 3: qsgd's two passes over the sum (48), its payload 20;
    # with a second-stage state (DIANA's D, alpha2 != 0) D read and written (48); DCGD (alpha2 = 0) none
    assert total(tr.second_stage_items(qsgd, 3, 20, alpha2=0.5)) == 48 + 20 + 48
    assert total(tr.second_stage_items(qsgd, 3, 20, alpha2=0.0)) == 48 + 20
    assert total(tr.second_stage_items(topk, 3, 14, alpha2=1.0)) == 24 + 14 + 48


def test_rows_divide_by_the_bandwidth():
    items = {"grad": [("a", 100)], "compress": [("b", 50)], "server": [("c", 0)], "other": []}
    med = {"grad": 2e-6, "compress": 1e-6, "server": 1e-6, "other": 3e-6}
    rows = tr.traffic_rows(items, med, 1e8)                      # 100 B at 1e8 B/s: 1 µs
    assert rows[0] == ("grad", 100.0, 1e-6, 2e-6) and tr.ratio(2e-6, 1e-6) == 2.0
    assert np.isnan(tr.ratio(1e-6, rows[2][2])) and np.isnan(rows[3][2])     # no bytes; 'other': no floor
    assert tr.copy_bandwidth(nbytes=1 << 20, batches=3) > 0
